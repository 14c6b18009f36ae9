//! CI requirement: the generator's blocks are accepted by a real btcd in
//! regtest. Generates the `tiny` chain, submits it, and checks the node
//! against the manifest. A chain with placeholder signatures goes to
//! Bitcoin Core, the one node that can take it.

use std::str::FromStr;

use bitcoin::{BlockHash, Txid};
use osprey_chaingen::submit::{submit_chain, submit_headers, SubmitError, SubmitLimits};
use osprey_chaingen::{
    generate, read_blocks, Config, Preset, Shape, Signatures, CHECKED_TAIL_BLOCKS,
};
use osprey_testenv::{BitcoindNode, BitcoindOptions, BtcdNode, ChainFixture, Node};
use serde_json::{json, Value};

/// 1. Generate `tiny` (past btcd's segwit activation at 432, so witness
///    spends of every kind are validated).
/// 2. Submit it to a fresh btcd in small batches.
/// 3. The node's tip is the manifest's tip and segwit is active.
/// 4. Each of the wallet's transactions is where the manifest says.
/// 5. Submitting again sends nothing.
#[test]
fn btcd_accepts_the_tiny_chain() {
    let seed = std::env::var("OSPREY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let chain = ChainFixture::tiny(seed).unwrap();
    let manifest = &chain.manifest;

    let node = BtcdNode::start().unwrap();
    // Small batches so the batch boundaries and per-batch tip checks run.
    let limits = SubmitLimits {
        batch_blocks_max: 64,
        ..SubmitLimits::default()
    };
    let done = submit_chain(&chain.blocks_dir(), node.rpc(), &limits, &mut |_| {})
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(done.submitted, manifest.tip_height);
    assert_eq!(done.skipped, 1, "the node has genesis");

    let (height, hash) = node.tip().unwrap();
    assert_eq!(height, manifest.tip_height);
    assert_eq!(hash.to_string(), manifest.tip_hash, "seed {seed}");
    let info: Value = node.rpc().call("getblockchaininfo", &[]).unwrap();
    assert_eq!(info["bip9_softforks"]["segwit"]["status"], "active");
    assert_eq!(info["bip9_softforks"]["taproot"]["status"], "active");

    let mut checked = 0;
    for address in &manifest.wallet.addresses {
        for (txid, tx_height) in &address.history {
            let tx = node
                .get_raw_transaction_verbose(&Txid::from_str(txid).unwrap())
                .unwrap();
            assert_eq!(
                tx["blockhash"], manifest.block_hashes[*tx_height as usize],
                "{txid}"
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "checked {checked} wallet transactions");

    let again = submit_chain(&chain.blocks_dir(), node.rpc(), &limits, &mut |_| {}).unwrap();
    assert_eq!(
        (again.submitted, again.skipped),
        (0, manifest.tip_height + 1)
    );
}

#[test]
fn submit_refuses_a_node_on_another_chain() {
    let chain = ChainFixture::with_shape(
        Shape {
            blocks: 5,
            ..Preset::Tiny.shape()
        },
        3,
    )
    .unwrap();
    let node = BtcdNode::start().unwrap();
    node.generate(2).unwrap();
    let err = submit_chain(
        &chain.blocks_dir(),
        node.rpc(),
        &SubmitLimits::default(),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("height 1") && err.contains("another chain"),
        "{err}"
    );
}

#[test]
fn a_loaded_chain_can_be_extended_by_mining() {
    let shape = Shape {
        blocks: 120,
        txs_per_block: 3,
        ..Preset::Tiny.shape()
    };
    let chain = ChainFixture::with_shape(shape, 4).unwrap();
    let node = BtcdNode::start().unwrap();
    chain.load_into(&node).unwrap();
    let mined = node.generate(2).unwrap();
    assert_eq!(node.tip().unwrap(), (122, mined[1]));
}

/// A chain with placeholder signatures (`tiny`: a few hundred transfers,
/// then the coinbase-only tail) against Bitcoin Core:
/// 1. without `-assumevalid`, Core rejects the first block with a transfer
///    for its scripts: the placeholders are not signatures;
/// 2. run with `-assumevalid=<the hash chaingen prints>` and sent the
///    headers first, it connects the whole chain to the manifest's tip.
#[test]
fn bitcoind_takes_placeholder_signatures_only_under_assumevalid() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        preset: "tiny".into(),
        seed: 1,
        shape: Preset::Tiny.shape(),
        signatures: Signatures::Placeholder,
    };
    let (manifest, _) = generate(config, dir.path(), &mut |_| {}).unwrap();
    let placeholders = manifest
        .placeholder_signatures
        .clone()
        .expect("the manifest says where the placeholders are");
    assert_eq!(
        manifest.tip_height,
        placeholders.last_height + CHECKED_TAIL_BLOCKS
    );
    let blocks_dir = dir.path().join("blocks");
    let first_transfer = read_blocks(&blocks_dir)
        .unwrap()
        .position(|block| block.unwrap().txdata.len() > 1)
        .expect("tiny has transfers") as u32;

    let Some(strict) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    submit_headers(&blocks_dir, strict.rpc()).unwrap();
    match submit_chain(
        &blocks_dir,
        strict.rpc(),
        &SubmitLimits::default(),
        &mut |_| {},
    ) {
        Err(SubmitError::Rejected { height, reason, .. }) => {
            assert_eq!(height, first_transfer, "{reason}");
            assert!(reason.contains("script-verify-flag-failed"), "{reason}");
        }
        other => panic!("Core without -assumevalid took placeholders: {other:?}"),
    }
    drop(strict);

    let node = BitcoindNode::start_with(&BitcoindOptions {
        assumevalid: Some(BlockHash::from_str(&placeholders.assumevalid).unwrap()),
        ..BitcoindOptions::default()
    })
    .unwrap();
    let sent = submit_headers(&blocks_dir, node.rpc()).unwrap();
    assert_eq!(sent, manifest.tip_height, "every header but genesis");
    let done = submit_chain(
        &blocks_dir,
        node.rpc(),
        &SubmitLimits::default(),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("Core with -assumevalid: {e}"));
    assert_eq!(done.submitted, manifest.tip_height);
    let (height, hash) = node.tip().unwrap();
    assert_eq!(height, manifest.tip_height);
    assert_eq!(hash.to_string(), manifest.tip_hash);
}

/// Bitcoin Core takes a chain with silent payments (`tiny` with a fifth of
/// the transfers that can pay one paying, most from P2PKH inputs before
/// segwit, the rest from every kind after it): their outputs are ordinary
/// taproot outputs of transactions signed as any other.
#[test]
fn bitcoind_accepts_a_chain_with_silent_payments() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        preset: "tiny".into(),
        seed: 2,
        shape: Shape {
            silent_payments_ppm: 200_000,
            ..Preset::Tiny.shape()
        },
        signatures: Signatures::Real,
    };
    let (manifest, _) = generate(config, dir.path(), &mut |_| {}).unwrap();
    let payments: Vec<&osprey_chaingen::manifest::SilentPayment> = manifest
        .silent_payments
        .iter()
        .flatten()
        .flat_map(|receiver| &receiver.payments)
        .collect();
    assert!(payments.len() > 50, "{} payments", payments.len());
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    let done = submit_chain(
        &dir.path().join("blocks"),
        node.rpc(),
        &SubmitLimits::default(),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("Core rejected the chain: {e}"));
    assert_eq!(done.submitted, manifest.tip_height);
    let (height, hash) = node.tip().unwrap();
    assert_eq!(
        (height, hash.to_string()),
        (manifest.tip_height, manifest.tip_hash.clone())
    );
    // The node has every paying transaction where the manifest says (Core
    // keeps no transaction index: the block is named).
    for payment in payments {
        let block = &manifest.block_hashes[payment.height as usize];
        let tx: Value = node
            .rpc()
            .call(
                "getrawtransaction",
                &[json!(payment.txid), json!(true), json!(block)],
            )
            .unwrap_or_else(|e| panic!("{} in {block}: {e}", payment.txid));
        for output in &payment.outputs {
            assert_eq!(
                tx["vout"][output.vout as usize]["scriptPubKey"]["type"], "witness_v1_taproot",
                "{}",
                payment.txid
            );
        }
    }
}
