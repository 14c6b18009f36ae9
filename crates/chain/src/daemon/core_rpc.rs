//! Bitcoin Core over JSON-RPC: `getblock <hash> 3` (Core 23+) gives a
//! block with every input's prevout in one request.

use super::Daemon;
use crate::source::BlockWithPrevouts;
use crate::Error;
use bitcoin::block::{Header, Version};
use bitcoin::consensus::encode::deserialize_hex;
use bitcoin::{Amount, Block, BlockHash, CompactTarget, ScriptBuf, Transaction, TxOut};
use osprey_core::Height;
use serde_json::{json, Value};

impl Daemon {
    /// Bitcoin Core: `getblock <hash> 3` carries every input's prevout and
    /// every transaction's hex, so one request gives the whole block.
    pub(super) fn blocks_verbose3(
        &self,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        let params: Vec<Vec<Value>> = hashes
            .iter()
            .map(|(_, h)| vec![json!(h), json!(3)])
            .collect();
        let replies = self.rpc.call_batch("getblock", &params)?;
        replies
            .into_iter()
            .zip(hashes)
            .map(|(reply, (height, hash))| {
                let verbose = reply?;
                let bad = |what: &str| Error::persistent(format!("getblock {hash} 3: {what}"));
                let block = block_from_verbose(&verbose).ok_or_else(|| bad("malformed block"))?;
                if block.block_hash() != *hash {
                    return Err(bad("header does not hash to the block asked for"));
                }
                let txs = verbose
                    .get("tx")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("no tx array"))?;
                let mut prevouts = Vec::new();
                for tx in txs.iter().skip(1) {
                    for vin in tx
                        .get("vin")
                        .and_then(Value::as_array)
                        .ok_or_else(|| bad("no vin"))?
                    {
                        let prevout = vin
                            .get("prevout")
                            .ok_or_else(|| bad("no prevout (undo data pruned?)"))?;
                        prevouts
                            .push(parse_prevout(prevout).ok_or_else(|| bad("malformed prevout"))?);
                    }
                }
                let size = verbose
                    .get("size")
                    .and_then(Value::as_u64)
                    .unwrap_or_default() as usize;
                Ok(BlockWithPrevouts {
                    height: *height,
                    block,
                    prevouts,
                    size,
                })
            })
            .collect()
    }
}

/// Rebuilds a block from `getblock <hash> 2|3` JSON: the header from its
/// fields, each transaction from its `hex`.
fn block_from_verbose(v: &Value) -> Option<Block> {
    let hash = |key: &str| -> Option<[u8; 32]> {
        let mut bytes: [u8; 32] = hex::decode(v.get(key)?.as_str()?).ok()?.try_into().ok()?;
        bytes.reverse();
        Some(bytes)
    };
    use bitcoin::hashes::Hash;
    let header = Header {
        version: Version::from_consensus(v.get("version")?.as_i64()? as i32),
        prev_blockhash: match v.get("previousblockhash") {
            Some(_) => BlockHash::from_byte_array(hash("previousblockhash")?),
            None => BlockHash::all_zeros(),
        },
        merkle_root: bitcoin::TxMerkleNode::from_byte_array(hash("merkleroot")?),
        time: u32::try_from(v.get("time")?.as_u64()?).ok()?,
        bits: CompactTarget::from_consensus(
            u32::from_str_radix(v.get("bits")?.as_str()?, 16).ok()?,
        ),
        nonce: u32::try_from(v.get("nonce")?.as_u64()?).ok()?,
    };
    let txdata = v
        .get("tx")?
        .as_array()?
        .iter()
        .map(|tx| deserialize_hex(tx.get("hex")?.as_str()?).ok())
        .collect::<Option<Vec<Transaction>>>()?;
    Some(Block { header, txdata })
}

fn parse_prevout(prevout: &Value) -> Option<TxOut> {
    // Amounts are BTC as JSON numbers with 8 decimals; 21e14 sat < 2^53, so
    // rounding the f64 recovers the exact satoshi value.
    let btc = prevout.get("value")?.as_f64()?;
    let script = prevout.get("scriptPubKey")?.get("hex")?.as_str()?;
    Some(TxOut {
        value: Amount::from_sat((btc * 1e8).round() as u64),
        script_pubkey: ScriptBuf::from_hex(script).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_json_rebuilds_the_block() {
        let genesis = bitcoin::constants::genesis_block(bitcoin::Network::Regtest);
        let h = &genesis.header;
        let verbose = json!({
            "hash": genesis.block_hash().to_string(),
            "version": h.version.to_consensus(),
            "merkleroot": h.merkle_root.to_string(),
            "time": h.time,
            "bits": format!("{:08x}", h.bits.to_consensus()),
            "nonce": h.nonce,
            "tx": [{"hex": bitcoin::consensus::encode::serialize_hex(&genesis.txdata[0])}],
        });
        let rebuilt = block_from_verbose(&verbose).unwrap();
        assert_eq!(rebuilt, genesis);
        let mut next = verbose.clone();
        next["previousblockhash"] = json!(genesis.block_hash().to_string());
        assert_eq!(
            block_from_verbose(&next).unwrap().header.prev_blockhash,
            genesis.block_hash()
        );
        let mut broken = verbose;
        broken["tx"][0]["hex"] = json!("00");
        assert!(block_from_verbose(&broken).is_none());
    }
}
