//! Threads that run silent-payment scan chunks at the lowest CPU priority
//! the kernel gives without privileges (Linux's `SCHED_IDLE` policy, and
//! nice 19 for whoever reads `top`), so that a scan uses the CPU wallets
//! leave and gives it back the moment they want it.
//!
//! Why not only the scheduler's slots: a chunk holds one of the greedy
//! slots, half the cores, and keeps that core busy for its ~65 ms. On two
//! cores four scans then left fifty wallets one core: their median latency
//! rose 27-33% and their p99 left the run-to-run spread
//! (`crates/bench/runs/2026-11-26-silent-payments/fairness.md`). Nice 19
//! alone (a weight of 15 against a wallet thread's 1024) took the wallets'
//! loss of wall time from +24% to +5%, but left p99 +12%; with
//! `SCHED_IDLE` (weight 3, and a wallet thread that wakes preempts the
//! scan at once) every figure stayed within the spread of runs without
//! scans. A chunk holds no lock a wallet waits on for longer than a read,
//! so the wallets never wait long on a starved scan. Starting chunks only
//! when the lines leave a core free, at normal priority, changed nothing:
//! what protects the wallets is the CPU priority. The price: a scan also
//! waits while other programs (a node's initial sync, another indexer)
//! keep every core busy.
//!
//! Why threads of their own: a thread's priority cannot be raised again
//! without `CAP_SYS_NICE`, so a thread of tokio's blocking pool, which
//! later runs wallets' requests, must never be lowered.
//!
//! The floor: under other programs' load `SCHED_IDLE` gets next to nothing
//! (two busy loops at normal priority on two cores left 4 scans unfinished
//! after 10 minutes, issue 35). So a chunk that took [`Floor::after`] or
//! longer from its hand-over to its end makes the chunks of the
//! next [`Floor::hold`] run on a second set of threads, at normal policy
//! and nice 19 (a weight of 15 against a normal thread's 1024: about 1.4%
//! of a core beside one busy normal thread, against about 0.3% for
//! `SCHED_IDLE`); then chunks try `SCHED_IDLE` again. Its price: while it
//! holds, a scan takes that share from everything else, the server's own
//! wallets included (nice 19 alone left many-wallets p99 +12% with 4 scans
//! on an idle machine, `SCHED_IDLE` within the spread), and only a slow
//! chunk sets it off, which the server's own load can do too. A thread
//! cannot go back from `SCHED_IDLE` to the normal policy without
//! `CAP_SYS_NICE` (or `RLIMIT_NICE`), hence two sets of threads.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The niceness of a scan thread: the lowest priority.
const SCAN_NICENESS: i32 = 19;

type Job = Box<dyn FnOnce() + Send>;

/// How often a wait for a job looks whether the server is closing.
const CLOSING_CHECK: Duration = Duration::from_millis(100);

/// When scan chunks leave `SCHED_IDLE` for the normal policy at nice 19.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Floor {
    /// A chunk on a `SCHED_IDLE` thread that took this long or longer,
    /// from its hand-over to its end, sets the floor off. A chunk is about
    /// 50 ms of CPU: this much wall time means it got a few percent of a
    /// core at most.
    pub after: Duration,
    /// How long the chunks then run at nice 19 before trying `SCHED_IDLE`
    /// again.
    pub hold: Duration,
}

impl Floor {
    pub const DEFAULT: Floor = Floor {
        after: Duration::from_secs(3),
        hold: Duration::from_secs(60),
    };
}

/// The two priorities a chunk may run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Priority {
    /// `SCHED_IDLE` and nice 19: only the CPU nothing else wants.
    Idle,
    /// The normal policy at nice 19: the floor.
    Low,
}

/// Low-priority threads, `SCHED_IDLE` ones and the floor's; jobs wait in
/// line for a free thread of their priority.
pub(crate) struct ScanThreads {
    idle: mpsc::Sender<Job>,
    /// `None` if none of the floor's threads could be started: every job
    /// then runs at `SCHED_IDLE`.
    low: Option<mpsc::Sender<Job>>,
    floor: Floor,
    /// Until when chunks run at the floor's priority.
    low_until: Mutex<Option<Instant>>,
}

impl ScanThreads {
    /// Starts `threads` (at least one) scan threads of each priority.
    /// Those that cannot be started are logged and left out; `None` if no
    /// `SCHED_IDLE` one could be.
    pub fn start(threads: usize, floor: Floor) -> Option<ScanThreads> {
        let idle = pool(threads, Priority::Idle)?;
        let low = pool(threads, Priority::Low);
        Some(ScanThreads {
            idle,
            low,
            floor,
            low_until: Mutex::new(None),
        })
    }

    /// The priority of a job handed over now, at `now`.
    fn priority(&self, now: Instant) -> Priority {
        let low_until = *self.low_until.lock().unwrap_or_else(|e| e.into_inner());
        match low_until {
            Some(until) if now < until && self.low.is_some() => Priority::Low,
            _ => Priority::Idle,
        }
    }

    /// A job of `priority` handed over at `handed_over` has ended at `now`.
    fn ended(&self, priority: Priority, handed_over: Instant, now: Instant) {
        if priority == Priority::Idle && now.duration_since(handed_over) >= self.floor.after {
            let mut low_until = self.low_until.lock().unwrap_or_else(|e| e.into_inner());
            *low_until = Some(now + self.floor.hold);
            tracing::debug!(
                waited = ?now.duration_since(handed_over),
                hold = ?self.floor.hold,
                "a silent-payments scan chunk was starved at SCHED_IDLE; the next ones run at nice 19"
            );
        }
    }

    /// Runs `work` on a scan thread and waits for it: call it from a
    /// blocking task, which then stands for the chunk to tokio (a paused
    /// test clock does not run ahead of it). `None` if `work` panicked, or
    /// once `closing` is set: a job that a busy machine leaves no CPU for
    /// may not run for minutes, and the process must not wait for it to
    /// exit (the runtime waits for its blocking tasks).
    pub fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
        closing: &AtomicBool,
    ) -> Option<T> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(work));
            // The waiter is gone if it gave up (closing) or its blocking
            // task was.
            let _ = done.send(outcome.ok());
        });
        let handed_over = Instant::now();
        let priority = self.priority(handed_over);
        let jobs = match (priority, &self.low) {
            (Priority::Low, Some(low)) => low,
            _ => &self.idle,
        };
        // Sending fails only once every thread has ended, which they do
        // only when the pool is dropped.
        jobs.send(job).ok()?;
        loop {
            match result.recv_timeout(CLOSING_CHECK) {
                Ok(outcome) => {
                    self.ended(priority, handed_over, Instant::now());
                    return outcome;
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !closing.load(Ordering::Relaxed) => {}
                Err(_) => return None,
            }
        }
    }
}

/// Starts `threads` (at least one) threads at `priority` taking jobs from
/// one line; `None` if none could be started.
fn pool(threads: usize, priority: Priority) -> Option<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    let mut started = 0;
    let kind = match priority {
        Priority::Idle => "idle",
        Priority::Low => "low",
    };
    for i in 0..threads.max(1) {
        let queue = Arc::clone(&queue);
        let spawned = std::thread::Builder::new()
            .name(format!("osprey-scan-{kind}-{i}"))
            .spawn(move || {
                lower_priority(priority);
                loop {
                    // The lock is only held while waiting for a job.
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(job) = job else { return };
                    job();
                }
            });
        match spawned {
            Ok(_) => started += 1,
            Err(e) => tracing::warn!(error = %e, kind, "could not start a scan thread"),
        }
    }
    (started > 0).then_some(jobs)
}

/// Lowers the calling thread's priority: nice [`SCAN_NICENESS`], and
/// `SCHED_IDLE` for [`Priority::Idle`] (the floor's threads keep the
/// normal policy they were started with); on failure the scans run at a
/// higher priority (at worst the normal one) and say so.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn lower_priority(priority: Priority) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: gettid, sched_setscheduler and setpriority take plain
    // integers and a pointer to `param`, which lives across the call and
    // is only read; on Linux a thread id names that one thread, and
    // lowering one's own priority needs no privilege.
    let (idle, nice) = unsafe {
        let tid = libc::gettid();
        (
            priority == Priority::Low
                || libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) == 0,
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, SCAN_NICENESS) == 0,
        )
    };
    if !(idle && nice) {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            idle, nice,
            "silent-payment scans run at a higher priority than meant"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority(_: Priority) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's niceness and scheduling policy, from
    /// `/proc/thread-self/stat` (fields 19 and 41; the command name, field
    /// 2, is in parentheses and may hold spaces).
    fn priority() -> (i32, i32) {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let field = |n: usize| after_name.split(' ').nth(n - 3).unwrap().parse().unwrap();
        (field(19), field(41))
    }

    #[test]
    fn jobs_run_at_the_lowest_priority_and_survive_a_panic() {
        // Tests may run under `nice`: the caller's own priority is the
        // reference.
        let caller = priority();
        let threads = ScanThreads::start(2, Floor::DEFAULT).expect("threads");
        let open = AtomicBool::new(false);
        assert_eq!(
            threads.run(priority, &open),
            Some((SCAN_NICENESS, libc::SCHED_IDLE))
        );
        assert_eq!(
            threads.run(|| -> u8 { panic!("a chunk failed") }, &open),
            None
        );
        // Both threads still serve: more jobs than threads, one at a time.
        for i in 0..4 {
            assert_eq!(threads.run(move || i * 2, &open), Some(i * 2));
        }
        assert_eq!(priority(), caller, "the caller is untouched");
    }

    /// A chunk at `SCHED_IDLE` that took longer than the floor's `after`
    /// sends the chunks of the next `hold` to the normal policy at nice
    /// 19; chunks go back to `SCHED_IDLE` once `hold` has passed; a chunk
    /// within `after` leaves them where they are. The times are the
    /// floor's parameters (every chunk takes longer than zero, none longer
    /// than an hour), so nothing here depends on how fast the machine is.
    #[test]
    fn a_starved_chunk_sends_the_next_ones_to_the_floor_for_a_while() {
        let caller = priority();
        let open = AtomicBool::new(false);
        let idle = Some((SCAN_NICENESS, libc::SCHED_IDLE));
        let low = Some((SCAN_NICENESS, libc::SCHED_OTHER));

        let never = Floor {
            after: Duration::from_secs(3600),
            hold: Duration::from_secs(3600),
        };
        let threads = ScanThreads::start(1, never).expect("threads");
        for _ in 0..3 {
            assert_eq!(threads.run(priority, &open), idle);
        }

        let held = Floor {
            after: Duration::ZERO,
            hold: Duration::from_secs(3600),
        };
        let threads = ScanThreads::start(1, held).expect("threads");
        assert_eq!(threads.run(priority, &open), idle, "the first chunk");
        for _ in 0..3 {
            // Chunks at the floor do not extend it nor end it.
            assert_eq!(threads.run(priority, &open), low);
        }

        // When it ends, on explicit instants.
        let floor = Floor {
            after: Duration::from_secs(3),
            hold: Duration::from_secs(60),
        };
        let threads = ScanThreads::start(1, floor).expect("threads");
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        // Within `after`, and a slow chunk at the floor: no change.
        threads.ended(Priority::Idle, at(0), at(2));
        threads.ended(Priority::Low, at(0), at(100));
        assert_eq!(threads.priority(at(2)), Priority::Idle);
        // A starved chunk ending at 10 s: the floor until 70 s.
        threads.ended(Priority::Idle, at(5), at(10));
        assert_eq!(threads.priority(at(10)), Priority::Low);
        assert_eq!(threads.priority(at(69)), Priority::Low);
        assert_eq!(threads.priority(at(70)), Priority::Idle);
        assert_eq!(priority(), caller, "the caller is untouched");
    }

    /// A job that does not end (one a busy machine leaves no CPU for) is
    /// waited for until the server closes, then given up on: the blocking
    /// task waiting for it, which the runtime waits for at exit, ends.
    #[test]
    fn a_wait_for_a_job_ends_when_the_server_closes() {
        let threads = ScanThreads::start(1, Floor::DEFAULT).expect("threads");
        let closing = Arc::new(AtomicBool::new(false));
        let (release, held) = mpsc::channel::<()>();
        let (gave_up, waited) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let job = move || held.recv().is_ok();
                let _ = gave_up.send(threads.run(job, &closing));
            });
            // Still waiting, however long: the job has not ended.
            assert!(waited.recv_timeout(CLOSING_CHECK * 3).is_err());
            closing.store(true, Ordering::Relaxed);
            assert_eq!(
                waited.recv_timeout(std::time::Duration::from_secs(10)),
                Ok(None),
                "given up once closing"
            );
        });
        drop(release);
    }
}
