//! The status of one transaction output (1.7's
//! `blockchain.outpoint.*`): the height of the transaction that funds it and
//! the transaction that spends it, from the index and the mempool, with no
//! node `txindex`.
//!
//! The funding transaction is found through the `txid` column family (or in
//! the mempool). Its spender is one of the spending rows of the output's
//! own script, paired with the output exactly as `balance` and `unspent`
//! pair them (`Query::confirmed_outputs`, which reads the spending inputs
//! when two outputs of the script share the spent-txid prefix and vout);
//! an unconfirmed spender comes from the mempool.

use crate::outputs::Funding;
use crate::query::{store_failed, Query};
use bitcoin::{OutPoint, Txid};
use osprey_answers::{Error, OutpointAnswer, OutpointStatus};
use osprey_core::{ScriptHash, TxNum};

/// What an outpoint answer read first: the chain's length, and the
/// mempool's spender of the outpoint, read before that length.
struct Seen {
    visible: u64,
    mempool_spender: Option<(Txid, i64)>,
}

impl Query {
    /// The status of `outpoint`. `script_hint` is the script hash the
    /// caller believes the output pays (from a client's `spk_hint`, or
    /// remembered from an earlier answer): when the index confirms it, the
    /// funding transaction is not read from the node. A wrong hint costs a
    /// scan and changes nothing in the answer.
    ///
    /// # Errors
    /// History too large, or a store or node error.
    pub fn outpoint_status(
        &self,
        outpoint: &OutPoint,
        script_hint: Option<&ScriptHash>,
    ) -> Result<OutpointAnswer, Error> {
        // The mempool first, the chain's length right after, as
        // `Query::script_view` does: a transaction the mempool no longer
        // lists (the funding one, or a spender) left it after the commit
        // that confirmed it, so the chain read up to that length has it.
        let unconfirmed = self.mempool_outpoint_status(outpoint);
        let mempool_spender = self.mempool_spender(outpoint);
        #[cfg(test)]
        crate::race::window();
        let seen = Seen {
            visible: self.store().tx_count(),
            mempool_spender,
        };
        match self
            .store()
            .find_tx_num(&outpoint.txid)
            .map_err(store_failed)?
        {
            Some(tx_num) if tx_num.0 < seen.visible => {
                self.confirmed_outpoint_status(outpoint, tx_num, script_hint, &seen)
            }
            _ => Ok(unconfirmed),
        }
    }

    /// An outpoint whose funding transaction is confirmed as `tx_num`.
    fn confirmed_outpoint_status(
        &self,
        outpoint: &OutPoint,
        tx_num: TxNum,
        script_hint: Option<&ScriptHash>,
        seen: &Seen,
    ) -> Result<OutpointAnswer, Error> {
        let Some((height, _)) = self.store().locate(tx_num) else {
            // A rollback cut the chain since the txid was looked up.
            return Ok(self.mempool_outpoint_status(outpoint));
        };
        let funding_height = Some(i64::from(height.0));
        // The hinted script, if one of its funding rows is this output.
        if let Some(scripthash) = script_hint {
            if let Some(output) = self.confirmed_output(scripthash, outpoint, seen.visible)? {
                return self.with_spender(*scripthash, funding_height, output.spent_by, seen);
            }
        }
        let tx = self.confirmed_transaction(&outpoint.txid, tx_num)?;
        let Some(output) = tx.output.get(outpoint.vout as usize) else {
            // The transaction exists, this output does not.
            return Ok(OutpointAnswer::default());
        };
        let scripthash = ScriptHash::from_script(output.script_pubkey.as_bytes());
        // No funding row (an `OP_RETURN` output, the genesis coinbase): an
        // output nothing can spend.
        let spent_by = self
            .confirmed_output(&scripthash, outpoint, seen.visible)?
            .and_then(|output| output.spent_by);
        self.with_spender(scripthash, funding_height, spent_by, seen)
    }

    /// `outpoint` among the confirmed outputs of `scripthash` (as far as
    /// `visible` transactions reach), with its confirmed spender; `None`
    /// when the script has no such output.
    fn confirmed_output(
        &self,
        scripthash: &ScriptHash,
        outpoint: &OutPoint,
        visible: u64,
    ) -> Result<Option<Funding>, Error> {
        Ok(self
            .confirmed_outputs(scripthash, visible)?
            .into_iter()
            .find(|f| f.txid == outpoint.txid && f.vout == outpoint.vout))
    }

    /// Completes an answer for a known output: the confirmed spender, else
    /// the one the mempool had.
    fn with_spender(
        &self,
        scripthash: ScriptHash,
        height: Option<i64>,
        spent_by: Option<TxNum>,
        seen: &Seen,
    ) -> Result<OutpointAnswer, Error> {
        let mut spender = None;
        if let Some(tx_num) = spent_by {
            // `None` if a rollback cut the chain since the rows were read.
            if let Some((h, _)) = self.store().locate(tx_num) {
                spender = Some((
                    self.store().txid(tx_num).map_err(store_failed)?,
                    i64::from(h.0),
                ));
            }
        }
        if spender.is_none() {
            spender = match seen.mempool_spender {
                // Confirmed within what the rows were read up to (the
                // tracker drops a transaction from the mempool right after
                // the commit): the chain's rows answer, not the mempool.
                Some((txid, _)) if self.confirmed_within(&txid, seen.visible)? => None,
                spender => spender,
            };
        }
        Ok(OutpointAnswer {
            status: OutpointStatus { height, spender },
            scripthash: Some(scripthash),
        })
    }

    /// The unconfirmed transaction spending `outpoint`, with its height.
    fn mempool_spender(&self, outpoint: &OutPoint) -> Option<(Txid, i64)> {
        let mempool = self.mempool();
        mempool
            .spender(outpoint)
            .and_then(|txid| mempool.get(txid))
            .map(|entry| (entry.txid, mempool.height(entry)))
    }

    /// An outpoint whose funding transaction is not confirmed: in the
    /// mempool, or unknown.
    fn mempool_outpoint_status(&self, outpoint: &OutPoint) -> OutpointAnswer {
        let mempool = self.mempool();
        let Some(entry) = mempool.get(&outpoint.txid) else {
            return OutpointAnswer::default();
        };
        let Some(output) = entry.tx.output.get(outpoint.vout as usize) else {
            return OutpointAnswer::default();
        };
        // Only a mempool transaction can spend a mempool output.
        let spender = mempool
            .spender(outpoint)
            .and_then(|txid| mempool.get(txid))
            .map(|child| (child.txid, mempool.height(child)));
        OutpointAnswer {
            status: OutpointStatus {
                height: Some(mempool.height(entry)),
                spender,
            },
            scripthash: Some(ScriptHash::from_script(output.script_pubkey.as_bytes())),
        }
    }
}
