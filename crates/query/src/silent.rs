//! Silent-payment scans (docs/silent-payments.md, 3.4 and 3.5): the
//! index's records block by block, and the mempool's.

use crate::Query;
use bitcoin::Txid;
use osprey_answers::{height_at_time, Error, SpChunk, SpCursor, SpMatch};
use osprey_core::Height;
use osprey_sp::ScanKeys;

/// The error of every scan on an index without silent payments.
fn not_enabled() -> Error {
    Error::NotSupported("this server keeps no silent payments index".into())
}

impl Query {
    /// Whether the index keeps silent-payment records.
    pub fn sp_enabled(&self) -> bool {
        false
    }

    /// The height a scan from Unix time `unix` starts at (1.2.1).
    pub fn sp_height_at(&self, unix: u64) -> Height {
        self.store()
            .with_header_times(|times| height_at_time(times, unix))
    }

    /// See `osprey_answers::Backend::sp_scan`.
    pub fn sp_scan(
        &self,
        _keys: &ScanKeys,
        _from: SpCursor,
        _to: Height,
        _records_max: usize,
    ) -> Result<SpChunk, Error> {
        Err(not_enabled())
    }

    /// See `osprey_answers::Backend::sp_scan_mempool`.
    pub fn sp_scan_mempool(
        &self,
        _keys: &ScanKeys,
        _only: Option<&[Txid]>,
    ) -> Result<Vec<SpMatch>, Error> {
        Err(not_enabled())
    }
}
