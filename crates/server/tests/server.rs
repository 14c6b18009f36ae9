//! The server over real TCP sockets against the in-memory fake backend:
//! framing and limits on the wire, sessions_max and sessions per address,
//! the client memory budget, idle timeout, shutdown, notifications driven
//! by published changes (including a lagged feed), peer discovery between
//! two servers, and the TLS, WebSocket and WebSocket-over-TLS listeners
//! with real clients.

use bitcoin::hashes::Hash;
use bitcoin::Txid;
use osprey_answers::{Backend, Change, HistoryEntry};
use osprey_core::{Height, Network, ScriptHash, StatusHash};
use osprey_electrum::fake::{fake_header, FakeBackend};
use osprey_metrics::Metrics;
use osprey_server::{Limits, ListenerKind, PeerConfig, Server, ServerConfig, TlsFiles};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

const SH: &str = "8b01df4e368ea28f8dc0423bcf7a4923e3a12d307c875e47a0cfbf90b5c39161";
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Returns once the server has done all it can. For tests on the paused
/// clock (`start_paused`): tokio moves that clock, and so ends this sleep,
/// only when every task waits on something else and no blocking work runs
/// (the server answers and computes statuses on blocking threads). The
/// clock is then a millisecond later.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

struct TestServer {
    addr: std::net::SocketAddr,
    /// The TLS, ws and wss listeners' addresses, when configured.
    tls_addr: Option<std::net::SocketAddr>,
    ws_addr: Option<std::net::SocketAddr>,
    wss_addr: Option<std::net::SocketAddr>,
    backend: Arc<FakeBackend>,
    changes: broadcast::Sender<Arc<Change>>,
    metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl TestServer {
    async fn start(limits: Limits, feed_capacity: usize) -> TestServer {
        TestServer::start_with(config(limits), feed_capacity).await
    }

    /// As `start`, with `adjust` changing the configuration first (to add
    /// listeners).
    async fn start_adjusted(
        limits: Limits,
        feed_capacity: usize,
        adjust: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let mut config = config(limits);
        adjust(&mut config);
        TestServer::start_with(config, feed_capacity).await
    }

    async fn start_with(config: ServerConfig, feed_capacity: usize) -> TestServer {
        let backend = Arc::new(FakeBackend::with_tip(100));
        let (changes, feed) = broadcast::channel(feed_capacity);
        let dyn_backend: Arc<dyn Backend> = backend.clone();
        let metrics = Arc::new(Metrics::new(&osprey_electrum::METHODS));
        let server = Server::bind(config, dyn_backend, feed)
            .await
            .unwrap()
            .with_metrics(Arc::clone(&metrics));
        let addr = server.local_addr().unwrap();
        let tls_addr = server.listener_addr(ListenerKind::Tls);
        let ws_addr = server.listener_addr(ListenerKind::Ws);
        let wss_addr = server.listener_addr(ListenerKind::Wss);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            tls_addr,
            ws_addr,
            wss_addr,
            backend,
            changes,
            metrics,
            stop: Some(stop),
            task,
        }
    }

    async fn client(&self) -> Client {
        Client::new(TcpStream::connect(self.addr).await.unwrap())
    }

    /// A client connecting from `ip` (any address of 127.0.0.0/8 on Linux).
    async fn client_from(&self, ip: &str) -> Client {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        Client::new(socket.connect(self.addr).await.unwrap())
    }

    fn publish(&self, change: Change) {
        self.changes.send(Arc::new(change)).unwrap();
    }

    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// A regtest server on 127.0.0.1, any port, private.
fn config(limits: Limits) -> ServerConfig {
    ServerConfig {
        electrum_rpc_addr: "127.0.0.1:0".parse().unwrap(),
        electrum_tls_addr: None,
        electrum_ws_addr: None,
        electrum_wss_addr: None,
        tls: None,
        network: Network::Regtest,
        banner: "test banner".into(),
        donation_address: String::new(),
        server_version: "Osprey 0.1.0".into(),
        limits,
        peering: PeerConfig::default(),
    }
}

struct Client {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

impl Client {
    /// Whether the server answers a request of this session.
    async fn is_served(&mut self) -> bool {
        self.call("server.banner", json!([]))
            .await
            .get("result")
            .is_some()
    }

    fn new(stream: TcpStream) -> Client {
        let (r, w) = stream.into_split();
        Client {
            reader: BufReader::new(r),
            writer: w,
            next_id: 0,
        }
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    /// Reads one line as JSON; `None` at EOF.
    async fn read(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = tokio::time::timeout(READ_TIMEOUT, self.reader.read_line(&mut line))
            .await
            .expect("timed out waiting for a line")
            .unwrap_or(0);
        (n > 0).then(|| serde_json::from_str(&line).unwrap())
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            .to_string()
            + "\n";
        self.send_raw(line.as_bytes()).await;
        let r = self.read().await.expect("a response");
        assert_eq!(r["id"], id, "{r}");
        r
    }
}

fn history(
    sh: ScriptHash,
    entries: &[(u8, i64)],
) -> impl FnOnce(&mut osprey_electrum::fake::FakeState) {
    let entries: Vec<HistoryEntry> = entries
        .iter()
        .map(|&(t, height)| HistoryEntry {
            txid: Txid::from_byte_array([t; 32]),
            height,
            fee: Some(1),
        })
        .collect();
    move |s| {
        s.histories.insert(sh, entries);
    }
}

fn status_of(entries: &[(u8, i64)]) -> Value {
    let txids: Vec<(Txid, i64)> = entries
        .iter()
        .map(|&(t, h)| (Txid::from_byte_array([t; 32]), h))
        .collect();
    match StatusHash::of_history(txids.iter().map(|(t, h)| (t, *h))) {
        Some(s) => json!(s.to_string()),
        None => Value::Null,
    }
}

#[tokio::test]
async fn answers_requests_and_survives_bad_input() {
    let server = TestServer::start(
        Limits {
            line_bytes_max: 2000,
            ..Limits::default()
        },
        16,
    )
    .await;
    let mut c = server.client().await;
    let r = c
        .call("server.version", json!(["test", ["1.4", "1.6"]]))
        .await;
    assert_eq!(r["result"], json!(["Osprey 0.1.0", "1.6"]));
    // Malformed JSON: an error with a null id, and the session goes on.
    c.send_raw(b"{\"id\": 1, \"method\"\n").await;
    let r = c.read().await.unwrap();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32700), Value::Null)
    );
    // An oversized line: an error, discarded up to its newline, session goes on.
    let mut big = vec![b'x'; 5000];
    big.push(b'\n');
    c.send_raw(&big).await;
    let r = c.read().await.unwrap();
    assert_eq!(r["error"]["code"], -101);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2000 bytes"),
        "{r}"
    );
    assert_eq!(
        c.call("server.banner", json!([])).await["result"],
        "test banner"
    );
    // Two requests in one write are both answered, in order.
    c.send_raw(b"{\"id\":\"a\",\"method\":\"server.ping\"}\n{\"id\":\"b\",\"method\":\"blockchain.block.header\",\"params\":[3]}\n").await;
    assert_eq!(c.read().await.unwrap()["id"], "a");
    let r = c.read().await.unwrap();
    assert_eq!(
        (r["id"].clone(), r["result"].clone()),
        (json!("b"), json!(hex::encode(fake_header(3))))
    );
    let genesis = Network::Regtest.genesis_hash().to_string();
    assert_eq!(
        c.call("server.features", json!([])).await["result"]["genesis_hash"],
        genesis
    );
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn extra_sessions_are_refused_politely() {
    let server = TestServer::start(
        Limits {
            sessions_max: 1,
            ..Limits::default()
        },
        16,
    )
    .await;
    let mut first = server.client().await;
    assert!(first
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());
    let mut second = server.client().await;
    let r = second.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102);
    assert!(second.read().await.is_none(), "then closed");
    drop(first);
    // The slot frees up once the first session has ended.
    settle().await;
    let mut third = server.client().await;
    assert!(
        third.is_served().await,
        "a new session is accepted after one closes"
    );
    server.stop().await;
}

/// A connection from a proxy over the cap on those awaiting their PROXY
/// header (`sessions_max`) is told why before it is closed, as any
/// refused connection is (it used to be dropped without a word).
#[tokio::test]
async fn a_proxied_connection_over_the_cap_is_told_why() {
    let server = TestServer::start(
        Limits {
            sessions_max: 1,
            proxy_protocol_from: vec!["127.0.0.1/32".parse().unwrap()],
            ..Limits::default()
        },
        16,
    )
    .await;
    // Holds the one place while its header does not come.
    let silent = server.client().await;
    let mut refused = server.client().await;
    let r = refused.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102, "{r}");
    let why = r["error"]["message"].as_str().unwrap();
    assert!(why.contains("awaiting their PROXY header"), "{why}");
    assert!(refused.read().await.is_none(), "then closed");
    assert_eq!(server.metrics.sessions.refused.get(), 1);
    drop(silent);
    server.stop().await;
}

/// A full server closes the session idle the longest for a newcomer,
/// rather than lock new wallets out until idle sessions time out.
#[tokio::test(start_paused = true)]
async fn a_full_server_makes_room_by_closing_the_idlest_session() {
    let server = full_at_two_sessions().await;
    let mut idlest = server.client().await;
    assert!(idlest.is_served().await);
    let mut other = server.client().await;
    // Its session starts before the clock moves.
    settle().await;
    tokio::time::advance(Duration::from_millis(900)).await;
    // Idle less than a second: nobody makes room yet.
    let mut early = server.client().await;
    let r = early.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102);
    tokio::time::advance(Duration::from_millis(100)).await;
    // Both idle a second; the first the longest.
    assert!(other.is_served().await);
    let mut newcomer = server.client().await;
    assert!(newcomer.is_served().await, "the newcomer is served");
    assert_told_to_make_room(&mut idlest).await;
    assert!(other.is_served().await, "the other session goes on");
    // Nobody idle past a second now: the next one is refused.
    let mut refused = server.client().await;
    let r = refused.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102);
    let sessions = &server.metrics.sessions;
    assert_eq!((sessions.shed.get(), sessions.refused.get()), (1, 2));
    server.stop().await;
}

/// A connection that never sent a request makes room before a wallet that
/// did, even one idle longer (waiting for notifications is normal): a flood
/// of silent connections cannot keep wallets out.
#[tokio::test(start_paused = true)]
async fn a_full_server_closes_silent_connections_first() {
    let server = full_at_two_sessions().await;
    let mut wallet = server.client().await;
    assert!(wallet.is_served().await);
    tokio::time::advance(Duration::from_millis(300)).await;
    let mut silent = server.client().await;
    settle().await;
    // Both idle past a second; the wallet the longest.
    tokio::time::advance(Duration::from_millis(1200)).await;
    let mut newcomer = server.client().await;
    assert!(newcomer.is_served().await, "the newcomer is served");
    assert_told_to_make_room(&mut silent).await;
    assert!(wallet.is_served().await, "the wallet goes on");
    server.stop().await;
}

/// A shed session is told why (issue 36: in the idle flood, a connection
/// closed for a newcomer got no error line), then closed.
async fn assert_told_to_make_room(client: &mut Client) {
    let r = client.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102, "{r}");
    let why = r["error"]["message"].as_str().unwrap();
    assert!(why.contains("make room for a new one"), "{why}");
    assert!(client.read().await.is_none(), "then closed");
}

/// A server full at two sessions, which sheds sessions idle for a second.
async fn full_at_two_sessions() -> TestServer {
    TestServer::start(
        Limits {
            sessions_max: 2,
            shed_idle_secs: 1,
            ..Limits::default()
        },
        16,
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_are_closed() {
    let server = TestServer::start(
        Limits {
            idle_timeout_secs: 1,
            ..Limits::default()
        },
        16,
    )
    .await;
    let mut c = server.client().await;
    let started = tokio::time::Instant::now();
    assert!(c.read().await.is_none(), "closed by the server");
    let waited = started.elapsed();
    assert!(
        (Duration::from_secs(1)..Duration::from_millis(1100)).contains(&waited),
        "closed once idle a second, after {waited:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn status_changes_are_pushed_only_when_they_differ() {
    let server = TestServer::start(Limits::default(), 16).await;
    let sh: ScriptHash = SH.parse().unwrap();
    let other = ScriptHash([7; 32]);
    server.backend.update(history(sh, &[(1, 50)]));
    let mut subscriber = server.client().await;
    let mut bystander = server.client().await;
    let r = subscriber
        .call("blockchain.scripthash.subscribe", json!([SH]))
        .await;
    assert_eq!(r["result"], status_of(&[(1, 50)]));
    bystander
        .call(
            "blockchain.scripthash.subscribe",
            json!([other.to_string()]),
        )
        .await;

    // A mempool transaction arrives for the script.
    server.backend.update(history(sh, &[(1, 50), (2, 0)]));
    server.publish(Change {
        scripthashes: vec![sh, ScriptHash([9; 32])],
        ..Change::default()
    });
    let n = subscriber.read().await.unwrap();
    assert_eq!(
        n,
        json!({"jsonrpc": "2.0", "method": "blockchain.scripthash.subscribe", "params": [SH, status_of(&[(1, 50), (2, 0)])]})
    );

    // A change that leaves the status as it was sends nothing: the next
    // line is the ping's response.
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    let r = subscriber.call("server.ping", json!([])).await;
    assert!(r.get("result").is_some(), "{r}");
    let r = bystander.call("server.ping", json!([])).await;
    assert!(r.get("result").is_some(), "the bystander got nothing: {r}");

    // After unsubscribing, no more notifications.
    assert_eq!(
        subscriber
            .call("blockchain.scripthash.unsubscribe", json!([SH]))
            .await["result"],
        true
    );
    server.backend.update(history(sh, &[(1, 50), (2, 51)]));
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    assert!(subscriber
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());
    server.stop().await;
}

#[tokio::test]
async fn a_change_costs_one_status_per_touched_subscribed_script() {
    let server = TestServer::start(Limits::default(), 16).await;
    let mut sessions = Vec::new();
    for s in 0..4u8 {
        let mut c = server.client().await;
        for i in 0..50u8 {
            c.call(
                "blockchain.scripthash.subscribe",
                json!([ScriptHash([i; 32]).to_string()]),
            )
            .await;
        }
        // Every session also watches one script of its own.
        c.call(
            "blockchain.scripthash.subscribe",
            json!([ScriptHash([100 + s; 32]).to_string()]),
        )
        .await;
        sessions.push(c);
    }
    let touched = ScriptHash([3; 32]);
    server.backend.update(history(touched, &[(1, 0)]));
    let before = server.backend.update(|s| s.status_calls);
    server.publish(Change {
        scripthashes: vec![touched, ScriptHash([200; 32])],
        ..Change::default()
    });
    for c in &mut sessions {
        let n = c.read().await.unwrap();
        assert_eq!(n["params"][0], touched.to_string());
    }
    let after = server.backend.update(|s| s.status_calls);
    assert_eq!(after - before, 1, "one status for 204 subscriptions");
    server.stop().await;
}

#[tokio::test]
async fn new_tips_are_pushed_to_header_subscribers() {
    let server = TestServer::start(Limits::default(), 16).await;
    let mut c = server.client().await;
    let r = c.call("blockchain.headers.subscribe", json!([])).await;
    assert_eq!(
        r["result"],
        json!({"height": 100, "hex": hex::encode(fake_header(100))})
    );
    server.backend.update(|s| s.headers.push(fake_header(101)));
    server.publish(Change {
        new_tip: Some((Height(101), fake_header(101))),
        ..Change::default()
    });
    let n = c.read().await.unwrap();
    assert_eq!(n["method"], "blockchain.headers.subscribe");
    assert_eq!(
        n["params"],
        json!([{"height": 101, "hex": hex::encode(fake_header(101))}])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_lagged_feed_recomputes_every_subscription() {
    // A feed of capacity 1 that gets 3 changes before the notifier runs.
    let server = TestServer::start(Limits::default(), 1).await;
    let sh: ScriptHash = SH.parse().unwrap();
    let mut c = server.client().await;
    c.call("blockchain.scripthash.subscribe", json!([SH])).await;
    c.call("blockchain.headers.subscribe", json!([])).await;
    server.backend.update(history(sh, &[(5, 0)]));
    server.backend.update(|s| s.headers.push(fake_header(101)));
    // The change that touched `sh` is the one lost to the lag.
    let _ = server.changes.send(Arc::new(Change {
        scripthashes: vec![sh],
        ..Change::default()
    }));
    let _ = server.changes.send(Arc::new(Change::default()));
    let _ = server.changes.send(Arc::new(Change::default()));
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(c.read().await.unwrap());
    }
    got.sort_by_key(|n| n["method"].as_str().unwrap().to_string());
    assert_eq!(got[0]["params"][0]["height"], 101, "{got:?}");
    assert_eq!(got[1]["params"], json!([SH, status_of(&[(5, 0)])]));
    server.stop().await;
}

#[tokio::test]
async fn shutdown_closes_sessions() {
    let server = TestServer::start(Limits::default(), 16).await;
    let mut c = server.client().await;
    c.call("server.version", json!(["t", "1.4"])).await;
    server.stop().await;
    assert!(c.read().await.is_none(), "the session was closed");
}

/// BDK's client library (electrum-client 0.25, which negotiates 1.6) parses
/// every answer it asks for. (Paused clock: see `settle`.)
#[tokio::test(start_paused = true)]
async fn bdk_electrum_client_understands_every_answer() {
    use electrum_client::{ElectrumApi, EstimationMode};
    let server = TestServer::start(Limits::default(), 16).await;
    let script =
        bitcoin::ScriptBuf::from_hex("76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac").unwrap();
    let sh = ScriptHash::from_script(script.as_bytes());
    let confirmed = Txid::from_byte_array([1; 32]);
    server.backend.update(|s| {
        s.histories.insert(
            sh,
            vec![
                HistoryEntry {
                    txid: confirmed,
                    height: 50,
                    fee: None,
                },
                HistoryEntry {
                    txid: Txid::from_byte_array([2; 32]),
                    height: -1,
                    fee: Some(250),
                },
            ],
        );
        s.unspent.insert(
            sh,
            vec![osprey_answers::Utxo {
                txid: confirmed,
                vout: 0,
                height: 50,
                value: 1234,
            }],
        );
        s.balances.insert(
            sh,
            osprey_answers::Balance {
                confirmed: 1234,
                unconfirmed: -34,
            },
        );
        s.merkles.insert(
            confirmed,
            osprey_answers::TxMerkle {
                block_height: Height(50),
                pos: 1,
                branch: vec![bitcoin::TxMerkleNode::from_byte_array([6; 32])],
            },
        );
        s.estimate = Some(0.0001);
    });
    let url = format!("tcp://{}", server.addr);
    let (client, status, script) = tokio::task::spawn_blocking(move || {
        let client = electrum_client::Client::new(&url).unwrap();
        let features = client.server_features().unwrap();
        assert_eq!(features.server_version, "Osprey 0.1.0");
        assert_eq!(features.protocol_max, "1.7");
        client.ping().unwrap();
        let tip = client.block_headers_subscribe_raw().unwrap();
        assert_eq!(
            (tip.height, tip.header.as_slice()),
            (100, fake_header(100).as_slice())
        );
        let headers = client.block_headers(95, 10).unwrap();
        assert_eq!(
            (headers.count, headers.max, headers.headers.len()),
            (6, 2016, 6)
        );
        let header = client.block_header_raw(7).unwrap();
        assert_eq!(header, fake_header(7));
        let history = client.script_get_history(&script).unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!((history[0].height, history[0].tx_hash), (50, confirmed));
        assert_eq!((history[1].height, history[1].fee), (-1, Some(250)));
        let batch = client
            .batch_script_get_history([script.as_script(), script.as_script()])
            .unwrap();
        assert_eq!(batch.len(), 2);
        let balance = client.script_get_balance(&script).unwrap();
        assert_eq!((balance.confirmed, balance.unconfirmed), (1234, -34));
        let unspent = client.script_list_unspent(&script).unwrap();
        assert_eq!(
            (unspent[0].tx_hash, unspent[0].value, unspent[0].height),
            (confirmed, 1234, 50)
        );
        let merkle = client.transaction_get_merkle(&confirmed, 50).unwrap();
        assert_eq!(
            (merkle.block_height, merkle.pos, merkle.merkle),
            (50, 1, vec![[6; 32]])
        );
        assert_eq!(
            client
                .estimate_fee(6, Some(EstimationMode::Economical))
                .unwrap(),
            0.0001
        );
        assert_eq!(client.relay_fee().unwrap(), 0.00001);
        let raw = [1u8, 2, 3];
        let txid = client.transaction_broadcast_raw(&raw).unwrap();
        assert_eq!(
            txid,
            Txid::from_raw_hash(bitcoin::hashes::sha256d::Hash::hash(&raw))
        );
        let status = client.script_subscribe(&script).unwrap();
        assert!(status.is_some());
        (client, status, script)
    })
    .await
    .unwrap();
    server
        .backend
        .update(|s| s.histories.get_mut(&sh).unwrap().pop());
    let pushed = pushed_status(&server, sh, client, script).await;
    assert!(
        pushed.is_some() && pushed != status.map(|s| hex::encode(*s)),
        "a new status was pushed"
    );
    server.stop().await;
}

/// Publishes a change of `sh` and returns the status of `script` that
/// `client` was then pushed, in hex: once the server has pushed it, the
/// client reads it before the answer to its next request.
async fn pushed_status(
    server: &TestServer,
    sh: ScriptHash,
    client: electrum_client::Client,
    script: bitcoin::ScriptBuf,
) -> Option<String> {
    use electrum_client::ElectrumApi;
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    settle().await;
    tokio::task::spawn_blocking(move || {
        client.ping().unwrap();
        let popped = client.script_pop(&script).unwrap();
        popped.map(|s| hex::encode(*s))
    })
    .await
    .unwrap()
}

/// `{"id":ID,"method":"server.ping","pad":"xxx…` of `bytes` bytes: a valid
/// request once `"}\n` completes it.
fn padded_ping_start(id: u64, bytes: usize) -> Vec<u8> {
    let mut line = format!(r#"{{"id":{id},"method":"server.ping","pad":""#).into_bytes();
    line.resize(bytes, b'x');
    line
}

/// Incomplete lines of every session draw on one byte budget: past it a
/// session is told and closed, the others go on, and the bytes come back
/// when sessions end. (Paused clock: see `settle`.)
#[tokio::test(start_paused = true)]
async fn incomplete_lines_share_one_memory_budget() {
    let limits = Limits {
        line_bytes_max: 200_000,
        reply_bytes_max: 1 << 20,
        // The least allowed: twice one session's line and reply.
        client_memory_bytes_max: 2 * (200_000 + (1 << 20)),
        ..Limits::default()
    };
    let server = TestServer::start(limits, 16).await;
    // Each holds 190,000 bytes, charged as 196,608 (whole 64 KiB steps):
    // twelve fit in 2,497,152 bytes, the thirteenth does not.
    let mut holders = Vec::new();
    for id in 0..12u64 {
        let mut c = server.client().await;
        c.send_raw(&padded_ping_start(id, 190_000)).await;
        // The server reads them before the next session sends.
        settle().await;
        holders.push(c);
    }
    let mut over = server.client().await;
    over.send_raw(&padded_ping_start(99, 190_000)).await;
    let refused = over.read().await.expect("an error line");
    assert_eq!(refused["error"]["code"], -102, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory"),
        "{refused}"
    );
    assert!(over.read().await.is_none(), "then closed");
    // The sessions within the budget finish their lines and are answered.
    for (id, c) in holders.iter_mut().enumerate() {
        c.send_raw(b"\"}\n").await;
        let r = c.read().await.expect("the padded ping's answer");
        assert_eq!(r["id"], id, "{r}");
        assert!(r.get("result").is_some(), "{r}");
    }
    drop(holders);
    // Every byte came back: thirteen sessions' lines fit one after another.
    for id in 0..13u64 {
        let mut c = server.client().await;
        c.send_raw(&padded_ping_start(id, 190_000)).await;
        c.send_raw(b"\"}\n").await;
        let r = c.read().await.expect("an answer");
        assert!(r.get("result").is_some(), "{r}");
    }
    server.stop().await;
}

/// Subscriptions are charged to the same budget: past it, a subscribe gets
/// -102 and the subscriptions already held keep working; a session's
/// subscriptions are given back when it ends.
#[tokio::test(start_paused = true)]
async fn subscriptions_share_the_memory_budget() {
    // Subscriptions leave one line and reply free: 1,114,112 bytes for
    // them, 4,352 subscriptions of 256 bytes, less what requests and
    // replies briefly hold.
    let server = TestServer::start(least_budget(), 16).await;
    let mut first = server.client().await;
    for batch in 0..20 {
        assert_eq!(
            subscribe_batch(&mut first, batch * 200).await,
            0,
            "batch {batch}"
        );
    }
    let mut second = server.client().await;
    let mut refused = 0;
    for batch in 20..25 {
        refused += subscribe_batch(&mut second, batch * 200).await;
    }
    assert!(
        (1..=1000).contains(&refused),
        "4,000 held: some of the next 1,000 must be refused, got {refused}"
    );
    // Requests are still read and answered: subscriptions left room.
    assert!(second
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());
    drop(first);
    // The first session's 4,000 come back once it has ended.
    settle().await;
    assert_eq!(
        subscribe_batch(&mut second, 100_000).await,
        0,
        "the ended session's subscriptions came back"
    );
    server.stop().await;
}

/// 64 KiB lines, 1 MiB replies and the least client memory budget allowed
/// with them: 2,228,224 bytes.
fn least_budget() -> Limits {
    Limits {
        line_bytes_max: 64 * 1024,
        reply_bytes_max: 1 << 20,
        client_memory_bytes_max: 2 * ((64 * 1024) + (1 << 20)),
        ..Limits::default()
    }
}

/// A response is held in memory until its client reads it. Responses
/// waiting on clients that do not read draw on the budget: past it,
/// another client's large response is refused with -102 (not queued),
/// while small ones still fit.
#[tokio::test(start_paused = true)]
async fn unread_responses_share_one_memory_budget() {
    let server = TestServer::start(least_budget(), 16).await;
    let sh: ScriptHash = SH.parse().unwrap();
    // ~9,000 entries: a history answer of about 800 kB.
    let entries: Vec<(u8, i64)> = (0..9_000).map(|i| ((i % 250) as u8, 1 + i / 250)).collect();
    server.backend.update(history(sh, &entries));
    server.backend.update(|s| s.history_entries_max = 100_000);
    let get_history = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "blockchain.scripthash.get_history",
               "params": [SH]})
        .to_string()
            + "\n"
    };
    // Clients that ask and never read, with a small receive window, so
    // the server's writes to them soon block: two blocked answers and a
    // third pass the 2,228,224 bytes. (The server reads their requests
    // one at a time, so that they fit in its receive buffer.)
    let mut greedy = Vec::new();
    for _ in 0..3 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(server.addr).await.unwrap();
        let asks: String = (0..40).map(get_history).collect();
        stream.write_all(asks.as_bytes()).await.unwrap();
        greedy.push(stream);
    }
    // Each greedy session holds a response it cannot send.
    settle().await;
    let mut good = server.client().await;
    let refusal = good
        .call("blockchain.scripthash.get_history", json!([SH]))
        .await;
    assert_eq!(refusal["error"]["code"], -102, "{refusal}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not fit"),
        "{refusal}"
    );
    // Small answers still fit.
    assert!(good
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());
    server.stop().await;
}

/// A gate that opens when dropped: a failing test then does not leave the
/// server's threads waiting at it (the runtime waits for them to end).
struct OpenedOnDrop(Arc<osprey_electrum::fake::Gate>);

impl Drop for OpenedOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Heavy lines (too long to parse on the session's task) wait for the
/// greedy slots, one on two cores, whatever their sessions have cost:
/// eight new sessions each sending one 70 kB request, all held inside the
/// backend, took all eight slots, and a wallet's small request beside them
/// waited (issue 36: six hundred 581 KiB batches kept a wallet waiting
/// seconds). Now one runs, seven wait, the wallet is served at once, and
/// the seven are answered in turn.
#[tokio::test]
async fn heavy_lines_share_the_greedy_slots() {
    let server = TestServer::start(
        Limits {
            worker_threads: 2,
            ..Limits::default()
        },
        16,
    )
    .await;
    let held: ScriptHash = SH.parse().unwrap();
    let other = ScriptHash([7; 32]);
    server.backend.update(history(held, &[(1, 50)]));
    server.backend.update(history(other, &[(3, 60)]));
    let gate = OpenedOnDrop(Arc::new(osprey_electrum::fake::Gate::default()));
    server
        .backend
        .update(|s| s.history_gate = Some((held, Arc::clone(&gate.0))));
    // A request any session may send, padded past the 64 KiB parsed on
    // the session's task.
    let heavy = format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 1, "method": "blockchain.scripthash.get_history",
               "params": [SH], "pad": "x".repeat(70_000)})
    );
    let mut hostile = Vec::new();
    for _ in 0..8 {
        let mut client = server.client().await;
        client.send_raw(heavy.as_bytes()).await;
        hostile.push(client);
    }
    // Every heavy line is taken (counted as received) before the wallet asks.
    let received = &server.metrics.sessions.received_bytes;
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while received.get() < 8 * heavy.len() as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the heavy lines never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiting = Arc::clone(&gate.0);
    let reached = tokio::task::spawn_blocking(move || waiting.wait_reached(READ_TIMEOUT));
    assert!(reached.await.unwrap(), "no heavy line was run");
    let mut wallet = server.client().await;
    let r = wallet
        .call(
            "blockchain.scripthash.get_history",
            json!([other.to_string()]),
        )
        .await;
    assert_eq!(r["result"][0]["height"], 60, "{r}");
    assert_eq!(
        server.backend.update(|s| s.history_calls),
        2,
        "one heavy line in the backend, then the wallet's"
    );
    drop(gate);
    for client in &mut hostile {
        let r = client.read().await.expect("an answer");
        assert_eq!(r["result"][0]["height"], 50, "{r}");
    }
    server.stop().await;
}

/// A line waiting for a handler slot stays charged to the client memory
/// budget until it is answered (it used to be counted only while it was
/// incomplete, so hundreds of heavy lines queued for a slot held hundreds
/// of megabytes nobody counted): with one heavy line held in the backend
/// and twelve more queued behind it, the budget has no room for the next
/// session's line, which is told so, and the thirteen are answered once
/// the first is let go.
#[tokio::test]
async fn lines_waiting_for_a_slot_stay_charged() {
    let server = TestServer::start(
        Limits {
            line_bytes_max: 200_000,
            reply_bytes_max: 1 << 20,
            // The least allowed: twice one session's line and reply.
            client_memory_bytes_max: 2 * (200_000 + (1 << 20)),
            worker_threads: 2,
            ..Limits::default()
        },
        16,
    )
    .await;
    let held: ScriptHash = SH.parse().unwrap();
    server.backend.update(history(held, &[(1, 50)]));
    let gate = OpenedOnDrop(Arc::new(osprey_electrum::fake::Gate::default()));
    server
        .backend
        .update(|s| s.history_gate = Some((held, Arc::clone(&gate.0))));
    // 190,000 bytes: heavy, and charged 196,608 bytes while it arrives.
    let heavy = |id: u64| {
        let mut line = format!(
            r#"{{"id":{id},"method":"blockchain.scripthash.get_history","params":["{SH}"],"pad":""#
        )
        .into_bytes();
        line.resize(190_000 - 3, b'x');
        line.extend_from_slice(b"\"}\n");
        line
    };
    let received = &server.metrics.sessions.received_bytes;
    let mut queued = Vec::new();
    for id in 0..13u64 {
        let mut client = server.client().await;
        client.send_raw(&heavy(id)).await;
        // Taken from the transport, charged, and waiting (or held).
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        while received.get() < (id + 1) * 190_000 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "line {id} never taken"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        queued.push(client);
    }
    // 13 x 190,000 bytes charged: 27,152 left, under one 64 KiB step.
    let mut over = server.client().await;
    over.send_raw(&heavy(99)).await;
    let refused = over.read().await.expect("an error line");
    assert_eq!(refused["error"]["code"], -102, "{refused}");
    let why = refused["error"]["message"].as_str().unwrap();
    assert!(why.contains("memory"), "{why}");
    assert!(over.read().await.is_none(), "then closed");
    drop(gate);
    for (id, client) in queued.iter_mut().enumerate() {
        let r = client.read().await.expect("an answer");
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["result"][0]["height"], 50, "{r}");
    }
    server.stop().await;
}

/// Replies never wait on notification work: while the notifier is stuck
/// computing a status after a change, the same session's requests
/// (subscriptions included) are answered; the notification follows once
/// the notifier is free.
/// A session that keeps pulling a long history (cheap for the server to
/// hand out, shared between sessions, but 800 kB to send each time)
/// becomes greedy and, keeping it up, is told why and disconnected after
/// about 200 MB; other sessions are served all along.
#[tokio::test]
async fn a_session_pulling_megabytes_without_pause_is_disconnected() {
    let server = TestServer::start(Limits::default(), 16).await;
    let sh: ScriptHash = SH.parse().unwrap();
    let entries: Vec<(u8, i64)> = (0..9_000).map(|i| ((i % 250) as u8, 1 + i / 250)).collect();
    server.backend.update(history(sh, &entries));
    server.backend.update(|s| {
        s.history_entries_max = 100_000;
        s.cached.insert(sh);
    });
    let mut greedy = server.client().await;
    let mut answered = 0;
    let goodbye = loop {
        greedy.next_id += 1;
        let ask = json!({"jsonrpc": "2.0", "id": greedy.next_id,
                         "method": "blockchain.scripthash.get_history", "params": [SH]});
        greedy.send_raw(format!("{ask}\n").as_bytes()).await;
        let answer = greedy.read().await.expect("an answer or a goodbye");
        if answer.get("result").is_none() {
            break answer;
        }
        answered += 1;
        assert!(answered < 1_000, "never disconnected");
        if answered % 50 == 0 {
            assert!(server.client().await.is_served().await, "others are served");
        }
    };
    assert_eq!(goodbye["error"]["code"], -102, "{goodbye}");
    let why = goodbye["error"]["message"].as_str().unwrap();
    assert!(why.contains("used more of the server"), "{why}");
    assert!(greedy.read().await.is_none(), "then closed");
    // 20 s of cost at 10 bytes a microsecond: ~250 replies of 790 kB.
    assert!((200..400).contains(&answered), "{answered}");
    assert!(server.client().await.is_served().await);
    server.stop().await;
}

#[tokio::test]
async fn replies_do_not_wait_for_the_notifier() {
    let server = TestServer::start(Limits::default(), 16).await;
    let sh: ScriptHash = SH.parse().unwrap();
    let other = ScriptHash([7; 32]);
    server.backend.update(history(sh, &[(1, 50)]));
    server.backend.update(history(other, &[(3, 60)]));
    let mut client = server.client().await;
    client
        .call("blockchain.scripthash.subscribe", json!([SH]))
        .await;
    let gate = Arc::new(osprey_electrum::fake::Gate::default());
    server.backend.update(|s| {
        s.histories.insert(
            sh,
            vec![
                HistoryEntry {
                    txid: Txid::from_byte_array([1; 32]),
                    height: 50,
                    fee: None,
                },
                HistoryEntry {
                    txid: Txid::from_byte_array([2; 32]),
                    height: 0,
                    fee: Some(1),
                },
            ],
        );
        s.status_gate = Some((sh, Arc::clone(&gate)));
    });
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    let waiting = Arc::clone(&gate);
    let reached = tokio::task::spawn_blocking(move || waiting.wait_reached(READ_TIMEOUT));
    assert!(
        reached.await.unwrap(),
        "the notifier never computed the status"
    );
    // The notifier is now held inside its work.
    for _ in 0..3 {
        assert!(client
            .call("server.ping", json!([]))
            .await
            .get("result")
            .is_some());
        let r = client
            .call(
                "blockchain.scripthash.get_history",
                json!([other.to_string()]),
            )
            .await;
        assert_eq!(r["result"][0]["height"], 60, "{r}");
        let r = client
            .call(
                "blockchain.scripthash.subscribe",
                json!([other.to_string()]),
            )
            .await;
        assert_eq!(r["result"], status_of(&[(3, 60)]), "{r}");
    }
    // No notification while the notifier is held: every reply above came
    // first, and so does this one.
    assert!(client
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());
    gate.open();
    let n = client
        .read()
        .await
        .expect("the notification, once the notifier is free");
    assert_eq!(n["method"], "blockchain.scripthash.subscribe", "{n}");
    assert_eq!(n["params"][1], status_of(&[(1, 50), (2, 0)]), "{n}");
    server.stop().await;
}

/// Subscribes script hashes `first..first + 200` in one batch; returns how
/// many were refused with -102.
async fn subscribe_batch(client: &mut Client, first: u32) -> usize {
    let calls: Vec<Value> = (first..first + 200)
        .map(|i| {
            let mut sh = [0u8; 32];
            sh[..4].copy_from_slice(&i.to_be_bytes());
            json!({"jsonrpc": "2.0", "id": i, "method": "blockchain.scripthash.subscribe",
                   "params": [hex::encode(sh)]})
        })
        .collect();
    let line = Value::Array(calls).to_string() + "\n";
    client.send_raw(line.as_bytes()).await;
    let answers = client.read().await.expect("the batch's answers");
    answers
        .as_array()
        .unwrap_or_else(|| panic!("not a batch answer: {answers}"))
        .iter()
        .filter(|a| a["error"]["code"] == -102)
        .count()
}

/// Past `sessions_per_ip_max`, a connection gets a -102 line and is closed;
/// the cap counts 127.0.0.2 but not 127.0.0.1 (where Tor and local proxies
/// connect from), and a slot comes back when its session ends.
#[tokio::test(start_paused = true)]
async fn sessions_per_address_are_capped_but_localhost_is_exempt() {
    let server = TestServer::start(
        Limits {
            sessions_per_ip_max: 2,
            ..Limits::default()
        },
        16,
    )
    .await;
    let mut local = Vec::new();
    for _ in 0..4 {
        let mut c = server.client().await;
        assert_eq!(
            c.call("server.banner", json!([])).await["result"],
            "test banner"
        );
        local.push(c);
    }
    let mut first = server.client_from("127.0.0.2").await;
    let mut second = server.client_from("127.0.0.2").await;
    for c in [&mut first, &mut second] {
        assert_eq!(
            c.call("server.banner", json!([])).await["result"],
            "test banner"
        );
    }
    let mut third = server.client_from("127.0.0.2").await;
    let r = third.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 sessions from your address"),
        "{message}"
    );
    assert!(third.read().await.is_none(), "then closed");
    assert_eq!(server.metrics.sessions.refused.get(), 1, "counted");
    assert_eq!(
        second.call("server.banner", json!([])).await["result"],
        "test banner",
        "the sessions under the cap go on"
    );
    drop(first);
    // Once its session has ended.
    settle().await;
    let mut admitted = server.client_from("127.0.0.2").await;
    assert!(
        admitted.is_served().await,
        "the slot of a closed session is given back"
    );
    server.stop().await;
}

/// With `trusted_subnets` given (a Tor container's network, here
/// 127.0.0.2/31), its addresses hold any number of sessions, and the
/// default exemption is gone: 127.0.0.1 is capped like anyone.
#[tokio::test]
async fn trusted_subnets_replace_the_exempt_addresses() {
    let server = TestServer::start(
        Limits {
            sessions_per_ip_max: 2,
            trusted_subnets: vec!["127.0.0.2/31".parse().unwrap()],
            ..Limits::default()
        },
        16,
    )
    .await;
    let mut tor = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3"] {
        for _ in 0..4 {
            let mut c = server.client_from(from).await;
            assert_eq!(
                c.call("server.banner", json!([])).await["result"],
                "test banner",
                "from {from}"
            );
            tor.push(c);
        }
    }
    let mut local = Vec::new();
    for _ in 0..2 {
        let mut c = server.client().await;
        assert_eq!(
            c.call("server.banner", json!([])).await["result"],
            "test banner"
        );
        local.push(c);
    }
    let mut third = server.client().await;
    let r = third.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102, "{r}");
    let mut outside = Vec::new();
    for _ in 0..2 {
        let mut c = server.client_from("127.0.0.4").await;
        assert_eq!(
            c.call("server.banner", json!([])).await["result"],
            "test banner"
        );
        outside.push(c);
    }
    let mut past = server.client_from("127.0.0.4").await;
    let r = past.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102, "127.0.0.4 is outside /31: {r}");
    assert_eq!(server.metrics.sessions.refused.get(), 2);
    server.stop().await;
}

/// A port free on 127.0.0.1 now (a server must know its public port
/// before it binds).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A public server on 127.0.0.1 of `network`, announcing 127.0.0.1:tPORT.
fn public_config(network: Network, peers: &[u16]) -> ServerConfig {
    let port = free_port();
    ServerConfig {
        electrum_rpc_addr: format!("127.0.0.1:{port}").parse().unwrap(),
        network,
        peering: PeerConfig {
            public_hosts: vec![format!("127.0.0.1:t{port}").parse().unwrap()],
            peers: peers
                .iter()
                .map(|p| format!("127.0.0.1:t{p}").parse().unwrap())
                .collect(),
            private_peers_allowed: true,
        },
        ..config(Limits::default())
    }
}

/// Asks `server` for its peers until `done` holds of them (peers are
/// checked in the background, in rounds: each try lets every server do
/// all it can first, see `settle`).
async fn peers_until(server: &TestServer, done: impl Fn(&Value) -> bool) -> Value {
    let mut client = server.client().await;
    for _ in 0..20 {
        settle().await;
        let peers = client.call("server.peers.subscribe", json!([])).await["result"].clone();
        if done(&peers) {
            return peers;
        }
    }
    panic!("peers never became as expected");
}

/// Two servers on 127.0.0.1: A names B as a peer. A checks B (same chain,
/// B lists itself at the port A connected to) and lists it; A announces
/// itself to B with add_peer; B connects back, checks A and lists it.
/// `hosts` reports the public host; a second add_peer from the same address
/// is refused (rate limit). Each is listed with its highest version.
#[tokio::test(start_paused = true)]
async fn a_server_announces_itself_and_is_listed_once_checked() {
    let b = TestServer::start_with(public_config(Network::Regtest, &[]), 16).await;
    let b_port = b.addr.port();
    let a = TestServer::start_with(public_config(Network::Regtest, &[b_port]), 16).await;
    let a_port = a.addr.port();
    let mut client = b.client().await;
    let features = client.call("server.features", json!([])).await["result"].clone();
    assert_eq!(
        features["hosts"],
        json!({"127.0.0.1": {"tcp_port": b_port}})
    );

    let on_b = peers_until(&b, |p| p.as_array().is_some_and(|p| !p.is_empty())).await;
    assert_eq!(
        on_b,
        json!([["127.0.0.1", "127.0.0.1", ["v1.7", format!("t{a_port}")]]])
    );
    let on_a = peers_until(&a, |p| p.as_array().is_some_and(|p| !p.is_empty())).await;
    assert_eq!(
        on_a,
        json!([["127.0.0.1", "127.0.0.1", ["v1.7", format!("t{b_port}")]]])
    );

    let a_features = a.client().await.call("server.features", json!([])).await["result"].clone();
    let again = client.call("server.add_peer", json!([a_features])).await;
    assert_eq!(
        again["result"], false,
        "one add_peer per address per ten minutes: {again}"
    );
    a.stop().await;
    b.stop().await;
}

/// A peer of another chain is refused: add_peer with its features gets
/// false at once, and as a configured peer it fails its check and is not
/// listed; so is a private server, whose hosts do not list the address we
/// reach it at. Both are checked before an honest peer, which is listed.
#[tokio::test(start_paused = true)]
async fn peers_of_another_chain_or_not_listing_themselves_are_refused() {
    let other_chain = TestServer::start_with(public_config(Network::Testnet, &[]), 16).await;
    let private = TestServer::start(Limits::default(), 16).await;
    let honest = TestServer::start_with(public_config(Network::Regtest, &[]), 16).await;
    let server = TestServer::start_with(
        public_config(
            Network::Regtest,
            &[
                other_chain.addr.port(),
                private.addr.port(),
                honest.addr.port(),
            ],
        ),
        16,
    )
    .await;
    let listed = peers_until(&server, |p| p.as_array().is_some_and(|p| !p.is_empty())).await;
    assert_eq!(
        listed,
        json!([[
            "127.0.0.1",
            "127.0.0.1",
            ["v1.7", format!("t{}", honest.addr.port())]
        ]]),
        "only the peer of our chain that lists itself"
    );
    let features = other_chain
        .client()
        .await
        .call("server.features", json!([]))
        .await["result"]
        .clone();
    let mut client = server.client().await;
    let r = client.call("server.add_peer", json!([features])).await;
    assert_eq!(r["result"], false, "{r}");
    for s in [server, honest, private, other_chain] {
        s.stop().await;
    }
}

const LOOPBACK_ANY_PORT: &str = "127.0.0.1:0";

/// Writes a fresh self-signed pair for "localhost" to `files`; returns the
/// certificate's DER.
fn write_certificate(files: &TlsFiles) -> Vec<u8> {
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(&files.key_file, pair.signing_key.serialize_pem()).unwrap();
    std::fs::write(&files.cert_file, pair.cert.pem()).unwrap();
    pair.cert.der().to_vec()
}

/// A TLS client trusting exactly `trusted` (self-signed certificates for
/// "localhost").
fn tls_connector(trusted: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for der in trusted {
        roots
            .add(rustls::pki_types::CertificateDer::from(der.to_vec()))
            .unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    addr: std::net::SocketAddr,
    trusted: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tls_connector(trusted).connect(name, tcp).await.unwrap()
}

/// The certificate a new TLS connection to `addr` is shown.
async fn presented_certificate(addr: std::net::SocketAddr, trusted: &[&[u8]]) -> Vec<u8> {
    let tls = tls_connect(addr, trusted).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// BDK's client over `ssl://` against a self-signed certificate the server
/// generated and kept, with real calls and a pushed notification; a second
/// server on the same files presents the same certificate.
#[tokio::test(start_paused = true)]
async fn bdk_electrum_client_over_tls_with_a_self_signed_certificate() {
    use electrum_client::ElectrumApi;
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles {
        cert_file: dir.path().join("tls-cert.pem"),
        key_file: dir.path().join("tls-key.pem"),
        self_signed: true,
    };
    let with_tls = |files: TlsFiles| {
        move |c: &mut ServerConfig| {
            c.electrum_tls_addr = Some(LOOPBACK_ANY_PORT.parse().unwrap());
            c.tls = Some(files);
        }
    };
    let server = TestServer::start_adjusted(Limits::default(), 16, with_tls(files.clone())).await;
    let tls_addr = server.tls_addr.expect("a TLS listener");
    let generated = std::fs::read(&files.cert_file).expect("a certificate was generated");
    let script =
        bitcoin::ScriptBuf::from_hex("76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac").unwrap();
    let sh = ScriptHash::from_script(script.as_bytes());
    server.backend.update(history(sh, &[(1, 50)]));
    let (client, script) = tokio::task::spawn_blocking(move || {
        let config = electrum_client::ConfigBuilder::new()
            .validate_domain(false)
            .timeout(Some(Duration::from_secs(10)))
            .build();
        let client =
            electrum_client::Client::from_config(&format!("ssl://{tls_addr}"), config).unwrap();
        let features = client.server_features().unwrap();
        assert_eq!(features.server_version, "Osprey 0.1.0");
        let tip = client.block_headers_subscribe_raw().unwrap();
        assert_eq!(
            (tip.height, tip.header.as_slice()),
            (100, fake_header(100).as_slice())
        );
        let status = client.script_subscribe(&script).unwrap();
        assert_eq!(
            status.map(|s| hex::encode(*s)),
            status_of(&[(1, 50)]).as_str().map(str::to_string)
        );
        (client, script)
    })
    .await
    .unwrap();
    server.backend.update(history(sh, &[(1, 50), (2, 0)]));
    assert_eq!(
        pushed_status(&server, sh, client, script).await,
        status_of(&[(1, 50), (2, 0)]).as_str().map(str::to_string),
        "the new status was pushed over TLS"
    );
    // The certificate shown is the generated one.
    let generated_der = rustls::pki_types::CertificateDer::from_pem_slice(&generated)
        .unwrap()
        .to_vec();
    assert_eq!(
        presented_certificate(tls_addr, &[&generated_der]).await,
        generated_der
    );
    // A plain-text client on the TLS port gets no answer, and the server lives on.
    let mut plain = TcpStream::connect(tls_addr).await.unwrap();
    plain
        .write_all(b"{\"id\":1,\"method\":\"server.ping\"}\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(
        READ_TIMEOUT,
        tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut reply),
    )
    .await;
    assert!(!reply.starts_with(b"{"), "no JSON over a TLS port");
    server.stop().await;

    // Restarted on the same files: the same certificate, nothing regenerated.
    let server = TestServer::start_adjusted(Limits::default(), 16, with_tls(files.clone())).await;
    assert_eq!(std::fs::read(&files.cert_file).unwrap(), generated);
    assert_eq!(
        presented_certificate(server.tls_addr.unwrap(), &[&generated_der]).await,
        generated_der
    );
    server.stop().await;
}

use rustls::pki_types::pem::PemObject as _;

/// A renewal (new files on disk) reaches new connections without a
/// restart; a broken file afterwards is ignored and the last good
/// certificate kept.
#[tokio::test(start_paused = true)]
async fn tls_certificates_are_reloaded_when_their_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles {
        cert_file: dir.path().join("fullchain.pem"),
        key_file: dir.path().join("privkey.pem"),
        self_signed: false,
    };
    let first = write_certificate(&files);
    let tls_files = files.clone();
    let server = TestServer::start_adjusted(Limits::default(), 16, move |c| {
        c.electrum_tls_addr = Some(LOOPBACK_ANY_PORT.parse().unwrap());
        c.tls = Some(tls_files);
    })
    .await;
    let addr = server.tls_addr.unwrap();
    // A session opened before the renewal keeps working through it.
    let mut old_session = tls_connect(addr, &[&first]).await;
    assert_eq!(presented_certificate(addr, &[&first]).await, first);

    let second = write_certificate(&files);
    assert_ne!(first, second);
    let trusted: [&[u8]; 2] = [&first, &second];
    // The files are looked at again once the check interval has passed
    // (the paused clock moves only when told to here).
    assert_eq!(
        presented_certificate(addr, &trusted).await,
        first,
        "not looked at again within the interval"
    );
    tokio::time::advance(osprey_server::RELOAD_CHECK_INTERVAL).await;
    assert_eq!(
        presented_certificate(addr, &trusted).await,
        second,
        "new connections get the new certificate"
    );

    // A broken renewal: logged, and the last good certificate stays.
    std::fs::write(&files.cert_file, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    tokio::time::advance(osprey_server::RELOAD_CHECK_INTERVAL).await;
    assert_eq!(presented_certificate(addr, &trusted).await, second);
    assert_eq!(presented_certificate(addr, &trusted).await, second);

    old_session
        .write_all(b"{\"id\":7,\"method\":\"server.ping\"}\n")
        .await
        .unwrap();
    let mut reader = BufReader::new(old_session);
    let mut line = String::new();
    tokio::time::timeout(READ_TIMEOUT, reader.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["id"], 7);
    server.stop().await;
}

mod websocket {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::WebSocketStream;

    /// A WebSocket client speaking JSON-RPC, one message each way.
    struct WsClient<S> {
        ws: WebSocketStream<S>,
    }

    impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> WsClient<S> {
        async fn connect(url: &str, stream: S) -> WsClient<S> {
            let (ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
            WsClient { ws }
        }

        async fn send(&mut self, message: Value) {
            self.ws
                .send(Message::text(message.to_string()))
                .await
                .unwrap();
        }

        /// The next message; `None` when the server closed.
        async fn next(&mut self) -> Option<Message> {
            tokio::time::timeout(READ_TIMEOUT, self.ws.next())
                .await
                .expect("timed out waiting for a message")
                .map(Result::unwrap)
        }

        async fn read(&mut self) -> Value {
            match self.next().await {
                Some(Message::Text(text)) => {
                    assert!(!text.contains('\n'), "one message, no newline: {text}");
                    serde_json::from_str(&text).unwrap()
                }
                other => panic!("expected a text message, got {other:?}"),
            }
        }

        async fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .await;
            let r = self.read().await;
            assert_eq!(r["id"], id, "{r}");
            r
        }
    }

    /// The same conversation over ws and wss: version, a subscription, a
    /// batch, a request with newlines inside, a pushed notification, and an
    /// oversized message refused with an error and a close, not a crash.
    async fn converse<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        server: &TestServer,
        mut c: WsClient<S>,
    ) {
        let r = c
            .call(1, "server.version", json!(["test", ["1.4", "1.6"]]))
            .await;
        assert_eq!(r["result"], json!(["Osprey 0.1.0", "1.6"]));
        let sh: ScriptHash = SH.parse().unwrap();
        server.backend.update(history(sh, &[(1, 50)]));
        let r = c
            .call(2, "blockchain.scripthash.subscribe", json!([SH]))
            .await;
        assert_eq!(r["result"], status_of(&[(1, 50)]));
        // A batch is one message, answered by one message.
        c.send(json!([
            {"jsonrpc": "2.0", "id": 3, "method": "server.ping"},
            {"jsonrpc": "2.0", "id": 4, "method": "blockchain.block.header", "params": [3]},
        ]))
        .await;
        let r = c.read().await;
        assert_eq!(
            (r[0]["id"].clone(), r[1]["result"].clone()),
            (json!(3), json!(hex::encode(fake_header(3))))
        );
        // Newlines are whitespace inside a message, not separators.
        c.ws.send(Message::text(
            "{\n\"id\": 5,\n\"method\": \"server.banner\"\n}",
        ))
        .await
        .unwrap();
        assert_eq!(c.read().await["result"], "test banner");
        // A change is pushed as a message of its own.
        server.backend.update(history(sh, &[(1, 50), (2, 0)]));
        server.publish(Change {
            scripthashes: vec![sh],
            ..Change::default()
        });
        assert_eq!(
            c.read().await,
            json!({"jsonrpc": "2.0", "method": "blockchain.scripthash.subscribe", "params": [SH, status_of(&[(1, 50), (2, 0)])]})
        );
        // Over the limit: a -101 error naming it, then a close with 1009.
        c.ws.send(Message::text("x".repeat(5000))).await.unwrap();
        let r = c.read().await;
        assert_eq!(r["error"]["code"], -101, "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("2000 bytes"),
            "{r}"
        );
        match c.next().await {
            Some(Message::Close(Some(frame))) => assert_eq!(frame.code, CloseCode::Size),
            other => panic!("expected a close frame, got {other:?}"),
        }
    }

    fn ws_limits() -> Limits {
        Limits {
            line_bytes_max: 2000,
            ..Limits::default()
        }
    }

    #[tokio::test]
    async fn browser_wallets_speak_json_rpc_over_websocket() {
        let server = TestServer::start_adjusted(ws_limits(), 16, |c| {
            c.electrum_ws_addr = Some(LOOPBACK_ANY_PORT.parse().unwrap());
        })
        .await;
        let addr = server.ws_addr.expect("a ws listener");
        let url = format!("ws://{addr}/");
        let c = WsClient::connect(&url, TcpStream::connect(addr).await.unwrap()).await;
        converse(&server, c).await;
        // The server lives on: a new connection is answered.
        let mut c = WsClient::connect(&url, TcpStream::connect(addr).await.unwrap()).await;
        let r = c.call(9, "server.ping", json!([])).await;
        assert!(r.get("result").is_some(), "{r}");
        // So does plain TCP, on its own listener, with the same sessions.
        let mut tcp = server.client().await;
        assert!(tcp
            .call("server.ping", json!([]))
            .await
            .get("result")
            .is_some());
        server.stop().await;
    }

    #[tokio::test]
    async fn browser_wallets_speak_json_rpc_over_websocket_with_tls() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert_file: dir.path().join("cert.pem"),
            key_file: dir.path().join("key.pem"),
            self_signed: false,
        };
        let cert = write_certificate(&files);
        let server = TestServer::start_adjusted(ws_limits(), 16, move |c| {
            c.electrum_wss_addr = Some(LOOPBACK_ANY_PORT.parse().unwrap());
            c.tls = Some(files);
        })
        .await;
        let addr = server.wss_addr.expect("a wss listener");
        let c = WsClient::connect("wss://localhost/", tls_connect(addr, &[&cert]).await).await;
        converse(&server, c).await;
        server.stop().await;
    }
}

/// 1.7 outpoint subscriptions over the wire: an outpoint nobody knows is
/// kept and notified when a change names its txid; from then on a change
/// touching its script notifies it, only when its status differs; after
/// unsubscribing, nothing more. Each notification's parameters are those
/// of the request (less the hint) then the status, flat, as the Electrum
/// client matches them.
#[tokio::test]
async fn outpoint_statuses_are_pushed_when_they_change() {
    use bitcoin::OutPoint;
    use osprey_answers::{OutpointAnswer, OutpointStatus};
    let server = TestServer::start(Limits::default(), 16).await;
    let outpoint = OutPoint {
        txid: Txid::from_byte_array([5; 32]),
        vout: 2,
    };
    let sh = ScriptHash([6; 32]);
    let params = json!([outpoint.txid.to_string(), 2]);
    let mut c = server.client().await;
    let r = c.call("server.version", json!(["t", "1.7"])).await;
    assert_eq!(r["result"][1], "1.7", "{r}");
    let r = c
        .call(
            "blockchain.outpoint.subscribe",
            json!([outpoint.txid.to_string(), 2, "51"]),
        )
        .await;
    assert_eq!(r["result"], json!({}), "{r}");

    // The funding transaction enters the mempool: the change names its
    // txid (its script is not known to the subscription yet).
    let set = |height: i64, spender: Option<(u8, i64)>| {
        move |s: &mut osprey_electrum::fake::FakeState| {
            let status = OutpointStatus {
                height: Some(height),
                spender: spender.map(|(b, h)| (Txid::from_byte_array([b; 32]), h)),
            };
            s.outpoints.insert(
                outpoint,
                OutpointAnswer {
                    status,
                    scripthash: Some(sh),
                },
            );
        }
    };
    server.backend.update(set(0, None));
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    server.publish(Change {
        txids: vec![outpoint.txid],
        ..Change::default()
    });
    let n = c.read().await.unwrap();
    assert_eq!(
        n,
        json!({"jsonrpc": "2.0", "method": "blockchain.outpoint.subscribe",
            "params": [outpoint.txid.to_string(), 2, {"funder_height": 0}]})
    );

    // A spender in the mempool: found through the script.
    server.backend.update(set(0, Some((9, -1))));
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    let n = c.read().await.unwrap();
    assert_eq!(
        n["params"][2],
        json!({"funder_height": 0, "spender_txhash": Txid::from_byte_array([9; 32]).to_string(), "spender_height": -1})
    );
    // The same status again: nothing is sent (the next line answers the ping).
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    assert!(c
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());

    let r = c
        .call("blockchain.outpoint.unsubscribe", params.clone())
        .await;
    assert_eq!(r["result"], true);
    server.backend.update(set(101, Some((9, 101))));
    server.publish(Change {
        scripthashes: vec![sh],
        txids: vec![outpoint.txid],
        ..Change::default()
    });
    assert!(c
        .call("server.ping", json!([]))
        .await
        .get("result")
        .is_some());
    let r = c.call("blockchain.outpoint.unsubscribe", params).await;
    assert_eq!(r["result"], false);
    server.stop().await;
}

/// A silent-payment receiver: its scan key (`scan_last_byte` in an
/// otherwise zero secret) in hex and its spend public key (of the secret
/// `[spend_byte; 32]`), as a wallet sends them, and the keys the fake
/// backend pays.
fn sp_receiver(scan_last_byte: u8, spend_byte: u8) -> (String, String, osprey_sp::ScanKeys) {
    use bitcoin::secp256k1::{PublicKey, Secp256k1, SecretKey};
    let mut scan = [0u8; 32];
    scan[31] = scan_last_byte;
    let spend = PublicKey::from_secret_key(
        &Secp256k1::new(),
        &SecretKey::from_slice(&[spend_byte; 32]).unwrap(),
    );
    let keys = osprey_sp::ScanKeys::from_slices(&scan, &spend.serialize(), []).unwrap();
    (hex::encode(scan), spend.to_string(), keys)
}

/// Silent payments over the wire, as Sparrow speaks them: the feature is
/// announced; the subscribe's response comes before any notification,
/// which repeats its result byte for byte; positional after a positional
/// subscribe, named after a named one; and, live, the silent-payments
/// notification of a block comes before the scripthash notification the
/// same block causes.
#[tokio::test(start_paused = true)]
async fn silent_payments_are_served_in_order() {
    use osprey_electrum::fake::{made_up_txid, FakeSpTx};

    let server = TestServer::start(Limits::default(), 16).await;
    let (scan, spend, keys) = sp_receiver(5, 9);
    server.backend.update(|s| {
        s.sp_blocks.insert(40, vec![FakeSpTx::paying(&keys, 40)]);
        s.sp_blocks.insert(41, vec![FakeSpTx::decoy(41)]);
        s.sp_mempool = vec![FakeSpTx::paying(&keys, 99)];
    });
    let mut c = server.client().await;
    let features = c.call("server.features", json!([])).await;
    assert_eq!(features["result"].get("silent_payments"), None, "off");
    server.backend.update(|s| s.sp_enabled = true);
    let features = c.call("server.features", json!([])).await;
    assert_eq!(features["result"]["silent_payments"], json!([0]));

    // Positional, as Sparrow sends it.
    let params = json!([scan.clone(), spend.clone(), 30, []]);
    let r = c.call("blockchain.silentpayments.subscribe", params).await;
    let result = r["result"].clone();
    assert_eq!(result["start_height"], 30);
    assert!(result["address"].as_str().unwrap().starts_with("sprt1q"));
    let n = c.read().await.unwrap();
    assert_eq!(n["method"], "blockchain.silentpayments.subscribe");
    assert_eq!(n["params"][0], result, "the subscription, as answered");
    assert_eq!(n["params"][1], 1.0);
    assert_eq!(
        n["params"][2],
        json!([
            {"height": 40, "tx_hash": made_up_txid(40).to_string(), "tweak_key": n["params"][2][0]["tweak_key"]},
            {"height": 0, "tx_hash": made_up_txid(99).to_string(), "tweak_key": n["params"][2][1]["tweak_key"]},
        ])
    );
    assert_eq!(n["params"][2][0]["tweak_key"].as_str().unwrap().len(), 66);

    // By name: named notifications.
    let mut named = server.client().await;
    let params = json!({"scan_private_key": scan.clone(), "spend_public_key": spend.clone(), "start": "40-40"});
    let r = named
        .call("blockchain.silentpayments.subscribe", params)
        .await;
    let n = named.read().await.unwrap();
    assert_eq!(n["params"]["subscription"], r["result"]);
    assert_eq!(n["params"]["progress"], 1.0);
    assert_eq!(n["params"]["history"][0]["height"], 40);

    // Live: a block pays the address and changes a subscribed script.
    let sh: ScriptHash = SH.parse().unwrap();
    c.call("blockchain.scripthash.subscribe", json!([SH])).await;
    server.backend.update(|s| {
        s.headers.push(fake_header(101));
        s.sp_blocks.insert(101, vec![FakeSpTx::paying(&keys, 101)]);
    });
    server.backend.update(history(sh, &[(5, 101)]));
    server.publish(Change {
        new_tip: Some((Height(101), fake_header(101))),
        scripthashes: vec![sh],
        txids: vec![made_up_txid(101)],
        ..Change::default()
    });
    let first = c.read().await.unwrap();
    assert_eq!(first["method"], "blockchain.silentpayments.subscribe");
    assert_eq!(first["params"][2][0]["height"], 101);
    let second = c.read().await.unwrap();
    assert_eq!(second["method"], "blockchain.scripthash.subscribe");
    assert_eq!(
        c.call(
            "blockchain.silentpayments.unsubscribe",
            json!([scan, spend])
        )
        .await["result"],
        result["address"]
    );
    server.stop().await;
}

/// A session whose scan holds a handler slot for a minute, three times the
/// 20 s of cost that disconnect a session, is still served: a scan is
/// charged to its own cost, which orders scan chunks, never to the
/// session's, which would disconnect every wallet scanning a long chain.
#[tokio::test(start_paused = true)]
async fn a_session_is_not_disconnected_for_what_its_scans_cost() {
    use osprey_electrum::fake::{made_up_txid, FakeSpTx, Gate};

    let server = TestServer::start(Limits::default(), 16).await;
    let (scan, spend, keys) = sp_receiver(7, 3);
    let gate = Arc::new(Gate::default());
    server.backend.update(|s| {
        s.sp_enabled = true;
        s.sp_blocks.insert(40, vec![FakeSpTx::paying(&keys, 40)]);
        s.sp_scan_gate = Some(Arc::clone(&gate));
    });
    let mut c = server.client().await;
    let params = json!([scan, spend, 0, []]);
    let r = c.call("blockchain.silentpayments.subscribe", params).await;
    assert!(r.get("result").is_some(), "{r}");
    let reached = {
        let gate = Arc::clone(&gate);
        tokio::task::spawn_blocking(move || gate.wait_reached(Duration::from_secs(30)))
            .await
            .unwrap()
    };
    assert!(reached, "the scan's chunk runs");
    tokio::time::advance(Duration::from_secs(60)).await;
    gate.open();
    let found = loop {
        let n = c.read().await.expect("a notification");
        assert_eq!(n["method"], "blockchain.silentpayments.subscribe", "{n}");
        if n["params"][1] == 1.0 {
            break n["params"][2].clone();
        }
    };
    assert_eq!(found[0]["tx_hash"], made_up_txid(40).to_string());
    let scanned = server.metrics.silent_payments.scan_seconds.get();
    assert!(scanned >= 60.0, "the chunk held its slot {scanned} s");
    let pong = c.call("server.ping", json!([])).await;
    assert_eq!(
        pong.get("result"),
        Some(&Value::Null),
        "served, not disconnected: {pong}"
    );
    assert!(server.client().await.is_served().await);
    server.stop().await;
}

/// What a Sparrow wallet keeps of one silent-payments subscription
/// (sparrowwallet/sparrow `SilentPaymentsScanCache`): the start height the
/// server answered, once its calling thread has set it; the entries; and
/// whether the scan completed.
#[derive(Default)]
struct SparrowScan {
    server_start: Option<Value>,
    entries: Vec<Value>,
    completed: bool,
}

/// A client with Sparrow's threading: a reader task reads every line, hands
/// responses to the caller and applies notifications, dropping those that
/// come before the caller has set the start height
/// (`SubscriptionService.silentPaymentsUpdate`); the caller subscribes,
/// and sets the start height only `caller_delay` after the reader got the
/// response (`ElectrumServer.holdSilentPaymentSubscription`). Returns the
/// scan's entries once it completed, and when.
async fn sparrow_scan(
    server: &TestServer,
    params: Value,
    caller_delay: Duration,
) -> (Vec<Value>, Duration) {
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let scan = Arc::new(std::sync::Mutex::new(SparrowScan::default()));
    let (responses, mut response) = tokio::sync::mpsc::channel::<Value>(4);
    let (completed, mut done) = tokio::sync::watch::channel(false);
    let reader = {
        let scan = Arc::clone(&scan);
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&line).unwrap();
                if v.get("id").is_some() {
                    let _ = responses.send(v).await;
                    continue;
                }
                let mut scan = scan.lock().unwrap();
                let canonical = scan.server_start.clone();
                if canonical.is_none()
                    || Some(&v["params"][0]["start_height"]) != canonical.as_ref()
                {
                    continue; // Sparrow's stale-notification filter
                }
                scan.entries
                    .extend(v["params"][2].as_array().unwrap().iter().cloned());
                if v["params"][1].as_f64().unwrap() >= 1.0 && !scan.completed {
                    scan.completed = true;
                    let _ = completed.send(true);
                }
            }
        })
    };
    let started = tokio::time::Instant::now();
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "blockchain.silentpayments.subscribe", "params": params});
    write
        .write_all((line.to_string() + "\n").as_bytes())
        .await
        .unwrap();
    let answer = response.recv().await.expect("the subscribe's response");
    tokio::time::sleep(caller_delay).await;
    scan.lock().unwrap().server_start = Some(answer["result"]["start_height"].clone());
    tokio::time::timeout(Duration::from_secs(600), done.wait_for(|d| *d))
        .await
        .expect("the scan completes for Sparrow")
        .unwrap();
    let took = started.elapsed();
    reader.abort();
    let entries = scan.lock().unwrap().entries.clone();
    (entries, took)
}

/// Sparrow sets a scan's start height only after the subscribe call has
/// returned to its calling thread, and drops what its reader thread reads
/// before. A scan that ends at once still reaches it: no notification goes
/// out in a new subscription's first moments, so a caller that takes
/// 100 ms gets every entry; one held up for a second (past that) misses
/// the final notification, and its repeat, seconds later, completes the
/// scan instead of leaving Sparrow waiting for a payment to arrive.
#[tokio::test(start_paused = true)]
async fn a_scan_that_ends_at_once_completes_for_sparrow() {
    use osprey_electrum::fake::{made_up_txid, FakeSpTx};

    let server = TestServer::start(Limits::default(), 16).await;
    let (scan, spend, keys) = sp_receiver(6, 4);
    server.backend.update(|s| {
        s.sp_enabled = true;
        s.sp_blocks.insert(90, vec![FakeSpTx::paying(&keys, 90)]);
    });
    let params = json!([scan, spend, 80, []]);
    let (entries, _) = sparrow_scan(&server, params.clone(), Duration::from_millis(100)).await;
    let txids: Vec<&Value> = entries.iter().map(|e| &e["tx_hash"]).collect();
    assert_eq!(txids, [&json!(made_up_txid(90).to_string())], "every entry");
    let (entries, took) = sparrow_scan(&server, params, Duration::from_secs(1)).await;
    assert!(
        entries.is_empty(),
        "the repeat carries no history: {entries:?}"
    );
    assert!(
        took < Duration::from_secs(10),
        "completed by the repeat, after {took:?}"
    );
    server.stop().await;
}

/// Issue 35: a client subscribing again right after a scan ends must read
/// the new scan's end, never the old one's repeat (progress 1.0, no
/// history, 2 s after it). Each round holds the hub in a new block's scan
/// while the re-subscribe is answered and the repeat falls due: the hub
/// then has both before it, and took either first; the old repeat, once
/// queued after the answer, was read as the new scan ending with nothing.
#[tokio::test(start_paused = true)]
async fn a_re_subscribe_reads_its_own_scans_end() {
    use osprey_electrum::fake::{made_up_txid, FakeSpTx, Gate};

    let server = TestServer::start(Limits::default(), 16).await;
    let (scan, spend, keys) = sp_receiver(8, 5);
    server.backend.update(|s| {
        s.sp_enabled = true;
        s.sp_blocks.insert(90, vec![FakeSpTx::paying(&keys, 90)]);
    });
    let mut c = server.client().await;
    let params = json!([scan, spend, 80, []]);
    let subscribe = "blockchain.silentpayments.subscribe";
    let paid = json!(made_up_txid(90).to_string());
    assert!(c
        .call(subscribe, params.clone())
        .await
        .get("result")
        .is_some());
    let end = c.read().await.expect("the scan's end");
    assert_eq!(
        (&end["params"][1], &end["params"][2][0]["tx_hash"]),
        (&json!(1.0), &paid)
    );
    for round in 1..=8u32 {
        let gate = Arc::new(Gate::default());
        let height = 100 + round;
        server.backend.update(|s| {
            s.headers.push(fake_header(height));
            s.sp_scan_gate = Some(Arc::clone(&gate));
        });
        server.publish(Change {
            new_tip: Some((Height(height), fake_header(height))),
            ..Change::default()
        });
        let reached = {
            let gate = Arc::clone(&gate);
            tokio::task::spawn_blocking(move || gate.wait_reached(Duration::from_secs(30)))
                .await
                .unwrap()
        };
        assert!(reached, "the hub scans the new block");
        let r = c.call(subscribe, params.clone()).await;
        assert!(r.get("result").is_some(), "{r}");
        // Past the old end's repeat (`FINAL_REPEAT_DELAY`, 2 s).
        tokio::time::advance(Duration::from_secs(3)).await;
        gate.open();
        let end = c.read().await.expect("the new scan's end");
        assert_eq!(end["params"][1], 1.0, "round {round}: {end}");
        assert_eq!(
            end["params"][2][0]["tx_hash"], paid,
            "round {round}: the old scan's repeat read as the new scan's end: {end}"
        );
    }
    server.stop().await;
}
