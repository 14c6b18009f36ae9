//! Test-only: one step run between two reads of an answer, to put a commit
//! or a reorg exactly in the window whose safety the order of those reads
//! is meant to ensure. Real commits race answers only for microseconds,
//! too briefly to hit from outside. Compiled only into the crate's tests.

use std::cell::RefCell;

thread_local! {
    static NEXT_WINDOW: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

/// Runs `step` the next time an answer on this thread passes a [`window`].
pub(crate) fn at_next_window(step: impl FnOnce() + 'static) {
    NEXT_WINDOW.with(|next| *next.borrow_mut() = Some(Box::new(step)));
}

/// A point between two reads of one answer that a concurrent commit or
/// reorg may fall into.
pub(crate) fn window() {
    if let Some(step) = NEXT_WINDOW.with(|next| next.borrow_mut().take()) {
        step();
    }
}

/// Whether a step is still waiting for its window: a test checks that the
/// answer it asked for went through one.
pub(crate) fn step_pending() -> bool {
    NEXT_WINDOW.with(|next| next.borrow().is_some())
}

mod tests {
    use super::*;
    use crate::tracker::tests::{funded_node, tracking};
    use crate::Tracker;
    use bitcoin::{Amount, Txid};
    use osprey_answers::{Balance, Error};
    use osprey_core::{Height, ScriptHash};
    use osprey_testenv::{submit_block_on, Node, ScriptKind};
    use std::sync::{Arc, Mutex};

    /// Arms the next window with one round of the tracker: the index
    /// catches up with the node (a commit, or a reorg) and the mempool
    /// follows.
    fn update_at_next_window(tracker: &Arc<Mutex<Tracker>>) {
        let tracker = Arc::clone(tracker);
        at_next_window(move || {
            tracker
                .lock()
                .expect("tracker lock")
                .update(&mut |_| {})
                .expect("tracker update");
        });
    }

    /// A payment in the mempool, then mined by the node; the commit of its
    /// block and the mempool update that drops it come in the middle of an
    /// answer about the payee. Each answer must see the payment exactly
    /// once, and confirmed: the mempool was read before the commit, the
    /// chain after it. Read the other way round, the payment is in neither.
    #[test]
    fn script_answers_racing_a_commit_see_a_payment_once() {
        let (node, mut wallet, payee) = funded_node();
        let scripthash = ScriptHash::from_script(payee.as_bytes());
        let (_dir, query, tracker) = tracking(&node);
        let tracker = Arc::new(Mutex::new(tracker));
        let amount = Amount::from_sat(100_000);

        // One payment per kind of answer, each mined into its own block.
        let mut paid: Vec<(Txid, i64)> = Vec::new();
        for (round, answer) in ["history", "balance", "unspent"].into_iter().enumerate() {
            let tx = wallet.send(payee.clone(), amount).expect("paying");
            let txid = node.send_raw_transaction(&tx).expect("broadcast");
            tracker.lock().unwrap().update(&mut |_| {}).expect("update");
            assert_eq!(
                query.mempool_history(&scripthash).expect("mempool").len(),
                1,
                "{answer}: the payment is in the mempool"
            );
            node.generate(1).expect("mining");
            let height = 106 + round as i64;
            paid.push((txid, height));
            let confirmed = amount.to_sat() * (round as u64 + 1);

            update_at_next_window(&tracker);
            match answer {
                "history" => {
                    let history = query.history(&scripthash).expect("history");
                    let seen: Vec<_> = history.iter().map(|e| (e.txid, e.height)).collect();
                    assert_eq!(seen, paid, "history");
                }
                "balance" => assert_eq!(
                    query.balance(&scripthash).expect("balance"),
                    Balance {
                        confirmed,
                        unconfirmed: 0
                    }
                ),
                _ => {
                    let utxos = query.unspent(&scripthash).expect("unspent");
                    let seen: Vec<_> = utxos
                        .iter()
                        .map(|u| (u.txid, i64::from(u.height)))
                        .collect();
                    assert_eq!(seen, paid, "unspent");
                }
            }
            assert!(!step_pending(), "{answer}: the commit came mid-answer");
        }
    }

    /// A confirmed output whose spender is in the mempool, then mined by
    /// the node; the commit and the mempool update come in the middle of
    /// the outpoint's answer (1.7). The answer must name the spender,
    /// confirmed: the mempool was read before the commit, the chain after
    /// it. Read the other way round, the output is answered unspent.
    #[test]
    fn an_outpoint_answer_racing_a_commit_sees_its_spender() {
        let (node, mut wallet, _) = funded_node();
        // Not a witness script: btcd's regtest has no segwit at this height.
        let payee = wallet.new_script(ScriptKind::P2pkh);
        let (_dir, query, tracker) = tracking(&node);
        let tracker = Arc::new(Mutex::new(tracker));

        let funding = wallet
            .send(payee.clone(), Amount::from_sat(100_000))
            .expect("paying");
        let funding_txid = node.send_raw_transaction(&funding).expect("broadcast");
        node.generate(1).expect("mining");
        wallet.sync(&node).expect("wallet sync");
        let outpoint = wallet
            .coins()
            .find(|c| c.outpoint.txid == funding_txid && c.spend.txout.script_pubkey == payee)
            .expect("the payment is a coin of the wallet")
            .outpoint;
        let spender = wallet
            .spend(&[outpoint], &[(payee, Amount::from_sat(90_000))])
            .expect("spending the payment");
        let spender_txid = node.send_raw_transaction(&spender).expect("broadcast");
        tracker.lock().unwrap().update(&mut |_| {}).expect("update");
        let before = query.outpoint_status(&outpoint, None).expect("status");
        assert_eq!(before.status.height, Some(106));
        assert_eq!(
            before.status.spender,
            Some((spender_txid, 0)),
            "in the mempool"
        );

        node.generate(1).expect("mining the spender");
        update_at_next_window(&tracker);
        let answer = query.outpoint_status(&outpoint, None).expect("status");
        assert!(!step_pending(), "the commit came mid-answer");
        assert_eq!(answer.status.height, Some(106));
        assert_eq!(
            answer.status.spender,
            Some((spender_txid, 107)),
            "the spender, confirmed"
        );
    }

    /// A confirmed payment whose block a reorg replaces, in the middle of
    /// a request for its merkle proof, by two blocks without it: the
    /// payment's number now belongs to the second block's coinbase. The
    /// answer must be "not found", never a proof of that coinbase.
    #[test]
    fn a_merkle_proof_racing_a_reorg_is_never_of_another_transaction() {
        let (node, mut wallet, payee) = funded_node();
        let node = Arc::new(node);
        let (_dir, query, tracker) = tracking(&node);
        let tracker = Arc::new(Mutex::new(tracker));

        let tx = wallet
            .send(payee, Amount::from_sat(100_000))
            .expect("paying");
        let txid = node.send_raw_transaction(&tx).expect("broadcast");
        let mined = node.generate(1).expect("mining")[0];
        tracker.lock().unwrap().update(&mut |_| {}).expect("update");
        let proof = query.merkle(&txid, Height(106)).expect("a proof");
        assert_eq!((proof.block_height.0, proof.pos), (106, 1));

        let reorg_node = Arc::clone(&node);
        let reorg_tracker = Arc::clone(&tracker);
        let reorg_query = Arc::clone(&query);
        at_next_window(move || {
            let parent = reorg_node.block_hash(105).expect("block 105");
            reorg_node
                .invalidate_block(&mined)
                .expect("invalidateblock");
            let first = submit_block_on(&*reorg_node, parent, vec![], 1).block_hash();
            submit_block_on(&*reorg_node, first, vec![], 2);
            reorg_tracker
                .lock()
                .expect("tracker lock")
                .update(&mut |_| {})
                .expect("tracker follows the reorg");
            assert_eq!(reorg_query.tip().0 .0, 107, "the index follows the reorg");
        });
        let answer = query.merkle(&txid, Height(106));
        assert!(!step_pending(), "the reorg came mid-answer");
        assert!(
            matches!(answer, Err(Error::TxNotFound(t)) if t == txid),
            "{answer:?}"
        );
    }
}
