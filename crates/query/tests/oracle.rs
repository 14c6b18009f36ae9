//! Indexes a generated chain from its blk files (no node) and checks every
//! answer about the big wallet against the generator's manifest, which was
//! computed independently while the chain was built.
//!
//! 1. Generate a `tiny` chain with a fixed seed.
//! 2. Index it from the blk files, in small batches so several commits happen.
//! 3. For every wallet address: history, status, balance and unspent count
//!    must equal the manifest's.
//! 4. Every transaction the history names must be fetchable and hash to its
//!    txid, and its merkle proof must fold to the header's merkle root.
//! 5. Reopening the store resumes at the same tip with the same digest.

use bitcoin::hashes::{sha256d, Hash, HashEngine};
use osprey_chain::{BlkFiles, ChainSource};
use osprey_chaingen::generate::{generate, Config, Signatures};
use osprey_chaingen::shape::Preset;
use osprey_core::{Height, Network, ScriptHash, StatusHash};
use osprey_indexer::{Indexer, IndexerConfig};
use osprey_query::{Query, QueryConfig, Tracker};
use osprey_store::codec::RowKind;
use osprey_store::{Store, StoreConfig};
use std::sync::Arc;

fn seed() -> u64 {
    std::env::var("OSPREY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11)
}

#[test]
fn indexed_chain_matches_the_manifest() {
    check_against_the_manifest(StoreConfig::default());
}

/// The same chain bulk-loaded nearly to its tip (an undo window of 10
/// blocks) in runs of 64 KiB of rows: the load leaves out the amounts of
/// the outputs it finds spent, in a run (the spend in the same run) or at
/// the merge (paired by vout), and every answer must stay the manifest's.
#[test]
fn a_bulk_loaded_index_matches_the_manifest() {
    let (left_out, spent) = check_against_the_manifest(StoreConfig {
        reorg_depth_max: 10,
        bulk_run_bytes: 64 << 10,
        ..StoreConfig::default()
    });
    // Spends in the last blocks, or of one of several outputs of a
    // script with the same vout in an earlier run, keep the amounts.
    assert!(
        left_out > 0 && left_out <= spent,
        "{left_out} of {spent} spent outputs without their amounts"
    );
}

/// Indexes the chain with `store_config` and checks every answer about
/// the big wallet; returns how many of the wallet's outputs the index
/// keeps without their amounts, and how many are spent.
fn check_against_the_manifest(store_config: StoreConfig) -> (usize, usize) {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        preset: "tiny".into(),
        seed,
        shape: Preset::Tiny.shape(),
        signatures: Signatures::Real,
    };
    let (manifest, _) = generate(config, &dir.path().join("chain"), &mut |_| {}).unwrap();

    let source: Arc<dyn ChainSource> =
        Arc::new(BlkFiles::open(&dir.path().join("chain/blocks"), Network::Regtest).unwrap());
    let store =
        Arc::new(Store::open(&dir.path().join("db"), "regtest", store_config.clone()).unwrap());
    let indexer_config = IndexerConfig {
        fetch_blocks: 7,
        batch_blocks_max: 50,
        ..IndexerConfig::default()
    };
    let indexer = Indexer::new(Arc::clone(&store), source.clone(), indexer_config);
    let query = Arc::new(Query::new(
        Arc::clone(&store),
        source,
        QueryConfig::default(),
    ));
    let mut tracker = Tracker::new(indexer, Arc::clone(&query));
    let mut batches = 0;
    tracker.update(&mut |_| batches += 1).unwrap();
    assert!(batches > 3, "expected several commits, got {batches}");

    let (tip, tip_hash) = query.tip();
    assert_eq!(tip.0, manifest.tip_height, "seed {seed}");
    assert_eq!(tip_hash.to_string(), manifest.tip_hash);
    assert_eq!(store.tx_count(), manifest.tx_count);

    assert!(!manifest.wallet.addresses.is_empty());
    let (mut left_out, mut spent) = (0, 0);
    for address in &manifest.wallet.addresses {
        let sh: ScriptHash = address.scripthash.parse().unwrap();
        for row in store.history(&sh, usize::MAX).unwrap().unwrap_or_default() {
            if let RowKind::Funding { amount, .. } = row.kind {
                left_out += usize::from(amount.is_none());
                spent += 1;
            }
        }
        spent -= address.utxo_count as usize;
        let history = query.history(&sh).unwrap();
        let got: Vec<(String, u32)> = history
            .iter()
            .map(|e| (e.txid.to_string(), e.height as u32))
            .collect();
        assert_eq!(
            got, address.history,
            "history of {} (seed {seed})",
            address.address
        );
        let status = query.status(&sh).unwrap();
        let expected = StatusHash::of_history(history.iter().map(|e| (&e.txid, e.height)));
        assert_eq!(status, expected);
        let balance = query.balance(&sh).unwrap();
        assert_eq!(
            balance.confirmed, address.balance,
            "balance of {} (seed {seed})",
            address.address
        );
        assert_eq!(balance.unconfirmed, 0);
        let unspent = query.unspent(&sh).unwrap();
        assert_eq!(
            unspent.len() as u32,
            address.utxo_count,
            "utxos of {} (seed {seed})",
            address.address
        );
        assert_eq!(
            unspent.iter().map(|u| u.value).sum::<u64>(),
            address.balance
        );

        for entry in &history {
            let raw = query.transaction(&entry.txid).unwrap();
            let tx: bitcoin::Transaction = bitcoin::consensus::deserialize(&raw).unwrap();
            assert_eq!(tx.compute_txid(), entry.txid);
            let proof = query
                .merkle(&entry.txid, Height(entry.height as u32))
                .unwrap();
            let mut hash = entry.txid.to_byte_array();
            let mut pos = proof.pos;
            for node in &proof.branch {
                let mut engine = sha256d::Hash::engine();
                if pos.is_multiple_of(2) {
                    engine.input(&hash);
                    engine.input(node.as_byte_array());
                } else {
                    engine.input(node.as_byte_array());
                    engine.input(&hash);
                }
                hash = sha256d::Hash::from_engine(engine).to_byte_array();
                pos /= 2;
            }
            let header = query.header(proof.block_height).unwrap();
            let header: bitcoin::block::Header = bitcoin::consensus::deserialize(&header).unwrap();
            assert_eq!(hash, header.merkle_root.to_byte_array());
        }
    }

    // An unused script has no history and a null status.
    let unused = ScriptHash([0xEE; 32]);
    assert!(query.history(&unused).unwrap().is_empty());
    assert_eq!(query.status(&unused).unwrap(), None);

    let digest = store.digest().unwrap();
    drop((tracker, query, store));
    let reopened = Store::open(&dir.path().join("db"), "regtest", store_config).unwrap();
    assert_eq!(reopened.tip().unwrap().1, tip_hash);
    assert_eq!(reopened.digest().unwrap(), digest);
    (left_out, spent)
}

#[test]
fn history_limit_is_an_error_not_a_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        preset: "tiny".into(),
        seed: seed(),
        shape: Preset::Tiny.shape(),
        signatures: Signatures::Real,
    };
    let (manifest, _) = generate(config, &dir.path().join("chain"), &mut |_| {}).unwrap();
    let source: Arc<dyn ChainSource> =
        Arc::new(BlkFiles::open(&dir.path().join("chain/blocks"), Network::Regtest).unwrap());
    let store =
        Arc::new(Store::open(&dir.path().join("db"), "regtest", StoreConfig::default()).unwrap());
    let indexer = Indexer::new(Arc::clone(&store), source.clone(), IndexerConfig::default());
    let query = Arc::new(Query::new(
        store,
        source,
        QueryConfig {
            history_entries_max: 1,
            ..QueryConfig::default()
        },
    ));
    Tracker::new(indexer, Arc::clone(&query))
        .update(&mut |_| {})
        .unwrap();
    let busy = manifest
        .wallet
        .addresses
        .iter()
        .find(|a| a.history.len() >= 2)
        .expect("a reused address");
    let sh: ScriptHash = busy.scripthash.parse().unwrap();
    let err = query.history(&sh).unwrap_err();
    assert!(err.to_string().contains("history too large"), "{err}");
    assert!(query.balance(&sh).is_err());
    assert!(query.unspent(&sh).is_err());
}
