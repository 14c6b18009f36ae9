//! The recent blocks a subscription scanned, by hash, to find where a
//! reorg forked.

use super::REORG_DEPTH_MAX;
use bitcoin::hashes::{sha256d, Hash};
use bitcoin::BlockHash;
use osprey_answers::Backend;
use osprey_core::Height;
use std::collections::BTreeMap;

pub(super) fn block_hash(header: &[u8; 80]) -> BlockHash {
    BlockHash::from_raw_hash(sha256d::Hash::hash(header))
}

/// Remembers the hashes of the blocks from `from` to `to` that are within
/// `REORG_DEPTH_MAX` of the tip, before they are scanned: a reorg after
/// this shows as a changed hash, one before it was scanned already.
pub(super) fn remember_blocks(
    backend: &dyn Backend,
    recent: &mut BTreeMap<Height, BlockHash>,
    from: Height,
    to: Height,
) {
    let (tip, _) = backend.tip();
    let lowest = Height(tip.0.saturating_sub(REORG_DEPTH_MAX)).max(from);
    for height in lowest.0..=to.min(tip).0 {
        if let Some(header) = backend.header(Height(height)) {
            recent.insert(Height(height), block_hash(&header));
        }
    }
    // Only the recent ones: the map stays small.
    while recent.len() > REORG_DEPTH_MAX as usize + 1 {
        recent.pop_first();
    }
}

/// The lowest remembered height whose block is no longer the chain's, if
/// any (forgetting it and those above).
pub(super) fn forked_at(
    backend: &dyn Backend,
    recent: &mut BTreeMap<Height, BlockHash>,
) -> Option<Height> {
    let fork = recent
        .iter()
        .find(|(height, hash)| {
            backend
                .header(**height)
                .is_none_or(|header| block_hash(&header) != **hash)
        })
        .map(|(height, _)| *height)?;
    recent.split_off(&fork);
    Some(fork)
}
