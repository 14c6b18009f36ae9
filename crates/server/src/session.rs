//! One task per connection: reads newline-delimited requests, runs each line
//! on a blocking thread (queries may hit RocksDB or the node) unless it only
//! asks for cached statuses, writes the response, and interleaves the
//! notifications the notifier queued for it.
//! Generic over `AsyncRead + AsyncWrite`, so a TLS stream plugs in as is.
//!
//! Lines of one session run one at a time, in order; the next line is not
//! read while one runs, which bounds a session's memory and CPU.

use crate::activity::{Activity, SessionActivity};
use crate::config::Limits;
use crate::framer::{Frame, LineFramer};
use crate::notifier::{Control, SessionHandle, SessionId};
use osprey_electrum::{jsonrpc, Dispatcher, Effect, RpcError, SessionState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::{sleep_until, timeout, Instant};

/// What every session shares.
pub(crate) struct SessionContext {
    pub dispatcher: Arc<Dispatcher>,
    pub limits: Limits,
    pub control: mpsc::Sender<Control>,
    pub processed: Arc<AtomicU64>,
    pub activity: Activity,
}

/// Why a session ended, for the log.
#[derive(Debug)]
enum End {
    ClientClosed,
    Shutdown,
    Idle,
    TooSlow,
    /// Idle the longest while the server was full: closed for a newcomer.
    Shed,
    NoCommonVersion,
    Io(std::io::Error),
    WriteTimeout,
    HandlerPanicked,
}

/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// Lines up to this size are parsed on the session's own task, to see
/// whether they can be answered there (see [`Dispatcher::answers_from_cache`]).
const INLINE_LINE_BYTES_MAX: usize = 64 * 1024;
/// Queued notifications written before the next flush.
const NOTIFICATIONS_PER_FLUSH: usize = 256;

struct Writer<W> {
    inner: BufWriter<W>,
    timeout: Duration,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    /// Writes one line; fails on I/O errors and on a client that stopped reading.
    async fn line(&mut self, line: &str) -> Result<(), End> {
        let write = async {
            self.inner.write_all(line.as_bytes()).await?;
            self.inner.write_all(b"\n").await
        };
        match timeout(self.timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(End::Io(e)),
            Err(_) => Err(End::WriteTimeout),
        }
    }

    async fn flush(&mut self) -> Result<(), End> {
        match timeout(self.timeout, self.inner.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(End::Io(e)),
            Err(_) => Err(End::WriteTimeout),
        }
    }
}

/// Serves one connection until it closes, idles out, or the server stops.
pub(crate) async fn run<S>(
    stream: S,
    id: SessionId,
    ctx: Arc<SessionContext>,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (tx, rx) = mpsc::channel(ctx.limits.outgoing_queue_max);
    let kick = Arc::new(Notify::new());
    let handle = SessionHandle {
        tx,
        kick: Arc::clone(&kick),
    };
    if ctx
        .control
        .send(Control::Register {
            session: id,
            handle,
        })
        .await
        .is_err()
    {
        return; // the notifier is gone: the server is stopping
    }
    tracing::debug!("session started");
    let activity = ctx.activity.register(id);
    let end = serve(stream, id, &ctx, rx, kick, &activity, shutdown).await;
    ctx.activity.unregister(id);
    match &end {
        End::ClientClosed | End::Shutdown => tracing::debug!(?end, "session ended"),
        End::Io(error) => tracing::info!(%error, "session ended: i/o error"),
        _ => tracing::info!(?end, "session ended"),
    }
    // Ignored error: the notifier is gone only when the server stops.
    let _ = ctx.control.send(Control::Unregister { session: id }).await;
}

async fn serve<S>(
    stream: S,
    id: SessionId,
    ctx: &SessionContext,
    mut notifications: mpsc::Receiver<Arc<str>>,
    kick: Arc<Notify>,
    activity: &SessionActivity,
    mut shutdown: watch::Receiver<bool>,
) -> End
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let limits = &ctx.limits;
    let (mut reader, writer) = tokio::io::split(stream);
    let mut writer = Writer {
        inner: BufWriter::new(writer),
        timeout: Duration::from_secs(limits.write_timeout_secs),
    };
    let mut framer = LineFramer::new(limits.line_bytes_max);
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let idle = Duration::from_secs(limits.idle_timeout_secs);
    let mut idle_deadline = Instant::now() + idle;
    let mut state = Some(SessionState::new());
    let mut running: Option<
        tokio::task::JoinHandle<(SessionState, osprey_electrum::Outcome, u64)>,
    > = None;
    let mut eof = false;
    loop {
        if running.is_none() {
            match framer.next_frame() {
                Some(Frame::Line(line)) => {
                    idle_deadline = Instant::now() + idle;
                    activity.touch();
                    let Some(mut session_state) = state.take() else {
                        return End::HandlerPanicked;
                    };
                    let dispatcher = Arc::clone(&ctx.dispatcher);
                    // Read before any status is computed (see `notifier`).
                    let seen = ctx.processed.load(Ordering::Acquire);
                    // A small line that only asks for cached statuses (a
                    // wallet reconnecting) is answered right here: handing
                    // it to a blocking thread would cost more than the work.
                    let incoming =
                        (line.len() <= INLINE_LINE_BYTES_MAX).then(|| dispatcher.parse(&line));
                    match incoming {
                        Some(incoming)
                            if dispatcher.answers_from_cache(&session_state, &incoming) =>
                        {
                            let outcome = dispatcher.handle_incoming(&mut session_state, incoming);
                            state = Some(session_state);
                            if let Err(end) = deliver(ctx, id, &mut writer, outcome, seen).await {
                                return end;
                            }
                        }
                        incoming => {
                            running = Some(tokio::task::spawn_blocking(move || {
                                let outcome = match incoming {
                                    Some(incoming) => {
                                        dispatcher.handle_incoming(&mut session_state, incoming)
                                    }
                                    None => dispatcher.handle_line(&mut session_state, &line),
                                };
                                (session_state, outcome, seen)
                            }));
                        }
                    }
                    continue;
                }
                Some(Frame::TooLong) => {
                    idle_deadline = Instant::now() + idle;
                    activity.touch();
                    let error = RpcError::LimitExceeded(format!(
                        "request line exceeds {} bytes",
                        limits.line_bytes_max
                    ));
                    let line = jsonrpc::response(serde_json::Value::Null, Err(error)).to_string();
                    if let Err(end) = write_and_flush(&mut writer, &line).await {
                        return end;
                    }
                    continue;
                }
                None if eof => return End::ClientClosed,
                None => {}
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return End::Shutdown,
            _ = kick.notified() => return End::TooSlow,
            _ = activity.shed.notified() => return End::Shed,
            joined = async { running.as_mut().expect("guarded by is_some").await }, if running.is_some() => {
                running = None;
                let Ok((session_state, outcome, seen)) = joined else {
                    tracing::error!("request handler panicked");
                    return End::HandlerPanicked;
                };
                state = Some(session_state);
                if let Err(end) = deliver(ctx, id, &mut writer, outcome, seen).await {
                    return end;
                }
            }
            Some(line) = notifications.recv() => {
                if let Err(end) = writer.line(&line).await {
                    return end;
                }
                // Drain what is already queued, then flush once.
                for _ in 0..NOTIFICATIONS_PER_FLUSH {
                    let Ok(line) = notifications.try_recv() else { break };
                    if let Err(end) = writer.line(&line).await {
                        return end;
                    }
                }
                if let Err(end) = writer.flush().await {
                    return end;
                }
            }
            read = reader.read(&mut buf), if running.is_none() && !eof => match read {
                Ok(0) => eof = true,
                Ok(n) => framer.push(&buf[..n]),
                Err(e) => return End::Io(e),
            },
            _ = sleep_until(idle_deadline), if running.is_none() => return End::Idle,
        }
    }
}

/// Hands a line's effects to the notifier (in order; consecutive
/// subscriptions as one message) and writes its response.
async fn deliver<W: AsyncWrite + Unpin>(
    ctx: &SessionContext,
    id: SessionId,
    writer: &mut Writer<W>,
    outcome: osprey_electrum::Outcome,
    seen: u64,
) -> Result<(), End> {
    let mut subscriptions = Vec::new();
    let mut controls = Vec::new();
    for effect in outcome.effects {
        let control = match effect {
            Effect::Subscribed { key, status } => {
                subscriptions.push((key, status));
                continue;
            }
            Effect::Unsubscribed { key } => Control::Unsubscribe { session: id, key },
            Effect::HeadersSubscribed => Control::SubscribeHeaders { session: id, seen },
            Effect::OutpointSubscribed { outpoint, answer } => Control::SubscribeOutpoint {
                session: id,
                outpoint,
                answer,
                seen,
            },
            Effect::OutpointUnsubscribed { outpoint } => Control::UnsubscribeOutpoint {
                session: id,
                outpoint,
            },
        };
        if !subscriptions.is_empty() {
            let subscriptions = std::mem::take(&mut subscriptions);
            controls.push(Control::Subscribe {
                session: id,
                subscriptions,
                seen,
            });
        }
        controls.push(control);
    }
    if !subscriptions.is_empty() {
        controls.push(Control::Subscribe {
            session: id,
            subscriptions,
            seen,
        });
    }
    // The reply first: it must not wait on the notifier, which may be busy
    // recomputing statuses after a block. A notification for a new
    // subscription can only be queued once the notifier has it, so it
    // still follows the reply, and `seen` covers changes in between.
    if let Some(response) = outcome.response {
        write_and_flush(writer, &response).await?;
    }
    for control in controls {
        if ctx.control.send(control).await.is_err() {
            return Err(End::Shutdown);
        }
    }
    if outcome.close {
        return Err(End::NoCommonVersion);
    }
    Ok(())
}

async fn write_and_flush<W: AsyncWrite + Unpin>(
    writer: &mut Writer<W>,
    line: &str,
) -> Result<(), End> {
    writer.line(line).await?;
    writer.flush().await
}
