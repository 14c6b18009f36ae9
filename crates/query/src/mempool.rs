//! The node's mempool as Osprey sees it: each transaction with its fee, its
//! spent outputs resolved, and the script hashes it touches, indexed by
//! script hash and by spent outpoint. Updated by diffing the node's txid
//! list, so each poll costs in proportion to what changed.

use bitcoin::{OutPoint, Transaction, Txid};
use osprey_core::ScriptHash;
use osprey_sp::TweakData;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// A mempool transaction with everything queries need about it.
pub struct MempoolEntry {
    pub txid: Txid,
    pub tx: Transaction,
    pub fee: u64,
    pub vsize: u64,
    /// Outputs: (script hash, vout, value).
    pub funding: Vec<(ScriptHash, u32, u64)>,
    /// Inputs: (script hash of the spent output, outpoint, value).
    pub spending: Vec<(ScriptHash, OutPoint, u64)>,
    /// What a silent-payment scan needs, when the index keeps silent
    /// payments and the transaction is eligible.
    pub sp: Option<SpMempool>,
}

/// An eligible mempool transaction as a silent-payment scan sees it: the
/// index's record (same `osprey_sp` function), with the full x-only keys
/// of its taproot outputs instead of prefixes, so that a match needs no
/// confirming lookup.
pub struct SpMempool {
    pub tweak: TweakData,
    pub output_keys: Vec<[u8; 32]>,
}

impl SpMempool {
    /// The entry's part of a scan, or `None` when `tx` (spending `spent`,
    /// in input order) is not eligible.
    pub fn of(tx: &Transaction, spent: &[bitcoin::TxOut]) -> Option<SpMempool> {
        // A malformed transaction (it cannot be, from the node) pays no one.
        let tweak = osprey_sp::tweak_data(tx, spent).ok()??;
        let output_keys = osprey_sp::taproot_output_keys(tx).collect();
        Some(SpMempool { tweak, output_keys })
    }
}

impl MempoolEntry {
    fn scripthashes(&self) -> impl Iterator<Item = ScriptHash> + '_ {
        self.funding
            .iter()
            .map(|f| f.0)
            .chain(self.spending.iter().map(|s| s.0))
    }
}

/// The smallest bin of the fee histogram, in vbytes (as ElectrumX and
/// electrs use); later bins grow by 10% each.
const HISTOGRAM_BIN_VSIZE: f64 = 100_000.0;

#[derive(Default)]
pub struct Mempool {
    entries: HashMap<Txid, Arc<MempoolEntry>>,
    /// The entries in the order they were added (`mempool.recent`): a
    /// sequence number each, the next one in `next_arrival`.
    arrivals: BTreeMap<u64, Txid>,
    arrival_of: HashMap<Txid, u64>,
    next_arrival: u64,
    by_scripthash: HashMap<ScriptHash, HashSet<Txid>>,
    spent: HashMap<OutPoint, Txid>,
    histogram: Vec<(f64, u64)>,
}

impl Mempool {
    pub fn get(&self, txid: &Txid) -> Option<&Arc<MempoolEntry>> {
        self.entries.get(txid)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Arc<MempoolEntry>> {
        self.entries.values()
    }

    pub fn txids(&self) -> impl Iterator<Item = &Txid> {
        self.entries.keys()
    }

    /// The Electrum height of a mempool transaction: -1 when it spends an
    /// output of another mempool transaction, else 0. Worked out from the
    /// mempool as it is now, because a parent can confirm (or return with a
    /// reorg) while its child waits.
    pub fn height(&self, entry: &MempoolEntry) -> i64 {
        if entry
            .spending
            .iter()
            .any(|(_, op, _)| self.entries.contains_key(&op.txid))
        {
            -1
        } else {
            0
        }
    }

    /// Marks the scripts of `txid`'s mempool children as touched: their
    /// height flips between 0 and -1 when `txid` enters or leaves.
    fn touch_children(&self, txid: &Txid, outputs: usize, touched: &mut Vec<ScriptHash>) {
        for vout in 0..outputs as u32 {
            if let Some(child) = self
                .spent
                .get(&OutPoint { txid: *txid, vout })
                .and_then(|c| self.entries.get(c))
            {
                touched.extend(child.scripthashes());
            }
        }
    }

    /// The mempool transaction spending `outpoint`, if any.
    pub fn spender(&self, outpoint: &OutPoint) -> Option<&Txid> {
        self.spent.get(outpoint)
    }

    /// Mempool transactions touching `scripthash`.
    pub fn entries_for(&self, scripthash: &ScriptHash) -> Vec<Arc<MempoolEntry>> {
        self.by_scripthash
            .get(scripthash)
            .map(|txids| {
                txids
                    .iter()
                    .filter_map(|t| self.entries.get(t).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The last `count` entries added that are still here, newest first.
    pub fn recent(&self, count: usize) -> impl Iterator<Item = &Arc<MempoolEntry>> {
        self.arrivals
            .values()
            .rev()
            .filter_map(|txid| self.entries.get(txid))
            .take(count)
    }

    /// `(fee rate in sat/vB, vsize)` pairs, highest fee rate first.
    pub fn histogram(&self) -> &[(f64, u64)] {
        &self.histogram
    }

    /// Adds an entry; returns the script hashes it touches.
    pub(crate) fn add(&mut self, entry: MempoolEntry, touched: &mut Vec<ScriptHash>) {
        for sh in entry.scripthashes() {
            self.by_scripthash.entry(sh).or_default().insert(entry.txid);
            touched.push(sh);
        }
        for (_, outpoint, _) in &entry.spending {
            self.spent.insert(*outpoint, entry.txid);
        }
        let (txid, outputs) = (entry.txid, entry.tx.output.len());
        self.arrivals.insert(self.next_arrival, txid);
        if let Some(earlier) = self.arrival_of.insert(txid, self.next_arrival) {
            self.arrivals.remove(&earlier);
        }
        self.next_arrival += 1;
        self.entries.insert(txid, Arc::new(entry));
        self.touch_children(&txid, outputs, touched);
    }

    /// Removes a transaction (confirmed, replaced or evicted).
    pub(crate) fn remove(&mut self, txid: &Txid, touched: &mut Vec<ScriptHash>) {
        let Some(entry) = self.entries.remove(txid) else {
            return;
        };
        if let Some(arrival) = self.arrival_of.remove(txid) {
            self.arrivals.remove(&arrival);
        }
        for sh in entry.scripthashes() {
            if let Some(set) = self.by_scripthash.get_mut(&sh) {
                set.remove(txid);
                if set.is_empty() {
                    self.by_scripthash.remove(&sh);
                }
            }
            touched.push(sh);
        }
        for (_, outpoint, _) in &entry.spending {
            if self.spent.get(outpoint) == Some(txid) {
                self.spent.remove(outpoint);
            }
        }
        self.touch_children(txid, entry.tx.output.len(), touched);
    }

    /// Recomputes the fee histogram; called after every change to the
    /// entries, a block's confirmations included.
    pub(crate) fn update_histogram(&mut self) {
        self.histogram = fee_histogram(
            self.entries
                .values()
                .map(|e| (e.fee as f64 / e.vsize.max(1) as f64, e.vsize))
                .collect(),
        );
    }
}

/// Buckets `(fee rate, vsize)` pairs as ElectrumX does: bins of at least
/// 100 kvB, each 10% larger than the last, the rest in a last bin. A bin
/// only ends between two different rates, so the rates come out strictly
/// decreasing as the spec requires (Electrum drops a server whose
/// histogram repeats a rate), however much vsize sits at one rate.
fn fee_histogram(mut rates: Vec<(f64, u64)>) -> Vec<(f64, u64)> {
    rates.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut histogram = Vec::new();
    let mut bin = HISTOGRAM_BIN_VSIZE;
    let mut size = 0u64;
    for (i, &(rate, vsize)) in rates.iter().enumerate() {
        size += vsize;
        let rate_ends_here = rates.get(i + 1).is_none_or(|next| next.0 != rate);
        if rate_ends_here && (size as f64 > bin || i + 1 == rates.len()) {
            histogram.push((rate, size));
            size = 0;
            bin *= 1.1;
        }
    }
    histogram
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;

    fn entry(n: u8) -> MempoolEntry {
        MempoolEntry {
            txid: Txid::from_byte_array([n; 32]),
            tx: Transaction {
                version: bitcoin::transaction::Version::TWO,
                lock_time: bitcoin::absolute::LockTime::ZERO,
                input: Vec::new(),
                output: Vec::new(),
            },
            fee: u64::from(n) * 100,
            vsize: 150,
            funding: Vec::new(),
            spending: Vec::new(),
            sp: None,
        }
    }

    fn recent(mempool: &Mempool, count: usize) -> Vec<u8> {
        mempool
            .recent(count)
            .map(|e| e.txid.to_byte_array()[0])
            .collect()
    }

    #[test]
    fn recent_lists_the_newest_entries_still_there() {
        let mut mempool = Mempool::default();
        let mut touched = Vec::new();
        assert!(recent(&mempool, 10).is_empty());
        for n in 1..=5 {
            mempool.add(entry(n), &mut touched);
        }
        assert_eq!(recent(&mempool, 3), [5, 4, 3]);
        // A confirmed newest one gives way to the one before it.
        mempool.remove(&Txid::from_byte_array([5; 32]), &mut touched);
        mempool.remove(&Txid::from_byte_array([3; 32]), &mut touched);
        assert_eq!(recent(&mempool, 3), [4, 2, 1]);
        assert_eq!(recent(&mempool, 10), [4, 2, 1]);
        // One that comes back (a reorg) is new again.
        mempool.add(entry(1), &mut touched);
        assert_eq!(recent(&mempool, 10), [1, 4, 2]);
        assert_eq!(mempool.arrivals.len(), 3, "no stale arrivals kept");
    }

    fn strictly_decreasing(histogram: &[(f64, u64)]) -> bool {
        histogram.windows(2).all(|w| w[0].0 > w[1].0)
    }

    #[test]
    fn histogram_rates_never_repeat() {
        // 1,000 transactions of 300 vB at one rate: 300 kvB, three bins'
        // worth, must be one bin.
        let one_rate = vec![(5.0, 300); 1000];
        assert_eq!(fee_histogram(one_rate), vec![(5.0, 300_000)]);
        // A heavy rate between others.
        let mut rates = vec![(20.0, 50_000), (1.0, 10)];
        rates.extend(vec![(7.5, 1000); 400]);
        let histogram = fee_histogram(rates);
        assert_eq!(histogram, vec![(7.5, 450_000), (1.0, 10)]);
        // Many rates with ties, in any order: strictly decreasing, and no
        // vsize lost.
        let rates: Vec<(f64, u64)> = (0..5000u64)
            .map(|i| (((i * 7919) % 37) as f64 / 4.0, 100 + (i * 31) % 900))
            .collect();
        let total: u64 = rates.iter().map(|r| r.1).sum();
        let histogram = fee_histogram(rates);
        assert!(strictly_decreasing(&histogram), "{histogram:?}");
        assert_eq!(histogram.iter().map(|b| b.1).sum::<u64>(), total);
        assert!(histogram.len() > 3, "{histogram:?}");
        assert_eq!(fee_histogram(Vec::new()), vec![]);
    }
}
