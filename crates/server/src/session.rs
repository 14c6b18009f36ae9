//! One task per connection: reads newline-delimited requests, runs each line
//! on a blocking thread (queries may hit RocksDB or the node) unless it only
//! asks for cached statuses, writes the response, and interleaves the
//! notifications the notifier queued for it.
//! One implementation for every listener: the [`Transport`] frames
//! requests (lines, or WebSocket messages) and the session never sees how.
//!
//! Lines of one session run one at a time, in order; the next line is not
//! read while one runs, which bounds a session's memory and CPU. Across
//! sessions, a line waits for a handler slot, behind lines of sessions
//! that cost the server less lately (a line too long to parse here, among
//! the greedy ones), and its slot says whether a batch may be spread over
//! more threads (`fair`). What all sessions hold together (incomplete
//! lines, lines waiting for a slot or running, replies and notifications
//! their client has not taken yet, subscriptions) is charged to one byte
//! budget, `Limits::client_memory_bytes_max`.

use crate::activity::{Activity, SessionActivity};
use crate::config::Limits;
use crate::fair::{Scheduler, HARD_COST_MICROS};
use crate::framer::Frame;
use crate::notifier::{Control, SessionHandle};
use crate::queued::{Queued, SessionId};
use crate::silent::{HubContext, HubInput, SpGenerations, SpHub};
use crate::transport::{ListenerKind, Transport};
use osprey_core::{ByteBudget, Charge};
use osprey_electrum::{jsonrpc, Dispatcher, Effect, RpcError, SessionState};
use osprey_metrics::Metrics;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::{sleep_until, timeout, Instant};

/// What every session shares.
pub(crate) struct SessionContext {
    pub dispatcher: Arc<Dispatcher>,
    pub limits: Limits,
    pub control: mpsc::Sender<Control>,
    pub processed: Arc<AtomicU64>,
    pub activity: Arc<Activity>,
    /// What sessions' incomplete lines, unread replies and subscriptions
    /// may hold in total (`Limits::client_memory_bytes_max`).
    pub client_memory: Arc<ByteBudget>,
    pub metrics: Arc<Metrics>,
    /// Handler slots; a line waits for one behind cheaper sessions' lines.
    pub scheduler: Arc<Scheduler>,
    /// What silent-payments hubs need (`silent`).
    pub silent: Arc<HubContext>,
}

/// A session's silent-payments hub, started at its first subscription,
/// what it writes to, and which of its notifications are still wanted.
struct HubSlot {
    hub: Option<SpHub>,
    queue: mpsc::Sender<Queued>,
    kick: Arc<Notify>,
    generations: SpGenerations,
}

/// A line's handling: the session's state back, the outcome, the
/// notifier's progress read when the line arrived, and how long the line
/// held a handler slot. `None` if the handler panicked.
type Handled = Option<(SessionState, osprey_electrum::Outcome, u64, Duration)>;

/// Why a session ended, for the log.
#[derive(Debug)]
enum End {
    ClientClosed,
    Shutdown,
    Idle,
    TooSlow,
    /// Idle the longest while the server was full: closed for a newcomer.
    Shed,
    /// Closed by an operator (`osprey admin kick`).
    Kicked,
    NoCommonVersion,
    Io(std::io::Error),
    WriteTimeout,
    HandlerPanicked,
    /// An incomplete request could not grow: the client memory budget is spent.
    OverBudget,
    /// Its cost passed `fair::HARD_COST_MICROS`.
    Greedy,
}

/// Lines up to this size are parsed on the session's own task, to see
/// whether they can be answered there (see [`Dispatcher::answer_inline`]);
/// longer ones are heavy, and wait for one of the greedy slots (`fair`).
const INLINE_LINE_BYTES_MAX: usize = 64 * 1024;
/// Queued notifications written before the next flush.
const NOTIFICATIONS_PER_FLUSH: usize = 256;
/// How long the polite end of a connection (TLS close_notify, WebSocket
/// close frame) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long telling a shed or kicked session why may take: a newcomer
/// waits 2 s for a shed session's place (`SHED_WAIT`), which the goodbye,
/// then the close ([`CLOSE_TIMEOUT`]), must leave in time, even when the
/// client does not read.
const SAY_WHY_TIMEOUT: Duration = Duration::from_millis(500);
/// Incomplete requests are charged to the memory budget in steps of this
/// much, so that a line arriving in 16 KiB reads costs few budget updates.
const REQUEST_CHARGE_STEP: usize = 64 * 1024;

/// The transport with the write timeout applied.
struct Writer<'a> {
    transport: &'a mut Transport,
    timeout: Duration,
    sent_bytes: osprey_metrics::IntCounter,
    /// This session's own count, for the admin interface.
    session_sent_bytes: &'a AtomicU64,
}

impl Writer<'_> {
    /// Writes one line; fails on I/O errors and on a client that stopped reading.
    async fn line(&mut self, line: &str) -> Result<(), End> {
        match timeout(self.timeout, self.transport.write_line(line)).await {
            Ok(Ok(())) => {
                let bytes = line.len() as u64 + 1;
                self.sent_bytes.inc_by(bytes);
                self.session_sent_bytes.fetch_add(bytes, Ordering::Relaxed);
                Ok(())
            }
            Ok(Err(e)) => Err(End::Io(e)),
            Err(_) => Err(End::WriteTimeout),
        }
    }

    async fn flush(&mut self) -> Result<(), End> {
        match timeout(self.timeout, self.transport.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(End::Io(e)),
            Err(_) => Err(End::WriteTimeout),
        }
    }
}

/// Serves one connection from `source` until it closes, idles out, or the
/// server stops.
pub(crate) async fn run(
    mut transport: Transport,
    peer: SocketAddr,
    listener: ListenerKind,
    id: SessionId,
    ctx: Arc<SessionContext>,
    shutdown: watch::Receiver<bool>,
) {
    let (tx, rx) = mpsc::channel(ctx.limits.outgoing_queue_max);
    let kick = Arc::new(Notify::new());
    let hub = HubSlot {
        hub: None,
        queue: tx.clone(),
        kick: Arc::clone(&kick),
        generations: SpGenerations::default(),
    };
    let handle = SessionHandle {
        tx,
        kick: Arc::clone(&kick),
        client_memory: Arc::clone(&ctx.client_memory),
        hub: None,
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
    let activity = ctx.activity.register(id, peer, listener);
    let gauges = &ctx.metrics.sessions;
    gauges.accepted.inc();
    gauges.connected.inc();
    let state = ctx.dispatcher.new_session(peer.ip());
    let end = serve(
        &mut transport,
        state,
        id,
        &ctx,
        rx,
        kick,
        hub,
        &activity,
        shutdown,
    )
    .await;
    ctx.activity.unregister(id);
    gauges.connected.dec();
    let _ = timeout(CLOSE_TIMEOUT, transport.close()).await;
    match &end {
        End::ClientClosed | End::Shutdown => tracing::debug!(?end, "session ended"),
        End::Io(error) => tracing::info!(%error, "session ended: i/o error"),
        _ => tracing::info!(?end, "session ended"),
    }
    // Ignored error: the notifier is gone only when the server stops.
    let _ = ctx.control.send(Control::Unregister { session: id }).await;
}

#[allow(clippy::too_many_arguments)] // one session's parts, each used once
async fn serve(
    transport: &mut Transport,
    state: SessionState,
    id: SessionId,
    ctx: &SessionContext,
    mut notifications: mpsc::Receiver<Queued>,
    kick: Arc<Notify>,
    // Dropped when the session ends, however it ends: with it go the
    // subscriptions' scans and keys.
    mut hub: HubSlot,
    activity: &SessionActivity,
    mut shutdown: watch::Receiver<bool>,
) -> End {
    let limits = &ctx.limits;
    let mut writer = Writer {
        transport,
        timeout: Duration::from_secs(limits.write_timeout_secs),
        sent_bytes: ctx.metrics.sessions.sent_bytes.clone(),
        session_sent_bytes: &activity.sent_bytes,
    };
    let received_bytes = &ctx.metrics.sessions.received_bytes;
    let idle = Duration::from_secs(limits.idle_timeout_secs);
    let mut idle_deadline = Instant::now() + idle;
    let mut state = Some(state);
    // What the transport holds of requests not yet taken, charged to the
    // server-wide budget.
    let mut request_charge = Charge::new(&ctx.client_memory);
    let mut running: Option<tokio::task::JoinHandle<Handled>> = None;
    // What the running line's answer was expected to send, charged already.
    let mut expected = 0;
    let mut eof = false;
    loop {
        if running.is_none() {
            let frame = writer.transport.next_frame();
            // A line taken stays charged until it is answered: queued
            // behind other sessions' lines for a slot, hundreds of them
            // held hundreds of megabytes that no budget counted.
            let line_charge = match &frame {
                Some(Frame::Line(line)) => request_charge.split_off(line.len()),
                _ => Charge::new(&ctx.client_memory),
            };
            request_charge.resize(charge_for(writer.transport.buffered()));
            match frame {
                Some(Frame::Line(line)) => {
                    // Requests as received, newline included (a WebSocket
                    // message counts as if it had one).
                    received_bytes.inc_by(line.len() as u64 + 1);
                    activity
                        .received_bytes
                        .fetch_add(line.len() as u64 + 1, Ordering::Relaxed);
                    idle_deadline = Instant::now() + idle;
                    activity.touch();
                    let Some(mut session_state) = state.take() else {
                        return End::HandlerPanicked;
                    };
                    let dispatcher = Arc::clone(&ctx.dispatcher);
                    // Read before any status is computed (see `notifier`).
                    let seen = ctx.processed.load(Ordering::Acquire);
                    // A small line answered from memory (a wallet
                    // reconnecting, a ping, a newcomer's version) is
                    // answered right here, without a handler slot: handing
                    // it to a blocking thread would cost more than the work,
                    // and it would wait behind heavy lines for a slot.
                    // What its answer is expected to send is charged to
                    // the session's cost before any work is done (see
                    // `fair`), and the rest once it is known.
                    let incoming = match (line.len() <= INLINE_LINE_BYTES_MAX)
                        .then(|| dispatcher.parse(&line))
                    {
                        Some(incoming) => {
                            let estimate = dispatcher.reply_estimate(&session_state, &incoming);
                            expected = estimate.expected;
                            activity.charge(Duration::ZERO, expected);
                            match dispatcher.answer_inline(&mut session_state, incoming, &estimate)
                            {
                                Ok(outcome) => {
                                    activity.describe(&session_state);
                                    state = Some(session_state);
                                    activity.charge(
                                        Duration::ZERO,
                                        reply_len(&outcome).saturating_sub(expected),
                                    );
                                    if let Err(end) =
                                        deliver(ctx, id, &mut writer, outcome, seen, &mut hub).await
                                    {
                                        return end;
                                    }
                                    if let Err(end) = close_if_greedy(activity, &mut writer).await {
                                        return end;
                                    }
                                    continue;
                                }
                                Err(incoming) => Some(incoming),
                            }
                        }
                        None => {
                            expected = 0;
                            None
                        }
                    };
                    let scheduler = Arc::clone(&ctx.scheduler);
                    let priority = activity.cost();
                    let heavy = line.len() > INLINE_LINE_BYTES_MAX;
                    running = Some(tokio::spawn(async move {
                        let slot = scheduler.acquire(priority, heavy).await;
                        let batch_threads = slot.batch_threads();
                        let started = std::time::Instant::now();
                        let handled = tokio::task::spawn_blocking(move || {
                            let threads = batch_threads.as_deref();
                            let outcome = match incoming {
                                Some(incoming) => dispatcher.handle_incoming(
                                    &mut session_state,
                                    incoming,
                                    threads,
                                ),
                                None => dispatcher.handle_line(&mut session_state, &line, threads),
                            };
                            (session_state, outcome)
                        })
                        .await;
                        drop((slot, line_charge));
                        let (session_state, outcome) = handled.ok()?;
                        Some((session_state, outcome, seen, started.elapsed()))
                    }));
                    continue;
                }
                Some(Frame::TooLong) => {
                    idle_deadline = Instant::now() + idle;
                    activity.touch();
                    let error = RpcError::LimitExceeded(format!(
                        "request exceeds {} bytes",
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
            _ = activity.shed.notified() => {
                let (end, error) = if activity.kicked() {
                    (End::Kicked, RpcError::BadRequest("closed by the server's operator".into()))
                } else {
                    (End::Shed, RpcError::ServerBusy(
                        "the server is full: this session, idle the longest, is closed to \
                         make room for a new one"
                            .into(),
                    ))
                };
                say_why(&mut writer, error).await;
                return end;
            }
            joined = async { running.as_mut().expect("guarded by is_some").await }, if running.is_some() => {
                running = None;
                let Ok(Some((session_state, outcome, seen, held))) = joined else {
                    tracing::error!("request handler panicked");
                    return End::HandlerPanicked;
                };
                activity.charge(held, reply_len(&outcome).saturating_sub(expected));
                activity.describe(&session_state);
                state = Some(session_state);
                if let Err(end) = deliver(ctx, id, &mut writer, outcome, seen, &mut hub).await {
                    return end;
                }
                if let Err(end) = close_if_greedy(activity, &mut writer).await {
                    return end;
                }
            }
            Some(queued) = notifications.recv() => {
                if hub.generations.admit(&queued, &ctx.metrics.silent_payments.matches) {
                    if let Err(end) = writer.line(&queued.line).await {
                        return end;
                    }
                }
                // Drain what is already queued, then flush once.
                for _ in 0..NOTIFICATIONS_PER_FLUSH {
                    let Ok(queued) = notifications.try_recv() else { break };
                    if !hub.generations.admit(&queued, &ctx.metrics.silent_payments.matches) {
                        continue;
                    }
                    if let Err(end) = writer.line(&queued.line).await {
                        return end;
                    }
                }
                if let Err(end) = writer.flush().await {
                    return end;
                }
            }
            received = writer.transport.receive(), if running.is_none() && !eof => match received {
                Ok(more) => {
                    eof = !more;
                    if !request_charge.resize(charge_for(writer.transport.buffered())) {
                        let error = RpcError::ServerBusy(
                            "the server's memory for incomplete requests is spent; try again later"
                                .into(),
                        );
                        let line = jsonrpc::response(serde_json::Value::Null, Err(error)).to_string();
                        // Best effort: the session ends either way.
                        let _ = write_and_flush(&mut writer, &line).await;
                        return End::OverBudget;
                    }
                    if writer.transport.buffered() > INLINE_LINE_BYTES_MAX {
                        // A heavy line is coming in: let the other sessions
                        // on this worker run after each read, rather than
                        // after the whole line (tokio's budget allows a
                        // task 128 reads, 2 MiB, per turn). Six hundred
                        // sessions sending 581 KiB each kept a wallet's
                        // small request waiting for its turn up to 0.3 s.
                        tokio::task::yield_now().await;
                    }
                }
                Err(e) => return End::Io(e),
            },
            _ = sleep_until(idle_deadline), if running.is_none() => return End::Idle,
        }
    }
}

/// Hands a line's effects to the notifier (in order; consecutive
/// subscriptions as one message) and to the silent-payments hub (started
/// at the first subscription), and writes its response.
async fn deliver(
    ctx: &SessionContext,
    id: SessionId,
    writer: &mut Writer<'_>,
    outcome: osprey_electrum::Outcome,
    seen: u64,
    hub: &mut HubSlot,
) -> Result<(), End> {
    let mut subscriptions = Vec::new();
    let mut controls = Vec::new();
    let mut hub_inputs = Vec::new();
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
            Effect::SilentPaymentsSubscribed(subscription) => {
                if hub.hub.is_none() {
                    let started = SpHub::start(
                        Arc::clone(&ctx.silent),
                        hub.queue.clone(),
                        Arc::clone(&hub.kick),
                        ctx.limits.outgoing_queue_max,
                    );
                    controls.push(Control::AttachHub {
                        session: id,
                        hub: started.input(),
                    });
                    hub.hub = Some(started);
                }
                // Before the response is written: from then on, lines of an
                // earlier subscription to the address are not.
                let generation = hub.generations.subscribed(&subscription.address);
                hub_inputs.push(HubInput::Subscribe {
                    subscription,
                    generation,
                });
                continue;
            }
            Effect::SilentPaymentsUnsubscribed { address } => {
                hub.generations.unsubscribed(&address);
                hub_inputs.push(HubInput::Unsubscribe(address));
                continue;
            }
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
        // Held until the client has taken it (or the write times out).
        let mut reply_charge = Charge::new(&ctx.client_memory);
        if reply_charge.resize(response.len()) {
            write_and_flush(writer, &response).await?;
        } else {
            let error = RpcError::ServerBusy(format!(
                "a response of {} bytes does not fit in the server's memory for unread \
                 responses now; try again later",
                response.len()
            ));
            drop(reply_charge);
            // Subscriptions this line made stay registered (the session
            // state has them): subscribing again answers at once.
            write_and_flush(writer, &refusal_of(&response, &error)).await?;
        }
    }
    for control in controls {
        if ctx.control.send(control).await.is_err() {
            return Err(End::Shutdown);
        }
    }
    // After the response: a hub's notifications follow it. A hub that
    // cannot take these is one whose session does not keep up.
    if let Some(started) = &hub.hub {
        for input in hub_inputs {
            if !started.send(input) {
                return Err(End::TooSlow);
            }
        }
    }
    if outcome.close {
        return Err(End::NoCommonVersion);
    }
    Ok(())
}

/// Past `fair::HARD_COST_MICROS`, tells the client why and ends the
/// session.
async fn close_if_greedy(activity: &SessionActivity, writer: &mut Writer<'_>) -> Result<(), End> {
    if activity.cost() <= HARD_COST_MICROS {
        return Ok(());
    }
    let error = RpcError::ServerBusy(
        "this session used more of the server than one may lately; closing it".into(),
    );
    let line = jsonrpc::response(serde_json::Value::Null, Err(error)).to_string();
    // Best effort: the session ends either way.
    let _ = write_and_flush(writer, &line).await;
    Err(End::Greedy)
}

/// Tells a client why its session is closed, in one error line, unless
/// that takes longer than [`SAY_WHY_TIMEOUT`].
async fn say_why(writer: &mut Writer<'_>, error: RpcError) {
    let line = jsonrpc::response(serde_json::Value::Null, Err(error)).to_string();
    // Best effort: the session ends either way.
    let _ = timeout(SAY_WHY_TIMEOUT, write_and_flush(writer, &line)).await;
}

/// The length of a line's response, for its session's cost.
fn reply_len(outcome: &osprey_electrum::Outcome) -> usize {
    outcome.response.as_ref().map_or(0, String::len)
}

/// The budget charge for `bytes` of incomplete requests: whole steps, none
/// for none.
fn charge_for(bytes: usize) -> usize {
    bytes.div_ceil(REQUEST_CHARGE_STEP) * REQUEST_CHARGE_STEP
}

/// `response` (a line this server built) with every answer refused.
fn refusal_of(response: &str, error: &RpcError) -> String {
    match serde_json::from_str(response) {
        Ok(answer) => jsonrpc::refusal(&answer, error).to_string(),
        Err(_) => jsonrpc::response(serde_json::Value::Null, Err(error.clone())).to_string(),
    }
}

async fn write_and_flush(writer: &mut Writer<'_>, line: &str) -> Result<(), End> {
    writer.line(line).await?;
    writer.flush().await
}
