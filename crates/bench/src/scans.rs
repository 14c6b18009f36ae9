//! `--sp-scans N`: silent-payment scans running on the server while the
//! workloads are measured, to see whether they slow the wallets down (issue
//! 24: a scan "never blocks other sessions"). Each of N extra sessions
//! subscribes one receiver of the manifest from height 0, as Sparrow does,
//! reads notifications until progress 1.0, checks that they listed exactly
//! that receiver's payments, and subscribes again: a re-subscribe scans
//! the whole range again (docs/silent-payments.md 1.2), so scanning lasts
//! as long as the workloads. The sessions stop when the workloads end.
//!
//! Their counts (subscribes, completed scans, notifications, entries) are
//! kept apart from the workloads' numbers and reported beside them, so a
//! reader sees the scans really ran.

use crate::client::{Limits, Session};
use crate::error::{excerpt, BenchError};
use crate::workload::open_session;
use osprey_chaingen::manifest::SilentPaymentReceiver;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Most scan sessions one bench runs: enough to fill any server's share of
/// cores for scans, few enough not to turn the bench into a load test.
pub const SP_SCANS_MAX: usize = 16;

/// The method that subscribes, and names its notifications.
pub const SP_SUBSCRIBE: &str = "blockchain.silentpayments.subscribe";
const FEATURES: &str = "server.features";

/// Entries of a wrong scan quoted in its error.
const ENTRIES_QUOTED: usize = 3;

/// One history entry of a notification: (height, txid, tweak key).
type Entry = (u64, String, String);

/// What one receiver's scan from height 0 must report on a still chain.
#[derive(Clone, Debug)]
pub struct ExpectedScan {
    /// Subscribe parameters: scan key, spend key, start 0, labels.
    params: Value,
    address: String,
    payments: BTreeSet<Entry>,
}

impl ExpectedScan {
    pub fn of_receivers(receivers: &[SilentPaymentReceiver]) -> Vec<ExpectedScan> {
        receivers
            .iter()
            .map(|r| ExpectedScan {
                params: json!([r.scan_private_key, r.spend_public_key, 0, r.labels]),
                address: r.address.clone(),
                payments: r
                    .payments
                    .iter()
                    .map(|p| (u64::from(p.height), p.txid.clone(), p.tweak_key.clone()))
                    .collect(),
            })
            .collect()
    }

    /// Compares the entries of a whole scan with the receiver's payments.
    fn check(&self, found: &BTreeSet<Entry>) -> Result<(), String> {
        if *found == self.payments {
            return Ok(());
        }
        let quote = |entries: &[&Entry]| {
            let quoted: Vec<String> = entries
                .iter()
                .take(ENTRIES_QUOTED)
                .map(|(height, txid, _)| format!("{txid} at height {height}"))
                .collect();
            quoted.join(", ")
        };
        let missing: Vec<&Entry> = self.payments.difference(found).collect();
        let extra: Vec<&Entry> = found.difference(&self.payments).collect();
        Err(format!(
            "the scan to progress 1.0 listed {} entries, the manifest has {} payments: \
             {} missing ({}), {} not payments or with another height or tweak ({})",
            found.len(),
            self.payments.len(),
            missing.len(),
            quote(&missing),
            extra.len(),
            quote(&extra),
        ))
    }
}

/// Counts of the scan sessions, summed over them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanActivity {
    /// Scan sessions running.
    pub sessions: usize,
    /// Subscribes answered, each starting a scan of the whole chain.
    pub subscribes: u64,
    /// Scans that reached progress 1.0 with exactly the receiver's payments.
    pub completed: u64,
    pub notifications: u64,
    /// History entries (transactions) in the notifications.
    pub entries: u64,
}

impl ScanActivity {
    /// Returns what happened between `earlier` and this.
    pub fn since(&self, earlier: &ScanActivity) -> ScanActivity {
        ScanActivity {
            sessions: self.sessions,
            subscribes: self.subscribes.saturating_sub(earlier.subscribes),
            completed: self.completed.saturating_sub(earlier.completed),
            notifications: self.notifications.saturating_sub(earlier.notifications),
            entries: self.entries.saturating_sub(earlier.entries),
        }
    }
}

/// Everything the scans did during one server's bench.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScanSummary {
    pub activity: ScanActivity,
    /// Progress of each session's unfinished scan when the workloads ended.
    pub progress_at_stop: Vec<f64>,
}

#[derive(Debug, Default)]
struct Counters {
    subscribes: AtomicU64,
    completed: AtomicU64,
    notifications: AtomicU64,
    entries: AtomicU64,
    /// Told when a session completes a scan or ends.
    changed: Notify,
}

/// Where one scan session is.
#[derive(Debug, Default)]
struct SessionState {
    /// Progress of its current scan, as f64 bits.
    progress: AtomicU64,
    /// Scans it completed.
    completed: AtomicU64,
    /// Set when its task ends (only on an error).
    ended: AtomicBool,
}

/// The scan sessions running against one server.
pub struct ScanLoad {
    counters: Arc<Counters>,
    /// Each ends only with the error that broke its session.
    tasks: Vec<(JoinHandle<BenchError>, Arc<SessionState>)>,
}

impl ScanLoad {
    /// Checks that the server scans (`silent_payments` in
    /// `server.features`), then opens `sessions` sessions, session i
    /// subscribing receiver i mod the receivers' count, and returns once
    /// every one is subscribed: the scans run before the first request of
    /// the workloads.
    ///
    /// # Errors
    /// When the server does not scan, or a session cannot subscribe.
    pub async fn start(
        address: &str,
        scans: &Arc<Vec<ExpectedScan>>,
        sessions: usize,
        limits: Limits,
    ) -> Result<ScanLoad, BenchError> {
        check_features(address, sessions, limits).await?;
        let counters = Arc::new(Counters::default());
        let mut load = ScanLoad {
            counters: Arc::clone(&counters),
            tasks: Vec::with_capacity(sessions),
        };
        for i in 0..sessions {
            let index = i % scans.len().max(1);
            let Some(expected) = scans.get(index) else {
                return Err(BenchError::Manifest(
                    "no silent-payment receiver to scan for".to_owned(),
                ));
            };
            let (mut session, _) = open_session(address, limits).await?;
            let subscription = subscribe(&mut session, expected, &counters).await?;
            let state = Arc::new(SessionState::default());
            let (scans, counters, task_state) =
                (Arc::clone(scans), Arc::clone(&counters), Arc::clone(&state));
            let task = tokio::spawn(async move {
                let error = match scan_forever(
                    session,
                    subscription,
                    &scans[index],
                    &counters,
                    &task_state,
                )
                .await
                {
                    Ok(never) => match never {},
                    Err(error) => error,
                };
                task_state.ended.store(true, Ordering::Relaxed);
                counters.changed.notify_one();
                error
            });
            load.tasks.push((task, state));
        }
        Ok(load)
    }

    /// Returns the counts so far.
    pub fn activity(&self) -> ScanActivity {
        let c = &self.counters;
        ScanActivity {
            sessions: self.tasks.len(),
            subscribes: c.subscribes.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            notifications: c.notifications.load(Ordering::Relaxed),
            entries: c.entries.load(Ordering::Relaxed),
        }
    }

    /// True once a scan session has ended: they end only on an error.
    pub fn broken(&self) -> bool {
        self.tasks.iter().any(|(task, _)| task.is_finished())
    }

    /// Waits until every session has completed a whole scan (each checked
    /// against the manifest), one has ended, or `limit` has passed;
    /// returns whether every session completed one.
    pub async fn each_completed(&self, limit: Duration) -> bool {
        let states = || self.tasks.iter().map(|(_, state)| state);
        let all_completed = || states().all(|s| s.completed.load(Ordering::Relaxed) > 0);
        let any_ended = || states().any(|s| s.ended.load(Ordering::Relaxed));
        // `notify_one` keeps a permit for a wait that has not begun yet, so
        // a change between a check and the wait is not missed.
        let waited = tokio::time::timeout(limit, async {
            while !all_completed() && !any_ended() {
                self.counters.changed.notified().await;
            }
        })
        .await;
        waited.is_ok() && all_completed()
    }

    /// Ends every scan session and returns what they did, with the first
    /// error that ended one before.
    pub async fn stop(self, address: &str) -> (ScanSummary, Option<BenchError>) {
        let activity = self.activity();
        let mut error = None;
        let mut progress_at_stop = Vec::with_capacity(self.tasks.len());
        for (task, state) in self.tasks {
            task.abort();
            progress_at_stop.push(f64::from_bits(state.progress.load(Ordering::Relaxed)));
            match task.await {
                Ok(e) => {
                    error.get_or_insert(e);
                }
                Err(join_error) if join_error.is_panic() => {
                    error.get_or_insert(BenchError::Internal {
                        server: address.to_owned(),
                        detail: format!("a silent-payment scan session ended: {join_error}"),
                    });
                }
                Err(_) => {}
            }
        }
        let summary = ScanSummary {
            activity,
            progress_at_stop,
        };
        (summary, error)
    }
}

/// Refuses a server whose `server.features` lacks `silent_payments` [0]:
/// it keeps no silent-payment index, and scans asked of it would measure
/// nothing.
async fn check_features(address: &str, sessions: usize, limits: Limits) -> Result<(), BenchError> {
    let (mut session, _) = open_session(address, limits).await?;
    let features = session.call(FEATURES, json!([])).await?;
    let versions = features.get("silent_payments").and_then(Value::as_array);
    if versions.is_some_and(|v| v.contains(&json!(0))) {
        return Ok(());
    }
    Err(BenchError::Protocol {
        server: session.server().to_owned(),
        method: FEATURES.to_owned(),
        detail: format!(
            "--sp-scans {sessions} needs a server that scans silent payments, and this one lists \
             no \"silent_payments\": [0] in server.features (Osprey: serve with --silent-payments)"
        ),
    })
}

/// Subscribes the receiver from height 0 and returns the subscription
/// object, which every notification of the scan must repeat.
/// Notifications read before the answer are dropped: they belong to the
/// subscription this one replaces (the server sends a new scan's only
/// after the answer), and the same subscription object cannot tell them
/// apart; the repeat of the last scan's end, with no history, read as the
/// new scan would end it with nothing found.
async fn subscribe(
    session: &mut Session,
    expected: &ExpectedScan,
    counters: &Counters,
) -> Result<Value, BenchError> {
    let subscription = session.call(SP_SUBSCRIBE, expected.params.clone()).await?;
    session.take_notifications();
    if subscription.get("address").and_then(Value::as_str) != Some(expected.address.as_str())
        || subscription.get("start_height") != Some(&json!(0))
    {
        return Err(wrong(
            session,
            expected,
            format!(
                "subscribe answered {}, expected address {} from start_height 0",
                excerpt(&subscription.to_string(), 300),
                expected.address
            ),
        ));
    }
    counters.subscribes.fetch_add(1, Ordering::Relaxed);
    Ok(subscription)
}

/// Reads the scan of `subscription` to progress 1.0, checks it, subscribes
/// again, and so on until the task is aborted or the session breaks.
async fn scan_forever(
    mut session: Session,
    mut subscription: Value,
    expected: &ExpectedScan,
    counters: &Counters,
    state: &SessionState,
) -> Result<std::convert::Infallible, BenchError> {
    loop {
        let mut found = BTreeSet::new();
        let mut reached = 0.0_f64;
        while reached < 1.0 {
            let notification = session.next_notification(SP_SUBSCRIBE).await?;
            let entries_before = found.len();
            reached = read_notification(&notification, &subscription, reached, &mut found)
                .map_err(|detail| wrong(&session, expected, detail))?;
            counters.notifications.fetch_add(1, Ordering::Relaxed);
            counters
                .entries
                .fetch_add((found.len() - entries_before) as u64, Ordering::Relaxed);
            state.progress.store(reached.to_bits(), Ordering::Relaxed);
        }
        expected
            .check(&found)
            .map_err(|detail| wrong(&session, expected, detail))?;
        counters.completed.fetch_add(1, Ordering::Relaxed);
        state.completed.fetch_add(1, Ordering::Relaxed);
        counters.changed.notify_one();
        // The next scan has not begun until the subscribe is answered.
        state.progress.store(0.0_f64.to_bits(), Ordering::Relaxed);
        subscription = subscribe(&mut session, expected, counters).await?;
    }
}

/// Checks one notification of the scan of `subscription` (its own
/// subscription object, a progress not below the last one, entries of the
/// three keys), adds its entries to `found` and returns its progress.
fn read_notification(
    notification: &Value,
    subscription: &Value,
    last_progress: f64,
    found: &mut BTreeSet<Entry>,
) -> Result<f64, String> {
    let quoted = || excerpt(&notification.to_string(), 300);
    if notification.get("method").and_then(Value::as_str) != Some(SP_SUBSCRIBE) {
        return Err(format!("unexpected notification {}", quoted()));
    }
    let params = &notification["params"];
    if params.get(0) != Some(subscription) {
        return Err(format!(
            "notification of another subscription than {subscription}: {}",
            quoted()
        ));
    }
    let progress = params
        .get(1)
        .and_then(Value::as_f64)
        .filter(|p| (last_progress..=1.0).contains(p))
        .ok_or_else(|| {
            format!(
                "progress not a number from {last_progress} to 1.0: {}",
                quoted()
            )
        })?;
    let history = params
        .get(2)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no history array: {}", quoted()))?;
    for entry in history {
        let parsed = (
            entry.get("height").and_then(Value::as_u64),
            entry.get("tx_hash").and_then(Value::as_str),
            entry.get("tweak_key").and_then(Value::as_str),
        );
        let (Some(height), Some(txid), Some(tweak)) = parsed else {
            return Err(format!(
                "history entry without height, tx_hash and tweak_key: {}",
                excerpt(&entry.to_string(), 300)
            ));
        };
        if !found.insert((height, txid.to_owned(), tweak.to_owned())) {
            return Err(format!("{txid} listed twice in one scan"));
        }
    }
    Ok(progress)
}

fn wrong(session: &Session, expected: &ExpectedScan, detail: String) -> BenchError {
    BenchError::Mismatch {
        server: session.server().to_owned(),
        method: SP_SUBSCRIBE.to_owned(),
        subject: format!("silent-payment address {}", expected.address),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected() -> ExpectedScan {
        ExpectedScan {
            params: json!([]),
            address: "sprt1q".into(),
            payments: [(5, "aa".repeat(32), "02".repeat(33))].into(),
        }
    }

    fn notification(subscription: &Value, progress: f64, history: Value) -> Value {
        json!({"jsonrpc": "2.0", "method": SP_SUBSCRIBE, "params": [subscription, progress, history]})
    }

    #[test]
    fn a_scan_must_list_exactly_the_payments() {
        let subscription = json!({"address": "sprt1q", "labels": [0], "start_height": 0});
        let mut found = BTreeSet::new();
        let entry = json!({"height": 5, "tx_hash": "aa".repeat(32), "tweak_key": "02".repeat(33)});
        let first = notification(&subscription, 0.5, json!([]));
        assert_eq!(
            read_notification(&first, &subscription, 0.0, &mut found),
            Ok(0.5)
        );
        let last = notification(&subscription, 1.0, json!([entry]));
        assert_eq!(
            read_notification(&last, &subscription, 0.5, &mut found),
            Ok(1.0)
        );
        assert_eq!(expected().check(&found), Ok(()));

        // The same transaction at another height is one missing, one extra.
        let moved = (6, "aa".repeat(32), "02".repeat(33));
        let err = expected().check(&[moved].into()).unwrap_err();
        assert!(
            err.contains("1 missing") && err.contains("1 not payments"),
            "{err}"
        );
        assert!(err.contains("at height 6"), "{err}");
        assert!(expected().check(&BTreeSet::new()).is_err());
    }

    #[test]
    fn notifications_are_checked() {
        let subscription = json!({"address": "sprt1q", "labels": [0], "start_height": 0});
        let mut found = BTreeSet::new();
        let other = json!({"address": "sprt1q", "labels": [0], "start_height": 3});
        let going_back = notification(&subscription, 0.2, json!([]));
        let cases = [
            (notification(&other, 0.5, json!([])), "another subscription"),
            (going_back, "progress"),
            (notification(&subscription, 1.5, json!([])), "progress"),
            (notification(&subscription, 0.5, json!({})), "history"),
            (
                notification(&subscription, 0.5, json!([{"height": 1}])),
                "tweak_key",
            ),
        ];
        for (n, what) in cases {
            let err = read_notification(&n, &subscription, 0.3, &mut found).unwrap_err();
            assert!(err.contains(what), "{what}: {err}");
        }
        let entry = json!({"height": 5, "tx_hash": "aa".repeat(32), "tweak_key": "02".repeat(33)});
        let twice = notification(&subscription, 0.5, json!([entry, entry]));
        let err = read_notification(&twice, &subscription, 0.3, &mut found).unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }

    /// A server that sends the old scan's repeated end while the
    /// re-subscribe is being answered, then the answer, then the new
    /// scan's end: only the new scan's end is read as the new scan's.
    #[tokio::test]
    async fn notifications_before_a_subscribe_answer_are_the_old_scans() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let subscription = json!({"address": "sprt1q", "labels": [0], "start_height": 0});
        let entry = json!({"height": 5, "tx_hash": "aa".repeat(32), "tweak_key": "02".repeat(33)});
        let (stale, new) = (
            notification(&subscription, 1.0, json!([])),
            notification(&subscription, 1.0, json!([entry])),
        );
        let answered = subscription.clone();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (read, mut write) = stream.into_split();
            let mut request = String::new();
            BufReader::new(read).read_line(&mut request).await.unwrap();
            let id = serde_json::from_str::<Value>(&request).unwrap()["id"].clone();
            let response = json!({"jsonrpc": "2.0", "id": id, "result": answered});
            for line in [stale, response, new] {
                write
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .unwrap();
            }
            write
        });
        let limits = Limits {
            timeout: Duration::from_secs(30),
            response_bytes_max: 1 << 20,
        };
        let mut session = Session::connect(&address, limits).await.unwrap();
        let counters = Counters::default();
        assert_eq!(
            subscribe(&mut session, &expected(), &counters)
                .await
                .unwrap(),
            subscription
        );
        let first = session.next_notification(SP_SUBSCRIBE).await.unwrap();
        let mut found = BTreeSet::new();
        assert_eq!(
            read_notification(&first, &subscription, 0.0, &mut found),
            Ok(1.0)
        );
        assert_eq!(expected().check(&found), Ok(()));
        drop(server.await.unwrap());
    }

    #[test]
    fn activity_between_two_counts() {
        let before = ScanActivity {
            sessions: 4,
            subscribes: 4,
            completed: 1,
            notifications: 10,
            entries: 100,
        };
        let after = ScanActivity {
            subscribes: 7,
            completed: 3,
            notifications: 25,
            entries: 300,
            ..before
        };
        assert_eq!(
            after.since(&before),
            ScanActivity {
                sessions: 4,
                subscribes: 3,
                completed: 2,
                notifications: 15,
                entries: 200
            }
        );
    }
}
