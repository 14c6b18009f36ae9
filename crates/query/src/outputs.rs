//! A script's confirmed outputs, each paired with the confirmed spend
//! that spends it: what `get_balance`, `listunspent` and the outpoint
//! methods answer from.

use crate::query::{store_failed, Query};
use bitcoin::hashes::Hash;
use bitcoin::{OutPoint, Txid};
use osprey_answers::Error;
use osprey_core::{ScriptHash, TxNum};
use osprey_store::codec::{RowKind, SPENT_TXID_PREFIX_LEN};
use std::collections::HashMap;

/// A confirmed output of a script, from its funding row.
pub(crate) struct Funding {
    pub(crate) tx_num: TxNum,
    pub(crate) txid: Txid,
    pub(crate) vout: u32,
    /// `None` for a spent output whose amount the index left out (a bulk
    /// load's); every unspent one has it.
    pub(crate) value: Option<u64>,
    /// The confirmed transaction that spends it.
    pub(crate) spent_by: Option<TxNum>,
}

impl Query {
    /// The confirmed outputs of a script (as far as `visible` transactions
    /// reach), each with the confirmed transaction that spends it, if any.
    pub(crate) fn confirmed_outputs(
        &self,
        scripthash: &ScriptHash,
        visible: u64,
    ) -> Result<Vec<Funding>, Error> {
        let rows = self.rows(scripthash, visible)?;
        let mut funding: Vec<Funding> = Vec::new();
        // (spent txid prefix, vout) -> the outputs of this script with that
        // prefix and vout not spent yet, as indexes into `funding`. Rows
        // come in chain order, so a spend is paired among the outputs that
        // exist and are unspent when it comes: one of them is the one it
        // spends, and with a 2-byte prefix it is nearly always the only one.
        let mut unspent: HashMap<([u8; SPENT_TXID_PREFIX_LEN], u32), Vec<usize>> = HashMap::new();
        // vout -> the outputs of this script with that vout, spent ones
        // among them until a spend without its prefix passes them: a bulk
        // load left the prefix out of a spend of the latest output of the
        // script with its vout that was not spent before it.
        let mut by_vout: HashMap<u32, Vec<usize>> = HashMap::new();
        for row in rows {
            match row.kind {
                RowKind::Funding { vout, amount } => {
                    let txid = self.store().txid(row.tx_num).map_err(store_failed)?;
                    let mut prefix = [0u8; SPENT_TXID_PREFIX_LEN];
                    prefix.copy_from_slice(&txid.as_byte_array()[..SPENT_TXID_PREFIX_LEN]);
                    unspent
                        .entry((prefix, vout))
                        .or_default()
                        .push(funding.len());
                    by_vout.entry(vout).or_default().push(funding.len());
                    funding.push(Funding {
                        tx_num: row.tx_num,
                        txid,
                        vout,
                        value: amount,
                        spent_by: None,
                    });
                }
                RowKind::Spending {
                    prev_txid_prefix: None,
                    prev_vout,
                    ..
                } => {
                    let candidates = by_vout.entry(prev_vout).or_default();
                    candidates.retain(|&i| funding[i].spent_by.is_none());
                    // In chain order: the latest before the spend.
                    let Some(index) = candidates
                        .iter()
                        .copied()
                        .rfind(|&i| funding[i].tx_num < row.tx_num)
                    else {
                        return Err(Error::Internal(format!(
                            "a spend in tx_num {} of vout {prev_vout} without its txid prefix has \
                             no unspent output of the script to pair with: the index is damaged",
                            row.tx_num
                        )));
                    };
                    funding[index].spent_by = Some(row.tx_num);
                }
                RowKind::Spending {
                    prev_txid_prefix: Some(prev_txid_prefix),
                    prev_vout,
                } => {
                    let Some(candidates) = unspent.get_mut(&(prev_txid_prefix, prev_vout)) else {
                        continue;
                    };
                    // Outputs a spend paired by its vout took.
                    candidates.retain(|&i| funding[i].spent_by.is_none());
                    // A transaction cannot spend its own outputs.
                    let earlier: Vec<usize> = candidates
                        .iter()
                        .enumerate()
                        .filter(|&(_, &i)| funding[i].tx_num < row.tx_num)
                        .map(|(at, _)| at)
                        .collect();
                    let at = match earlier.as_slice() {
                        [] => continue,
                        [only] => *only,
                        _ => {
                            // Two unspent outputs of this script share the
                            // spent-txid prefix and vout: the spending
                            // transaction's inputs tell them apart. (When it
                            // spends both, its rows pair them in turn.)
                            let spent = self.spent_outpoints(row.tx_num)?;
                            match earlier.iter().find(|&&at| {
                                let output = &funding[candidates[at]];
                                spent.contains(&OutPoint::new(output.txid, output.vout))
                            }) {
                                Some(&at) => at,
                                None => continue,
                            }
                        }
                    };
                    let index = candidates.swap_remove(at);
                    funding[index].spent_by = Some(row.tx_num);
                }
            }
        }
        if let Some(f) = funding
            .iter()
            .find(|f| f.spent_by.is_none() && f.value.is_none())
        {
            return Err(Error::Internal(format!(
                "output {} of tx_num {} has no amount, which only a spent output may lack, \
                 and no spend: the index is damaged",
                f.vout, f.tx_num.0
            )));
        }
        Ok(funding)
    }

    /// The outpoints confirmed transaction `tx_num` spends.
    fn spent_outpoints(&self, tx_num: TxNum) -> Result<Vec<OutPoint>, Error> {
        let txid = self.store().txid(tx_num).map_err(store_failed)?;
        let tx = self.confirmed_transaction(&txid, tx_num)?;
        Ok(tx.input.iter().map(|input| input.previous_output).collect())
    }
}
