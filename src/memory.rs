//! Gives memory the server freed back to the system.
//!
//! glibc's allocator keeps what was freed in its arenas for reuse: after a
//! burst (hundreds of clients holding megabyte requests, hundreds of
//! thousands of subscriptions), the process stayed at its peak size for
//! good, though nothing held that memory any more. `malloc_trim(0)`
//! releases the free pages of every arena, not only the top of the heap.
//! Called from the serving loop every [`TRIM_EVERY`]: cheap (it walks free
//! lists, a few milliseconds on a heap of a gigabyte) next to the poll.
//!
//! jemalloc and mimalloc return memory on their own but were not chosen:
//! measured with `scripts/hostile.py` (the `hostile/` runs in
//! `crates/bench/runs/2026-11-23-vm-2core/SUMMARY.md`), glibc with this trim
//! came back as low, and no allocator is compiled from source into CI.

use std::time::{Duration, Instant};

/// How often freed memory is given back.
const TRIM_EVERY: Duration = Duration::from_secs(10);

pub struct Trimmer {
    last: Instant,
}

impl Trimmer {
    pub fn new() -> Trimmer {
        Trimmer {
            last: Instant::now(),
        }
    }

    /// Trims if the last trim is [`TRIM_EVERY`] old.
    pub fn tick(&mut self) {
        if self.last.elapsed() < TRIM_EVERY {
            return;
        }
        let started = Instant::now();
        trim();
        self.last = Instant::now();
        tracing::trace!(took = ?started.elapsed(), "freed memory given back");
    }
}

/// glibc has no safe wrapper (the binary's other `unsafe` is the scan
/// threads' `setpriority`, in osprey-server).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks;
    // it takes no pointer from us and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators (musl, other systems) manage this themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
