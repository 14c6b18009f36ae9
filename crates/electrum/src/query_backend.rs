//! `Backend` for `osprey_query::Query`: a field-for-field translation of
//! its types and errors, nothing more.

use crate::backend::{Backend, BackendError, Balance, HistoryEntry, MempoolInfo, TxMerkle, Utxo};
use bitcoin::{BlockHash, TxMerkleNode, Txid};
use osprey_core::{Height, ScriptHash, StatusHash};
use osprey_query::{Error, Query};

impl From<Error> for BackendError {
    fn from(e: Error) -> Self {
        match e {
            Error::HistoryTooLarge { limit } => BackendError::HistoryTooLarge { limit },
            Error::TxNotFound(txid) => BackendError::TxNotFound(txid),
            Error::BlockNotFound(height) => BackendError::BlockNotFound(height),
            Error::Node(msg) => BackendError::Node(msg),
            Error::Unavailable(msg) => BackendError::Unavailable(msg),
            Error::NotSupported(msg) => BackendError::NotSupported(msg),
            Error::BadRequest(msg) => BackendError::BadRequest(msg),
            Error::Internal(msg) => BackendError::Internal(msg),
        }
    }
}

fn history(entries: Vec<osprey_query::HistoryEntry>) -> Vec<HistoryEntry> {
    entries
        .into_iter()
        .map(|e| HistoryEntry {
            txid: e.txid,
            height: e.height,
            fee: e.fee,
        })
        .collect()
}

impl Backend for Query {
    fn tip(&self) -> (Height, BlockHash) {
        Query::tip(self)
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
    ) -> Result<(Vec<TxMerkleNode>, TxMerkleNode), BackendError> {
        Ok(Query::header_proof(self, height, cp_height)?)
    }

    fn history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, BackendError> {
        Ok(history(Query::history(self, sh)?))
    }

    fn mempool_history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, BackendError> {
        Ok(history(Query::mempool_history(self, sh)?))
    }

    fn status(&self, sh: &ScriptHash) -> Result<Option<StatusHash>, BackendError> {
        Ok(Query::status(self, sh)?)
    }

    fn cached_status(&self, sh: &ScriptHash) -> Option<Option<StatusHash>> {
        Query::cached_status(self, sh)
    }

    fn balance(&self, sh: &ScriptHash) -> Result<Balance, BackendError> {
        let b = Query::balance(self, sh)?;
        Ok(Balance {
            confirmed: b.confirmed,
            unconfirmed: b.unconfirmed,
        })
    }

    fn unspent(&self, sh: &ScriptHash) -> Result<Vec<Utxo>, BackendError> {
        Ok(Query::unspent(self, sh)?
            .into_iter()
            .map(|u| Utxo {
                txid: u.txid,
                vout: u.vout,
                height: u.height,
                value: u.value,
            })
            .collect())
    }

    fn transaction(&self, txid: &Txid) -> Result<Vec<u8>, BackendError> {
        Ok(Query::transaction(self, txid)?)
    }

    fn transaction_verbose(&self, txid: &Txid) -> Result<serde_json::Value, BackendError> {
        Ok(Query::transaction_verbose(self, txid)?)
    }

    fn merkle(&self, txid: &Txid, height: Option<Height>) -> Result<TxMerkle, BackendError> {
        let m = Query::merkle(self, txid, height)?;
        Ok(TxMerkle {
            block_height: m.block_height,
            block_hash: m.block_hash,
            pos: m.pos,
            branch: m.branch,
        })
    }

    fn id_from_pos(
        &self,
        height: Height,
        pos: u32,
    ) -> Result<(Txid, Vec<TxMerkleNode>), BackendError> {
        Ok(Query::id_from_pos(self, height, pos)?)
    }

    fn broadcast(&self, raw_hex: &str) -> Result<Txid, BackendError> {
        Ok(Query::broadcast(self, raw_hex)?)
    }

    fn broadcast_package(&self, raw_hexes: &[String]) -> Result<serde_json::Value, BackendError> {
        Ok(Query::broadcast_package(self, raw_hexes)?)
    }

    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, BackendError> {
        Ok(Query::estimate_fee(self, blocks, mode)?)
    }

    fn relay_fee(&self) -> Result<f64, BackendError> {
        Ok(Query::relay_fee(self)?)
    }

    fn fee_histogram(&self) -> Vec<(f64, u64)> {
        Query::fee_histogram(self)
    }

    fn mempool_info(&self) -> Result<MempoolInfo, BackendError> {
        let m = Query::mempool_fees(self)?;
        Ok(MempoolInfo {
            mempoolminfee: m.mempoolminfee,
            minrelaytxfee: m.minrelaytxfee,
            incrementalrelayfee: m.incrementalrelayfee,
        })
    }
}
