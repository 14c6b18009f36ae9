//! Running scan work: on a scan thread, holding a scan slot, timed and
//! counted.

use super::{HubContext, CHUNK_RECORDS};
use osprey_answers::{Backend, Error, SpChunk, SpCursor};
use osprey_core::Height;
use osprey_sp::ScanKeys;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Runs `work` on a scan thread (through a blocking task, which tokio
/// counts as running work) holding a scan slot; returns how long
/// it held the slot, on tokio's clock (the wall clock, except in tests
/// that pause it and hold a chunk as long as they like).
pub(super) async fn on_scan_slot<T: Send + 'static>(
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
pub(super) async fn scan_chunk(
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
