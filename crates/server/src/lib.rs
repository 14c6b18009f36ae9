//! The Electrum network server: the listeners (TCP, TLS, WebSocket and
//! WebSocket over TLS), one task per session, the limits, the notifier that
//! pushes subscription updates, and graceful shutdown. Speaks the protocol through `osprey-electrum` (which owns every
//! JSON shape and error code); asks the chain only through an
//! `osprey_answers::Backend`, and learns what changed from a change feed, a
//! `tokio::sync::broadcast` of `Arc<osprey_answers::Change>` (the binary
//! passes `osprey_query::Query` and its `Query::changes`, published whenever
//! a block is connected or disconnected or the mempool changes; tests pass
//! the in-memory fake and a channel of their own).
//!
//! Layout: `config` (ServerConfig, Limits, PeerConfig), `framer` (newline
//! framing with a length cap), `tls` (certificates, reloaded when their
//! files change), `transport` (the handshakes, and lines or WebSocket
//! messages behind one interface), `session` (one connection, whatever its
//! transport), `fair` (handler slots, cheaper sessions' lines first, and
//! the threads a batch may be spread over), `activity` (which session a
//! full server closes for a newcomer),
//! `notifier` (the single owner of the subscription registry), `silent`
//! (a session's silent-payment subscriptions and their scans),
//! `scan_threads` (the low-priority threads scan chunks run on),
//! `per_ip` (sessions per client address), `proxy_protocol` (the PROXY
//! header a load balancer starts its connections with, naming the
//! client), `peers` (peer discovery: the
//! peer list, its checks, our announcement). Every listener shares one set
//! of limits, session permits, client memory budget and notifier.

mod activity;
mod config;
mod fair;
// The fuzz targets (`fuzz/`, feature `fuzzing`) drive the framer directly,
// as a session does; it is no part of the crate's API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod framer;
#[cfg(not(feature = "fuzzing"))]
mod framer;
mod notifier;
mod outpoints;
mod peers;
mod per_ip;
mod proxy_protocol;
mod queued;
mod scan_threads;
mod session;
mod silent;
mod tls;
mod transport;

pub use activity::{SessionFilter, SessionInfo, Sessions, BANNED_MAX};
pub use config::{ConfigError, Limits, PeerConfig, ServerConfig, Subnet};
pub use fair::blocking_threads;
pub use osprey_electrum::PeerInfo;
/// How `PeerConfig` names a host; the binary parses settings into it.
pub use osprey_electrum::PublicHost;
pub use peers::PeerStatus;
pub use scan_threads::ScanPriority;
pub use tls::{TlsFiles, RELOAD_CHECK_INTERVAL};
pub use transport::ListenerKind;

use activity::{Activity, SILENT_GRACE};
use anyhow::Context;
use fair::Scheduler;
use notifier::Notifier;
use osprey_answers::{Backend, Change};
use osprey_core::ByteBudget;
use osprey_electrum::{
    DispatchConfig, Dispatcher, RpcError, ServerInfo, SilentPaymentsConfig, SubscriptionBudget,
};
use osprey_metrics::Metrics;
use peers::PeerList;
use per_ip::PerIp;
use session::SessionContext;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tls::Tls;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;
use transport::Transport;

/// Largest 1.7 `server.ping` padding sent back, in characters.
const PONG_LEN_MAX: usize = 65_536;
/// Subscription messages in flight from sessions to the notifier.
const CONTROL_QUEUE_MAX: usize = 10_000;
/// How long sessions get to finish after shutdown before being cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a refused connection gets to read its "server busy" line.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a newcomer waits for the idle session it displaces to end.
const SHED_WAIT: Duration = Duration::from_secs(2);
/// How long a new connection's TLS and WebSocket handshakes may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves Electrum clients on every listener `config` names, answering
/// from `backend` and telling subscribers what `changes` announces, until
/// `shutdown` completes, then closes every session.
///
/// # Errors
/// Invalid limits, or the address cannot be bound.
pub async fn serve(
    config: ServerConfig,
    backend: Arc<dyn Backend>,
    changes: broadcast::Receiver<Arc<Change>>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    Server::bind(config, backend, changes)
        .await?
        .run(shutdown)
        .await
}

/// A bound server, not yet accepting (so tests can bind port 0 and learn
/// the addresses first).
pub struct Server {
    listeners: Vec<(ListenerKind, TcpListener)>,
    tls: Option<Arc<Tls>>,
    config: ServerConfig,
    backend: Arc<dyn Backend>,
    changes: broadcast::Receiver<Arc<Change>>,
    metrics: Arc<Metrics>,
    activity: Arc<Activity>,
    info: ServerInfo,
    peer_list: PeerList,
}

/// The known peer servers, for the admin interface ([`Server::peers`]).
#[derive(Clone)]
pub struct PeerView(PeerList);

impl PeerView {
    /// Every known server: configured or learned, verified or not.
    pub fn list(&self) -> Vec<PeerStatus> {
        self.0.statuses()
    }

    /// Adds `host` as a peer the operator named, checked at once in the
    /// background (and hourly with the others); returns whether it was not
    /// known yet. Kept until the process ends: `--peers` is what lasts.
    pub fn add(&self, host: PublicHost) -> bool {
        self.0.add_configured(host)
    }

    /// Forgets every known server named `host`; returns them.
    pub fn remove(&self, host: &str) -> Vec<PublicHost> {
        self.0.remove(host)
    }
}

impl Server {
    /// Binds the listening sockets. `changes` is the backend's change feed,
    /// subscribed to before serving so that no change is missed (tests pass
    /// the in-memory fake and a channel they publish on).
    ///
    /// # Errors
    /// Invalid limits, an address that cannot be bound, or a TLS listener
    /// without a usable certificate.
    pub async fn bind(
        config: ServerConfig,
        backend: Arc<dyn Backend>,
        changes: broadcast::Receiver<Arc<Change>>,
    ) -> anyhow::Result<Self> {
        config.limits.validate().context("invalid server limits")?;
        let addrs = [
            (ListenerKind::Tcp, Some(config.electrum_rpc_addr)),
            (ListenerKind::Tls, config.electrum_tls_addr),
            (ListenerKind::Ws, config.electrum_ws_addr),
            (ListenerKind::Wss, config.electrum_wss_addr),
        ];
        let tls = if addrs
            .iter()
            .any(|(kind, addr)| kind.uses_tls() && addr.is_some())
        {
            let files = config
                .tls
                .clone()
                .context("a TLS listener needs a certificate and key")?;
            Some(Arc::new(Tls::new(files).context("TLS certificate")?))
        } else {
            None
        };
        let mut listeners = Vec::new();
        for (kind, addr) in addrs {
            let Some(addr) = addr else { continue };
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the Electrum {kind} port {addr}"))?;
            listeners.push((kind, listener));
        }
        let info = ServerInfo {
            server_version: config.server_version.clone(),
            banner: config.banner.clone(),
            donation_address: config.donation_address.clone(),
            genesis_hash: config.network.genesis_hash(),
            hosts: config.peering.public_hosts.clone(),
        };
        let peer_list = PeerList::new(&config.peering, &info, config.limits.ipv6_prefix_bits);
        Ok(Server {
            listeners,
            tls,
            info,
            peer_list,
            config,
            backend,
            changes,
            metrics: Arc::new(Metrics::new(&osprey_electrum::METHODS)),
            activity: Arc::new(Activity::new()),
        })
    }

    /// The peer list, to show from outside (the admin interface).
    pub fn peers(&self) -> PeerView {
        PeerView(self.peer_list.clone())
    }

    /// The live sessions, to list and close from outside (the admin
    /// interface); valid while the server runs.
    pub fn sessions(&self) -> Sessions {
        Sessions(Arc::clone(&self.activity))
    }

    /// Counts sessions, subscriptions, bytes and requests in `metrics`
    /// (the process's registry) instead of a registry of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The address the TCP listener actually bound (useful with port 0).
    ///
    /// # Errors
    /// If the socket has no local address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener_addr(ListenerKind::Tcp)
            .ok_or_else(|| std::io::Error::other("no TCP listener"))
    }

    /// The address a listener actually bound, if it is configured.
    pub fn listener_addr(&self, kind: ListenerKind) -> Option<SocketAddr> {
        self.listeners
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, listener)| listener.local_addr().ok())
    }

    /// Accepts and serves sessions until `shutdown` completes, then tells
    /// every session to stop and waits for them (for a grace period).
    ///
    /// # Errors
    /// None at present; the signature leaves room for fatal listener errors.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server {
            listeners,
            tls,
            config,
            backend,
            changes,
            metrics,
            activity,
            info,
            peer_list,
        } = self;
        let limits = config.limits.clone();
        let client_memory = ByteBudget::new(limits.client_memory_bytes_max);
        let scheduler = Scheduler::new(
            limits.worker_threads,
            backend.transactions_are_local(),
            limits.sp_scan_priority,
        );
        // Told when the server stops, so that no scan job holds it up.
        let closing = Arc::clone(&scheduler);
        let dispatcher = Arc::new(
            Dispatcher::new(
                Arc::clone(&backend),
                DispatchConfig {
                    info,
                    headers_per_call_max: limits.headers_per_call_max,
                    batch_requests_max: limits.batch_requests_max,
                    reply_bytes_max: limits.reply_bytes_max,
                    subscriptions_per_session_max: limits.subscriptions_per_session_max,
                    pong_len_max: PONG_LEN_MAX,
                    subscription_budget: Some(SubscriptionBudget {
                        budget: Arc::clone(&client_memory),
                        keep_free: limits.line_bytes_max + limits.reply_bytes_max,
                    }),
                    silent_payments: SilentPaymentsConfig {
                        network: config.network.bitcoin(),
                        labels_max: limits.sp_labels_max,
                        subscriptions_per_session_max: limits.sp_subscriptions_per_session_max,
                    },
                },
            )
            .with_peers(Arc::new(peer_list.clone()))
            .with_metrics(Arc::clone(&metrics)),
        );
        let (stop_tx, stop_rx) = watch::channel(false);
        let peer_checks = tokio::spawn(
            peer_list
                .run(stop_rx.clone())
                .instrument(tracing::info_span!("peers")),
        );
        let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE_MAX);
        let processed = Arc::new(AtomicU64::new(0));
        let silent = Arc::new(silent::HubContext {
            backend: Arc::clone(&backend),
            scheduler: Arc::clone(&scheduler),
            client_memory: Arc::clone(&client_memory),
            metrics: Arc::clone(&metrics),
        });
        let notifier = Notifier::new(
            backend,
            changes,
            control_rx,
            Arc::clone(&processed),
            Arc::clone(&metrics),
        );
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
            activity,
            client_memory,
            metrics,
            scheduler,
            silent,
        });
        let admission = Admission {
            permits: Arc::new(Semaphore::new(limits.sessions_max)),
            per_ip: PerIp::new(
                limits.sessions_per_ip_max,
                limits.trusted_subnets.clone(),
                limits.ipv6_prefix_bits,
            ),
            ctx,
            tls,
            stop: stop_rx.clone(),
        };
        // Connections from a proxy wait for their PROXY header in a task
        // of their own, then come back here to be admitted like any other
        // under their client's address. Each holds a place in
        // `headers_pending` until then, so the queue is bounded.
        let headers_pending = Arc::new(Semaphore::new(limits.sessions_max));
        let (proxied_tx, mut proxied_rx) = mpsc::unbounded_channel::<Proxied>();
        let mut sessions = JoinSet::new();
        let mut next_id: u64 = 0;
        for (kind, listener) in &listeners {
            tracing::info!(protocol = %kind, addr = %listener.local_addr()?, "Electrum server listening");
        }
        tokio::pin!(shutdown);
        loop {
            while sessions.try_join_next().is_some() {}
            tokio::select! {
                _ = &mut shutdown => break,
                Some(proxied) = proxied_rx.recv() => {
                    let Proxied { kind, stream, client, proxy, pending } = proxied;
                    admission.admit(kind, stream, client, Some(proxy), &mut next_id, &mut sessions);
                    drop(pending);
                }
                (kind, accepted) = accept_any(&listeners, next_id) => {
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
                    if !limits.proxy_protocol_from.iter().any(|net| net.contains(peer.ip())) {
                        admission.admit(kind, stream, peer, None, &mut next_id, &mut sessions);
                        continue;
                    }
                    let Ok(pending) = Arc::clone(&headers_pending).try_acquire_owned() else {
                        tracing::warn!(proxy = %peer, "refusing connection: too many PROXY headers awaited");
                        // Told why, as any refused connection: on a plain
                        // listener the proxy passes the line on to its
                        // client. (A TLS or WebSocket handshake would meet
                        // the PROXY header first: it fails, and the
                        // connection is closed as before.)
                        let error = RpcError::ServerBusy(format!(
                            "{} connections from proxies are awaiting their PROXY header, \
                             the most allowed; try again later",
                            limits.sessions_max
                        ));
                        tokio::spawn(refuse(kind, stream, admission.tls.clone(), &admission.ctx, error));
                        continue;
                    };
                    let proxied_tx = proxied_tx.clone();
                    sessions.spawn(async move {
                        let mut stream = stream;
                        match proxy_protocol::read_header(&mut stream).await {
                            Ok(header) => {
                                let client = header.client(peer);
                                // Ignored error: the server is stopping.
                                let _ = proxied_tx.send(Proxied { kind, stream, client, proxy: peer, pending });
                            }
                            // Debug: a misconfigured or probing proxy, not
                            // worth a line per connection at info.
                            Err(error) => tracing::debug!(proxy = %peer, protocol = %kind, %error, "closing a connection from a proxy"),
                        }
                    });
                }
            }
        }
        tracing::info!(
            sessions = sessions.len(),
            "shutting down the Electrum server"
        );
        let _ = stop_tx.send(true);
        closing.close_scans();
        drop(listeners);
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
        let _ = peer_checks.await;
        Ok(())
    }
}

/// A connection from a proxy, past its PROXY header.
struct Proxied {
    kind: ListenerKind,
    stream: TcpStream,
    /// Who the header says the connection is for (the proxy itself for a
    /// health check).
    client: SocketAddr,
    proxy: SocketAddr,
    /// Its place among the connections awaiting a header, until admitted.
    pending: OwnedSemaphorePermit,
}

/// What decides whether a connection becomes a session: the per-address
/// cap, then `sessions_max` (shedding the idlest session when full).
struct Admission {
    permits: Arc<Semaphore>,
    per_ip: Arc<PerIp>,
    ctx: Arc<SessionContext>,
    tls: Option<Arc<Tls>>,
    stop: watch::Receiver<bool>,
}

impl Admission {
    /// Starts a session for `stream` from `peer`, the client (as the PROXY
    /// header from `proxy` names it, when relayed), in `sessions`, or
    /// refuses it with an error line.
    fn admit(
        &self,
        kind: ListenerKind,
        stream: TcpStream,
        peer: SocketAddr,
        proxy: Option<SocketAddr>,
        next_id: &mut u64,
        sessions: &mut JoinSet<()>,
    ) {
        let Admission {
            permits,
            per_ip,
            ctx,
            tls,
            stop,
        } = self;
        let limits = &ctx.limits;
        if ctx.activity.is_banned(peer.ip()) {
            tracing::warn!(%peer, "refusing connection: its address is banned");
            let error = RpcError::BadRequest("your address is banned from this server".into());
            tokio::spawn(refuse(kind, stream, tls.clone(), ctx, error));
            return;
        }
        let ip_slot = match per_ip.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(max) => {
                tracing::warn!(%peer, sessions_per_ip_max = max, "refusing connection: too many sessions from its address");
                let error = RpcError::ServerBusy(format!(
                    "{max} sessions from your address already, the most allowed"
                ));
                tokio::spawn(refuse(kind, stream, tls.clone(), ctx, error));
                return;
            }
        };
        let permit = match Arc::clone(permits).try_acquire_owned() {
            Ok(permit) => Some(permit),
            // Full: the session idle the longest makes room.
            Err(_)
                if ctx
                    .activity
                    .shed_idlest(SILENT_GRACE, Duration::from_secs(limits.shed_idle_secs)) =>
            {
                tracing::info!(%peer, "full: closing the idlest session to make room");
                ctx.metrics.sessions.shed.inc();
                None
            }
            Err(_) => {
                tracing::warn!(%peer, sessions_max = limits.sessions_max, "refusing connection: too many sessions");
                tokio::spawn(refuse(
                    kind,
                    stream,
                    tls.clone(),
                    ctx,
                    server_full(limits.sessions_max),
                ));
                return;
            }
        };
        *next_id += 1;
        let id = *next_id;
        let span = tracing::info_span!("session", %peer, id, protocol = %kind, proxy = tracing::field::Empty);
        if let Some(proxy) = proxy {
            span.record("proxy", tracing::field::display(proxy));
        }
        let ctx = Arc::clone(ctx);
        let stop = stop.clone();
        let permits = Arc::clone(permits);
        let tls = tls.clone();
        sessions.spawn(
            async move {
                let permit = match permit {
                    Some(permit) => permit,
                    None => match tokio::time::timeout(SHED_WAIT, permits.acquire_owned()).await {
                        Ok(Ok(permit)) => permit,
                        _ => {
                            // The shed session had not gone yet.
                            let error = server_full(ctx.limits.sessions_max);
                            return refuse(kind, stream, tls, &ctx, error).await;
                        }
                    },
                };
                let Some(transport) = handshake(kind, stream, tls.as_deref(), &ctx.limits).await
                else {
                    return;
                };
                session::run(transport, peer, kind, id, ctx, stop).await;
                drop((permit, ip_slot));
            }
            .instrument(span),
        );
    }
}

/// Waits for a connection on any listener, starting the scan at a
/// different one each time so that a busy listener cannot starve the others.
async fn accept_any(
    listeners: &[(ListenerKind, TcpListener)],
    turn: u64,
) -> (ListenerKind, std::io::Result<(TcpStream, SocketAddr)>) {
    let start = (turn % listeners.len().max(1) as u64) as usize;
    std::future::poll_fn(|cx| {
        for i in 0..listeners.len() {
            let (kind, listener) = &listeners[(start + i) % listeners.len()];
            if let Poll::Ready(accepted) = listener.poll_accept(cx) {
                return Poll::Ready((*kind, accepted));
            }
        }
        Poll::Pending
    })
    .await
}

/// Runs a new connection's TLS and WebSocket handshakes, in bounded time.
async fn handshake(
    kind: ListenerKind,
    stream: TcpStream,
    tls: Option<&Tls>,
    limits: &Limits,
) -> Option<Transport> {
    let opened = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        Transport::open(kind, stream, tls, limits.line_bytes_max),
    )
    .await;
    match opened {
        Ok(Ok(transport)) => Some(transport),
        Ok(Err(error)) => {
            tracing::info!(%error, "handshake failed");
            None
        }
        Err(_) => {
            tracing::info!("handshake timed out");
            None
        }
    }
}

/// Why a connection over `sessions_max` is refused.
fn server_full(sessions_max: usize) -> RpcError {
    RpcError::ServerBusy(format!(
        "{sessions_max} sessions connected, try again later"
    ))
}

/// Tells a refused connection why, in `error`, its only line (after its
/// handshakes, so that a TLS or WebSocket client can read it). Every
/// refusal goes through here, so it is counted here, at once.
fn refuse(
    kind: ListenerKind,
    stream: TcpStream,
    tls: Option<Arc<Tls>>,
    ctx: &SessionContext,
    error: RpcError,
) -> impl Future<Output = ()> + Send + 'static {
    ctx.metrics.sessions.refused.inc();
    let limits = ctx.limits.clone();
    async move {
        let Some(mut transport) = handshake(kind, stream, tls.as_deref(), &limits).await else {
            return;
        };
        let line =
            osprey_electrum::jsonrpc::response(serde_json::Value::Null, Err(error)).to_string();
        let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
            transport.write_line(&line).await?;
            transport.flush().await?;
            transport.close().await
        })
        .await;
    }
}
