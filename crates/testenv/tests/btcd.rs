//! The harness against a real btcd: mining, every script kind sent and
//! spent, unconfirmed chains, segwit activation at 432, and a reorg.

use bitcoin::{Amount, OutPoint};
use osprey_testenv::{BtcdNode, Node, ScriptKind, TestWallet};
use serde_json::Value;

fn confirmations(node: &dyn Node, txid: &bitcoin::Txid) -> u64 {
    node.get_raw_transaction_verbose(txid).unwrap()["confirmations"]
        .as_u64()
        .unwrap_or(0)
}

fn deployment_status(node: &dyn Node, name: &str) -> String {
    let info: Value = node.rpc().call("getblockchaininfo", &[]).unwrap();
    // btcd puts the BIP9 map at the top level.
    info["bip9_softforks"][name]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// 1. A fresh node is at genesis.
/// 2. Mining 101 blocks matures one coinbase.
/// 3. Before segwit, a P2PKH coin pays every kind.
/// 4. Mining to 432 activates segwit and taproot.
/// 5. Each kind is spent.
/// 6. An unconfirmed chain confirms.
/// 7. Invalidating the tip reorgs; reconsidering restores it.
#[test]
fn btcd_mines_and_spends_every_script_kind() {
    let node = BtcdNode::start().unwrap();
    let genesis = bitcoin::blockdata::constants::genesis_block(bitcoin::Network::Regtest);
    assert_eq!(node.tip().unwrap(), (0, genesis.block_hash()));

    let hashes = node.generate(101).unwrap();
    assert_eq!(hashes.len(), 101);
    assert_eq!(node.tip().unwrap(), (101, hashes[100]));
    assert_eq!(node.get_block(&hashes[0]).unwrap().block_hash(), hashes[0]);

    let mut wallet = TestWallet::new();
    wallet.sync(&node).unwrap();
    assert_eq!(wallet.height(), Some(101));
    assert_eq!(wallet.balance(), Amount::from_sat(101 * 50 * 100_000_000));
    // The state applies to the next block, still in the first window.
    assert_eq!(deployment_status(&node, "segwit"), "defined");

    // 3. Paying to witness outputs is fine before activation.
    let outputs: Vec<_> = ScriptKind::ALL
        .iter()
        .map(|k| (wallet.script_pubkey(*k), Amount::from_sat(1_000_000)))
        .collect();
    let fund = wallet.send_many(&outputs).unwrap();
    let fund_txid = node.send_raw_transaction(&fund).unwrap();
    assert!(node.mempool_txids().unwrap().contains(&fund_txid));
    let block = node.generate(1).unwrap()[0];
    assert_eq!(confirmations(&node, &fund_txid), 1);
    assert_eq!(
        node.get_raw_transaction_verbose(&fund_txid).unwrap()["blockhash"],
        block.to_string()
    );

    // 4. btcd regtest activates segwit and taproot at 432.
    node.activate_segwit().unwrap();
    assert_eq!(node.tip().unwrap().0, 432);
    assert_eq!(deployment_status(&node, "segwit"), "active");
    assert_eq!(deployment_status(&node, "taproot"), "active");

    // 5. Spend each kind on its own, so a bad signature names its kind.
    wallet.sync(&node).unwrap();
    let mut spends = Vec::new();
    for (vout, kind) in ScriptKind::ALL.iter().enumerate() {
        let outpoint = OutPoint {
            txid: fund_txid,
            vout: vout as u32,
        };
        let to = wallet.new_script(ScriptKind::P2tr);
        let tx = wallet
            .spend(&[outpoint], &[(to, Amount::from_sat(500_000))])
            .unwrap();
        let txid = node
            .send_raw_transaction(&tx)
            .unwrap_or_else(|e| panic!("{kind} spend rejected: {e:#}"));
        spends.push((kind, txid));
    }
    node.generate(1).unwrap();
    for (kind, txid) in &spends {
        assert_eq!(confirmations(&node, txid), 1, "{kind} spend confirmed");
    }

    // 6. A child spending its unconfirmed parent's change.
    wallet.sync(&node).unwrap();
    let parent = wallet
        .send(
            wallet.script_pubkey(ScriptKind::P2wsh),
            Amount::from_sat(2_000_000),
        )
        .unwrap();
    let change = OutPoint {
        txid: parent.compute_txid(),
        vout: 1,
    };
    let child = wallet
        .spend(
            &[change],
            &[(
                wallet.script_pubkey(ScriptKind::P2shP2wpkh),
                Amount::from_sat(1_000_000),
            )],
        )
        .unwrap();
    node.send_raw_transaction(&parent).unwrap();
    node.send_raw_transaction(&child).unwrap();
    assert_eq!(node.mempool_txids().unwrap().len(), 2);
    let (height_before, _) = node.tip().unwrap();
    let tip = node.generate(1).unwrap()[0];
    assert_eq!(confirmations(&node, &child.compute_txid()), 1);
    assert!(node.mempool_txids().unwrap().is_empty());

    // 7. Reorg by invalidating the tip; the wallet follows both ways.
    node.invalidate_block(&tip).unwrap();
    assert_eq!(node.tip().unwrap().0, height_before);
    wallet.sync(&node).unwrap();
    assert_eq!(wallet.height(), Some(height_before));
    node.reconsider_block(&tip).unwrap();
    assert_eq!(node.tip().unwrap(), (height_before + 1, tip));
    wallet.sync(&node).unwrap();
    assert!(
        wallet.coins().all(|c| c.height.is_some()),
        "everything confirmed again"
    );
}

#[test]
fn btcd_rejects_a_bad_block_with_its_reason() {
    let node = BtcdNode::start().unwrap();
    let hash = node.generate(1).unwrap()[0];
    let mut block = node.get_block(&hash).unwrap();
    node.submit_block(&block)
        .expect("a known block counts as accepted");

    // A child of the tip whose coinbase claims more than the subsidy.
    block.header.prev_blockhash = hash;
    block.header.time += 1;
    block.txdata[0].output[0].value = Amount::from_sat(51 * 100_000_000);
    block.header.merkle_root = block.compute_merkle_root().unwrap();
    while block.header.validate_pow(block.header.target()).is_err() {
        block.header.nonce += 1;
    }
    let err = format!("{:#}", node.submit_block(&block).unwrap_err());
    assert!(
        err.contains("rejected") && err.contains("coinbase"),
        "{err}"
    );
    assert_eq!(node.tip().unwrap(), (1, hash));
}
