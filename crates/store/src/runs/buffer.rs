//! A bulk load's rows in memory until they make a run: the rows and
//! txid keys of the blocks committed since the last run, and the run's
//! txids, by which a spend finds an output of its own run; and the
//! marking, when the run is written, of those outputs as spent
//! ([`mark_spent_in_run`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

use rayon::prelude::*;

use super::txid_key_tx_num;
use crate::codec;

/// The rows of the blocks committed since the last run was written.
#[derive(Default)]
pub(crate) struct RunBuffer {
    /// History rows, in commit order.
    pub(super) history: Vec<codec::ScriptRow>,
    /// Txid keys as [`codec::txid_key_bits`].
    pub(super) txids: Vec<u128>,
    /// The run's transactions by txid, so that a spend of one of their
    /// outputs finds it ([`RunBuffer::push`]).
    tx_nums: HashMap<RunTxid, u64, RunTxidHashes>,
}

/// A txid as a key of [`RunBuffer`]'s map: hashed by its first 8 bytes (a
/// hash already).
#[derive(PartialEq, Eq)]
struct RunTxid([u8; 32]);

impl Hash for RunTxid {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes")));
    }
}

/// The hasher of [`RunBuffer`]'s map: one multiplication, its 128-bit
/// product folded, of the txid's first 8 bytes and a key drawn at random
/// per map, so that txids ground to collide in some bits do not collide
/// in the table's: a first sync looks up every spend, and this is
/// cheaper than SipHash.
#[derive(Clone)]
struct RunTxidHasher {
    key: u64,
    hash: u64,
}

impl Hasher for RunTxidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        let product =
            u128::from(word ^ self.key) * u128::from(0x9e37_79b9_7f4a_7c15_u64 ^ self.hash);
        self.hash = (product as u64) ^ ((product >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Makes [`RunTxidHasher`]s with one random key.
#[derive(Clone)]
struct RunTxidHashes(u64);

impl Default for RunTxidHashes {
    fn default() -> RunTxidHashes {
        RunTxidHashes(std::collections::hash_map::RandomState::new().hash_one(0u64))
    }
}

impl BuildHasher for RunTxidHashes {
    type Hasher = RunTxidHasher;

    fn build_hasher(&self) -> RunTxidHasher {
        RunTxidHasher {
            key: self.0,
            hash: 0,
        }
    }
}

/// Memory an entry of [`RunBuffer`]'s map takes: its key and value, and
/// the table's control byte.
const RUN_TXID_BYTES: usize = std::mem::size_of::<(RunTxid, u64)>() + 1;

impl RunBuffer {
    /// Takes a batch's rows and txid keys, and `txids`, its transactions'
    /// txids from tx_num `first_tx_num` on. `spent` gives the txid each of
    /// the batch's spends spends from, in the order of its spending rows
    /// (or none at all): a spend of a transaction of this run records its
    /// tx_num ([`codec::ScriptRow::resolve_spend`]), and [`super::write_run`]
    /// leaves the amount of the output it spends out of the run.
    pub(crate) fn push(
        &mut self,
        history: &[codec::ScriptRow],
        txid_keys: &[u128],
        txids: &[[u8; 32]],
        first_tx_num: u64,
        spent: &[[u8; 32]],
    ) {
        for (tx_num, txid) in (first_tx_num..).zip(txids) {
            self.tx_nums.insert(RunTxid(*txid), tx_num);
        }
        let start = self.history.len();
        self.history.extend_from_slice(history);
        let mut spent = spent.iter();
        for row in self.history[start..]
            .iter_mut()
            .filter(|row| row.is_spend())
        {
            let Some(txid) = spent.next() else {
                break;
            };
            // Rows and txids come from the same inputs in the same order;
            // the prefix check makes a mismatch a missed pairing, never a
            // wrong one.
            if !row.has_spent_prefix(txid) {
                debug_assert!(false, "spent txids out of step with the spends");
                break;
            }
            if let Some(&tx_num) = self.tx_nums.get(&RunTxid(*txid)) {
                row.resolve_spend(tx_num);
            }
        }
        self.txids.extend_from_slice(txid_keys);
    }

    /// Memory its rows hold, in bytes: what a run's size is counted in.
    pub(crate) fn bytes(&self) -> usize {
        self.history.len() * std::mem::size_of::<codec::ScriptRow>()
            + self.txids.len() * std::mem::size_of::<u128>()
    }

    /// Memory its map of the run's txids holds, in bytes. Not counted in
    /// [`RunBuffer::bytes`]: a transaction takes ~190 bytes of rows and 41
    /// to 82 here, and counting both made the runs of the 50M chain at
    /// `lsm_scale` 24 a quarter shorter, so that fewer spends found their
    /// outputs in their own run and the runs held more script ids (with
    /// only amounts left out of runs, its peak on disk went from 1.153 to
    /// 1.18-1.19 of the final index). A run is written when the map
    /// reaches half the run's bytes instead, which a chain of
    /// transactions of a few rows each reaches, and a mainnet-shaped one
    /// (5.3 rows per transaction) does not.
    pub(crate) fn map_bytes(&self) -> usize {
        self.tx_nums.capacity() * RUN_TXID_BYTES
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.history.is_empty() && self.txids.is_empty()
    }

    /// Sorts the rows (a script's together, in chain order) and the txid
    /// keys, and marks the outputs the run's own spends spend
    /// ([`mark_spent_in_run`]); frees the map first. Returns the run's
    /// first tx_num.
    pub(super) fn sort_and_pair(&mut self) -> u64 {
        self.tx_nums = HashMap::default();
        self.history.par_sort_unstable();
        self.txids.par_sort_unstable();
        let base = self
            .history
            .iter()
            .map(codec::ScriptRow::tx_num)
            .chain(self.txids.iter().map(|&key| txid_key_tx_num(key)))
            .min()
            .unwrap_or(0);
        mark_spent_in_run(&mut self.history, base);
        base
    }
}

/// Marks spent each output of `sorted` (a run's rows, in order, from
/// tx_num `base` on) that a spend among them spends, as the spends'
/// resolved txids say ([`RunBuffer::push`]): the run, and the index the
/// merge makes of it, leave its amount out. The spend leaves out its
/// prefix too where the output it spends is the latest of the script's
/// outputs with its vout before it that no spend took before it, which is
/// how a reader pairs a spend without one (`Query::confirmed_outputs`):
/// the run's outputs are the chain's latest, so the run alone can tell.
/// On the 10M-transaction mainnet-profile chain 69% of the spends spend
/// an output of their own run at `lsm_scale` 24's runs of ~62,000
/// transactions, and 99% at the 1.6 million of a 256 MiB run.
fn mark_spent_in_run(sorted: &mut [codec::ScriptRow], base: u64) {
    // The script's outputs in the run that no spend of it took yet, in
    // order: vout, tx_num and place among the script's rows.
    let mut unspent: Vec<(u32, u64, usize)> = Vec::new();
    // Each spend of an output of the run: the output's place, the spend's,
    // and whether the spend's prefix goes.
    let mut pairs: Vec<(usize, usize, bool)> = Vec::new();
    let mut start = 0;
    while start < sorted.len() {
        let first = sorted[start];
        let len = sorted[start..].partition_point(|row| row.same_script(&first));
        let script = &mut sorted[start..start + len];
        start += len;
        unspent.clear();
        pairs.clear();
        // Whether `unspent` holds every such output: a script with more
        // than `UNSPENT_TRACKED_MAX` keeps its spends' prefixes.
        let mut complete = true;
        for (place, row) in script.iter().enumerate() {
            if !row.is_spend() {
                if unspent.len() == UNSPENT_TRACKED_MAX {
                    complete = false;
                } else {
                    unspent.push((row.vout(), row.tx_num(), place));
                }
                continue;
            }
            let Some(output) = row.spent_output().filter(|&(tx_num, _)| tx_num >= base) else {
                continue;
            };
            // A script's rows sort by tx_num, then tag (none is marked yet).
            let Ok(at) = script.binary_search_by(|r| r.output().cmp(&output)) else {
                continue;
            };
            let tracked = unspent.iter().rposition(|&(_, _, p)| p == at);
            let latest = complete
                && tracked.is_some_and(|i| {
                    !unspent[i + 1..]
                        .iter()
                        .any(|&(vout, tx_num, _)| vout == row.vout() && tx_num < row.tx_num())
                });
            if let Some(i) = tracked {
                unspent.remove(i);
            }
            pairs.push((at, place, latest));
        }
        for &(output, spend, latest) in &pairs {
            script[output].mark_spent();
            if latest {
                script[spend].leave_prefix_out();
            }
        }
    }
}

/// The outputs of one script in one run [`mark_spent_in_run`] tracks: a
/// script with more (an exchange's address) keeps its spends' prefixes
/// in that run.
const UNSPENT_TRACKED_MAX: usize = 4096;
