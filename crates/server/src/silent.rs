//! One session's silent-payment subscriptions and their scans
//! (docs/silent-payments.md, 1.3 and 3.6): the hub. A session gets one at
//! its first `blockchain.silentpayments.subscribe`; it owns the
//! subscriptions, their keys and one task, and goes with the session.
//!
//! Each subscription first scans its historical range in chunks of
//! [`CHUNK_RECORDS`] records, one chunk at a time per hub, each holding a
//! handler slot taken with `Scheduler::acquire_scan` (the greedy class,
//! queued by the session's scan cost, never charged to its request cost)
//! and run on a scan thread at the lowest CPU priority
//! (`scan_threads.rs`). Matches go out in pages
//! of [`PAGE_ENTRIES`]; a notification goes out at least every
//! [`HEARTBEAT`] even with nothing found, with the fraction of the range's
//! records scanned. The last one, progress 1.0, adds the mempool's
//! matches; it is sent again once, with no history, a little later, and no
//! notification goes out in the first moments of a subscription (Sparrow's
//! threading: [`FIRST_NOTIFICATION_DELAY`]). Then the subscription follows the chain: the blocks
//! of each change (from the fork after a reorg, found by the block hashes
//! it remembers), the mempool transactions it names, sent only when
//! something matched, and a mempool transaction never twice (nor again
//! when it confirms).
//!
//! Order: the hub writes into the session's queue, which the session reads
//! only after the subscribe's response is written, so the response comes
//! first. The notifier hands the hub every change before the lines of that
//! change, and the session's lines; the hub queues a line once its
//! following subscriptions have scanned the changes before it (rule 7).
//! Subscriptions still in their historical scan do not hold lines back:
//! they take up the chain where their range ends.
//!
//! Back-pressure: no chunk starts while the session's queue is full, and a
//! notification waits for room in it; a client that reads slowly slows
//! only its own scans. Every line is charged to the client memory budget
//! until written, as the notifier's are; the subscription itself was
//! charged at subscribe (`osprey_electrum::session::SP_SUBSCRIPTION_BYTES`).
//!
//! Keys: `ScanKeys` live in the subscription (shared only with the chunk
//! that scans with them); unsubscribing, subscribing again and the end of
//! the session drop them.

use crate::fair::{Scheduler, SessionCost};
use crate::queued::Queued;
use bitcoin::hashes::{sha256d, Hash};
use bitcoin::{BlockHash, Txid};
use osprey_answers::{Backend, Change, Error, SpChunk, SpCursor, SpMatch};
use osprey_core::{ByteBudget, Height};
use osprey_electrum::SpSubscription;
use osprey_metrics::Metrics;
use osprey_sp::ScanKeys;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// Records per chunk: about 65 ms of a core at the kernel's 63 µs.
const CHUNK_RECORDS: usize = 1000;
/// Entries per notification (Frigate's `HISTORY_PAGE_SIZE`).
const PAGE_ENTRIES: usize = 100;
/// A historical scan says how far it is at least this often (Frigate's
/// progress poll), so a client can tell a long scan from a dead one.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(5);
/// Blocks below the tip whose hashes a subscription keeps, to find where a
/// reorg forked. Deeper reorgs rescan from the oldest kept.
const REORG_DEPTH_MAX: u32 = 100;
/// A historical scan's progress stays below this until it ends: 1.0 tells
/// Sparrow the scan is complete.
const PROGRESS_BEFORE_END_MAX: f64 = 0.999;
/// No notification of a new subscription goes out sooner than this after
/// it: Sparrow learns the subscription's start height only once the
/// subscribe call has returned to its calling thread, while its reader
/// thread goes on reading, and it drops every notification it reads before
/// (sparrowwallet/sparrow `SubscriptionService.silentPaymentsUpdate`, the
/// `serverStart` check). A scan that ends at once (a short range, a
/// reconnect near the tip) would otherwise lose its pages and its one
/// progress 1.0, and Sparrow would wait for the scan forever.
const FIRST_NOTIFICATION_DELAY: Duration = Duration::from_millis(500);
/// The final notification (progress 1.0) goes out once more, with no
/// history, this long after it: should Sparrow's calling thread be held up
/// past [`FIRST_NOTIFICATION_DELAY`] and the first one dropped, the scan
/// still completes. Sparrow takes the repeat, once complete, as a progress
/// event only: with no history it changes nothing.
const FINAL_REPEAT_DELAY: Duration = Duration::from_secs(2);

/// What reaches a hub, in order: from its session (subscriptions) and from
/// the notifier (changes and the session's lines).
#[derive(Debug)]
pub(crate) enum HubInput {
    Subscribe(SpSubscription),
    Unsubscribe(String),
    /// The notifier has the hub: every change after this reaches it.
    Attached,
    Change(Arc<Change>),
    /// The change feed lagged: anything may have changed.
    Resync,
    /// A notification line of the session, queued after the changes
    /// before it are scanned.
    Line(Queued),
}

/// What every hub shares.
pub(crate) struct HubContext {
    pub backend: Arc<dyn Backend>,
    pub scheduler: Arc<Scheduler>,
    pub client_memory: Arc<ByteBudget>,
    pub metrics: Arc<Metrics>,
}

/// A session's hold on its hub: dropping it ends the hub, its scans and
/// its keys.
pub(crate) struct SpHub {
    input: mpsc::Sender<HubInput>,
    task: JoinHandle<()>,
}

impl Drop for SpHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SpHub {
    /// Starts a hub writing to a session's `queue`, `kick`ing the session
    /// when it cannot keep up; it takes at most `capacity` inputs ahead.
    pub fn start(
        ctx: Arc<HubContext>,
        queue: mpsc::Sender<Queued>,
        kick: Arc<Notify>,
        capacity: usize,
    ) -> SpHub {
        let (input, received) = mpsc::channel(capacity);
        let hub = Hub {
            ctx,
            queue,
            kick,
            subs: BTreeMap::new(),
            backlog: VecDeque::new(),
            attached: false,
            scan_cost: SessionCost::new(),
            running: None,
            last_turn: None,
            generations: 0,
        };
        SpHub {
            input,
            task: tokio::spawn(hub.run(received)),
        }
    }

    /// Where the notifier sends changes and lines.
    pub fn input(&self) -> mpsc::Sender<HubInput> {
        self.input.clone()
    }

    /// Hands the hub a subscription change; false if it cannot take more
    /// (its session is not keeping up) or is gone.
    pub fn send(&self, input: HubInput) -> bool {
        self.input.try_send(input).is_ok()
    }
}

/// One subscription's state.
struct Sub {
    subscription: SpSubscription,
    /// Tells a chunk of this subscription from one of an earlier
    /// subscription to the same address.
    generation: u64,
    phase: Phase,
    /// Matches not sent yet.
    page: Vec<SpMatch>,
    /// When the last notification went out: the next heartbeat is due
    /// `HEARTBEAT` later.
    last_sent: Instant,
    /// No notification before this ([`FIRST_NOTIFICATION_DELAY`]).
    quiet_until: Instant,
    /// When the final notification is sent again ([`FINAL_REPEAT_DELAY`]).
    repeat_final_at: Option<Instant>,
    /// The progress last sent: it never goes back.
    progress: f64,
    /// Hashes of recent blocks scanned (or being scanned), by height.
    recent: BTreeMap<Height, BlockHash>,
    /// Mempool transactions sent: not sent again while in the mempool, nor
    /// when they confirm.
    sent_mempool: HashSet<Txid>,
    /// After a failed chunk, no other before this.
    retry_at: Option<Instant>,
}

enum Phase {
    Historical {
        cursor: SpCursor,
        /// Bytes of records in the whole range, known from the first chunk.
        range_bytes: Option<u64>,
        done: bool,
    },
    /// Following the chain: blocks up to `scanned_to` are scanned.
    Live { scanned_to: Height },
}

/// The chunk in flight: its subscription, and the scan with how long it
/// held its slot.
struct Running {
    address: String,
    generation: u64,
    task: JoinHandle<(Result<SpChunk, Error>, Duration)>,
}

struct Hub {
    ctx: Arc<HubContext>,
    queue: mpsc::Sender<Queued>,
    kick: Arc<Notify>,
    subs: BTreeMap<String, Sub>,
    /// Changes and lines from the notifier, in order, waiting for the
    /// running chunk (one chunk at a time) or for a change's scans.
    backlog: VecDeque<HubInput>,
    attached: bool,
    /// What the session's scans cost lately (apart from its requests).
    scan_cost: SessionCost,
    running: Option<Running>,
    /// The subscription whose historical chunk ran last (turns go round).
    last_turn: Option<String>,
    generations: u64,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(running) = &self.running {
            running.task.abort();
        }
        self.ctx
            .metrics
            .silent_payments
            .subscriptions
            .sub(self.subs.len() as i64);
    }
}

/// Why the hub stops: its session is gone.
struct Gone;

/// `1 - left / total`, or 0 for an empty range.
fn fraction_done(left: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    1.0 - left as f64 / total as f64
}

fn block_hash(header: &[u8; 80]) -> BlockHash {
    BlockHash::from_raw_hash(sha256d::Hash::hash(header))
}

impl Hub {
    async fn run(mut self, mut input: mpsc::Receiver<HubInput>) {
        // Ends when the session is gone (its queue closed, or its handle
        // dropped: then this task is aborted).
        let _ = self.serve(&mut input).await;
    }

    async fn serve(&mut self, input: &mut mpsc::Receiver<HubInput>) -> Result<(), Gone> {
        loop {
            if self.running.is_none() {
                while let Some(next) = self.backlog.pop_front() {
                    self.take(next).await?;
                }
                self.finish_scans().await?;
                self.start_chunk().await?;
            }
            let heartbeat = self.next_heartbeat();
            let retry = self.next_retry();
            tokio::select! {
                received = input.recv() => match received {
                    Some(received) => self.receive(received).await?,
                    None => return Err(Gone),
                },
                finished = async { (&mut self.running.as_mut().expect("guarded").task).await },
                    if self.running.is_some() =>
                {
                    let running = self.running.take().expect("guarded");
                    match finished {
                        Ok((result, held)) => self.chunk_done(running, result, held).await?,
                        Err(e) => tracing::error!(error = %e, "a silent-payments scan chunk failed"),
                    }
                }
                _ = sleep_until(heartbeat.unwrap_or_else(Instant::now)), if heartbeat.is_some() => {
                    self.heartbeats().await?;
                }
                _ = sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {
                    let now = Instant::now();
                    for sub in self.subs.values_mut() {
                        sub.retry_at = sub.retry_at.filter(|at| *at > now);
                    }
                }
            }
        }
    }

    /// Takes an input as it arrives: subscriptions at once; a line at
    /// once unless changes wait before it; changes in turn.
    async fn receive(&mut self, input: HubInput) -> Result<(), Gone> {
        match input {
            HubInput::Subscribe(subscription) => self.subscribe(subscription),
            HubInput::Unsubscribe(address) => {
                if self.subs.remove(&address).is_some() {
                    self.ctx.metrics.silent_payments.subscriptions.dec();
                }
            }
            HubInput::Attached => self.attached = true,
            HubInput::Line(queued) if self.backlog.is_empty() => self.forward(queued).await?,
            other => self.backlog.push_back(other),
        }
        Ok(())
    }

    /// A new subscription, or one made again: either way its historical
    /// scan starts (again) from its start height.
    fn subscribe(&mut self, subscription: SpSubscription) {
        self.generations += 1;
        let done = subscription.start_height > subscription.end_height;
        let sub = Sub {
            phase: Phase::Historical {
                cursor: SpCursor::at_height(subscription.start_height),
                range_bytes: None,
                done,
            },
            subscription,
            generation: self.generations,
            page: Vec::new(),
            last_sent: Instant::now(),
            quiet_until: Instant::now() + FIRST_NOTIFICATION_DELAY,
            repeat_final_at: None,
            progress: 0.0,
            recent: BTreeMap::new(),
            sent_mempool: HashSet::new(),
            retry_at: None,
        };
        let address = sub.subscription.address.clone();
        if self.subs.insert(address, sub).is_none() {
            self.ctx.metrics.silent_payments.subscriptions.inc();
        }
    }

    /// Handles what waited in the backlog, in order.
    async fn take(&mut self, input: HubInput) -> Result<(), Gone> {
        match input {
            HubInput::Line(queued) => self.forward(queued).await,
            HubInput::Change(change) => self.follow(Mempool::Named(&change.txids)).await,
            HubInput::Resync => self.follow(Mempool::All).await,
            other => self.receive(other).await,
        }
    }

    /// Queues a line for the session, waiting for room.
    async fn forward(&self, queued: Queued) -> Result<(), Gone> {
        self.queue.send(queued).await.map_err(|_| Gone)
    }

    /// Sends a notification of `address`'s subscription.
    async fn notify(
        &mut self,
        address: &str,
        progress: f64,
        history: &[SpMatch],
    ) -> Result<(), Gone> {
        let Some(sub) = self.subs.get_mut(address) else {
            return Ok(());
        };
        if sub.quiet_until > Instant::now() {
            // Rare (a new subscription's scan ends within the delay) and
            // short: the hub waits with it.
            let until = sub.quiet_until;
            sleep_until(until).await;
        }
        let Some(sub) = self.subs.get_mut(address) else {
            return Ok(());
        };
        sub.progress = sub.progress.max(progress);
        sub.last_sent = Instant::now();
        let line: Arc<str> = sub.subscription.notification(sub.progress, history).into();
        self.ctx
            .metrics
            .silent_payments
            .matches
            .inc_by(history.len() as u64);
        let Some(queued) = Queued::charged(line, &self.ctx.client_memory) else {
            // As the notifier does: a session the budget cannot hold
            // closes rather than wait.
            self.kick.notify_one();
            return Err(Gone);
        };
        self.forward(queued).await
    }

    /// Sends `address`'s pending page in notifications of at most
    /// `PAGE_ENTRIES`, while it holds a full one (or, `all`, to the end:
    /// the last one with `last_progress`).
    async fn send_pages(
        &mut self,
        address: &str,
        all: bool,
        last_progress: f64,
    ) -> Result<(), Gone> {
        loop {
            let Some(sub) = self.subs.get_mut(address) else {
                return Ok(());
            };
            let full = sub.page.len() > PAGE_ENTRIES || (!all && sub.page.len() == PAGE_ENTRIES);
            if !full {
                break;
            }
            let page: Vec<SpMatch> = sub.page.drain(..PAGE_ENTRIES).collect();
            let progress = sub.progress;
            self.notify(address, progress, &page).await?;
        }
        if all {
            let page = self
                .subs
                .get_mut(address)
                .map(|sub| std::mem::take(&mut sub.page))
                .unwrap_or_default();
            self.notify(address, last_progress, &page).await?;
        }
        Ok(())
    }

    /// The next subscription whose historical scan needs a chunk, turns
    /// going round.
    fn next_turn(&self) -> Option<String> {
        let now = Instant::now();
        let needs_chunk = |sub: &Sub| {
            matches!(sub.phase, Phase::Historical { done: false, .. })
                && sub.retry_at.is_none_or(|at| at <= now)
        };
        let after = self.last_turn.as_ref().and_then(|last| {
            self.subs
                .range::<String, _>((std::ops::Bound::Excluded(last), std::ops::Bound::Unbounded))
                .find(|(_, sub)| needs_chunk(sub))
        });
        after
            .or_else(|| self.subs.iter().find(|(_, sub)| needs_chunk(sub)))
            .map(|(address, _)| address.clone())
    }

    /// Starts the next historical chunk, if any scan needs one, once the
    /// session's queue has room.
    async fn start_chunk(&mut self) -> Result<(), Gone> {
        let Some(address) = self.next_turn() else {
            return Ok(());
        };
        // Back-pressure: a client that does not read stops its own scans.
        drop(self.queue.reserve().await.map_err(|_| Gone)?);
        let Some(sub) = self.subs.get_mut(&address) else {
            return Ok(());
        };
        let Phase::Historical { cursor, .. } = sub.phase else {
            return Ok(());
        };
        let end = sub.subscription.end_height;
        remember_blocks(&*self.ctx.backend, &mut sub.recent, cursor.height, end);
        let task = tokio::spawn(scan_chunk(
            Arc::clone(&self.ctx),
            self.scan_cost.now(),
            Arc::clone(&sub.subscription.keys),
            cursor,
            end,
        ));
        self.running = Some(Running {
            address: address.clone(),
            generation: sub.generation,
            task,
        });
        self.last_turn = Some(address);
        Ok(())
    }

    /// Takes a historical chunk's result: its matches to the page, full
    /// pages out, the scan's progress.
    async fn chunk_done(
        &mut self,
        running: Running,
        result: Result<SpChunk, Error>,
        held: Duration,
    ) -> Result<(), Gone> {
        self.scan_cost.charge(held, 0);
        let address = running.address;
        let Some(sub) = self
            .subs
            .get_mut(&address)
            .filter(|sub| sub.generation == running.generation)
        else {
            return Ok(()); // unsubscribed, or subscribed again, meanwhile
        };
        let chunk = match result {
            Ok(chunk) => chunk,
            Err(e) => {
                tracing::warn!(error = %e, "a silent-payments scan chunk failed; retrying later");
                sub.retry_at = Some(Instant::now() + HEARTBEAT);
                return Ok(());
            }
        };
        let Phase::Historical {
            cursor,
            range_bytes,
            done,
        } = &mut sub.phase
        else {
            return Ok(());
        };
        let total = *range_bytes.get_or_insert(chunk.bytes_scanned + chunk.bytes_left);
        *cursor = chunk.next;
        *done = chunk.done;
        let progress = fraction_done(chunk.bytes_left, total).min(PROGRESS_BEFORE_END_MAX);
        sub.progress = sub.progress.max(progress);
        sub.page.extend(chunk.matches);
        self.send_pages(&address, false, 0.0).await
    }

    /// Ends the historical scans that reached their range's end: the
    /// mempool's matches, the last pages and progress 1.0, then the blocks
    /// since the range's end. Only once the notifier hands the hub every
    /// change, so that none falls between the mempool scan and the live
    /// updates.
    async fn finish_scans(&mut self) -> Result<(), Gone> {
        if !self.attached {
            return Ok(());
        }
        let finished: Vec<String> = self
            .subs
            .iter()
            .filter(|(_, sub)| matches!(sub.phase, Phase::Historical { done: true, .. }))
            .map(|(address, _)| address.clone())
            .collect();
        for address in finished {
            let Some(keys) = self.keys_of(&address) else {
                continue;
            };
            let mempool = match self.scan_mempool(keys, None).await {
                Ok(mempool) => mempool,
                Err(e) => {
                    tracing::warn!(error = %e, "a silent-payments mempool scan failed");
                    Vec::new()
                }
            };
            let Some(sub) = self.subs.get_mut(&address) else {
                continue;
            };
            for found in mempool {
                if sub.sent_mempool.insert(found.txid) {
                    sub.page.push(found);
                }
            }
            let subscription = &sub.subscription;
            sub.phase = Phase::Live {
                scanned_to: subscription.end_height.max(subscription.tip_height),
            };
            self.send_pages(&address, true, 1.0).await?;
            if let Some(sub) = self.subs.get_mut(&address) {
                sub.repeat_final_at = Some(Instant::now() + FINAL_REPEAT_DELAY);
            }
            self.follow_one(&address, Mempool::Skip).await?;
        }
        Ok(())
    }

    fn keys_of(&self, address: &str) -> Option<Arc<ScanKeys>> {
        self.subs
            .get(address)
            .map(|sub| Arc::clone(&sub.subscription.keys))
    }

    /// A change reached the hub: every following subscription scans it;
    /// historical ones only step back if a reorg undid blocks they scanned.
    async fn follow(&mut self, mempool: Mempool<'_>) -> Result<(), Gone> {
        let addresses: Vec<String> = self.subs.keys().cloned().collect();
        for address in addresses {
            self.follow_one(&address, mempool).await?;
        }
        Ok(())
    }

    /// Brings one subscription up to the chain: after a reorg, back to the
    /// fork; for a following one, the new blocks and the mempool
    /// transactions named, notified only if something matched.
    async fn follow_one(&mut self, address: &str, mempool: Mempool<'_>) -> Result<(), Gone> {
        let backend = Arc::clone(&self.ctx.backend);
        let Some(sub) = self.subs.get_mut(address) else {
            return Ok(());
        };
        let fork = forked_at(&*backend, &mut sub.recent);
        let scanned_to = match &mut sub.phase {
            Phase::Historical { cursor, done, .. } => {
                if let Some(fork) = fork.filter(|fork| *fork <= cursor.height) {
                    *cursor = SpCursor::at_height(fork);
                    *done = fork > sub.subscription.end_height;
                }
                return Ok(());
            }
            Phase::Live { scanned_to } => {
                if let Some(fork) = fork {
                    *scanned_to = (*scanned_to).min(Height(fork.0.saturating_sub(1)));
                }
                *scanned_to
            }
        };
        let keys = Arc::clone(&sub.subscription.keys);
        let (tip, _) = backend.tip();
        let mut found = Vec::new();
        let mut cursor = SpCursor::at_height(Height(scanned_to.0 + 1));
        while cursor.height <= tip {
            if let Some(sub) = self.subs.get_mut(address) {
                remember_blocks(&*backend, &mut sub.recent, cursor.height, tip);
            }
            let (result, held) = scan_chunk(
                Arc::clone(&self.ctx),
                self.scan_cost.now(),
                Arc::clone(&keys),
                cursor,
                tip,
            )
            .await;
            self.scan_cost.charge(held, 0);
            match result {
                Ok(chunk) => {
                    found.extend(chunk.matches);
                    cursor = chunk.next;
                    if chunk.done {
                        break;
                    }
                }
                Err(e) => {
                    // The blocks are scanned again with the next change.
                    tracing::warn!(error = %e, "a silent-payments scan of new blocks failed");
                    break;
                }
            }
        }
        let scanned = Height(cursor.height.0.saturating_sub(1)).min(tip);
        let mempool_found = match mempool {
            Mempool::Skip => None,
            Mempool::Named([]) => Some(Ok(Vec::new())),
            Mempool::Named(txids) => Some(
                self.scan_mempool(Arc::clone(&keys), Some(txids.to_vec()))
                    .await,
            ),
            Mempool::All => Some(self.scan_mempool(Arc::clone(&keys), None).await),
        };
        let Some(sub) = self.subs.get_mut(address) else {
            return Ok(());
        };
        if let Phase::Live { scanned_to } = &mut sub.phase {
            *scanned_to = (*scanned_to).max(scanned);
        }
        // Confirmed: sent already if it was sent from the mempool.
        found.retain(|confirmed| !sub.sent_mempool.remove(&confirmed.txid));
        match mempool_found {
            None => {}
            Some(Err(e)) => tracing::warn!(error = %e, "a silent-payments mempool scan failed"),
            Some(Ok(in_mempool)) => {
                let still: HashSet<Txid> = in_mempool.iter().map(|m| m.txid).collect();
                // Named and gone from the mempool (confirmed or dropped):
                // a later return to it is news again.
                match mempool {
                    Mempool::Named(txids) => {
                        for txid in txids {
                            if !still.contains(txid) {
                                sub.sent_mempool.remove(txid);
                            }
                        }
                    }
                    _ => sub.sent_mempool.retain(|txid| still.contains(txid)),
                }
                for m in in_mempool {
                    if sub.sent_mempool.insert(m.txid) {
                        found.push(m);
                    }
                }
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        sub.page = found;
        self.send_pages(address, true, 1.0).await
    }

    /// Scans the mempool (all of it, or `only` those) on a scan thread,
    /// holding a scan slot.
    async fn scan_mempool(
        &mut self,
        keys: Arc<ScanKeys>,
        only: Option<Vec<Txid>>,
    ) -> Result<Vec<SpMatch>, Error> {
        let (scanned, held) = on_scan_slot(&self.ctx, self.scan_cost.now(), move |backend| {
            backend.sp_scan_mempool(&keys, only.as_deref())
        })
        .await;
        self.scan_cost.charge(held, 0);
        scanned
    }

    /// When the next heartbeat (or final repeat) is due, if a historical
    /// scan runs (or a final notification is to be repeated).
    fn next_heartbeat(&self) -> Option<Instant> {
        self.subs
            .values()
            .filter_map(|sub| match sub.phase {
                Phase::Historical { .. } => Some(sub.last_sent + HEARTBEAT),
                Phase::Live { .. } => sub.repeat_final_at,
            })
            .min()
    }

    fn next_retry(&self) -> Option<Instant> {
        self.subs.values().filter_map(|sub| sub.retry_at).min()
    }

    /// Tells each historical scan due for it how far it is, with what it
    /// found since its last notification; sends the final notifications
    /// due again, with no history.
    async fn heartbeats(&mut self) -> Result<(), Gone> {
        let now = Instant::now();
        let repeats: Vec<String> = self
            .subs
            .iter_mut()
            .filter(|(_, sub)| sub.repeat_final_at.is_some_and(|at| at <= now))
            .map(|(address, sub)| {
                sub.repeat_final_at = None;
                address.clone()
            })
            .collect();
        for address in repeats {
            self.notify(&address, 1.0, &[]).await?;
        }
        let due: Vec<String> = self
            .subs
            .iter()
            .filter(|(_, sub)| {
                matches!(sub.phase, Phase::Historical { .. }) && sub.last_sent + HEARTBEAT <= now
            })
            .map(|(address, _)| address.clone())
            .collect();
        for address in due {
            let Some(sub) = self.subs.get_mut(&address) else {
                continue;
            };
            let page = std::mem::take(&mut sub.page);
            let progress = sub.progress;
            self.notify(&address, progress, &page).await?;
        }
        Ok(())
    }
}

/// Which mempool transactions a follow scans.
#[derive(Clone, Copy)]
enum Mempool<'a> {
    /// None: a historical scan's end already scanned the whole mempool.
    Skip,
    /// Those a change named (entered, left or confirmed).
    Named(&'a [Txid]),
    /// All of it: the change feed lagged.
    All,
}

/// Runs `work` on a scan thread (through a blocking task, which tokio
/// counts as running work) holding a scan slot; returns how long
/// it held the slot, on tokio's clock (the wall clock, except in tests
/// that pause it and hold a chunk as long as they like).
async fn on_scan_slot<T: Send + 'static>(
    ctx: &HubContext,
    scan_cost: u64,
    work: impl FnOnce(&dyn Backend) -> Result<T, Error> + Send + 'static,
) -> (Result<T, Error>, Duration) {
    let slot = ctx.scheduler.acquire_scan(scan_cost).await;
    let started = Instant::now();
    let backend = Arc::clone(&ctx.backend);
    let scheduler = Arc::clone(&ctx.scheduler);
    let done =
        tokio::task::spawn_blocking(move || scheduler.run_scan_chunk(move || work(&*backend)))
            .await;
    drop(slot);
    let held = started.elapsed();
    ctx.metrics
        .silent_payments
        .scan_seconds
        .inc_by(held.as_secs_f64());
    let result = match done {
        Ok(Some(result)) => result,
        Ok(None) => Err(Error::Internal("scan chunk panicked".into())),
        Err(e) => Err(Error::Internal(format!("scan task: {e}"))),
    };
    (result, held)
}

/// Runs one chunk of `keys`' scan from `from` to the end of block `to`
/// (see [`on_scan_slot`]).
async fn scan_chunk(
    ctx: Arc<HubContext>,
    scan_cost: u64,
    keys: Arc<ScanKeys>,
    from: SpCursor,
    to: Height,
) -> (Result<SpChunk, Error>, Duration) {
    let (result, held) = on_scan_slot(&ctx, scan_cost, move |backend| {
        backend.sp_scan(&keys, from, to, CHUNK_RECORDS)
    })
    .await;
    if let Ok(chunk) = &result {
        ctx.metrics
            .silent_payments
            .records_scanned
            .inc_by(chunk.records as u64);
    }
    (result, held)
}

/// Remembers the hashes of the blocks from `from` to `to` that are within
/// `REORG_DEPTH_MAX` of the tip, before they are scanned: a reorg after
/// this shows as a changed hash, one before it was scanned already.
fn remember_blocks(
    backend: &dyn Backend,
    recent: &mut BTreeMap<Height, BlockHash>,
    from: Height,
    to: Height,
) {
    let (tip, _) = backend.tip();
    let lowest = Height(tip.0.saturating_sub(REORG_DEPTH_MAX)).max(from);
    for height in lowest.0..=to.min(tip).0 {
        if let Some(header) = backend.header(Height(height)) {
            recent.insert(Height(height), block_hash(&header));
        }
    }
    // Only the recent ones: the map stays small.
    while recent.len() > REORG_DEPTH_MAX as usize + 1 {
        recent.pop_first();
    }
}

/// The lowest remembered height whose block is no longer the chain's, if
/// any (forgetting it and those above).
fn forked_at(backend: &dyn Backend, recent: &mut BTreeMap<Height, BlockHash>) -> Option<Height> {
    let fork = recent
        .iter()
        .find(|(height, hash)| {
            backend
                .header(**height)
                .is_none_or(|header| block_hash(&header) != **hash)
        })
        .map(|(height, _)| *height)?;
    recent.split_off(&fork);
    Some(fork)
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_electrum::fake::{
        fake_header, made_up_scan_keys as scan_keys, made_up_txid as txid, FakeBackend, FakeSpTx,
        Gate,
    };
    use serde_json::Value;
    use std::sync::Weak;

    fn paying(keys: &ScanKeys, n: u32) -> FakeSpTx {
        FakeSpTx::paying(keys, n)
    }

    fn decoy(n: u32) -> FakeSpTx {
        FakeSpTx::decoy(n)
    }

    struct Rig {
        backend: Arc<FakeBackend>,
        scheduler: Arc<Scheduler>,
        metrics: Arc<Metrics>,
        hub: SpHub,
        queue: mpsc::Receiver<Queued>,
    }

    /// A hub on a fake chain of `tip + 1` blocks, its notifier attached,
    /// on a two-core scheduler (one greedy slot).
    fn rig(tip: u32) -> Rig {
        rig_with(tip, ByteBudget::new(usize::MAX), Arc::new(Notify::new()))
    }

    /// `rig`, its lines charged to `client_memory`, `kick`ing its session
    /// when they do not fit.
    fn rig_with(tip: u32, client_memory: Arc<ByteBudget>, kick: Arc<Notify>) -> Rig {
        let backend = Arc::new(FakeBackend::with_tip(tip));
        backend.update(|s| s.sp_enabled = true);
        let scheduler = Scheduler::with_slots(8, 2, None);
        let metrics = Arc::new(Metrics::default());
        let ctx = Arc::new(HubContext {
            backend: backend.clone(),
            scheduler: Arc::clone(&scheduler),
            client_memory,
            metrics: Arc::clone(&metrics),
        });
        let (tx, queue) = mpsc::channel(64);
        let hub = SpHub::start(ctx, tx, kick, 64);
        assert!(hub.send(HubInput::Attached));
        Rig {
            backend,
            scheduler,
            metrics,
            hub,
            queue,
        }
    }

    fn subscription(keys: ScanKeys, start: u32, end: u32) -> SpSubscription {
        let address = keys.address(bitcoin::Network::Regtest);
        SpSubscription::new(
            keys,
            address,
            (Height(start), Height(end)),
            Height(end),
            false,
        )
    }

    /// Returns once the hub has done all it can (paused clock: the sleep
    /// ends only when every task waits and no blocking work runs).
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    impl Rig {
        /// The next line, as JSON.
        async fn next(&mut self) -> Value {
            let queued = tokio::time::timeout(Duration::from_secs(60), self.queue.recv())
                .await
                .expect("a line")
                .expect("the hub is alive");
            serde_json::from_str(&queued.line).unwrap()
        }

        /// Notifications up to and including the one with progress 1.0.
        async fn until_complete(&mut self) -> Vec<Value> {
            let mut notifications = Vec::new();
            loop {
                let v = self.next().await;
                let done = v["params"][1] == 1.0;
                notifications.push(v);
                if done {
                    return notifications;
                }
            }
        }

        async fn nothing_more(&mut self) {
            settle().await;
            if let Ok(queued) = self.queue.try_recv() {
                panic!("unexpected: {}", queued.line);
            }
        }

        fn change(&self, change: Change) {
            assert!(self.hub.send(HubInput::Change(Arc::new(change))));
        }

        /// Adds block `tip + 1` holding `txs`; returns its change.
        fn mine(&self, txs: Vec<FakeSpTx>) -> Change {
            self.backend.update(|s| {
                let height = s.headers.len() as u32;
                s.headers.push(fake_header(height));
                let txids: Vec<Txid> = txs.iter().map(|tx| tx.txid).collect();
                s.sp_mempool.retain(|tx| !txids.contains(&tx.txid));
                s.sp_blocks.insert(height, txs);
                Change {
                    new_tip: Some((Height(height), fake_header(height))),
                    txids,
                    ..Change::default()
                }
            })
        }
    }

    fn history(v: &Value) -> Vec<(u64, String)> {
        v["params"][2]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["height"].as_u64().unwrap(),
                    e["tx_hash"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Pages of at most 100, in height order, progress never going back
    /// and 1.0 exactly once, at the end, with the mempool's matches; the
    /// decoys never.
    #[tokio::test(start_paused = true)]
    async fn a_historical_scan_sends_pages_then_one_final_notification() {
        let mut rig = rig(60);
        let keys = scan_keys("alice");
        rig.backend.update(|s| {
            for height in 1..=50 {
                let n = height * 10;
                let block = (0..5)
                    .map(|i| paying(&keys, n + i))
                    .chain([decoy(n + 9)])
                    .collect();
                s.sp_blocks.insert(height, block);
            }
            s.sp_mempool = vec![paying(&keys, 9001), decoy(9002), paying(&keys, 9003)];
        });
        assert!(rig.hub.send(HubInput::Subscribe(subscription(keys, 0, 60))));
        let notifications = rig.until_complete().await;
        rig.nothing_more().await;
        let mut progress = 0.0;
        let mut all = Vec::new();
        for (i, v) in notifications.iter().enumerate() {
            let p = v["params"][1].as_f64().unwrap();
            assert!(p >= progress, "progress went back: {p} after {progress}");
            assert_eq!(p == 1.0, i == notifications.len() - 1);
            progress = p;
            let entries = history(v);
            assert!(entries.len() <= PAGE_ENTRIES, "{}", entries.len());
            all.extend(entries);
        }
        assert_eq!(all.len(), 252);
        let confirmed: Vec<u64> = all.iter().map(|(h, _)| *h).filter(|h| *h > 0).collect();
        assert_eq!(confirmed.len(), 250);
        assert!(confirmed.windows(2).all(|w| w[0] <= w[1]), "height order");
        let mempool: Vec<&String> = all
            .iter()
            .filter(|(h, _)| *h == 0)
            .map(|(_, t)| t)
            .collect();
        assert_eq!(mempool, [&txid(9001).to_string(), &txid(9003).to_string()]);
        assert!(
            !all.iter().any(|(_, t)| *t == txid(19).to_string()),
            "no decoy"
        );
        let m = &rig.metrics.silent_payments;
        assert_eq!(m.records_scanned.get(), 300);
        assert_eq!(m.matches.get(), 252);
        assert_eq!(m.subscriptions.get(), 1);
    }

    /// A scan that ends at once says nothing in the subscription's first
    /// `FIRST_NOTIFICATION_DELAY`, then sends its final notification, and
    /// that once more, with no history, `FINAL_REPEAT_DELAY` later; then
    /// nothing (Sparrow's threading: see the constants).
    #[tokio::test(start_paused = true)]
    async fn a_scan_ending_at_once_waits_then_repeats_its_end_once() {
        let mut rig = rig(10);
        let keys = scan_keys("carol");
        rig.backend
            .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
        let started = Instant::now();
        assert!(rig.hub.send(HubInput::Subscribe(subscription(keys, 0, 10))));
        let last = rig.next().await;
        assert_eq!(started.elapsed(), FIRST_NOTIFICATION_DELAY);
        assert_eq!(last["params"][1], 1.0);
        assert_eq!(history(&last), [(4, txid(4).to_string())]);
        let again = rig.next().await;
        assert_eq!(
            started.elapsed(),
            FIRST_NOTIFICATION_DELAY + FINAL_REPEAT_DELAY
        );
        assert_eq!(again["params"][0], last["params"][0]);
        assert_eq!(again["params"][1], 1.0);
        assert_eq!(again["params"][2], serde_json::json!([]));
        tokio::time::sleep(Duration::from_secs(600)).await;
        rig.nothing_more().await;
    }

    /// While a scan waits (here for the one greedy slot, held), the client
    /// hears from it every 5 s; then the scan runs to its end.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_scan_says_so_every_five_seconds() {
        let mut rig = rig(10);
        let keys = scan_keys("bob");
        rig.backend
            .update(|s| s.sp_blocks.insert(3, vec![paying(&keys, 3)]));
        let held = rig.scheduler.acquire_scan(0).await;
        let started = Instant::now();
        assert!(rig.hub.send(HubInput::Subscribe(subscription(keys, 0, 10))));
        for beat in 1..=2 {
            let v = rig.next().await;
            assert_eq!(started.elapsed(), HEARTBEAT * beat);
            assert_eq!(v["params"][1], 0.0);
            assert_eq!(v["params"][2], serde_json::json!([]));
        }
        drop(held);
        let v = rig.next().await;
        assert_eq!(v["params"][1], 1.0);
        assert_eq!(history(&v), [(3, txid(3).to_string())]);
    }

    /// A mempool payment is sent once: not again in a later mempool
    /// change, nor when it confirms; a new one and a block's are sent.
    #[tokio::test(start_paused = true)]
    async fn a_mempool_payment_is_sent_once() {
        let mut rig = rig(10);
        let keys = scan_keys("carol");
        let (in_pool, later) = (paying(&keys, 100), paying(&keys, 101));
        rig.backend.update(|s| s.sp_mempool = vec![in_pool.clone()]);
        let subscription = subscription(scan_keys("carol"), 0, 10);
        assert!(rig.hub.send(HubInput::Subscribe(subscription)));
        let v = rig.until_complete().await;
        assert_eq!(history(&v[0]), [(0, txid(100).to_string())]);
        // The same transaction named again: nothing new.
        rig.change(Change {
            txids: vec![txid(100)],
            ..Change::default()
        });
        rig.nothing_more().await;
        // Another enters the mempool: sent, with height 0.
        rig.backend.update(|s| s.sp_mempool.push(later.clone()));
        rig.change(Change {
            txids: vec![txid(101)],
            ..Change::default()
        });
        let v = rig.next().await;
        assert_eq!(v["params"][1], 1.0);
        assert_eq!(history(&v), [(0, txid(101).to_string())]);
        // Both confirm, with a third paid in the block: only the third.
        let change = rig.mine(vec![in_pool, decoy(102), later, paying(&keys, 103)]);
        rig.change(change);
        let v = rig.next().await;
        assert_eq!(history(&v), [(11, txid(103).to_string())]);
        rig.nothing_more().await;
        // A block with nothing for us: no notification.
        let change = rig.mine(vec![decoy(104)]);
        rig.change(change);
        rig.nothing_more().await;
    }

    /// After a reorg, the blocks from the fork are scanned again and their
    /// matches sent again.
    #[tokio::test(start_paused = true)]
    async fn a_reorg_rescans_from_the_fork() {
        let mut rig = rig(20);
        let keys = scan_keys("dave");
        rig.backend.update(|s| {
            s.sp_blocks.insert(10, vec![paying(&keys, 10)]);
            s.sp_blocks.insert(19, vec![paying(&keys, 19)]);
        });
        assert!(rig
            .hub
            .send(HubInput::Subscribe(subscription(scan_keys("dave"), 0, 20))));
        rig.until_complete().await;
        // Blocks 19 and 20 are replaced; the new 20 pays us too.
        let header = rig.backend.update(|s| {
            for height in [19, 20] {
                s.headers[height][78] = 1;
            }
            s.sp_blocks.insert(20, vec![paying(&keys, 20)]);
            s.headers[20]
        });
        rig.change(Change {
            new_tip: Some((Height(20), header)),
            all_scripthashes: true,
            ..Change::default()
        });
        let v = rig.next().await;
        assert_eq!(
            history(&v),
            [(19, txid(19).to_string()), (20, txid(20).to_string())]
        );
        rig.nothing_more().await;
    }

    /// A range subscription scans its range, then follows the tip from
    /// where it was at subscribe: blocks between the range's end and that
    /// tip are not its own.
    #[tokio::test(start_paused = true)]
    async fn a_range_follows_the_tip_not_its_end() {
        let mut rig = rig(10);
        let keys = scan_keys("judy");
        rig.backend.update(|s| {
            s.sp_blocks.insert(4, vec![paying(&keys, 4)]);
            s.sp_blocks.insert(8, vec![paying(&keys, 8)]);
        });
        let range = scan_keys("judy");
        let address = range.address(bitcoin::Network::Regtest);
        let subscription =
            SpSubscription::new(range, address, (Height(2), Height(5)), Height(10), false);
        assert!(rig.hub.send(HubInput::Subscribe(subscription)));
        let v = rig.until_complete().await;
        let all: Vec<_> = v.iter().flat_map(history).collect();
        assert_eq!(all, [(4, txid(4).to_string())]);
        rig.nothing_more().await;
        let change = rig.mine(vec![paying(&keys, 11)]);
        rig.change(change);
        assert_eq!(history(&rig.next().await), [(11, txid(11).to_string())]);
    }

    /// After the change feed lagged, a following subscription catches up
    /// on everything: new blocks and the whole mempool, nothing twice.
    #[tokio::test(start_paused = true)]
    async fn a_lagged_feed_catches_up_on_blocks_and_the_whole_mempool() {
        let mut rig = rig(10);
        let keys = scan_keys("kate");
        rig.backend
            .update(|s| s.sp_mempool = vec![paying(&keys, 60)]);
        assert!(rig
            .hub
            .send(HubInput::Subscribe(subscription(scan_keys("kate"), 0, 10))));
        rig.until_complete().await;
        // Missed: a block paying us, and a mempool payment.
        rig.mine(vec![paying(&keys, 11)]);
        rig.backend.update(|s| s.sp_mempool.push(paying(&keys, 61)));
        assert!(rig.hub.send(HubInput::Resync));
        let v = rig.next().await;
        assert_eq!(
            history(&v),
            [(11, txid(11).to_string()), (0, txid(61).to_string())]
        );
        rig.nothing_more().await;
    }

    /// Subscribing again starts the historical scan again, mempool
    /// included, with its own notifications to 1.0.
    #[tokio::test(start_paused = true)]
    async fn subscribing_again_scans_again() {
        let mut rig = rig(10);
        let keys = scan_keys("erin");
        rig.backend.update(|s| {
            s.sp_blocks.insert(5, vec![paying(&keys, 5)]);
            s.sp_mempool = vec![paying(&keys, 50)];
        });
        for _ in 0..2 {
            assert!(rig
                .hub
                .send(HubInput::Subscribe(subscription(scan_keys("erin"), 0, 10))));
            let v = rig.until_complete().await;
            let all: Vec<_> = v.iter().flat_map(history).collect();
            assert_eq!(all, [(5, txid(5).to_string()), (0, txid(50).to_string())]);
        }
        assert_eq!(rig.metrics.silent_payments.subscriptions.get(), 1);
    }

    /// Unsubscribing drops the keys, even with a chunk waiting for a slot;
    /// so does the end of the session (its hub dropped).
    #[tokio::test(start_paused = true)]
    async fn unsubscribing_and_ending_drop_the_keys() {
        let mut rig = rig(10);
        let held = rig.scheduler.acquire_scan(0).await;
        let first = subscription(scan_keys("frank"), 0, 10);
        let first_keys: Weak<ScanKeys> = Arc::downgrade(&first.keys);
        let address = first.address.clone();
        assert!(rig.hub.send(HubInput::Subscribe(first)));
        settle().await;
        assert!(first_keys.upgrade().is_some(), "held while subscribed");
        assert!(rig.hub.send(HubInput::Unsubscribe(address)));
        settle().await;
        assert_eq!(rig.metrics.silent_payments.subscriptions.get(), 0);
        // The waiting chunk still holds them until it runs.
        drop(held);
        settle().await;
        assert!(
            first_keys.upgrade().is_none(),
            "dropped with the subscription"
        );
        rig.nothing_more().await;

        let held = rig.scheduler.acquire_scan(0).await;
        let second = subscription(scan_keys("grace"), 0, 10);
        let second_keys = Arc::downgrade(&second.keys);
        assert!(rig.hub.send(HubInput::Subscribe(second)));
        settle().await;
        assert!(second_keys.upgrade().is_some());
        let Rig { hub, metrics, .. } = rig;
        drop(hub);
        settle().await;
        assert!(second_keys.upgrade().is_none(), "dropped with the session");
        assert_eq!(metrics.silent_payments.subscriptions.get(), 0);
        drop(held);
    }

    /// A notification the client memory budget cannot hold closes the
    /// session, as the notifier does: the hub kicks it and ends, its keys
    /// with it, rather than wait or hold more than the budget. A budget
    /// with room for it gets it.
    #[tokio::test(start_paused = true)]
    async fn a_notification_over_the_memory_budget_closes_the_session() {
        let keys = scan_keys("mallory");
        let notification_bytes = {
            let mut rig = rig(10);
            rig.backend
                .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
            let sub = subscription(scan_keys("mallory"), 0, 10);
            assert!(rig.hub.send(HubInput::Subscribe(sub)));
            let v = rig.next().await;
            assert_eq!(history(&v), [(4, txid(4).to_string())]);
            v.to_string().len()
        };
        for (budget_bytes, fits) in [
            (notification_bytes * 2, true),
            (notification_bytes / 2, false),
        ] {
            let budget = ByteBudget::new(budget_bytes);
            let kick = Arc::new(Notify::new());
            let mut rig = rig_with(10, Arc::clone(&budget), Arc::clone(&kick));
            rig.backend
                .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
            let sub = subscription(scan_keys("mallory"), 0, 10);
            let held_keys = Arc::downgrade(&sub.keys);
            assert!(rig.hub.send(HubInput::Subscribe(sub)));
            if fits {
                assert_eq!(history(&rig.next().await), [(4, txid(4).to_string())]);
                assert!(held_keys.upgrade().is_some(), "still subscribed");
                continue;
            }
            tokio::time::timeout(Duration::from_secs(60), kick.notified())
                .await
                .expect("the session is kicked");
            settle().await;
            assert!(
                held_keys.upgrade().is_none(),
                "the hub ended, its keys with it"
            );
            assert!(rig.queue.try_recv().is_err(), "nothing queued");
            assert_eq!(budget.used(), 0, "nothing held against the budget");
            assert_eq!(rig.metrics.silent_payments.subscriptions.get(), 0);
        }
    }

    /// The session's lines that follow a change wait until the hub has
    /// scanned that change: the silent-payments notification goes first.
    /// Lines with no change before them go at once.
    #[tokio::test(start_paused = true)]
    async fn lines_after_a_change_wait_for_its_scan() {
        let mut rig = rig(10);
        let keys = scan_keys("heidi");
        assert!(rig
            .hub
            .send(HubInput::Subscribe(subscription(scan_keys("heidi"), 0, 10))));
        rig.until_complete().await;
        let line = |text: &str| {
            HubInput::Line(Queued::charged(text.into(), &ByteBudget::new(usize::MAX)).unwrap())
        };
        assert!(rig.hub.send(line("{\"before\":1}")));
        assert_eq!(rig.next().await["before"], 1);
        let held = rig.scheduler.acquire_scan(0).await;
        let change = rig.mine(vec![paying(&keys, 11)]);
        rig.change(change);
        assert!(rig.hub.send(line("{\"scripthash\":1}")));
        rig.nothing_more().await;
        drop(held);
        let first = rig.next().await;
        assert_eq!(history(&first), [(11, txid(11).to_string())]);
        assert_eq!(rig.next().await["scripthash"], 1);
    }

    /// However many scan, they hold the greedy slots only (one, on two
    /// cores), and an ordinary line takes a slot at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scans_share_the_greedy_slots_and_wallets_are_served() {
        let rig = rig(10);
        let gate = Arc::new(Gate::default());
        rig.backend
            .update(|s| s.sp_scan_gate = Some(Arc::clone(&gate)));
        let ctx = Arc::new(HubContext {
            backend: rig.backend.clone(),
            scheduler: Arc::clone(&rig.scheduler),
            client_memory: ByteBudget::new(usize::MAX),
            metrics: Arc::default(),
        });
        let mut others = Vec::new();
        for i in 0..3 {
            let (tx, queue) = mpsc::channel(8);
            let hub = SpHub::start(Arc::clone(&ctx), tx, Arc::new(Notify::new()), 8);
            assert!(hub.send(HubInput::Attached));
            assert!(hub.send(HubInput::Subscribe(subscription(
                scan_keys(&format!("o{i}")),
                0,
                10
            ))));
            others.push((hub, queue));
        }
        assert!(rig
            .hub
            .send(HubInput::Subscribe(subscription(scan_keys("ivan"), 0, 10))));
        let reached = {
            let gate = Arc::clone(&gate);
            tokio::task::spawn_blocking(move || gate.wait_reached(Duration::from_secs(30)))
                .await
                .unwrap()
        };
        assert!(reached, "a scan runs");
        let mut polls = 0;
        while rig.scheduler.greedy_waiting() < 3 {
            polls += 1;
            assert!(polls < 1_000_000, "the other scans queue");
            tokio::task::yield_now().await;
        }
        assert_eq!(rig.backend.update(|s| s.sp_scan_calls), 1, "one at a time");
        let wallet = tokio::time::timeout(Duration::from_secs(10), rig.scheduler.acquire(0))
            .await
            .expect("a wallet's line is not held up by scans");
        drop(wallet);
        gate.open();
        for (_, queue) in &mut others {
            loop {
                let queued = tokio::time::timeout(Duration::from_secs(30), queue.recv())
                    .await
                    .expect("the scan ends")
                    .expect("the hub is alive");
                let v: Value = serde_json::from_str(&queued.line).unwrap();
                if v["params"][1] == 1.0 {
                    break;
                }
            }
        }
    }
}
