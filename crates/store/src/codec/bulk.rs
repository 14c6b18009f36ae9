//! A bulk load's merged history values: a script's rows from its runs
//! cut back into a value per epoch, spends paired by vout losing their
//! txid prefix and the outputs they spend their amounts
//! ([`EpochValues`]), and the values as indexes are compared
//! ([`comparable_values`]).

use osprey_core::{read_varint, write_varint};

use super::{
    entries, epoch_base, write_tx_num, CodecError, Epoch, First, HistoryKey, FUNDING_SPENT,
    SPEND_WITH_PREFIX,
};

/// [`SPEND_WITH_PREFIX`] as the u64 a tag is read as.
const WITH_PREFIX: u64 = SPEND_WITH_PREFIX as u64;

/// [`FUNDING_SPENT`] as the u64 a tag is read as.
const FUNDING_SPENT_TAG: u64 = FUNDING_SPENT as u64;

/// A script's stored values, one per epoch, put back together from the
/// values its rows have in a bulk load's runs ([`Operands::for_run`]),
/// in chain order ([`EpochValues::merge`]).
pub(crate) struct EpochValues {
    /// The key of the value being built, and its epoch.
    key: Option<(HistoryKey, Epoch)>,
    value: Vec<u8>,
    /// The tx_num the next entry's delta counts from.
    previous: u64,
    open: OpenOutputs,
    /// Per entry of the script, in order: whether the merge paired it (a
    /// spend loses its prefix, an output its amount).
    paired: Vec<bool>,
    body: Vec<u8>,
}

/// A script's outputs not surely spent yet, as the merge tracks them:
/// vout, tx_num and the entry's place in the script's rows. A list,
/// scanned: nearly every script holds a few, and the merge pairs none
/// past [`OPEN_OUTPUTS_MAX`].
#[derive(Default)]
struct OpenOutputs(Vec<(u32, u64, usize)>);

impl OpenOutputs {
    /// The only output with `vout` before transaction `tx_num`, taken out
    /// (its tx_num and place); `None` when there are none or several.
    fn take_only(&mut self, vout: u32, tx_num: u64) -> Option<(u64, usize)> {
        let mut earlier = self
            .0
            .iter()
            .enumerate()
            .filter(|&(_, &(v, t, _))| v == vout && t < tx_num);
        let (Some((at, _)), None) = (earlier.next(), earlier.next()) else {
            return None;
        };
        let (_, tx_num, place) = self.0.swap_remove(at);
        Some((tx_num, place))
    }

    /// Takes out the latest output with `vout` before transaction
    /// `tx_num` (the list is in chain order but where `take_only` swapped).
    fn take_latest(&mut self, vout: u32, tx_num: u64) {
        let latest = self
            .0
            .iter()
            .enumerate()
            .filter(|&(_, &(v, t, _))| v == vout && t < tx_num)
            .max_by_key(|&(_, &(_, t, place))| (t, place))
            .map(|(at, _)| at);
        if let Some(at) = latest {
            self.0.swap_remove(at);
        }
    }
}

/// Outputs of one script the merge tracks for pairing at once. A script
/// with more (an exchange's address) mostly has several outputs of each
/// vout open anyway, which pairing by vout cannot tell apart.
const OPEN_OUTPUTS_MAX: usize = 4096;

impl EpochValues {
    pub(crate) fn new() -> EpochValues {
        EpochValues {
            key: None,
            value: Vec::new(),
            previous: 0,
            open: OpenOutputs::default(),
            paired: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Finds the spends the merge pairs by vout: a spend that exactly one
    /// output of the script could be spent by, by vout, is paired with it.
    /// The outputs tracked are a superset of the unspent ones (a spend
    /// paired only by its prefix leaves its candidates, and an output a
    /// run found spent stays one until its spend), so one candidate is the
    /// one spent, and the latest unspent one, as a reader pairs a spend
    /// without its prefix. A spend its run left without a prefix spends
    /// the latest unspent output of its vout: it takes out the latest
    /// tracked, which is that one or one spent already, and either keeps
    /// the superset. `None` when a value does not decode.
    fn pair(&mut self, parts: &[(u64, &[u8])]) -> Option<()> {
        self.open.0.clear();
        self.paired.clear();
        let mut pairing = true;
        for &(base, run_value) in parts {
            for entry in entries(base, run_value, First::RunDelta) {
                let entry = entry?;
                let place = self.paired.len();
                self.paired.push(false);
                let mut rest = entry.body;
                // `entries` checked that the tag fits in 32 bits.
                let tagged = read_varint(&mut rest)?;
                let vout = (tagged >> 2) as u32;
                if tagged & 1 == 0 {
                    if pairing && self.open.0.len() == OPEN_OUTPUTS_MAX {
                        pairing = false;
                        self.open.0.clear();
                    } else if pairing {
                        self.open.0.push((vout, entry.tx_num, place));
                    }
                    continue;
                }
                if !pairing {
                    continue;
                }
                if tagged & WITH_PREFIX != WITH_PREFIX {
                    self.open.take_latest(vout, entry.tx_num);
                    continue;
                }
                if let Some((_, output)) = self.open.take_only(vout, entry.tx_num) {
                    self.paired[output] = true;
                    self.paired[place] = true;
                }
            }
        }
        Some(())
    }

    /// The entry's body as stored: paired, a spend loses its txid prefix
    /// and an output its amount ([`super::FUNDING_SPENT`]; a run may have
    /// left it out already, for a spend in the same run).
    fn stored_body<'b>(&'b mut self, place: usize, body: &'b [u8]) -> Option<&'b [u8]> {
        if !self.paired[place] {
            return Some(body);
        }
        let mut rest = body;
        let tagged = read_varint(&mut rest)?;
        self.body.clear();
        if tagged & 1 == 0 {
            write_varint(&mut self.body, tagged | FUNDING_SPENT_TAG);
        } else {
            write_varint(&mut self.body, (tagged & !WITH_PREFIX) | 1);
        }
        Some(&self.body)
    }

    /// Merges the script `id`'s values in a bulk load's runs, `parts`
    /// (each with its run's first tx_num), earlier runs first. Each stored
    /// value, one per epoch, goes to `emit` with its key. `None` (a
    /// damaged run) when a value does not decode or its rows come before
    /// the rows of the values before it.
    pub(crate) fn merge<E>(
        &mut self,
        id: &[u8],
        parts: &[(u64, &[u8])],
        emit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Option<Result<(), E>> {
        self.key = None;
        self.value.clear();
        self.pair(parts)?;
        let mut place = 0;
        for &(base, run_value) in parts {
            for entry in entries(base, run_value, First::RunDelta) {
                let entry = entry?;
                let epoch = Epoch::of(entry.tx_num);
                let current = self.key.map(|(_, current)| current);
                if current != Some(epoch) {
                    if current.is_some_and(|current| epoch < current) {
                        return None;
                    }
                    if let Err(e) = self.finish(emit) {
                        return Some(Err(e));
                    }
                    self.key = Some((HistoryKey::new(id, epoch), epoch));
                    self.previous = epoch.start();
                }
                if entry.tx_num < self.previous {
                    // Rows out of chain order: a damaged run.
                    return None;
                }
                let mut value = std::mem::take(&mut self.value);
                let first = value.is_empty().then_some(First::EpochOffset);
                write_tx_num(&mut value, first, entry.tx_num, self.previous);
                self.previous = entry.tx_num;
                value.extend_from_slice(self.stored_body(place, entry.body)?);
                self.value = value;
                place += 1;
            }
        }
        Some(self.finish(emit))
    }

    /// Hands the value being built, if any, to `emit`.
    fn finish<E>(&mut self, emit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>) -> Result<(), E> {
        let Some((key, _)) = &self.key else {
            return Ok(());
        };
        if self.value.is_empty() {
            return Ok(());
        }
        let done = emit(key.as_bytes(), &self.value);
        self.value.clear();
        done
    }
}

/// A script's stored values (its epochs in order, keys and values) as
/// `Store::digest` compares them: every spend without its txid prefix,
/// and every output of the script that a later spend of it with the same
/// vout could have spent without its amount. A bulk load leaves out the
/// prefixes and amounts it can, and a block-by-block sync keeps them all;
/// which output a spend spends is not in its row, but that it could be
/// this one is, so both indexes come to the same bytes, and the amounts
/// of the outputs no spend could have spent are still compared.
pub(crate) fn comparable_values(values: &mut [(Vec<u8>, Vec<u8>)]) -> Result<(), CodecError> {
    // Each row's tx_num and tag, in order.
    let mut rows: Vec<(u64, u64)> = Vec::new();
    for (key, value) in values.iter() {
        let bad = || CodecError::History(key.clone());
        let base = epoch_base(key).ok_or_else(bad)?;
        for entry in entries(base, value, First::EpochOffset) {
            let entry = entry.ok_or_else(bad)?;
            let mut rest = entry.body;
            rows.push((entry.tx_num, read_varint(&mut rest).ok_or_else(bad)?));
        }
    }
    // Walking back from the last row: the latest spend of each vout.
    let mut latest_spend: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut strip = vec![false; rows.len()];
    for (at, &(tx_num, tagged)) in rows.iter().enumerate().rev() {
        let vout = tagged >> 2;
        if tagged & 1 == 1 {
            let latest = latest_spend.entry(vout).or_insert(tx_num);
            *latest = (*latest).max(tx_num);
        } else {
            strip[at] = latest_spend.get(&vout).is_some_and(|&spend| spend > tx_num);
        }
    }
    let mut at = 0;
    for (key, value) in values.iter_mut() {
        let base = epoch_base(key).ok_or_else(|| CodecError::History(key.clone()))?;
        let mut out = Vec::with_capacity(value.len());
        let mut copied = 0;
        for entry in entries(base, value, First::EpochOffset) {
            let entry = entry.ok_or_else(|| CodecError::History(key.clone()))?;
            let body_at = super::offset_of(value, entry.body);
            out.extend_from_slice(&value[copied..body_at]);
            copied = body_at + entry.body.len();
            let tagged = rows[at].1;
            if tagged & 1 == 1 {
                write_varint(&mut out, (tagged & !WITH_PREFIX) | 1);
            } else if strip[at] {
                write_varint(&mut out, tagged | FUNDING_SPENT_TAG);
            } else {
                out.extend_from_slice(entry.body);
            }
            at += 1;
        }
        *value = out;
    }
    Ok(())
}
