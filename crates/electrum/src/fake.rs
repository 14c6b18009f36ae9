//! An in-memory `Backend` for tests of this crate and of `osprey-server`
//! (feature `fake`): a chain of made-up headers and hand-written answers in
//! `osprey_answers`' types, no database and no node. Not for production.

use bitcoin::hashes::{sha256d, Hash};
use bitcoin::secp256k1::{PublicKey, Secp256k1, SecretKey};
use bitcoin::{BlockHash, OutPoint, TxMerkleNode, Txid};
use osprey_answers::{
    computed, height_at_time, Backend, Balance, Compute, Error, HistoryEntry, Indexing,
    OutpointAnswer, RecentTx, SpChunk, SpCursor, SpMatch, TxMerkle, Utxo,
};
use osprey_chain::{MempoolAcceptance, MempoolFees};
use osprey_core::{Height, ScriptHash, StatusHash};
use osprey_sp::{ScanKeys, TweakData};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex};

/// Everything the fake answers from; tests edit it through `FakeBackend::update`.
#[derive(Debug, Clone, Default)]
pub struct FakeState {
    /// Header `i` is at height `i`; the last one is the tip.
    pub headers: Vec<[u8; 80]>,
    pub histories: HashMap<ScriptHash, Vec<HistoryEntry>>,
    pub unspent: HashMap<ScriptHash, Vec<Utxo>>,
    pub balances: HashMap<ScriptHash, Balance>,
    pub transactions: HashMap<Txid, Vec<u8>>,
    /// Answers of `outpoint_status`; an outpoint not listed is unknown.
    pub outpoints: HashMap<OutPoint, OutpointAnswer>,
    /// The script hint of the last `outpoint_status` call.
    pub last_outpoint_hint: Option<ScriptHash>,
    pub merkles: HashMap<Txid, TxMerkle>,
    /// Txids of each block, for `id_from_pos`.
    pub blocks: HashMap<u32, Vec<Txid>>,
    /// When set, broadcasts are rejected with this node message.
    pub broadcast_error: Option<String>,
    /// When set, every answer that would come from the node (fee
    /// estimates, the relay fee, mempool information, transactions,
    /// broadcasts) is this error instead.
    pub node_failure: Option<fn() -> Error>,
    pub package_answer: serde_json::Value,
    /// What `test_mempool_accept` answers, and what it was last asked.
    pub acceptances: Vec<MempoolAcceptance>,
    pub last_tested: Vec<String>,
    /// The mempool's latest transactions, newest first.
    pub recent: Vec<RecentTx>,
    /// What `indexing` answers: `Some` plays a server in its first sync.
    pub indexing: Option<Indexing>,
    pub estimate: Option<f64>,
    /// The last `(blocks, mode)` passed to `estimate_fee`.
    pub last_estimate_args: Option<(u16, Option<String>)>,
    pub relay_fee: f64,
    pub histogram: Vec<(f64, u64)>,
    /// A history longer than this is "too large".
    pub history_entries_max: usize,
    /// Counts `status` calls, so tests can check how much work a change cost.
    pub status_calls: usize,
    /// Counts `headers` calls.
    pub headers_calls: usize,
    /// Counts `history` calls.
    pub history_calls: usize,
    /// Script hashes whose status `cached_status` gives (as a cache would).
    pub cached: std::collections::HashSet<ScriptHash>,
    /// `status` of this script hash waits until the gate opens: a test can
    /// hold whoever computes it (the notifier) in the middle of its work.
    pub status_gate: Option<(ScriptHash, Arc<Gate>)>,
    /// The same for `history`.
    pub history_gate: Option<(ScriptHash, Arc<Gate>)>,
    /// Whether the fake keeps silent-payment records (`sp_enabled`).
    pub sp_enabled: bool,
    /// The eligible transactions of each block, in block order; a block
    /// not listed has none. The fake counts each as one byte of records.
    pub sp_blocks: BTreeMap<u32, Vec<FakeSpTx>>,
    /// The eligible transactions in the mempool.
    pub sp_mempool: Vec<FakeSpTx>,
    /// Counts `sp_scan` calls.
    pub sp_scan_calls: usize,
    /// `sp_scan` waits at this gate, once counted: a test can hold scans
    /// in the middle of their work.
    pub sp_scan_gate: Option<Arc<Gate>>,
}

/// An eligible transaction, as the fake's silent-payment scans see it.
#[derive(Debug, Clone)]
pub struct FakeSpTx {
    pub txid: Txid,
    pub tweak: TweakData,
    /// The x-only keys of its taproot outputs.
    pub output_keys: Vec<[u8; 32]>,
}

/// Secret key made from `seed` (valid for any seed but with probability
/// 2^-128).
fn made_up_secret(seed: &str) -> SecretKey {
    let hash = bitcoin::hashes::sha256::Hash::hash(seed.as_bytes());
    SecretKey::from_slice(hash.as_byte_array()).expect("a hash is a valid key")
}

/// A receiver's keys made up from `name`, scanning the change label only.
pub fn made_up_scan_keys(name: &str) -> ScanKeys {
    let spend = PublicKey::from_secret_key(
        &Secp256k1::signing_only(),
        &made_up_secret(&format!("{name} spend")),
    );
    ScanKeys::new(made_up_secret(&format!("{name} scan")), spend, []).expect("made-up keys derive")
}

/// The txid of made-up transaction `n`.
pub fn made_up_txid(n: u32) -> Txid {
    Txid::from_raw_hash(sha256d::Hash::hash(&n.to_le_bytes()))
}

impl FakeSpTx {
    /// Made-up eligible transaction `n`, paying `keys` its first output
    /// (`k = 0`, unlabelled).
    pub fn paying(keys: &ScanKeys, n: u32) -> FakeSpTx {
        let tweak = made_up_tweak(n);
        let candidates = keys
            .first_output_candidates(&tweak)
            .expect("made-up keys derive");
        FakeSpTx {
            txid: made_up_txid(n),
            tweak,
            output_keys: vec![candidates.keys()[0]],
        }
    }

    /// Made-up eligible transaction `n`, paying no one.
    pub fn decoy(n: u32) -> FakeSpTx {
        FakeSpTx {
            txid: made_up_txid(n),
            tweak: made_up_tweak(n),
            output_keys: vec![[7; 32]],
        }
    }

    fn matches(&self, keys: &ScanKeys, height: u32) -> Option<SpMatch> {
        SpMatch::if_paid(keys, &self.tweak, &self.output_keys, height, self.txid)
    }
}

/// The tweak data of made-up transaction `n`.
fn made_up_tweak(n: u32) -> TweakData {
    let sum = PublicKey::from_secret_key(
        &Secp256k1::signing_only(),
        &made_up_secret(&format!("input key sum {n}")),
    );
    let mut xy = [0u8; 64];
    xy.copy_from_slice(&sum.serialize_uncompressed()[1..]);
    let input_hash = made_up_secret(&format!("input hash {n}")).secret_bytes();
    TweakData::from_bytes(&xy, &input_hash).expect("a valid point and scalar")
}

/// A gate threads wait at until a test opens it.
#[derive(Debug, Default)]
pub struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    /// Whether someone has waited at it.
    reached: Mutex<bool>,
    arrived: Condvar,
}

impl Gate {
    pub fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }

    /// Blocks until someone waits at the gate, for at most `limit`;
    /// returns whether someone did.
    pub fn wait_reached(&self, limit: std::time::Duration) -> bool {
        let reached = self.reached.lock().unwrap_or_else(|e| e.into_inner());
        let (reached, _) = self
            .arrived
            .wait_timeout_while(reached, limit, |reached| !*reached)
            .unwrap_or_else(|e| e.into_inner());
        *reached
    }

    fn wait(&self) {
        *self.reached.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.arrived.notify_all();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A thread-safe in-memory backend.
#[derive(Debug, Default)]
pub struct FakeBackend {
    state: Mutex<FakeState>,
}

/// Returns a recognisable made-up header for `height`.
pub fn fake_header(height: u32) -> [u8; 80] {
    let mut header = [0u8; 80];
    header[..4].copy_from_slice(&height.to_le_bytes());
    header[79] = 0xee;
    header
}

impl FakeBackend {
    /// A chain of `tip + 1` made-up headers and otherwise empty answers.
    pub fn with_tip(tip: u32) -> Self {
        let state = FakeState {
            headers: (0..=tip).map(fake_header).collect(),
            history_entries_max: 1000,
            relay_fee: 0.00001,
            ..FakeState::default()
        };
        FakeBackend {
            state: Mutex::new(state),
        }
    }

    /// Runs `f` on the state (to change what the fake answers).
    pub fn update<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        // A test that panicked while holding the lock already failed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sp_enabled_or_refused(&self) -> Result<(), Error> {
        if self.lock().sp_enabled {
            Ok(())
        } else {
            Err(Error::NotSupported(
                "this server keeps no silent payments index".into(),
            ))
        }
    }

    /// `Err` with the configured node failure, if any.
    fn node_answer(&self) -> Result<(), Error> {
        match self.lock().node_failure {
            Some(failure) => Err(failure()),
            None => Ok(()),
        }
    }

    fn checked_history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        let state = self.lock();
        let history = state.histories.get(sh).cloned().unwrap_or_default();
        if history.len() > state.history_entries_max {
            return Err(Error::HistoryTooLarge {
                limit: state.history_entries_max,
            });
        }
        Ok(history)
    }
}

/// The gate of `gated`, if it holds `sh`.
fn gate_for(gated: &Option<(ScriptHash, Arc<Gate>)>, sh: &ScriptHash) -> Option<Arc<Gate>> {
    gated
        .as_ref()
        .filter(|(held, _)| held == sh)
        .map(|(_, gate)| Arc::clone(gate))
}

fn block_hash(header: &[u8; 80]) -> BlockHash {
    BlockHash::from_raw_hash(sha256d::Hash::hash(header))
}

impl Backend for FakeBackend {
    fn tip(&self) -> (Height, BlockHash) {
        let state = self.lock();
        let tip = state.headers.len().saturating_sub(1);
        let hash = state
            .headers
            .last()
            .map_or(BlockHash::all_zeros(), block_hash);
        (Height(tip as u32), hash)
    }

    fn indexing(&self) -> Option<Indexing> {
        self.lock().indexing
    }

    fn header(&self, height: Height) -> Option<[u8; 80]> {
        self.lock().headers.get(height.as_usize()).copied()
    }

    fn headers(&self, start: Height, count: usize) -> Vec<[u8; 80]> {
        let mut state = self.lock();
        state.headers_calls += 1;
        state
            .headers
            .iter()
            .skip(start.as_usize())
            .take(count)
            .copied()
            .collect()
    }

    fn header_proof(
        &self,
        height: Height,
        cp_height: Height,
    ) -> Result<(Vec<TxMerkleNode>, TxMerkleNode), Error> {
        let tip = self.tip().0;
        if height > cp_height || cp_height > tip {
            return Err(Error::Internal(format!(
                "bad proof request {height} {cp_height}"
            )));
        }
        // Not a real proof: recognisable values are enough to check shapes.
        let branch = vec![TxMerkleNode::from_byte_array([height.0 as u8; 32])];
        Ok((
            branch,
            TxMerkleNode::from_byte_array([cp_height.0 as u8; 32]),
        ))
    }

    fn history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        let gate = {
            let mut state = self.lock();
            state.history_calls += 1;
            gate_for(&state.history_gate, sh)
        };
        if let Some(gate) = gate {
            gate.wait();
        }
        self.checked_history(sh)
    }

    fn mempool_history(&self, sh: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        Ok(self
            .checked_history(sh)?
            .into_iter()
            .filter(|e| e.height <= 0)
            .collect())
    }

    fn status(&self, sh: &ScriptHash) -> Result<Option<StatusHash>, Error> {
        let gate = {
            let mut state = self.lock();
            state.status_calls += 1;
            gate_for(&state.status_gate, sh)
        };
        if let Some(gate) = gate {
            gate.wait();
        }
        let history = self.checked_history(sh)?;
        Ok(StatusHash::of_history(
            history.iter().map(|e| (&e.txid, e.height)),
        ))
    }

    fn cached_status(&self, sh: &ScriptHash) -> Option<Option<StatusHash>> {
        if !self.lock().cached.contains(sh) {
            return None;
        }
        let history = self.checked_history(sh).ok()?;
        Some(StatusHash::of_history(
            history.iter().map(|e| (&e.txid, e.height)),
        ))
    }

    fn balance(&self, sh: &ScriptHash) -> Result<Balance, Error> {
        Ok(self.lock().balances.get(sh).copied().unwrap_or(Balance {
            confirmed: 0,
            unconfirmed: 0,
        }))
    }

    fn unspent(&self, sh: &ScriptHash) -> Result<Vec<Utxo>, Error> {
        Ok(self.lock().unspent.get(sh).cloned().unwrap_or_default())
    }

    fn outpoint_status(
        &self,
        outpoint: &OutPoint,
        script_hint: Option<&ScriptHash>,
    ) -> Result<OutpointAnswer, Error> {
        let mut state = self.lock();
        state.last_outpoint_hint = script_hint.copied();
        Ok(state.outpoints.get(outpoint).copied().unwrap_or_default())
    }

    fn transaction(&self, txid: &Txid) -> Result<Vec<u8>, Error> {
        self.node_answer()?;
        self.lock()
            .transactions
            .get(txid)
            .cloned()
            .ok_or(Error::TxNotFound(*txid))
    }

    fn transaction_verbose(&self, txid: &Txid) -> Result<serde_json::Value, Error> {
        let raw = self.transaction(txid)?;
        Ok(serde_json::json!({ "txid": txid.to_string(), "hex": hex::encode(raw) }))
    }

    fn merkle(&self, txid: &Txid, height: Height) -> Result<TxMerkle, Error> {
        self.lock()
            .merkles
            .get(txid)
            .filter(|merkle| merkle.block_height == height)
            .cloned()
            .ok_or(Error::TxNotFound(*txid))
    }

    fn id_from_pos(&self, height: Height, pos: u32) -> Result<(Txid, Vec<TxMerkleNode>), Error> {
        let state = self.lock();
        let txids = state
            .blocks
            .get(&height.0)
            .ok_or(Error::BlockNotFound(height))?;
        let txid = txids.get(pos as usize).ok_or_else(|| {
            Error::NotSupported(format!(
                "no transaction at position {pos} in block {height}"
            ))
        })?;
        Ok((*txid, vec![TxMerkleNode::from_byte_array([pos as u8; 32])]))
    }

    fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error> {
        self.node_answer()?;
        if let Some(message) = self.lock().broadcast_error.clone() {
            return Err(Error::Rejected(message));
        }
        let raw = hex::decode(raw_hex).map_err(|e| Error::Rejected(e.to_string()))?;
        Ok(Txid::from_raw_hash(sha256d::Hash::hash(&raw)))
    }

    fn broadcast_package(&self, _raw_hexes: &[String]) -> Result<serde_json::Value, Error> {
        self.node_answer()?;
        Ok(self.lock().package_answer.clone())
    }

    fn test_mempool_accept(&self, raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error> {
        self.node_answer()?;
        let mut state = self.lock();
        state.last_tested = raw_hexes.to_vec();
        Ok(state.acceptances.clone())
    }

    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, Error> {
        self.node_answer()?;
        let mut state = self.lock();
        state.last_estimate_args = Some((blocks, mode.map(str::to_string)));
        Ok(state.estimate)
    }

    fn relay_fee(&self) -> Result<f64, Error> {
        self.node_answer()?;
        Ok(self.lock().relay_fee)
    }

    fn fee_histogram(&self) -> Vec<(f64, u64)> {
        self.lock().histogram.clone()
    }

    fn mempool_recent(&self, count: usize) -> Vec<RecentTx> {
        self.lock().recent.iter().take(count).copied().collect()
    }

    fn mempool_fees(&self) -> Result<MempoolFees, Error> {
        self.node_answer()?;
        let relay = self.lock().relay_fee;
        Ok(MempoolFees {
            mempoolminfee: relay,
            minrelaytxfee: relay,
            incrementalrelayfee: relay,
        })
    }

    fn sp_enabled(&self) -> bool {
        self.lock().sp_enabled
    }

    fn sp_height_at(&self, unix: u64) -> Height {
        let state = self.lock();
        let times = state
            .headers
            .iter()
            .map(|header| u32::from_le_bytes([header[68], header[69], header[70], header[71]]));
        height_at_time(times, unix)
    }

    /// The gate, when set, is waited for in `compute`, where a real scan
    /// spends its CPU.
    fn sp_scan(
        &self,
        keys: &Arc<ScanKeys>,
        from: SpCursor,
        to: Height,
        records_max: usize,
        compute: &dyn Compute,
    ) -> Result<SpChunk, Error> {
        self.sp_enabled_or_refused()?;
        let gate = {
            let mut state = self.lock();
            state.sp_scan_calls += 1;
            state.sp_scan_gate.clone()
        };
        let to = to.min(self.tip().0);
        let mut scanned = Vec::new();
        let mut chunk = {
            let state = self.lock();
            let block_len = |height: u32| state.sp_blocks.get(&height).map_or(0, Vec::len);
            let mut chunk = SpChunk {
                next: from,
                ..SpChunk::default()
            };
            // At least one record, so that every call makes progress.
            while chunk.next.height <= to && chunk.records < records_max.max(1) {
                let height = chunk.next.height.0;
                let done = chunk.next.records_done as usize;
                let take = block_len(height)
                    .saturating_sub(done)
                    .min(records_max.max(1) - chunk.records);
                for tx in state
                    .sp_blocks
                    .get(&height)
                    .into_iter()
                    .flatten()
                    .skip(done)
                    .take(take)
                {
                    scanned.push((height, tx.clone()));
                }
                chunk.records += take;
                chunk.next.records_done += take as u32;
                if chunk.next.records_done as usize >= block_len(height) {
                    chunk.next = SpCursor::at_height(Height(height + 1));
                }
            }
            chunk.done = chunk.next.height > to;
            chunk.bytes_scanned = chunk.records as u64;
            chunk.bytes_left = (chunk.next.height.0..=to.0)
                .map(|height| block_len(height) as u64)
                .sum::<u64>()
                .saturating_sub(u64::from(chunk.next.records_done));
            chunk
        };
        chunk.matches = computed(compute, {
            let keys = Arc::clone(keys);
            move || {
                if let Some(gate) = gate {
                    gate.wait();
                }
                scanned
                    .iter()
                    .filter_map(|(height, tx)| tx.matches(&keys, *height))
                    .collect()
            }
        })?;
        Ok(chunk)
    }

    fn sp_scan_mempool(
        &self,
        keys: &Arc<ScanKeys>,
        only: Option<&[Txid]>,
        compute: &dyn Compute,
    ) -> Result<Vec<SpMatch>, Error> {
        self.sp_enabled_or_refused()?;
        let pool: Vec<FakeSpTx> = self
            .lock()
            .sp_mempool
            .iter()
            .filter(|tx| only.is_none_or(|only| only.contains(&tx.txid)))
            .cloned()
            .collect();
        computed(compute, {
            let keys = Arc::clone(keys);
            move || pool.iter().filter_map(|tx| tx.matches(&keys, 0)).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::secp256k1::{PublicKey, Secp256k1, SecretKey};
    use bitcoin::{
        absolute, transaction, Amount, CompressedPublicKey, ScriptBuf, Sequence, Transaction, TxIn,
        TxOut, Witness,
    };
    use osprey_answers::InPlace;

    fn public(i: u8) -> PublicKey {
        SecretKey::from_slice(&[i; 32])
            .expect("a valid key")
            .public_key(&Secp256k1::new())
    }

    fn taproot(x_only: [u8; 32]) -> ScriptBuf {
        let mut script = vec![0x51, 0x20];
        script.extend_from_slice(&x_only);
        ScriptBuf::from_bytes(script)
    }

    /// An eligible transaction spending a P2WPKH output of key `i` to the
    /// taproot key that `output_key` picks from `keys`' candidates.
    fn payment(i: u8, keys: &ScanKeys, output_key: impl Fn(&[[u8; 32]]) -> [u8; 32]) -> FakeSpTx {
        let key = CompressedPublicKey(public(i));
        let spent = TxOut {
            value: Amount::from_sat(1_000),
            script_pubkey: ScriptBuf::new_p2wpkh(&key.wpubkey_hash()),
        };
        let mut tx = Transaction {
            version: transaction::Version::TWO,
            lock_time: absolute::LockTime::ZERO,
            input: vec![TxIn {
                previous_output: OutPoint {
                    txid: Txid::from_byte_array([i; 32]),
                    vout: 0,
                },
                script_sig: ScriptBuf::new(),
                sequence: Sequence::MAX,
                witness: Witness::from_slice(&[&[0x30; 71][..], &key.to_bytes()]),
            }],
            output: vec![TxOut {
                value: Amount::from_sat(900),
                script_pubkey: taproot([9; 32]),
            }],
        };
        let tweak = osprey_sp::tweak_data(&tx, &[spent]).unwrap().unwrap();
        let candidates = keys.first_output_candidates(&tweak).unwrap();
        let output = output_key(candidates.keys());
        tx.output[0].script_pubkey = taproot(output);
        FakeSpTx {
            txid: tx.compute_txid(),
            tweak,
            output_keys: vec![output],
        }
    }

    #[test]
    fn the_fake_scans_its_records_in_chunks_and_its_mempool() {
        let keys = Arc::new(
            ScanKeys::new(SecretKey::from_slice(&[1; 32]).unwrap(), public(101), []).unwrap(),
        );
        let paid = |i| payment(i, &keys, |c| c[0]);
        let decoy = |i| payment(i, &keys, |_| [7; 32]);
        let (a, b, c, d) = (paid(10), paid(11), paid(12), decoy(13));
        let fake = FakeBackend::with_tip(4);
        fake.update(|state| {
            state.sp_blocks.insert(1, vec![a.clone(), decoy(14)]);
            state
                .sp_blocks
                .insert(3, vec![decoy(15), b.clone(), decoy(16)]);
            state.sp_mempool = vec![c.clone(), d.clone()];
        });
        let from = SpCursor::at_height(Height(0));
        let refused = fake.sp_scan(&keys, from, Height(4), 10, &InPlace);
        assert!(
            matches!(refused, Err(Error::NotSupported(_))),
            "{refused:?}"
        );
        fake.update(|state| state.sp_enabled = true);

        let whole = fake.sp_scan(&keys, from, Height(9), 100, &InPlace).unwrap();
        assert!(whole.done);
        assert_eq!(
            (whole.records, whole.bytes_scanned, whole.bytes_left),
            (5, 5, 0)
        );
        assert_eq!(whole.next, SpCursor::at_height(Height(5)));
        let found: Vec<(u32, Txid)> = whole.matches.iter().map(|m| (m.height, m.txid)).collect();
        assert_eq!(found, [(1, a.txid), (3, b.txid)]);
        assert_eq!(whole.matches[0].tweak_key, a.tweak.tweak_key().unwrap());

        let mut cursor = from;
        let mut chunked: Vec<SpChunk> = Vec::new();
        loop {
            let chunk = fake.sp_scan(&keys, cursor, Height(4), 2, &InPlace).unwrap();
            assert!(chunk.records <= 2);
            let before: usize = chunked.iter().map(|c| c.records).sum();
            assert_eq!(chunk.bytes_scanned + chunk.bytes_left, 5 - before as u64);
            chunked.push(chunk.clone());
            if chunk.done {
                break;
            }
            cursor = chunk.next;
        }
        let matches: Vec<SpMatch> = chunked.iter().flat_map(|c| c.matches.clone()).collect();
        assert_eq!(matches, whole.matches);
        // The first chunk ends with block 1; the second skips empty block 2.
        assert_eq!(chunked[0].next, SpCursor::at_height(Height(2)));
        assert_eq!(
            chunked[1].next,
            SpCursor {
                height: Height(3),
                records_done: 2
            }
        );

        let pool = fake.sp_scan_mempool(&keys, None, &InPlace).unwrap();
        assert_eq!(
            pool.iter().map(|m| (m.height, m.txid)).collect::<Vec<_>>(),
            [(0, c.txid)]
        );
        assert!(fake
            .sp_scan_mempool(&keys, Some(&[d.txid]), &InPlace)
            .unwrap()
            .is_empty());
    }
}
