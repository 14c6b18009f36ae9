//! Where payments go: output types (drifting with height, or steered by
//! the mainnet profile towards mainnet's mix), fresh keys, scripts nobody
//! spends, reused scripts and exchange deposits.

use bitcoin::hashes::Hash;
use bitcoin::script::Builder;
use bitcoin::ScriptBuf;
use rand::Rng;

use crate::mainnet;
use crate::params;
use crate::sign::{Holder, ScriptKind};
use crate::stats::OutputClass;

use super::coins::{class_kind, Dest, Owner};
use super::state::{zipf, Steering, STEERING_WINDOW};
use super::Generator;

/// Data bytes of the largest and smallest envelopes (a few kB, like most
/// image inscriptions; BRC-20 text is ~100 bytes).
pub(super) const MAX_ENVELOPE_BYTES: u16 = 4_000;
const MIN_ENVELOPE_BYTES: u16 = 64;
/// Share of mainnet-profile payments to scripts nobody spends. Together
/// with OP_RETURN, bare multisig and the coins left at the tip they make
/// the ~5% of outputs mainnet never spent (see [`mainnet::INPUTS_PER_TX`]).
const MAINNET_FOREIGN_PERMILLE: u32 = 15;
/// Scripts per output type the mainnet profile picks reused scripts from.
const REUSE_CANDIDATES: usize = 20_000;

impl Generator {
    /// Output kind weights at `height` (P2PKH, P2SH-P2WPKH, P2WPKH, P2WSH,
    /// P2TR): legacy before segwit, drifting towards P2WPKH and P2TR. The
    /// mainnet profile steers the kind instead ([`Generator::steer_class`]).
    pub(super) fn sample_kind(&mut self, height: u32) -> ScriptKind {
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
    pub(super) fn steer_reuse(&mut self) -> bool {
        let steering = self.steering.as_ref().expect("mainnet profile");
        let payable = steering.outputs - steering.class_count(OutputClass::OpReturn);
        let target = f64::from(self.config.shape.reuse_percent.min(100)) / 100.0;
        let p = Steering::catch_up(target, steering.reused, payable);
        self.rng.gen_bool(p)
    }

    /// True when the mainnet profile's next transaction should carry an
    /// OP_RETURN output, to keep their share on target.
    pub(super) fn steer_op_return(&mut self) -> bool {
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

    pub(super) fn fresh(&mut self, kind: ScriptKind) -> Dest {
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
    pub(super) fn foreign(&mut self, kind: ScriptKind) -> Dest {
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
    pub(super) fn remember_reusable(
        &mut self,
        holder: Holder,
        kind: ScriptKind,
        script: &ScriptBuf,
    ) {
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
    pub(super) fn steered_reuse(&mut self, height: u32, own: Option<Dest>) -> Option<Dest> {
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
    pub(super) fn reused(&mut self) -> Option<Dest> {
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

    pub(super) fn exchange_dest(&mut self) -> Option<Dest> {
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
    pub(super) fn world_dest(&mut self, height: u32) -> Dest {
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
}
