//! The notifier's registry of outpoint subscriptions (1.7's
//! `blockchain.outpoint.subscribe`): who watches which outpoint, the status
//! each session was last told, and the two keys under which a change finds
//! an outpoint without a pass over all of them: the script hash of its
//! output (its funding, spending and mempool ancestry all touch that
//! script) and its funding txid (for an output not known yet, or one with
//! no history rows, an `OP_RETURN`). The script of `txid:vout` never
//! changes, so once learned it is kept.

use crate::queued::SessionId;
use bitcoin::{OutPoint, Txid};
use osprey_answers::{Change, OutpointAnswer, OutpointStatus};
use osprey_core::ScriptHash;
use std::collections::{HashMap, HashSet};

#[derive(Debug)]
struct Watched {
    scripthash: Option<ScriptHash>,
    /// Each subscribed session and the status it was last told.
    sessions: HashMap<SessionId, OutpointStatus>,
}

#[derive(Debug, Default)]
pub(crate) struct Outpoints {
    watched: HashMap<OutPoint, Watched>,
    by_script: HashMap<ScriptHash, HashSet<OutPoint>>,
    by_txid: HashMap<Txid, HashSet<OutPoint>>,
}

impl Outpoints {
    /// Registers (or refreshes) `session`'s subscription, told `answer`.
    pub(crate) fn subscribe(
        &mut self,
        session: SessionId,
        outpoint: OutPoint,
        answer: &OutpointAnswer,
    ) {
        let watched = self.watched.entry(outpoint).or_insert_with(|| {
            self.by_txid
                .entry(outpoint.txid)
                .or_default()
                .insert(outpoint);
            Watched {
                scripthash: None,
                sessions: HashMap::new(),
            }
        });
        watched.sessions.insert(session, answer.status);
        self.learn(outpoint, answer.scripthash);
    }

    /// Keys `outpoint` by its output's script hash too, once known.
    fn learn(&mut self, outpoint: OutPoint, scripthash: Option<ScriptHash>) {
        let (Some(watched), Some(scripthash)) = (self.watched.get_mut(&outpoint), scripthash)
        else {
            return;
        };
        if watched.scripthash.is_none() {
            watched.scripthash = Some(scripthash);
            self.by_script
                .entry(scripthash)
                .or_default()
                .insert(outpoint);
        }
    }

    pub(crate) fn unsubscribe(&mut self, session: SessionId, outpoint: &OutPoint) {
        let Some(watched) = self.watched.get_mut(outpoint) else {
            return;
        };
        watched.sessions.remove(&session);
        if !watched.sessions.is_empty() {
            return;
        }
        let scripthash = watched.scripthash;
        self.watched.remove(outpoint);
        remove_key(&mut self.by_txid, &outpoint.txid, outpoint);
        if let Some(sh) = scripthash {
            remove_key(&mut self.by_script, &sh, outpoint);
        }
    }

    /// The script hash of `outpoint`'s output, if known: the hint for
    /// computing its status.
    pub(crate) fn scripthash(&self, outpoint: &OutPoint) -> Option<ScriptHash> {
        self.watched.get(outpoint).and_then(|w| w.scripthash)
    }

    /// The watched outpoints whose status `change` may have changed: a
    /// lookup per script hash and txid it names, or all of them.
    pub(crate) fn touched(&self, change: &Change) -> Vec<OutPoint> {
        if change.all_scripthashes {
            return self.all();
        }
        if self.watched.is_empty() {
            return Vec::new();
        }
        let mut touched = HashSet::new();
        for sh in &change.scripthashes {
            touched.extend(self.by_script.get(sh).into_iter().flatten());
        }
        for txid in &change.txids {
            touched.extend(self.by_txid.get(txid).into_iter().flatten());
        }
        touched.into_iter().collect()
    }

    pub(crate) fn all(&self) -> Vec<OutPoint> {
        self.watched.keys().copied().collect()
    }

    /// Records a freshly computed answer; returns the sessions that were
    /// told another status (now marked as told this one).
    pub(crate) fn update(&mut self, outpoint: OutPoint, answer: &OutpointAnswer) -> Vec<SessionId> {
        self.learn(outpoint, answer.scripthash);
        let Some(watched) = self.watched.get_mut(&outpoint) else {
            return Vec::new();
        };
        watched
            .sessions
            .iter_mut()
            .filter(|(_, told)| **told != answer.status)
            .map(|(session, told)| {
                *told = answer.status;
                *session
            })
            .collect()
    }
}

fn remove_key<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, HashSet<OutPoint>>,
    key: &K,
    outpoint: &OutPoint,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(outpoint);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;

    fn outpoint(byte: u8, vout: u32) -> OutPoint {
        OutPoint {
            txid: Txid::from_byte_array([byte; 32]),
            vout,
        }
    }

    #[test]
    fn changes_find_outpoints_by_script_and_by_txid() {
        let mut o = Outpoints::default();
        let (known, unknown) = (outpoint(1, 0), outpoint(2, 5));
        let sh = ScriptHash([7; 32]);
        let funded = OutpointAnswer {
            status: OutpointStatus {
                height: Some(10),
                spender: None,
            },
            scripthash: Some(sh),
        };
        o.subscribe(1, known, &funded);
        o.subscribe(2, known, &funded);
        o.subscribe(1, unknown, &OutpointAnswer::default());
        let by_script = Change {
            scripthashes: vec![sh, ScriptHash([8; 32])],
            ..Change::default()
        };
        assert_eq!(o.touched(&by_script), vec![known]);
        let by_txid = Change {
            txids: vec![unknown.txid],
            ..Change::default()
        };
        assert_eq!(o.touched(&by_txid), vec![unknown]);
        assert!(o.touched(&Change::default()).is_empty());
        let all = Change {
            all_scripthashes: true,
            ..Change::default()
        };
        assert_eq!(o.touched(&all).len(), 2);

        // Nobody is told a status twice.
        assert!(o.update(known, &funded).is_empty());
        let mut spent = funded;
        spent.status.spender = Some((Txid::from_byte_array([3; 32]), 0));
        let mut told = o.update(known, &spent);
        told.sort_unstable();
        assert_eq!(told, vec![1, 2]);
        assert!(o.update(known, &spent).is_empty());

        // An answer that names the script keys the outpoint by it from
        // then on.
        let learned = OutpointAnswer {
            status: OutpointStatus {
                height: Some(0),
                spender: None,
            },
            scripthash: Some(sh),
        };
        assert_eq!(o.update(unknown, &learned), vec![1]);
        assert_eq!(o.touched(&by_script).len(), 2);
        assert_eq!(o.scripthash(&unknown), Some(sh));

        // The last subscriber gone, the outpoint is forgotten everywhere.
        o.unsubscribe(1, &known);
        assert_eq!(o.touched(&by_script).len(), 2, "session 2 still watches");
        o.unsubscribe(2, &known);
        o.unsubscribe(1, &unknown);
        assert!(o.watched.is_empty() && o.by_script.is_empty() && o.by_txid.is_empty());
    }
}
