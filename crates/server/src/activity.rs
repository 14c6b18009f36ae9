//! The registry of live sessions. It keeps when each session last sent a
//! request, so that a full server makes room
//! for a newcomer by closing the session that has been idle the longest,
//! instead of locking every new wallet out until idle sessions time out;
//! and what the admin interface lists and kicks by ([`Sessions`]): each
//! session's address, client, protocol, subscriptions, bytes and cost (the
//! one `fair` orders the queue by, kept here so that it can be shown), and
//! the networks an operator banned (refused at admission; the binary keeps
//! them on disk across restarts).
//!
//! A session that has sent nothing at all since it connected goes first,
//! after a short grace ([`SILENT_GRACE`]): every wallet starts with
//! `server.version` at once, so a silent connection is a dead or hostile
//! one, and a flood of them must not keep wallets out for a minute.

use crate::fair::SessionCost;
use crate::per_ip::Subnet;
use crate::transport::ListenerKind;
use osprey_electrum::{ProtocolVersion, SessionState};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
// Tokio's clock, which tests can pause and advance.
use tokio::time::Instant;

/// How long a connection that has sent nothing keeps its place on a full
/// server.
pub(crate) const SILENT_GRACE: Duration = Duration::from_secs(5);

/// The most networks an operator may ban: each admission checks them all.
pub const BANNED_MAX: usize = 10_000;

/// Every live session's activity clock and the signal that closes it, and
/// the banned networks.
pub(crate) struct Activity {
    epoch: Instant,
    sessions: Mutex<HashMap<u64, SessionActivity>>,
    banned: Mutex<Vec<Subnet>>,
}

/// One session's part: it stamps each request, counts its bytes, and ends
/// when `shed` fires.
#[derive(Clone)]
pub(crate) struct SessionActivity {
    epoch: Instant,
    /// Milliseconds since `epoch` at the connection.
    connected_ms: u64,
    /// Milliseconds since `epoch` at the last request (or the connection).
    last_ms: Arc<AtomicU64>,
    /// Whether the session has sent a request yet.
    spoke: Arc<AtomicBool>,
    pub shed: Arc<Notify>,
    /// Set when `shed` fires for an operator's kick rather than for room.
    kicked: Arc<AtomicBool>,
    peer: SocketAddr,
    listener: ListenerKind,
    pub received_bytes: Arc<AtomicU64>,
    pub sent_bytes: Arc<AtomicU64>,
    /// What the session's state says of its client, after its last line.
    described: Arc<Mutex<Described>>,
    /// What it has cost the server lately: charged by the session's task,
    /// read by it to queue its lines and by [`Sessions::list`].
    cost: Arc<Mutex<SessionCost>>,
}

/// What a session's protocol state says of its client.
#[derive(Clone, Default)]
struct Described {
    client: Option<String>,
    protocol: Option<ProtocolVersion>,
    subscriptions: usize,
}

/// One live session, as the admin interface lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: u64,
    /// The client's address (as a PROXY header names it, when relayed).
    pub peer: SocketAddr,
    pub listener: ListenerKind,
    /// The name the client gave in `server.version`.
    pub client: Option<String>,
    /// The negotiated protocol version.
    pub protocol: Option<String>,
    /// Scripts, outpoints and silent-payment addresses subscribed to.
    pub subscriptions: usize,
    pub received_bytes: u64,
    pub sent_bytes: u64,
    /// What it has cost the server lately, decayed to now, in microseconds
    /// of handler time (bytes sent counted in: see `fair`).
    pub cost: u64,
    pub connected: Duration,
    pub idle: Duration,
}

/// Which sessions an operator closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionFilter {
    Id(u64),
    Address(IpAddr),
}

impl SessionActivity {
    /// Records a request now.
    pub fn touch(&self) {
        self.stamp();
        self.spoke.store(true, Ordering::Relaxed);
    }

    /// Keeps what `state` says of the client, for [`Sessions::list`];
    /// called after every line, so the name is copied only when it changed.
    pub fn describe(&self, state: &SessionState) {
        let mut kept = self
            .described
            .lock()
            .expect("session description lock poisoned");
        if kept.client.as_deref() != state.client_name() {
            kept.client = state.client_name().map(str::to_string);
        }
        kept.protocol = state.negotiated();
        kept.subscriptions = state.subscription_count() + state.silent_subscription_count();
    }

    /// Adds a request that held a handler slot for `held` and sent `bytes`
    /// to the session's cost.
    pub fn charge(&self, held: Duration, bytes: usize) {
        self.cost_lock().charge(held, bytes);
    }

    /// The session's cost as of now.
    pub fn cost(&self) -> u64 {
        self.cost_lock().now()
    }

    fn cost_lock(&self) -> std::sync::MutexGuard<'_, SessionCost> {
        // Held only for arithmetic, which does not panic.
        self.cost.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session was told to close by an operator.
    pub fn kicked(&self) -> bool {
        self.kicked.load(Ordering::Relaxed)
    }

    fn stamp(&self) {
        self.last_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// The live sessions of a server, for its admin interface: listed, and
/// closed on request ([`crate::Server::sessions`]).
#[derive(Clone)]
pub struct Sessions(pub(crate) Arc<Activity>);

impl Sessions {
    /// Every live session, by id.
    pub fn list(&self) -> Vec<SessionInfo> {
        self.0.list()
    }

    /// Closes the sessions `filter` matches; returns their ids.
    pub fn kick(&self, filter: SessionFilter) -> Vec<u64> {
        self.0.kick(filter)
    }

    /// Refuses new connections from `subnet` and closes its sessions;
    /// returns whether it was not banned yet and the sessions closed.
    ///
    /// # Errors
    /// [`BANNED_MAX`] networks are banned already.
    pub fn ban(&self, subnet: Subnet) -> Result<(bool, Vec<u64>), String> {
        self.0.ban(subnet)
    }

    /// Lifts a ban; returns whether `subnet` was banned.
    pub fn unban(&self, subnet: Subnet) -> bool {
        self.0.unban(subnet)
    }

    /// The banned networks, in the order banned.
    pub fn banned(&self) -> Vec<Subnet> {
        self.0.banned_lock().clone()
    }
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            sessions: Mutex::new(HashMap::new()),
            banned: Mutex::new(Vec::new()),
        }
    }

    /// Registers session `id` from `peer` on `listener`, active as of now.
    pub fn register(&self, id: u64, peer: SocketAddr, listener: ListenerKind) -> SessionActivity {
        let session = SessionActivity {
            epoch: self.epoch,
            connected_ms: self.epoch.elapsed().as_millis() as u64,
            last_ms: Arc::new(AtomicU64::new(0)),
            spoke: Arc::new(AtomicBool::new(false)),
            shed: Arc::new(Notify::new()),
            kicked: Arc::new(AtomicBool::new(false)),
            peer,
            listener,
            received_bytes: Arc::new(AtomicU64::new(0)),
            sent_bytes: Arc::new(AtomicU64::new(0)),
            described: Arc::new(Mutex::new(Described::default())),
            cost: Arc::new(Mutex::new(SessionCost::new())),
        };
        session.stamp();
        self.lock().insert(id, session.clone());
        session
    }

    pub fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the oldest session that has sent nothing for `silent_min`
    /// since it connected, else the session idle the longest if it has
    /// been idle for at least `idle_min`; returns whether one was told to
    /// close. A session is shed once: it leaves the registry here.
    pub fn shed_idlest(&self, silent_min: Duration, idle_min: Duration) -> bool {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let mut sessions = self.lock();
        let idle_for = |last_ms: u64| Duration::from_millis(now_ms.saturating_sub(last_ms));
        let idlest = |silent_only: bool| {
            sessions
                .iter()
                .filter(|(_, s)| !silent_only || !s.spoke.load(Ordering::Relaxed))
                .map(|(id, s)| (s.last_ms.load(Ordering::Relaxed), *id))
                .min()
        };
        let shed = match (idlest(true), idlest(false)) {
            (Some((last_ms, id)), _) if idle_for(last_ms) >= silent_min.min(idle_min) => Some(id),
            (_, Some((last_ms, id))) if idle_for(last_ms) >= idle_min => Some(id),
            _ => None,
        };
        match shed {
            Some(id) => {
                if let Some(session) = sessions.remove(&id) {
                    // A permit (not `notify_waiters`): the session may be
                    // between two waits when this fires.
                    session.shed.notify_one();
                }
                true
            }
            _ => false,
        }
    }

    /// Every live session, by id.
    pub fn list(&self) -> Vec<SessionInfo> {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let since = |ms: u64| Duration::from_millis(now_ms.saturating_sub(ms));
        let mut list: Vec<SessionInfo> = self
            .lock()
            .iter()
            .map(|(id, s)| {
                let described = s
                    .described
                    .lock()
                    .expect("session description lock poisoned")
                    .clone();
                SessionInfo {
                    id: *id,
                    peer: s.peer,
                    listener: s.listener,
                    client: described.client,
                    protocol: described.protocol.map(|v| v.to_string()),
                    subscriptions: described.subscriptions,
                    received_bytes: s.received_bytes.load(Ordering::Relaxed),
                    sent_bytes: s.sent_bytes.load(Ordering::Relaxed),
                    cost: s.cost(),
                    connected: since(s.connected_ms),
                    idle: since(s.last_ms.load(Ordering::Relaxed)),
                }
            })
            .collect();
        list.sort_by_key(|s| s.id);
        list
    }

    /// Tells the sessions `filter` matches to close; returns their ids.
    /// Like a shed session, a kicked one leaves the registry at once.
    pub fn kick(&self, filter: SessionFilter) -> Vec<u64> {
        let mut sessions = self.lock();
        let mut ids: Vec<u64> = sessions
            .iter()
            .filter(|(id, s)| match filter {
                SessionFilter::Id(wanted) => **id == wanted,
                SessionFilter::Address(ip) => s.peer.ip() == ip,
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in &ids {
            if let Some(session) = sessions.remove(id) {
                session.kicked.store(true, Ordering::Relaxed);
                session.shed.notify_one();
            }
        }
        ids
    }

    pub fn ban(&self, subnet: Subnet) -> Result<(bool, Vec<u64>), String> {
        let new = {
            let mut banned = self.banned_lock();
            if banned.contains(&subnet) {
                false
            } else if banned.len() >= BANNED_MAX {
                return Err(format!(
                    "{BANNED_MAX} networks are banned already, the most kept"
                ));
            } else {
                banned.push(subnet);
                true
            }
        };
        let from_it: Vec<IpAddr> = self
            .lock()
            .values()
            .map(|s| s.peer.ip())
            .filter(|ip| subnet.contains(*ip))
            .collect();
        let mut kicked: Vec<u64> = from_it
            .into_iter()
            .flat_map(|ip| self.kick(SessionFilter::Address(ip)))
            .collect();
        kicked.sort_unstable();
        kicked.dedup();
        Ok((new, kicked))
    }

    pub fn unban(&self, subnet: Subnet) -> bool {
        let mut banned = self.banned_lock();
        let before = banned.len();
        banned.retain(|b| *b != subnet);
        banned.len() != before
    }

    /// Whether connections from `ip` are refused.
    pub fn is_banned(&self, ip: IpAddr) -> bool {
        self.banned_lock().iter().any(|b| b.contains(ip))
    }

    fn banned_lock(&self) -> std::sync::MutexGuard<'_, Vec<Subnet>> {
        self.banned.lock().expect("ban list lock poisoned")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SessionActivity>> {
        self.sessions.lock().expect("activity lock poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(last: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, last], 50_000))
    }

    /// Sessions are listed with what their state says and what they cost,
    /// and a kick by address closes every session from it and no other.
    #[tokio::test(start_paused = true)]
    async fn sessions_are_listed_and_kicked_by_id_or_address() {
        let activity = Activity::new();
        let first = activity.register(1, peer(1), ListenerKind::Tcp);
        let second = activity.register(2, peer(2), ListenerKind::Ws);
        let third = activity.register(3, peer(2), ListenerKind::Tcp);
        let mut state = SessionState::new();
        state.set_client_name("Sparrow");
        state
            .negotiate("1.4".parse().unwrap(), "1.6".parse().unwrap())
            .unwrap();
        first.describe(&state);
        first.received_bytes.fetch_add(40, Ordering::Relaxed);
        tokio::time::advance(Duration::from_secs(3)).await;
        // 8 ms of a handler slot and 10,000 bytes sent, on a paused clock:
        // no decay yet.
        first.charge(Duration::from_millis(8), 10_000);
        let list = activity.list();
        assert_eq!(list.iter().map(|s| s.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(list[0].client.as_deref(), Some("Sparrow"));
        assert_eq!(list[0].protocol.as_deref(), Some("1.6"));
        assert_eq!(list[0].received_bytes, 40);
        assert_eq!(list[0].idle, Duration::from_secs(3));
        assert_eq!(list[0].cost, 9_000);
        assert_eq!(list[1].cost, 0);
        assert_eq!(list[1].client, None);
        assert_eq!(list[1].listener, ListenerKind::Ws);
        assert_eq!(activity.kick(SessionFilter::Id(9)), Vec::<u64>::new());
        assert_eq!(activity.kick(SessionFilter::Address(peer(2).ip())), [2, 3]);
        for kicked in [&second, &third] {
            tokio::time::timeout(Duration::from_secs(1), kicked.shed.notified())
                .await
                .expect("a kicked session is told to close");
            assert!(kicked.kicked());
        }
        assert!(!first.kicked());
        assert_eq!(activity.kick(SessionFilter::Id(1)), [1]);
        assert!(activity.list().is_empty());
    }

    /// A ban closes the sessions in its network and refuses it until
    /// lifted; an IPv4-mapped address is the IPv4 one.
    #[tokio::test(start_paused = true)]
    async fn a_ban_closes_its_network_and_refuses_it_until_lifted() {
        let activity = Activity::new();
        let inside = activity.register(1, peer(9), ListenerKind::Tcp);
        let outside = SocketAddr::from(([10, 0, 0, 1], 50_000));
        activity.register(2, outside, ListenerKind::Tcp);
        let net: Subnet = "127.0.0.0/24".parse().unwrap();
        assert_eq!(activity.ban(net), Ok((true, vec![1])));
        tokio::time::timeout(Duration::from_secs(1), inside.shed.notified())
            .await
            .expect("a banned session is told to close");
        assert_eq!(activity.ban(net), Ok((false, vec![])), "banned once");
        assert!(activity.is_banned(peer(200).ip()));
        assert!(activity.is_banned("::ffff:127.0.0.5".parse().unwrap()));
        assert!(!activity.is_banned(outside.ip()));
        assert_eq!(activity.list().len(), 1, "the other session stays");
        assert!(!activity.unban("127.0.0.0/25".parse().unwrap()));
        assert!(activity.unban(net));
        assert!(!activity.is_banned(peer(200).ip()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idlest_session_is_shed_once_and_only_when_idle_enough() {
        let activity = Activity::new();
        let first = activity.register(1, peer(1), ListenerKind::Tcp);
        tokio::time::advance(Duration::from_millis(30)).await;
        let second = activity.register(2, peer(2), ListenerKind::Tcp);
        let minute = Duration::from_secs(60);
        assert!(
            !activity.shed_idlest(minute, minute),
            "nobody idle a minute"
        );
        assert!(
            !activity.shed_idlest(minute, Duration::from_millis(31)),
            "nobody idle 31 ms"
        );
        assert!(activity.shed_idlest(minute, Duration::from_millis(30)));
        tokio::time::timeout(Duration::from_secs(1), first.shed.notified())
            .await
            .expect("the older session is told to close");
        // The first is gone from the registry; the second is not idle
        // enough.
        let ten = Duration::from_secs(10);
        assert!(!activity.shed_idlest(ten, ten));
        second.touch();
        activity.unregister(2);
        assert!(
            !activity.shed_idlest(Duration::ZERO, Duration::ZERO),
            "no session left"
        );
    }

    /// A session that never sent a request is shed after the short grace,
    /// before older sessions that did (a wallet waiting for
    /// notifications), which keep the long rule.
    #[tokio::test(start_paused = true)]
    async fn silent_sessions_are_shed_first() {
        let activity = Activity::new();
        let wallet = activity.register(1, peer(1), ListenerKind::Tcp);
        wallet.touch();
        tokio::time::advance(Duration::from_millis(40)).await;
        let silent = activity.register(2, peer(2), ListenerKind::Tcp);
        let grace = Duration::from_millis(20);
        let minute = Duration::from_secs(60);
        tokio::time::advance(Duration::from_millis(19)).await;
        assert!(
            !activity.shed_idlest(grace, minute),
            "the silent one is within its grace, the wallet idle less than a minute"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(activity.shed_idlest(grace, minute));
        tokio::time::timeout(Duration::from_secs(1), silent.shed.notified())
            .await
            .expect("the silent session is told to close, not the older wallet");
        assert!(
            !activity.shed_idlest(grace, minute),
            "the wallet keeps its place"
        );
        // The wallet has been idle 60 ms.
        assert!(!activity.shed_idlest(grace, Duration::from_millis(61)));
        assert!(activity.shed_idlest(grace, Duration::from_millis(60)));
        tokio::time::timeout(Duration::from_secs(1), wallet.shed.notified())
            .await
            .expect("the wallet, idle past idle_min, goes next");
    }
}
