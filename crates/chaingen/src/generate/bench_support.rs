//! Support for `benches/sign_transactions.rs`: plans transfers once, so the
//! benchmark times exactly what the generator does on every core per block
//! (derive fresh keys, assemble, sign, hash).

use bitcoin::hashes::Hash;
use bitcoin::{Amount, OutPoint, Transaction, TxOut, Txid};
use rand::Rng;
use rayon::prelude::*;

use crate::shape::Shape;
use crate::sign::{Key, Spend};

use super::build::{build_tx, TxPlan};
use super::coins::{Coin, Owner};
use super::{Config, Generator, Signatures};

/// Planned transfers spending a mixed pool of every script kind.
pub struct Prepared {
    seed: u64,
    plans: Vec<TxPlan>,
}

/// Plans `txs` world transfers at a post-segwit height from a pool of
/// made-up coins of every kind.
pub fn prepare(txs: usize, seed: u64) -> Prepared {
    let shape = Shape {
        blocks: 2_000,
        txs_per_block: txs as u32,
        ..crate::Preset::Medium.shape()
    };
    let mut g = Generator::new(Config {
        preset: "bench".into(),
        seed,
        shape,
        signatures: Signatures::Real,
    })
    .expect("valid shape");
    let height = 1_500;
    for i in 0..(3 * txs) as u64 {
        let kind = g.sample_kind(height);
        let key = Key::from_seed(seed ^ 0xbe4c, i);
        let value = g.rng.gen_range(100_000..100_000_000);
        let txid = Txid::from_byte_array(
            bitcoin::hashes::sha256d::Hash::hash(&i.to_le_bytes()).to_byte_array(),
        );
        g.pools.add(Coin {
            outpoint: OutPoint { txid, vout: 0 },
            spend: Spend {
                txout: TxOut {
                    value: Amount::from_sat(value),
                    script_pubkey: key.script_pubkey(kind),
                },
                holder: key.into(),
                kind,
            },
            owner: Owner::World,
        });
    }
    g.pool_target = usize::MAX;
    let plans = (0..txs)
        .map_while(|_| g.plan_world_tx(height, false))
        .collect();
    Prepared { seed, plans }
}

impl Prepared {
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Inputs over all planned transfers.
    pub fn inputs(&self) -> usize {
        self.plans.iter().map(|p| p.inputs.len()).sum()
    }

    /// Builds and signs every transfer on the current rayon pool and
    /// returns the signed transactions.
    pub fn build_parallel(&self) -> Vec<Transaction> {
        self.plans
            .par_iter()
            .with_min_len(4)
            .map(|p| build_tx(self.seed, Signatures::Real, None, p).tx)
            .collect()
    }

    /// The same on the calling thread only.
    pub fn build_serial(&self) -> Vec<Transaction> {
        self.plans
            .iter()
            .map(|p| build_tx(self.seed, Signatures::Real, None, p).tx)
            .collect()
    }
}
