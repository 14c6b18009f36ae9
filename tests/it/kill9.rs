//! SIGKILL during the initial sync, several times, at seeded moments: the
//! index never ends up corrupt or partial. After the last restart, every
//! answer about the chaingen wallet equals the manifest's expected answers
//! and a fresh index's, and a sample of other scripts answers like the node
//! and the fresh index.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::answers::{
    assert_answers_match_node, assert_chain_matches_node, assert_same_answers, collect_chain,
};
use crate::common::command::{generate_chain, index_digest, sp_record_bytes, submit_chain};
use crate::common::osprey::Osprey;
use crate::common::{
    collect_answers, scripthash, seed, start_btcd, wallet_and_sampled_scripts, NodeView,
    OspreyConfig, Rng, SYNC_TIMEOUT,
};

/// Height of the generated chain: past 2000 blocks, so the initial sync
/// commits more than one batch and a kill can land between commits.
const CHAIN_BLOCKS: u32 = 2300;

/// Scripts besides the wallet's whose answers are compared.
const SAMPLE_SCRIPTS: usize = 150;

/// Kill moments after each start; seeded jitter is added.
const KILL_AFTER_MS: [u64; 4] = [50, 200, 500, 1200];

/// The lines of the log written since byte `marker` that tell how far a
/// run got: committed batches, flat files cut back, serving.
fn progress_since(osprey: &Osprey, marker: usize) -> Vec<String> {
    let log = osprey.log();
    log[marker.min(log.len())..]
        .lines()
        .filter(|l| {
            [
                "indexed height",
                "osprey_store",
                "serving Electrum",
                "block source:",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .map(|l| {
            l.split_once("osprey")
                .map_or(l, |(_, rest)| rest)
                .to_string()
        })
        .collect()
}

/// A btcd holding `osprey chaingen --preset tiny --blocks 2300` of a seed
/// derived from `seed`, and the chain's manifest.
fn btcd_with_chain(dir: &Path, seed: u64) -> (osprey_testenv::BtcdNode, osprey_chaingen::Manifest) {
    let chain_seed = (seed % 1000).to_string();
    let blocks = CHAIN_BLOCKS.to_string();
    let (chain, manifest) = generate_chain(
        dir,
        &[
            "--preset",
            "tiny",
            "--seed",
            &chain_seed,
            "--blocks",
            &blocks,
        ],
    );
    let node = start_btcd();
    submit_chain(dir, &chain, &node);
    (node, manifest)
}

/// How a killed run ends: after a delay, or the moment its next commit
/// starts, seen as the flat headers file growing (the flat files are
/// written and synced just before the database commit that covers them:
/// the kill lands between the two, or just after); or, when the index is
/// at the tip already, once it serves.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KillAt {
    After(Duration),
    Commit,
}

/// Size of the headers flat file under `db` (0 when it does not exist). A
/// kill trigger only: the test never reads Osprey's index.
fn headers_file_len(db: &Path) -> u64 {
    std::fs::metadata(db.join("regtest").join("headers.dat")).map_or(0, |m| m.len())
}

/// Starts osprey on `db` with `config`, SIGKILLs it at `when`, and prints
/// how far it got.
pub(crate) fn start_and_kill(
    node: &dyn osprey_testenv::Node,
    db: &Path,
    config: &OspreyConfig,
    when: KillAt,
) {
    let mut osprey = Osprey::spawn(node, db, config.clone());
    let marker = osprey.log().len();
    match when {
        KillAt::After(delay) => {
            if let Some(status) = osprey.run_for(delay) {
                panic!(
                    "osprey exited with {status} during its initial sync; log:\n{}",
                    osprey.log_tail(80)
                );
            }
        }
        KillAt::Commit => {
            // The file may first be cut back (a killed commit): wait until
            // it grows past the smallest size seen.
            let mut low = headers_file_len(db);
            let started = std::time::Instant::now();
            for tick in 0u64.. {
                let len = headers_file_len(db);
                if len > low {
                    break;
                }
                low = low.min(len);
                // An earlier run may have reached the tip already (the
                // index builds fast): then no commit comes until a new
                // block, and the kill lands while it serves instead.
                if tick % 20 == 0
                    && osprey
                        .log()
                        .get(marker..)
                        .is_some_and(|l| l.contains("serving Electrum"))
                {
                    break;
                }
                assert!(
                    osprey.is_running(),
                    "osprey exited during its initial sync; log:\n{}",
                    osprey.log_tail(80)
                );
                assert!(
                    started.elapsed() < SYNC_TIMEOUT,
                    "no commit within {SYNC_TIMEOUT:?}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let uptime = osprey.uptime();
    osprey.kill9();
    eprintln!(
        "killed at {when:?} after {uptime:?} with {} header bytes on disk; log: {:?}",
        headers_file_len(db),
        progress_since(&osprey, marker)
    );
}

/// 1. Generate a chain with `osprey chaingen --preset tiny --blocks 2300`
///    (the seed is printed; replay with OSPREY_IT_SEED) and feed it to
///    btcd with `osprey chaingen submit`.
/// 2. Start the reference osprey F on its own --db-dir; it indexes in the
///    background meanwhile.
/// 3. Start osprey K on another --db-dir and SIGKILL it, restarting each
///    time on the same directory: after 50 ms (plus seeded jitter), twice
///    the moment a commit starts writing (the chain needs two batches), then
///    after 200, 500 and 1200 ms.
/// 4. Start K a last time and wait until it serves the tip.
/// 5. For every wallet address of the manifest: K's history equals the
///    manifest's, its confirmed balance and unspent count too.
/// 6. For the wallet's scripts and a seeded sample of other scripts, K's
///    answers equal the node's and F's exactly; the headers too.
#[test]
fn sigkill_during_initial_sync_leaves_a_consistent_index() {
    sigkill_during_initial_sync("kill9", &[]);
}

/// The same with silent payments on (`--silent-payments`): the chain has
/// eligible transactions (chaingen's signed P2WPKH, P2PKH and taproot
/// spends paying taproot outputs), and after the kills K's index, records
/// included, has the digest of F's.
#[test]
fn sigkill_during_initial_sync_with_silent_payments_leaves_a_consistent_index() {
    sigkill_during_initial_sync("kill9_sp", &["--silent-payments"]);
}

/// The kill test of `osprey serve` with the flags `extra`; with silent
/// payments on, the killed and the fresh index end with the same digest.
fn sigkill_during_initial_sync(seed_name: &str, extra: &[&str]) {
    let config = OspreyConfig::with_args(extra);
    let seed = seed(seed_name);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let (node, manifest) = btcd_with_chain(dir.path(), seed);
    let (tip, _) = osprey_testenv::Node::tip(&node).expect("tip");
    assert_eq!(tip, manifest.tip_height, "the node has the whole chain");
    // 2.
    let fresh_db = dir.path().join("db-fresh");
    let mut reference = Osprey::spawn(&node, &fresh_db, config.clone());
    // 3.
    let db = dir.path().join("db-killed");
    let jitter =
        |rng: &mut Rng, ms: u64| KillAt::After(Duration::from_millis(ms + rng.below(ms / 2 + 1)));
    let plan = [
        jitter(&mut rng, KILL_AFTER_MS[0]),
        KillAt::Commit,
        KillAt::Commit,
        jitter(&mut rng, KILL_AFTER_MS[1]),
        jitter(&mut rng, KILL_AFTER_MS[2]),
        jitter(&mut rng, KILL_AFTER_MS[3]),
    ];
    for when in plan {
        start_and_kill(&node, &db, &config, when);
    }
    // 4.
    let mut killed = Osprey::spawn(&node, &db, config.clone());
    let marker = killed.log().len();
    killed.wait_ready(&node);
    eprintln!("last start: {:?}", progress_since(&killed, marker));
    reference.wait_ready(&node);

    // 5.
    let mut session = killed.session();
    session.negotiate(json!("1.4"));
    for address in &manifest.wallet.addresses {
        let p = json!([address.scripthash]);
        let history = session.call("blockchain.scripthash.get_history", p.clone());
        let want: Vec<Value> = address
            .history
            .iter()
            .map(|(txid, height)| json!({"tx_hash": txid, "height": height}))
            .collect();
        assert_eq!(
            history,
            Value::Array(want),
            "history of wallet address {}",
            address.address
        );
        let balance = session.call("blockchain.scripthash.get_balance", p.clone());
        assert_eq!(
            balance,
            json!({"confirmed": address.balance, "unconfirmed": 0}),
            "balance of {}",
            address.address
        );
        let unspent = session.call("blockchain.scripthash.listunspent", p);
        assert_eq!(
            unspent.as_array().map(Vec::len),
            Some(address.utxo_count as usize),
            "utxos of {}",
            address.address
        );
    }

    // 6.
    let view = NodeView::load(&node);
    let scripts = wallet_and_sampled_scripts(&manifest, &view, &mut rng, SAMPLE_SCRIPTS);
    let scripthashes: Vec<String> = scripts.iter().map(|s| scripthash(s)).collect();
    let answers_killed = collect_answers(killed.addr(), &scripthashes);
    assert_answers_match_node(
        "osprey killed and restarted",
        &answers_killed,
        &view,
        &scripts,
    );
    let answers_fresh = collect_answers(reference.addr(), &scripthashes);
    assert_same_answers(
        "killed-and-restarted vs fresh index",
        &answers_killed,
        &answers_fresh,
    );
    let chain_killed = collect_chain(killed.addr());
    assert_chain_matches_node("osprey killed and restarted", &chain_killed, &view);
    assert_eq!(
        chain_killed,
        collect_chain(reference.addr()),
        "headers of the killed and the fresh index"
    );
    if extra.contains(&"--silent-payments") {
        assert!(
            sp_record_bytes(&db) > 0,
            "the chain has eligible transactions"
        );
        killed.terminate();
        reference.terminate();
        let digests = [&db, &fresh_db].map(|db| index_digest(&node, dir.path(), db, extra));
        assert_eq!(
            digests[0], digests[1],
            "killed and fresh index, silent-payment records included"
        );
    }
}

/// Kills of the soak run by default; `OSPREY_SOAK_KILLS=100` for the long
/// soak (a few seconds a kill).
const SOAK_KILLS_DEFAULT: u64 = 6;

/// Where a soak kill lands.
#[derive(Clone, Copy, Debug)]
enum SoakMoment {
    /// During an initial sync from nothing (the index is deleted first).
    InitialSync,
    /// While it catches up on this many blocks mined while it was down.
    CatchUp(u32),
    /// While it connects blocks mined as it follows the tip.
    NewBlocks(u32),
    /// While it follows a reorg of this depth to a longer branch.
    Reorg(u32),
}

/// The kill -9 soak: SIGKILL `osprey serve` again and again on one index,
/// at seeded moments of an initial sync, of catching up on blocks mined
/// while it was down, of following new blocks, and of following reorgs (1
/// to 3 blocks deep, to a longer branch). After every kill, `osprey index --digest` restarts it on the
/// same directory up to the node's tip: its digest must equal that of a
/// fresh index of the same chain, built from nothing. The seed is printed
/// (replay with OSPREY_IT_SEED); `OSPREY_SOAK_KILLS` sets the number of
/// kills.
#[test]
fn kill9_soak_every_restart_equals_a_fresh_index() {
    kill9_soak("kill9_soak", &[]);
}

/// The soak with silent payments on: the restarted index's records
/// (appended before each tip, cut back on open and on reorgs) are a fresh
/// index's too. Its LSM scale (every size divided by 256) makes the
/// initial sync's bulk load write a run every 1 MiB of rows, so kills land
/// between runs, while one is written and during the merge.
#[test]
fn kill9_soak_with_silent_payments_every_restart_equals_a_fresh_index() {
    kill9_soak(
        "kill9_soak_sp",
        &["--silent-payments", "--lsm-scale", "256"],
    );
}

/// The soak with the flags `extra`, for `osprey serve` and `osprey index`.
fn kill9_soak(seed_name: &str, extra: &[&str]) {
    use osprey_testenv::submit_block_on;
    use osprey_testenv::Node as _;
    let config = OspreyConfig::with_args(extra);
    let seed = seed(seed_name);
    let mut rng = Rng::new(seed);
    let kills: u64 = std::env::var("OSPREY_SOAK_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SOAK_KILLS_DEFAULT);
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, _manifest) = btcd_with_chain(dir.path(), seed);
    let db = dir.path().join("db-soak");
    let mut fresh_digests: std::collections::HashMap<String, String> = Default::default();
    let mut moments = Vec::new();
    for kill in 0..kills {
        let moment = match (kill, rng.below(4)) {
            (0, _) | (_, 0) => SoakMoment::InitialSync,
            (_, 1) => SoakMoment::CatchUp(10 + rng.below(50) as u32),
            (_, 2) => SoakMoment::NewBlocks(1 + rng.below(3) as u32),
            _ => SoakMoment::Reorg(1 + rng.below(3) as u32),
        };
        let delay = Duration::from_millis(match moment {
            SoakMoment::InitialSync => rng.below(1500),
            _ => rng.below(400),
        });
        match moment {
            SoakMoment::InitialSync => {
                let _ = std::fs::remove_dir_all(&db);
            }
            SoakMoment::CatchUp(n) => {
                node.generate(n).expect("mining");
            }
            _ => {}
        }
        let mut osprey = Osprey::spawn(&node, &db, config.clone());
        match moment {
            SoakMoment::InitialSync | SoakMoment::CatchUp(_) => {}
            SoakMoment::NewBlocks(n) => {
                osprey.wait_ready(&node);
                node.generate(n).expect("mining");
            }
            SoakMoment::Reorg(depth) => {
                osprey.wait_ready(&node);
                // btcd answers nothing about blocks off its best chain, so
                // the old branch is invalidated first, then the new one
                // (longer by one) is built: a block of our own, so that it
                // differs from the old one, then mined blocks.
                let (tip, _) = node.tip().expect("tip");
                let first_stale = node.block_hash(tip - depth + 1).expect("fork point");
                node.invalidate_block(&first_stale)
                    .expect("invalidateblock");
                let (fork, parent) = node.tip().expect("tip");
                assert_eq!(fork, tip - depth);
                submit_block_on(&node, parent, vec![], kill as u32);
                node.generate(depth).expect("mining the new branch");
                assert_eq!(
                    node.tip().expect("tip").0,
                    tip + 1,
                    "the new branch is longer"
                );
            }
        }
        if let Some(status) = osprey.run_for(delay) {
            panic!("osprey exited with {status}; log:\n{}", osprey.log_tail(80));
        }
        osprey.kill9();
        let (height, hash, digest) = index_digest(&node, dir.path(), &db, extra);
        let fresh = fresh_digests.entry(hash.clone()).or_insert_with(|| {
            let fresh_db = dir.path().join(format!("db-fresh-{kill}"));
            let (fresh_height, fresh_hash, digest) =
                index_digest(&node, dir.path(), &fresh_db, extra);
            assert_eq!(
                (fresh_height, &fresh_hash),
                (height, &hash),
                "the node moved"
            );
            let _ = std::fs::remove_dir_all(&fresh_db);
            digest
        });
        eprintln!(
            "kill {kill}: {moment:?} after {delay:?}; restarted at {height}: digest {digest}"
        );
        assert_eq!(
            &digest, fresh,
            "kill {kill} ({moment:?} after {delay:?}, seed {seed}): the restarted index at \
             {height} {hash} differs from a fresh one; earlier kills: {moments:?}"
        );
        moments.push((moment, delay));
    }
    if extra.contains(&"--silent-payments") {
        assert!(
            sp_record_bytes(&db) > 0,
            "the chain has eligible transactions"
        );
    }
    eprintln!("{kills} kills, 0 mismatches");
}
