//! Choosing every transaction of a block: the big wallet's spends,
//! exchange withdrawals and world payments, each with its inputs, outputs,
//! fee and values, within the block's consensus limits.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::mainnet;
use crate::params::{self, COINBASE_MATURITY, MAX_BLOCK_SIGOPS_COST, MAX_BLOCK_WEIGHT};
use crate::shape::Profile;
use crate::sign::{vsize_max, ScriptKind};
use crate::wallet::CHANGE;

use super::build::{OutPlan, TxPlan};
use super::coins::{Coin, Dest, Owner, FOREIGN_OUTPUT_MAX_SATS};
use super::state::STEERING_WINDOW;
use super::Generator;

/// Smallest output the generator creates: above every dust limit (546 sats
/// for P2PKH), so every transaction is relay-standard.
const MIN_OUTPUT_SATS: u64 = 1_000;
/// Most inputs one transaction takes; keeps every transaction far below the
/// standard size limit.
const MAX_INPUTS: usize = 20;
/// Planning stops when a block is this close to a consensus limit, which no
/// single planned transaction can exceed (20 inputs, 20 outputs).
const BLOCK_WEIGHT_RESERVE: u64 = 40_000;
const BLOCK_SIGOPS_RESERVE: u64 = 400;
/// The same for the mainnet profile, whose batches reach
/// [`MAX_BATCH_OUTPUTS`] outputs and whose envelope spends carry up to
/// [`MAX_ENVELOPE_BYTES`] witness bytes per input.
///
/// [`MAX_ENVELOPE_BYTES`]: super::destinations::MAX_ENVELOPE_BYTES
const MAINNET_BLOCK_WEIGHT_RESERVE: u64 = 200_000;
const MAINNET_BLOCK_SIGOPS_RESERVE: u64 = 2_000;
/// Most outputs of one mainnet-profile transaction (exchange-style batch).
const MAX_BATCH_OUTPUTS: usize = 200;

/// Where a transaction's inputs come from.
#[derive(Clone, Copy)]
enum Source {
    World,
    Wallet,
    Exchange(u32),
}

/// Running totals of one block's consensus limits, and how close to them
/// planning may go.
struct Budget {
    weight: u64,
    sigops: u64,
    weight_reserve: u64,
    sigops_reserve: u64,
}

impl Budget {
    fn new(profile: Profile) -> Budget {
        let (weight_reserve, sigops_reserve) = match profile {
            Profile::Synthetic => (BLOCK_WEIGHT_RESERVE, BLOCK_SIGOPS_RESERVE),
            Profile::Mainnet => (MAINNET_BLOCK_WEIGHT_RESERVE, MAINNET_BLOCK_SIGOPS_RESERVE),
        };
        Budget {
            weight: 0,
            sigops: 0,
            weight_reserve,
            sigops_reserve,
        }
    }

    fn full(&self) -> bool {
        self.weight + self.weight_reserve > MAX_BLOCK_WEIGHT
            || self.sigops + self.sigops_reserve > MAX_BLOCK_SIGOPS_COST
    }

    fn add(&mut self, plan: &TxPlan) {
        let kinds: Vec<ScriptKind> = plan.inputs.iter().map(|c| c.spend.kind).collect();
        let vsize = vsize_max(&kinds, plan.outputs.iter().map(|o| o.dest.script_len()));
        self.weight += 4 * vsize;
        // Segwit v0 inputs count one sigop each (taproot none); P2PKH
        // outputs four.
        self.sigops += kinds.iter().filter(|k| !k.is_taproot()).count() as u64
            + plan
                .outputs
                .iter()
                .map(|o| o.dest.sigops_cost())
                .sum::<u64>();
    }
}

impl Generator {
    /// Chooses every transaction of the block at `height`.
    pub(super) fn plan_block(&mut self, height: u32) -> Vec<TxPlan> {
        while let Some((h, _)) = self.pools.immature.front() {
            if h + COINBASE_MATURITY > height {
                break;
            }
            let (_, coin) = self.pools.immature.pop_front().expect("front exists");
            self.pools.add(coin);
        }
        let segwit = params::segwit_active(height);
        let mut budget = Budget::new(self.config.shape.profile);
        let mut plans = Vec::new();
        let target = self.target_txs(height);

        // The big wallet spends...
        if segwit {
            let due = self.wallet.spend_events.due(height);
            for _ in 0..due {
                if self.pools.wallet.is_empty() || budget.full() {
                    break;
                }
                let Some(plan) = self.plan_wallet_spend(height) else {
                    break;
                };
                self.wallet.spend_events.done += 1;
                self.accept(plan, &mut budget, &mut plans);
            }
        }

        // ...exchanges pay out in batches...
        let max_withdrawals = (target / 40).max(1);
        for n in 0..self.exchanges.len() {
            let kind = self.exchanges[n].1;
            if kind.needs_witness() && !segwit {
                continue;
            }
            for _ in 0..max_withdrawals {
                if self.pools.exchange[n].len() < 4 || budget.full() {
                    break;
                }
                let Some(plan) = self.plan_exchange_withdrawal(height, n as u32) else {
                    break;
                };
                self.accept(plan, &mut budget, &mut plans);
            }
        }

        // ...and the world pays each other, the wallet among them. The
        // mainnet profile's target counts every transfer of the block.
        let world_target = match self.config.shape.profile {
            Profile::Synthetic => target,
            Profile::Mainnet => target.saturating_sub(plans.len()),
        };
        let mut receives_due = self.wallet.receive_events.due(height);
        let mut world_txs = 0usize;
        while (world_txs < world_target || receives_due > 0) && !budget.full() {
            let receive = receives_due > 0;
            let Some(plan) = self.plan_world_tx(height, receive) else {
                break;
            };
            if receive {
                receives_due -= 1;
                self.wallet.receive_events.done += 1;
            }
            self.accept(plan, &mut budget, &mut plans);
            world_txs += 1;
        }

        plans.shuffle(&mut self.rng);
        plans
    }

    /// Adds a planned transaction to the block.
    fn accept(&mut self, plan: TxPlan, budget: &mut Budget, plans: &mut Vec<TxPlan>) {
        if let Some(steering) = &mut self.steering {
            steering.note_plan(&plan);
        }
        budget.add(&plan);
        plans.push(plan);
    }

    /// Number of world transactions wanted at `height`: zero until coins
    /// mature, then ramping from 30% to 170% of the average over the chain
    /// (blocks fill up over time like mainnet's), with +-30% noise.
    /// In the mainnet profile: the transfers that keep the chain on
    /// `txs_per_block` transactions per block, genesis and coinbases
    /// included, spread evenly over the blocks left, with +-10% noise.
    fn target_txs(&mut self, height: u32) -> usize {
        let first = COINBASE_MATURITY + 1;
        if height < first {
            return 0;
        }
        if self.config.shape.profile == Profile::Mainnet {
            let blocks = u64::from(self.config.shape.blocks) + 1;
            let wanted = u64::from(self.config.shape.txs_per_block) * blocks;
            let blocks_left = u64::from(self.config.shape.blocks - height) + 1;
            let per_block = wanted.saturating_sub(self.tx_count) as f64 / blocks_left as f64;
            let noise = self.rng.gen_range(0.9..1.1);
            return ((per_block - 1.0) * noise).max(0.0).round() as usize;
        }
        let span = f64::from(self.config.shape.blocks.saturating_sub(first).max(1));
        let progress = f64::from(height - first) / span;
        let ramp = 0.3 + 1.4 * progress.min(1.0);
        let noise = self.rng.gen_range(0.7..1.3);
        (f64::from(self.config.shape.txs_per_block) * ramp * noise).round() as usize
    }

    fn take_coin(&mut self, source: Source, segwit: bool) -> Option<Coin> {
        let rng = &mut self.rng;
        let pick = |rng: &mut ChaCha8Rng, pool: &mut Vec<Coin>| {
            (!pool.is_empty()).then(|| {
                let i = rng.gen_range(0..pool.len());
                pool.swap_remove(i)
            })
        };
        match source {
            Source::World => {
                let len = self.pools.world_len(segwit);
                if len == 0 {
                    return None;
                }
                let i = rng.gen_range(0..len);
                Some(if i < self.pools.legacy.len() {
                    self.pools.legacy.swap_remove(i)
                } else {
                    self.pools.witness.swap_remove(i - self.pools.legacy.len())
                })
            }
            Source::Wallet => pick(rng, &mut self.pools.wallet),
            Source::Exchange(n) => pick(rng, &mut self.pools.exchange[n as usize]),
        }
    }

    /// Number of inputs of a world transaction: mostly one or two, a tail
    /// of consolidations, and more while the pool is above its target size
    /// (which keeps memory bounded on long chains).
    fn world_input_count(&mut self, segwit: bool) -> usize {
        if self.steering.is_some() {
            return self.mainnet_input_count(segwit);
        }
        let r = self.rng.gen_range(0..100);
        let mut n = match r {
            0..=54 => 1,
            55..=82 => 2,
            83..=92 => 3,
            93..=96 => 4,
            _ => self.rng.gen_range(5..=12),
        };
        let pressure = self.pools.world_len(segwit) as f64 / self.pool_target as f64;
        if pressure > 1.0 && self.rng.gen::<f64>() < (pressure - 1.0).min(1.0) {
            n += self.rng.gen_range(1..=3);
        }
        n
    }

    /// Inputs of a mainnet-profile world transaction. Mainnet's mean
    /// follows from its outputs (all but the ~5% never spent are spent
    /// once), so the count only has to keep the spendable pool near its
    /// target: a mainnet-like draw (mostly one or two, a consolidation
    /// tail), a single input while the pool is short (the first blocks
    /// after coinbase maturity), and up to six more while it is long (as
    /// after segwit activation, when the P2SH coins of the legacy era
    /// become spendable).
    fn mainnet_input_count(&mut self, segwit: bool) -> usize {
        let pressure = self.pools.world_len(segwit) as f64 / self.pool_target as f64;
        if pressure < 1.0 && self.rng.gen_bool(1.0 - pressure) {
            return 1;
        }
        let mut n = match self.rng.gen_range(0..100) {
            0..=54 => 1,
            55..=79 => 2,
            80..=89 => 3,
            90..=94 => 4,
            _ => self.rng.gen_range(5..=MAX_INPUTS),
        };
        if pressure > 1.0 && self.rng.gen_bool((pressure - 1.0).min(1.0)) {
            n += self.rng.gen_range(1..=6);
        }
        n
    }

    /// Value outputs (payments plus change) of a mainnet-profile world
    /// transaction: mostly two (payment and change), some single-output
    /// sweeps, a tail of batches up to [`MAX_BATCH_OUTPUTS`]; averaging
    /// ~2.6, one more or less while the chain's outputs per transaction
    /// lag or lead [`mainnet::OUTPUTS_PER_TX`] (OP_RETURNs come on top).
    fn mainnet_output_count(&mut self) -> usize {
        let n = match self.rng.gen_range(0..1000) {
            0..=179 => 1,
            180..=839 => 2,
            840..=919 => 3,
            920..=949 => 4,
            950..=984 => self.rng.gen_range(5..=9),
            985..=998 => self.rng.gen_range(10..=40),
            _ => self.rng.gen_range(100..=MAX_BATCH_OUTPUTS),
        };
        let steering = self.steering.as_ref().expect("mainnet profile");
        let lag = mainnet::OUTPUTS_PER_TX * steering.txs as f64 - steering.outputs as f64;
        if lag > STEERING_WINDOW {
            n + 1
        } else if lag < -STEERING_WINDOW && n == 2 {
            1
        } else {
            n
        }
    }

    /// Number of value outputs (payments plus change) of a world
    /// transaction; averages about 2.5.
    fn world_output_count(&mut self) -> usize {
        if self.steering.is_some() {
            return self.mainnet_output_count();
        }
        match self.rng.gen_range(0..100) {
            0..=11 => 1,
            12..=76 => 2,
            77..=89 => 3,
            90..=96 => self.rng.gen_range(4..=6),
            _ => self.rng.gen_range(7..=15),
        }
    }

    fn fee_rate(&mut self) -> u64 {
        // sat/vB: mostly 1-5, a tail up to ~40, never below the relay floor.
        1 + (self.rng.gen::<f64>().powi(3) * 40.0) as u64
    }

    pub(super) fn plan_world_tx(&mut self, height: u32, wallet_receive: bool) -> Option<TxPlan> {
        let segwit = params::segwit_active(height);
        let n_in = self.world_input_count(segwit);
        let mut inputs = Vec::with_capacity(n_in);
        for _ in 0..n_in {
            match self.take_coin(Source::World, segwit) {
                Some(coin) => inputs.push(coin),
                None => break,
            }
        }
        if inputs.is_empty() {
            return None;
        }
        let wanted = self.world_output_count();
        let change_kind = if self.rng.gen_range(0..10) < 7 {
            inputs[0].spend.kind
        } else {
            self.sample_kind(height)
        };
        // Mainnet wallets often send the change back to the address they
        // spend from (most of mainnet's reuse, per BitMEX Research).
        let first_input = Dest::Known {
            holder: inputs[0].spend.holder,
            kind: inputs[0].spend.kind,
            script: inputs[0].spend.txout.script_pubkey.clone(),
            owner: Owner::World,
            reused: true,
        };
        self.finish_plan(
            height,
            inputs,
            Source::World,
            wanted,
            |g, i| {
                if i == 0 && wallet_receive {
                    g.wallet.receive_dest(&mut g.rng)
                } else {
                    g.world_dest(height)
                }
            },
            move |g| {
                if g.steering.is_some() && g.steer_reuse() {
                    if let Some(dest) = g.steered_reuse(height, Some(first_input)) {
                        return dest;
                    }
                }
                g.fresh(change_kind)
            },
        )
    }

    fn plan_wallet_spend(&mut self, height: u32) -> Option<TxPlan> {
        let n_in = match self.rng.gen_range(0..100) {
            0..=29 => 1,
            30..=59 => 2,
            _ => self.rng.gen_range(3..=6),
        };
        let inputs: Vec<Coin> = (0..n_in)
            .filter_map(|_| self.take_coin(Source::Wallet, true))
            .collect();
        if inputs.is_empty() {
            return None;
        }
        let payments = if self.rng.gen_range(0..100) < 85 {
            1
        } else {
            2
        };
        self.finish_plan(
            height,
            inputs,
            Source::Wallet,
            payments + 1,
            |g, _| {
                let r = g.rng.gen_range(0..100);
                let dest = if r < 30 {
                    g.exchange_dest()
                } else if g.steering.is_some() {
                    Some(g.world_dest(height))
                } else if r < 40 {
                    g.reused()
                } else {
                    None
                };
                dest.unwrap_or_else(|| {
                    let kind = g.sample_kind(height);
                    g.fresh(kind)
                })
            },
            |g| g.wallet.next_address(CHANGE),
        )
    }

    fn plan_exchange_withdrawal(&mut self, height: u32, n: u32) -> Option<TxPlan> {
        let segwit = params::segwit_active(height);
        let n_in = self.rng.gen_range(2..=8);
        let inputs: Vec<Coin> = (0..n_in)
            .filter_map(|_| self.take_coin(Source::Exchange(n), segwit))
            .collect();
        if inputs.is_empty() {
            return None;
        }
        let payouts = self.rng.gen_range(2..=8);
        let (key, kind, script) = self.exchanges[n as usize].clone();
        self.finish_plan(
            height,
            inputs,
            Source::Exchange(n),
            payouts + 1,
            |g, _| {
                if g.steering.is_some() {
                    return g.world_dest(height);
                }
                let r = g.rng.gen_range(0..100);
                if r < 10 {
                    if let Some(dest) = g.reused() {
                        return dest;
                    }
                }
                let kind = g.sample_kind(height);
                if r < 25 {
                    g.foreign(kind)
                } else {
                    g.fresh(kind)
                }
            },
            // The exchange holds coins, so its script was paid before.
            move |_| Dest::Known {
                holder: key.into(),
                kind,
                script,
                owner: Owner::Exchange(n),
                reused: true,
            },
        )
    }

    /// Completes a plan: decides how many outputs the inputs can pay for
    /// (taking more inputs from `source` if they cannot pay for one), picks
    /// destinations (`payment(g, i)`, then `change(g)` last when there is
    /// room for it) and splits the value. Returns the coins to their pool
    /// and `None` when even one output is unaffordable.
    fn finish_plan(
        &mut self,
        height: u32,
        mut inputs: Vec<Coin>,
        source: Source,
        wanted_outputs: usize,
        mut payment: impl FnMut(&mut Generator, usize) -> Dest,
        change: impl FnOnce(&mut Generator) -> Dest,
    ) -> Option<TxPlan> {
        let segwit = params::segwit_active(height);
        let fee_rate = self.fee_rate();
        let carries_data = if self.steering.is_some() {
            self.steer_op_return()
        } else {
            self.rng.gen_range(0..1000) < 15
        };
        let op_return = carries_data.then(|| {
            let len = self.rng.gen_range(8..=80);
            (0..len).map(|_| self.rng.gen::<u8>()).collect::<Vec<u8>>()
        });
        let op_return_len = op_return
            .as_ref()
            .map(|d| Dest::OpReturn(d.clone()).script_len());
        // Fee and minimum value of `k` value outputs, at the largest
        // output size, so the real transaction can only be cheaper.
        let cost = |inputs: &[Coin], k: usize| {
            let kinds: Vec<ScriptKind> = inputs.iter().map(|c| c.spend.kind).collect();
            let vsize = vsize_max(&kinds, std::iter::repeat_n(34, k).chain(op_return_len));
            fee_rate * vsize + k as u64 * MIN_OUTPUT_SATS
        };
        let total_in = |inputs: &[Coin]| {
            inputs
                .iter()
                .map(|c| c.spend.txout.value.to_sat())
                .sum::<u64>()
        };
        while total_in(&inputs) < cost(&inputs, 1) && inputs.len() < MAX_INPUTS {
            match self.take_coin(source, segwit) {
                Some(coin) => inputs.push(coin),
                None => break,
            }
        }
        let total = total_in(&inputs);
        let mut k = wanted_outputs.max(1);
        while k > 0 && total < cost(&inputs, k) {
            k -= 1;
        }
        if k == 0 {
            for coin in inputs {
                self.pools.add(coin);
            }
            return None;
        }
        // The change goes last and exists when there is room for it.
        let has_change = wanted_outputs >= 2 && k >= 2;
        let payments = if has_change { k - 1 } else { k };
        let mut dests: Vec<Dest> = (0..payments).map(|i| payment(self, i)).collect();
        if has_change {
            dests.push(change(self));
        }
        if dests.iter().all(|d| matches!(d, Dest::Foreign(_))) {
            // Somebody must receive the bulk of the value, or cold storage
            // would drain the spendable supply.
            let kind = self.sample_kind(height);
            *dests.last_mut().expect("k >= 1") = self.fresh(kind);
        }
        self.plan_silent_payments(&inputs, &mut dests, has_change);

        // Exact-ish fee from the real output sizes; still an upper bound.
        // `cost` priced every output at 34 bytes, but a foreign bare
        // multisig script is longer: when that makes the outputs
        // unaffordable, payments go (the first ones; the change stays
        // last). Unchecked, the subtraction below wrapped around and made
        // an output of 2^64 satoshis, which Bitcoin Core rejects
        // (bad-txns-vout-toolarge, mainnet preset at height 122).
        let kinds: Vec<ScriptKind> = inputs.iter().map(|c| c.spend.kind).collect();
        let fee_of = |dests: &[Dest]| {
            fee_rate
                * vsize_max(
                    &kinds,
                    dests.iter().map(Dest::script_len).chain(op_return_len),
                )
        };
        let unaffordable =
            |dests: &[Dest]| total < fee_of(dests) + dests.len() as u64 * MIN_OUTPUT_SATS;
        while unaffordable(&dests) && dests.len() > 1 {
            dests.remove(0);
        }
        if unaffordable(&dests) {
            for coin in inputs {
                self.pools.add(coin);
            }
            return None;
        }
        let has_change = has_change && dests.len() >= 2;
        let fee = fee_of(&dests);
        let spare = total - fee - dests.len() as u64 * MIN_OUTPUT_SATS;
        // Payments take a skewed share (mostly small), change the rest.
        let weights: Vec<f64> = dests
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let u = self.rng.gen::<f64>();
                if has_change && i == dests.len() - 1 {
                    0.2 + u
                } else {
                    0.05 + u * u
                }
            })
            .collect();
        let weight_sum: f64 = weights.iter().sum();
        let mut values: Vec<u64> = weights
            .iter()
            .map(|w| MIN_OUTPUT_SATS + (spare as f64 * w / weight_sum) as u64)
            .collect();
        let assigned: u64 = values.iter().sum();
        *values.last_mut().expect("k >= 1") += total - fee - assigned;
        // Cold storage and silent payments take little; the excess moves
        // to the last output that somebody will spend.
        if let Some(sink) = dests.iter().rposition(|d| !d.is_unspent()) {
            for i in 0..dests.len() {
                if dests[i].is_unspent() && values[i] > FOREIGN_OUTPUT_MAX_SATS {
                    let excess = values[i] - FOREIGN_OUTPUT_MAX_SATS;
                    values[i] -= excess;
                    values[sink] += excess;
                }
            }
        }
        let mut outputs: Vec<OutPlan> = dests
            .into_iter()
            .zip(values)
            .map(|(dest, value)| OutPlan { value, dest })
            .collect();
        if let Some(data) = op_return {
            let at = self.rng.gen_range(0..=outputs.len());
            outputs.insert(
                at,
                OutPlan {
                    value: 0,
                    dest: Dest::OpReturn(data),
                },
            );
        }
        // Half the wallets set nLockTime to the tip height against fee
        // sniping; the input sequence keeps it enforced.
        let lock_time = if self.rng.gen_bool(0.5) {
            height - 1
        } else {
            0
        };
        Some(TxPlan {
            inputs,
            outputs,
            lock_time,
        })
    }
}
