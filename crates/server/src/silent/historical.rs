//! Historical scans: each subscription's range, chunk by chunk and in
//! turns, its progress told at least every `HEARTBEAT`, its end (and that
//! end once more) once the range is scanned.

use super::blocks::remember_blocks;
use super::hub::{fraction_done, Gone, Hub, Phase, Running, Sub};
use super::live::Mempool;
use super::scan::scan_chunk;
use super::{FINAL_REPEAT_DELAY, HEARTBEAT, PROGRESS_BEFORE_END_MAX};
use osprey_answers::{Error, SpChunk};
use osprey_sp::ScanKeys;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Hub {
    /// The next subscription whose historical scan needs a chunk, turns
    /// going round.
    pub(super) fn next_turn(&self) -> Option<String> {
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
    pub(super) async fn start_chunk(&mut self) -> Result<(), Gone> {
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
    pub(super) async fn chunk_done(
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
    pub(super) async fn finish_scans(&mut self) -> Result<(), Gone> {
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

    pub(super) fn keys_of(&self, address: &str) -> Option<Arc<ScanKeys>> {
        self.subs
            .get(address)
            .map(|sub| Arc::clone(&sub.subscription.keys))
    }

    /// When the next heartbeat (or final repeat) is due, if a historical
    /// scan runs (or a final notification is to be repeated).
    pub(super) fn next_heartbeat(&self) -> Option<Instant> {
        self.subs
            .values()
            .filter_map(|sub| match sub.phase {
                Phase::Historical { .. } => Some(sub.last_sent + HEARTBEAT),
                Phase::Live { .. } => sub.repeat_final_at,
            })
            .min()
    }

    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.subs.values().filter_map(|sub| sub.retry_at).min()
    }

    /// Tells each historical scan due for it how far it is, with what it
    /// found since its last notification; sends the final notifications
    /// due again, with no history.
    pub(super) async fn heartbeats(&mut self) -> Result<(), Gone> {
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
