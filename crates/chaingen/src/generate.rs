//! The chain generator: turns a seed and a [`Shape`] into valid regtest
//! blocks and the manifest of the big wallet's expected answers.
//!
//! Each block is made in three steps. Planning is sequential and holds all
//! the randomness: which coins are spent, where value goes, fees, which
//! wallet addresses are used. Building is a pure function of a plan and runs
//! on every core with rayon: derive fresh keys, assemble and sign the
//! transaction. Connecting is sequential again: register the new coins,
//! record wallet history, add the coinbase, commitments and proof of work.
//! So the same seed gives byte-identical blocks whatever the thread count.
//!
//! Coins are only spent in a later block than the one creating them, so the
//! transactions of a block never depend on each other and can be signed in
//! any order.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use bitcoin::absolute::LockTime;
use bitcoin::block::Header;
use bitcoin::blockdata::constants::genesis_block;
use bitcoin::hashes::Hash;
use bitcoin::key::TweakedPublicKey;
use bitcoin::script::{Builder, PushBytesBuf};
use bitcoin::transaction::Version;
use bitcoin::{
    Amount, Block, BlockHash, Network, OutPoint, ScriptBuf, Sequence, Transaction, TxIn,
    TxMerkleNode, TxOut, Txid, Witness, WitnessMerkleNode, Wtxid,
};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::blkfile::{BlkError, BlkWriter};
use crate::mainnet;
use crate::manifest::{
    Manifest, PlaceholderSignatures, SilentPayment, SilentPaymentOutput, SilentPaymentReceiver,
    WalletAddress, WalletManifest,
};
use crate::params::{
    self, COINBASE_MATURITY, MAX_BLOCK_SIGOPS_COST, MAX_BLOCK_WEIGHT, REGTEST_MAGIC,
};
use crate::shape::{Profile, Shape};
use crate::sign::{
    sign_placeholders, sign_transaction, size_max, vsize_max, Holder, Key, PlaceholderKey,
    ScriptKind, Spend,
};
use crate::silent::{self, Receiver};
use crate::stats::{ChainStats, OutputClass, SilentPaymentStats, STATS_FILE};
use crate::wallet::{BigWallet, CHANGE, RECEIVE};

/// Smallest output the generator creates: above every dust limit (546 sats
/// for P2PKH), so every transaction is relay-standard.
const MIN_OUTPUT_SATS: u64 = 1_000;
/// Outputs to scripts nobody spends (cold storage) take little value, so the
/// spendable supply does not drain away over millions of transactions.
const FOREIGN_OUTPUT_MAX_SATS: u64 = 100_000;
/// Coinbase outputs worth less than this are not spent (late regtest blocks
/// earn almost nothing).
const MIN_SPENDABLE_COINBASE_SATS: u64 = 10_000;
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
const MAINNET_BLOCK_WEIGHT_RESERVE: u64 = 200_000;
const MAINNET_BLOCK_SIGOPS_RESERVE: u64 = 2_000;
/// Most outputs of one mainnet-profile transaction (exchange-style batch).
const MAX_BATCH_OUTPUTS: usize = 200;
/// Data bytes of the largest and smallest envelopes (a few kB, like most
/// image inscriptions; BRC-20 text is ~100 bytes).
const MAX_ENVELOPE_BYTES: u16 = 4_000;
const MIN_ENVELOPE_BYTES: u16 = 64;
/// Share of mainnet-profile payments to scripts nobody spends. Together
/// with OP_RETURN, bare multisig and the coins left at the tip they make
/// the ~5% of outputs mainnet never spent (see [`mainnet::INPUTS_PER_TX`]).
const MAINNET_FOREIGN_PERMILLE: u32 = 15;
/// Scripts per output type the mainnet profile picks reused scripts from.
const REUSE_CANDIDATES: usize = 20_000;
/// Steering horizon, in outputs: a running count that is this far behind
/// its target is caught up at once, smaller gaps proportionally.
const STEERING_WINDOW: f64 = 64.0;
/// Number of miner payout scripts; coinbases pick one, so they are reused.
const MINERS: usize = 6;
/// Key family of the miners and exchanges (fresh keys use the seed).
const FIXED_KEYS_SEED: u64 = u64::MAX;

/// Who controls a coin, which decides how it is spent later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Anyone in the "world": the general pool.
    World,
    /// The big wallet's address at m/84'/1'/0'/chain/index.
    Wallet { chain: u32, index: u32 },
    /// Exchange number `n`: one script, a very long history.
    Exchange(u32),
}

/// An unspent output the generator can spend.
#[derive(Clone, Debug)]
struct Coin {
    outpoint: OutPoint,
    spend: Spend,
    owner: Owner,
}

impl AsRef<Spend> for Coin {
    fn as_ref(&self) -> &Spend {
        &self.spend
    }
}

/// Where one planned output goes.
#[derive(Clone, Debug)]
enum Dest {
    /// A script whose holder is known already (reuse, wallet, exchange);
    /// `reused` when an earlier output of the chain paid it.
    Known {
        holder: Holder,
        kind: ScriptKind,
        script: ScriptBuf,
        owner: Owner,
        reused: bool,
    },
    /// A never used key of the seed's key family; derived while building.
    Fresh { index: u64, kind: ScriptKind },
    /// A script nobody will spend.
    Foreign(ScriptBuf),
    /// A data carrier output (zero value).
    OpReturn(Vec<u8>),
    /// A silent payment to receiver number `receiver` of the chain,
    /// through `label` (`None`: its unlabelled address). Its key depends
    /// on every input's: made while building. Nobody spends it.
    Silent { receiver: u8, label: Option<u32> },
}

impl Dest {
    /// Upper bound of the scriptPubKey's length.
    fn script_len(&self) -> usize {
        match self {
            Dest::Known { script, .. } | Dest::Foreign(script) => script.len(),
            // P2WSH and P2TR are the longest kinds.
            Dest::Fresh { .. } | Dest::Silent { .. } => 34,
            // OP_RETURN, then a push opcode of one or two bytes.
            Dest::OpReturn(data) => 3 + data.len(),
        }
    }

    /// Sigops cost the output's script adds to a block (legacy count x4;
    /// a bare multisig counts 20).
    fn sigops_cost(&self) -> u64 {
        match self {
            Dest::Known {
                kind: ScriptKind::P2pkh,
                ..
            }
            | Dest::Fresh {
                kind: ScriptKind::P2pkh,
                ..
            } => 4,
            Dest::Foreign(script) => 4 * script.count_sigops_legacy() as u64,
            _ => 0,
        }
    }

    /// True when an earlier output of the chain paid the same script.
    fn is_reuse(&self) -> bool {
        matches!(self, Dest::Known { reused: true, .. })
    }

    /// The output type the script will have.
    fn class(&self) -> OutputClass {
        match self {
            Dest::Known { kind, .. } | Dest::Fresh { kind, .. } => kind_class(*kind),
            Dest::Foreign(script) => OutputClass::of(script),
            Dest::OpReturn(_) => OutputClass::OpReturn,
            Dest::Silent { .. } => OutputClass::P2tr,
        }
    }

    /// The kind of the coin it creates, when it creates one we can spend.
    fn kind(&self) -> Option<ScriptKind> {
        match self {
            Dest::Known { kind, .. } | Dest::Fresh { kind, .. } => Some(*kind),
            Dest::Foreign(_) | Dest::OpReturn(_) | Dest::Silent { .. } => None,
        }
    }

    /// True for the value outputs nobody will spend, which take little
    /// value ([`FOREIGN_OUTPUT_MAX_SATS`]).
    fn is_unspent(&self) -> bool {
        matches!(self, Dest::Foreign(_) | Dest::Silent { .. })
    }

    /// True for a payment to the world (not to the big wallet or an
    /// exchange), which a silent payment may take the place of.
    fn is_world_payment(&self) -> bool {
        matches!(
            self,
            Dest::Fresh { .. }
                | Dest::Foreign(_)
                | Dest::Known {
                    owner: Owner::World,
                    ..
                }
        )
    }
}

fn kind_class(kind: ScriptKind) -> OutputClass {
    match kind {
        ScriptKind::P2pkh => OutputClass::P2pkh,
        ScriptKind::P2shP2wpkh => OutputClass::P2sh,
        ScriptKind::P2wpkh => OutputClass::P2wpkh,
        ScriptKind::P2wsh => OutputClass::P2wsh,
        ScriptKind::P2tr | ScriptKind::P2trEnvelope(_) => OutputClass::P2tr,
    }
}

/// The kind a new output of `class` gets (P2SH is wrapped segwit; taproot
/// may become an envelope later, in [`Generator::fresh`]).
fn class_kind(class: OutputClass) -> ScriptKind {
    match class {
        OutputClass::P2sh => ScriptKind::P2shP2wpkh,
        OutputClass::P2wpkh => ScriptKind::P2wpkh,
        OutputClass::P2wsh => ScriptKind::P2wsh,
        OutputClass::P2tr => ScriptKind::P2tr,
        _ => ScriptKind::P2pkh,
    }
}

/// Witness bytes an envelope coin adds to the transaction that spends it.
fn envelope_bytes(kind: ScriptKind) -> u64 {
    match kind {
        ScriptKind::P2trEnvelope(_) => kind.input_witness_size_max() as u64,
        _ => 0,
    }
}

#[derive(Clone, Debug)]
struct OutPlan {
    value: u64,
    dest: Dest,
}

/// Everything needed to build and sign one transaction.
#[derive(Clone, Debug)]
struct TxPlan {
    inputs: Vec<Coin>,
    outputs: Vec<OutPlan>,
    lock_time: u32,
}

/// A signed transaction, its hashes and the coins it creates for later
/// blocks.
struct BuiltTx {
    tx: Transaction,
    txid: Txid,
    /// Hashed here, on every core, for the block's witness commitment.
    wtxid: Wtxid,
    /// For each output: the holder and kind when we can spend it later.
    new_coins: Vec<Option<(Holder, ScriptKind, Owner)>>,
    /// In a chain with silent payments only.
    silent: Option<BuiltSilent>,
}

/// What a transfer of a chain with silent payments is to them.
struct BuiltSilent {
    /// Eligible by `osprey-sp` (docs/silent-payments.md, 2.2).
    eligible: bool,
    /// Its silent payments, when it makes any.
    payment: Option<MadePayment>,
}

struct MadePayment {
    /// `ser_P(input_hash·A)`.
    tweak_key: [u8; 33],
    /// By `vout`.
    outputs: Vec<PaidOutput>,
}

struct PaidOutput {
    vout: u32,
    receiver: u8,
    label: Option<u32>,
    k: u32,
}

/// Builds and signs one planned transaction. Pure: runs on any thread.
/// `receivers` are those of a chain with silent payments, `None` in the
/// others.
fn build_tx(
    fresh_seed: u64,
    signatures: Signatures,
    receivers: Option<&[Receiver]>,
    plan: &TxPlan,
) -> BuiltTx {
    let mut output = Vec::with_capacity(plan.outputs.len());
    let mut new_coins = Vec::with_capacity(plan.outputs.len());
    for out in &plan.outputs {
        let (script, coin) = match &out.dest {
            Dest::Known {
                holder,
                kind,
                script,
                owner,
                ..
            } => (script.clone(), Some((*holder, *kind, *owner))),
            Dest::Fresh { index, kind } => {
                let holder = match signatures {
                    Signatures::Real => Holder::Key(Key::from_seed(fresh_seed, *index)),
                    Signatures::Placeholder => {
                        Holder::Placeholder(PlaceholderKey::from_seed(fresh_seed, *index))
                    }
                };
                (
                    holder.script_pubkey(*kind),
                    Some((holder, *kind, Owner::World)),
                )
            }
            Dest::Foreign(script) => (script.clone(), None),
            Dest::OpReturn(data) => {
                let data = PushBytesBuf::try_from(data.clone())
                    .expect("op_return data is at most 80 bytes");
                (ScriptBuf::new_op_return(data), None)
            }
            // Its key is made once every input is in place, below.
            Dest::Silent { .. } => (ScriptBuf::new(), None),
        };
        output.push(TxOut {
            value: Amount::from_sat(out.value),
            script_pubkey: script,
        });
        new_coins.push(coin);
    }
    let input = plan
        .inputs
        .iter()
        .map(|coin| TxIn {
            previous_output: coin.outpoint,
            script_sig: ScriptBuf::new(),
            // Opts in to RBF like most wallets; also disables BIP68 relative
            // lock times and keeps nLockTime enforced.
            sequence: Sequence::ENABLE_RBF_NO_LOCKTIME,
            witness: Witness::new(),
        })
        .collect();
    let mut tx = Transaction {
        version: Version::TWO,
        lock_time: LockTime::from_consensus(plan.lock_time),
        input,
        output,
    };
    let payment = receivers.and_then(|receivers| pay_silently(&mut tx, plan, receivers));
    let signed = match signatures {
        Signatures::Real => sign_transaction(&mut tx, &plan.inputs),
        Signatures::Placeholder => sign_placeholders(&mut tx, &plan.inputs),
    };
    signed.expect("plans carry one spent output per input, and real keys when signing");
    let silent = receivers.map(|_| BuiltSilent {
        eligible: silent_payment_eligible(&tx, &plan.inputs),
        payment,
    });
    let txid = tx.compute_txid();
    // Without witness data the two hashes are one.
    let wtxid = if tx.input.iter().all(|i| i.witness.is_empty()) {
        Wtxid::from_raw_hash(txid.to_raw_hash())
    } else {
        tx.compute_wtxid()
    };
    BuiltTx {
        tx,
        txid,
        wtxid,
        new_coins,
        silent,
    }
}

/// Gives the [`Dest::Silent`] outputs of `tx` their keys, made by the
/// sender ([`silent::pay_spends`]) from the inputs as they will be
/// signed, and returns what was paid (`None` when the plan pays no silent
/// payment).
fn pay_silently(
    tx: &mut Transaction,
    plan: &TxPlan,
    receivers: &[Receiver],
) -> Option<MadePayment> {
    let paid: Vec<(usize, u8, Option<u32>)> = plan
        .outputs
        .iter()
        .enumerate()
        .filter_map(|(vout, out)| match out.dest {
            Dest::Silent { receiver, label } => Some((vout, receiver, label)),
            _ => None,
        })
        .collect();
    if paid.is_empty() {
        return None;
    }
    let recipients: Vec<_> = paid
        .iter()
        .map(|&(_, receiver, label)| receivers[usize::from(receiver)].key_material(label))
        .collect();
    // Planning gives silent payments only to inputs whose keys are known,
    // one of which counts; spdk fails otherwise only on keys summing to
    // zero or a hash out of range, each of probability about 2^-128.
    let sent = silent::pay_spends(tx, &plan.inputs, &recipients)
        .expect("silent payments are planned for inputs the sender has every key of");
    let mut outputs = Vec::with_capacity(paid.len());
    for (&(vout, receiver, label), &(key, k)) in paid.iter().zip(&sent.outputs) {
        tx.output[vout].script_pubkey =
            ScriptBuf::new_p2tr_tweaked(TweakedPublicKey::dangerous_assume_tweaked(key));
        outputs.push(PaidOutput {
            vout: vout as u32,
            receiver,
            label,
            k,
        });
    }
    Some(MadePayment {
        tweak_key: sent.tweak_key,
        outputs,
    })
}

/// True when a silent-payment index keeps a record of `tx`, which spends
/// `inputs` (osprey-sp's eligibility).
fn silent_payment_eligible(tx: &Transaction, inputs: &[Coin]) -> bool {
    // Without a taproot output nothing else matters: spares copying the
    // spent outputs of most transactions.
    if !tx.output.iter().any(|out| out.script_pubkey.is_p2tr()) {
        return false;
    }
    let spent: Vec<TxOut> = inputs.iter().map(|coin| coin.spend.txout.clone()).collect();
    matches!(osprey_sp::tweak_data(tx, &spent), Ok(Some(_)))
}

/// A schedule that spreads `total` events evenly over heights
/// `start..=end`.
#[derive(Clone, Debug)]
struct Quota {
    total: u64,
    start: u32,
    end: u32,
    done: u64,
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
    fn due(&self, height: u32) -> u64 {
        if height < self.start || self.end < self.start || self.total == 0 {
            return 0;
        }
        let span = u64::from(self.end - self.start) + 1;
        let elapsed = u64::from(height.min(self.end) - self.start) + 1;
        (self.total * elapsed / span).saturating_sub(self.done)
    }
}

/// Samples an index with probability proportional to `1 / (i + 1)`.
fn zipf(rng: &mut ChaCha8Rng, n: usize) -> usize {
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
struct WalletState {
    wallet: BigWallet,
    /// Keys and scripts of used addresses, per chain, by index.
    keys: [Vec<(Key, ScriptBuf)>; 2],
    /// Confirmed history per chain and index: (txid, height) in chain order.
    history: [Vec<Vec<(Txid, u32)>>; 2],
    receive_fresh_target: u32,
    receive_events: Quota,
    spend_events: Quota,
}

impl WalletState {
    fn new(shape: &Shape) -> WalletState {
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
    fn next_address(&mut self, chain: u32) -> Dest {
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
    fn receive_dest(&mut self, rng: &mut ChaCha8Rng) -> Dest {
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

    fn record(&mut self, chain: u32, index: u32, txid: Txid, height: u32) {
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
struct Pools {
    /// World coins spendable before segwit activates (P2PKH).
    legacy: Vec<Coin>,
    /// World coins that need witness data to spend.
    witness: Vec<Coin>,
    wallet: Vec<Coin>,
    exchange: Vec<Vec<Coin>>,
    /// Coinbase outputs waiting for maturity: (height, coin).
    immature: VecDeque<(u32, Coin)>,
}

impl Pools {
    fn add(&mut self, coin: Coin) {
        match coin.owner {
            Owner::World if coin.spend.kind.needs_witness() => self.witness.push(coin),
            Owner::World => self.legacy.push(coin),
            Owner::Wallet { .. } => self.wallet.push(coin),
            Owner::Exchange(n) => self.exchange[n as usize].push(coin),
        }
    }

    /// World coins a block at this segwit state may spend.
    fn world_len(&self, segwit: bool) -> usize {
        self.legacy.len() + if segwit { self.witness.len() } else { 0 }
    }
}

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

/// Running counts of the chain planned so far (built blocks plus the
/// transactions planned for the block in progress), which the mainnet
/// profile steers towards the targets of [`crate::mainnet`].
#[derive(Default)]
struct Steering {
    txs: u64,
    outputs: u64,
    outputs_by_class: [u64; 9],
    reused: u64,
    /// Upper bound of the planned transactions' sizes.
    bytes: u64,
    /// Witness bytes the envelope coins not yet spent will add when they
    /// are: bytes already committed to.
    pending_envelope_bytes: u64,
}

impl Steering {
    fn note_outputs(&mut self, classes: impl IntoIterator<Item = (OutputClass, bool)>) {
        for (class, reused) in classes {
            self.outputs += 1;
            self.outputs_by_class[class.index()] += 1;
            self.reused += u64::from(reused);
        }
    }

    fn note_plan(&mut self, plan: &TxPlan) {
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

    fn class_count(&self, class: OutputClass) -> u64 {
        self.outputs_by_class[class.index()]
    }

    /// Probability that the next event keeps a running count on target:
    /// the share itself when on track, up to 1 (or down to 0) when the
    /// count lags (leads) by [`STEERING_WINDOW`] events.
    fn catch_up(target_share: f64, count: u64, total: u64) -> f64 {
        let wanted = target_share * (total as f64 + STEERING_WINDOW);
        ((wanted - count as f64) / STEERING_WINDOW).clamp(0.0, 1.0)
    }
}

/// Progress of a running generation, passed to the caller's callback
/// after every block.
#[derive(Clone, Debug)]
pub struct Progress {
    pub height: u32,
    pub tip_height: u32,
    /// Transactions so far, coinbases included.
    pub txs: u64,
    /// Non-coinbase transactions created and signed so far.
    pub transfers: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Time spent choosing transactions (one core).
    pub planning: Duration,
    /// Time spent building and signing transfers (wall clock, all cores).
    pub signing: Duration,
    /// Time generation waited for the writer, which serializes and writes
    /// blocks on a thread of its own alongside.
    pub writing: Duration,
    /// The chain's shape so far.
    pub chain: ChainStats,
}

impl Progress {
    /// Transfers created and signed per second of signing wall time.
    pub fn signed_per_sec(&self) -> f64 {
        self.transfers as f64 / self.signing.as_secs_f64().max(1e-9)
    }

    /// Transactions of every kind per second, end to end.
    pub fn txs_per_sec(&self) -> f64 {
        self.txs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What a generation run is asked for.
#[derive(Clone, Debug)]
pub struct Config {
    /// Preset name recorded in the manifest ("custom" when overridden).
    pub preset: String,
    pub seed: u64,
    pub shape: Shape,
    pub signatures: Signatures,
}

/// Blocks holding only their coinbase that end a chain with placeholder
/// signatures. Bitcoin Core skips the script checks of a block below its
/// `-assumevalid` block only when the block is buried by more than two
/// weeks of proof-equivalent time under the best header (`ConnectBlock`
/// in validation.cpp: `GetBlockProofEquivalentTime(...) <= 60 * 60 * 24 *
/// 7 * 2` keeps the checks on). At regtest's fixed difficulty and 10-minute
/// spacing that is more than 2,016 blocks, so the last block with
/// placeholders must have at least 2,017 blocks above it (against Bitcoin
/// Core v31.99, 2,016 gets that block rejected and 2,017 does not); 83
/// more are the margin.
pub const CHECKED_TAIL_BLOCKS: u32 = 2_100;

/// How transfers are signed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Signatures {
    /// Real signatures and keys: every node accepts the chain.
    #[default]
    Real,
    /// Placeholder signatures and fresh keys of real sizes
    /// ([`crate::sign::sign_placeholders`], [`PlaceholderKey`]): the same
    /// blocks as [`Signatures::Real`] draws (same transactions, amounts and
    /// script types; sizes differ only as signature lengths do), at a
    /// fraction of the cost, then [`CHECKED_TAIL_BLOCKS`] coinbase-only
    /// blocks. For Bitcoin Core run with `-assumevalid` set to the last
    /// block with placeholders ([`crate::manifest::PlaceholderSignatures`]),
    /// which it then connects without running their scripts.
    Placeholder,
}

impl Signatures {
    /// Blocks the chain gets after the shape's.
    pub fn tail_blocks(self) -> u32 {
        match self {
            Signatures::Real => 0,
            Signatures::Placeholder => CHECKED_TAIL_BLOCKS,
        }
    }
}

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error(transparent)]
    Blk(#[from] BlkError),
    /// Writing `manifest.json` or `stats.json`.
    #[error("writing {path}: {source}")]
    Manifest {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("invalid shape: {0}")]
    Shape(String),
}

/// Produces the chain block by block: genesis first, then heights
/// `1..=shape.blocks`, then the tail of [`Signatures::tail_blocks`].
pub struct Generator {
    config: Config,
    rng: ChaCha8Rng,
    /// Height of the next block [`Generator::next_block`] returns.
    next_height: u32,
    prev_hash: BlockHash,
    pools: Pools,
    next_fresh_key: u64,
    miners: Vec<(Key, ScriptBuf)>,
    exchanges: Vec<(Key, ScriptKind, ScriptBuf)>,
    wallet: WalletState,
    pool_target: usize,
    block_hashes: Vec<BlockHash>,
    tx_count: u64,
    transfer_count: u64,
    input_count: u64,
    output_count: u64,
    planning: Duration,
    signing: Duration,
    /// Shape of the blocks returned so far.
    stats: ChainStats,
    /// Whether each exchange and miner script has been paid yet (to count
    /// reuse without remembering every script).
    exchange_used: Vec<bool>,
    miner_used: [bool; MINERS],
    /// Running counts of the mainnet profile; `None` in the synthetic one.
    steering: Option<Steering>,
    /// Scripts the mainnet profile reuses, by output type.
    reusable: [Vec<(Holder, ScriptKind, ScriptBuf)>; 9],
    /// Silent payments; `None` unless the shape asks for them.
    silent: Option<SilentState>,
}

/// The silent payments of a chain: who receives them and what was paid.
struct SilentState {
    /// Its own stream of draws, so that a chain without silent payments
    /// draws exactly as before they existed.
    rng: ChaCha8Rng,
    receivers: Vec<Receiver>,
    /// The payments to each receiver, in chain order.
    payments: Vec<Vec<SilentPayment>>,
}

/// The ChaCha stream of [`SilentState::rng`] (the generator's main draws
/// are stream 0 of the same seed).
const SILENT_STREAM: u64 = 1;

/// Share of the silent-payment transactions that pay two outputs (to one
/// receiver, `k` = 0 and 1, or to two), when they have two payments the
/// silent ones can take the place of.
const TWO_SILENT_OUTPUTS: f64 = 0.25;

fn silent_rng(seed: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(SILENT_STREAM);
    rng
}

impl Generator {
    /// Sets up a generator for `config`.
    ///
    /// # Errors
    /// When the shape cannot make a chain (no blocks).
    pub fn new(config: Config) -> Result<Generator, GenError> {
        let shape = &config.shape;
        if shape.blocks == 0 {
            return Err(GenError::Shape(
                "a chain needs at least one block after genesis".into(),
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // Only a guard: block times never depend on the clock.
        let blocks = shape.blocks + config.signatures.tail_blocks();
        if !params::chain_fits_before(blocks, now) {
            return Err(GenError::Shape(format!(
                "{blocks} blocks ten minutes apart from {} would end in the future",
                params::FIRST_BLOCK_TIME
            )));
        }
        if shape.wallet_addresses > 1 << 30 {
            return Err(GenError::Shape(
                "wallet_addresses must stay below 2^30".into(),
            ));
        }
        if shape.silent_payments_ppm > 1_000_000 {
            return Err(GenError::Shape(
                "the silent-payment share is at most a million parts per million".into(),
            ));
        }
        let silent = (shape.silent_payments_ppm > 0).then(|| SilentState {
            rng: silent_rng(config.seed),
            receivers: silent::receivers(config.seed),
            payments: vec![Vec::new(); silent::RECEIVERS],
        });
        let stats = ChainStats {
            silent_payments: silent.as_ref().map(|_| SilentPaymentStats::default()),
            ..ChainStats::default()
        };
        let miners = (0..MINERS as u64)
            .map(|i| {
                let key = Key::from_seed(FIXED_KEYS_SEED, i);
                (key, key.script_pubkey(ScriptKind::P2pkh))
            })
            .collect();
        // Exchange kinds cycle so the biggest histories cover several kinds,
        // the biggest of all a legacy script like mainnet's.
        let exchange_kinds = [
            ScriptKind::P2pkh,
            ScriptKind::P2wpkh,
            ScriptKind::P2shP2wpkh,
            ScriptKind::P2tr,
            ScriptKind::P2wsh,
        ];
        let exchanges = (0..shape.exchanges as u64)
            .map(|i| {
                let key = Key::from_seed(FIXED_KEYS_SEED, 1_000 + i);
                let kind = exchange_kinds[i as usize % exchange_kinds.len()];
                (key, kind, key.script_pubkey(kind))
            })
            .collect();
        let genesis = genesis_block(Network::Regtest);
        let pools = Pools {
            exchange: vec![Vec::new(); shape.exchanges as usize],
            ..Pools::default()
        };
        Ok(Generator {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            next_height: 0,
            prev_hash: genesis.block_hash(),
            pools,
            next_fresh_key: 0,
            miners,
            exchanges,
            wallet: WalletState::new(shape),
            pool_target: (40 * shape.txs_per_block as usize).max(2_000),
            block_hashes: Vec::with_capacity(blocks as usize + 1),
            tx_count: 0,
            transfer_count: 0,
            input_count: 0,
            output_count: 0,
            planning: Duration::ZERO,
            signing: Duration::ZERO,
            stats,
            exchange_used: vec![false; shape.exchanges as usize],
            miner_used: [false; MINERS],
            steering: (shape.profile == Profile::Mainnet).then(Steering::default),
            reusable: Default::default(),
            silent,
            config,
        })
    }

    /// Adds a receiver of the chain's silent payments, besides its own
    /// [`silent::RECEIVERS`]: one whose keys come from elsewhere (a wallet's
    /// seed), paid through its unlabelled address like the others and
    /// listed after them in the manifest. Receivers are drawn uniformly,
    /// so each added one takes a share of the payments.
    ///
    /// # Errors
    /// When the chain pays no silent payments, a block was already made
    /// (the blocks so far would not have paid it), or the receivers would
    /// outnumber what a payment can name.
    pub fn add_silent_receiver(&mut self, receiver: Receiver) -> Result<(), GenError> {
        let Some(state) = &mut self.silent else {
            return Err(GenError::Shape(
                "a silent-payment receiver needs a silent-payment share above 0".into(),
            ));
        };
        if self.next_height > 0 {
            return Err(GenError::Shape(
                "silent-payment receivers are added before the first block".into(),
            ));
        }
        if state.receivers.len() > usize::from(u8::MAX) {
            return Err(GenError::Shape(format!(
                "at most {} silent-payment receivers",
                usize::from(u8::MAX) + 1
            )));
        }
        state.receivers.push(receiver);
        state.payments.push(Vec::new());
        Ok(())
    }

    /// Height of the last block the chain will have.
    pub fn tip_height(&self) -> u32 {
        self.config.shape.blocks + self.config.signatures.tail_blocks()
    }

    /// Draws the blocks from here on with `seed`: generators of one config
    /// that branch after the same block with different seeds make chains
    /// that share every block so far and then fork (a reorg's two sides).
    /// Every branch block differs from its sibling (the seed is in its
    /// coinbase); the branch's transactions spend the coins of the shared
    /// part. The manifest then names `seed`.
    pub fn branch(&mut self, seed: u64) {
        self.config.seed = seed;
        self.rng = ChaCha8Rng::seed_from_u64(seed);
        if let Some(silent) = &mut self.silent {
            silent.rng = silent_rng(seed);
        }
    }

    /// Returns the next block (genesis first), or `None` past the tip.
    pub fn next_block(&mut self) -> Option<Block> {
        let height = self.next_height;
        if height > self.tip_height() {
            return None;
        }
        let block = if height == 0 {
            let genesis = genesis_block(Network::Regtest);
            self.stats.record_tx(&genesis.txdata[0], 0);
            if let Some(steering) = &mut self.steering {
                steering.txs += 1;
                steering.note_outputs([(OutputClass::P2pk, false)]);
            }
            genesis
        } else {
            self.make_block(height)
        };
        self.stats.record_block_end(block.txdata.len());
        self.tx_count += block.txdata.len() as u64;
        for tx in &block.txdata {
            self.input_count += tx.input.len() as u64;
            self.output_count += tx.output.len() as u64;
        }
        self.prev_hash = block.block_hash();
        self.block_hashes.push(self.prev_hash);
        self.next_height += 1;
        Some(block)
    }

    fn make_block(&mut self, height: u32) -> Block {
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

    /// Counts a built transfer of a chain with silent payments, and puts
    /// its payments in the manifest.
    fn record_silent(&mut self, built: &BuiltSilent, tx: &Transaction, txid: Txid, height: u32) {
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
    fn plan_silent_payments(&mut self, inputs: &[Coin], dests: &mut [Dest], has_change: bool) {
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

    /// Chooses every transaction of the block at `height`.
    fn plan_block(&mut self, height: u32) -> Vec<TxPlan> {
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

    /// Output kind weights at `height` (P2PKH, P2SH-P2WPKH, P2WPKH, P2WSH,
    /// P2TR): legacy before segwit, drifting towards P2WPKH and P2TR. The
    /// mainnet profile steers the kind instead ([`Generator::steer_class`]).
    fn sample_kind(&mut self, height: u32) -> ScriptKind {
        if self.steering.is_some() {
            return class_kind(self.steer_class(height, false));
        }
        let weights: [f64; 5] = if !params::segwit_active(height) {
            [85.0, 6.0, 6.0, 2.0, 1.0]
        } else {
            let early = [45.0, 20.0, 25.0, 5.0, 5.0];
            let late = [15.0, 10.0, 45.0, 8.0, 22.0];
            let span = f64::from(
                self.config
                    .shape
                    .blocks
                    .saturating_sub(params::SEGWIT_HEIGHT)
                    .max(1),
            );
            let t = (f64::from(height - params::SEGWIT_HEIGHT) / span).min(1.0);
            std::array::from_fn(|i| early[i] + (late[i] - early[i]) * t)
        };
        let mut x = self.rng.gen::<f64>() * weights.iter().sum::<f64>();
        for (kind, w) in ScriptKind::ALL.into_iter().zip(weights) {
            x -= w;
            if x <= 0.0 {
                return kind;
            }
        }
        ScriptKind::P2wpkh
    }

    /// The output type the mainnet profile's next payment gets: the type
    /// whose running count lags its share of [`mainnet::OUTPUT_MIX`] most
    /// is the likeliest (weights are the lags), the shares themselves when
    /// none lags. Before segwit activates only legacy types are created, as
    /// on mainnet before 2017 (P2SH coins wait for activation to be spent);
    /// the segwit types catch up afterwards. Bare multisig only when
    /// `multisig`, as it pays nobody we can spend from.
    fn steer_class(&mut self, height: u32, multisig: bool) -> OutputClass {
        let steering = self.steering.as_ref().expect("mainnet profile");
        let segwit = params::segwit_active(height);
        // Called for every output: fixed arrays, no allocation.
        let mut allowed = [(OutputClass::P2pkh, 0.0); mainnet::OUTPUT_MIX.len()];
        let mut n = 0;
        for (class, share) in mainnet::OUTPUT_MIX {
            let ok = match class {
                OutputClass::OpReturn => false,
                OutputClass::BareMultisig => multisig,
                OutputClass::P2pkh | OutputClass::P2sh => true,
                _ => segwit,
            };
            if ok {
                allowed[n] = (class, share);
                n += 1;
            }
        }
        let allowed = &allowed[..n];
        let total = steering.outputs as f64 + STEERING_WINDOW;
        let mut weights = [0.0; mainnet::OUTPUT_MIX.len()];
        for (w, (class, share)) in weights.iter_mut().zip(allowed) {
            *w = (share * total - steering.class_count(*class) as f64).max(0.0);
        }
        let weights = &mut weights[..n];
        if weights.iter().sum::<f64>() <= 0.0 {
            for (w, (_, share)) in weights.iter_mut().zip(allowed) {
                *w = *share;
            }
        }
        let mut x = self.rng.gen::<f64>() * weights.iter().sum::<f64>();
        for ((class, _), w) in allowed.iter().zip(weights.iter()) {
            x -= w;
            if x <= 0.0 {
                return *class;
            }
        }
        allowed.last().expect("P2PKH is always allowed").0
    }

    /// True when the mainnet profile's next payment should go to a script
    /// paid before, to keep the reuse rate on `reuse_percent`.
    fn steer_reuse(&mut self) -> bool {
        let steering = self.steering.as_ref().expect("mainnet profile");
        let payable = steering.outputs - steering.class_count(OutputClass::OpReturn);
        let target = f64::from(self.config.shape.reuse_percent.min(100)) / 100.0;
        let p = Steering::catch_up(target, steering.reused, payable);
        self.rng.gen_bool(p)
    }

    /// True when the mainnet profile's next transaction should carry an
    /// OP_RETURN output, to keep their share on target.
    fn steer_op_return(&mut self) -> bool {
        let steering = self.steering.as_ref().expect("mainnet profile");
        let p = Steering::catch_up(
            mainnet::output_share(OutputClass::OpReturn),
            steering.class_count(OutputClass::OpReturn),
            steering.outputs,
        );
        self.rng.gen_bool(p)
    }

    /// Data bytes for a new taproot output of the mainnet profile, when
    /// the chain's bytes (planned, plus those envelopes already created
    /// will add when spent) lag the mainnet mean transaction size: the
    /// envelope spends are what make up mainnet's witness bytes. Sizes are
    /// log-uniform between the smallest and largest envelope.
    fn steer_envelope(&mut self) -> Option<u16> {
        let steering = self.steering.as_ref().expect("mainnet profile");
        let wanted = mainnet::MEAN_TX_SIZE * steering.txs as f64;
        let have = (steering.bytes + steering.pending_envelope_bytes) as f64;
        if have >= wanted {
            return None;
        }
        let (lo, hi) = (
            f64::from(MIN_ENVELOPE_BYTES).ln(),
            f64::from(MAX_ENVELOPE_BYTES).ln(),
        );
        Some(self.rng.gen_range(lo..hi).exp() as u16)
    }

    /// A payment of the mainnet profile to a new script of a steered type
    /// (bare multisig always to nobody).
    fn steered_new_dest(&mut self, height: u32, foreign: bool) -> Dest {
        match self.steer_class(height, true) {
            OutputClass::BareMultisig => self.bare_multisig(),
            class if foreign => self.foreign(class_kind(class)),
            class => self.fresh(class_kind(class)),
        }
    }

    /// A 1-of-3 bare multisig of random compressed-looking keys, as
    /// Counterparty and Stamps write data: nobody can spend it.
    fn bare_multisig(&mut self) -> Dest {
        let mut builder = Builder::new().push_opcode(bitcoin::opcodes::all::OP_PUSHNUM_1);
        for _ in 0..3 {
            let mut key = [0u8; 33];
            self.rng.fill(&mut key[..]);
            key[0] = 2 + (key[0] & 1);
            builder = builder.push_slice(key);
        }
        Dest::Foreign(
            builder
                .push_opcode(bitcoin::opcodes::all::OP_PUSHNUM_3)
                .push_opcode(bitcoin::opcodes::all::OP_CHECKMULTISIG)
                .into_script(),
        )
    }

    fn fresh(&mut self, kind: ScriptKind) -> Dest {
        // An envelope's change is a plain taproot output, but the mainnet
        // profile may make any new taproot output an envelope.
        let kind = match kind {
            ScriptKind::P2trEnvelope(_) | ScriptKind::P2tr if self.steering.is_some() => self
                .steer_envelope()
                .map_or(ScriptKind::P2tr, ScriptKind::P2trEnvelope),
            kind => kind,
        };
        self.next_fresh_key += 1;
        Dest::Fresh {
            index: self.next_fresh_key,
            kind,
        }
    }

    /// A script nobody holds the key of: random hash or key bytes.
    fn foreign(&mut self, kind: ScriptKind) -> Dest {
        let bytes: [u8; 32] = self.rng.gen();
        let hash20: [u8; 20] = bytes[..20].try_into().expect("20 bytes");
        let script = match kind {
            ScriptKind::P2pkh => {
                ScriptBuf::new_p2pkh(&bitcoin::PubkeyHash::from_byte_array(hash20))
            }
            ScriptKind::P2shP2wpkh => {
                ScriptBuf::new_p2sh(&bitcoin::ScriptHash::from_byte_array(hash20))
            }
            ScriptKind::P2wpkh => {
                ScriptBuf::new_p2wpkh(&bitcoin::WPubkeyHash::from_byte_array(hash20))
            }
            ScriptKind::P2wsh => {
                ScriptBuf::new_p2wsh(&bitcoin::WScriptHash::from_byte_array(bytes))
            }
            ScriptKind::P2tr | ScriptKind::P2trEnvelope(_) => Builder::new()
                .push_opcode(bitcoin::opcodes::all::OP_PUSHNUM_1)
                .push_slice(bytes)
                .into_script(),
        };
        Dest::Foreign(script)
    }

    /// Adds the script of a new world coin to the mainnet profile's reuse
    /// candidates of its type (once per coin, so scripts paid often come
    /// up often: a heavy tail), replacing a random one when full.
    fn remember_reusable(&mut self, holder: Holder, kind: ScriptKind, script: &ScriptBuf) {
        let candidates = &mut self.reusable[OutputClass::of(script).index()];
        let entry = (holder, kind, script.clone());
        if candidates.len() < REUSE_CANDIDATES {
            candidates.push(entry);
        } else {
            let i = self.rng.gen_range(0..candidates.len());
            candidates[i] = entry;
        }
    }

    /// A script paid before, of the type the mainnet profile's steering
    /// picks: `own` (the spent coin's script, for change) when it is of
    /// that type, else a recent world coin's. `None` when there is none.
    fn steered_reuse(&mut self, height: u32, own: Option<Dest>) -> Option<Dest> {
        let class = self.steer_class(height, false);
        if let Some(own) = own.filter(|d| d.class() == class) {
            return Some(own);
        }
        let candidates = &self.reusable[class.index()];
        if candidates.is_empty() {
            return None;
        }
        let (holder, kind, script) = candidates[self.rng.gen_range(0..candidates.len())].clone();
        Some(Dest::Known {
            holder,
            kind,
            script,
            owner: Owner::World,
            reused: true,
        })
    }

    /// An already used world script, picked in proportion to its live
    /// coins: preferential attachment, which gives reuse a heavy tail.
    fn reused(&mut self) -> Option<Dest> {
        let len = self.pools.world_len(true);
        if len == 0 {
            return None;
        }
        let i = self.rng.gen_range(0..len);
        let coin = if i < self.pools.legacy.len() {
            &self.pools.legacy[i]
        } else {
            &self.pools.witness[i - self.pools.legacy.len()]
        };
        Some(Dest::Known {
            holder: coin.spend.holder,
            kind: coin.spend.kind,
            script: coin.spend.txout.script_pubkey.clone(),
            owner: Owner::World,
            reused: true,
        })
    }

    fn exchange_dest(&mut self) -> Option<Dest> {
        if self.exchanges.is_empty() {
            return None;
        }
        let n = zipf(&mut self.rng, self.exchanges.len());
        let (key, kind, script) = self.exchanges[n].clone();
        let reused = std::mem::replace(&mut self.exchange_used[n], true);
        Some(Dest::Known {
            holder: key.into(),
            kind,
            script,
            owner: Owner::Exchange(n as u32),
            reused,
        })
    }

    /// A payment destination of the world: an exchange deposit (4%), a
    /// reused script (`reuse_percent`), a cold-storage script nobody spends
    /// (20%: the UTXO set grows and inputs average about two), or a fresh
    /// key.
    fn world_dest(&mut self, height: u32) -> Dest {
        if self.steering.is_some() {
            return self.mainnet_world_dest(height);
        }
        let reuse = self.config.shape.reuse_percent.min(100) * 10;
        let r = self.rng.gen_range(0..1000);
        if r < 40 {
            if let Some(dest) = self.exchange_dest() {
                return dest;
            }
        } else if r < 40 + reuse {
            if let Some(dest) = self.reused() {
                return dest;
            }
        } else if r < 240 + reuse {
            let kind = self.sample_kind(height);
            return self.foreign(kind);
        }
        let kind = self.sample_kind(height);
        self.fresh(kind)
    }

    /// A payment destination of the mainnet profile: an exchange deposit
    /// (4%), a script paid before when reuse lags its target, a script
    /// nobody spends ([`MAINNET_FOREIGN_PERMILLE`]), or a new key, of
    /// steered types.
    fn mainnet_world_dest(&mut self, height: u32) -> Dest {
        if self.rng.gen_range(0..1000) < 40 {
            if let Some(dest) = self.exchange_dest() {
                return dest;
            }
        }
        if self.steer_reuse() {
            if let Some(dest) = self.steered_reuse(height, None) {
                return dest;
            }
        }
        let foreign = self.rng.gen_range(0..1000) < MAINNET_FOREIGN_PERMILLE;
        self.steered_new_dest(height, foreign)
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

    fn plan_world_tx(&mut self, height: u32, wallet_receive: bool) -> Option<TxPlan> {
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

    /// The manifest of the chain generated so far (call after the last
    /// block); `blk_files` are the file names the blocks were written to.
    pub fn manifest(&self, blk_files: Vec<String>) -> Manifest {
        let wallet = &self.wallet;
        let mut balances: [Vec<(u64, u32)>; 2] = [
            vec![(0, 0); wallet.keys[0].len()],
            vec![(0, 0); wallet.keys[1].len()],
        ];
        for coin in &self.pools.wallet {
            if let Owner::Wallet { chain, index } = coin.owner {
                let entry = &mut balances[chain as usize][index as usize];
                entry.0 += coin.spend.txout.value.to_sat();
                entry.1 += 1;
            }
        }
        let mut addresses = Vec::new();
        for chain in [RECEIVE, CHANGE] {
            for (index, (key, script)) in wallet.keys[chain as usize].iter().enumerate() {
                let history = &wallet.history[chain as usize][index];
                if history.is_empty() {
                    continue;
                }
                let (balance, utxo_count) = balances[chain as usize][index];
                addresses.push(WalletAddress {
                    address: key
                        .address(ScriptKind::P2wpkh, Network::Regtest)
                        .to_string(),
                    scripthash: osprey_core::ScriptHash::from_script(script.as_bytes()).to_string(),
                    chain,
                    index: index as u32,
                    history: history
                        .iter()
                        .map(|(txid, h)| (txid.to_string(), *h))
                        .collect(),
                    balance,
                    utxo_count,
                });
            }
        }
        let tip_hash = self
            .block_hashes
            .last()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let placeholder_signatures = match self.config.signatures {
            Signatures::Real => None,
            Signatures::Placeholder => {
                let last_height = self.config.shape.blocks;
                self.block_hashes
                    .get(last_height as usize)
                    .map(|hash| PlaceholderSignatures {
                        last_height,
                        assumevalid: hash.to_string(),
                    })
            }
        };
        let silent_payments = self.silent.as_ref().map(|state| {
            state
                .receivers
                .iter()
                .zip(&state.payments)
                .map(|(receiver, payments)| SilentPaymentReceiver {
                    scan_private_key: hex::encode(receiver.scan_secret().secret_bytes()),
                    spend_public_key: receiver.spend_public_key().to_string(),
                    address: receiver.address(),
                    labels: receiver.subscription_labels(),
                    payments: payments.clone(),
                })
                .collect()
        });
        Manifest {
            network: "regtest".to_string(),
            preset: self.config.preset.clone(),
            seed: self.config.seed,
            tip_height: self.block_hashes.len().saturating_sub(1) as u32,
            tip_hash,
            block_hashes: self.block_hashes.iter().map(|h| h.to_string()).collect(),
            tx_count: self.tx_count,
            input_count: self.input_count,
            output_count: self.output_count,
            blk_files,
            wallet: WalletManifest {
                receive_descriptor: wallet.wallet.descriptor(RECEIVE),
                change_descriptor: wallet.wallet.descriptor(CHANGE),
                addresses,
            },
            placeholder_signatures,
            silent_payments,
        }
    }

    fn progress(&self, started: Instant, bytes: u64, writing: Duration) -> Progress {
        Progress {
            height: self.next_height.saturating_sub(1),
            tip_height: self.tip_height(),
            txs: self.tx_count,
            transfers: self.transfer_count,
            bytes,
            elapsed: started.elapsed(),
            planning: self.planning,
            signing: self.signing,
            writing,
            chain: self.stats.clone(),
        }
    }
}

/// Generates the chain of `config` into `out_dir`: `out_dir/blocks/blk*.dat`
/// (genesis first) and `out_dir/manifest.json`. Calls `progress` after every
/// block and returns the manifest.
///
/// # Errors
/// When the shape is invalid or a file cannot be written.
pub fn generate(
    config: Config,
    out_dir: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Manifest, Progress), GenError> {
    generate_with(Generator::new(config)?, out_dir, progress)
}

/// Generates the chain of `generator`, set up beyond its config (e.g. with
/// [`Generator::add_silent_receiver`]) and not yet started, as [`generate`].
///
/// # Errors
/// When a file cannot be written.
pub fn generate_with(
    mut generator: Generator,
    out_dir: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Manifest, Progress), GenError> {
    let started = Instant::now();
    // A manifest or stats left from an earlier run must not describe the
    // new blocks if this run stops half way.
    let manifest_path = out_dir.join(crate::manifest::MANIFEST_FILE);
    let stats_path = out_dir.join(STATS_FILE);
    for stale in [&manifest_path, &stats_path] {
        match std::fs::remove_file(stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(GenError::Manifest {
                    path: stale.clone(),
                    source: e,
                })
            }
            _ => {}
        }
    }
    let writer = BlkWriter::create(&out_dir.join("blocks"), REGTEST_MAGIC)?;
    // Serializing, writing and syncing each full file go on a thread of
    // their own, alongside the generation of the next blocks.
    let (blocks, to_write) = std::sync::mpsc::sync_channel::<Block>(WRITE_QUEUE_BLOCKS);
    let (written, writing) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || write_blocks(writer, to_write));
        let mut waiting = Duration::ZERO;
        let mut bytes = 0;
        while let Some(block) = generator.next_block() {
            // The record: magic, length, block.
            bytes += 8 + block.total_size() as u64;
            let wait_started = Instant::now();
            if blocks.send(block).is_err() {
                // The writer stopped on an error, returned below.
                break;
            }
            waiting += wait_started.elapsed();
            progress(&generator.progress(started, bytes, waiting));
        }
        drop(blocks);
        let written = writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (written, waiting)
    });
    let (files, bytes) = written?;
    let manifest = generator.manifest(files);
    manifest
        .save(out_dir)
        .map_err(|source| GenError::Manifest {
            path: manifest_path,
            source,
        })?;
    generator
        .stats
        .save(out_dir)
        .map_err(|source| GenError::Manifest {
            path: stats_path,
            source,
        })?;
    let stats = generator.progress(started, bytes, writing);
    tracing::info!(
        height = manifest.tip_height,
        txs = manifest.tx_count,
        transfers = stats.transfers,
        signed_per_sec = stats.signed_per_sec() as u64,
        "chain generated"
    );
    Ok((manifest, stats))
}

/// Blocks generated ahead of the writer at most.
const WRITE_QUEUE_BLOCKS: usize = 4;

/// Writes the blocks received until the sender hangs up, then finishes the
/// files: their names and the bytes written.
fn write_blocks(
    mut writer: BlkWriter,
    blocks: std::sync::mpsc::Receiver<Block>,
) -> Result<(Vec<String>, u64), BlkError> {
    for block in blocks {
        writer.write_block(&bitcoin::consensus::serialize(&block))?;
    }
    let bytes = writer.bytes_written();
    Ok((writer.finish()?, bytes))
}

/// Support for `benches/sign_transactions.rs`: plans transfers once, so the
/// benchmark times exactly what the generator does on every core per block
/// (derive fresh keys, assemble, sign, hash).
#[doc(hidden)]
pub mod bench_support {
    use super::*;

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::PlaceholderKey;

    fn coin(n: u64, holder: Holder, kind: ScriptKind) -> Coin {
        let txid = Txid::from_byte_array(
            bitcoin::hashes::sha256d::Hash::hash(&n.to_le_bytes()).to_byte_array(),
        );
        Coin {
            outpoint: OutPoint { txid, vout: 1 },
            spend: Spend {
                txout: TxOut {
                    value: Amount::from_sat(1_000_000),
                    script_pubkey: holder.script_pubkey(kind),
                },
                holder,
                kind,
            },
            owner: Owner::World,
        }
    }

    fn generator(silent_payments_ppm: u32) -> Generator {
        Generator::new(Config {
            preset: "test".into(),
            seed: 3,
            shape: Shape {
                silent_payments_ppm,
                ..crate::Preset::Tiny.shape()
            },
            signatures: Signatures::Real,
        })
        .unwrap()
    }

    /// A transfer spending every kind of coin (the envelope through its
    /// script path, P2WSH not counted) pays three silent outputs: what
    /// `osprey-sp`'s receivers find is what the build says it paid.
    #[test]
    fn built_silent_payments_are_found_by_their_receivers() {
        let mut kinds = ScriptKind::ALL.to_vec();
        kinds.push(ScriptKind::P2trEnvelope(300));
        let inputs: Vec<Coin> = kinds
            .iter()
            .enumerate()
            .map(|(i, &kind)| coin(i as u64, Key::from_seed(9, i as u64).into(), kind))
            .collect();
        let out = |dest| OutPlan {
            value: 10_000,
            dest,
        };
        let plan = TxPlan {
            inputs,
            outputs: vec![
                out(Dest::Silent {
                    receiver: 0,
                    label: Some(2),
                }),
                out(Dest::Fresh {
                    index: 1,
                    kind: ScriptKind::P2tr,
                }),
                out(Dest::Silent {
                    receiver: 3,
                    label: None,
                }),
                out(Dest::Silent {
                    receiver: 0,
                    label: None,
                }),
            ],
            lock_time: 0,
        };
        let receivers = silent::receivers(3);
        let built = build_tx(3, Signatures::Real, Some(&receivers), &plan);
        let silent = built.silent.expect("a chain with silent payments");
        assert!(silent.eligible);
        let payment = silent.payment.expect("the plan pays");
        let paid: Vec<(u32, u8, Option<u32>, u32)> = payment
            .outputs
            .iter()
            .map(|o| (o.vout, o.receiver, o.label, o.k))
            .collect();
        assert_eq!(paid, [(0, 0, Some(2), 0), (2, 3, None, 0), (3, 0, None, 1)]);
        let spent: Vec<TxOut> = plan.inputs.iter().map(|c| c.spend.txout.clone()).collect();
        let tweak = osprey_sp::tweak_data(&built.tx, &spent).unwrap().unwrap();
        assert_eq!(tweak.tweak_key().unwrap(), payment.tweak_key);
        let output_keys: Vec<[u8; 32]> = built
            .tx
            .output
            .iter()
            .map(|o| o.script_pubkey.as_bytes()[2..].try_into().unwrap())
            .collect();
        for (r, receiver) in receivers.iter().enumerate() {
            let keys = osprey_sp::ScanKeys::new(
                *receiver.scan_secret(),
                *receiver.spend_public_key(),
                receiver.subscription_labels(),
            )
            .unwrap();
            let mut found: Vec<(u32, Option<u32>, u32)> = keys
                .scan_outputs(&tweak, &output_keys)
                .unwrap()
                .iter()
                .map(|f| {
                    let vout = output_keys.iter().position(|k| *k == f.output_key).unwrap();
                    (vout as u32, f.label, f.k)
                })
                .collect();
            found.sort_unstable();
            let expected: Vec<(u32, Option<u32>, u32)> = paid
                .iter()
                .filter(|p| usize::from(p.1) == r)
                .map(|p| (p.0, p.2, p.3))
                .collect();
            assert_eq!(found, expected, "receiver {r}");
        }
    }

    /// A receiver added to a chain's own is paid too, listed last in the
    /// manifest; the chain's own receivers are those of its seed still.
    #[test]
    fn added_silent_receivers_are_paid_and_listed_last() {
        let mnemonic = "life life life life life life life life life life life life";
        let mut added = generator(500_000);
        added
            .add_silent_receiver(silent::receiver_of_mnemonic(mnemonic).unwrap())
            .unwrap();
        while added.next_block().is_some() {}
        let manifest = added.manifest(Vec::new());
        let receivers = manifest
            .silent_payments
            .expect("a chain with silent payments");
        assert_eq!(receivers.len(), silent::RECEIVERS + 1);
        let last = &receivers[silent::RECEIVERS];
        assert_eq!(
            last.address,
            silent::receiver_of_mnemonic(mnemonic).unwrap().address()
        );
        assert!(
            last.payments.len() > 3,
            "{} payments to the added receiver",
            last.payments.len()
        );
        assert!(last
            .payments
            .iter()
            .flat_map(|p| &p.outputs)
            .all(|o| o.label.is_none()));
        for (r, receiver) in receivers[..silent::RECEIVERS].iter().enumerate() {
            assert_eq!(receiver.address, silent::Receiver::new(3, r).address());
        }

        let mut started = generator(500_000);
        started.next_block();
        assert!(started
            .add_silent_receiver(silent::receiver_of_mnemonic(mnemonic).unwrap())
            .is_err());
        assert!(generator(0)
            .add_silent_receiver(silent::receiver_of_mnemonic(mnemonic).unwrap())
            .is_err());
    }

    /// Silent payments are planned only from inputs one of which counts
    /// and whose counted ones all have known keys, and leave an output
    /// somebody spends.
    #[test]
    fn silent_payments_need_every_counted_key() {
        let payments = || {
            vec![
                Dest::Fresh {
                    index: 1,
                    kind: ScriptKind::P2wpkh,
                },
                Dest::Fresh {
                    index: 2,
                    kind: ScriptKind::P2pkh,
                },
            ]
        };
        let real = |n: u64, kind| coin(n, Key::from_seed(4, n).into(), kind);
        let placeholder = |n: u64, kind| {
            coin(
                n,
                Holder::Placeholder(PlaceholderKey::from_seed(4, n)),
                kind,
            )
        };
        let silent_outputs = |g: &mut Generator, inputs: &[Coin]| {
            let mut dests = payments();
            g.plan_silent_payments(inputs, &mut dests, false);
            dests
                .iter()
                .filter(|d| matches!(d, Dest::Silent { .. }))
                .count()
        };
        let mut g = generator(1_000_000);
        assert_eq!(silent_outputs(&mut g, &[real(1, ScriptKind::P2wpkh)]), 1);
        // A placeholder key not counted does not matter; one counted does.
        let mixed = [real(1, ScriptKind::P2tr), placeholder(2, ScriptKind::P2wsh)];
        assert_eq!(silent_outputs(&mut g, &mixed), 1);
        let unknown = [
            real(1, ScriptKind::P2tr),
            placeholder(2, ScriptKind::P2wpkh),
        ];
        assert_eq!(silent_outputs(&mut g, &unknown), 0);
        assert_eq!(silent_outputs(&mut g, &[real(1, ScriptKind::P2wsh)]), 0);
        // Never without the share.
        let mut g = generator(0);
        assert_eq!(silent_outputs(&mut g, &[real(1, ScriptKind::P2wpkh)]), 0);
        // A single payment stays: nobody would take the value.
        let mut g = generator(1_000_000);
        let mut dests = payments()[..1].to_vec();
        g.plan_silent_payments(&[real(1, ScriptKind::P2wpkh)], &mut dests, false);
        assert!(matches!(dests[0], Dest::Fresh { .. }));
    }
}
