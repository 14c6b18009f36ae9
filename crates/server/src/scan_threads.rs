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

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// The niceness of a scan thread: the lowest priority.
const SCAN_NICENESS: i32 = 19;

type Job = Box<dyn FnOnce() + Send>;

/// How often a wait for a job looks whether the server is closing.
const CLOSING_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// A pool of low-priority threads; jobs wait in line for a free one.
pub(crate) struct ScanThreads {
    jobs: mpsc::Sender<Job>,
}

impl ScanThreads {
    /// Starts `threads` (at least one) scan threads. Those that cannot be
    /// started are logged and left out; `None` if none could be.
    pub fn start(threads: usize) -> Option<ScanThreads> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for i in 0..threads.max(1) {
            let queue = Arc::clone(&queue);
            let spawned = std::thread::Builder::new()
                .name(format!("osprey-scan-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        // The lock is only held while waiting for a job.
                        let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(job) = job else { return };
                        job();
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!(error = %e, "could not start a scan thread"),
            }
        }
        (started > 0).then_some(ScanThreads { jobs })
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
        // Sending fails only once every thread has ended, which they do
        // only when the pool is dropped.
        self.jobs.send(job).ok()?;
        loop {
            match result.recv_timeout(CLOSING_CHECK) {
                Ok(outcome) => return outcome,
                Err(mpsc::RecvTimeoutError::Timeout) if !closing.load(Ordering::Relaxed) => {}
                Err(_) => return None,
            }
        }
    }
}

/// Lowers the calling thread's priority: `SCHED_IDLE`, and nice
/// [`SCAN_NICENESS`]; on failure the scans run at a higher priority (at
/// worst the normal one, as before) and say so.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: gettid, sched_setscheduler and setpriority take plain
    // integers and a pointer to `param`, which lives across the call and
    // is only read; on Linux a thread id names that one thread, and
    // lowering one's own priority needs no privilege.
    let (idle, nice) = unsafe {
        let tid = libc::gettid();
        (
            libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) == 0,
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
fn lower_priority() {}

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
        let threads = ScanThreads::start(2).expect("threads");
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

    /// A job that does not end (one a busy machine leaves no CPU for) is
    /// waited for until the server closes, then given up on: the blocking
    /// task waiting for it, which the runtime waits for at exit, ends.
    #[test]
    fn a_wait_for_a_job_ends_when_the_server_closes() {
        let threads = ScanThreads::start(1).expect("threads");
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
