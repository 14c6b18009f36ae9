//! A read-only replica's sync: the writer indexes, the replica takes up
//! what it committed ([`Store::catch_up`]) and reports it as a sync would,
//! so that the tracker publishes the same changes. The scripts new blocks
//! touched are named from the blocks themselves, fetched from the node
//! and turned into rows as the writer did (and dropped): the notifier's
//! work stays a lookup per touched script.

use crate::rows::block_rows;
use crate::sync::SyncReport;
use crate::{Error, Indexer};
use osprey_core::{Height, TxNum};

/// New blocks whose scripts a catch-up names by fetching the blocks; past
/// this (a replica started long after its writer's last catch-up, or the
/// writer's initial sync) every script counts as touched, as for the
/// writer's long syncs.
const NAMED_BLOCKS_MAX: u32 = 100;

impl Indexer {
    /// A replica's short poll: takes up what the writer committed since
    /// the last call, asking the node for its height only when the tip
    /// moved (this runs 20 times a second; [`Indexer::sync`], on a
    /// replica, asks every time).
    ///
    /// # Errors
    /// As [`Indexer::sync`].
    pub fn follow_writer(&mut self) -> Result<SyncReport, Error> {
        self.follow(false)
    }

    /// Takes up what the writer committed since the last call, and reports
    /// it as a sync would. `ask_node`: ask the node's height even if the
    /// tip did not move (wallets are held until the index is at it).
    pub(crate) fn follow(&mut self, ask_node: bool) -> Result<SyncReport, Error> {
        let moved = self.store.catch_up()?;
        let source_height = match (moved, self.replica_source_height) {
            (None, Some(known)) if !ask_node => known,
            (None, _) => self.source.best_block()?.0,
            // A node that fails after a catch-up must not lose it: its
            // report goes out with the tip's height instead.
            (Some(_), _) => match self.source.best_block() {
                Ok((height, _)) => height,
                Err(e) => {
                    tracing::debug!("node: {e}");
                    self.store.tip().map_or(Height(0), |(h, _)| h)
                }
            },
        };
        self.replica_source_height = Some(source_height);
        let mut report = SyncReport {
            source_height,
            ..SyncReport::default()
        };
        let Some(moved) = moved else {
            return Ok(report);
        };
        report.connected = moved.added;
        report.disconnected = moved.undone;
        if moved.undone > 0 {
            tracing::warn!(
                undone = moved.undone,
                "the writer undid blocks (a reorg): following it"
            );
        }
        let tip = self.store.tip().map_or(0, |(h, _)| h.0 + 1);
        let first_new = tip - moved.added;
        report.all_touched = moved.undone > 0
            || moved.added > NAMED_BLOCKS_MAX
            || !self.name_touched(first_new..tip, &mut report);
        report.settle_touched();
        Ok(report)
    }

    /// Adds the scripts blocks `heights` touched to the report; false when
    /// it cannot name them (the node has not got a block, or it does not
    /// hash to what the writer indexed).
    fn name_touched(&self, heights: std::ops::Range<u32>, report: &mut SyncReport) -> bool {
        let hashes = self
            .store
            .block_hashes(Height(heights.start), Height(heights.end.saturating_sub(1)));
        let wanted: Vec<(Height, _)> = heights.map(Height).zip(hashes).collect();
        for chunk in wanted.chunks(self.config.fetch_blocks.max(1) as usize) {
            let blocks = match self.source.blocks(chunk) {
                Ok(blocks) => blocks,
                Err(e) => {
                    tracing::debug!("naming the scripts of new blocks: {e}; all may have changed");
                    return false;
                }
            };
            for (block, &(height, hash)) in blocks.iter().zip(chunk) {
                let Some(first) = self.store.block_tx_nums(height) else {
                    return false;
                };
                if block.block.block_hash() != hash {
                    return false;
                }
                match block_rows(block, TxNum(first.start), true, false) {
                    Ok(rows) => report.touched.extend(rows.touched),
                    Err(e) => {
                        tracing::warn!(height = height.0, "block from the node: {e}");
                        return false;
                    }
                }
            }
        }
        true
    }
}
