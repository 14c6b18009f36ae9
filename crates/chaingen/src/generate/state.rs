//! The generator's running state besides its draws: the big wallet's
//! addresses and history, the pools of live coins, and the mainnet
//! profile's running counts, with the schedule and the skewed draw they
//! use.

use std::collections::VecDeque;

use bitcoin::{ScriptBuf, Txid};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::params::{self, COINBASE_MATURITY};
use crate::shape::Shape;
use crate::sign::{size_max, Key, ScriptKind};
use crate::stats::OutputClass;
use crate::wallet::{BigWallet, RECEIVE};

use super::build::TxPlan;
use super::coins::{envelope_bytes, Coin, Dest, Owner};

/// Steering horizon, in outputs: a running count that is this far behind
/// its target is caught up at once, smaller gaps proportionally.
pub(super) const STEERING_WINDOW: f64 = 64.0;

/// A schedule that spreads `total` events evenly over heights
/// `start..=end`.
#[derive(Clone, Debug)]
pub(super) struct Quota {
    total: u64,
    start: u32,
    end: u32,
    pub(super) done: u64,
}

impl Quota {
    fn new(total: u64, start: u32, end: u32) -> Quota {
        Quota {
            total,
            start,
            end,
            done: 0,
        }
    }

    /// Events owed by height `height` and not done yet.
    pub(super) fn due(&self, height: u32) -> u64 {
        if height < self.start || self.end < self.start || self.total == 0 {
            return 0;
        }
        let span = u64::from(self.end - self.start) + 1;
        let elapsed = u64::from(height.min(self.end) - self.start) + 1;
        (self.total * elapsed / span).saturating_sub(self.done)
    }
}

/// Samples an index with probability proportional to `1 / (i + 1)`.
pub(super) fn zipf(rng: &mut ChaCha8Rng, n: usize) -> usize {
    let harmonic: f64 = (1..=n).map(|i| 1.0 / i as f64).sum();
    let mut x = rng.gen::<f64>() * harmonic;
    for i in 0..n {
        x -= 1.0 / (i + 1) as f64;
        if x <= 0.0 {
            return i;
        }
    }
    n - 1
}

/// The big wallet as the chain sees it: keys handed out so far and each
/// address's history.
pub(super) struct WalletState {
    pub(super) wallet: BigWallet,
    /// Keys and scripts of used addresses, per chain, by index.
    pub(super) keys: [Vec<(Key, ScriptBuf)>; 2],
    /// Confirmed history per chain and index: (txid, height) in chain order.
    pub(super) history: [Vec<Vec<(Txid, u32)>>; 2],
    receive_fresh_target: u32,
    pub(super) receive_events: Quota,
    pub(super) spend_events: Quota,
}

impl WalletState {
    pub(super) fn new(shape: &Shape) -> WalletState {
        let first_spend = params::SEGWIT_HEIGHT.max(COINBASE_MATURITY + 2);
        let receives_start = COINBASE_MATURITY + 1;
        let can_spend = shape.blocks > first_spend + 1;
        let addresses = u64::from(shape.wallet_addresses);
        // Three of five used addresses are receive addresses; every spend
        // sends change to a new change address and makes up the rest.
        let receive_fresh = if can_spend {
            addresses * 3 / 5
        } else {
            addresses
        };
        let spends = addresses - receive_fresh;
        // Half the receives go to an address that was used before, and
        // spends take about three coins, so most addresses end with
        // several transactions (funding and spending) and a few coins left.
        let receives = 2 * receive_fresh;
        WalletState {
            wallet: BigWallet::new(),
            keys: [Vec::new(), Vec::new()],
            history: [Vec::new(), Vec::new()],
            receive_fresh_target: receive_fresh as u32,
            receive_events: Quota::new(receives, receives_start, shape.blocks),
            spend_events: Quota::new(spends, first_spend, shape.blocks),
        }
    }

    /// Hands out the next unused address of `chain`.
    pub(super) fn next_address(&mut self, chain: u32) -> Dest {
        let index = self.keys[chain as usize].len() as u32;
        let key = self.wallet.key(chain, index);
        let script = key.script_pubkey(ScriptKind::P2wpkh);
        self.keys[chain as usize].push((key, script.clone()));
        self.history[chain as usize].push(Vec::new());
        Dest::Known {
            holder: key.into(),
            kind: ScriptKind::P2wpkh,
            script,
            owner: Owner::Wallet { chain, index },
            reused: false,
        }
    }

    /// The destination of an incoming payment: mostly the next fresh
    /// receive address, sometimes one used before (address reuse).
    pub(super) fn receive_dest(&mut self, rng: &mut ChaCha8Rng) -> Dest {
        let used = self.keys[RECEIVE as usize].len() as u64;
        let fresh_owed = u64::from(self.receive_fresh_target).saturating_sub(used);
        let events_left = self
            .receive_events
            .total
            .saturating_sub(self.receive_events.done)
            .max(1);
        // Fresh with the probability that keeps both targets on schedule.
        if used == 0 || rng.gen_range(0..events_left) < fresh_owed {
            return self.next_address(RECEIVE);
        }
        let index = rng.gen_range(0..used) as u32;
        let (key, script) = self.keys[RECEIVE as usize][index as usize].clone();
        Dest::Known {
            holder: key.into(),
            kind: ScriptKind::P2wpkh,
            script,
            owner: Owner::Wallet {
                chain: RECEIVE,
                index,
            },
            reused: true,
        }
    }

    pub(super) fn record(&mut self, chain: u32, index: u32, txid: Txid, height: u32) {
        let history = &mut self.history[chain as usize][index as usize];
        // A transaction touching an address twice is listed once.
        if history.last().map(|(t, _)| *t) != Some(txid) {
            history.push((txid, height));
        }
    }
}

/// Live coins by who may spend them. Coins enter at the end of the block
/// creating them, so a block never spends its own outputs.
#[derive(Default)]
pub(super) struct Pools {
    /// World coins spendable before segwit activates (P2PKH).
    pub(super) legacy: Vec<Coin>,
    /// World coins that need witness data to spend.
    pub(super) witness: Vec<Coin>,
    pub(super) wallet: Vec<Coin>,
    pub(super) exchange: Vec<Vec<Coin>>,
    /// Coinbase outputs waiting for maturity: (height, coin).
    pub(super) immature: VecDeque<(u32, Coin)>,
}

impl Pools {
    pub(super) fn add(&mut self, coin: Coin) {
        match coin.owner {
            Owner::World if coin.spend.kind.needs_witness() => self.witness.push(coin),
            Owner::World => self.legacy.push(coin),
            Owner::Wallet { .. } => self.wallet.push(coin),
            Owner::Exchange(n) => self.exchange[n as usize].push(coin),
        }
    }

    /// World coins a block at this segwit state may spend.
    pub(super) fn world_len(&self, segwit: bool) -> usize {
        self.legacy.len() + if segwit { self.witness.len() } else { 0 }
    }
}

/// Running counts of the chain planned so far (built blocks plus the
/// transactions planned for the block in progress), which the mainnet
/// profile steers towards the targets of [`crate::mainnet`].
#[derive(Default)]
pub(super) struct Steering {
    pub(super) txs: u64,
    pub(super) outputs: u64,
    outputs_by_class: [u64; 9],
    pub(super) reused: u64,
    /// Upper bound of the planned transactions' sizes.
    pub(super) bytes: u64,
    /// Witness bytes the envelope coins not yet spent will add when they
    /// are: bytes already committed to.
    pub(super) pending_envelope_bytes: u64,
}

impl Steering {
    pub(super) fn note_outputs(&mut self, classes: impl IntoIterator<Item = (OutputClass, bool)>) {
        for (class, reused) in classes {
            self.outputs += 1;
            self.outputs_by_class[class.index()] += 1;
            self.reused += u64::from(reused);
        }
    }

    pub(super) fn note_plan(&mut self, plan: &TxPlan) {
        self.txs += 1;
        self.note_outputs(
            plan.outputs
                .iter()
                .map(|o| (o.dest.class(), o.dest.is_reuse())),
        );
        let kinds: Vec<ScriptKind> = plan.inputs.iter().map(|c| c.spend.kind).collect();
        self.bytes += size_max(&kinds, plan.outputs.iter().map(|o| o.dest.script_len()));
        for kind in &kinds {
            self.pending_envelope_bytes = self
                .pending_envelope_bytes
                .saturating_sub(envelope_bytes(*kind));
        }
        for kind in plan.outputs.iter().filter_map(|o| o.dest.kind()) {
            self.pending_envelope_bytes += envelope_bytes(kind);
        }
    }

    pub(super) fn class_count(&self, class: OutputClass) -> u64 {
        self.outputs_by_class[class.index()]
    }

    /// Probability that the next event keeps a running count on target:
    /// the share itself when on track, up to 1 (or down to 0) when the
    /// count lags (leads) by [`STEERING_WINDOW`] events.
    pub(super) fn catch_up(target_share: f64, count: u64, total: u64) -> f64 {
        let wanted = target_share * (total as f64 + STEERING_WINDOW);
        ((wanted - count as f64) / STEERING_WINDOW).clamp(0.0, 1.0)
    }
}
