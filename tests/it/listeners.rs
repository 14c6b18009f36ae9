//! The TLS and WebSocket listeners of the real binary against btcd: BDK's
//! client over `ssl://` with the self-signed certificate Osprey made and
//! keeps across restarts, and a WebSocket client, each seeing the node's
//! tip and a payment's status.

use std::net::SocketAddr;
use std::time::Duration;

use bitcoin::Amount;
use electrum_client::{ConfigBuilder, ElectrumApi};
use osprey_testenv::{Node, ScriptKind, TestWallet};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::common::osprey::ANY_PORT;
use crate::common::{scripthash, start_btcd, wait_until, NodeView, Osprey, OspreyConfig};

/// How long a notification may take (the server polls every 100 ms).
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(30);

fn ssl_client(addr: SocketAddr) -> electrum_client::Client {
    let config = ConfigBuilder::new()
        .validate_domain(false)
        .timeout(Some(Duration::from_secs(30)))
        .retry(0)
        .build();
    electrum_client::Client::from_config(&format!("ssl://{addr}"), config)
        .unwrap_or_else(|e| panic!("electrum-client over TLS to {addr}: {e:?}"))
}

/// One JSON-RPC call as one WebSocket text message; returns the answer's
/// `result`, skipping notifications.
fn ws_call(
    ws: &mut tungstenite::WebSocket<std::net::TcpStream>,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    ws.send(Message::text(request.to_string()))
        .expect("sending a WebSocket message");
    loop {
        let message = ws.read().expect("reading a WebSocket message");
        let Message::Text(text) = message else {
            continue;
        };
        let answer: Value = serde_json::from_str(&text).expect("JSON in a WebSocket message");
        if answer["id"] == json!(id) {
            assert!(answer.get("error").is_none(), "{method}: {answer}");
            return answer["result"].clone();
        }
    }
}

/// 1. Start btcd, mine 110 blocks; start osprey with a TLS and a WebSocket
///    listener and no certificate: it makes a self-signed one in --db-dir.
/// 2. electrum-client over ssl:// (domain not validated, as for any
///    self-signed certificate): server.features, the tip equal to the
///    node's, and a subscribed script's status.
/// 3. Pay the script: the new status the node implies is pushed over TLS.
/// 4. Over WebSocket: server.version, the tip and the same status.
/// 5. Restart: the certificate file is reused, not made anew, and TLS
///    still serves.
#[test]
fn tls_and_websocket_listeners_serve_the_nodes_chain() {
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    // Port 0: the process binds free ports itself and logs them.
    let config = OspreyConfig::with_args(&[
        "--electrum-tls-addr",
        ANY_PORT,
        "--electrum-ws-addr",
        ANY_PORT,
    ]);
    let mut osprey = Osprey::start(&node, &db, config.clone());
    let reported = |osprey: &Osprey, protocol| {
        osprey
            .listening(protocol)
            .unwrap_or_else(|| panic!("osprey serves but reports no {protocol} listener"))
    };
    let (tls_addr, ws_addr) = (reported(&osprey, "tls"), reported(&osprey, "ws"));
    let cert_file = db.join("tls-cert.pem");
    let generated = std::fs::read(&cert_file).expect("a self-signed certificate in --db-dir");
    assert!(
        osprey
            .log()
            .contains("generated a self-signed TLS certificate"),
        "the log says a certificate was made"
    );

    // 2.
    let client = ssl_client(tls_addr);
    let features = client.server_features().expect("server.features over TLS");
    assert!(features.server_version.starts_with("Osprey"));
    let view = NodeView::load(&node);
    let tip = client
        .block_headers_subscribe_raw()
        .expect("headers over TLS");
    assert_eq!(tip.height, view.tip_height as usize);
    assert_eq!(
        hex::encode(&tip.header),
        view.headers[view.tip_height as usize]
    );
    let script = wallet.new_script(ScriptKind::P2wpkh);
    assert!(client
        .script_subscribe(&script)
        .expect("subscribe over TLS")
        .is_none());

    // 3.
    let tx = wallet
        .send(script.clone(), Amount::from_sat(250_000))
        .expect("paying the script");
    node.send_raw_transaction(&tx).expect("broadcast");
    let want = NodeView::load(&node).status(&script);
    assert!(want.is_string(), "the node shows the payment");
    wait_until(
        "the new status is pushed over TLS",
        NOTIFICATION_TIMEOUT,
        || {
            client.ping().expect("ping over TLS");
            let status = client.script_pop(&script).expect("script_pop")?;
            (json!(hex::encode(*status)) == want).then_some(())
        },
    );

    // 4.
    let stream = std::net::TcpStream::connect(ws_addr).expect("connecting to the ws port");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let (mut ws, _) =
        tungstenite::client(format!("ws://{ws_addr}/"), stream).expect("WebSocket handshake");
    let version = ws_call(&mut ws, 1, "server.version", json!(["it", "1.4"]));
    assert_eq!(version[1], "1.4");
    let ws_tip = ws_call(&mut ws, 2, "blockchain.headers.subscribe", json!([]));
    assert_eq!(ws_tip["height"], json!(view.tip_height));
    let status = ws_call(
        &mut ws,
        3,
        "blockchain.scripthash.subscribe",
        json!([scripthash(&script)]),
    );
    assert_eq!(status, want);
    let _ = ws.close(None);

    // 5.
    let status = osprey.terminate();
    assert!(status.success(), "osprey exited with {status}");
    let osprey = Osprey::start(&node, &db, config);
    assert_eq!(
        std::fs::read(&cert_file).expect("the certificate file"),
        generated,
        "the self-signed certificate is kept across restarts"
    );
    let client = ssl_client(reported(&osprey, "tls"));
    client.ping().expect("TLS after a restart");
    drop(osprey);
}
