//! What the generator spends and pays to: coins with their owners, and the
//! destinations of planned outputs with what each implies for a block's
//! limits, the output types and the value it may take.

use bitcoin::{OutPoint, ScriptBuf};

use crate::sign::{Holder, ScriptKind, Spend};
use crate::stats::OutputClass;

/// Outputs to scripts nobody spends (cold storage) take little value, so the
/// spendable supply does not drain away over millions of transactions.
pub(super) const FOREIGN_OUTPUT_MAX_SATS: u64 = 100_000;

/// Who controls a coin, which decides how it is spent later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// Anyone in the "world": the general pool.
    World,
    /// The big wallet's address at m/84'/1'/0'/chain/index.
    Wallet { chain: u32, index: u32 },
    /// Exchange number `n`: one script, a very long history.
    Exchange(u32),
}

/// An unspent output the generator can spend.
#[derive(Clone, Debug)]
pub(super) struct Coin {
    pub(super) outpoint: OutPoint,
    pub(super) spend: Spend,
    pub(super) owner: Owner,
}

impl AsRef<Spend> for Coin {
    fn as_ref(&self) -> &Spend {
        &self.spend
    }
}

/// Where one planned output goes.
#[derive(Clone, Debug)]
pub(super) enum Dest {
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
    pub(super) fn script_len(&self) -> usize {
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
    pub(super) fn sigops_cost(&self) -> u64 {
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
    pub(super) fn is_reuse(&self) -> bool {
        matches!(self, Dest::Known { reused: true, .. })
    }

    /// The output type the script will have.
    pub(super) fn class(&self) -> OutputClass {
        match self {
            Dest::Known { kind, .. } | Dest::Fresh { kind, .. } => kind_class(*kind),
            Dest::Foreign(script) => OutputClass::of(script),
            Dest::OpReturn(_) => OutputClass::OpReturn,
            Dest::Silent { .. } => OutputClass::P2tr,
        }
    }

    /// The kind of the coin it creates, when it creates one we can spend.
    pub(super) fn kind(&self) -> Option<ScriptKind> {
        match self {
            Dest::Known { kind, .. } | Dest::Fresh { kind, .. } => Some(*kind),
            Dest::Foreign(_) | Dest::OpReturn(_) | Dest::Silent { .. } => None,
        }
    }

    /// True for the value outputs nobody will spend, which take little
    /// value ([`FOREIGN_OUTPUT_MAX_SATS`]).
    pub(super) fn is_unspent(&self) -> bool {
        matches!(self, Dest::Foreign(_) | Dest::Silent { .. })
    }

    /// True for a payment to the world (not to the big wallet or an
    /// exchange), which a silent payment may take the place of.
    pub(super) fn is_world_payment(&self) -> bool {
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
///
/// [`Generator::fresh`]: super::Generator::fresh
pub(super) fn class_kind(class: OutputClass) -> ScriptKind {
    match class {
        OutputClass::P2sh => ScriptKind::P2shP2wpkh,
        OutputClass::P2wpkh => ScriptKind::P2wpkh,
        OutputClass::P2wsh => ScriptKind::P2wsh,
        OutputClass::P2tr => ScriptKind::P2tr,
        _ => ScriptKind::P2pkh,
    }
}

/// Witness bytes an envelope coin adds to the transaction that spends it.
pub(super) fn envelope_bytes(kind: ScriptKind) -> u64 {
    match kind {
        ScriptKind::P2trEnvelope(_) => kind.input_witness_size_max() as u64,
        _ => 0,
    }
}
