//! The silent payments of a chain with them: its receivers and their own
//! stream of draws, which planned payments become silent payments, and the
//! record of what was paid for the manifest and the statistics.

use bitcoin::{Transaction, Txid};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::manifest::{SilentPayment, SilentPaymentOutput};
use crate::sign::Holder;
use crate::silent::{self, Receiver};

use super::build::BuiltSilent;
use super::coins::{Coin, Dest};
use super::Generator;

/// The silent payments of a chain: who receives them and what was paid.
pub(super) struct SilentState {
    /// Its own stream of draws, so that a chain without silent payments
    /// draws exactly as before they existed.
    pub(super) rng: ChaCha8Rng,
    pub(super) receivers: Vec<Receiver>,
    /// The payments to each receiver, in chain order.
    pub(super) payments: Vec<Vec<SilentPayment>>,
}

/// The ChaCha stream of [`SilentState::rng`] (the generator's main draws
/// are stream 0 of the same seed).
const SILENT_STREAM: u64 = 1;

/// Share of the silent-payment transactions that pay two outputs (to one
/// receiver, `k` = 0 and 1, or to two), when they have two payments the
/// silent ones can take the place of.
const TWO_SILENT_OUTPUTS: f64 = 0.25;

pub(super) fn silent_rng(seed: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(SILENT_STREAM);
    rng
}

impl Generator {
    /// Counts a built transfer of a chain with silent payments, and puts
    /// its payments in the manifest.
    pub(super) fn record_silent(
        &mut self,
        built: &BuiltSilent,
        tx: &Transaction,
        txid: Txid,
        height: u32,
    ) {
        let (Some(stats), Some(state)) = (&mut self.stats.silent_payments, &mut self.silent) else {
            return;
        };
        stats.eligible_txs += u64::from(built.eligible);
        let Some(payment) = &built.payment else {
            return;
        };
        stats.paying_txs += 1;
        stats.outputs += payment.outputs.len() as u64;
        let tweak_key = hex::encode(payment.tweak_key);
        for (receiver, payments) in state.payments.iter_mut().enumerate() {
            let outputs: Vec<SilentPaymentOutput> = payment
                .outputs
                .iter()
                .filter(|out| usize::from(out.receiver) == receiver)
                .map(|out| SilentPaymentOutput {
                    vout: out.vout,
                    value: tx.output[out.vout as usize].value.to_sat(),
                    k: out.k,
                    label: out.label,
                })
                .collect();
            if !outputs.is_empty() {
                payments.push(SilentPayment {
                    txid: txid.to_string(),
                    height,
                    tweak_key: tweak_key.clone(),
                    outputs,
                });
            }
        }
    }

    /// In a chain with silent payments, makes one or two of the world
    /// payments among `dests` (the change, last when `has_change`, aside)
    /// silent payments to the chain's receivers, with the shape's
    /// probability, when `inputs` can pay one: one of them counts for
    /// BIP-352 and the sender has the secret of every one that counts
    /// (placeholder keys have none). Another output somebody spends must
    /// stay, to take the value above what nobody spends
    /// ([`FOREIGN_OUTPUT_MAX_SATS`]).
    ///
    /// [`FOREIGN_OUTPUT_MAX_SATS`]: super::coins::FOREIGN_OUTPUT_MAX_SATS
    pub(super) fn plan_silent_payments(
        &mut self,
        inputs: &[Coin],
        dests: &mut [Dest],
        has_change: bool,
    ) {
        let ppm = self.config.shape.silent_payments_ppm;
        let Some(state) = &mut self.silent else {
            return;
        };
        let mut counted = inputs.iter().filter(|c| silent::counts(c.spend.kind));
        let keys_known = counted
            .clone()
            .all(|c| matches!(c.spend.holder, Holder::Key(_)));
        if counted.next().is_none() || !keys_known {
            return;
        }
        if state.rng.gen_range(0..1_000_000) >= ppm {
            return;
        }
        let payments = dests.len() - usize::from(has_change);
        let mut chosen: Vec<usize> = (0..payments)
            .filter(|&i| dests[i].is_world_payment())
            .collect();
        let wanted = if chosen.len() >= 2 && state.rng.gen_bool(TWO_SILENT_OUTPUTS) {
            2
        } else {
            1
        };
        chosen.shuffle(&mut state.rng);
        chosen.truncate(wanted);
        let spent_remains = |chosen: &[usize]| {
            dests
                .iter()
                .enumerate()
                .any(|(i, dest)| !chosen.contains(&i) && dest.kind().is_some())
        };
        while !chosen.is_empty() && !spent_remains(&chosen) {
            chosen.pop();
        }
        if chosen.is_empty() {
            return;
        }
        let receivers = state.receivers.len();
        let first = state.rng.gen_range(0..receivers);
        // Two outputs: to the same receiver (k = 0 and 1) or to another.
        let second = if state.rng.gen_bool(0.5) {
            first
        } else {
            (first + state.rng.gen_range(1..receivers)) % receivers
        };
        for (n, &i) in chosen.iter().enumerate() {
            let receiver = if n == 0 { first } else { second };
            let labels: Vec<Option<u32>> = state.receivers[receiver].paid_labels().collect();
            let label = *labels
                .choose(&mut state.rng)
                .expect("every receiver has its unlabelled address");
            dests[i] = Dest::Silent {
                receiver: receiver as u8,
                label,
            };
        }
    }
}
