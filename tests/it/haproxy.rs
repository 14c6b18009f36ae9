//! `contrib/haproxy.cfg` run by a real HAProxy (Debian's) in front of a
//! writer and two read-only replicas on one index, against btcd: wallets
//! from many addresses are spread over the three, each address always
//! reaching the same one (`balance source`), and every wallet's answers
//! through HAProxy equal the writer's own across a block and a reorg. A
//! replica killed is taken out by the `server.ping` health check and its
//! wallets go to the others.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bitcoin::{Amount, ScriptBuf};
use osprey_testenv::{burn_script, mining_address, submit_block_on, Node, ScriptKind, TestWallet};
use serde_json::json;

use crate::common::answers::{answers_on, wait_answers_match_node, ScriptAnswers};
use crate::common::osprey::free_port;
use crate::common::{scripthash, start_btcd, NodeView, Osprey, OspreyConfig, Session};
use crate::proxy::{connect_from, Haproxy, PROXY_SOURCE};

/// The file under test.
const CONTRIB_CONFIG: &str = include_str!("../../contrib/haproxy.cfg");
/// The wallets' addresses: 127.0.0.10 to 127.0.0.69.
const WALLETS: std::ops::Range<u8> = 10..70;
/// How long HAProxy, the servers and their health checks get to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

fn wallet_address(n: u8) -> String {
    format!("127.0.0.{n}")
}

/// `contrib/haproxy.cfg` with the test's ports: the frontend on `front`,
/// the servers at `servers` (writer, replica1, replica2), connected to
/// from [`PROXY_SOURCE`] (the harness itself connects from 127.0.0.1,
/// without a header).
fn config_for(front: SocketAddr, servers: [SocketAddr; 3]) -> String {
    let mut config = CONTRIB_CONFIG.to_string();
    let mut swap = |from: &str, to: String| {
        assert!(config.contains(from), "contrib/haproxy.cfg has no {from:?}");
        config = config.replace(from, &to);
    };
    swap("bind :50001", format!("bind {front}"));
    // Health checks' verdicts in HAProxy's log, which a failing test prints.
    swap(
        "global\n",
        "global\n    log stderr format short local0 info\n".to_string(),
    );
    swap(
        "defaults\n",
        "defaults\n    log global\n    option log-health-checks\n".to_string(),
    );
    for (port, addr) in [50011, 50012, 50013].into_iter().zip(servers) {
        swap(&format!("127.0.0.1:{port}"), addr.to_string());
    }
    swap(
        "default-server check",
        format!("default-server source {PROXY_SOURCE} check"),
    );
    config
}

/// A session through HAProxy at `front` from wallet address `n`.
fn session_from(n: u8, front: SocketAddr) -> Session {
    Session::from_stream(connect_from(&wallet_address(n), front)).expect("a session")
}

/// Which server wallet `n` reaches through `front` (its banner), `None`
/// when HAProxy closes the connection (its server was just killed).
fn server_of(n: u8, front: SocketAddr) -> Option<String> {
    let mut session = session_from(n, front);
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "server.banner", "params": []});
    session.send_line(line.to_string().as_bytes()).ok()?;
    let answer = session.read_message_within(SETTLE_TIMEOUT).ok()??;
    answer["result"].as_str().map(str::to_string)
}

/// Which server each wallet reaches.
fn servers_of_wallets(front: SocketAddr) -> Option<BTreeMap<u8, String>> {
    WALLETS.map(|n| Some((n, server_of(n, front)?))).collect()
}

/// Waits until every wallet's answers through `front` equal `expected`
/// (the writer's own): a replica may take a poll longer to see a mempool.
fn assert_wallets_answer(
    what: &str,
    front: SocketAddr,
    scripts: &[ScriptBuf],
    expected: &[ScriptAnswers],
) {
    let scripthashes: Vec<String> = scripts.iter().map(|s| scripthash(s)).collect();
    for n in WALLETS {
        let mut last = Vec::new();
        let agreed = wait_until_or_none(SETTLE_TIMEOUT, || {
            last = answers_on(session_from(n, front), &scripthashes);
            (last == expected).then_some(())
        });
        if agreed.is_none() {
            for (got, want) in last.iter().zip(expected) {
                assert_eq!(
                    got, want,
                    "{what}: wallet {n} through HAProxy and the writer differ"
                );
            }
        }
    }
}

/// Polls `check` every 50 ms for up to `timeout`.
fn wait_until_or_none<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a server with `banner` and the PROXY protocol from HAProxy.
fn start_server(node: &dyn Node, db: &Path, dir: &Path, banner: &str, replica: bool) -> Osprey {
    let mut config = if replica {
        let tmp = dir.join(format!("{banner}-tmp"));
        std::fs::create_dir_all(&tmp).expect("a TMPDIR");
        OspreyConfig::read_only(&dir.join(format!("{banner}.log")), &tmp)
    } else {
        OspreyConfig::default()
    };
    config.args.extend(
        [
            "--banner",
            banner,
            "--proxy-protocol-from",
            &format!("{PROXY_SOURCE}/32"),
        ]
        .map(str::to_string),
    );
    Osprey::start(node, db, config)
}

/// 1. btcd with 110 blocks and a block paying S1 and S2; the writer W and
///    replicas R1, R2 on one index, each with its banner; HAProxy with
///    `contrib/haproxy.cfg` in front of them.
/// 2. Sixty wallet addresses reach all three servers, each address the
///    same server every time.
/// 3. Every wallet's answers through HAProxy equal W's own.
/// 4. A block pays S1 again: the same.
/// 5. A reorg double-spends that payment: the same.
/// 6. R1 killed: the health check takes it out, its wallets reach W or R2,
///    and every wallet's answers still equal W's.
#[test]
fn haproxy_spreads_wallets_over_a_writer_and_two_replicas() {
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let s1 = wallet.new_script(ScriptKind::P2wpkh);
    let s2 = wallet.new_script(ScriptKind::P2tr);
    let tx = wallet
        .send_many(&[
            (s1.clone(), Amount::from_sat(1_500_000)),
            (s2.clone(), Amount::from_sat(700_000)),
        ])
        .expect("paying S1 and S2");
    node.send_raw_transaction(&tx).expect("broadcast");
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    let mut scripts = vec![s1.clone(), s2, mining_address().script_pubkey()];

    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let writer = start_server(&node, &db, dir.path(), "writer", false);
    let mut r1 = start_server(&node, &db, dir.path(), "replica1", true);
    let r2 = start_server(&node, &db, dir.path(), "replica2", true);
    let front: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    let haproxy = Haproxy::with_config(
        dir.path(),
        &config_for(front, [writer.addr(), r1.addr(), r2.addr()]),
        &[front],
    );

    // 2.
    let routes = servers_of_wallets(front).unwrap_or_else(|| {
        panic!(
            "a wallet is not served; HAProxy's log:\n{}",
            haproxy.log_text()
        )
    });
    let used: BTreeSet<&String> = routes.values().collect();
    assert_eq!(
        used.len(),
        3,
        "sixty wallets reach all three servers: {routes:?}"
    );
    for _ in 0..2 {
        assert_eq!(
            servers_of_wallets(front).as_ref(),
            Some(&routes),
            "a wallet's address always reaches the same server"
        );
    }
    eprintln!("wallets by server: {routes:?}");

    // 3.
    let writer_answers = |scripts: &[ScriptBuf]| {
        wait_answers_match_node(
            "W",
            writer.addr(),
            &NodeView::load(&node),
            scripts,
            SETTLE_TIMEOUT,
        )
    };
    assert_wallets_answer("after a block", front, &scripts, &writer_answers(&scripts));

    // 4.
    let tx = wallet
        .send_many(&[(s1.clone(), Amount::from_sat(300_000))])
        .expect("paying S1 again");
    node.send_raw_transaction(&tx).expect("broadcast");
    let mined = node.generate(1).expect("mining")[0];
    assert_wallets_answer(
        "after a block paying S1",
        front,
        &scripts,
        &writer_answers(&scripts),
    );

    // 5.
    node.invalidate_block(&mined).expect("invalidateblock");
    let (_, parent) = node.tip().expect("tip");
    let mut other = TestWallet::new();
    other.sync(&node).expect("wallet sync");
    let double_spend = other
        .spend(
            &[tx.input[0].previous_output],
            &[(burn_script(3), Amount::from_sat(1_000_000))],
        )
        .expect("a double spend of S1's payment");
    submit_block_on(&node, parent, vec![double_spend], 1);
    node.generate(2).expect("mining the new branch");
    scripts.push(burn_script(3));
    assert_wallets_answer("after a reorg", front, &scripts, &writer_answers(&scripts));

    // 6.
    r1.kill9();
    let rerouted = wait_until_or_none(SETTLE_TIMEOUT, || {
        servers_of_wallets(front).filter(|now| now.values().all(|server| server != "replica1"))
    })
    .unwrap_or_else(|| {
        panic!(
            "replica1's wallets still reach it (or nothing) {SETTLE_TIMEOUT:?} after its death; HAProxy's log:\n{}",
            haproxy.log_text()
        )
    });
    for (n, server) in &routes {
        if server != "replica1" {
            assert_eq!(
                &rerouted[n], server,
                "wallet {n} moved though its server lives"
            );
        }
    }
    assert_wallets_answer(
        "after replica1's death",
        front,
        &scripts,
        &writer_answers(&scripts),
    );
    drop(r2);
}
