//! Making one block: plan it, build and sign its transfers on every core,
//! then connect them (new coins into the pools, wallet history, silent
//! payments, statistics) and add the coinbase, the witness commitment and
//! the proof of work.

use std::time::Instant;

use bitcoin::absolute::LockTime;
use bitcoin::block::Header;
use bitcoin::hashes::Hash;
use bitcoin::script::{Builder, PushBytesBuf};
use bitcoin::transaction::Version;
use bitcoin::{
    Amount, Block, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxMerkleNode, TxOut, Txid,
    Witness, WitnessMerkleNode, Wtxid,
};
use rayon::prelude::*;

use crate::params;
use crate::sign::{ScriptKind, Spend};
use crate::stats::OutputClass;

use super::build::{build_tx, BuiltTx};
use super::coins::{Coin, Owner};
use super::state::zipf;
use super::{Generator, MINERS};

/// Coinbase outputs worth less than this are not spent (late regtest blocks
/// earn almost nothing).
const MIN_SPENDABLE_COINBASE_SATS: u64 = 10_000;

impl Generator {
    pub(super) fn make_block(&mut self, height: u32) -> Block {
        let started = Instant::now();
        // The tail past the shape's blocks holds coinbases only.
        let plans = if height <= self.config.shape.blocks {
            self.plan_block(height)
        } else {
            Vec::new()
        };
        self.planning += started.elapsed();
        let started = Instant::now();
        let (seed, signatures) = (self.config.seed, self.config.signatures);
        let receivers = self.silent.as_ref().map(|s| &s.receivers[..]);
        // Per-transaction work is ~50-100 us signed (a few us with
        // placeholders); chunks of 4 keep rayon's overhead small without
        // starving the second core on small blocks.
        let built: Vec<BuiltTx> = plans
            .par_iter()
            .with_min_len(4)
            .map(|plan| build_tx(seed, signatures, receivers, plan))
            .collect();
        self.signing += started.elapsed();
        self.transfer_count += built.len() as u64;

        let mut fees = 0u64;
        let mut txdata = Vec::with_capacity(built.len() + 1);
        txdata.push(Transaction {
            version: Version::TWO,
            lock_time: LockTime::ZERO,
            input: vec![],
            output: vec![],
        });
        let mut touched: Vec<(u32, u32)> = Vec::new();
        // The coinbase's hashes come first once it is made; the witness
        // commitment counts its wtxid as zero.
        let mut txids = Vec::with_capacity(built.len() + 1);
        let mut wtxids = Vec::with_capacity(built.len() + 1);
        wtxids.push(Wtxid::all_zeros());
        for (plan, built) in plans.into_iter().zip(built) {
            txids.push(built.txid);
            wtxids.push(built.wtxid);
            let out_sum: u64 = built.tx.output.iter().map(|o| o.value.to_sat()).sum();
            let in_sum: u64 = plan
                .inputs
                .iter()
                .map(|c| c.spend.txout.value.to_sat())
                .sum();
            fees += in_sum - out_sum;
            touched.clear();
            for coin in &plan.inputs {
                if let Owner::Wallet { chain, index } = coin.owner {
                    touched.push((chain, index));
                }
            }
            for (vout, (new, txout)) in built
                .new_coins
                .into_iter()
                .zip(&built.tx.output)
                .enumerate()
            {
                let Some((holder, kind, owner)) = new else {
                    continue;
                };
                if let Owner::Wallet { chain, index } = owner {
                    touched.push((chain, index));
                }
                if owner == Owner::World && self.steering.is_some() {
                    self.remember_reusable(holder, kind, &txout.script_pubkey);
                }
                self.pools.add(Coin {
                    outpoint: OutPoint {
                        txid: built.txid,
                        vout: vout as u32,
                    },
                    spend: Spend {
                        txout: txout.clone(),
                        holder,
                        kind,
                    },
                    owner,
                });
            }
            for &(chain, index) in &touched {
                self.wallet.record(chain, index, built.txid, height);
            }
            if let Some(silent) = &built.silent {
                self.record_silent(silent, &built.tx, built.txid, height);
            }
            let reused = plan.outputs.iter().filter(|o| o.dest.is_reuse()).count();
            self.stats.record_tx(&built.tx, reused as u64);
            txdata.push(built.tx);
        }

        let miner = zipf(&mut self.rng, MINERS);
        let (miner_key, miner_script) = self.miners[miner].clone();
        let miner_reused = std::mem::replace(&mut self.miner_used[miner], true);
        let reward = params::subsidy(height).to_sat() + fees;
        let segwit = params::segwit_active(height);
        let mut script_sig = Builder::new()
            .push_int(i64::from(height))
            .push_slice(b"/osprey-chaingen/");
        // Keeps coinbases of different seeds distinct, like an extranonce.
        script_sig = script_sig.push_slice(self.config.seed.to_le_bytes());
        let mut coinbase = Transaction {
            version: Version::TWO,
            lock_time: LockTime::ZERO,
            input: vec![TxIn {
                previous_output: OutPoint::null(),
                script_sig: script_sig.into_script(),
                sequence: Sequence::MAX,
                witness: Witness::new(),
            }],
            output: vec![TxOut {
                value: Amount::from_sat(reward),
                script_pubkey: miner_script.clone(),
            }],
        };
        if segwit {
            // BIP141: the coinbase witness holds the 32-byte reserved value.
            coinbase.input[0].witness.push([0u8; 32]);
        }
        txdata[0] = coinbase;
        let mut block = Block {
            header: Header {
                version: params::block_version(height),
                prev_blockhash: self.prev_hash,
                merkle_root: TxMerkleNode::all_zeros(),
                time: params::block_time(height),
                bits: params::regtest_bits(),
                nonce: 0,
            },
            txdata,
        };
        if segwit {
            let witness_root: WitnessMerkleNode =
                bitcoin::merkle_tree::calculate_root(wtxids.into_iter().map(Wtxid::to_raw_hash))
                    .expect("block has a coinbase")
                    .into();
            let commitment = Block::compute_witness_commitment(&witness_root, &[0u8; 32]);
            let mut data = vec![0xaa, 0x21, 0xa9, 0xed];
            data.extend_from_slice(commitment.as_byte_array());
            let data = PushBytesBuf::try_from(data).expect("36 bytes");
            block.txdata[0].output.push(TxOut {
                value: Amount::ZERO,
                script_pubkey: ScriptBuf::new_op_return(data),
            });
        }
        self.stats
            .record_tx(&block.txdata[0], u64::from(miner_reused));
        if let Some(steering) = &mut self.steering {
            steering.txs += 1;
            steering.note_outputs(
                block.txdata[0]
                    .output
                    .iter()
                    .map(|o| (OutputClass::of(&o.script_pubkey), false)),
            );
            steering.reused += u64::from(miner_reused);
        }
        let coinbase_txid = block.txdata[0].compute_txid();
        block.header.merkle_root = bitcoin::merkle_tree::calculate_root(
            std::iter::once(coinbase_txid)
                .chain(txids)
                .map(Txid::to_raw_hash),
        )
        .expect("block has a coinbase")
        .into();
        let target = block.header.target();
        while !target.is_met_by(block.header.block_hash()) {
            // Regtest difficulty: about two tries per block.
            block.header.nonce += 1;
        }

        if reward >= MIN_SPENDABLE_COINBASE_SATS {
            let coin = Coin {
                outpoint: OutPoint {
                    txid: coinbase_txid,
                    vout: 0,
                },
                spend: Spend {
                    txout: block.txdata[0].output[0].clone(),
                    holder: miner_key.into(),
                    kind: ScriptKind::P2pkh,
                },
                owner: Owner::World,
            };
            self.pools.immature.push_back((height, coin));
        }
        block
    }
}
