//! When each session last sent a request, so that a full server makes room
//! for a newcomer by closing the session that has been idle the longest,
//! instead of locking every new wallet out until idle sessions time out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Every live session's activity clock and the signal that closes it.
pub(crate) struct Activity {
    epoch: Instant,
    sessions: Mutex<HashMap<u64, SessionActivity>>,
}

/// One session's part: it stamps each request, and ends when `shed` fires.
#[derive(Clone)]
pub(crate) struct SessionActivity {
    epoch: Instant,
    /// Milliseconds since `epoch` at the last request.
    last_ms: Arc<AtomicU64>,
    pub shed: Arc<Notify>,
}

impl SessionActivity {
    /// Records a request now.
    pub fn touch(&self) {
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
            shed: Arc::new(Notify::new()),
        };
        session.touch();
        self.lock().insert(id, session.clone());
        session
    }

    pub fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the session idle the longest, if it has been idle for at
    /// least `idle_min`; returns whether one was told to close. A session
    /// is shed once: it leaves the registry here.
    pub fn shed_idlest(&self, idle_min: Duration) -> bool {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let mut sessions = self.lock();
        let idlest = sessions
            .iter()
            .map(|(id, s)| (s.last_ms.load(Ordering::Relaxed), *id))
            .min();
        match idlest {
            Some((last_ms, id))
                if now_ms.saturating_sub(last_ms) >= idle_min.as_millis() as u64 =>
            {
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

    #[tokio::test]
    async fn the_idlest_session_is_shed_once_and_only_when_idle_enough() {
        let activity = Activity::new();
        let first = activity.register(1);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let second = activity.register(2);
        assert!(
            !activity.shed_idlest(Duration::from_secs(60)),
            "nobody idle a minute"
        );
        assert!(activity.shed_idlest(Duration::from_millis(20)));
        tokio::time::timeout(Duration::from_secs(1), first.shed.notified())
            .await
            .expect("the older session is told to close");
        // The first is gone from the registry; the second is not idle
        // enough.
        assert!(!activity.shed_idlest(Duration::from_secs(10)));
        second.touch();
        activity.unregister(2);
        assert!(!activity.shed_idlest(Duration::ZERO), "no session left");
    }
}
