//! Which request runs next when every handler slot is busy: each waits as
//! if it had arrived later by what its session has cost the server lately.
//! A greedy client (one re-asking a big history as fast as it can, fifty
//! of them) then queues behind the wallet next to it and slows itself, not
//! others; sessions that cost alike are served in arrival order, and no
//! request waits longer than its own session's cost beyond that order.
//! ElectrumX's session cost is the model; where ElectrumX sleeps a session
//! over its limit even on an idle server, here cost only orders the queue,
//! so a lone big wallet is never slowed down.
//!
//! A session's cost is the time its requests held a handler slot plus the
//! bytes sent to it (at [`BYTES_PER_COST_MICRO`]), decayed with a
//! half-life of [`COST_HALF_LIFE`]. Answers from memory run on the
//! session's own task and take no slot.
//!
//! Greedy sessions (cost over [`GREEDY_COST_MICROS`]) are slowed: their
//! lines share [`Scheduler::greedy_slots`] slots, half the cores, so that
//! however many of them there are, the other half of the machine is left
//! to everyone else (fifty sessions re-asking a 26k-entry history held
//! every slot, and a wallet beside them waited seconds). So do heavy
//! lines, too long to parse on their session's task, whatever their
//! session has cost: a first line costs nothing yet, and hundreds of new
//! sessions each sending one huge batch otherwise take every slot. A session whose
//! cost passes [`HARD_COST_MICROS`] is disconnected: that takes 200 MB
//! of replies at once, or well over a core's worth of work or ~14 MB/s of
//! replies kept up (20 MB/s for 17 s), as the cost decays.
//!
//! The scheduler also owns the threads a batch's requests are spread over
//! (`osprey_electrum::BatchThreads`), and tells each line whether it may
//! use them: only this module sees every session's lines, so the decision
//! is made here, not in the dispatcher that runs the batch (which decides
//! only what protocol rules allow to run at once). The dispatcher used to
//! keep a pool of its own and its own count of lines in hand, beside the
//! slots here: two places deciding how one server's work runs.

use crate::scan_threads::{Floor, ScanPriority, ScanThreads};
use osprey_electrum::BatchThreads;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How fast a session's cost is forgiven.
const COST_HALF_LIFE: Duration = Duration::from_secs(10);

/// Bytes sent that cost as much as a microsecond of a handler slot: about
/// what writing them to a socket and the client reading them costs, and
/// what makes a client that re-asks a shared history (cheap to hand out,
/// megabytes to send) greedy.
pub(crate) const BYTES_PER_COST_MICRO: u64 = 10;

/// Past this cost (2 s of a slot, or 20 MB sent, lately) a session is
/// greedy. A wallet's initial load costs a fraction of it; its decay to
/// below it takes a greedy session tens of seconds of calm.
pub(crate) const GREEDY_COST_MICROS: u64 = 2_000_000;

/// Past this cost a session is disconnected. Decaying with a time
/// constant of 14.4 s (the half-life over ln 2), a steady cost rate reaches
/// it only above ~1.4 cores' worth of slots and bytes (a session runs one
/// line at a time, so only its batches and its replies' bytes get it
/// there); a burst, at 200 MB of replies.
pub(crate) const HARD_COST_MICROS: u64 = 20_000_000;

/// Lines handled at once, per core: more than one, as a line may wait on
/// the node (a transaction over RPC) rather than use a core. Beyond that,
/// lines queue, by arrival delayed by their session's recent cost.
const HANDLER_SLOTS_PER_CORE: usize = 4;

/// Blocking threads the async runtime needs for a server on `cores` cores:
/// one per handler slot, and a few for the notifier's status
/// computations. Without a cap, tokio's pool grew to one thread per line
/// in hand at the peak of a storm (64 threads after 100 sessions each sent
/// a batch) and, with a wallet's steady requests keeping each idle thread
/// busy once every few seconds, never shrank back.
pub fn blocking_threads(cores: usize) -> usize {
    HANDLER_SLOTS_PER_CORE * cores.max(1) + 4
}

/// Batch threads when transactions come from the node over REST or RPC:
/// more than the cores, because those requests wait on the node rather
/// than on a CPU.
const BATCH_THREADS_REMOTE: usize = 8;

/// Batch threads per core when transactions are read from local files:
/// the work is then reads of the page cache or the disk. Idle rayon
/// workers spin before they sleep, and eight of them on two cores took CPU
/// from the ones working: with two per core, a cold initial load took
/// 7-10% less time and many wallets got 3-12% more requests/s (lab m, two
/// sets of 5 alternating rounds). One per core was a little faster still,
/// but leaves no thread to run while one waits on a disk read.
const BATCH_THREADS_PER_CORE_LOCAL: usize = 2;

/// Handler slots, the requests waiting for one, and the batch threads.
pub(crate) struct Scheduler {
    slots: usize,
    /// Of `slots`, how many greedy sessions' lines may hold at once.
    greedy_slots: usize,
    /// Lines holding a slot, up to which a line may spread a batch over
    /// `batch_threads`: past it every core is busy already, and spreading
    /// a batch only added context switches (many-wallets p99 on the medium
    /// chain: 142-254 ms while batches were spread anyway, 75-88 ms once
    /// they were not).
    cores: usize,
    /// `None` (batches run one request at a time) if the threads could not
    /// be started.
    batch_threads: Option<Arc<BatchThreads>>,
    /// The CPU priority of scan chunks' threads.
    scan_priority: ScanPriority,
    /// Where scan chunks run, one per greedy slot, started with the first
    /// chunk (a server without silent payments starts none); `None` (they
    /// run on the blocking task at normal priority) if none could be.
    scan_threads: OnceLock<Option<ScanThreads>>,
    /// Set once the server stops: nothing waits for a scan job any more
    /// ([`Self::close_scans`]).
    scans_closing: AtomicBool,
    /// Lines (not scan chunks) holding a slot, and when the last one gave
    /// it back: the scan threads' floor waits for them to be quiet.
    lines: Mutex<Lines>,
    /// The clock of the queue's keys.
    epoch: Instant,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Lines {
    in_hand: usize,
    last_ended: Option<Instant>,
}

struct Queue {
    running: usize,
    /// Of `running`, the slots greedy lines hold.
    running_greedy: usize,
    waiting: BinaryHeap<Waiter>,
    /// Greedy lines waiting: they get a slot only while fewer than
    /// `greedy_slots` greedy lines hold one.
    waiting_greedy: BinaryHeap<Waiter>,
    /// Arrival order, to break ties between equal costs.
    arrivals: u64,
}

impl Queue {
    /// Takes a slot for a line.
    fn take(&mut self, greedy: bool) {
        self.running += 1;
        self.running_greedy += usize::from(greedy);
    }

    fn give_back(&mut self, greedy: bool) {
        self.running -= 1;
        self.running_greedy -= usize::from(greedy);
    }

    fn has_room(&self, greedy: bool, slots: usize, greedy_slots: usize) -> bool {
        self.running < slots && (!greedy || self.running_greedy < greedy_slots)
    }
}

struct Waiter {
    /// Microseconds since `epoch` at arrival, plus the session's cost.
    key: u64,
    arrival: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        (self.key, self.arrival) == (other.key, other.arrival)
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    /// The heap's greatest is the lowest key, then the first to come.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.key, other.arrival).cmp(&(self.key, self.arrival))
    }
}

/// A handler slot, given back when dropped.
pub(crate) struct Slot {
    scheduler: Arc<Scheduler>,
    greedy: bool,
    /// A line's, not a scan chunk's.
    line: bool,
}

impl Slot {
    /// The threads this slot's line may spread a batch over: the
    /// scheduler's, while no more lines hold slots than there are cores
    /// (this one included); `None` once every core is taken, and the batch
    /// runs on the line's own thread.
    pub fn batch_threads(&self) -> Option<Arc<BatchThreads>> {
        let scheduler = &self.scheduler;
        let running = scheduler.lock().running;
        (running <= scheduler.cores)
            .then(|| scheduler.batch_threads.clone())
            .flatten()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.line {
            let mut lines = self.scheduler.lines();
            lines.in_hand -= 1;
            lines.last_ended = Some(Instant::now());
        }
        self.scheduler.release(self.greedy);
    }
}

impl Scheduler {
    /// A scheduler for `cores` cores, with batch threads sized for where
    /// transactions come from (`transactions_are_local`: files, else the
    /// node), and scan chunks at `scan_priority`.
    pub fn new(
        cores: usize,
        transactions_are_local: bool,
        scan_priority: ScanPriority,
    ) -> Arc<Scheduler> {
        let cores = cores.max(1);
        let (threads, from) = if transactions_are_local {
            (BATCH_THREADS_PER_CORE_LOCAL * cores, "local files")
        } else {
            (BATCH_THREADS_REMOTE, "the node")
        };
        tracing::info!("batches: up to {threads} requests at once (transactions from {from})");
        let batch_threads = BatchThreads::new(threads)
            .map_err(|e| tracing::warn!("batches will run one request at a time: {e}"))
            .ok();
        Scheduler::with_slots(
            HANDLER_SLOTS_PER_CORE * cores,
            cores,
            batch_threads,
            scan_priority,
        )
    }

    /// A scheduler of `slots` handler slots (at least one), which lets a
    /// line spread its batch over `batch_threads` while at most `cores`
    /// slots are held, and runs scan chunks at `scan_priority`.
    pub(crate) fn with_slots(
        slots: usize,
        cores: usize,
        batch_threads: Option<BatchThreads>,
        scan_priority: ScanPriority,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            slots: slots.max(1),
            greedy_slots: (cores / 2).max(1),
            cores,
            batch_threads: batch_threads.map(Arc::new),
            scan_priority,
            scan_threads: OnceLock::new(),
            scans_closing: AtomicBool::new(false),
            lines: Mutex::new(Lines::default()),
            epoch: Instant::now(),
            queue: Mutex::new(Queue {
                running: 0,
                running_greedy: 0,
                waiting: BinaryHeap::new(),
                waiting_greedy: BinaryHeap::new(),
                arrivals: 0,
            }),
        })
    }

    /// Waits for a slot, queued as if it came `cost` microseconds later
    /// than it did; a greedy session's line (`cost` over
    /// [`GREEDY_COST_MICROS`]) and a `heavy` one (too long to parse on
    /// its session's task) also wait for one of the greedy slots.
    /// Cancel-safe: a slot handed to a waiter that went away is passed on.
    ///
    /// Why a heavy line is greedy whatever its session cost: a session's
    /// first line comes at no cost, and six hundred new sessions each
    /// sending one 581 KiB batch took every slot and both cores for their
    /// parsing, while a wallet's small request waited behind them (p99
    /// 0.55-2.8 s; issue 36). No wallet sends such lines but to broadcast
    /// a very large transaction, which can wait its turn among them.
    pub async fn acquire(self: &Arc<Self>, cost: u64, heavy: bool) -> Slot {
        let mut slot = self
            .acquire_in_class(cost, heavy || cost > GREEDY_COST_MICROS)
            .await;
        self.lines().in_hand += 1;
        slot.line = true;
        slot
    }

    /// Waits for a slot for a chunk of a silent-payments scan, always in
    /// the greedy class: however many scans run, they and the greedy
    /// sessions hold at most [`Scheduler::greedy_slots`] slots, and an
    /// ordinary line takes any other at once. Among greedy waiters the
    /// chunk queues as if it came `scan_cost` microseconds later: the
    /// scan cost of its session, kept apart from its request cost (a scan
    /// is hours of slot time; charged to requests, it would disconnect
    /// every scanning wallet). Cancel-safe, as [`Self::acquire`].
    pub async fn acquire_scan(self: &Arc<Self>, scan_cost: u64) -> Slot {
        self.acquire_in_class(scan_cost, true).await
    }

    /// Runs a scan chunk, for a blocking task holding a slot taken with
    /// [`Self::acquire_scan`]: on a scan thread, at the lowest priority, so
    /// that it takes only the CPU the other lines leave; `None` if it
    /// panicked, or once [`Self::close_scans`] was called.
    pub fn run_scan_chunk<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let threads = self.scan_threads.get_or_init(|| {
            ScanThreads::start(self.greedy_slots, self.scan_priority, Floor::DEFAULT)
        });
        match threads {
            Some(threads) => threads.run(work, &self.scans_closing, self.lines_busy()),
            None => Some(work()),
        }
    }

    /// When lines last held a slot: now if one holds one, `None` if none
    /// ever did.
    fn lines_busy(&self) -> Option<Instant> {
        let lines = self.lines();
        if lines.in_hand > 0 {
            Some(Instant::now())
        } else {
            lines.last_ended
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        // The lock is never held across anything that can panic.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server stops: every wait for a scan job ends now (the jobs
    /// themselves hold no lock and end when they get CPU).
    pub fn close_scans(&self) {
        self.scans_closing.store(true, Ordering::Relaxed);
    }

    async fn acquire_in_class(self: &Arc<Self>, cost: u64, greedy: bool) -> Slot {
        let waiting = {
            let mut queue = self.lock();
            if queue.has_room(greedy, self.slots, self.greedy_slots) {
                queue.take(greedy);
                return Slot {
                    scheduler: Arc::clone(self),
                    greedy,
                    line: false,
                };
            }
            let (wake, woken) = oneshot::channel();
            queue.arrivals += 1;
            let arrival = queue.arrivals;
            let now = self.epoch.elapsed().as_micros() as u64;
            let waiter = Waiter {
                key: now.saturating_add(cost),
                arrival,
                wake,
            };
            if greedy {
                queue.waiting_greedy.push(waiter);
            } else {
                queue.waiting.push(waiter);
            }
            woken
        };
        /// Passes on a slot handed over after the wait was given up.
        struct Waiting {
            woken: Option<oneshot::Receiver<()>>,
            scheduler: Arc<Scheduler>,
            greedy: bool,
        }
        impl Drop for Waiting {
            fn drop(&mut self) {
                if let Some(mut woken) = self.woken.take() {
                    woken.close();
                    if woken.try_recv().is_ok() {
                        self.scheduler.release(self.greedy);
                    }
                }
            }
        }
        let mut guard = Waiting {
            woken: Some(waiting),
            scheduler: Arc::clone(self),
            greedy,
        };
        let woken = guard.woken.as_mut().expect("set above");
        // The sender is only dropped after a send, or with the scheduler,
        // which `guard` keeps alive.
        let _ = woken.await;
        guard.woken = None;
        Slot {
            scheduler: Arc::clone(self),
            greedy,
            line: false,
        }
    }

    /// Frees a slot (a greedy line's if `greedy`), then hands free slots to
    /// the first waiters still there that may take one: the lowest key of
    /// the waiting lines, greedy ones only while a greedy slot is free.
    fn release(&self, greedy: bool) {
        let mut queue = self.lock();
        queue.give_back(greedy);
        loop {
            let greedy_first = {
                let ordinary = queue.waiting.peek();
                let greedy = queue
                    .waiting_greedy
                    .peek()
                    .filter(|_| queue.has_room(true, self.slots, self.greedy_slots));
                match (ordinary, greedy) {
                    // The heap's greatest is the one to serve first.
                    (Some(o), Some(g)) => g > o,
                    (None, Some(_)) => true,
                    (Some(_), None) => false,
                    (None, None) => return,
                }
            };
            if !queue.has_room(greedy_first, self.slots, self.greedy_slots) {
                return;
            }
            let waiter = if greedy_first {
                queue.waiting_greedy.pop()
            } else {
                queue.waiting.pop()
            };
            let Some(waiter) = waiter else { return };
            queue.take(greedy_first);
            if waiter.wake.send(()).is_err() {
                // Gone while waiting: the slot is free again.
                queue.give_back(greedy_first);
            }
        }
    }

    /// Greedy-class lines and scan chunks waiting for a slot.
    #[cfg(test)]
    pub(crate) fn greedy_waiting(&self) -> usize {
        self.lock().waiting_greedy.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // The lock is never held across anything that can panic.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one session has cost lately, in microseconds of handler time.
/// Decays on tokio's clock, which a test can pause and advance.
pub(crate) struct SessionCost {
    micros: f64,
    at: tokio::time::Instant,
}

impl SessionCost {
    pub fn new() -> SessionCost {
        SessionCost {
            micros: 0.0,
            at: tokio::time::Instant::now(),
        }
    }

    /// The cost as of now, after decay.
    pub fn now(&mut self) -> u64 {
        let now = tokio::time::Instant::now();
        let halvings = now.duration_since(self.at).as_secs_f64() / COST_HALF_LIFE.as_secs_f64();
        self.micros *= 0.5f64.powf(halvings);
        self.at = now;
        self.micros as u64
    }

    /// Adds a request that held a slot for `held` and sent `bytes`.
    pub fn charge(&mut self, held: Duration, bytes: usize) {
        self.now();
        self.micros += held.as_secs_f64() * 1e6 + bytes as f64 / BYTES_PER_COST_MICRO as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines' slots, not scan chunks', tell the scan threads' floor that
    /// the server's own requests are busy: now while one holds a slot,
    /// then when the last one gave it back.
    #[tokio::test]
    async fn lines_not_scan_chunks_count_as_busy() {
        // Two greedy slots: the chunk's and the greedy line's.
        let scheduler = Scheduler::with_slots(4, 4, None, ScanPriority::Idle);
        assert_eq!(scheduler.lines_busy(), None, "no line yet");
        let chunk = scheduler.acquire_scan(0).await;
        assert_eq!(scheduler.lines_busy(), None, "a scan chunk is no line");
        let first = scheduler.acquire(0, false).await;
        let second = scheduler.acquire(GREEDY_COST_MICROS + 1, false).await;
        let before = Instant::now();
        drop(first);
        assert!(
            scheduler.lines_busy().is_some_and(|at| at >= before),
            "one still holds a slot: busy now"
        );
        drop(second);
        let ended = scheduler.lines_busy().expect("lines ran");
        assert!(ended >= before && ended <= Instant::now());
        drop(chunk);
        assert_eq!(
            scheduler.lines_busy(),
            Some(ended),
            "when the last line ended, while none holds a slot"
        );
    }

    /// With every slot taken, requests of sessions that cost little go
    /// before those of sessions that cost a lot (here seconds of handler
    /// time), even ones that came earlier; equal costs in arrival order.
    /// The clock is paused: a sleep returns once every other task waits,
    /// so each waiter has queued before the next is started.
    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_the_cheapest_waiter() {
        let scheduler = Scheduler::with_slots(1, 1, None, ScanPriority::Idle);
        let held = scheduler.acquire(0, false).await;
        let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        let waiters = [
            ("greedy", 900_000),
            ("light", 5),
            ("greedier", 5_000_000),
            ("light too", 5),
        ];
        for (name, cost) in waiters {
            let scheduler = Arc::clone(&scheduler);
            let order_tx = order_tx.clone();
            tasks.push(tokio::spawn(async move {
                let _slot = scheduler.acquire(cost, false).await;
                order_tx.send(name).unwrap();
            }));
            // Queued in this order.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        drop(order_tx);
        let mut served = Vec::new();
        while let Some(name) = order.recv().await {
            served.push(name);
        }
        assert_eq!(served, ["light", "light too", "greedy", "greedier"]);
    }

    /// A waiter that gives up does not take a slot with it. (Paused clock,
    /// as above: the sleep lets the waiter queue.)
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_passes_the_slot_on() {
        let scheduler = Scheduler::with_slots(1, 1, None, ScanPriority::Idle);
        let held = scheduler.acquire(0, false).await;
        let cancelled = {
            let scheduler = Arc::clone(&scheduler);
            tokio::spawn(async move {
                let _slot = scheduler.acquire(1, false).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), scheduler.acquire(2, false))
            .await
            .expect("the slot is free again");
    }

    /// Greedy sessions' lines hold at most half the cores' slots between
    /// them, whatever their number: another greedy line waits for one of
    /// those, while an ordinary line takes any free slot at once, even one
    /// that came later. (Paused clock: the sleep lets the waiter queue.)
    #[tokio::test(start_paused = true)]
    async fn greedy_lines_share_half_the_cores() {
        let greedy = GREEDY_COST_MICROS + 1;
        let scheduler = Scheduler::with_slots(4, 2, None, ScanPriority::Idle);
        let first = scheduler.acquire(greedy, false).await;
        let second = {
            let scheduler = Arc::clone(&scheduler);
            tokio::spawn(async move { scheduler.acquire(greedy, false).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!second.is_finished(), "the one greedy slot is taken");
        let ordinary = tokio::time::timeout(Duration::from_secs(1), scheduler.acquire(0, false))
            .await
            .expect("an ordinary line is not held up by greedy ones");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(1), second)
            .await
            .expect("the freed greedy slot is handed on")
            .unwrap();
        assert!(second.greedy);
        drop((second, ordinary));
        let queue = scheduler.lock();
        assert_eq!((queue.running, queue.running_greedy), (0, 0));
    }

    /// A heavy line is in the greedy class even from a session that has
    /// cost nothing yet: it waits for the one greedy slot of two cores
    /// while an ordinary line takes a free slot at once. (Paused clock:
    /// the sleep lets the waiter queue.)
    #[tokio::test(start_paused = true)]
    async fn heavy_lines_are_greedy_at_no_cost() {
        let scheduler = Scheduler::with_slots(4, 2, None, ScanPriority::Idle);
        let first = scheduler.acquire(0, true).await;
        assert!(first.greedy);
        let second = {
            let scheduler = Arc::clone(&scheduler);
            tokio::spawn(async move { scheduler.acquire(0, true).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!second.is_finished(), "the one greedy slot is taken");
        assert_eq!(scheduler.greedy_waiting(), 1);
        let ordinary = tokio::time::timeout(Duration::from_secs(1), scheduler.acquire(0, false))
            .await
            .expect("an ordinary line is not held up by heavy ones");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(1), second)
            .await
            .expect("the freed greedy slot is handed on")
            .unwrap();
        drop((second, ordinary));
    }

    /// A line may spread its batch over the batch threads only while the
    /// lines holding slots, its own included, leave it a core.
    #[tokio::test]
    async fn batches_are_spread_only_while_cores_are_free() {
        let threads = BatchThreads::new(1).unwrap();
        let scheduler = Scheduler::with_slots(4, 2, Some(threads), ScanPriority::Idle);
        let first = scheduler.acquire(0, false).await;
        assert!(first.batch_threads().is_some(), "one line on two cores");
        let second = scheduler.acquire(0, false).await;
        assert!(second.batch_threads().is_some(), "two lines on two cores");
        let third = scheduler.acquire(0, false).await;
        assert!(third.batch_threads().is_none(), "three lines on two cores");
        assert!(first.batch_threads().is_none(), "for every line of them");
        drop(third);
        assert!(first.batch_threads().is_some(), "a core is free again");
    }

    /// Bytes sent cost: a client that re-asks a long shared history,
    /// cheap to hand out, becomes greedy by what it makes the server send.
    /// The clock is paused: no decay between the replies.
    #[tokio::test(start_paused = true)]
    async fn bytes_sent_make_a_session_greedy() {
        let mut cost = SessionCost::new();
        let reply = 2_200_000; // a 26k-entry history
        let mut replies = 0;
        while cost.now() <= GREEDY_COST_MICROS {
            cost.charge(Duration::from_micros(500), reply);
            replies += 1;
        }
        assert_eq!(replies, 10);
    }

    /// On the paused clock only `advance` moves time, so the decay is
    /// exact: nothing before the first half-life passes, then a half per
    /// half-life.
    #[tokio::test(start_paused = true)]
    async fn cost_halves_every_half_life() {
        let mut cost = SessionCost::new();
        cost.charge(Duration::from_millis(8), 0);
        assert_eq!(cost.now(), 8_000);
        tokio::time::advance(COST_HALF_LIFE).await;
        assert_eq!(cost.now(), 4_000);
        tokio::time::advance(COST_HALF_LIFE * 2).await;
        assert_eq!(cost.now(), 1_000);
        tokio::time::advance(COST_HALF_LIFE / 2).await;
        // 1000 / sqrt(2), truncated.
        assert_eq!(cost.now(), 707);
    }
}
