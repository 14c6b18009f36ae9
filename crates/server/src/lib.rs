//! The Electrum network server: a TCP listener, one task per session, the
//! limits, the notifier that pushes subscription updates, and graceful
//! shutdown. Speaks the protocol through `osprey-electrum` (which owns every
//! JSON shape and error code); asks the chain only through its `Backend`.
//! The notifier consumes `osprey_query::Query::changes`, a
//! `tokio::sync::broadcast` of `Arc<osprey_query::Change>` published
//! whenever a block is connected or disconnected or the mempool changes
//! (tests give `Server::bind_with` a channel of their own instead).
//!
//! Layout: `config` (ServerConfig, Limits), `framer` (newline framing with a
//! length cap), `session` (one connection, generic over AsyncRead +
//! AsyncWrite so TLS can plug in), `notifier` (the single owner of the
//! subscription registry).

mod activity;
mod config;
// The fuzz targets (`fuzz/`, feature `fuzzing`) drive the framer directly,
// as a session does; it is no part of the crate's API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod framer;
#[cfg(not(feature = "fuzzing"))]
mod framer;
mod notifier;
mod session;

pub use config::{ConfigError, Limits, ServerConfig};

use activity::Activity;
use anyhow::Context;
use notifier::Notifier;
use osprey_electrum::{Backend, DispatchConfig, Dispatcher, RpcError, ServerInfo};
use osprey_query::{Change, Query};
use session::SessionContext;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

/// Largest 1.7-draft `server.ping` padding sent back, in characters.
const PONG_LEN_MAX: usize = 65_536;
/// Subscription messages in flight from sessions to the notifier.
const CONTROL_QUEUE_MAX: usize = 10_000;
/// How long sessions get to finish after shutdown before being cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a refused connection gets to read its "server busy" line.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a newcomer waits for the idle session it displaces to end.
const SHED_WAIT: Duration = Duration::from_secs(2);

/// Serves Electrum clients on `config.electrum_rpc_addr` until `shutdown`
/// completes, then closes every session.
///
/// # Errors
/// Invalid limits, or the address cannot be bound.
pub async fn serve(
    config: ServerConfig,
    query: Arc<Query>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    Server::bind(config, query).await?.run(shutdown).await
}

/// A bound server, not yet accepting (so tests can bind port 0 and learn
/// the address first).
pub struct Server {
    listener: TcpListener,
    config: ServerConfig,
    backend: Arc<dyn Backend>,
    changes: broadcast::Receiver<Arc<Change>>,
}

impl Server {
    /// Binds the listening socket and subscribes to the query's changes
    /// (before serving, so no change is missed).
    ///
    /// # Errors
    /// Invalid limits, or the address cannot be bound.
    pub async fn bind(config: ServerConfig, query: Arc<Query>) -> anyhow::Result<Self> {
        let changes = query.changes();
        Self::bind_with(config, query, changes).await
    }

    /// As `bind`, with the backend and its change feed given apart (tests
    /// pass the in-memory fake and a channel they publish on).
    ///
    /// # Errors
    /// Invalid limits, or the address cannot be bound.
    pub async fn bind_with(
        config: ServerConfig,
        backend: Arc<dyn Backend>,
        changes: broadcast::Receiver<Arc<Change>>,
    ) -> anyhow::Result<Self> {
        config.limits.validate().context("invalid server limits")?;
        let listener = TcpListener::bind(config.electrum_rpc_addr)
            .await
            .with_context(|| format!("binding the Electrum port {}", config.electrum_rpc_addr))?;
        Ok(Server {
            listener,
            config,
            backend,
            changes,
        })
    }

    /// The address actually bound (useful with port 0).
    ///
    /// # Errors
    /// If the socket has no local address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts and serves sessions until `shutdown` completes, then tells
    /// every session to stop and waits for them (for a grace period).
    ///
    /// # Errors
    /// None at present; the signature leaves room for fatal listener errors.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server {
            listener,
            config,
            backend,
            changes,
        } = self;
        let limits = config.limits.clone();
        let dispatcher = Arc::new(Dispatcher::new(
            Arc::clone(&backend),
            DispatchConfig {
                info: ServerInfo {
                    server_version: config.server_version.clone(),
                    banner: config.banner.clone(),
                    donation_address: config.donation_address.clone(),
                    genesis_hash: config.network.genesis_hash(),
                },
                headers_per_call_max: limits.headers_per_call_max,
                batch_requests_max: limits.batch_requests_max,
                reply_bytes_max: limits.reply_bytes_max,
                subscriptions_per_session_max: limits.subscriptions_per_session_max,
                pong_len_max: PONG_LEN_MAX,
            },
        ));
        let (stop_tx, stop_rx) = watch::channel(false);
        let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE_MAX);
        let processed = Arc::new(AtomicU64::new(0));
        let notifier = Notifier::new(backend, changes, control_rx, Arc::clone(&processed));
        let notifier = tokio::spawn(
            notifier
                .run(stop_rx.clone())
                .instrument(tracing::info_span!("notifier")),
        );
        let ctx = Arc::new(SessionContext {
            dispatcher,
            limits: limits.clone(),
            control: control_tx,
            processed,
            activity: Activity::new(),
        });
        let permits = Arc::new(Semaphore::new(limits.sessions_max));
        let mut sessions = JoinSet::new();
        let mut next_id: u64 = 0;
        tracing::info!(addr = %listener.local_addr()?, "Electrum server listening");
        tokio::pin!(shutdown);
        loop {
            while sessions.try_join_next().is_some() {}
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Typically out of file descriptors: back off, keep serving.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    // Responses are small and latency matters more than packets.
                    let _ = stream.set_nodelay(true);
                    let permit = match Arc::clone(&permits).try_acquire_owned() {
                        Ok(permit) => Some(permit),
                        // Full: the session idle the longest makes room.
                        Err(_) if ctx.activity.shed_idlest(Duration::from_secs(limits.shed_idle_secs)) => {
                            tracing::info!(%peer, "full: closing the idlest session to make room");
                            None
                        }
                        Err(_) => {
                            tracing::warn!(%peer, sessions_max = limits.sessions_max, "refusing connection: too many sessions");
                            tokio::spawn(refuse(stream, limits.sessions_max));
                            continue;
                        }
                    };
                    next_id += 1;
                    let span = tracing::info_span!("session", %peer, id = next_id);
                    let ctx = Arc::clone(&ctx);
                    let stop = stop_rx.clone();
                    let id = next_id;
                    let permits = Arc::clone(&permits);
                    let sessions_max = limits.sessions_max;
                    sessions.spawn(
                        async move {
                            let permit = match permit {
                                Some(permit) => permit,
                                None => match tokio::time::timeout(SHED_WAIT, permits.acquire_owned()).await {
                                    Ok(Ok(permit)) => permit,
                                    _ => return refuse(stream, sessions_max).await,
                                },
                            };
                            session::run(stream, id, ctx, stop).await;
                            drop(permit);
                        }
                        .instrument(span),
                    );
                }
            }
        }
        tracing::info!(
            sessions = sessions.len(),
            "shutting down the Electrum server"
        );
        let _ = stop_tx.send(true);
        drop(listener);
        if tokio::time::timeout(SHUTDOWN_GRACE, async {
            while sessions.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            tracing::warn!(
                left = sessions.len(),
                "sessions did not stop in time: aborting them"
            );
            sessions.abort_all();
        }
        let _ = notifier.await;
        Ok(())
    }
}

/// Tells a connection over `sessions_max` why it is closed.
async fn refuse(mut stream: TcpStream, sessions_max: usize) {
    let error = RpcError::ServerBusy(format!(
        "{sessions_max} sessions connected, try again later"
    ));
    let mut line =
        osprey_electrum::jsonrpc::response(serde_json::Value::Null, Err(error)).to_string();
    line.push('\n');
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        stream.write_all(line.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}
