//! When each session last sent a request, so that a full server makes room
//! for a newcomer by closing the session that has been idle the longest,
//! instead of locking every new wallet out until idle sessions time out.
//!
//! A session that has sent nothing at all since it connected goes first,
//! after a short grace ([`SILENT_GRACE`]): every wallet starts with
//! `server.version` at once, so a silent connection is a dead or hostile
//! one, and a flood of them must not keep wallets out for a minute.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
// Tokio's clock, which tests can pause and advance.
use tokio::time::Instant;

/// How long a connection that has sent nothing keeps its place on a full
/// server.
pub(crate) const SILENT_GRACE: Duration = Duration::from_secs(5);

/// Every live session's activity clock and the signal that closes it.
pub(crate) struct Activity {
    epoch: Instant,
    sessions: Mutex<HashMap<u64, SessionActivity>>,
}

/// One session's part: it stamps each request, and ends when `shed` fires.
#[derive(Clone)]
pub(crate) struct SessionActivity {
    epoch: Instant,
    /// Milliseconds since `epoch` at the last request (or the connection).
    last_ms: Arc<AtomicU64>,
    /// Whether the session has sent a request yet.
    spoke: Arc<AtomicBool>,
    pub shed: Arc<Notify>,
}

impl SessionActivity {
    /// Records a request now.
    pub fn touch(&self) {
        self.stamp();
        self.spoke.store(true, Ordering::Relaxed);
    }

    fn stamp(&self) {
        self.last_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Registers session `id`, active as of now.
    pub fn register(&self, id: u64) -> SessionActivity {
        let session = SessionActivity {
            epoch: self.epoch,
            last_ms: Arc::new(AtomicU64::new(0)),
            spoke: Arc::new(AtomicBool::new(false)),
            shed: Arc::new(Notify::new()),
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SessionActivity>> {
        self.sessions.lock().expect("activity lock poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_idlest_session_is_shed_once_and_only_when_idle_enough() {
        let activity = Activity::new();
        let first = activity.register(1);
        tokio::time::advance(Duration::from_millis(30)).await;
        let second = activity.register(2);
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
        let wallet = activity.register(1);
        wallet.touch();
        tokio::time::advance(Duration::from_millis(40)).await;
        let silent = activity.register(2);
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
