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
//! holds, a scan takes that share from everything else. Not from the
//! server's own wallets, though: the floor waits until no line has held a
//! handler slot for [`Floor::lines_quiet`]: beside two busy loops, scan
//! chunks at nice 19 beside fifty wallets cost their p99 a third or more
//! (issue 35: `low` throughout, +37%; the run whose scans most likely met
//! the floor, +50%), where `SCHED_IDLE` stayed within the spread; the
//! wallets come and go, the programs the floor is for do not. A thread cannot go back
//! from `SCHED_IDLE` to the normal policy without `CAP_SYS_NICE` (or
//! `RLIMIT_NICE`), hence two sets of threads.
//!
//! `sp_scan_priority` chooses: `idle` (the above), `low` (nice 19
//! throughout, no floor) or `normal` (the server's own priority; only the
//! greedy slots bound the scans).

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
    /// The floor waits until the server's own lines (wallets' requests)
    /// have held no handler slot for this long: its nice-19 share would
    /// come out of theirs, and they come and go, where the busy programs it
    /// is meant for do not.
    pub lines_quiet: Duration,
}

impl Floor {
    pub const DEFAULT: Floor = Floor {
        after: Duration::from_secs(3),
        hold: Duration::from_secs(60),
        lines_quiet: Duration::from_secs(1),
    };
}

/// The CPU priority of silent-payment scans (`sp_scan_priority`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanPriority {
    /// `SCHED_IDLE` and nice 19: only the CPU nothing else wants, with the
    /// floor ([`Floor`]) when that is next to none.
    #[default]
    Idle,
    /// The normal policy at nice 19 throughout (also the floor's).
    Low,
    /// The server's own priority: scans compete with wallets for the CPU,
    /// bounded only by the greedy slots they share with greedy sessions.
    Normal,
}

impl ScanPriority {
    /// The setting's names, in the order of the enum.
    pub const NAMES: [&'static str; 3] = ["idle", "low", "normal"];

    /// The priority the setting `name` names, `None` if none.
    pub fn from_name(name: &str) -> Option<ScanPriority> {
        let all = [ScanPriority::Idle, ScanPriority::Low, ScanPriority::Normal];
        Self::NAMES.iter().position(|n| *n == name).map(|i| all[i])
    }

    /// The setting's name for this priority.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// Scan threads at the chosen priority and, for [`ScanPriority::Idle`],
/// the floor's; jobs wait in line for a free thread of their priority.
pub(crate) struct ScanThreads {
    priority: ScanPriority,
    /// The threads at `priority`.
    usual: mpsc::Sender<Job>,
    /// The floor's threads, at [`ScanPriority::Low`]: only for
    /// [`ScanPriority::Idle`], and `None` if none could be started (every
    /// job then runs at `SCHED_IDLE`).
    low: Option<mpsc::Sender<Job>>,
    floor: Floor,
    /// Until when chunks run at the floor's priority.
    low_until: Mutex<Option<Instant>>,
}

impl ScanThreads {
    /// Starts `threads` (at least one) scan threads at `priority`, and as
    /// many for the floor if `priority` is [`ScanPriority::Idle`]. Those
    /// that cannot be started are logged and left out; `None` if none at
    /// `priority` could be.
    pub fn start(threads: usize, priority: ScanPriority, floor: Floor) -> Option<ScanThreads> {
        let usual = pool(threads, priority)?;
        let low = match priority {
            ScanPriority::Idle => pool(threads, ScanPriority::Low),
            ScanPriority::Low | ScanPriority::Normal => None,
        };
        Some(ScanThreads {
            priority,
            usual,
            low,
            floor,
            low_until: Mutex::new(None),
        })
    }

    /// The priority of a job handed over at `now`, when the server's own
    /// lines last held a slot at `lines_busy` (`None`: never).
    fn priority(&self, now: Instant, lines_busy: Option<Instant>) -> ScanPriority {
        let low_until = *self.low_until.lock().unwrap_or_else(|e| e.into_inner());
        let lines_quiet = lines_busy
            .is_none_or(|busy| now.saturating_duration_since(busy) >= self.floor.lines_quiet);
        match low_until {
            Some(until) if now < until && lines_quiet && self.low.is_some() => ScanPriority::Low,
            _ => self.priority,
        }
    }

    /// A job of `priority` handed over at `handed_over` has ended at `now`.
    fn ended(&self, priority: ScanPriority, handed_over: Instant, now: Instant) {
        if priority == ScanPriority::Idle && now.duration_since(handed_over) >= self.floor.after {
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
    /// test clock does not run ahead of it). `lines_busy`: when the
    /// server's own lines last held a handler slot (now if one holds one),
    /// which keeps the floor off while they are busy. `None` if `work`
    /// panicked, or once `closing` is set: a job that a busy machine leaves
    /// no CPU for may not run for minutes, and the process must not wait
    /// for it to exit (the runtime waits for its blocking tasks).
    pub fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
        closing: &AtomicBool,
        lines_busy: Option<Instant>,
    ) -> Option<T> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(work));
            // The waiter is gone if it gave up (closing) or its blocking
            // task was.
            let _ = done.send(outcome.ok());
        });
        let handed_over = Instant::now();
        let priority = self.priority(handed_over, lines_busy);
        let jobs = match (priority, &self.low) {
            (ScanPriority::Low, Some(low)) if self.priority == ScanPriority::Idle => low,
            _ => &self.usual,
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
fn pool(threads: usize, priority: ScanPriority) -> Option<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    let mut started = 0;
    let kind = priority.name();
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
/// `SCHED_IDLE` for [`ScanPriority::Idle`] (the floor's threads keep the
/// normal policy they were started with); nothing for
/// [`ScanPriority::Normal`]. On failure the scans run at a higher priority
/// (at worst the normal one) and say so.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn lower_priority(priority: ScanPriority) {
    if priority == ScanPriority::Normal {
        return;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: gettid, sched_setscheduler and setpriority take plain
    // integers and a pointer to `param`, which lives across the call and
    // is only read; on Linux a thread id names that one thread, and
    // lowering one's own priority needs no privilege.
    let (idle, nice) = unsafe {
        let tid = libc::gettid();
        (
            priority == ScanPriority::Low
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
fn lower_priority(_: ScanPriority) {}

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
        let threads = ScanThreads::start(2, ScanPriority::Idle, Floor::DEFAULT).expect("threads");
        let open = AtomicBool::new(false);
        assert_eq!(
            threads.run(priority, &open, None),
            Some((SCAN_NICENESS, libc::SCHED_IDLE))
        );
        assert_eq!(
            threads.run(|| -> u8 { panic!("a chunk failed") }, &open, None),
            None
        );
        // Both threads still serve: more jobs than threads, one at a time.
        for i in 0..4 {
            assert_eq!(threads.run(move || i * 2, &open, None), Some(i * 2));
        }
        assert_eq!(priority(), caller, "the caller is untouched");
    }

    /// `low` runs every chunk at the normal policy and nice 19, `normal` at
    /// the caller's own priority; neither has a floor to go to, however
    /// starved a chunk was.
    #[test]
    fn low_and_normal_run_at_their_priority_without_a_floor() {
        let caller = priority();
        let open = AtomicBool::new(false);
        let held = Floor {
            after: Duration::ZERO,
            hold: Duration::from_secs(3600),
            lines_quiet: Duration::ZERO,
        };
        for (setting, expected) in [
            (ScanPriority::Low, (SCAN_NICENESS, libc::SCHED_OTHER)),
            (ScanPriority::Normal, caller),
        ] {
            let threads = ScanThreads::start(1, setting, held).expect("threads");
            for _ in 0..3 {
                assert_eq!(
                    threads.run(priority, &open, None),
                    Some(expected),
                    "{setting:?}"
                );
            }
            assert_eq!(threads.priority(Instant::now(), None), setting);
        }
        for name in ScanPriority::NAMES {
            assert_eq!(
                ScanPriority::from_name(name).map(ScanPriority::name),
                Some(name)
            );
        }
        assert_eq!(ScanPriority::from_name("IDLE"), None);
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
            lines_quiet: Duration::ZERO,
        };
        let threads = ScanThreads::start(1, ScanPriority::Idle, never).expect("threads");
        for _ in 0..3 {
            assert_eq!(threads.run(priority, &open, None), idle);
        }

        let held = Floor {
            after: Duration::ZERO,
            hold: Duration::from_secs(3600),
            lines_quiet: Duration::ZERO,
        };
        let threads = ScanThreads::start(1, ScanPriority::Idle, held).expect("threads");
        assert_eq!(threads.run(priority, &open, None), idle, "the first chunk");
        for _ in 0..3 {
            // Chunks at the floor do not extend it nor end it.
            assert_eq!(threads.run(priority, &open, None), low);
        }

        // When it ends, on explicit instants.
        let floor = Floor {
            after: Duration::from_secs(3),
            hold: Duration::from_secs(60),
            lines_quiet: Duration::from_secs(1),
        };
        let threads = ScanThreads::start(1, ScanPriority::Idle, floor).expect("threads");
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        // Within `after`, and a slow chunk at the floor: no change.
        threads.ended(ScanPriority::Idle, at(0), at(2));
        threads.ended(ScanPriority::Low, at(0), at(100));
        assert_eq!(threads.priority(at(2), None), ScanPriority::Idle);
        // A starved chunk ending at 10 s: the floor until 70 s.
        threads.ended(ScanPriority::Idle, at(5), at(10));
        assert_eq!(threads.priority(at(10), None), ScanPriority::Low);
        assert_eq!(threads.priority(at(69), None), ScanPriority::Low);
        assert_eq!(threads.priority(at(70), None), ScanPriority::Idle);
        assert_eq!(priority(), caller, "the caller is untouched");
    }

    /// The floor takes its nice-19 share only once the server's own lines
    /// have been quiet for `lines_quiet`: while wallets' requests hold
    /// slots, a chunk under the floor runs at `SCHED_IDLE` (their p99 left
    /// the spread when the floor's chunks ran beside them, issue 35), and
    /// it applies again once they are quiet. Explicit instants, as above.
    #[test]
    fn the_floor_waits_for_the_servers_own_lines_to_be_quiet() {
        let caller = priority();
        let threads = ScanThreads::start(1, ScanPriority::Idle, Floor::DEFAULT).expect("threads");
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let ms = |millis: u64| start + Duration::from_millis(millis);
        // A starved chunk ending at 10 s: the floor until 70 s.
        threads.ended(ScanPriority::Idle, at(5), at(10));
        assert_eq!(
            threads.priority(at(11), None),
            ScanPriority::Low,
            "no line ever ran"
        );
        assert_eq!(
            threads.priority(at(11), Some(at(11))),
            ScanPriority::Idle,
            "a line holds a slot"
        );
        assert_eq!(
            threads.priority(at(11), Some(ms(10_500))),
            ScanPriority::Idle,
            "a line ended half a second ago"
        );
        assert_eq!(
            threads.priority(at(11), Some(at(10))),
            ScanPriority::Low,
            "quiet for lines_quiet"
        );
        assert_eq!(
            threads.priority(at(70), None),
            ScanPriority::Idle,
            "the floor ended"
        );

        // Through `run`, on threads: at `SCHED_IDLE` while lines are busy.
        let held = Floor {
            after: Duration::ZERO,
            hold: Duration::from_secs(3600),
            lines_quiet: Duration::from_secs(3600),
        };
        let threads = ScanThreads::start(1, ScanPriority::Idle, held).expect("threads");
        let open = AtomicBool::new(false);
        let idle = Some((SCAN_NICENESS, libc::SCHED_IDLE));
        assert_eq!(
            threads.run(priority, &open, None),
            idle,
            "sets the floor off"
        );
        assert_eq!(
            threads.run(priority, &open, None),
            Some((SCAN_NICENESS, libc::SCHED_OTHER)),
            "quiet lines: the floor"
        );
        assert_eq!(
            threads.run(priority, &open, Some(Instant::now())),
            idle,
            "busy lines"
        );
        assert_eq!(priority(), caller, "the caller is untouched");
    }

    /// A job that does not end (one a busy machine leaves no CPU for) is
    /// waited for until the server closes, then given up on: the blocking
    /// task waiting for it, which the runtime waits for at exit, ends.
    #[test]
    fn a_wait_for_a_job_ends_when_the_server_closes() {
        let threads = ScanThreads::start(1, ScanPriority::Idle, Floor::DEFAULT).expect("threads");
        let closing = Arc::new(AtomicBool::new(false));
        let (release, held) = mpsc::channel::<()>();
        let (gave_up, waited) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let job = move || held.recv().is_ok();
                let _ = gave_up.send(threads.run(job, &closing, None));
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
