//! Running scan work: on a scan thread, holding a scan slot, timed and
//! counted.

use super::{HubContext, CHUNK_RECORDS};
use crate::fair::Scheduler;
use osprey_answers::{Backend, Compute, Error, SpChunk, SpCursor};
use osprey_core::Height;
use osprey_sp::ScanKeys;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Silent-payment scans' CPU-heavy part on the scheduler's scan threads,
/// at the lowest CPU priority (`scan_threads.rs`).
struct OnScanThreads(Arc<Scheduler>);

impl Compute for OnScanThreads {
    fn run(&self, job: Box<dyn FnOnce() + Send>) {
        // A job that panicked is dropped: its caller sees it unrun.
        let _ = self.0.run_scan_chunk(job);
    }
}

/// Runs `work` on a blocking thread holding a scan slot, its CPU-heavy
/// part on a scan thread ([`OnScanThreads`]): a scan thread starved of CPU
/// holds no lock that a commit or a reader waits for. Returns how long it
/// held the slot, on tokio's clock (the wall clock, except in tests that
/// pause it and hold a chunk as long as they like).
pub(super) async fn on_scan_slot<T: Send + 'static>(
    ctx: &HubContext,
    scan_cost: u64,
    work: impl FnOnce(&dyn Backend, &dyn Compute) -> Result<T, Error> + Send + 'static,
) -> (Result<T, Error>, Duration) {
    let slot = ctx.scheduler.acquire_scan(scan_cost).await;
    let started = Instant::now();
    let backend = Arc::clone(&ctx.backend);
    let compute = OnScanThreads(Arc::clone(&ctx.scheduler));
    let done = tokio::task::spawn_blocking(move || work(&*backend, &compute)).await;
    drop(slot);
    let held = started.elapsed();
    ctx.metrics
        .silent_payments
        .scan_seconds
        .inc_by(held.as_secs_f64());
    let result = match done {
        Ok(result) => result,
        Err(e) => Err(Error::Internal(format!("scan task: {e}"))),
    };
    (result, held)
}

/// Runs one chunk of `keys`' scan from `from` to the end of block `to`
/// (see [`on_scan_slot`]).
pub(super) async fn scan_chunk(
    ctx: Arc<HubContext>,
    scan_cost: u64,
    keys: Arc<ScanKeys>,
    from: SpCursor,
    to: Height,
) -> (Result<SpChunk, Error>, Duration) {
    let (result, held) = on_scan_slot(&ctx, scan_cost, move |backend, compute| {
        backend.sp_scan(&keys, from, to, CHUNK_RECORDS, compute)
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
