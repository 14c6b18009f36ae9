//! The single owner of "who is subscribed to what": one task that consumes
//! the change feed and the sessions' subscription messages, and pushes
//! `blockchain.scripthash.subscribe` / `blockchain.headers.subscribe`
//! notifications into the sessions' bounded outgoing queues.
//!
//! Cost: a change costs one status per touched script hash that has
//! subscribers, plus one push per subscriber whose last-sent status differs;
//! there is no loop over all subscriptions, except when the feed lagged or
//! blocks were undone (`all_scripthashes`), where every subscribed status is
//! recomputed once because correctness comes first.
//!
//! Outpoint subscriptions (1.7) live in `outpoints`: a change costs
//! one outpoint status per watched outpoint whose script hash or funding
//! txid it names.
//!
//! A session with silent-payment subscriptions has a hub (`silent`): the
//! notifier hands it each change before any line of that change, and the
//! session's lines, so that the hub queues them once it has scanned the
//! changes before them (design 1.3, rule 7: the silent-payment
//! notification that tells a wallet which scripts are its own goes first).
//!
//! Races: a session computes a subscription's status before the notifier
//! hears of the subscription. Each change gets a sequence number; a session
//! reads the last processed one (`seen`) before computing, and at
//! registration the notifier recomputes the status if a change it already
//! processed after `seen` touched that script, so no update falls between.

use crate::outpoints::Outpoints;
use crate::queued::{Queued, SessionId};
use crate::silent::HubInput;
use bitcoin::OutPoint;
use osprey_answers::{Backend, Change, OutpointAnswer};
use osprey_core::{ByteBudget, Height, ScriptHash, StatusHash};
use osprey_electrum::{headers, outpoint, scripthash};
use osprey_electrum::{ScriptForm, ScriptKey};
use osprey_metrics::Metrics;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, watch, Notify};

/// Statuses computed per blocking call, so one call stays short.
const STATUS_CHUNK: usize = 1000;
/// Script hashes of recent changes kept to close the subscribe race; beyond
/// this, older changes are forgotten and late registrations recompute.
const RECENT_SCRIPTHASHES_MAX: usize = 200_000;

/// How the notifier reaches a session.
#[derive(Debug, Clone)]
pub(crate) struct SessionHandle {
    /// Serialized notification lines (without newline).
    pub tx: mpsc::Sender<Queued>,
    /// Woken when the session must close because its queue is full.
    pub kick: Arc<Notify>,
    /// Queued lines are charged to this (the server's client memory).
    pub client_memory: Arc<ByteBudget>,
    /// The session's silent-payments hub, once it has one: its lines go
    /// there instead of to `tx`.
    pub hub: Option<mpsc::Sender<HubInput>>,
}

/// Messages from sessions to the notifier.
#[derive(Debug)]
pub(crate) enum Control {
    Register {
        session: SessionId,
        handle: SessionHandle,
    },
    /// The subscriptions one request line made, each with the status the
    /// client was told; `seen` is the last change processed before they
    /// were computed. One message per line, not per subscription: a wallet
    /// subscribes its addresses in batches.
    Subscribe {
        session: SessionId,
        subscriptions: Vec<(ScriptKey, Option<StatusHash>)>,
        seen: u64,
    },
    Unsubscribe {
        session: SessionId,
        key: ScriptKey,
    },
    SubscribeHeaders {
        session: SessionId,
        seen: u64,
    },
    /// An outpoint subscription and the answer the client was told.
    SubscribeOutpoint {
        session: SessionId,
        outpoint: OutPoint,
        answer: OutpointAnswer,
        seen: u64,
    },
    UnsubscribeOutpoint {
        session: SessionId,
        outpoint: OutPoint,
    },
    /// The session has a silent-payments hub: from now on its changes and
    /// lines go there.
    AttachHub {
        session: SessionId,
        hub: mpsc::Sender<HubInput>,
    },
    Unregister {
        session: SessionId,
    },
}

/// One session's subscription to one script hash.
#[derive(Debug)]
struct Subscriber {
    last_sent: Option<StatusHash>,
    forms: Vec<ScriptForm>,
}

/// The sessions subscribed to one script hash. Nearly always one (a
/// script belongs to one wallet), so a list: a hash map per script cost an
/// allocation and two hashes per subscription, which showed as a fifth of
/// the server's CPU on a reconnecting wallet's load. A script many sessions
/// subscribe costs a scan of them (at most the session limit) each time
/// one of them subscribes, unsubscribes or leaves.
#[derive(Debug, Default)]
struct Subscribers(Vec<(SessionId, Subscriber)>);

impl Subscribers {
    fn get_mut(&mut self, session: SessionId) -> Option<&mut Subscriber> {
        self.0
            .iter_mut()
            .find(|(id, _)| *id == session)
            .map(|(_, sub)| sub)
    }

    /// The session's subscriber, added with `status` if new.
    fn entry(&mut self, session: SessionId, status: Option<StatusHash>) -> &mut Subscriber {
        let at = match self.0.iter().position(|(id, _)| *id == session) {
            Some(at) => at,
            None => {
                let subscriber = Subscriber {
                    last_sent: status,
                    forms: Vec::new(),
                };
                self.0.push((session, subscriber));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    fn remove(&mut self, session: SessionId) {
        if let Some(at) = self.0.iter().position(|(id, _)| *id == session) {
            self.0.swap_remove(at);
        }
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&SessionId, &mut Subscriber)> {
        self.0.iter_mut().map(|(id, sub)| (&*id, sub))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Debug)]
struct SessionEntry {
    handle: SessionHandle,
    scripts: HashSet<ScriptHash>,
    outpoints: HashSet<OutPoint>,
}

/// Which script hashes recent changes touched, by sequence number.
#[derive(Debug, Default)]
struct Recent {
    touched: HashMap<ScriptHash, u64>,
    log: VecDeque<(u64, Vec<ScriptHash>)>,
    held: usize,
    /// Changes up to this one may have been forgotten.
    forgotten_through: u64,
    /// The change that last moved the tip.
    tip_at: u64,
}

impl Recent {
    fn record(&mut self, seq: u64, scripthashes: &[ScriptHash]) {
        for sh in scripthashes {
            self.touched.insert(*sh, seq);
        }
        self.log.push_back((seq, scripthashes.to_vec()));
        self.held += scripthashes.len();
        while self.held > RECENT_SCRIPTHASHES_MAX && self.log.len() > 1 {
            let Some((old_seq, old)) = self.log.pop_front() else {
                break;
            };
            self.held -= old.len();
            for sh in old {
                if self.touched.get(&sh) == Some(&old_seq) {
                    self.touched.remove(&sh);
                }
            }
            self.forgotten_through = old_seq;
        }
    }

    /// Forgets everything: any registration older than `seq` recomputes.
    fn everything_changed(&mut self, seq: u64) {
        self.touched.clear();
        self.log.clear();
        self.held = 0;
        self.forgotten_through = seq;
    }

    fn changed_since(&self, sh: &ScriptHash, seen: u64) -> bool {
        seen < self.forgotten_through || self.touched.get(sh).is_some_and(|&s| s > seen)
    }
}

/// The notifier task's state.
pub(crate) struct Notifier {
    backend: Arc<dyn Backend>,
    changes: broadcast::Receiver<Arc<Change>>,
    control: mpsc::Receiver<Control>,
    /// The last change processed, read by sessions before computing.
    processed: Arc<AtomicU64>,
    seq: u64,
    recent: Recent,
    tip: Option<(Height, [u8; 80])>,
    by_script: HashMap<ScriptHash, Subscribers>,
    outpoints: Outpoints,
    sessions: HashMap<SessionId, SessionEntry>,
    header_sessions: HashSet<SessionId>,
    /// The sessions with a silent-payments hub, told of every change.
    hubs: HashMap<SessionId, mpsc::Sender<HubInput>>,
    /// (session, script hash) pairs in `by_script`.
    subscriptions: usize,
    metrics: Arc<Metrics>,
}

/// Queues a line for a session; false if the session is gone or too slow
/// (then it is kicked: it closes rather than buffering without bound). A
/// line shared by many sessions (a new header) is charged to each: the
/// budget errs on the safe side.
/// A session with a silent-payments hub has its lines go through the hub,
/// whose queue is as bounded as the session's.
fn push(handle: &SessionHandle, line: &Arc<str>) -> bool {
    let Some(queued) = Queued::charged(Arc::clone(line), &handle.client_memory) else {
        handle.kick.notify_one();
        return false;
    };
    let sent = match &handle.hub {
        Some(hub) => hub.try_send(HubInput::Line(queued)).map_err(|e| e.into()),
        None => handle.tx.try_send(queued).map_err(|e| e.into()),
    };
    kept_up(sent, &handle.kick)
}

/// Whether a message reached a session's queue: a full queue kicks the
/// session (it closes rather than buffering without bound); a closed one
/// means it is gone.
fn kept_up(sent: Result<(), QueueError>, kick: &Notify) -> bool {
    match sent {
        Ok(()) => true,
        Err(QueueError::Full) => {
            kick.notify_one();
            false
        }
        Err(QueueError::Closed) => false,
    }
}

/// Why a message did not reach a session's queue.
enum QueueError {
    Full,
    Closed,
}

impl<T> From<mpsc::error::TrySendError<T>> for QueueError {
    fn from(e: mpsc::error::TrySendError<T>) -> Self {
        match e {
            mpsc::error::TrySendError::Full(_) => QueueError::Full,
            mpsc::error::TrySendError::Closed(_) => QueueError::Closed,
        }
    }
}

impl Notifier {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        changes: broadcast::Receiver<Arc<Change>>,
        control: mpsc::Receiver<Control>,
        processed: Arc<AtomicU64>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Notifier {
            backend,
            changes,
            control,
            processed,
            seq: 0,
            recent: Recent::default(),
            tip: None,
            by_script: HashMap::new(),
            outpoints: Outpoints::default(),
            sessions: HashMap::new(),
            header_sessions: HashSet::new(),
            hubs: HashMap::new(),
            subscriptions: 0,
            metrics,
        }
    }

    /// Publishes the subscription counts (after each change to them).
    fn count_subscriptions(&self) {
        let gauges = &self.metrics.sessions;
        gauges
            .subscribed_scripthashes
            .set(i64::try_from(self.by_script.len()).unwrap_or(i64::MAX));
        gauges
            .subscriptions
            .set(i64::try_from(self.subscriptions).unwrap_or(i64::MAX));
    }

    /// Runs until shutdown or until every session handle is gone.
    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut feed_open = true;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                control = self.control.recv() => match control {
                    Some(control) => self.handle_control(control).await,
                    None => break,
                },
                change = self.changes.recv(), if feed_open => match change {
                    Ok(change) => {
                        self.tell_hubs(|| HubInput::Change(Arc::clone(&change)));
                        self.handle_change(&change).await;
                    }
                    Err(RecvError::Lagged(skipped)) => {
                        tracing::warn!(skipped, "change feed lagged: recomputing every subscribed status");
                        self.tell_hubs(|| HubInput::Resync);
                        self.resync().await;
                    }
                    Err(RecvError::Closed) => {
                        tracing::info!("change feed closed: no more notifications");
                        feed_open = false;
                    }
                },
            }
        }
    }

    /// Hands every hub a change, before any line of it is queued.
    fn tell_hubs(&mut self, input: impl Fn() -> HubInput) {
        let mut gone = Vec::new();
        for (id, hub) in &self.hubs {
            let kick = self.sessions.get(id).map(|entry| &entry.handle.kick);
            let sent = hub.try_send(input()).map_err(QueueError::from);
            let kept = match kick {
                Some(kick) => kept_up(sent, kick),
                None => false,
            };
            if !kept {
                gone.push(*id);
            }
        }
        for id in gone {
            self.drop_session(id);
        }
    }

    async fn handle_change(&mut self, change: &Change) {
        self.seq += 1;
        let seq = self.seq;
        let all = change.all_scripthashes;
        if all {
            self.recent.everything_changed(seq);
        } else {
            self.recent.record(seq, &change.scripthashes);
        }
        // A tip announced already (during the first sync, each commit's
        // tip is announced as it comes, and the sync step's change names
        // the last one again) is not sent twice.
        let moved = change.new_tip.filter(|tip| Some(*tip) != self.tip);
        if let Some(tip) = change.new_tip {
            self.tip = Some(tip);
            self.recent.tip_at = seq;
        }
        // Published only after `recent` knows the change (see module docs).
        self.processed.store(seq, Ordering::Release);
        if let Some((height, header)) = moved {
            self.notify_headers(height, &header);
        }
        let targets: Vec<ScriptHash> = if all {
            tracing::info!(
                subscribed = self.by_script.len(),
                "blocks undone: recomputing every subscribed status"
            );
            self.by_script.keys().copied().collect()
        } else {
            let mut seen = HashSet::new();
            change
                .scripthashes
                .iter()
                .filter(|sh| self.by_script.contains_key(*sh) && seen.insert(**sh))
                .copied()
                .collect()
        };
        self.refresh(targets).await;
        let outpoints = self.outpoints.touched(change);
        self.refresh_outpoints(outpoints).await;
    }

    /// Recovers from a lagged feed: the tip and every subscribed status.
    async fn resync(&mut self) {
        self.seq += 1;
        self.recent.everything_changed(self.seq);
        let backend = Arc::clone(&self.backend);
        let tip = tokio::task::spawn_blocking(move || {
            let (height, _) = backend.tip();
            backend.header(height).map(|header| (height, header))
        })
        .await
        .ok()
        .flatten();
        let moved = tip.is_some() && tip != self.tip;
        if moved {
            self.tip = tip;
            self.recent.tip_at = self.seq;
        }
        self.processed.store(self.seq, Ordering::Release);
        if let (true, Some((height, header))) = (moved, tip) {
            self.notify_headers(height, &header);
        }
        let targets = self.by_script.keys().copied().collect();
        self.refresh(targets).await;
        let outpoints = self.outpoints.all();
        self.refresh_outpoints(outpoints).await;
    }

    fn notify_headers(&mut self, height: Height, header: &[u8; 80]) {
        let line: Arc<str> = headers::notification(height, header).into();
        let mut gone = Vec::new();
        for id in &self.header_sessions {
            if let Some(entry) = self.sessions.get(id) {
                if !push(&entry.handle, &line) {
                    gone.push(*id);
                }
            }
        }
        for id in gone {
            self.drop_session(id);
        }
    }

    /// Computes the statuses of `targets` (each once) and notifies every
    /// subscriber whose last-sent status differs.
    async fn refresh(&mut self, targets: Vec<ScriptHash>) {
        for chunk in targets.chunks(STATUS_CHUNK) {
            let backend = Arc::clone(&self.backend);
            let chunk = chunk.to_vec();
            // On every core: after a block, the sooner the new statuses
            // reach the wallets the better, and sessions never wait on this
            // (their replies are written before they tell the notifier).
            let statuses = tokio::task::spawn_blocking(move || {
                use rayon::prelude::*;
                chunk
                    .into_par_iter()
                    .map(|sh| (sh, backend.status(&sh)))
                    .collect::<Vec<_>>()
            })
            .await;
            let statuses = match statuses {
                Ok(statuses) => statuses,
                Err(e) => {
                    tracing::error!(error = %e, "status computation panicked");
                    continue;
                }
            };
            let mut gone = Vec::new();
            for (sh, status) in statuses {
                let status = match status {
                    Ok(status) => status,
                    Err(e) => {
                        tracing::warn!(scripthash = %sh, error = %e, "cannot compute status; not notified");
                        continue;
                    }
                };
                let Some(subscribers) = self.by_script.get_mut(&sh) else {
                    continue;
                };
                // One serialized line per form, shared by every session.
                let mut lines: Vec<(ScriptForm, Arc<str>)> = Vec::new();
                for (id, sub) in subscribers.iter_mut() {
                    if sub.last_sent == status {
                        continue;
                    }
                    sub.last_sent = status;
                    let Some(entry) = self.sessions.get(id) else {
                        continue;
                    };
                    for form in &sub.forms {
                        let line = match lines.iter().find(|(f, _)| f == form) {
                            Some((_, line)) => Arc::clone(line),
                            None => {
                                let key = ScriptKey {
                                    scripthash: sh,
                                    form: form.clone(),
                                };
                                let line: Arc<str> = scripthash::notification(&key, status).into();
                                lines.push((form.clone(), Arc::clone(&line)));
                                line
                            }
                        };
                        if !push(&entry.handle, &line) {
                            gone.push(*id);
                            break;
                        }
                    }
                }
            }
            for id in gone {
                self.drop_session(id);
            }
        }
    }

    /// Computes the statuses of `targets` and notifies every subscriber
    /// that was told another one.
    async fn refresh_outpoints(&mut self, targets: Vec<OutPoint>) {
        for chunk in targets.chunks(STATUS_CHUNK) {
            let backend = Arc::clone(&self.backend);
            let chunk: Vec<(OutPoint, Option<ScriptHash>)> = chunk
                .iter()
                .map(|o| (*o, self.outpoints.scripthash(o)))
                .collect();
            let answers = tokio::task::spawn_blocking(move || {
                use rayon::prelude::*;
                chunk
                    .into_par_iter()
                    .map(|(o, hint)| (o, backend.outpoint_status(&o, hint.as_ref())))
                    .collect::<Vec<_>>()
            })
            .await;
            let answers = match answers {
                Ok(answers) => answers,
                Err(e) => {
                    tracing::error!(error = %e, "outpoint status computation panicked");
                    continue;
                }
            };
            let mut gone = Vec::new();
            for (o, answer) in answers {
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(e) => {
                        tracing::warn!(outpoint = %o, error = %e, "cannot compute outpoint status; not notified");
                        continue;
                    }
                };
                let told = self.outpoints.update(o, &answer);
                if told.is_empty() {
                    continue;
                }
                let line: Arc<str> = outpoint::notification(&o, &answer.status).into();
                for id in told {
                    if let Some(entry) = self.sessions.get(&id) {
                        if !push(&entry.handle, &line) {
                            gone.push(id);
                        }
                    }
                }
            }
            for id in gone {
                self.drop_session(id);
            }
        }
    }

    async fn handle_control(&mut self, control: Control) {
        match control {
            Control::Register { session, handle } => {
                self.sessions.insert(
                    session,
                    SessionEntry {
                        handle,
                        scripts: HashSet::new(),
                        outpoints: HashSet::new(),
                    },
                );
            }
            Control::Subscribe {
                session,
                subscriptions,
                seen,
            } => {
                let Some(entry) = self.sessions.get_mut(&session) else {
                    return;
                };
                let mut changed = Vec::new();
                for (key, status) in subscriptions {
                    if entry.scripts.insert(key.scripthash) {
                        self.subscriptions += 1;
                    }
                    let sub = self
                        .by_script
                        .entry(key.scripthash)
                        .or_default()
                        .entry(session, status);
                    sub.last_sent = status;
                    if !sub.forms.contains(&key.form) {
                        sub.forms.push(key.form);
                    }
                    if self.recent.changed_since(&key.scripthash, seen) {
                        changed.push(key.scripthash);
                    }
                }
                self.count_subscriptions();
                if !changed.is_empty() {
                    self.refresh(changed).await;
                }
            }
            Control::Unsubscribe { session, key } => {
                let Some(subscribers) = self.by_script.get_mut(&key.scripthash) else {
                    return;
                };
                if let Some(sub) = subscribers.get_mut(session) {
                    sub.forms.retain(|f| *f != key.form);
                    if sub.forms.is_empty() {
                        subscribers.remove(session);
                        if let Some(entry) = self.sessions.get_mut(&session) {
                            if entry.scripts.remove(&key.scripthash) {
                                self.subscriptions -= 1;
                            }
                        }
                    }
                }
                if subscribers.is_empty() {
                    self.by_script.remove(&key.scripthash);
                }
                self.count_subscriptions();
            }
            Control::SubscribeHeaders { session, seen } => {
                let Some(entry) = self.sessions.get(&session) else {
                    return;
                };
                self.header_sessions.insert(session);
                if self.recent.tip_at > seen {
                    if let Some((height, header)) = self.tip {
                        let line: Arc<str> = headers::notification(height, &header).into();
                        if !push(&entry.handle, &line) {
                            self.drop_session(session);
                        }
                    }
                }
            }
            Control::SubscribeOutpoint {
                session,
                outpoint,
                answer,
                seen,
            } => {
                let Some(entry) = self.sessions.get_mut(&session) else {
                    return;
                };
                entry.outpoints.insert(outpoint);
                self.outpoints.subscribe(session, outpoint, &answer);
                // Any change processed since the answer was computed may
                // have named its txid (a funding transaction arriving), not
                // only its script: recompute (one status; rare).
                if self.seq > seen {
                    self.refresh_outpoints(vec![outpoint]).await;
                }
            }
            Control::UnsubscribeOutpoint { session, outpoint } => {
                if let Some(entry) = self.sessions.get_mut(&session) {
                    entry.outpoints.remove(&outpoint);
                }
                self.outpoints.unsubscribe(session, &outpoint);
            }
            Control::AttachHub { session, hub } => {
                let Some(entry) = self.sessions.get_mut(&session) else {
                    return;
                };
                // Every change from here on reaches the hub (before its
                // lines); it learns where that starts.
                if kept_up(
                    hub.try_send(HubInput::Attached).map_err(QueueError::from),
                    &entry.handle.kick,
                ) {
                    entry.handle.hub = Some(hub.clone());
                    self.hubs.insert(session, hub);
                } else {
                    self.drop_session(session);
                }
            }
            Control::Unregister { session } => self.drop_session(session),
        }
    }

    /// Forgets a session and all its subscriptions (cost: its own count).
    fn drop_session(&mut self, session: SessionId) {
        let Some(entry) = self.sessions.remove(&session) else {
            return;
        };
        self.subscriptions -= entry.scripts.len();
        for sh in entry.scripts {
            if let Some(subscribers) = self.by_script.get_mut(&sh) {
                subscribers.remove(session);
                if subscribers.is_empty() {
                    self.by_script.remove(&sh);
                }
            }
        }
        for outpoint in entry.outpoints {
            self.outpoints.unsubscribe(session, &outpoint);
        }
        self.header_sessions.remove(&session);
        self.hubs.remove(&session);
        self.count_subscriptions();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;
    use osprey_answers::HistoryEntry;
    use osprey_electrum::fake::FakeBackend;

    fn notifier(backend: &Arc<FakeBackend>) -> (Notifier, Arc<AtomicU64>) {
        let (_feed_tx, feed_rx) = broadcast::channel(8);
        let (_control_tx, control_rx) = mpsc::channel(8);
        let processed = Arc::new(AtomicU64::new(0));
        let backend: Arc<dyn Backend> = backend.clone();
        (
            Notifier::new(
                backend,
                feed_rx,
                control_rx,
                Arc::clone(&processed),
                Arc::default(),
            ),
            processed,
        )
    }

    async fn register(
        n: &mut Notifier,
        id: SessionId,
        queue: usize,
    ) -> (mpsc::Receiver<Queued>, Arc<Notify>) {
        let (tx, rx) = mpsc::channel(queue);
        let kick = Arc::new(Notify::new());
        n.handle_control(Control::Register {
            session: id,
            handle: SessionHandle {
                tx,
                kick: Arc::clone(&kick),
                client_memory: ByteBudget::new(usize::MAX),
                hub: None,
            },
        })
        .await;
        (rx, kick)
    }

    fn set_history(backend: &FakeBackend, sh: ScriptHash, txid_byte: u8) {
        backend.update(|s| {
            let entry = HistoryEntry {
                txid: bitcoin::Txid::from_byte_array([txid_byte; 32]),
                height: 0,
                fee: None,
            };
            s.histories.insert(sh, vec![entry]);
        });
    }

    fn key(sh: ScriptHash) -> ScriptKey {
        ScriptKey {
            scripthash: sh,
            form: ScriptForm::ScriptHash,
        }
    }

    /// A change processed between a session computing a status and the
    /// notifier hearing of the subscription still reaches the client.
    #[tokio::test]
    async fn subscription_registered_after_a_touching_change_is_recomputed() {
        let backend = Arc::new(FakeBackend::with_tip(10));
        let (mut n, processed) = notifier(&backend);
        let (mut rx, _kick) = register(&mut n, 1, 8).await;
        let sh = ScriptHash([1; 32]);
        // The session reads `seen` and computes status None...
        let seen = processed.load(Ordering::Acquire);
        // ...then a transaction arrives and its change is processed first.
        set_history(&backend, sh, 7);
        n.handle_change(&Change {
            scripthashes: vec![sh],
            ..Change::default()
        })
        .await;
        assert!(rx.try_recv().is_err(), "nobody was subscribed yet");
        n.handle_control(Control::Subscribe {
            session: 1,
            subscriptions: vec![(key(sh), None)],
            seen,
        })
        .await;
        let line = rx.try_recv().expect("the missed update is sent").line;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["params"][0], sh.to_string());
        assert!(v["params"][1].is_string());
        // A registration computed after the change costs no recomputation.
        let calls = backend.update(|s| s.status_calls);
        let seen = processed.load(Ordering::Acquire);
        let status = backend.status(&sh).unwrap();
        n.handle_control(Control::Subscribe {
            session: 1,
            subscriptions: vec![(key(sh), status)],
            seen,
        })
        .await;
        assert_eq!(
            backend.update(|s| s.status_calls),
            calls + 1,
            "only the session's own computation"
        );
        assert!(rx.try_recv().is_err());
    }

    /// A session whose queue is full is kicked and forgotten.
    #[tokio::test]
    async fn a_session_that_cannot_keep_up_is_dropped() {
        let backend = Arc::new(FakeBackend::with_tip(10));
        let (mut n, _) = notifier(&backend);
        let (_rx, kick) = register(&mut n, 1, 1).await;
        let sh = ScriptHash([1; 32]);
        n.handle_control(Control::Subscribe {
            session: 1,
            subscriptions: vec![(key(sh), None)],
            seen: 0,
        })
        .await;
        for txid_byte in [1, 2] {
            set_history(&backend, sh, txid_byte);
            n.handle_change(&Change {
                scripthashes: vec![sh],
                ..Change::default()
            })
            .await;
        }
        tokio::time::timeout(std::time::Duration::from_secs(1), kick.notified())
            .await
            .expect("kicked");
        assert!(n.sessions.is_empty());
        assert!(n.by_script.is_empty(), "its subscriptions are gone too");
    }

    /// Sessions sharing a script are notified, unsubscribed and dropped
    /// each on its own; the script is forgotten with its last subscriber.
    #[tokio::test]
    async fn sessions_sharing_a_script_come_and_go_on_their_own() {
        let backend = Arc::new(FakeBackend::with_tip(10));
        let (mut n, _) = notifier(&backend);
        let sh = ScriptHash([1; 32]);
        let mut queues = Vec::new();
        for session in 1..=3 {
            let (rx, _kick) = register(&mut n, session, 8).await;
            queues.push(rx);
            n.handle_control(Control::Subscribe {
                session,
                subscriptions: vec![(key(sh), None)],
                seen: 0,
            })
            .await;
        }
        n.handle_control(Control::Unsubscribe {
            session: 2,
            key: key(sh),
        })
        .await;
        n.handle_control(Control::Unregister { session: 3 }).await;
        set_history(&backend, sh, 4);
        n.handle_change(&Change {
            scripthashes: vec![sh],
            ..Change::default()
        })
        .await;
        let line = queues[0].try_recv().expect("session 1 is notified").line;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["params"][0], sh.to_string());
        assert!(queues[1].try_recv().is_err(), "session 2 unsubscribed");
        assert!(queues[2].try_recv().is_err(), "session 3 is gone");
        assert_eq!(n.subscriptions, 1);
        n.handle_control(Control::Unregister { session: 1 }).await;
        assert!(
            n.by_script.is_empty(),
            "the last subscriber took the script"
        );
        assert_eq!(n.subscriptions, 0);
    }

    #[tokio::test]
    async fn undone_blocks_recompute_every_subscription() {
        let backend = Arc::new(FakeBackend::with_tip(10));
        let (mut n, _) = notifier(&backend);
        let (mut rx, _kick) = register(&mut n, 1, 8).await;
        let (a, b) = (ScriptHash([1; 32]), ScriptHash([2; 32]));
        for sh in [a, b] {
            n.handle_control(Control::Subscribe {
                session: 1,
                subscriptions: vec![(key(sh), None)],
                seen: 0,
            })
            .await;
        }
        set_history(&backend, b, 3);
        n.handle_change(&Change {
            all_scripthashes: true,
            ..Change::default()
        })
        .await;
        let v: serde_json::Value = serde_json::from_str(&rx.try_recv().unwrap().line).unwrap();
        assert_eq!(v["params"][0], b.to_string());
        assert!(rx.try_recv().is_err(), "a's status did not change");
    }

    #[test]
    fn recent_changes_close_the_subscribe_race() {
        let mut r = Recent::default();
        let a = ScriptHash([1; 32]);
        let b = ScriptHash([2; 32]);
        r.record(1, &[a]);
        r.record(2, &[b]);
        assert!(!r.changed_since(&a, 1), "change 1 was seen");
        assert!(r.changed_since(&a, 0));
        assert!(r.changed_since(&b, 1));
        assert!(!r.changed_since(&ScriptHash([3; 32]), 0));
        r.everything_changed(3);
        assert!(r.changed_since(&ScriptHash([3; 32]), 2));
        assert!(!r.changed_since(&ScriptHash([3; 32]), 3));
    }

    #[test]
    fn recent_forgets_old_changes_but_stays_correct() {
        let mut r = Recent::default();
        let many: Vec<ScriptHash> = (0..RECENT_SCRIPTHASHES_MAX as u32)
            .map(|i| {
                let mut b = [0u8; 32];
                b[..4].copy_from_slice(&i.to_le_bytes());
                ScriptHash(b)
            })
            .collect();
        r.record(1, &many);
        r.record(2, &[ScriptHash([0xff; 32])]);
        assert_eq!(r.log.len(), 1, "change 1 was evicted");
        assert!(r.held <= RECENT_SCRIPTHASHES_MAX);
        assert!(
            r.changed_since(&ScriptHash([0xee; 32]), 0),
            "unknown past: recompute"
        );
        assert!(!r.changed_since(&ScriptHash([0xee; 32]), 1));
        assert!(r.changed_since(&ScriptHash([0xff; 32]), 1));
    }
}
