//! The server over real TCP sockets against the in-memory fake backend:
//! framing and limits on the wire, sessions_max, idle timeout, shutdown,
//! and notifications driven by published changes (including a lagged feed).

use bitcoin::hashes::Hash;
use bitcoin::Txid;
use osprey_core::{Height, Network, ScriptHash, StatusHash};
use osprey_electrum::fake::{fake_header, FakeBackend};
use osprey_electrum::Backend;
use osprey_query::{Change, HistoryEntry};
use osprey_server::{Limits, Server, ServerConfig};
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

struct TestServer {
    addr: std::net::SocketAddr,
    backend: Arc<FakeBackend>,
    changes: broadcast::Sender<Arc<Change>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl TestServer {
    async fn start(limits: Limits, feed_capacity: usize) -> TestServer {
        let backend = Arc::new(FakeBackend::with_tip(100));
        let (changes, feed) = broadcast::channel(feed_capacity);
        let config = ServerConfig {
            electrum_rpc_addr: "127.0.0.1:0".parse().unwrap(),
            network: Network::Regtest,
            banner: "test banner".into(),
            donation_address: String::new(),
            server_version: "Osprey 0.1.0".into(),
            limits,
        };
        let dyn_backend: Arc<dyn Backend> = backend.clone();
        let server = Server::bind_with(config, dyn_backend, feed).await.unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            backend,
            changes,
            stop: Some(stop),
            task,
        }
    }

    async fn client(&self) -> Client {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (r, w) = stream.into_split();
        Client {
            reader: BufReader::new(r),
            writer: w,
            next_id: 0,
        }
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

struct Client {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

impl Client {
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

#[tokio::test]
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
    // The slot frees up once the first session ends.
    let mut third = None;
    for _ in 0..50 {
        let mut c = server.client().await;
        c.send_raw(b"{\"id\":1,\"method\":\"server.ping\"}\n").await;
        let r = c.read().await.unwrap();
        if r.get("result").is_some() {
            third = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        third.is_some(),
        "a new session is accepted after one closes"
    );
    server.stop().await;
}

/// A full server closes the session idle the longest for a newcomer,
/// rather than lock new wallets out until idle sessions time out.
#[tokio::test]
async fn a_full_server_makes_room_by_closing_the_idlest_session() {
    let server = TestServer::start(
        Limits {
            sessions_max: 2,
            shed_idle_secs: 1,
            ..Limits::default()
        },
        16,
    )
    .await;
    let mut idlest = server.client().await;
    assert!(idlest
        .call("server.banner", json!([]))
        .await
        .get("result")
        .is_some());
    let mut other = server.client().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Both idle past a second; the first the longest.
    assert!(other
        .call("server.banner", json!([]))
        .await
        .get("result")
        .is_some());
    let mut newcomer = server.client().await;
    assert!(
        newcomer
            .call("server.banner", json!([]))
            .await
            .get("result")
            .is_some(),
        "the newcomer is served"
    );
    assert!(
        idlest.read().await.is_none(),
        "the idlest session was closed"
    );
    assert!(
        other
            .call("server.banner", json!([]))
            .await
            .get("result")
            .is_some(),
        "the other session goes on"
    );
    // Nobody idle past a second now: the next one is refused.
    let mut refused = server.client().await;
    let r = refused.read().await.expect("an error line");
    assert_eq!(r["error"]["code"], -102);
    server.stop().await;
}

#[tokio::test]
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
    let started = std::time::Instant::now();
    assert!(c.read().await.is_none(), "closed by the server");
    assert!(started.elapsed() >= Duration::from_millis(900));
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
/// every answer it asks for.
#[tokio::test]
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
            vec![osprey_query::Utxo {
                txid: confirmed,
                vout: 0,
                height: 50,
                value: 1234,
            }],
        );
        s.balances.insert(
            sh,
            osprey_query::Balance {
                confirmed: 1234,
                unconfirmed: -34,
            },
        );
        s.merkles.insert(
            confirmed,
            osprey_query::TxMerkle {
                block_height: Height(50),
                block_hash: bitcoin::BlockHash::from_byte_array([5; 32]),
                pos: 1,
                branch: vec![bitcoin::TxMerkleNode::from_byte_array([6; 32])],
            },
        );
        s.estimate = Some(0.0001);
    });
    let url = format!("tcp://{}", server.addr);
    let backend = Arc::clone(&server.backend);
    let changes = server.changes.clone();
    tokio::task::spawn_blocking(move || {
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
        // Subscribe, change the script's history, and pop the notification.
        let status = client.script_subscribe(&script).unwrap();
        assert!(status.is_some());
        backend.update(|s| s.histories.get_mut(&sh).unwrap().pop());
        changes
            .send(Arc::new(Change {
                scripthashes: vec![sh],
                ..Change::default()
            }))
            .unwrap();
        let mut popped = None;
        for _ in 0..100 {
            client.ping().unwrap(); // reads whatever the server pushed
            popped = client.script_pop(&script).unwrap();
            if popped.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            popped.is_some() && popped != status,
            "a new status was pushed"
        );
    })
    .await
    .unwrap();
    server.stop().await;
}

/// 1.7 draft outpoint subscriptions over the wire: an outpoint nobody knows
/// is kept and notified when a change names its txid; from then on a change
/// touching its script notifies it, only when its status differs; after
/// unsubscribing, nothing more.
#[tokio::test]
async fn outpoint_statuses_are_pushed_when_they_change() {
    use bitcoin::OutPoint;
    use osprey_query::{OutpointAnswer, OutpointStatus};
    let server = TestServer::start(Limits::default(), 16).await;
    let outpoint = OutPoint {
        txid: Txid::from_byte_array([5; 32]),
        vout: 2,
    };
    let sh = ScriptHash([6; 32]);
    let params = json!([outpoint.txid.to_string(), 2]);
    let mut c = server.client().await;
    c.call("server.version", json!(["t", "1.7"])).await;
    let r = c
        .call("blockchain.outpoint.subscribe", params.clone())
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
        json!({"jsonrpc": "2.0", "method": "blockchain.outpoint.subscribe", "params": [params, {"height": 0}]})
    );

    // A spender in the mempool: found through the script.
    server.backend.update(set(0, Some((9, -1))));
    server.publish(Change {
        scripthashes: vec![sh],
        ..Change::default()
    });
    let n = c.read().await.unwrap();
    assert_eq!(
        n["params"][1],
        json!({"height": 0, "spender_txhash": Txid::from_byte_array([9; 32]).to_string(), "spender_height": -1})
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
