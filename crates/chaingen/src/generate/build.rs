//! Building a planned transaction: a pure function of its plan, run on
//! every core. Derives fresh keys, pays the silent payments the plan asks
//! for, signs, and hashes.

use bitcoin::absolute::LockTime;
use bitcoin::key::TweakedPublicKey;
use bitcoin::script::PushBytesBuf;
use bitcoin::transaction::Version;
use bitcoin::{Amount, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Txid, Witness, Wtxid};

use crate::sign::{sign_placeholders, sign_transaction, Holder, Key, PlaceholderKey, ScriptKind};
use crate::silent::{self, Receiver};

use super::coins::{Coin, Dest, Owner};
use super::Signatures;

#[derive(Clone, Debug)]
pub(super) struct OutPlan {
    pub(super) value: u64,
    pub(super) dest: Dest,
}

/// Everything needed to build and sign one transaction.
#[derive(Clone, Debug)]
pub(super) struct TxPlan {
    pub(super) inputs: Vec<Coin>,
    pub(super) outputs: Vec<OutPlan>,
    pub(super) lock_time: u32,
}

/// A signed transaction, its hashes and the coins it creates for later
/// blocks.
pub(super) struct BuiltTx {
    pub(super) tx: Transaction,
    pub(super) txid: Txid,
    /// Hashed here, on every core, for the block's witness commitment.
    pub(super) wtxid: Wtxid,
    /// For each output: the holder and kind when we can spend it later.
    pub(super) new_coins: Vec<Option<(Holder, ScriptKind, Owner)>>,
    /// In a chain with silent payments only.
    pub(super) silent: Option<BuiltSilent>,
}

/// What a transfer of a chain with silent payments is to them.
pub(super) struct BuiltSilent {
    /// Eligible by `osprey-sp` (docs/silent-payments.md, 2.2).
    pub(super) eligible: bool,
    /// Its silent payments, when it makes any.
    pub(super) payment: Option<MadePayment>,
}

pub(super) struct MadePayment {
    /// `ser_P(input_hash·A)`.
    pub(super) tweak_key: [u8; 33],
    /// By `vout`.
    pub(super) outputs: Vec<PaidOutput>,
}

pub(super) struct PaidOutput {
    pub(super) vout: u32,
    pub(super) receiver: u8,
    pub(super) label: Option<u32>,
    pub(super) k: u32,
}

/// Builds and signs one planned transaction. Pure: runs on any thread.
/// `receivers` are those of a chain with silent payments, `None` in the
/// others.
pub(super) fn build_tx(
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
