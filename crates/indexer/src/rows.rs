//! Turns one block and the outputs its inputs spend into index rows. Pure
//! functions: no I/O, no reads of the index, so blocks can be processed in
//! parallel and the ingest rate does not depend on the size of the index.

use bitcoin::hashes::Hash;
use osprey_chain::BlockWithPrevouts;
use osprey_core::{Height, ScriptHash, TxNum};
use osprey_store::codec::HistoryRow;
use osprey_store::IndexedBlock;

/// Rows of one block, and the script hashes it touched (for notifications;
/// empty unless asked for).
pub struct BlockRows {
    pub indexed: IndexedBlock,
    pub touched: Vec<ScriptHash>,
    /// Silent-payment records in `indexed.sp`: the block's eligible
    /// transactions (0 without silent payments), for the progress figures.
    pub sp_records: usize,
}

/// Builds the rows of `block`, whose first transaction is `first_tx_num`,
/// after checking that the block is whole: its transactions hash to its
/// merkle root (each transaction is hashed once, for both) and the source
/// gave one spent output per input, so a corrupt file or a lying source is
/// an error rather than a wrong index.
///
/// The genesis coinbase is unspendable and, as the Electrum protocol
/// notes, not indexed; provably unspendable `OP_RETURN` outputs are not
/// indexed either (nothing can pay from them, and no wallet asks).
///
/// The touched script hashes are collected only with `collect_touched`: an
/// initial sync touches too many scripts to name them, and sorting them
/// per block showed in its profile.
///
/// With `sp`, the block's silent-payment records are built too
/// (`osprey_sp::append_block_records`, from the transactions and the spent
/// outputs already at hand: no read); without, they cost this one test.
///
/// # Errors
/// What is wrong with the block.
pub fn block_rows(
    block: &BlockWithPrevouts,
    first_tx_num: TxNum,
    collect_touched: bool,
    sp: bool,
) -> Result<BlockRows, String> {
    if !prevouts_match(block) {
        return Err("its spent outputs do not match its inputs".into());
    }
    let txids: Vec<_> = block
        .block
        .txdata
        .iter()
        .map(|tx| tx.compute_txid())
        .collect();
    let root = bitcoin::merkle_tree::calculate_root(txids.iter().map(|t| t.to_raw_hash()));
    if root.map(|r| r.to_byte_array()) != Some(block.block.header.merkle_root.to_byte_array()) {
        return Err("its transactions do not hash to its merkle root".into());
    }
    let mut end = 80 + osprey_store::compact_size_len(block.block.txdata.len() as u64);
    let tx_ends = block
        .block
        .txdata
        .iter()
        .map(|tx| {
            end += tx.total_size() as u32;
            end
        })
        .collect();
    let mut rows = Vec::with_capacity(block.prevouts.len() + 3 * block.block.txdata.len());
    let mut spent_txids = Vec::with_capacity(block.prevouts.len());
    let mut touched = Vec::new();
    if block.height != Height(0) {
        let mut prevouts = block.prevouts.iter();
        for (i, tx) in block.block.txdata.iter().enumerate() {
            let tx_num = TxNum(first_tx_num.0 + i as u64);
            if i > 0 {
                for input in &tx.input {
                    let spent = prevouts.next().expect("counted by prevouts_match");
                    let scripthash = ScriptHash::from_script(spent.script_pubkey.as_bytes());
                    let op = input.previous_output;
                    rows.push(HistoryRow::spending(tx_num, &op.txid, op.vout).of(&scripthash));
                    spent_txids.push(op.txid);
                    if collect_touched {
                        touched.push(scripthash);
                    }
                }
            }
            for (vout, output) in tx.output.iter().enumerate() {
                if output.script_pubkey.is_op_return() {
                    continue;
                }
                let scripthash = ScriptHash::from_script(output.script_pubkey.as_bytes());
                rows.push(
                    HistoryRow::funding(tx_num, vout as u32, output.value.to_sat()).of(&scripthash),
                );
                if collect_touched {
                    touched.push(scripthash);
                }
            }
        }
    }
    touched.sort_unstable();
    touched.dedup();
    let mut sp_bytes = Vec::new();
    let sp_records = if sp {
        osprey_sp::append_block_records(&block.block.txdata, &block.prevouts, &mut sp_bytes)
            .map_err(|e| e.to_string())?
    } else {
        0
    };
    Ok(BlockRows {
        indexed: IndexedBlock {
            height: block.height,
            header: block.block.header,
            first_tx_num,
            txids,
            tx_ends,
            rows,
            spent_txids,
            sp: sp_bytes,
        },
        touched,
        sp_records,
    })
}

/// Checks that a source handed over one prevout per non-coinbase input, so
/// that a buggy or lying source is an error rather than a panic.
fn prevouts_match(block: &BlockWithPrevouts) -> bool {
    let inputs: usize = block
        .block
        .txdata
        .iter()
        .skip(1)
        .map(|tx| tx.input.len())
        .sum();
    inputs == block.prevouts.len()
        && block
            .block
            .txdata
            .first()
            .is_some_and(|tx| tx.is_coinbase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::absolute::LockTime;
    use bitcoin::block::{Header, Version};
    use bitcoin::transaction::Version as TxVersion;
    use bitcoin::{
        Amount, Block, BlockHash, CompactTarget, OutPoint, ScriptBuf, Sequence, Transaction, TxIn,
        TxMerkleNode, TxOut, Witness,
    };

    fn tx(inputs: Vec<OutPoint>, outputs: Vec<(ScriptBuf, u64)>) -> Transaction {
        Transaction {
            version: TxVersion::TWO,
            lock_time: LockTime::ZERO,
            input: inputs
                .into_iter()
                .map(|previous_output| TxIn {
                    previous_output,
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::MAX,
                    witness: Witness::new(),
                })
                .collect(),
            output: outputs
                .into_iter()
                .map(|(script_pubkey, v)| TxOut {
                    value: Amount::from_sat(v),
                    script_pubkey,
                })
                .collect(),
        }
    }

    /// A block of `txdata` whose merkle root is right.
    fn block_of(txdata: Vec<Transaction>) -> Block {
        let mut block = Block {
            header: Header {
                version: Version::TWO,
                prev_blockhash: BlockHash::all_zeros(),
                merkle_root: TxMerkleNode::all_zeros(),
                time: 0,
                bits: CompactTarget::from_consensus(0x207fffff),
                nonce: 0,
            },
            txdata,
        };
        block.header.merkle_root = block.compute_merkle_root().unwrap();
        block
    }

    #[test]
    fn rows_cover_every_output_and_input_except_op_return() {
        let alice = ScriptBuf::from_bytes(vec![0x51]);
        let bob = ScriptBuf::from_bytes(vec![0x52]);
        let op_return = ScriptBuf::new_op_return([1u8; 4]);
        let funding = OutPoint {
            txid: bitcoin::Txid::all_zeros(),
            vout: 3,
        };
        let coinbase = tx(vec![OutPoint::null()], vec![(alice.clone(), 50)]);
        let spend = tx(
            vec![funding],
            vec![(bob.clone(), 30), (op_return, 0), (alice.clone(), 19)],
        );
        let block = block_of(vec![coinbase, spend]);
        let input = BlockWithPrevouts {
            height: Height(7),
            block,
            prevouts: vec![TxOut {
                value: Amount::from_sat(50),
                script_pubkey: bob.clone(),
            }],
            size: 0,
        };
        let rows = block_rows(&input, TxNum(100), true, false).unwrap();
        let untouched = block_rows(&input, TxNum(100), false, false).unwrap();
        assert!(untouched.touched.is_empty());
        assert_eq!(untouched.indexed.rows, rows.indexed.rows);
        assert_eq!(rows.indexed.txids.len(), 2);
        assert_eq!(
            rows.indexed.rows.len(),
            4,
            "coinbase out, spend in, two spendable outs"
        );
        let alice_sh = ScriptHash::from_script(alice.as_bytes());
        let bob_sh = ScriptHash::from_script(bob.as_bytes());
        assert_eq!(rows.touched.len(), 2);
        let mut expected = vec![
            HistoryRow::spending(TxNum(101), &funding.txid, 3).of(&bob_sh),
            HistoryRow::funding(TxNum(101), 0, 30).of(&bob_sh),
            HistoryRow::funding(TxNum(100), 0, 50).of(&alice_sh),
            HistoryRow::funding(TxNum(101), 2, 19).of(&alice_sh),
        ];
        expected.sort_unstable();
        let mut got = rows.indexed.rows.clone();
        got.sort_unstable();
        assert_eq!(got, expected);
    }

    /// A P2WPKH spend by key `i` (its witness: a made-up signature and the
    /// key, which is all BIP-352 reads), and the output it spends.
    fn p2wpkh_spend(i: u8) -> (OutPoint, Witness, TxOut) {
        let secp = bitcoin::secp256k1::Secp256k1::new();
        let secret = bitcoin::secp256k1::SecretKey::from_slice(&[i; 32]).unwrap();
        let key = bitcoin::CompressedPublicKey(secret.public_key(&secp));
        let outpoint = OutPoint {
            txid: bitcoin::Txid::from_byte_array([i; 32]),
            vout: u32::from(i),
        };
        let spent = TxOut {
            value: Amount::from_sat(1_000),
            script_pubkey: ScriptBuf::new_p2wpkh(&key.wpubkey_hash()),
        };
        (
            outpoint,
            Witness::from_slice(&[&[0x30; 71][..], &key.to_bytes()]),
            spent,
        )
    }

    fn taproot(x: u8) -> ScriptBuf {
        let mut script = vec![0x51, 0x20];
        script.extend_from_slice(&[x; 32]);
        ScriptBuf::from_bytes(script)
    }

    #[test]
    fn silent_payment_records_are_those_of_the_eligible_transactions() {
        let p2wsh = ScriptBuf::new_p2wsh(&bitcoin::WScriptHash::all_zeros());
        let coinbase = tx(vec![OutPoint::null()], vec![(taproot(1), 50)]);
        let mut txs = vec![coinbase];
        let mut prevouts = Vec::new();
        // Positions 1 and 4 are eligible (a P2WPKH input, a taproot
        // output); 2 pays no taproot output; 3 spends only a P2WSH output.
        let outputs = [
            vec![(taproot(2), 10), (p2wsh.clone(), 5)],
            vec![(p2wsh.clone(), 10)],
            vec![(taproot(3), 10)],
            vec![(p2wsh.clone(), 1), (taproot(4), 9), (taproot(5), 9)],
        ];
        for (i, outs) in outputs.into_iter().enumerate() {
            let (outpoint, witness, spent) = p2wpkh_spend(i as u8 + 1);
            let mut spend = tx(vec![outpoint], outs);
            if i == 2 {
                prevouts.push(TxOut {
                    value: Amount::from_sat(1_000),
                    script_pubkey: p2wsh.clone(),
                });
            } else {
                spend.input[0].witness = witness;
                prevouts.push(spent);
            }
            txs.push(spend);
        }
        let block = block_of(txs);
        let input = BlockWithPrevouts {
            height: Height(9),
            block,
            prevouts,
            size: 0,
        };
        let with = block_rows(&input, TxNum(40), true, true).unwrap();
        let without = block_rows(&input, TxNum(40), true, false).unwrap();
        assert!(without.indexed.sp.is_empty());
        assert_eq!((with.sp_records, without.sp_records), (2, 0));
        assert_eq!(with.indexed.rows, without.indexed.rows);
        assert_eq!(with.touched, without.touched);
        assert_eq!(with.indexed.txids, without.indexed.txids);
        let records: Vec<_> = osprey_sp::BlockRecords::new(&with.indexed.sp)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            records.iter().map(|r| r.position).collect::<Vec<_>>(),
            [1, 4]
        );
        let txs = &input.block.txdata;
        for record in &records {
            let position = record.position as usize;
            let spent = &input.prevouts[position - 1..position];
            let expected = osprey_sp::tweak_data(&txs[position], spent)
                .unwrap()
                .unwrap();
            assert_eq!(record.tweak_data().unwrap(), expected);
        }
        let prefixes: Vec<Vec<u8>> = records[1].output_prefixes().map(<[u8]>::to_vec).collect();
        assert_eq!(
            prefixes,
            [4u8, 5].map(|x| vec![x; osprey_sp::OUTPUT_PREFIX_LEN])
        );
    }

    #[test]
    fn incomplete_or_altered_blocks_are_refused() {
        let genesis = bitcoin::constants::genesis_block(bitcoin::Network::Regtest);
        let mut altered = genesis.clone();
        altered.txdata[0].output[0].value = Amount::from_sat(1);
        let input = BlockWithPrevouts {
            height: Height(1),
            block: altered,
            prevouts: vec![],
            size: 0,
        };
        let err = block_rows(&input, TxNum(0), true, false).err().unwrap();
        assert!(err.contains("merkle root"), "{err}");
        let input = BlockWithPrevouts {
            height: Height(1),
            block: genesis,
            prevouts: vec![TxOut {
                value: Amount::from_sat(1),
                script_pubkey: ScriptBuf::new(),
            }],
            size: 0,
        };
        let err = block_rows(&input, TxNum(0), true, false).err().unwrap();
        assert!(err.contains("spent outputs"), "{err}");
    }

    #[test]
    fn genesis_is_not_indexed() {
        let genesis = bitcoin::constants::genesis_block(bitcoin::Network::Regtest);
        let input = BlockWithPrevouts {
            height: Height(0),
            block: genesis,
            prevouts: vec![],
            size: 0,
        };
        let rows = block_rows(&input, TxNum(0), true, false).unwrap();
        assert!(rows.indexed.rows.is_empty());
        assert_eq!(rows.indexed.txids.len(), 1);
    }
}
