//! The client against a canned node: a listener on 127.0.0.1 that answers
//! each request with the next scripted bytes, so every status, framing and
//! failure the client must handle is sent for real over TCP.

use super::*;
use crate::error::ErrorKind;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// What the canned node does with a connection after writing a reply.
enum Then {
    KeepOpen,
    Close,
    /// Keeps the connection open and silent until the test ends.
    Stall,
}

struct Exchange {
    reply: Vec<u8>,
    then: Then,
}

/// A request as the canned node read it.
#[derive(Debug)]
struct Received {
    /// The connection's number, in accept order from 0.
    connection: usize,
    head: String,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

struct CannedNode {
    addr: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// The number of each connection the node closed, once it is closed.
    closed: mpsc::Receiver<usize>,
}

impl CannedNode {
    /// Serves `script`, one exchange per request, then stops listening.
    fn start(script: Vec<Exchange>) -> CannedNode {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr").to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let (closed_tx, closed) = mpsc::channel();
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            let mut stalled = Vec::new();
            for (connection, stream) in listener.incoming().enumerate() {
                let mut stream = BufReader::new(stream.expect("accept"));
                while let Some((head, body)) = read_request(&mut stream) {
                    log.lock().unwrap().push(Received {
                        connection,
                        head,
                        body,
                    });
                    let Some(exchange) = script.next() else {
                        return;
                    };
                    // The client may have given up already (a timeout).
                    let _ = stream.get_mut().write_all(&exchange.reply);
                    match exchange.then {
                        Then::KeepOpen => continue,
                        Then::Close => {
                            drop(stream);
                            let _ = closed_tx.send(connection);
                        }
                        Then::Stall => stalled.push(stream),
                    }
                    break;
                }
            }
        });
        CannedNode {
            addr,
            received,
            closed,
        }
    }

    fn client(&self) -> RpcClient {
        RpcClient::new(&self.addr, Auth::UserPass("user".into(), "pass".into()))
    }

    fn received(&self) -> std::sync::MutexGuard<'_, Vec<Received>> {
        self.received.lock().unwrap()
    }

    fn connections(&self) -> Vec<usize> {
        self.received().iter().map(|r| r.connection).collect()
    }
}

/// Reads one request's head and content-length body; `None` at EOF.
fn read_request(stream: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>())
        })
        .map_or(Ok(0), |l| l)
        .ok()?;
    let mut body = vec![0; length];
    stream.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn reply(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn keep(reply: Vec<u8>) -> Exchange {
    Exchange {
        reply,
        then: Then::KeepOpen,
    }
}

fn close(reply: Vec<u8>) -> Exchange {
    Exchange {
        reply,
        then: Then::Close,
    }
}

fn ok_result(result: &str) -> Vec<u8> {
    reply(
        "200 OK",
        &format!(r#"{{"result":{result},"error":null,"id":1}}"#),
    )
}

fn call(client: &RpcClient) -> Result<Value, Error> {
    client.call("getblockcount", &[])
}

#[test]
fn a_content_length_reply_gives_the_result() {
    let node = CannedNode::start(vec![keep(ok_result("42"))]);
    assert_eq!(call(&node.client()).unwrap(), json!(42));
    let received = node.received();
    let request = &received[0];
    assert!(
        request.head.starts_with("POST / HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    assert_eq!(request.header("authorization"), Some("Basic dXNlcjpwYXNz"));
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["jsonrpc"], "1.0");
    assert_eq!(body["method"], "getblockcount");
    assert_eq!(body["params"], json!([]));
    assert!(body["id"].is_u64(), "btcd needs a non-null id: {body}");
}

#[test]
fn a_chunked_reply_with_extensions_and_trailers_is_joined() {
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        a;name=value\r\n{\"result\":\r\n\
        5\r\n[1,2]\r\n\
        3;x\r\n,\"e\r\n\
        b\r\nrror\":null}\r\n\
        0\r\nX-Trailer: yes\r\n\r\n";
    let node = CannedNode::start(vec![keep(chunked.to_vec()), keep(ok_result("7"))]);
    let client = node.client();
    assert_eq!(call(&client).unwrap(), json!([1, 2]));
    // The trailer was consumed: the next reply on the connection parses.
    assert_eq!(call(&client).unwrap(), json!(7));
    assert_eq!(node.connections(), [0, 0]);
}

#[test]
fn keep_alive_reuses_one_connection() {
    let node = CannedNode::start((0..3).map(|i| keep(ok_result(&i.to_string()))).collect());
    let client = node.client();
    for i in 0..3 {
        assert_eq!(call(&client).unwrap(), json!(i));
    }
    assert_eq!(node.connections(), [0, 0, 0]);
}

#[test]
fn a_connection_the_node_closed_while_idle_is_not_used_again() {
    let node = CannedNode::start(vec![close(ok_result("1")), keep(ok_result("2"))]);
    let client = node.client();
    assert_eq!(call(&client).unwrap(), json!(1));
    assert_eq!(node.closed.recv().unwrap(), 0);
    assert_eq!(call(&client).unwrap(), json!(2));
    assert_eq!(node.connections(), [0, 1]);
}

#[test]
fn a_request_the_node_drops_unanswered_is_sent_once_more() {
    // The node reads the second request and closes without a word, as one
    // timing out an idle connection does while the request is under way.
    let node = CannedNode::start(vec![
        keep(ok_result("1")),
        close(Vec::new()),
        keep(ok_result("2")),
    ]);
    let client = node.client();
    assert_eq!(call(&client).unwrap(), json!(1));
    assert_eq!(call(&client).unwrap(), json!(2));
    assert_eq!(node.connections(), [0, 0, 1]);
}

#[test]
fn a_request_dropped_twice_is_a_transient_error() {
    let node = CannedNode::start(vec![close(Vec::new()), close(Vec::new())]);
    let e = call(&node.client()).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(node.connections(), [0, 1], "one retry, not more");
}

fn write_cookie(path: &std::path::Path, password: &str) {
    std::fs::write(path, format!("__cookie__:{password}\n")).unwrap();
}

fn basic(password: &str) -> String {
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("__cookie__:{password}"));
    format!("Basic {encoded}")
}

#[test]
fn a_401_rereads_the_rotated_cookie_once_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let cookie = dir.path().join(".cookie");
    write_cookie(&cookie, "first");
    let unauthorized = reply("401 Unauthorized", "");
    let node = CannedNode::start(vec![
        keep(ok_result("1")),
        keep(unauthorized),
        keep(ok_result("2")),
        keep(ok_result("3")),
    ]);
    let client = RpcClient::new(&node.addr, Auth::CookieFile(cookie.clone()));
    assert_eq!(call(&client).unwrap(), json!(1));
    // The node restarts with a new cookie.
    write_cookie(&cookie, "second");
    assert_eq!(call(&client).unwrap(), json!(2));
    // Read once, then kept: the file may go away.
    std::fs::remove_file(&cookie).unwrap();
    assert_eq!(call(&client).unwrap(), json!(3));
    let sent: Vec<_> = node
        .received()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_string())
        .collect();
    assert_eq!(
        sent,
        [
            basic("first"),
            basic("first"),
            basic("second"),
            basic("second")
        ]
    );
}

#[test]
fn a_second_401_is_an_authentication_error() {
    let dir = tempfile::tempdir().unwrap();
    let cookie = dir.path().join(".cookie");
    write_cookie(&cookie, "stale");
    let unauthorized = || keep(reply("401 Unauthorized", ""));
    let node = CannedNode::start(vec![unauthorized(), unauthorized()]);
    let client = RpcClient::new(&node.addr, Auth::CookieFile(cookie));
    let e = call(&client).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Persistent, "{e}");
    assert!(e.to_string().contains("refused our credentials"), "{e}");
    assert_eq!(node.received().len(), 2);
}

#[test]
fn a_401_with_a_password_is_not_retried() {
    let node = CannedNode::start(vec![keep(reply("401 Unauthorized", ""))]);
    let e = call(&node.client()).unwrap_err();
    assert!(e.to_string().contains("refused our credentials"), "{e}");
    assert_eq!(node.received().len(), 1);
}

#[test]
fn http_errors_without_a_json_rpc_body_are_sorted_by_status() {
    let cases = [
        ("403 Forbidden", "", ErrorKind::Persistent, "HTTP 403"),
        (
            "404 Not Found",
            "no such page",
            ErrorKind::Persistent,
            "HTTP 404",
        ),
        (
            "500 Internal Server Error",
            "oops",
            ErrorKind::Persistent,
            "HTTP 500",
        ),
        (
            "500 Internal Server Error",
            "[1",
            ErrorKind::Persistent,
            "HTTP 500",
        ),
        (
            "503 Service Unavailable",
            "Work queue depth exceeded",
            ErrorKind::Transient,
            "busy",
        ),
        ("200 OK", "", ErrorKind::Persistent, "empty reply"),
        (
            "200 OK",
            "\"a string\"",
            ErrorKind::Persistent,
            "no JSON-RPC reply",
        ),
    ];
    for (status, body, kind, says) in cases {
        let node = CannedNode::start(vec![keep(reply(status, body))]);
        let e = call(&node.client()).unwrap_err();
        assert_eq!(e.kind(), kind, "{status} {body:?}: {e}");
        assert!(e.to_string().contains(says), "{status} {body:?}: {e}");
    }
}

#[test]
fn json_rpc_errors_keep_their_code_whatever_the_status() {
    let error = |code: i64| {
        format!(r#"{{"result":null,"error":{{"code":{code},"message":"m{code}"}},"id":1}}"#)
    };
    let cases = [
        ("500 Internal Server Error", -5, ErrorKind::Rpc),
        ("404 Not Found", -32601, ErrorKind::Rpc),
        ("503 Service Unavailable", -28, ErrorKind::Transient),
        ("200 OK", -8, ErrorKind::Rpc),
    ];
    for (status, code, kind) in cases {
        let node = CannedNode::start(vec![keep(reply(status, &error(code)))]);
        let e = call(&node.client()).unwrap_err();
        assert_eq!((e.kind(), e.code()), (kind, code), "{status}: {e}");
        assert_eq!(e.method(), Some("getblockcount"));
        assert_eq!(e.message(), format!("m{code}"));
    }
}

#[test]
fn a_body_shorter_than_its_content_length_is_an_error() {
    let truncated =
        || close(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"result\":".to_vec());
    let node = CannedNode::start(vec![truncated(), truncated()]);
    let e = call(&node.client()).unwrap_err();
    assert!(e.is_transient(), "{e}");
}

#[test]
fn a_chunked_body_cut_mid_chunk_is_an_error() {
    let cut = || {
        close(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{\"result\":1,".to_vec())
    };
    let node = CannedNode::start(vec![cut(), cut()]);
    let e = call(&node.client()).unwrap_err();
    assert!(e.is_transient(), "{e}");
}

fn limited_client(node: &CannedNode, response_bytes_max: u64) -> RpcClient {
    RpcClient::with_limits(
        &node.addr,
        Auth::UserPass("user".into(), "pass".into()),
        Duration::from_secs(30),
        response_bytes_max,
    )
}

#[test]
fn a_body_over_the_limit_is_refused() {
    let big = format!(r#"{{"result":"{}"}}"#, "a".repeat(2000));
    let chunked = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    for over in [reply("200 OK", &big), chunked.into_bytes()] {
        let node = CannedNode::start(vec![keep(over)]);
        let e = call(&limited_client(&node, 1000)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Persistent, "{e}");
        assert!(
            e.to_string().contains("over the limit of 1000 bytes"),
            "{e}"
        );
    }
}

#[test]
fn a_huge_declared_length_is_an_error_not_an_allocation() {
    let declared = [
        format!("Content-Length: {}\r\n", u64::MAX),
        "Content-Length: 99999999999999999999999\r\n".to_string(),
    ];
    for header in declared {
        let head = format!("HTTP/1.1 200 OK\r\n{header}\r\n{{\"result\":1}}");
        let node = CannedNode::start(vec![
            close(head.clone().into_bytes()),
            close(head.into_bytes()),
        ]);
        assert!(call(&limited_client(&node, 1000)).is_err(), "{header}");
    }
}

#[test]
fn a_chunk_size_that_overflows_is_an_error_not_a_panic() {
    for size in [
        "ffffffffffffffff",
        "10000000000000000",
        "fffffffffffffffffffffffffff",
    ] {
        let bytes = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{{\r\n{size}\r\n\"result\":1}}\r\n0\r\n\r\n"
        );
        let node = CannedNode::start(vec![
            close(bytes.clone().into_bytes()),
            close(bytes.into_bytes()),
        ]);
        assert!(call(&limited_client(&node, 1000)).is_err(), "{size}");
    }
}

#[test]
fn a_silent_node_times_out() {
    let started = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{\"res".to_vec();
    let node = CannedNode::start(vec![Exchange {
        reply: started,
        then: Then::Stall,
    }]);
    let client = RpcClient::with_limits(
        &node.addr,
        Auth::UserPass("user".into(), "pass".into()),
        Duration::from_millis(200),
        1000,
    );
    let begun = Instant::now();
    let e = call(&client).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(e.to_string().contains("did not answer in time"), "{e}");
    // The 200 ms given, not the 120 s default.
    assert!(
        begun.elapsed() < Duration::from_secs(60),
        "{:?}",
        begun.elapsed()
    );
    assert_eq!(node.received().len(), 1, "a timeout is not retried");
}

#[test]
fn rest_get_returns_binary_bodies_and_none_for_404() {
    let binary: Vec<u8> = (0..=255).collect();
    let mut ok = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        binary.len()
    )
    .into_bytes();
    ok.extend_from_slice(&binary);
    let node = CannedNode::start(vec![
        keep(ok),
        keep(reply("404 Not Found", "not found")),
        keep(reply("503 Service Unavailable", "")),
        keep(reply("500 Internal Server Error", "broken")),
    ]);
    let client = node.client();
    let path = "/rest/blockpart/00.bin?offset=1&size=2";
    assert_eq!(client.rest_get(path).unwrap(), Some(binary));
    assert_eq!(client.rest_get(path).unwrap(), None);
    assert!(client.rest_get(path).unwrap_err().is_transient());
    let e = client.rest_get(path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Persistent);
    assert!(
        e.to_string().contains("HTTP 500") && e.to_string().contains("broken"),
        "{e}"
    );
    let received = node.received();
    assert!(
        received[0]
            .head
            .starts_with(&format!("GET {path} HTTP/1.1\r\n")),
        "{}",
        received[0].head
    );
    assert_eq!(
        received[0].header("authorization"),
        None,
        "REST needs no credentials"
    );
}

#[test]
fn a_batch_is_matched_by_id_in_any_order() {
    // The client numbers from 1: the batch gets ids 1, 2 and 3.
    let answers = r#"[{"result":"c","error":null,"id":3},
        {"result":null,"error":{"code":-5,"message":"no such block"},"id":2},
        {"result":"a","error":null,"id":1}]"#;
    let node = CannedNode::start(vec![keep(reply("200 OK", answers))]);
    let results = node
        .client()
        .call_batch(
            "getblockhash",
            &[vec![json!(0)], vec![json!(1)], vec![json!(2)]],
        )
        .unwrap();
    assert_eq!(results[0].as_ref().unwrap(), &json!("a"));
    assert_eq!(results[1].as_ref().unwrap_err().code(), -5);
    assert_eq!(results[2].as_ref().unwrap(), &json!("c"));
    let sent: Value = serde_json::from_slice(&node.received()[0].body).unwrap();
    assert_eq!(sent.as_array().map(Vec::len), Some(3));
}

#[test]
fn a_batch_reply_that_does_not_fit_the_batch_is_an_error() {
    let cases = [
        r#"[{"result":"a","error":null,"id":1}]"#,
        r#"[{"result":"a","error":null,"id":1},{"result":"b","error":null,"id":9}]"#,
        r#"{"result":null,"error":{"code":-32600,"message":"bad batch"},"id":null}"#,
    ];
    for answers in cases {
        let node = CannedNode::start(vec![keep(reply("200 OK", answers))]);
        let outcome = node
            .client()
            .call_batch("getblockhash", &[vec![json!(0)], vec![json!(1)]]);
        assert!(outcome.is_err(), "{answers}");
    }
}

#[test]
fn an_unreachable_node_is_a_transient_error() {
    // A port just released: nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client = RpcClient::new(&addr.to_string(), Auth::UserPass("u".into(), "p".into()));
    let e = call(&client).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(e.to_string().contains("cannot connect"), "{e}");
}

#[test]
fn a_batch_answered_during_warmup_fails_as_a_whole() {
    // Core restarting answers each call of a batch with -28: read one by
    // one, the first "error" would look like the end of the chain.
    let answers = r#"[{"result":"a","error":null,"id":1},
        {"result":null,"error":{"code":-28,"message":"Loading block index…"},"id":2}]"#;
    let node = CannedNode::start(vec![keep(reply("200 OK", answers))]);
    let client = node.client();
    let e = client
        .call_batch("getblockhash", &[vec![json!(0)], vec![json!(1)]])
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(e.code(), -28);
    assert!(client.is_down(), "a node warming up is waited for");
}

#[test]
fn an_outage_lasts_from_the_first_failure_to_the_next_answer() {
    let node = CannedNode::start(vec![
        keep(reply(
            "200 OK",
            r#"{"result":null,"error":{"code":-28,"message":"Verifying blocks…"},"id":1}"#,
        )),
        keep(reply(
            "200 OK",
            r#"{"result":null,"error":{"code":-28,"message":"Verifying blocks…"},"id":2}"#,
        )),
        // The node's own error is an answer: it is up.
        keep(reply(
            "200 OK",
            r#"{"result":null,"error":{"code":-5,"message":"not found"},"id":3}"#,
        )),
    ]);
    let client = node.client();
    assert!(!client.is_down());
    for _ in 0..2 {
        assert!(call(&client).unwrap_err().is_transient());
        assert!(client.is_down());
    }
    assert_eq!(call(&client).unwrap_err().code(), -5);
    assert!(!client.is_down(), "an answer ends the outage");
}
