//! Bitcoin Core's binary REST interface: blocks with their spent outputs
//! (`/rest/block`, `/rest/spenttxouts`, Core 30+) and single transactions
//! out of their block (`/rest/blockpart`, Core 31+).

use super::Daemon;
use crate::parallel::in_parallel;
use crate::source::{BlockWithPrevouts, TxLocation};
use crate::Error;
use bitcoin::consensus::{deserialize, Decodable};
use bitcoin::{Block, BlockHash, Transaction, TxOut, Txid};
use osprey_core::Height;
use std::sync::atomic::Ordering;

/// Blocks requested from the node at once over REST: enough to keep the
/// node's disk and our parser busy while a reply is in flight, few enough
/// that a chunk of large blocks stays a few tens of MB.
const REST_REQUESTS_IN_FLIGHT: usize = 4;

impl Daemon {
    /// Binary REST: the block and its spent outputs, both as Core stores
    /// them, several blocks in flight at once; parsing happens on the
    /// requesting threads, so it runs on all cores. A block REST does not
    /// give (the node restarted with `-rest=0`) comes over JSON-RPC, said
    /// once until REST serves again.
    pub(super) fn blocks_rest(
        &self,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        in_parallel(hashes, REST_REQUESTS_IN_FLIGHT, |&(height, hash)| {
            if let Some(block) = self.block_rest(height, hash)? {
                if self.rest_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the node's REST serves blocks again");
                }
                return Ok(block);
            }
            if !self.rest_failing.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the node's REST does not serve block {height} ({hash}) or its spent outputs (restarted with -rest=0?): blocks come over JSON-RPC until it does"
                );
            }
            self.blocks_verbose3(&[(height, hash)])?
                .pop()
                .ok_or_else(|| Error::transient(format!("node has no block {height} ({hash})")))
        })
    }

    /// One block and its spent outputs over REST; `None` when REST does
    /// not serve them.
    fn block_rest(
        &self,
        height: Height,
        hash: BlockHash,
    ) -> Result<Option<BlockWithPrevouts>, Error> {
        let Some(raw) = self.rpc.rest_get(&format!("/rest/block/{hash}.bin"))? else {
            return Ok(None);
        };
        let block: Block = deserialize(&raw).map_err(|e| {
            Error::persistent(format!("block {height} ({hash}) does not parse: {e}"))
        })?;
        let Some(spent) = self
            .rpc
            .rest_get(&format!("/rest/spenttxouts/{hash}.bin"))?
        else {
            return Ok(None);
        };
        let prevouts = decode_spent_outputs(&spent, &block).map_err(|what| {
            Error::persistent(format!(
                "REST spenttxouts of block {height} ({hash}): {what}"
            ))
        })?;
        Ok(Some(BlockWithPrevouts {
            height,
            block,
            prevouts,
            size: raw.len(),
        }))
    }

    /// A confirmed transaction's own bytes out of its block, over REST
    /// (`/rest/blockpart`, Core 31+): no JSON, no hex, and the node reads
    /// only those bytes. The bytes must hash to `txid`; `None` when REST
    /// cannot serve them (then callers use JSON-RPC, and so does every later
    /// call).
    pub(super) fn transaction_from_blockpart(
        &self,
        txid: &Txid,
        loc: &TxLocation,
    ) -> Result<Option<Vec<u8>>, Error> {
        let path = format!(
            "/rest/blockpart/{}.bin?offset={}&size={}",
            loc.block_hash, loc.offset, loc.len
        );
        let reply = match self.rpc.rest_get(&path) {
            Ok(reply) => reply,
            Err(e) if e.is_transient() => return Err(e),
            Err(_) => None,
        };
        match reply {
            Some(bytes)
                if deserialize::<Transaction>(&bytes)
                    .is_ok_and(|tx| tx.compute_txid() == *txid) =>
            {
                Ok(Some(bytes))
            }
            Some(_) => Err(Error::persistent(format!(
                "block {} ({}) at offset {} does not hold transaction {txid} (reorg under way?)",
                loc.height, loc.block_hash, loc.offset
            ))),
            None => {
                if self.blockpart.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        "node does not serve /rest/blockpart (Bitcoin Core 31+ with -rest=1): transactions come over JSON-RPC"
                    );
                }
                Ok(None)
            }
        }
    }
}

/// Decodes Core's `/rest/spenttxouts/<hash>.bin`: a compact-size count of
/// transactions, then for each a compact-size count of spent outputs and
/// those outputs (`CTxOut`: 8-byte LE value, script). The coinbase's list is
/// empty. Returns the outputs flattened in block order, after checking that
/// they fit `block` input for input.
///
/// # Errors
/// A description of the first mismatch or malformed byte.
fn decode_spent_outputs(bytes: &[u8], block: &Block) -> Result<Vec<TxOut>, String> {
    let mut cursor = std::io::Cursor::new(bytes);
    let mut count = || {
        bitcoin::VarInt::consensus_decode(&mut cursor)
            .map(|v| v.0)
            .map_err(|e| format!("bad count: {e}"))
    };
    let txs = count()?;
    if txs != block.txdata.len() as u64 {
        return Err(format!(
            "{txs} transactions, the block has {}",
            block.txdata.len()
        ));
    }
    let inputs: usize = block.txdata.iter().skip(1).map(|tx| tx.input.len()).sum();
    let mut outputs = Vec::with_capacity(inputs);
    for (i, tx) in block.txdata.iter().enumerate() {
        let spent = bitcoin::VarInt::consensus_decode(&mut cursor)
            .map_err(|e| format!("bad count: {e}"))?
            .0;
        let expected = if i == 0 { 0 } else { tx.input.len() as u64 };
        if spent != expected {
            return Err(format!(
                "transaction {i} spends {spent} outputs, it has {expected} inputs"
            ));
        }
        for _ in 0..spent {
            outputs.push(
                TxOut::consensus_decode(&mut cursor).map_err(|e| format!("bad output: {e}"))?,
            );
        }
    }
    if cursor.position() != bytes.len() as u64 {
        return Err("trailing bytes".into());
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::absolute::LockTime;
    use bitcoin::transaction::Version as TxVersion;
    use bitcoin::{Amount, OutPoint, ScriptBuf, Sequence, TxIn, Witness};

    fn tx(inputs: usize) -> Transaction {
        Transaction {
            version: TxVersion::TWO,
            lock_time: LockTime::ZERO,
            input: (0..inputs.max(1))
                .map(|i| TxIn {
                    previous_output: if inputs == 0 {
                        OutPoint::null()
                    } else {
                        OutPoint::new(Txid::from_byte_array([i as u8 + 1; 32]), i as u32)
                    },
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::MAX,
                    witness: Witness::new(),
                })
                .collect(),
            output: vec![TxOut {
                value: Amount::from_sat(1),
                script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
            }],
        }
    }

    use bitcoin::hashes::Hash;

    /// A coinbase and two transactions spending one and two outputs.
    fn block() -> Block {
        Block {
            header: bitcoin::constants::genesis_block(bitcoin::Network::Regtest).header,
            txdata: vec![tx(0), tx(1), tx(2)],
        }
    }

    /// Core's layout (`SerializeBlockUndo` in rest.cpp), written out by hand.
    fn spent_bytes() -> Vec<u8> {
        let mut b = vec![3, 0, 1];
        b.extend_from_slice(&5_000_000_000u64.to_le_bytes());
        b.push(22);
        b.extend_from_slice(&[0x00, 0x14]);
        b.extend_from_slice(&[0x11; 20]);
        b.push(2);
        b.extend_from_slice(&1_000u64.to_le_bytes());
        b.push(34);
        b.extend_from_slice(&[0x51, 0x20]);
        b.extend_from_slice(&[0x22; 32]);
        b.extend_from_slice(&0u64.to_le_bytes());
        b.push(0);
        b
    }

    #[test]
    fn spent_outputs_decode_in_block_order() {
        let outs = decode_spent_outputs(&spent_bytes(), &block()).unwrap();
        assert_eq!(outs.len(), 3);
        assert_eq!(outs[0].value, Amount::from_sat(5_000_000_000));
        assert_eq!(outs[0].script_pubkey.len(), 22);
        assert_eq!(outs[1].value, Amount::from_sat(1_000));
        assert!(outs[1].script_pubkey.is_p2tr());
        assert!(outs[2].script_pubkey.is_empty());
    }

    #[test]
    fn spent_outputs_that_do_not_fit_the_block_are_refused() {
        let good = spent_bytes();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut wrong_tx_count = good.clone();
        wrong_tx_count[0] = 2;
        let mut coinbase_spends = good.clone();
        coinbase_spends[1] = 1;
        for (what, bytes) in [
            ("empty", vec![]),
            ("truncated", good[..good.len() - 3].to_vec()),
            ("trailing", trailing),
            ("tx count", wrong_tx_count),
            ("coinbase", coinbase_spends),
            (
                "huge count",
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            ),
        ] {
            assert!(
                decode_spent_outputs(&bytes, &block()).is_err(),
                "{what} was accepted"
            );
        }
    }
}
