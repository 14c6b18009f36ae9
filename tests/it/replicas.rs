//! Read-only replicas (`osprey serve --read-only`) on the index a writer
//! (`osprey serve`) keeps, against btcd: they answer what the writer
//! answers through new blocks and a reorg, their subscribers hear of a new
//! block within 1 s of the writer's, a late one catches up, a killed one
//! takes nothing else down, and none writes anything in the index's
//! directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use bitcoin::{Amount, BlockHash, ScriptBuf, Transaction};
use osprey_testenv::{
    burn_script, mining_address, submit_block_on, BitcoindNode, BitcoindOptions, Node, ScriptKind,
    TestWallet,
};
use serde_json::{json, Value};

use crate::common::answers::{assert_chain_matches_node, assert_same_answers, collect_chain};
use crate::common::answers::{wait_answers_match_node, ScriptAnswers};
use crate::common::{scripthash, start_btcd, NodeView, Osprey, OspreyConfig, Session};

/// How much later than the writer's a replica's subscriber may hear of a
/// new block (issue 37).
const REPLICA_DELAY_MAX: Duration = Duration::from_secs(1);
/// How long a subscriber waits for a notification before the test fails.
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long servers get to agree with the node (its mempool is polled).
const AGREE_TIMEOUT: Duration = Duration::from_secs(60);

/// A replica of the index in `db`, logging to `name`.log in `dir` and
/// keeping its RocksDB secondary directory in `dir/name-tmp`.
fn start_replica(node: &dyn Node, db: &Path, dir: &Path, name: &str) -> Osprey {
    let tmp = dir.join(format!("{name}-tmp"));
    std::fs::create_dir_all(&tmp).expect("creating the replica's TMPDIR");
    Osprey::start(
        node,
        db,
        OspreyConfig::read_only(&dir.join(format!("{name}.log")), &tmp),
    )
}

/// Waits until every server's answers about `scripts` equal the node's
/// view and its chain the node's, then asserts they equal each other's.
fn assert_all_agree(
    what: &str,
    node: &dyn Node,
    servers: &[(&str, SocketAddr)],
    scripts: &[ScriptBuf],
) {
    let view = NodeView::load(node);
    let mut first: Option<(&str, Vec<ScriptAnswers>)> = None;
    for (name, addr) in servers {
        let answers = wait_answers_match_node(
            &format!("{what}: {name}"),
            *addr,
            &view,
            scripts,
            AGREE_TIMEOUT,
        );
        assert_chain_matches_node(&format!("{what}: {name}"), &collect_chain(*addr), &view);
        match &first {
            None => first = Some((name, answers)),
            Some((first_name, first_answers)) => assert_same_answers(
                &format!("{what}: {first_name} and {name}"),
                first_answers,
                &answers,
            ),
        }
    }
}

/// The notifications of a session subscribed to the headers and to some
/// scripts, read by a thread and kept with the instant each arrived.
struct Subscriber {
    arriving: mpsc::Receiver<(Instant, Value)>,
    seen: Vec<(Instant, Value)>,
}

impl Subscriber {
    fn start(addr: SocketAddr, scripthashes: &[String]) -> Subscriber {
        let mut session = Session::connect(addr);
        session.negotiate(json!("1.4"));
        session.call("blockchain.headers.subscribe", json!([]));
        for sh in scripthashes {
            session.call("blockchain.scripthash.subscribe", json!([sh]));
        }
        let (tx, arriving) = mpsc::channel();
        // Ends when the server closes the connection (or after a long
        // silence), which drops `tx`.
        std::thread::spawn(move || {
            while let Ok(Some(message)) = session.read_message_within(NOTIFICATION_TIMEOUT * 10) {
                if tx.send((Instant::now(), message)).is_err() {
                    return;
                }
            }
        });
        Subscriber {
            arriving,
            seen: Vec::new(),
        }
    }

    /// When the first notification `wanted` accepts arrived (waiting for
    /// it if it has not yet).
    fn arrival(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Instant {
        let deadline = Instant::now() + NOTIFICATION_TIMEOUT;
        loop {
            if let Some((at, _)) = self.seen.iter().find(|(_, message)| wanted(message)) {
                return *at;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.arriving.recv_timeout(left) {
                Ok(arrived) => self.seen.push(arrived),
                Err(e) => panic!(
                    "no {what} within {NOTIFICATION_TIMEOUT:?} ({e}); seen: {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Whether the server closed the connection within `timeout`.
    fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.arriving.recv_timeout(left) {
                Ok(arrived) => self.seen.push(arrived),
                Err(mpsc::RecvTimeoutError::Disconnected) => return true,
                Err(mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }
}

/// Whether `message` notifies the headers at `height`.
fn tip_at(height: u32) -> impl Fn(&Value) -> bool {
    move |message| {
        message["method"] == json!("blockchain.headers.subscribe")
            && message["params"][0]["height"] == json!(height)
    }
}

/// Whether `message` notifies `sh`'s status as `status`.
fn status_of(sh: String, status: Value) -> impl Fn(&Value) -> bool {
    move |message| {
        message["method"] == json!("blockchain.scripthash.subscribe")
            && message["params"] == json!([sh, status])
    }
}

/// How the node's chain is reorganised in step 4: after `invalidateblock`
/// of the block that confirmed `payment`, a new branch of three blocks
/// from `parent`; returns the scripts it pays that the test should ask
/// about.
type Reorg = fn(&dyn Node, BlockHash, &Transaction) -> Vec<ScriptBuf>;

/// btcd: a block built by the test double-spends the payment (segwit is
/// not active there, so it needs no witness commitment), two more on it.
fn double_spend_branch(
    node: &dyn Node,
    parent: BlockHash,
    payment: &Transaction,
) -> Vec<ScriptBuf> {
    let mut other = TestWallet::new();
    other.sync(node).expect("wallet sync");
    let double_spend = other
        .spend(
            &[payment.input[0].previous_output],
            &[(burn_script(9), Amount::from_sat(1_000_000))],
        )
        .expect("a double spend of S1's payment");
    submit_block_on(node, parent, vec![double_spend], 1);
    node.generate(2).expect("mining the new branch");
    vec![burn_script(9)]
}

/// Bitcoin Core: three blocks mined on the parent, paying another address
/// (the same would rebuild the invalidated block); the payment, back in
/// the mempool, is mined again in the first.
fn mined_again_branch(node: &dyn Node, _: BlockHash, _: &Transaction) -> Vec<ScriptBuf> {
    let elsewhere = TestWallet::new().address(ScriptKind::P2tr);
    let mined: Vec<BlockHash> = node
        .rpc()
        .call(
            "generatetoaddress",
            &[json!(3), json!(elsewhere.to_string())],
        )
        .expect("mining the new branch");
    assert_eq!(mined.len(), 3);
    vec![elsewhere.script_pubkey()]
}

/// 1. btcd with 110 blocks; the writer W on an empty index; replica R1 on
///    W's index.
/// 2. A block pays S1 and S2: W and R1 answer the node's view, and the
///    same, about every script and every header.
/// 3. Subscribers on W and R1 (headers, S1); a block pays S1 again: each
///    hears of the new tip and S1's new status; R1's within 1 s of W's.
/// 4. A reorg (`invalidateblock`, a block that double-spends S1's payment,
///    two more on it): both hear of the new tip, and W and R1 answer like
///    the node and alike.
/// 5. Replica R2, started now, catches up and answers alike.
/// 6. R1 killed (SIGKILL): W and R2 serve on, follow a new block, and R1's
///    subscriber sees its connection closed.
#[test]
fn replicas_answer_like_the_writer_through_blocks_and_a_reorg() {
    let node = start_btcd();
    replicas_case(&node, double_spend_branch);
}

/// The same on Bitcoin Core (whose blocks the replica reads from its blk
/// files to name the scripts they touched); the reorg mines the payment
/// again on a new branch.
#[test]
fn replicas_answer_like_the_writer_on_bitcoin_core() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    replicas_case(&node, mined_again_branch);
}

fn replicas_case(node: &dyn Node, reorg: Reorg) {
    // 1.
    node.generate(110).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(node).expect("wallet sync");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let mut writer = Osprey::start(node, &db, OspreyConfig::default());
    let mut r1 = start_replica(node, &db, dir.path(), "r1");

    // 2.
    let s1 = wallet.new_script(ScriptKind::P2wpkh);
    let s2 = wallet.new_script(ScriptKind::P2pkh);
    let tx = wallet
        .send_many(&[
            (s1.clone(), Amount::from_sat(1_500_000)),
            (s2.clone(), Amount::from_sat(700_000)),
        ])
        .expect("paying S1 and S2");
    node.send_raw_transaction(&tx).expect("broadcast");
    node.generate(1).expect("mining");
    wallet.sync(node).expect("wallet sync");
    let mut scripts = vec![s1.clone(), s2.clone(), mining_address().script_pubkey()];
    writer.wait_synced(node);
    r1.wait_synced(node);
    assert_all_agree(
        "after a block",
        node,
        &[("W", writer.addr()), ("R1", r1.addr())],
        &scripts,
    );

    // 3.
    let sh1 = scripthash(&s1);
    let mut on_writer = Subscriber::start(writer.addr(), std::slice::from_ref(&sh1));
    let mut on_r1 = Subscriber::start(r1.addr(), std::slice::from_ref(&sh1));
    let tx = wallet
        .send_many(&[(s1.clone(), Amount::from_sat(300_000))])
        .expect("paying S1 again");
    node.send_raw_transaction(&tx).expect("broadcast");
    let mined = node.generate(1).expect("mining")[0];
    let (height, _) = node.tip().expect("tip");
    wallet.sync(node).expect("wallet sync");
    let at_writer = on_writer.arrival("new tip on W", tip_at(height));
    let at_r1 = on_r1.arrival("new tip on R1", tip_at(height));
    let delay = at_r1.saturating_duration_since(at_writer);
    eprintln!(
        "block {mined}: R1's subscriber heard of it {:?} after W's ({})",
        delay,
        if at_r1 < at_writer {
            "R1 first"
        } else {
            "W first"
        }
    );
    assert!(
        delay < REPLICA_DELAY_MAX,
        "R1's subscriber heard of the block {delay:?} after W's"
    );
    let status = NodeView::load(node).status(&s1);
    on_writer.arrival(
        "S1's new status on W",
        status_of(sh1.clone(), status.clone()),
    );
    on_r1.arrival("S1's new status on R1", status_of(sh1.clone(), status));
    assert_all_agree(
        "after a block paying S1",
        node,
        &[("W", writer.addr()), ("R1", r1.addr())],
        &scripts,
    );

    // 4.
    node.invalidate_block(&mined).expect("invalidateblock");
    let (_, parent) = node.tip().expect("tip");
    scripts.extend(reorg(node, parent, &tx));
    let (new_height, _) = node.tip().expect("tip");
    assert_eq!(new_height, height + 2, "the new branch is longer");
    let at_writer = on_writer.arrival("the new branch's tip on W", tip_at(new_height));
    let at_r1 = on_r1.arrival("the new branch's tip on R1", tip_at(new_height));
    eprintln!(
        "reorg: R1's subscriber heard of the new tip {:?} after W's",
        at_r1.saturating_duration_since(at_writer)
    );
    assert_all_agree(
        "after a reorg",
        node,
        &[("W", writer.addr()), ("R1", r1.addr())],
        &scripts,
    );

    // 5.
    let r2 = start_replica(node, &db, dir.path(), "r2");
    assert_all_agree(
        "a late replica",
        node,
        &[("W", writer.addr()), ("R1", r1.addr()), ("R2", r2.addr())],
        &scripts,
    );

    // 6.
    r1.kill9();
    assert!(
        on_r1.closed_within(NOTIFICATION_TIMEOUT),
        "R1's subscriber still reads after R1's death"
    );
    node.generate(1).expect("mining");
    let (height, _) = node.tip().expect("tip");
    on_writer.arrival("a new tip on W after R1's death", tip_at(height));
    assert!(writer.is_running(), "W runs on");
    assert_all_agree(
        "after R1's death",
        node,
        &[("W", writer.addr()), ("R2", r2.addr())],
        &scripts,
    );
}

/// Every file under `dir`, with its length and modification time.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)
        .expect("reading a directory")
        .flatten()
    {
        let meta = entry.metadata().expect("a file's metadata");
        if meta.is_dir() {
            found.extend(listing(&entry.path()));
        } else {
            found.push((entry.path(), meta.len(), meta.modified().expect("mtime")));
        }
    }
    found.sort();
    found
}

/// A replica on an index whose writer has stopped: it serves the index's
/// answers, and when it exits the index directory is as it was (no file
/// added, changed or removed: no lock, no admin socket, nothing cut) and
/// its RocksDB secondary directory is gone from its `TMPDIR`.
#[test]
fn a_replica_writes_nothing_in_the_index_directory() {
    let node = start_btcd();
    node.generate(110).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let script = wallet.new_script(ScriptKind::P2wpkh);
    let tx = wallet
        .send_many(&[(script.clone(), Amount::from_sat(1_000_000))])
        .expect("paying the script");
    node.send_raw_transaction(&tx).expect("broadcast");
    node.generate(1).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let mut writer = Osprey::start(&node, &db, OspreyConfig::default());
    let scripts = vec![script, mining_address().script_pubkey()];
    let view = NodeView::load(&node);
    let written = wait_answers_match_node("W", writer.addr(), &view, &scripts, AGREE_TIMEOUT);
    assert!(writer.terminate().success(), "W exits cleanly");
    let before = listing(&db);

    let mut replica = start_replica(&node, &db, dir.path(), "r");
    let read = wait_answers_match_node("R", replica.addr(), &view, &scripts, AGREE_TIMEOUT);
    assert_same_answers("W and R", &written, &read);
    assert!(
        !replica.log().contains("admin socket open"),
        "a replica opens no admin socket"
    );
    assert!(replica.terminate().success(), "R exits cleanly");
    assert_eq!(
        listing(&db),
        before,
        "the replica changed the index directory"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("r-tmp"))
        .expect("the replica's TMPDIR")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(
        left,
        Vec::<PathBuf>::new(),
        "the secondary directory is removed"
    );
}

/// A replica started before any writer created the index says so and exits.
#[test]
fn a_replica_without_an_index_says_so() {
    let node = start_btcd();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let mut replica = Osprey::spawn(
        &node,
        &db,
        OspreyConfig::read_only(&dir.path().join("r.log"), &tmp),
    );
    let status = replica
        .wait_exit(Duration::from_secs(30))
        .expect("the replica exits");
    assert!(!status.success());
    assert!(
        replica.log().contains("no index at"),
        "log:\n{}",
        replica.log_tail(20)
    );
    assert!(!db.exists(), "the replica created the index directory");
}
