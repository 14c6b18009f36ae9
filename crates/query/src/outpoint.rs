//! The status of one transaction output (the 1.7 draft's
//! `blockchain.outpoint.*`): the height of the transaction that funds it and
//! the transaction that spends it, from the index and the mempool, with no
//! node `txindex`.
//!
//! The funding transaction is found through the `txid` column family (or in
//! the mempool). Its spender is one of the spending rows of the output's
//! own script, paired with the output exactly as `balance` and `unspent`
//! pair them (`Query::confirmed_outputs`, which reads the spending input
//! when two outputs of the script share the spent-txid prefix and vout);
//! an unconfirmed spender comes from the mempool.

use crate::query::{Funding, Query};
use crate::Error;
use bitcoin::{OutPoint, Txid};
use osprey_core::{ScriptHash, TxNum};

/// What the protocol tells of an outpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutpointStatus {
    /// The height of the funding transaction: its block, or in the
    /// mempool 0 (every input confirmed) or -1. `None`: no such output is
    /// known.
    pub height: Option<i64>,
    /// The spending transaction and its height, by the same rules.
    pub spender: Option<(Txid, i64)>,
}

/// An outpoint's status and the script hash of its output, when the output
/// is known: the script of `txid:vout` never changes, so a change touching
/// that script hash is the only one (with one naming `txid`) that can change
/// the status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutpointAnswer {
    pub status: OutpointStatus,
    pub scripthash: Option<ScriptHash>,
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
        // `Query::script_view` does: a funding transaction the mempool no
        // longer lists left it after the commit that confirmed it.
        let unconfirmed = self.mempool_outpoint_status(outpoint);
        let visible = self.store().tx_count();
        match self.store().find_tx_num(&outpoint.txid)? {
            Some(tx_num) if tx_num.0 < visible => {
                self.confirmed_outpoint_status(outpoint, tx_num, script_hint)
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
    ) -> Result<OutpointAnswer, Error> {
        let Some((height, _)) = self.store().locate(tx_num) else {
            // A rollback cut the chain since the txid was looked up.
            return Ok(self.mempool_outpoint_status(outpoint));
        };
        let funding_height = Some(i64::from(height.0));
        // The hinted script, if one of its funding rows is this output.
        if let Some(scripthash) = script_hint {
            if let Some(output) = self.confirmed_output(scripthash, outpoint)? {
                return self.with_spender(outpoint, *scripthash, funding_height, output.spent_by);
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
            .confirmed_output(&scripthash, outpoint)?
            .and_then(|output| output.spent_by);
        self.with_spender(outpoint, scripthash, funding_height, spent_by)
    }

    /// `outpoint` among the confirmed outputs of `scripthash`, with its
    /// confirmed spender; `None` when the script has no such output.
    fn confirmed_output(
        &self,
        scripthash: &ScriptHash,
        outpoint: &OutPoint,
    ) -> Result<Option<Funding>, Error> {
        Ok(self
            .confirmed_outputs(scripthash, self.store().tx_count())?
            .into_iter()
            .find(|f| f.txid == outpoint.txid && f.vout == outpoint.vout))
    }

    /// Completes an answer for a known output: the confirmed spender, else
    /// one in the mempool.
    fn with_spender(
        &self,
        outpoint: &OutPoint,
        scripthash: ScriptHash,
        height: Option<i64>,
        spent_by: Option<TxNum>,
    ) -> Result<OutpointAnswer, Error> {
        let mut spender = None;
        if let Some(tx_num) = spent_by {
            // `None` if a rollback cut the chain since the rows were read.
            if let Some((h, _)) = self.store().locate(tx_num) {
                spender = Some((self.store().txid(tx_num)?, i64::from(h.0)));
            }
        }
        if spender.is_none() {
            spender = self.mempool_spender(outpoint)?;
        }
        Ok(OutpointAnswer {
            status: OutpointStatus { height, spender },
            scripthash: Some(scripthash),
        })
    }

    /// The unconfirmed transaction spending `outpoint`, with its height.
    fn mempool_spender(&self, outpoint: &OutPoint) -> Result<Option<(Txid, i64)>, Error> {
        let spender = {
            let mempool = self.mempool();
            mempool
                .spender(outpoint)
                .and_then(|txid| mempool.get(txid))
                .map(|entry| (entry.txid, mempool.height(entry)))
        };
        match spender {
            // Confirmed already (the tracker drops it right after the
            // commit): the chain's rows answer, not the mempool.
            Some((txid, _)) if self.is_confirmed(&txid)? => Ok(None),
            spender => Ok(spender),
        }
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
