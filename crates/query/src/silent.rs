//! Silent-payment scans (docs/silent-payments.md, 3.4 and 3.5): the
//! index's records block by block, and the mempool's.

use crate::query::store_failed;
use crate::Query;
use bitcoin::Txid;
use osprey_answers::{computed, height_at_time, Compute, Error, SpChunk, SpCursor, SpMatch};
use osprey_core::{Height, ScriptHash, TxNum};
use osprey_sp::{BlockRecords, CandidateBatch, Record, ScanKeys, TweakData};
use osprey_store::{SpBlock, SpRecords};
use std::sync::Arc;

/// Bytes of records read per record a chunk may scan: a record is 98 bytes
/// plus 4 per taproot output (≈ 104 with 1.5 outputs), so this reads a
/// little more than the chunk scans rather than a second time.
const READ_BYTES_PER_RECORD: u64 = 128;

/// Records whose candidates are computed together, with one field
/// inversion for all of them (`ScanKeys::first_output_candidates_batch`):
/// enough that the inversion is a small share of each record's cost
/// (under 0.1 µs of a record's 45), few enough that the batch's buffers stay a few
/// tens of kilobytes whatever the chunk's size.
const BATCH_RECORDS: usize = 256;

/// Reads of a chunk that a reorg may spoil before the scan gives up for
/// now (each retry reads the new chain).
const REORG_RETRIES: usize = 3;

/// The error of every scan on an index without silent payments.
fn not_enabled() -> Error {
    Error::NotSupported("this server keeps no silent payments index".into())
}

impl Query {
    /// Whether the index keeps silent-payment records.
    pub fn sp_enabled(&self) -> bool {
        self.store().silent_payments()
    }

    /// The height a scan from Unix time `unix` starts at (1.2.1).
    pub fn sp_height_at(&self, unix: u64) -> Height {
        self.store()
            .with_header_times(|times| height_at_time(times, unix))
    }

    /// See `osprey_answers::Backend::sp_scan`. The records are read with
    /// one `pread` (`Store::sp_records`, under the chain's lock) on this
    /// thread; `compute` finds the records whose first-output candidates
    /// hit their prefixes, holding no lock; back here, each hit is
    /// confirmed in the index. If a reorg replaced a block scanned
    /// meanwhile, the chunk is read and scanned again on the new chain.
    pub fn sp_scan(
        &self,
        keys: &Arc<ScanKeys>,
        from: SpCursor,
        to: Height,
        records_max: usize,
        compute: &dyn Compute,
    ) -> Result<SpChunk, Error> {
        if !self.sp_enabled() {
            return Err(not_enabled());
        }
        let records_max = records_max.max(1);
        let budget = (records_max as u64 + u64::from(from.records_done))
            .saturating_mul(READ_BYTES_PER_RECORD);
        for _ in 0..REORG_RETRIES {
            let read = self
                .store()
                .sp_records(from.height, to, budget)
                .map_err(store_failed)?;
            let keys = Arc::clone(keys);
            let (read, scanned) = computed(compute, move || {
                let scanned = scan_records(&keys, &read, from, records_max);
                (read, scanned)
            })?;
            let replaced = read.blocks[..scanned.blocks]
                .iter()
                .any(|block| self.store().block_hash(block.height) != Some(block.hash));
            if !replaced {
                return self.confirm(&read, scanned);
            }
        }
        Err(Error::Unavailable(
            "the chain kept changing during a silent-payments scan".into(),
        ))
    }

    /// The chunk of `scanned`, its hits confirmed: a candidate output key
    /// whose prefix is among the record's is confirmed by the funding row
    /// of its script at the transaction's tx_num (a false 4-byte hit comes
    /// about once per 2^32 comparisons); only then are the txid read and
    /// `input_hash·A` computed.
    fn confirm(&self, read: &SpRecords, scanned: Scanned) -> Result<SpChunk, Error> {
        let mut chunk = scanned.chunk?;
        for hit in scanned.hits {
            let block = &read.blocks[hit.block];
            let tx_num = TxNum(block.first_tx_num.0 + u64::from(hit.position));
            for key in &hit.keys {
                let mut script = [0u8; 34];
                script[..2].copy_from_slice(&[0x51, 0x20]);
                script[2..].copy_from_slice(key);
                let paid = self
                    .store()
                    .funding_at(&ScriptHash::from_script(&script), tx_num)
                    .map_err(store_failed)?;
                if paid {
                    let txid = self.store().txid(tx_num).map_err(store_failed)?;
                    let tweak_key = hit.tweak.tweak_key().map_err(|e| corrupt(block, &e))?;
                    chunk.matches.push(SpMatch {
                        height: block.height.0,
                        txid,
                        tweak_key,
                    });
                    break;
                }
            }
        }
        Ok(chunk)
    }

    /// See `osprey_answers::Backend::sp_scan_mempool`. The entries are
    /// taken under the mempool's lock on this thread and scanned in
    /// `compute`, without it.
    pub fn sp_scan_mempool(
        &self,
        keys: &Arc<ScanKeys>,
        only: Option<&[Txid]>,
        compute: &dyn Compute,
    ) -> Result<Vec<SpMatch>, Error> {
        if !self.sp_enabled() {
            return Err(not_enabled());
        }
        let entries: Vec<_> = {
            let mempool = self.mempool();
            match only {
                Some(txids) => txids
                    .iter()
                    .filter_map(|txid| mempool.get(txid))
                    .filter(|entry| entry.sp.is_some())
                    .map(Arc::clone)
                    .collect(),
                None => mempool
                    .entries()
                    .filter(|entry| entry.sp.is_some())
                    .map(Arc::clone)
                    .collect(),
            }
        };
        let keys = Arc::clone(keys);
        computed(compute, move || {
            entries
                .iter()
                .filter_map(|entry| {
                    let sp = entry.sp.as_ref()?;
                    SpMatch::if_paid(&keys, &sp.tweak, &sp.output_keys, 0, entry.txid)
                })
                .collect()
        })
    }
}

/// What the lock-free part of a chunk found: the chunk's progress (or the
/// error it met), the records whose candidates hit their prefixes, and how
/// many of the read blocks it reached (those a reorg must not have
/// replaced).
struct Scanned {
    chunk: Result<SpChunk, Error>,
    hits: Vec<Hit>,
    blocks: usize,
}

/// A record whose first-output candidates hit its prefixes: to confirm in
/// the index.
struct Hit {
    /// Index in [`SpRecords::blocks`].
    block: usize,
    position: u32,
    tweak: TweakData,
    keys: Vec<[u8; 32]>,
}

/// Records of a chunk waiting for their candidates, and the buffers those
/// are computed in, allocated once per chunk.
struct Batch<'a> {
    /// Each record and the index of its block in [`SpRecords::blocks`].
    records: Vec<(usize, Record<'a>)>,
    tweaks: Vec<TweakData>,
    candidates: CandidateBatch,
}

impl<'a> Batch<'a> {
    fn new(records_max: usize) -> Batch<'a> {
        let capacity = records_max.min(BATCH_RECORDS);
        Batch {
            records: Vec::with_capacity(capacity),
            tweaks: Vec::with_capacity(capacity),
            candidates: CandidateBatch::new(),
        }
    }

    /// Adds a record; when the batch is full, finds its hits.
    fn push(
        &mut self,
        keys: &ScanKeys,
        block: usize,
        record: Record<'a>,
        tweak: TweakData,
        hits: &mut Vec<Hit>,
    ) {
        self.records.push((block, record));
        self.tweaks.push(tweak);
        if self.records.len() == BATCH_RECORDS {
            self.find_hits(keys, hits);
        }
    }

    /// The records whose first-output candidates hit their prefixes, into
    /// `hits`; empties the batch. Records whose derivation fails
    /// (probability about 2^-128) pay no one.
    fn find_hits(&mut self, keys: &ScanKeys, hits: &mut Vec<Hit>) {
        keys.first_output_candidates_batch(&self.tweaks, &mut self.candidates);
        for (i, ((block, record), tweak)) in self.records.iter().zip(&self.tweaks).enumerate() {
            let found: Vec<[u8; 32]> = self.candidates.prefix_hits(i, record).copied().collect();
            if !found.is_empty() {
                hits.push(Hit {
                    block: *block,
                    position: record.position,
                    tweak: *tweak,
                    keys: found,
                });
            }
        }
        self.records.clear();
        self.tweaks.clear();
    }
}

/// Scans `read` from `from` for at most `records_max` records, with no
/// lock and no read of the index: the point multiplications of each
/// record, and its prefix hits.
fn scan_records(keys: &ScanKeys, read: &SpRecords, from: SpCursor, records_max: usize) -> Scanned {
    let mut scanned = Scanned {
        chunk: Ok(SpChunk::default()),
        hits: Vec::new(),
        blocks: 0,
    };
    let mut batch = Batch::new(records_max);
    let mut chunk = SpChunk {
        next: SpCursor::at_height(read.next_height),
        done: read.done,
        ..SpChunk::default()
    };
    // Offsets in `read.bytes` where the scan started and stopped.
    let mut started = 0;
    let mut stopped = read.bytes.len();
    'blocks: for (block_index, block) in read.blocks.iter().enumerate() {
        scanned.blocks = block_index + 1;
        let bytes = &read.bytes[block.records.clone()];
        let mut records = BlockRecords::new(bytes);
        let skip = if block.height == from.height {
            from.records_done
        } else {
            0
        };
        for index in 0u32.. {
            let offset = block.records.start + bytes.len() - records.bytes_left();
            if index == skip && block.height == from.height {
                started = offset;
            }
            let Some(record) = records.next() else {
                break;
            };
            if index < skip {
                continue;
            }
            if chunk.records == records_max {
                chunk.next = SpCursor {
                    height: block.height,
                    records_done: index,
                };
                chunk.done = false;
                stopped = offset;
                break 'blocks;
            }
            let record = match record {
                Ok(record) => record,
                Err(e) => {
                    scanned.chunk = Err(corrupt(block, &e));
                    return scanned;
                }
            };
            chunk.records += 1;
            let tweak = match record.tweak_data() {
                Ok(tweak) => tweak,
                Err(e) => {
                    scanned.chunk = Err(corrupt(block, &e));
                    return scanned;
                }
            };
            batch.push(keys, block_index, record, tweak, &mut scanned.hits);
        }
    }
    batch.find_hits(keys, &mut scanned.hits);
    chunk.bytes_scanned = stopped.saturating_sub(started) as u64;
    chunk.bytes_left = read.range_end.saturating_sub(read.start + stopped as u64);
    scanned.chunk = Ok(chunk);
    scanned
}

/// A record that does not decode: the index is damaged (the detail is for
/// the log).
fn corrupt(block: &SpBlock, e: &osprey_sp::Error) -> Error {
    Error::Internal(format!(
        "silent-payment records of block {}: {e}",
        block.height
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::tests::{tracking, tracking_with};
    use bitcoin::secp256k1::{PublicKey, Scalar, Secp256k1, SecretKey};
    use bitcoin::{Amount, OutPoint, ScriptBuf, Transaction};
    use osprey_answers::InPlace;
    use osprey_store::StoreConfig;
    use osprey_testenv::{BitcoindNode, BtcdNode, Node, ScriptKind, TestWallet};

    fn secret(byte: u8) -> SecretKey {
        SecretKey::from_slice(&[byte; 32]).expect("a valid key")
    }

    /// A receiver: scan key `i`, spend key `i + 100`, scanning `labels`.
    fn receiver(i: u8, labels: &[u32]) -> Arc<ScanKeys> {
        let spend = secret(i + 100).public_key(&Secp256k1::new());
        Arc::new(ScanKeys::new(secret(i), spend, labels.iter().copied()).expect("keys"))
    }

    fn taproot(x_only: [u8; 32]) -> ScriptBuf {
        let mut script = vec![0x51, 0x20];
        script.extend_from_slice(&x_only);
        ScriptBuf::from_bytes(script)
    }

    /// The real chain the tests scan: a node, 110 blocks, a wallet holding
    /// their coinbases (P2PKH, whose keys BIP-352 counts), a second wallet
    /// with the same keys to draft transactions with, and an index with
    /// silent payments following it.
    struct Chain {
        node: Box<dyn Node>,
        wallet: TestWallet,
        drafts: TestWallet,
        query: Arc<Query>,
        tracker: crate::Tracker,
        _dir: tempfile::TempDir,
        /// Mature coinbases not spent yet.
        coins: Vec<OutPoint>,
    }

    impl Chain {
        fn new(node: Box<dyn Node>) -> Chain {
            node.generate(110).expect("mining");
            let mut wallet = TestWallet::new();
            wallet.sync(node.as_ref()).expect("wallet sync");
            let mut drafts = TestWallet::new();
            drafts.sync(node.as_ref()).expect("wallet sync");
            let coins = wallet
                .coins()
                .filter(|c| c.coinbase && c.height.is_some_and(|h| h <= 8))
                .map(|c| c.outpoint)
                .collect();
            let config = StoreConfig {
                silent_payments: true,
                ..StoreConfig::default()
            };
            let (dir, query, tracker) = tracking_with(node.as_ref(), config);
            Chain {
                node,
                wallet,
                drafts,
                query,
                tracker,
                _dir: dir,
                coins,
            }
        }

        /// A transaction spending a coinbase to the taproot output key
        /// `output_key(first-output candidates of keys)`, broadcast, and the
        /// output it spends.
        fn pay(&mut self, keys: &ScanKeys, output_key: impl Fn(&[[u8; 32]]) -> [u8; 32]) -> Paid {
            let coin = self.coins.pop().expect("a mature coinbase left");
            self.pay_from(&[coin], keys, output_key)
        }

        /// `pay` from the wallet's coins `coins`. The candidates depend on
        /// the inputs only, so they are taken from a draft with the same
        /// inputs and a placeholder output.
        fn pay_from(
            &mut self,
            coins: &[OutPoint],
            keys: &ScanKeys,
            output_key: impl Fn(&[[u8; 32]]) -> [u8; 32],
        ) -> Paid {
            let amount = Amount::from_sat(100_000);
            let draft = self
                .drafts
                .spend(coins, &[(taproot([7; 32]), amount)])
                .expect("draft");
            let spent: Vec<bitcoin::TxOut> = coins
                .iter()
                .map(|coin| {
                    let coin = self.wallet.coins().find(|c| c.outpoint == *coin);
                    coin.expect("the coin").spend.txout.clone()
                })
                .collect();
            let tweak = osprey_sp::tweak_data(&draft, &spent)
                .expect("tweak data")
                .expect("an eligible spend");
            let candidates = keys.first_output_candidates(&tweak).expect("candidates");
            let key = output_key(candidates.keys());
            let tx = self
                .wallet
                .spend(coins, &[(taproot(key), amount)])
                .expect("payment");
            self.node.send_raw_transaction(&tx).expect("broadcast");
            (tx, spent)
        }

        fn update(&mut self) {
            self.tracker.update(&mut |_| {}).expect("update");
        }

        fn mine(&mut self) -> u32 {
            self.node.generate(1).expect("mining");
            self.update();
            self.query.tip().0 .0
        }

        /// Every match from height 0 to the tip, in chunks of at most
        /// `records_max` records, with the chunks' sizes checked.
        fn scan_all(&self, keys: &Arc<ScanKeys>, records_max: usize) -> Vec<SpMatch> {
            let tip = self.query.tip().0;
            let mut cursor = SpCursor::at_height(Height(0));
            let mut matches = Vec::new();
            let mut total = None;
            loop {
                let chunk = self
                    .query
                    .sp_scan(keys, cursor, tip, records_max, &InPlace)
                    .expect("scan");
                // At least one record per call, so that a scan moves on.
                assert!(chunk.records <= records_max.max(1), "{chunk:?}");
                let range = chunk.bytes_scanned + chunk.bytes_left;
                let total = *total.get_or_insert(range);
                assert!(range <= total, "what is left only shrinks");
                matches.extend(chunk.matches);
                if chunk.done {
                    assert_eq!(chunk.bytes_left, 0);
                    assert!(chunk.next.height > tip);
                    return matches;
                }
                assert!(chunk.next > cursor, "each chunk moves on");
                cursor = chunk.next;
            }
        }
    }

    /// A payment and the outputs it spends.
    type Paid = (Transaction, Vec<bitcoin::TxOut>);

    /// The tweak a match reports is `input_hash·A`: multiplied by the scan
    /// key (`secret(scan)`) it is the shared secret the receiver derives
    /// from the transaction's inputs.
    fn assert_tweak(keys: &ScanKeys, scan: u8, (tx, spent): &Paid, found: &SpMatch) {
        assert_eq!(found.txid, tx.compute_txid());
        let tweak = osprey_sp::tweak_data(tx, spent).unwrap().unwrap();
        let tweak_point = PublicKey::from_slice(&found.tweak_key).expect("a point");
        let shared = tweak_point
            .mul_tweak(&Secp256k1::new(), &Scalar::from(secret(scan)))
            .unwrap();
        assert_eq!(shared.serialize(), keys.shared_secret(&tweak).unwrap());
    }

    #[test]
    fn payments_are_found_in_the_mempool_then_in_blocks_and_decoys_are_not() {
        let mut chain = Chain::new(Box::new(BtcdNode::start().expect("btcd")));
        let alice = receiver(1, &[]);
        let alice_labelled = receiver(1, &[7]);
        let bob = receiver(2, &[]);
        // To alice, unlabelled; to alice's label 7 (candidates: unlabelled,
        // the change label 0, then 7); to bob; and a decoy whose output key
        // differs from alice's candidate in its last byte only (a prefix
        // hit that the funding lookup must refuse).
        let to_alice = chain.pay(&alice, |c| c[0]);
        let to_label = chain.pay(&alice_labelled, |c| c[2]);
        let to_bob = chain.pay(&bob, |c| c[0]);
        let decoy = chain.pay(&alice, |c| {
            let mut near = c[0];
            near[31] ^= 1;
            near
        });
        chain.update();
        let txid = |paid: &Paid| paid.0.compute_txid();
        let sorted_txids = |matches: &[SpMatch]| {
            let mut txids: Vec<Txid> = matches.iter().map(|m| m.txid).collect();
            txids.sort();
            txids
        };
        let sorted = |mut txids: Vec<Txid>| {
            txids.sort();
            txids
        };

        // In the mempool: height 0, found with their full keys.
        let pool = chain.query.sp_scan_mempool(&alice, None, &InPlace).unwrap();
        assert_eq!(pool.len(), 1);
        assert_eq!(pool[0].height, 0);
        assert_tweak(&alice, 1, &to_alice, &pool[0]);
        let pool = chain
            .query
            .sp_scan_mempool(&alice_labelled, None, &InPlace)
            .unwrap();
        assert_eq!(
            sorted_txids(&pool),
            sorted(vec![txid(&to_alice), txid(&to_label)])
        );
        let only = [txid(&to_bob), txid(&decoy)];
        assert!(chain
            .query
            .sp_scan_mempool(&alice, Some(&only), &InPlace)
            .unwrap()
            .is_empty());
        let pool = chain
            .query
            .sp_scan_mempool(&bob, Some(&only), &InPlace)
            .unwrap();
        assert_eq!(sorted_txids(&pool), [txid(&to_bob)]);

        // Confirmed: the same, with the block's height and the tweak.
        let height = chain.mine();
        assert!(chain
            .query
            .sp_scan_mempool(&alice, None, &InPlace)
            .unwrap()
            .is_empty());
        let found = chain.scan_all(&alice, 1000);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].height, height);
        assert_tweak(&alice, 1, &to_alice, &found[0]);
        let found = chain.scan_all(&alice_labelled, 1000);
        assert_eq!(
            sorted_txids(&found),
            sorted(vec![txid(&to_alice), txid(&to_label)])
        );
        for found in &found {
            let paid = if found.txid == txid(&to_label) {
                &to_label
            } else {
                &to_alice
            };
            assert_tweak(&alice_labelled, 1, paid, found);
        }
        let found = chain.scan_all(&bob, 1000);
        assert_eq!(sorted_txids(&found), [txid(&to_bob)]);
        assert_tweak(&bob, 2, &to_bob, &found[0]);
        assert!(chain.scan_all(&receiver(3, &[]), 1000).is_empty());
    }

    /// On Bitcoin Core (segwit and taproot active from genesis): payments
    /// spending P2WPKH, P2SH-P2WPKH and taproot key-path coins, alone and
    /// together (their keys summed), are found with their tweaks; a P2WSH
    /// coin does not count, so a transaction spending only it is no payment.
    #[test]
    fn payments_from_segwit_and_taproot_inputs_are_found_on_bitcoin_core() {
        let mut chain = Chain::new(Box::new(BitcoindNode::start().expect("bitcoind")));
        let kinds = [
            ScriptKind::P2wpkh,
            ScriptKind::P2shP2wpkh,
            ScriptKind::P2tr,
            ScriptKind::P2wsh,
        ];
        // Both wallets know the first key of each kind: fund those.
        let outputs: Vec<_> = kinds
            .iter()
            .flat_map(|&kind| {
                let script = chain.wallet.script_pubkey(kind);
                [
                    (script.clone(), Amount::from_sat(2_000_000)),
                    (script, Amount::from_sat(2_000_000)),
                ]
            })
            .collect();
        let funding = chain.wallet.send_many(&outputs).expect("funding");
        chain
            .node
            .send_raw_transaction(&funding)
            .expect("broadcast");
        chain.mine();
        chain.wallet.sync(chain.node.as_ref()).expect("wallet sync");
        chain.drafts.sync(chain.node.as_ref()).expect("wallet sync");
        let coin = |vout: usize| OutPoint {
            txid: funding.compute_txid(),
            vout: vout as u32,
        };
        let alice = receiver(1, &[]);
        let paid = [
            chain.pay_from(&[coin(0)], &alice, |c| c[0]),
            chain.pay_from(&[coin(2)], &alice, |c| c[0]),
            chain.pay_from(&[coin(4)], &alice, |c| c[0]),
            chain.pay_from(&[coin(1), coin(5), coin(6)], &alice, |c| c[0]),
        ];
        let draft = chain
            .drafts
            .spend(&[coin(7)], &[(taproot([7; 32]), Amount::from_sat(100_000))])
            .expect("draft");
        let p2wsh = chain
            .wallet
            .coins()
            .find(|c| c.outpoint == coin(7))
            .unwrap();
        let spent = [p2wsh.spend.txout.clone()];
        assert_eq!(osprey_sp::tweak_data(&draft, &spent), Ok(None));
        chain.update();
        let pool = chain.query.sp_scan_mempool(&alice, None, &InPlace).unwrap();
        assert_eq!(pool.len(), paid.len());
        let height = chain.mine();
        let found = chain.scan_all(&alice, 2);
        assert_eq!(found.len(), paid.len());
        for paid in &paid {
            let found = found.iter().find(|m| m.txid == paid.0.compute_txid());
            let found = found.expect("every payment found");
            assert_eq!(found.height, height);
            assert_tweak(&alice, 1, paid, found);
        }
    }

    /// A reorg that undoes the block of a payment: the index's records go
    /// with it, the payment is found in the mempool again (its record
    /// computed anew), then at its new block once mined again.
    #[test]
    fn a_payment_undone_by_a_reorg_goes_back_to_the_mempool_then_to_its_new_block() {
        let mut chain = Chain::new(Box::new(BitcoindNode::start().expect("bitcoind")));
        let alice = receiver(1, &[]);
        let paid = chain.pay(&alice, |c| c[0]);
        let height = chain.mine();
        let found = chain.scan_all(&alice, 1000);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].height, height);
        let block = chain.node.block_hash(height).expect("its block");
        chain
            .node
            .invalidate_block(&block)
            .expect("invalidateblock");
        chain.update();
        assert_eq!(chain.query.tip().0, Height(height - 1));
        assert!(chain.scan_all(&alice, 1000).is_empty());
        let pool = chain.query.sp_scan_mempool(&alice, None, &InPlace).unwrap();
        assert_eq!(pool.len(), 1, "back in the mempool");
        assert_tweak(&alice, 1, &paid, &pool[0]);
        // A block of the test's own (generating would rebuild the invalid
        // one), holding the payment, then one more: the longer branch.
        let parent = chain.node.block_hash(height - 1).expect("the fork");
        osprey_testenv::submit_block_on(chain.node.as_ref(), parent, vec![paid.0.clone()], 1);
        chain.node.generate(1).expect("mining the new branch");
        chain.update();
        let found = chain.scan_all(&alice, 1000);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].height, height, "mined again at the same height");
        assert_tweak(&alice, 1, &paid, &found[0]);
        assert_ne!(chain.node.block_hash(height).unwrap(), block);
        assert!(chain
            .query
            .sp_scan_mempool(&alice, None, &InPlace)
            .unwrap()
            .is_empty());
    }

    /// A [`Compute`] that, before it runs a scan job, has the tracker
    /// index the node's new block on another thread and waits (bounded)
    /// for it: the commit takes the chain's write lock, so it finishes only
    /// if the scan holds no lock while its job runs. The server runs jobs
    /// on threads at the lowest CPU priority, which a busy machine may not
    /// run for minutes.
    struct CommitFirst {
        tracker: std::sync::Mutex<Option<crate::Tracker>>,
        committed: std::sync::Mutex<Option<bool>>,
    }

    impl Compute for CommitFirst {
        fn run(&self, job: Box<dyn FnOnce() + Send>) {
            if let Some(mut tracker) = self.tracker.lock().unwrap().take() {
                let (done, finished) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    tracker.update(&mut |_| {}).expect("update");
                    let _ = done.send(());
                });
                let committed = finished
                    .recv_timeout(std::time::Duration::from_secs(60))
                    .is_ok();
                *self.committed.lock().unwrap() = Some(committed);
            }
            job();
        }
    }

    #[test]
    fn a_scan_job_holds_no_lock_a_commit_needs() {
        let mut chain = Chain::new(Box::new(BtcdNode::start().expect("btcd")));
        let alice = receiver(1, &[]);
        let (paid, _) = chain.pay(&alice, |c| c[0]);
        let height = chain.mine();
        chain
            .node
            .generate(1)
            .expect("a block to index during the scan");
        let Chain { query, tracker, .. } = chain;
        let compute = CommitFirst {
            tracker: std::sync::Mutex::new(Some(tracker)),
            committed: std::sync::Mutex::new(None),
        };
        let chunk = query
            .sp_scan(
                &alice,
                SpCursor::at_height(Height(0)),
                Height(height),
                1000,
                &compute,
            )
            .expect("scan");
        assert_eq!(
            *compute.committed.lock().unwrap(),
            Some(true),
            "a block was committed while the scan's job waited"
        );
        assert_eq!(query.tip().0, Height(height + 1));
        let found: Vec<Txid> = chunk.matches.iter().map(|m| m.txid).collect();
        assert_eq!(found, [paid.compute_txid()]);
        let pool = query
            .sp_scan_mempool(&alice, None, &InPlace)
            .expect("mempool scan");
        assert!(pool.is_empty());
    }

    #[test]
    fn chunks_of_any_size_find_the_same_payments() {
        let mut chain = Chain::new(Box::new(BtcdNode::start().expect("btcd")));
        let alice = receiver(1, &[]);
        let bob = receiver(2, &[]);
        let mut paid = Vec::new();
        // Three blocks: two payments to alice and one to bob, then one of
        // each, then one decoy.
        for block in [vec![&alice, &bob, &alice], vec![&bob, &alice], vec![&bob]] {
            for keys in block {
                let (tx, _) = chain.pay(keys, |c| c[0]);
                if std::ptr::eq(keys, &alice) {
                    paid.push(tx.compute_txid());
                }
            }
            chain.mine();
        }
        let whole = chain.scan_all(&alice, 1000);
        let mut found: Vec<Txid> = whole.iter().map(|m| m.txid).collect();
        found.sort();
        paid.sort();
        assert_eq!(found, paid);
        for records_max in [0, 1, 2, 3] {
            assert_eq!(chain.scan_all(&alice, records_max), whole, "{records_max}");
        }
        // A chunk of one record stops inside the first block of three.
        let tip = chain.query.tip().0;
        let first = chain
            .query
            .sp_scan(&alice, SpCursor::at_height(Height(0)), tip, 1, &InPlace)
            .unwrap();
        assert_eq!((first.records, first.next.records_done), (1, 1));
        assert!(!first.done);
        // Past the tip: done at once, nothing scanned.
        let past = chain
            .query
            .sp_scan(
                &alice,
                SpCursor::at_height(Height(tip.0 + 1)),
                Height(tip.0 + 9),
                10,
                &InPlace,
            )
            .unwrap();
        assert!(past.done && past.matches.is_empty() && past.records == 0);
        // A range that ends before the payments finds none of them.
        let early = chain
            .query
            .sp_scan(
                &alice,
                SpCursor::at_height(Height(0)),
                Height(110),
                1000,
                &InPlace,
            )
            .unwrap();
        assert!(early.done && early.matches.is_empty());
    }

    #[test]
    fn times_resolve_to_heights_and_an_index_without_records_refuses_scans() {
        let node = BtcdNode::start().expect("btcd");
        node.generate(3).expect("mining");
        let (_dir, query, mut tracker) = tracking(&node);
        tracker.update(&mut |_| {}).expect("update");
        assert!(!query.sp_enabled());
        let keys = receiver(1, &[]);
        let refused = query.sp_scan(&keys, SpCursor::default(), Height(3), 10, &InPlace);
        assert!(
            matches!(refused, Err(Error::NotSupported(_))),
            "{refused:?}"
        );
        assert!(matches!(
            query.sp_scan_mempool(&keys, None, &InPlace),
            Err(Error::NotSupported(_))
        ));
        // Regtest blocks are stamped about now: a time long past resolves
        // to genesis' height, one far ahead to the tip.
        assert_eq!(query.sp_height_at(0), Height(0));
        assert_eq!(query.sp_height_at(u64::MAX), Height(3));
        let genesis = node.block_hash(0).expect("genesis");
        let genesis_time = u64::from(node.get_block(&genesis).expect("genesis").header.time);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(query.sp_height_at(now + 7200 + 3600), Height(3));
        assert!(query.sp_height_at(genesis_time + 7199) == Height(0));
    }
}
