//! `osprey admin`, run as a process against a running `osprey serve` on
//! btcd: each command's answer is checked against what the test did (its
//! own sessions, the node's view of a paid address, a second server added
//! as a peer, bans across restarts), the socket's mode and its lifecycle
//! (stale one replaced, a non-socket refused, removed on `stop`), and bad
//! requests on the raw socket get clear errors.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bitcoin::{Address, Amount};
use osprey_testenv::{Node, ScriptKind, TestWallet};
use serde_json::{json, Value};

use crate::common::command::{run_osprey, CommandOutput};
use crate::common::osprey::free_port;
use crate::common::{scripthash, start_btcd, wait_until, NodeView, Osprey, OspreyConfig, Session};
use crate::proxy::connect_from;

/// How long one `osprey admin` may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long what a command did may take to show.
const SETTLE: Duration = Duration::from_secs(30);

fn socket_of(db: &Path) -> PathBuf {
    db.join("regtest").join("admin.sock")
}

/// `osprey admin [--json] ARGS` with the same settings as the server.
fn admin(db: &Path, json: bool, args: &[&str], must_succeed: bool) -> CommandOutput {
    let db_arg = db.display().to_string();
    let mut line = vec!["admin", "--network", "regtest", "--db-dir", &db_arg];
    if json {
        line.push("--json");
    }
    line.extend_from_slice(args);
    let dir = db.parent().expect("the db has a parent");
    run_osprey(dir, &line, COMMAND_TIMEOUT, must_succeed)
}

fn admin_json(db: &Path, args: &[&str]) -> Value {
    let out = admin(db, true, args, true);
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "osprey admin {args:?} printed no JSON ({e}): {}",
            out.stdout
        )
    })
}

/// The session `id` in `osprey admin sessions`, if listed.
fn listed(db: &Path, id: u64) -> Option<Value> {
    admin_json(db, &["sessions"])
        .as_array()
        .expect("sessions is a list")
        .iter()
        .find(|s| s["id"] == json!(id))
        .cloned()
}

/// The id of the one listed session whose client calls itself `client`.
fn session_id(db: &Path, client: &str) -> u64 {
    wait_until("the session listed with its client name", SETTLE, || {
        let sessions = admin_json(db, &["sessions"]);
        let mine: Vec<u64> = sessions
            .as_array()?
            .iter()
            .filter(|s| s["client"] == json!(client))
            .filter_map(|s| s["id"].as_u64())
            .collect();
        (mine.len() == 1).then(|| mine[0])
    })
}

fn greet(osprey: &Osprey, client: &str) -> Session {
    let mut session = osprey.session();
    session.call("server.version", json!([client, "1.4"]));
    session
}

/// 1. btcd, 440 blocks; a P2WPKH address paid twice in two blocks, then
///    once more left in the mempool.
/// 2. Osprey serves the tip; its socket is there, mode 0660; as root, a
///    user outside its group is refused and one inside answered.
/// 3. getinfo: the version, the node's tip as both heights, no initial
///    sync, the test's session and subscription, memory; and FulcrumAdmin's
///    keys (`height`, `chain`, `genesis_hash`, `clients_connected`, `pid`).
/// 4. sessions: the test's session with its client name, protocol,
///    subscription, cost and bytes; the text form names it too.
///    peers: the configured peer, unverified (it refuses connections).
/// 5. query by address and by script hash: the node's history count,
///    balances, first and last height.
/// 6. loglevel: with `warn`, a new session's debug lines are not logged;
///    back at `debug`, the next session's are.
/// 7. kick ID closes that session only; kick ADDRESS closes every session
///    from it; a kick matching nothing fails with a clear error.
/// 8. ban closes the sessions from the address and refuses new ones with
///    an error line saying so; listbanned lists it; unban lets it in again.
/// 9. stop: the server exits 0 and removes its socket; `osprey admin`
///    then says no Osprey is running.
#[test]
fn admin_commands_answer_what_the_test_did() {
    // 1.
    let node = start_btcd();
    node.generate(440).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let script = wallet.new_script(ScriptKind::P2wpkh);
    for sats in [1_000_000, 2_000_000] {
        let tx = wallet
            .send(script.clone(), Amount::from_sat(sats))
            .expect("a payment");
        node.send_raw_transaction(&tx).expect("broadcast");
        node.generate(1).expect("mining");
        wallet.sync(&node).expect("wallet sync");
    }
    let tx = wallet
        .send(script.clone(), Amount::from_sat(300_000))
        .expect("a payment");
    node.send_raw_transaction(&tx).expect("broadcast");
    let address = Address::from_script(&script, bitcoin::Network::Regtest)
        .expect("a P2WPKH script has an address")
        .to_string();
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    // A peer that refuses connections (port 1 on loopback): listed by
    // `peers` as configured, never verified.
    let config = OspreyConfig::with_args(&["--peers", "127.0.0.1:t1"]);
    let mut osprey = Osprey::start(&node, &db, config);
    let socket = socket_of(&db);
    let meta = std::fs::metadata(&socket).expect("the admin socket exists");
    assert!(
        meta.file_type().is_socket(),
        "{} is a socket",
        socket.display()
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    refused_without_the_group(&db);
    // 3.
    let mut mine = greet(&osprey, "admin-it");
    mine.call(
        "blockchain.scripthash.subscribe",
        json!([scripthash(&script)]),
    );
    let (tip, _) = node.tip().expect("the node's tip");
    let info = wait_until("getinfo to count the subscription", SETTLE, || {
        let info = admin_json(&db, &["getinfo"]);
        (info["subscriptions"] == json!(1) && info["sessions"] == json!(1)).then_some(info)
    });
    assert_eq!(info["version"], json!(env!("CARGO_PKG_VERSION")));
    assert_eq!(info["network"], json!("regtest"));
    assert_eq!(info["index_height"], json!(tip));
    assert_eq!(info["node_height"], json!(tip));
    assert_eq!(info["initial_sync"], Value::Null, "{info}");
    assert!(
        info["resident_memory_bytes"].as_u64() > Some(1 << 20),
        "{info}"
    );
    assert!(info["uptime_seconds"].as_u64().is_some(), "{info}");
    // What RaspiBlitz reads from `FulcrumAdmin getinfo`, and the rest of
    // Fulcrum's keys Osprey has a meaning for.
    assert_eq!(info["height"], json!(tip), "{info}");
    assert_eq!(info["chain"], json!("regtest"));
    assert_eq!(
        info["genesis_hash"],
        json!(bitcoin::constants::genesis_block(bitcoin::Network::Regtest)
            .block_hash()
            .to_string())
    );
    assert_eq!(info["clients_connected"], json!(1));
    assert_eq!(info["pid"], json!(osprey.pid().expect("running")));
    let text = admin(&db, false, &["getinfo"], true).stdout;
    assert!(text.contains(&format!("index_height: {tip}")), "{text}");
    // 4.
    let id = session_id(&db, "admin-it");
    // 401 headers, 64 kB of hex: a cost of 6,400 µs by its bytes alone.
    mine.call("blockchain.block.headers", json!([0, 401]));
    let listed_mine = listed(&db, id).expect("the test's session is listed");
    assert_eq!(listed_mine["protocol"], json!("1.4"));
    assert_eq!(listed_mine["subscriptions"], json!(1));
    assert_eq!(listed_mine["listener"], json!("tcp"));
    assert!(listed_mine["address"]
        .as_str()
        .is_some_and(|a| a.starts_with("127.0.0.1:")));
    assert!(
        listed_mine["received_bytes"].as_u64() > Some(50),
        "{listed_mine}"
    );
    assert!(
        listed_mine["sent_bytes"].as_u64() > Some(50),
        "{listed_mine}"
    );
    // What its answers cost: at least their bytes (ten a microsecond),
    // halved every 10 s since, and far below a greedy session's 2,000,000.
    let cost = listed_mine["cost"].as_u64().expect("a cost");
    assert!((100..2_000_000).contains(&cost), "{listed_mine}");
    let text = admin(&db, false, &["sessions"], true).stdout;
    assert!(
        text.lines().next().is_some_and(|l| l.contains(" COST ")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("admin-it") && l.trim_start().starts_with(&id.to_string())),
        "{text}"
    );
    let peers = admin_json(&db, &["peers"]);
    let peers = peers.as_array().expect("peers is a list");
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!(peers[0]["host"], json!("127.0.0.1"));
    assert_eq!(peers[0]["tcp_port"], json!(1));
    assert_eq!(peers[0]["configured"], json!(true));
    assert_eq!(peers[0]["verified"], json!(false));
    let text = admin(&db, false, &["peers"], true).stdout;
    assert!(
        text.lines()
            .any(|l| l.starts_with("127.0.0.1") && l.contains("configured")),
        "{text}"
    );
    // 5.
    let view = NodeView::load(&node);
    let history = view.history(&script);
    let (confirmed, unconfirmed) = view.balance(&script);
    let heights: Vec<i64> = history
        .iter()
        .map(|h| h.height)
        .filter(|h| *h > 0)
        .collect();
    assert_eq!(
        (history.len(), heights.len()),
        (3, 2),
        "the test's payments"
    );
    for target in [address.as_str(), &scripthash(&script)] {
        let answer = admin_json(&db, &["query", target]);
        assert_eq!(
            answer["history"],
            json!(history.len()),
            "{target}: {answer}"
        );
        assert_eq!(answer["confirmed_balance"], json!(confirmed), "{target}");
        assert_eq!(
            answer["unconfirmed_balance"],
            json!(unconfirmed),
            "{target}"
        );
        assert_eq!(
            answer["first_height"],
            json!(heights.iter().min()),
            "{target}"
        );
        assert_eq!(
            answer["last_height"],
            json!(heights.iter().max()),
            "{target}"
        );
        assert_eq!(answer["scripthash"], json!(scripthash(&script)));
    }
    let wrong_network = admin(
        &db,
        false,
        &["query", "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"],
        false,
    );
    assert!(!wrong_network.status.success());
    assert!(
        wrong_network.stderr.contains("this server is on regtest"),
        "{}",
        wrong_network.stderr
    );
    // 6.
    assert_eq!(
        admin_json(&db, &["loglevel", "warn"]),
        json!({ "log_filter": "warn" })
    );
    let quiet = greet(&osprey, "admin-it-quiet");
    let quiet_id = session_id(&db, "admin-it-quiet");
    admin_json(&db, &["loglevel", "debug"]);
    let loud = greet(&osprey, "admin-it-loud");
    let loud_id = session_id(&db, "admin-it-loud");
    let started = |id: u64| {
        move |line: &str| line.contains("session started") && line.contains(&format!(" id={id} "))
    };
    osprey.wait_log_line("the loud session's debug line", SETTLE, started(loud_id));
    assert!(
        !osprey.log().lines().any(started(quiet_id)),
        "session {quiet_id} started under the warn filter, yet its debug line was logged"
    );
    let bad_filter = admin(&db, false, &["loglevel", "[["], false);
    assert!(
        bad_filter.stderr.contains("invalid filter"),
        "{}",
        bad_filter.stderr
    );
    // 7.
    assert_eq!(
        admin_json(&db, &["kick", &id.to_string()]),
        json!({ "kicked": [id] })
    );
    assert!(mine.closed_within(SETTLE).0, "kick closes the session");
    assert!(listed(&db, id).is_none(), "a kicked session is not listed");
    let mut others = [quiet, loud];
    for other in &mut others {
        assert!(
            !other.closed_within(Duration::from_millis(200)).0,
            "another session stays"
        );
    }
    let kicked = admin_json(&db, &["kick", "127.0.0.1"]);
    let mut both = vec![quiet_id, loud_id];
    both.sort_unstable();
    assert_eq!(kicked, json!({ "kicked": both }));
    for other in &mut others {
        assert!(other.closed_within(SETTLE).0, "kick by address closes it");
    }
    let nobody = admin(&db, false, &["kick", &id.to_string()], false);
    assert!(!nobody.status.success());
    assert!(
        nobody
            .stderr
            .contains(&format!("no session matches id {id}")),
        "{}",
        nobody.stderr
    );
    // 8.
    let mut before_ban = greet(&osprey, "admin-it-banned");
    let banned_id = session_id(&db, "admin-it-banned");
    assert_eq!(
        admin_json(&db, &["ban", "127.0.0.1"]),
        json!({ "banned": "127.0.0.1/32", "new": true, "kicked": [banned_id] })
    );
    assert!(
        before_ban.closed_within(SETTLE).0,
        "a ban closes the sessions from it"
    );
    assert_eq!(admin_json(&db, &["listbanned"]), json!(["127.0.0.1/32"]));
    let mut refused = osprey.session();
    let (closed, said) = refused.closed_within(SETTLE);
    assert!(closed, "a banned address is refused");
    assert!(
        said.iter().any(|m| m["error"]["message"]
            .as_str()
            .is_some_and(|e| e.contains("banned"))),
        "the refusal says why: {said:?}"
    );
    assert_eq!(
        admin_json(&db, &["unban", "127.0.0.1"]),
        json!({ "unbanned": "127.0.0.1/32" })
    );
    assert_eq!(admin_json(&db, &["listbanned"]), json!([]));
    greet(&osprey, "admin-it-unbanned");
    let again = admin(&db, false, &["unban", "127.0.0.1"], false);
    assert!(
        again.stderr.contains("127.0.0.1/32 is not banned"),
        "{}",
        again.stderr
    );
    // 9.
    assert_eq!(admin_json(&db, &["stop"]), json!({ "stopping": true }));
    let status = osprey
        .wait_exit(SETTLE)
        .expect("osprey exits after admin stop");
    assert!(
        status.success(),
        "osprey exited with {status} after admin stop"
    );
    assert!(!socket.exists(), "the socket is removed on a clean exit");
    let gone = admin(&db, false, &["getinfo"], false);
    assert!(!gone.status.success());
    assert!(
        gone.stderr
            .contains(&format!("no Osprey is running on {}", socket.display())),
        "{}",
        gone.stderr
    );
}

/// Runs `osprey admin getinfo` as the unprivileged uid 65534, in group
/// `gid` only (`setpriv`, which needs root).
fn admin_as(db: &Path, gid: u32) -> std::process::Output {
    let db_arg = db.display().to_string();
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            &format!("--regid={gid}"),
            "--clear-groups",
            env!("CARGO_BIN_EXE_osprey"),
            "admin",
            "--network",
            "regtest",
            "--db-dir",
            &db_arg,
            "getinfo",
        ])
        .current_dir("/")
        .env_remove("HOME")
        .output()
        .expect("running setpriv")
}

/// With every directory on the way open to others, the socket's mode
/// (0660, owner and group root) alone decides: a user outside its group is
/// refused with a clear error, the same user in the group is answered.
/// Switching user needs root; as anyone else this says so, and the
/// caller's check of the mode is all there is.
fn refused_without_the_group(db: &Path) {
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .expect("id -u");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        eprintln!("not root: cannot switch user, so only the socket's mode is checked");
        return;
    }
    let mut dir = db.join("regtest");
    loop {
        let mode = std::fs::metadata(&dir)
            .expect("a directory")
            .permissions()
            .mode();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o755))
            .expect("opening a directory to others");
        if !dir.pop() || dir == Path::new("/tmp") || dir == Path::new("/") {
            break;
        }
    }
    let outsider = admin_as(db, 65534);
    let stderr = String::from_utf8_lossy(&outsider.stderr);
    assert!(
        !outsider.status.success(),
        "an outsider was answered: {stderr}"
    );
    assert!(stderr.contains("not allowed to connect"), "{stderr}");
    let member = admin_as(db, 0);
    assert!(
        member.status.success(),
        "a member of the socket's group was refused: {}",
        String::from_utf8_lossy(&member.stderr)
    );
    assert!(String::from_utf8_lossy(&member.stdout).contains("index_height"));
}

/// Sends `line` on a raw connection to the socket and returns the answer.
fn raw(socket: &Path, line: &[u8]) -> Value {
    let mut stream = UnixStream::connect(socket).expect("connecting to the admin socket");
    stream
        .set_read_timeout(Some(SETTLE))
        .expect("a read timeout");
    stream.write_all(line).expect("sending");
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .expect("reading the answer");
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"))
}

/// A file in the socket's place stops the start with a clear error; a
/// stale socket (a killed server's) is replaced; malformed, unknown and
/// oversized requests get clear errors and the server lives on; without a
/// server `osprey admin` says none is running; an index directory too
/// deep for a socket's path is served without one.
#[test]
fn admin_socket_refuses_what_it_cannot_serve() {
    let node = start_btcd();
    node.generate(10).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let socket = socket_of(&db);
    // No server yet.
    let none = admin(&db, false, &["getinfo"], false);
    assert!(!none.status.success());
    assert!(
        none.stderr
            .contains(&format!("no Osprey is running on {}", socket.display())),
        "{}",
        none.stderr
    );
    let unknown = admin(&db, false, &["frobnicate"], false);
    assert!(
        unknown.stderr.contains("unknown command"),
        "{}",
        unknown.stderr
    );
    // A regular file where the socket goes.
    std::fs::create_dir_all(socket.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&socket, "not a socket").expect("writing a file");
    let mut refused = Osprey::spawn(&node, &db, OspreyConfig::default());
    let status = refused
        .wait_exit(SETTLE)
        .expect("osprey exits when its socket's place is taken");
    assert!(!status.success());
    assert!(
        refused.log().contains("exists and is not a socket"),
        "{}",
        refused.log_tail(20)
    );
    assert_eq!(
        std::fs::read_to_string(&socket).unwrap(),
        "not a socket",
        "the file is kept"
    );
    // A stale socket: bound, then its listener gone.
    std::fs::remove_file(&socket).expect("removing the file");
    drop(UnixListener::bind(&socket).expect("binding a socket"));
    assert!(socket.exists(), "a closed listener leaves its file");
    let osprey = Osprey::start(&node, &db, OspreyConfig::default());
    let answer = raw(&socket, b"{\"command\":\"getinfo\"}\n");
    assert_eq!(answer["result"]["index_height"], json!(10), "{answer}");
    for (line, says) in [
        (b"hello\n".to_vec(), "malformed request"),
        (
            b"{\"command\":\"frobnicate\"}\n".to_vec(),
            "unknown command",
        ),
        (
            b"{\"command\":\"kick\",\"args\":[]}\n".to_vec(),
            "kick ID|ADDRESS",
        ),
        (
            [vec![b'x'; 10_000], b"\n".to_vec()].concat(),
            "request exceeds 4096 bytes",
        ),
    ] {
        let answer = raw(&socket, &line);
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{answer}");
    }
    // Still serving.
    let answer = raw(&socket, b"{\"command\":\"sessions\",\"args\":[]}\n");
    assert!(answer["result"].is_array(), "{answer}");
    drop(osprey);
    // An index directory too deep for a Unix socket's path: served
    // without the admin interface, saying so.
    let deep = dir.path().join("d".repeat(120));
    let mut osprey = Osprey::start(&node, &deep, OspreyConfig::default());
    osprey.wait_log_line("the admin interface's absence", SETTLE, |line| {
        line.contains("no admin interface: the path is longer than a Unix socket's")
    });
    assert!(!socket_of(&deep).exists());
}

/// A session from `from` (a loopback address) to `osprey`, which must be
/// served: its `server.version` is answered.
fn served_from(osprey: &Osprey, from: &str) -> Session {
    let mut session = Session::from_stream(connect_from(from, osprey.addr())).expect("a session");
    session.call("server.version", json!(["admin-it-bans", "1.4"]));
    session
}

/// Whether a connection from `from` is refused for a ban, saying so.
fn refused_as_banned(osprey: &Osprey, from: &str) -> bool {
    let mut session = Session::from_stream(connect_from(from, osprey.addr())).expect("a session");
    let (closed, said) = session.closed_within(SETTLE);
    closed
        && said.iter().any(|m| {
            m["error"]["message"]
                .as_str()
                .is_some_and(|e| e.contains("banned"))
        })
}

/// The lines of the ban file that are not comments.
fn ban_file_lines(db: &Path) -> Vec<String> {
    std::fs::read_to_string(db.join("regtest").join("banned.txt"))
        .expect("the ban file")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Bans last a restart, even a kill -9 right after the ban: 127.0.0.2 is
/// refused after it, 127.0.0.1 served. A ban file with lines that are not
/// bans is a startup warning naming them: the server starts with the
/// others, and the next unban rewrites the file without the bad ones.
#[test]
fn bans_last_across_restarts() {
    let node = start_btcd();
    node.generate(10).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let mut osprey = Osprey::start(&node, &db, OspreyConfig::default());
    let mut banned = served_from(&osprey, "127.0.0.2");
    assert_eq!(
        admin_json(&db, &["ban", "127.0.0.2"])["banned"],
        json!("127.0.0.2/32")
    );
    assert!(banned.closed_within(SETTLE).0, "the ban closes its session");
    admin_json(&db, &["ban", "2001:db8:1:2::/64"]);
    assert_eq!(
        ban_file_lines(&db),
        ["127.0.0.2/32", "2001:db8:1:2::/64"],
        "written at the ban"
    );
    // Killed: nothing is written at exit.
    osprey.kill9();
    let mut osprey = Osprey::start(&node, &db, OspreyConfig::default());
    osprey.wait_log_line("the bans restored", SETTLE, |line| {
        line.contains("bans restored") && line.contains("banned=2")
    });
    assert_eq!(
        admin_json(&db, &["listbanned"]),
        json!(["127.0.0.2/32", "2001:db8:1:2::/64"])
    );
    assert!(
        refused_as_banned(&osprey, "127.0.0.2"),
        "still banned after a restart"
    );
    served_from(&osprey, "127.0.0.1");
    // A file with lines that are not bans, written while stopped.
    let status = osprey.terminate();
    assert!(status.success(), "{status}");
    std::fs::write(
        db.join("regtest").join("banned.txt"),
        b"not an address\n127.0.0.3\n\xff\xfe\n10.0.0.1/8\n",
    )
    .expect("writing the ban file");
    let osprey = Osprey::start(&node, &db, OspreyConfig::default());
    let log = osprey.log();
    let warning = log
        .lines()
        .find(|l| l.contains("the ban list has lines that are not addresses or prefixes"))
        .unwrap_or_else(|| panic!("no warning of the bad lines: {}", osprey.log_tail(30)));
    for named in [
        "skipped=3",
        "line 1 (\"not an address\")",
        "line 3: not UTF-8",
        "line 4",
    ] {
        assert!(warning.contains(named), "{named} in {warning}");
    }
    assert_eq!(admin_json(&db, &["listbanned"]), json!(["127.0.0.3/32"]));
    assert!(refused_as_banned(&osprey, "127.0.0.3"));
    served_from(&osprey, "127.0.0.2");
    admin_json(&db, &["unban", "127.0.0.3"]);
    assert_eq!(
        ban_file_lines(&db),
        Vec::<String>::new(),
        "rewritten without the bad lines"
    );
    served_from(&osprey, "127.0.0.3");
}

/// `addpeer` adds a second Osprey (which names its own port in
/// `--public-hosts`) to the peer list and checks it at once, not at the
/// next hourly round: `peers` shows it verified and wallets get it from
/// `server.peers.subscribe`. A bare host gets the network's Electrum
/// port. `rmpeer` forgets it, in both lists; removing it again is an
/// error.
#[test]
fn addpeer_checks_a_peer_at_once_and_rmpeer_forgets_it() {
    let node = start_btcd();
    node.generate(10).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let public = format!("127.0.0.1:t{port}");
    let _peer = Osprey::start(
        &node,
        &dir.path().join("peer"),
        OspreyConfig {
            args: vec!["--public-hosts".into(), public],
            electrum_rpc_addr: Some(format!("127.0.0.1:{port}")),
            ..OspreyConfig::default()
        },
    );
    let db = dir.path().join("db");
    let osprey = Osprey::start(&node, &db, OspreyConfig::default());
    assert_eq!(admin_json(&db, &["peers"]), json!([]));
    let added = admin_json(&db, &["addpeer", &format!("127.0.0.1:{port}")]);
    assert_eq!(
        added,
        json!({ "added": "127.0.0.1", "tcp_port": port, "ssl_port": null, "new": true })
    );
    let peers = wait_until("the added peer verified", SETTLE, || {
        let peers = admin_json(&db, &["peers"]);
        (peers[0]["verified"] == json!(true)).then_some(peers)
    });
    assert_eq!(peers.as_array().map(Vec::len), Some(1), "{peers}");
    assert_eq!(peers[0]["configured"], json!(true));
    assert_eq!(peers[0]["tcp_port"], json!(port));
    let mut wallet = osprey.session();
    let listed = wallet.call("server.peers.subscribe", json!([]));
    assert_eq!(listed[0][0], json!("127.0.0.1"), "{listed}");
    let text = admin(&db, false, &["addpeer", "127.0.0.2"], true).stdout;
    assert!(
        text.contains("added peer 127.0.0.2 (tcp 60401, ssl -)"),
        "{text}"
    );
    assert_eq!(
        admin_json(&db, &["rmpeer", "127.0.0.2"]),
        json!({ "removed": "127.0.0.2" })
    );
    assert_eq!(
        admin_json(&db, &["rmpeer", "127.0.0.1"]),
        json!({ "removed": "127.0.0.1" })
    );
    assert_eq!(admin_json(&db, &["peers"]), json!([]));
    assert_eq!(wallet.call("server.peers.subscribe", json!([])), json!([]));
    let again = admin(&db, false, &["rmpeer", "127.0.0.1"], false);
    assert!(!again.status.success());
    assert!(
        again.stderr.contains("no peer is named 127.0.0.1"),
        "{}",
        again.stderr
    );
}

/// A read-only replica has no admin interface: it takes the bans made
/// through its writer's from the ban file, those of before its start at
/// once and later ones as the writer saves them. A replica's session from
/// 127.0.0.2 is closed by the writer's ban and new ones are refused; after
/// the unban the replica serves 127.0.0.2 again.
#[test]
fn a_replica_follows_its_writers_bans() {
    let node = start_btcd();
    node.generate(10).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let _writer = Osprey::start(&node, &db, OspreyConfig::default());
    admin_json(&db, &["ban", "127.0.0.9"]);
    let tmp = dir.path().join("replica-tmp");
    std::fs::create_dir_all(&tmp).expect("creating the replica's TMPDIR");
    let mut replica = Osprey::start(
        &node,
        &db,
        OspreyConfig::read_only(&dir.path().join("replica.log"), &tmp),
    );
    assert!(
        refused_as_banned(&replica, "127.0.0.9"),
        "a ban of before the replica's start"
    );
    let mut session = served_from(&replica, "127.0.0.2");
    admin_json(&db, &["ban", "127.0.0.2"]);
    assert!(
        session.closed_within(SETTLE).0,
        "the writer's ban closes the replica's session"
    );
    assert!(refused_as_banned(&replica, "127.0.0.2"));
    admin_json(&db, &["unban", "127.0.0.2"]);
    replica.wait_log_line("the replica lifting the ban", SETTLE, |line| {
        line.contains("ban lifted, as the writer's ban list says") && line.contains("127.0.0.2/32")
    });
    served_from(&replica, "127.0.0.2");
    assert!(
        refused_as_banned(&replica, "127.0.0.9"),
        "the other ban holds"
    );
}
