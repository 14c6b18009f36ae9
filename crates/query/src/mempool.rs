//! The node's mempool as Osprey sees it: each transaction with its fee, its
//! spent outputs resolved, and the script hashes it touches, indexed by
//! script hash and by spent outpoint. Updated by diffing the node's txid
//! list, so each poll costs in proportion to what changed.

use bitcoin::{OutPoint, Transaction, Txid};
use osprey_core::ScriptHash;
use std::collections::{HashMap, HashSet};
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
    by_scripthash: HashMap<ScriptHash, HashSet<Txid>>,
    spent: HashMap<OutPoint, Txid>,
    histogram: Vec<(f64, u64)>,
}

impl Mempool {
    pub fn get(&self, txid: &Txid) -> Option<&Arc<MempoolEntry>> {
        self.entries.get(txid)
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
        self.entries.insert(txid, Arc::new(entry));
        self.touch_children(&txid, outputs, touched);
    }

    /// Removes a transaction (confirmed, replaced or evicted).
    pub(crate) fn remove(&mut self, txid: &Txid, touched: &mut Vec<ScriptHash>) {
        let Some(entry) = self.entries.remove(txid) else {
            return;
        };
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

    /// Recomputes the fee histogram (ElectrumX's compaction: bins of at
    /// least 100 kvB, growing by 10%; what remains forms a last bin).
    pub(crate) fn update_histogram(&mut self) {
        let mut rates: Vec<(f64, u64)> = self
            .entries
            .values()
            .map(|e| (e.fee as f64 / e.vsize.max(1) as f64, e.vsize))
            .collect();
        rates.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut histogram = Vec::new();
        let mut bin = HISTOGRAM_BIN_VSIZE;
        let mut size = 0u64;
        let mut last_rate = 0.0;
        for (rate, vsize) in rates {
            size += vsize;
            last_rate = rate;
            if size as f64 > bin {
                histogram.push((rate, size));
                size = 0;
                bin *= 1.1;
            }
        }
        if size > 0 {
            histogram.push((last_rate, size));
        }
        self.histogram = histogram;
    }
}
