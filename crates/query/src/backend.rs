//! `Backend` for `Query`: delegation, nothing more (the types are the same
//! on both sides).

use crate::Query;
use bitcoin::{BlockHash, OutPoint, TxMerkleNode, Txid};
use osprey_answers::{
    Backend, Balance, Compute, Error, HistoryEntry, Indexing, OutpointAnswer, RecentTx, SpChunk,
    SpCursor, SpMatch, TxMerkle, Utxo,
};
use osprey_chain::{MempoolAcceptance, MempoolFees};
use osprey_core::{Height, ScriptHash, StatusHash};
use osprey_sp::ScanKeys;
use std::sync::Arc;

impl Backend for Query {
    fn tip(&self) -> (Height, BlockHash) {
        Query::tip(self)
    }

    fn indexing(&self) -> Option<Indexing> {
        Query::indexing(self)
    }

    fn header(&self, height: Height) -> Option<[u8; 80]> {
        Query::header(self, height)
    }

    fn headers(&self, start: Height, count: usize) -> Vec<[u8; 80]> {
        Query::headers(self, start, count)
    }

    fn header_proof(
        &self,
        height: Height,
        cp_height: Height,
    ) -> Result<(Vec<TxMerkleNode>, TxMerkleNode), Error> {
        Query::header_proof(self, height, cp_height)
    }

    fn history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        Query::history(self, sh)
    }

    fn mempool_history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        Query::mempool_history(self, sh)
    }

    fn status(&self, sh: &ScriptHash) -> Result<Option<StatusHash>, Error> {
        Query::status(self, sh)
    }

    fn cached_status(&self, sh: &ScriptHash) -> Option<Option<StatusHash>> {
        Query::cached_status(self, sh)
    }

    fn balance(&self, sh: &ScriptHash) -> Result<Balance, Error> {
        Query::balance(self, sh)
    }

    fn unspent(&self, sh: &ScriptHash) -> Result<Vec<Utxo>, Error> {
        Query::unspent(self, sh)
    }

    fn outpoint_status(
        &self,
        outpoint: &OutPoint,
        script_hint: Option<&ScriptHash>,
    ) -> Result<OutpointAnswer, Error> {
        Query::outpoint_status(self, outpoint, script_hint)
    }

    fn transaction(&self, txid: &Txid) -> Result<Vec<u8>, Error> {
        Query::transaction(self, txid)
    }

    fn transactions_are_local(&self) -> bool {
        self.source().transactions_are_local()
    }

    fn transaction_verbose(&self, txid: &Txid) -> Result<serde_json::Value, Error> {
        Query::transaction_verbose(self, txid)
    }

    fn merkle(&self, txid: &Txid, height: Height) -> Result<TxMerkle, Error> {
        Query::merkle(self, txid, height)
    }

    fn id_from_pos(&self, height: Height, pos: u32) -> Result<(Txid, Vec<TxMerkleNode>), Error> {
        Query::id_from_pos(self, height, pos)
    }

    fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error> {
        Query::broadcast(self, raw_hex)
    }

    fn broadcast_package(&self, raw_hexes: &[String]) -> Result<serde_json::Value, Error> {
        Query::broadcast_package(self, raw_hexes)
    }

    fn test_mempool_accept(&self, raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error> {
        Query::test_mempool_accept(self, raw_hexes)
    }

    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, Error> {
        Query::estimate_fee(self, blocks, mode)
    }

    fn relay_fee(&self) -> Result<f64, Error> {
        Query::relay_fee(self)
    }

    fn fee_histogram(&self) -> Vec<(f64, u64)> {
        Query::fee_histogram(self)
    }

    fn mempool_recent(&self, count: usize) -> Vec<RecentTx> {
        Query::mempool_recent(self, count)
    }

    fn mempool_fees(&self) -> Result<MempoolFees, Error> {
        Query::mempool_fees(self)
    }

    fn sp_enabled(&self) -> bool {
        Query::sp_enabled(self)
    }

    fn sp_height_at(&self, unix: u64) -> Height {
        Query::sp_height_at(self, unix)
    }

    fn sp_scan(
        &self,
        keys: &Arc<ScanKeys>,
        from: SpCursor,
        to: Height,
        records_max: usize,
        compute: &dyn Compute,
    ) -> Result<SpChunk, Error> {
        Query::sp_scan(self, keys, from, to, records_max, compute)
    }

    fn sp_scan_mempool(
        &self,
        keys: &Arc<ScanKeys>,
        only: Option<&[Txid]>,
        compute: &dyn Compute,
    ) -> Result<Vec<SpMatch>, Error> {
        Query::sp_scan_mempool(self, keys, only, compute)
    }
}
