//! The script kinds coins are locked with, and upper bounds of the size of
//! inputs spending them and of whole transactions, from which fees are
//! computed.

/// The single-key output types chaingen and the test wallet pay to and spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScriptKind {
    /// Pay to public key hash (legacy, spendable before segwit activates).
    P2pkh,
    /// P2WPKH nested in P2SH.
    P2shP2wpkh,
    /// Native segwit v0 key hash.
    P2wpkh,
    /// Native segwit v0 script hash of `<pubkey> OP_CHECKSIG`.
    P2wsh,
    /// Taproot, key path only (no script tree).
    P2tr,
    /// Taproot whose one script leaf is `<key> OP_CHECKSIG` followed by an
    /// `OP_FALSE OP_IF <n bytes> OP_ENDIF` envelope, spent through that
    /// leaf: the shape of an ordinals inscription reveal, the main source
    /// of witness bytes on mainnet since 2023. Not in [`ScriptKind::ALL`]:
    /// only the mainnet profile creates it.
    P2trEnvelope(u16),
}

/// Largest data push a script may hold (consensus `MAX_SCRIPT_ELEMENT_SIZE`).
pub(super) const MAX_PUSH: usize = 520;

/// Bytes of a Bitcoin compact-size length prefix.
fn varint_len(n: usize) -> usize {
    match n {
        0..=0xfc => 1,
        0xfd..=0xffff => 3,
        _ => 5,
    }
}

/// Bytes of the push opcodes a script needs to push `len` bytes of data in
/// chunks of at most [`MAX_PUSH`].
fn envelope_push_overhead(len: usize) -> usize {
    let full = len / MAX_PUSH;
    let rest = len % MAX_PUSH;
    let opcode = |n: usize| match n {
        0 => 0,
        1..=75 => 1,
        76..=255 => 2,
        _ => 3,
    };
    full * opcode(MAX_PUSH) + opcode(rest)
}

/// Length of the envelope leaf script carrying `len` data bytes:
/// `<32-byte key> OP_CHECKSIG OP_FALSE OP_IF <pushes> OP_ENDIF`.
pub(super) fn envelope_leaf_len(len: usize) -> usize {
    33 + 1 + 1 + 1 + envelope_push_overhead(len) + len + 1
}

impl ScriptKind {
    /// Every kind, legacy first.
    pub const ALL: [ScriptKind; 5] = [
        ScriptKind::P2pkh,
        ScriptKind::P2shP2wpkh,
        ScriptKind::P2wpkh,
        ScriptKind::P2wsh,
        ScriptKind::P2tr,
    ];

    /// Returns true when spending this kind needs witness data, i.e. only
    /// once segwit is active.
    pub fn needs_witness(self) -> bool {
        !matches!(self, ScriptKind::P2pkh)
    }

    /// Returns true for the segwit v1 kinds, whose spends count no sigops
    /// against the block limit.
    pub fn is_taproot(self) -> bool {
        matches!(self, ScriptKind::P2tr | ScriptKind::P2trEnvelope(_))
    }

    /// Short lower-case name, as used in logs and test names.
    pub fn name(self) -> &'static str {
        match self {
            ScriptKind::P2pkh => "p2pkh",
            ScriptKind::P2shP2wpkh => "p2sh-p2wpkh",
            ScriptKind::P2wpkh => "p2wpkh",
            ScriptKind::P2wsh => "p2wsh",
            ScriptKind::P2tr => "p2tr",
            ScriptKind::P2trEnvelope(_) => "p2tr-envelope",
        }
    }

    /// Upper bound of the non-witness bytes of an input spending this kind
    /// (outpoint, script length, scriptSig, sequence).
    pub fn input_base_size_max(self) -> usize {
        // 36 outpoint + 4 sequence + 1 scriptSig length.
        let fixed = 41;
        match self {
            // <sig (<= 72 + hash type)> <33-byte pubkey>
            ScriptKind::P2pkh => fixed + 1 + 73 + 1 + 33,
            // <22-byte redeem script>
            ScriptKind::P2shP2wpkh => fixed + 1 + 22,
            ScriptKind::P2wpkh
            | ScriptKind::P2wsh
            | ScriptKind::P2tr
            | ScriptKind::P2trEnvelope(_) => fixed,
        }
    }

    /// Upper bound of the witness bytes of an input spending this kind,
    /// counting the item-count byte that every input of a witness
    /// transaction has.
    pub fn input_witness_size_max(self) -> usize {
        match self {
            ScriptKind::P2pkh => 1,
            ScriptKind::P2shP2wpkh | ScriptKind::P2wpkh => 1 + 1 + 73 + 1 + 33,
            // The witness script is `<33-byte pubkey> OP_CHECKSIG`.
            ScriptKind::P2wsh => 1 + 1 + 73 + 1 + 35,
            // A 64-byte Schnorr signature with the default sighash type.
            ScriptKind::P2tr => 1 + 1 + 64,
            // Signature, leaf script, 33-byte control block (one leaf).
            ScriptKind::P2trEnvelope(len) => {
                let leaf = envelope_leaf_len(usize::from(len));
                1 + 1 + 64 + varint_len(leaf) + leaf + 1 + 33
            }
        }
    }
}

/// Upper bounds of the non-witness and witness bytes of a transaction
/// spending `inputs` (by kind) to outputs whose scriptPubKeys have the
/// given lengths.
fn size_parts_max(
    inputs: &[ScriptKind],
    output_script_lens: impl IntoIterator<Item = usize>,
) -> (usize, usize) {
    let mut outputs = 0;
    let mut base = 8 + varint_len(inputs.len());
    for len in output_script_lens {
        outputs += 1;
        base += 8 + varint_len(len) + len;
    }
    base += varint_len(outputs);
    base += inputs
        .iter()
        .map(|k| k.input_base_size_max())
        .sum::<usize>();
    let witness = if inputs.iter().any(|k| k.needs_witness()) {
        // Segwit marker and flag, then each input's witness.
        2 + inputs
            .iter()
            .map(|k| k.input_witness_size_max())
            .sum::<usize>()
    } else {
        0
    };
    (base, witness)
}

/// Upper bound of the virtual size of a transaction spending `inputs` (by
/// kind) to outputs whose scriptPubKeys have the given lengths. Fees
/// computed from it never fall below the intended rate.
pub fn vsize_max(
    inputs: &[ScriptKind],
    output_script_lens: impl IntoIterator<Item = usize>,
) -> u64 {
    let (base, witness) = size_parts_max(inputs, output_script_lens);
    (4 * base + witness).div_ceil(4) as u64
}

/// Upper bound of the serialized size (witness included) of the same
/// transaction.
pub fn size_max(inputs: &[ScriptKind], output_script_lens: impl IntoIterator<Item = usize>) -> u64 {
    let (base, witness) = size_parts_max(inputs, output_script_lens);
    (base + witness) as u64
}

impl std::fmt::Display for ScriptKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
