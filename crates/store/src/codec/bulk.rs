//! A bulk load's merged history values: a script's rows from its runs
//! cut back into a value per epoch, spends paired by vout losing their
//! txid prefix ([`EpochValues`]), and the prefixes given back for
//! comparing indexes ([`PrefixRestorer`]).

use osprey_core::{read_varint, write_varint};

use super::{
    entries, epoch_base, epoch_of, epoch_start, write_tx_num, CodecError, First, EPOCH_LEN,
    SCRIPT_ID_LEN, SPEND_WITH_PREFIX, SPENT_TXID_PREFIX_LEN,
};

/// [`SPEND_WITH_PREFIX`] as the u64 a tag is read as.
const WITH_PREFIX: u64 = SPEND_WITH_PREFIX as u64;

/// A script's stored values, one per epoch, put back together from the
/// values its rows have in a bulk load's runs ([`Operands::for_run`]),
/// appended in chain order.
pub(crate) struct EpochValues {
    key: [u8; SCRIPT_ID_LEN + EPOCH_LEN],
    value: Vec<u8>,
    /// The tx_num the next entry's delta counts from.
    previous: u64,
    open: OpenOutputs,
    /// Whether the script's spends are still paired: not once it held
    /// more than [`OPEN_OUTPUTS_MAX`] outputs at once (its later spends
    /// keep their prefixes, which is always exact).
    pairing: bool,
    body: Vec<u8>,
}

/// A script's outputs not surely spent yet, as the merge and the restorer
/// track them: vout and tx_num. A list, scanned: nearly every script holds
/// a few, and the merge pairs none past [`OPEN_OUTPUTS_MAX`].
#[derive(Default)]
struct OpenOutputs(Vec<(u32, u64)>);

impl OpenOutputs {
    /// The only output with `vout` before transaction `tx_num`, taken out;
    /// `None` when there are none or several.
    fn take_only(&mut self, vout: u32, tx_num: u64) -> Option<u64> {
        let mut earlier = self
            .0
            .iter()
            .enumerate()
            .filter(|&(_, &(v, t))| v == vout && t < tx_num);
        let (Some((at, _)), None) = (earlier.next(), earlier.next()) else {
            return None;
        };
        Some(self.0.swap_remove(at).1)
    }
}

/// Outputs of one script the merge tracks for pairing at once. A script
/// with more (an exchange's address) mostly has several outputs of each
/// vout open anyway, which pairing by vout cannot tell apart.
const OPEN_OUTPUTS_MAX: usize = 4096;

impl EpochValues {
    pub(crate) fn new() -> EpochValues {
        EpochValues {
            key: [0; SCRIPT_ID_LEN + EPOCH_LEN],
            value: Vec::new(),
            previous: 0,
            open: OpenOutputs::default(),
            pairing: true,
            body: Vec::new(),
        }
    }

    /// Starts the values of the script `id` (its id's bytes).
    pub(crate) fn begin(&mut self, id: &[u8]) {
        self.key[..SCRIPT_ID_LEN].copy_from_slice(id);
        self.value.clear();
        self.open.0.clear();
        self.pairing = true;
    }

    /// The entry's body as stored: a spend that exactly one output of the
    /// script could be spent by, by vout, loses its txid prefix. The
    /// outputs tracked are a superset of the unspent ones (a spend paired
    /// only by its prefix leaves its candidates), so one candidate is the
    /// one spent.
    fn paired_body<'b>(&'b mut self, tx_num: u64, body: &'b [u8]) -> Option<&'b [u8]> {
        let mut rest = body;
        // `entries` checked that the tag fits in 32 bits.
        let tagged = read_varint(&mut rest)?;
        if tagged & 1 == 0 {
            if self.pairing && self.open.0.len() == OPEN_OUTPUTS_MAX {
                self.pairing = false;
                self.open.0.clear();
            } else if self.pairing {
                self.open.0.push(((tagged >> 1) as u32, tx_num));
            }
            return Some(body);
        }
        if tagged & WITH_PREFIX != WITH_PREFIX {
            // A run's spends carry their prefixes: this one is damaged.
            return None;
        }
        if !self.pairing || self.open.take_only((tagged >> 2) as u32, tx_num).is_none() {
            return Some(body);
        }
        self.body.clear();
        write_varint(&mut self.body, (tagged & !WITH_PREFIX) | 1);
        Some(&self.body)
    }

    /// Appends a run's value of the script, its first entry counting from
    /// `base`. A value whose epoch the rows leave goes to `emit` with its
    /// key. `None` (a damaged run) when the value does not decode or its
    /// rows come before the rows appended already.
    pub(crate) fn append<E>(
        &mut self,
        base: u64,
        run_value: &[u8],
        emit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Option<Result<(), E>> {
        for entry in entries(base, run_value, First::RunDelta) {
            let entry = entry?;
            let epoch = epoch_of(entry.tx_num);
            if self.value.is_empty() || epoch != self.key[SCRIPT_ID_LEN..] {
                if !self.value.is_empty() && epoch[..] < self.key[SCRIPT_ID_LEN..] {
                    return None;
                }
                if let Err(e) = self.finish(emit) {
                    return Some(Err(e));
                }
                self.key[SCRIPT_ID_LEN..].copy_from_slice(&epoch);
                self.previous = epoch_start(entry.tx_num);
            }
            if entry.tx_num < self.previous {
                // Rows out of chain order: a damaged run.
                return None;
            }
            let mut value = std::mem::take(&mut self.value);
            let first = value.is_empty().then_some(First::EpochOffset);
            write_tx_num(&mut value, first, entry.tx_num, self.previous);
            self.previous = entry.tx_num;
            value.extend_from_slice(self.paired_body(entry.tx_num, entry.body)?);
            self.value = value;
        }
        Some(Ok(()))
    }

    /// Hands the value being built, if any, to `emit`.
    pub(crate) fn finish<E>(
        &mut self,
        emit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.value.is_empty() {
            return Ok(());
        }
        let done = emit(&self.key, &self.value);
        self.value.clear();
        done
    }
}

/// Gives a bulk-loaded index's history values back the spent-txid
/// prefixes its merge left out, which makes them the bytes a block-by-block
/// sync writes (`Store::digest` compares indexes by them). Fed a family's
/// values in key order, so a script's values come together, epochs in
/// order; it pairs each spend without a prefix exactly as the merge did
/// ([`EpochValues`]): among the script's outputs with its vout not taken
/// by such a spend before it, the one before its transaction.
#[derive(Default)]
pub(crate) struct PrefixRestorer {
    id: Vec<u8>,
    open: OpenOutputs,
}

impl PrefixRestorer {
    /// `value` (under `key`) with its spends' prefixes, `prefix_of` giving
    /// a transaction's txid prefix.
    pub(crate) fn restore<E: From<CodecError>>(
        &mut self,
        key: &[u8],
        value: &[u8],
        mut prefix_of: impl FnMut(u64) -> Result<[u8; SPENT_TXID_PREFIX_LEN], E>,
    ) -> Result<Vec<u8>, E> {
        let bad = || CodecError::History(key.to_vec());
        let id = key.get(..SCRIPT_ID_LEN).ok_or_else(bad)?;
        if self.id != id {
            self.id = id.to_vec();
            self.open.0.clear();
        }
        let base = epoch_base(key).ok_or_else(bad)?;
        let mut out = Vec::with_capacity(value.len() + 16);
        let mut previous = base;
        for entry in entries(base, value, First::EpochOffset) {
            let entry = entry.ok_or_else(bad)?;
            let first = out.is_empty().then_some(First::EpochOffset);
            write_tx_num(&mut out, first, entry.tx_num, previous);
            previous = entry.tx_num;
            let mut rest = entry.body;
            // `entries` checked that the tag fits in 32 bits.
            let tagged = read_varint(&mut rest).ok_or_else(bad)?;
            if tagged & 1 == 0 {
                self.open.0.push(((tagged >> 1) as u32, entry.tx_num));
                out.extend_from_slice(entry.body);
                continue;
            }
            if tagged & WITH_PREFIX == WITH_PREFIX {
                out.extend_from_slice(entry.body);
                continue;
            }
            // The merge paired it while it tracked at most
            // `OPEN_OUTPUTS_MAX` outputs of the script: the same ones.
            let vout = (tagged >> 2) as u32;
            let funding = self.open.take_only(vout, entry.tx_num).ok_or_else(bad)?;
            write_varint(&mut out, tagged | WITH_PREFIX);
            out.extend_from_slice(&prefix_of(funding)?);
        }
        Ok(out)
    }
}
