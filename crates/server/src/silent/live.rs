//! Following the chain: each change's blocks (from the fork after a
//! reorg) and the mempool transactions it names, for every subscription
//! past its historical scan.

use super::blocks::{forked_at, remember_blocks};
use super::hub::{Gone, Hub, Phase};
use super::scan::{on_scan_slot, scan_chunk};
use bitcoin::Txid;
use osprey_answers::{Error, SpCursor, SpMatch};
use osprey_core::Height;
use osprey_sp::ScanKeys;
use std::collections::HashSet;
use std::sync::Arc;

/// Which mempool transactions a follow scans.
#[derive(Clone, Copy)]
pub(super) enum Mempool<'a> {
    /// None: a historical scan's end already scanned the whole mempool.
    Skip,
    /// Those a change named (entered, left or confirmed).
    Named(&'a [Txid]),
    /// All of it: the change feed lagged.
    All,
}

impl Hub {
    /// A change reached the hub: every following subscription scans it;
    /// historical ones only step back if a reorg undid blocks they scanned.
    pub(super) async fn follow(&mut self, mempool: Mempool<'_>) -> Result<(), Gone> {
        let addresses: Vec<String> = self.subs.keys().cloned().collect();
        for address in addresses {
            self.follow_one(&address, mempool).await?;
        }
        Ok(())
    }

    /// Brings one subscription up to the chain: after a reorg, back to the
    /// fork; for a following one, the new blocks and the mempool
    /// transactions named, notified only if something matched.
    pub(super) async fn follow_one(
        &mut self,
        address: &str,
        mempool: Mempool<'_>,
    ) -> Result<(), Gone> {
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
    pub(super) async fn scan_mempool(
        &mut self,
        keys: Arc<ScanKeys>,
        only: Option<Vec<Txid>>,
    ) -> Result<Vec<SpMatch>, Error> {
        let (scanned, held) =
            on_scan_slot(&self.ctx, self.scan_cost.now(), move |backend, compute| {
                backend.sp_scan_mempool(&keys, only.as_deref(), compute)
            })
            .await;
        self.scan_cost.charge(held, 0);
        scanned
    }
}
