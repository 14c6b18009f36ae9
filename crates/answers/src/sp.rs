//! The answers of a silent-payments scan (docs/silent-payments.md, 3.5):
//! where a scan of the index's records stands, what one chunk of it found,
//! and the time-to-height rule a subscription's `start` follows (1.2.1).

use bitcoin::Txid;
use osprey_core::Height;
use osprey_sp::{ScanKeys, TweakData};

/// Where a scan of the confirmed records resumes: a block, and how many of
/// that block's records were already scanned. Block heights and record
/// counts mean the same to every backend, so the server can keep a cursor
/// across chunks without knowing how records are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SpCursor {
    pub height: Height,
    /// Records of block `height` already scanned (0 at its first record).
    pub records_done: u32,
}

impl SpCursor {
    /// The cursor at the first record of block `height`.
    pub fn at_height(height: Height) -> SpCursor {
        SpCursor {
            height,
            records_done: 0,
        }
    }
}

/// A transaction that pays a subscription's keys (its `k = 0` output, with
/// or without a scanned label): one entry of a notification's `history`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpMatch {
    /// The confirming block's height; 0 for a mempool transaction.
    pub height: u32,
    pub txid: Txid,
    /// `ser_P(input_hash·A)`, the tweak the client scans the transaction with.
    pub tweak_key: [u8; 33],
}

impl SpMatch {
    /// The match of a transaction whose taproot output keys are all known
    /// (`output_keys`, x-only, as the mempool keeps them), if it pays
    /// `keys`. A transaction whose keys cannot be derived (probability
    /// about 2^-128: BIP-352 "fail") pays no one.
    pub fn if_paid(
        keys: &ScanKeys,
        tweak: &TweakData,
        output_keys: &[[u8; 32]],
        height: u32,
        txid: Txid,
    ) -> Option<SpMatch> {
        let candidates = keys.first_output_candidates(tweak).ok()?;
        if !candidates.any_in(output_keys) {
            return None;
        }
        Some(SpMatch {
            height,
            txid,
            tweak_key: tweak.tweak_key().ok()?,
        })
    }
}

/// What one `Backend::sp_scan` call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpChunk {
    /// In chain order.
    pub matches: Vec<SpMatch>,
    /// Where the next chunk starts: past the end of block `to` when `done`.
    pub next: SpCursor,
    /// Whether the scan reached the end of block `to`.
    pub done: bool,
    /// Records scanned by this call.
    pub records: usize,
    /// Bytes of the index's records this call scanned, and those left from
    /// `next` to the end of block `to`: the first chunk's sum is the
    /// range's size, so `1 - bytes_left / that` is the scan's progress.
    pub bytes_scanned: u64,
    pub bytes_left: u64,
}

/// Seconds a block's time may run ahead of the network's (a consensus
/// limit: two hours).
const MAX_FUTURE_BLOCK_TIME: u64 = 2 * 60 * 60;

/// The height a scan from Unix time `unix` starts at (1.2.1): the last
/// height whose running maximum of header times (`times`, from genesis) is
/// at most `unix − 7200`, or 0 if there is none. Block times need not
/// increase (a block's only has to exceed the median of the eleven before
/// it, and may run two hours ahead of the clock); their running maximum
/// does, so the answer never decreases as `unix` grows, and the scan starts
/// below the first block stamped later than two hours before `unix`.
pub fn height_at_time(times: impl IntoIterator<Item = u32>, unix: u64) -> Height {
    let bound = unix.saturating_sub(MAX_FUTURE_BLOCK_TIME);
    // The running maximum first exceeds the bound where a time does, so
    // the heights it covers are those before the first such time.
    let covered = times
        .into_iter()
        .take_while(|&time| u64::from(time) <= bound)
        .count();
    // Heights fit in u32 (the count is of headers).
    Height(covered.saturating_sub(1) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_resolves_below_every_later_block() {
        let times = [100, 8_000, 9_000, 8_500, 20_000, 19_000];
        let at = |unix| height_at_time(times, unix).0;
        // Nothing at or before the bound: height 0.
        assert_eq!(at(0), 0);
        assert_eq!(at(7_299), 0);
        assert_eq!(at(7_300), 0);
        assert_eq!(at(15_199), 0);
        assert_eq!(at(15_200), 1);
        // Height 3's time is earlier than height 2's, but the running
        // maximum of 9,000 holds until height 4.
        assert_eq!(at(16_200), 3);
        assert_eq!(at(16_700), 3);
        assert_eq!(at(27_199), 3);
        // Beyond every time: the tip.
        assert_eq!(at(27_200), 5);
        assert_eq!(at(u64::MAX), 5);
        assert_eq!(height_at_time([], 1 << 40).0, 0);
    }
}
