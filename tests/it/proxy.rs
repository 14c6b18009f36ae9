//! The PROXY protocol behind a real HAProxy (Debian's), and IPv6 clients
//! counted by their /64. HAProxy connects to Osprey from 127.0.0.5 (its
//! `source`), the one address in `--proxy-protocol-from`; clients reach
//! HAProxy from 127.0.0.2 and 127.0.0.3, which its headers pass on. The
//! harness itself connects from 127.0.0.1, without a header.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use electrum_client::{ConfigBuilder, ElectrumApi};
use osprey_testenv::Node;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::common::osprey::{free_port, ANY_PORT};
use crate::common::{start_btcd, wait_until, Osprey, OspreyConfig};

/// Where HAProxy connects to Osprey from.
pub(crate) const PROXY_SOURCE: &str = "127.0.0.5";
/// How long an answer (or a close) may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// HAProxy, found through `$OSPREY_HAPROXY`, the PATH or /usr/sbin (where
/// Debian puts it, often off a user's PATH).
pub(crate) fn haproxy_exe() -> PathBuf {
    if let Some(exe) = std::env::var_os("OSPREY_HAPROXY") {
        return exe.into();
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("haproxy"))
            .find(|exe| exe.is_file())
    });
    let exe = on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/haproxy"));
    assert!(
        exe.is_file(),
        "this test needs HAProxy: install it with scripts/setup.sh \
         (apt-get install haproxy) or point $OSPREY_HAPROXY at it"
    );
    exe
}

/// A running HAProxy, killed when dropped.
pub(crate) struct Haproxy {
    child: Child,
    log: PathBuf,
}

impl Haproxy {
    /// Starts HAProxy with one TCP-mode frontend per `(frontend, backend,
    /// option)`: connections to `frontend` are relayed to `backend` from
    /// [`PROXY_SOURCE`], each starting with the header `option`
    /// (`send-proxy` or `send-proxy-v2`) asks for.
    fn start(dir: &Path, routes: &[(SocketAddr, SocketAddr, &str)]) -> Haproxy {
        let mut config = String::from(
            "global\n    maxconn 100\n\
             defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n",
        );
        for (i, (frontend, backend, option)) in routes.iter().enumerate() {
            config.push_str(&format!(
                "frontend in{i}\n    bind {frontend}\n    default_backend out{i}\n\
                 backend out{i}\n    server osprey {backend} source {PROXY_SOURCE} {option}\n"
            ));
        }
        let frontends: Vec<SocketAddr> = routes.iter().map(|(frontend, _, _)| *frontend).collect();
        Haproxy::with_config(dir, &config, &frontends)
    }

    /// Starts HAProxy with `config` and waits until each of `frontends`
    /// accepts connections.
    pub(crate) fn with_config(dir: &Path, config: &str, frontends: &[SocketAddr]) -> Haproxy {
        let config_path = dir.join("haproxy.cfg");
        std::fs::write(&config_path, config).expect("writing haproxy.cfg");
        let log = dir.join("haproxy.log");
        let log_file = std::fs::File::create(&log).expect("haproxy.log");
        let child = Command::new(haproxy_exe())
            // Foreground, no daemon; the configuration checked first.
            .arg("-db")
            .arg("-f")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log handle"))
            .stderr(log_file)
            .spawn()
            .expect("starting haproxy");
        let mut haproxy = Haproxy { child, log };
        for frontend in frontends {
            wait_until("HAProxy listens", Duration::from_secs(20), || {
                if let Ok(Some(status)) = haproxy.child.try_wait() {
                    panic!("haproxy exited with {status}: {}", haproxy.log_text());
                }
                TcpStream::connect(frontend).ok()
            });
        }
        haproxy
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("haproxy's log:\n{}", self.log_text());
        }
    }
}

/// A connection to `to` from the local address `from` (any port), in
/// blocking mode.
pub(crate) fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a runtime to connect with");
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(SocketAddr::new(from.parse().expect("an address"), 0))
            .unwrap_or_else(|e| panic!("binding {from}: {e}"));
        socket
            .connect(to)
            .await
            .unwrap_or_else(|e| panic!("connecting to {to} from {from}: {e}"))
    });
    let stream = stream.into_std().expect("a std socket");
    stream.set_nonblocking(false).expect("blocking mode");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

/// One connection speaking JSON lines, on a socket made elsewhere.
struct Lines {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    next_id: u64,
}

impl Lines {
    fn new(stream: TcpStream) -> Lines {
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .expect("read timeout");
        Lines {
            writer: stream.try_clone().expect("a second handle"),
            reader: BufReader::new(stream),
            next_id: 1,
        }
    }

    /// Sends `bytes` as they are (a PROXY header, say).
    fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("sending");
    }

    /// Sends one request; `None` when the connection is closed (or reset)
    /// before an answer, else the first line that came back.
    fn call(&mut self, method: &str, params: Value) -> Option<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self
            .writer
            .write_all(format!("{line}\n").as_bytes())
            .is_err()
        {
            return None;
        }
        self.read_line()
    }

    /// The next line, `None` at the end of the stream or on a reset.
    fn read_line(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("a JSON line")),
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                None
            }
            Err(e) => panic!("reading an answer: {e}"),
        }
    }

    /// Whether the session is served: `server.version` answered.
    fn served(&mut self) -> bool {
        match self.call("server.version", json!(["proxy-it", "1.4"])) {
            Some(answer) if answer.get("result").is_some() => true,
            Some(answer) => {
                assert_eq!(answer["error"]["code"], json!(-102), "{answer}");
                assert!(self.read_line().is_none(), "closed after its refusal");
                false
            }
            None => panic!("closed without a word"),
        }
    }

    /// Whether the server closed the connection without answering.
    fn closed_unanswered(&mut self) -> bool {
        self.call("server.version", json!(["proxy-it", "1.4"]))
            .is_none()
    }
}

/// A PROXY v2 header for a TCP client at `source`, sent to 127.0.0.1:50001
/// (or ::1), built here byte by byte from the spec.
fn v2_header(source: SocketAddr) -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.push(0x21); // version 2, PROXY
    let mut block = Vec::new();
    match source.ip() {
        IpAddr::V4(ip) => {
            header.push(0x11);
            block.extend_from_slice(&ip.octets());
            block.extend_from_slice(&[127, 0, 0, 1]);
        }
        IpAddr::V6(ip) => {
            header.push(0x21);
            block.extend_from_slice(&ip.octets());
            block.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        }
    }
    block.extend_from_slice(&source.port().to_be_bytes());
    block.extend_from_slice(&50001u16.to_be_bytes());
    header.extend_from_slice(&(block.len() as u16).to_be_bytes());
    header.extend_from_slice(&block);
    header
}

/// A direct connection from HAProxy's address that starts with `header`.
fn relayed(osprey: SocketAddr, header: &[u8]) -> Lines {
    let mut lines = Lines::new(connect_from(PROXY_SOURCE, osprey));
    lines.send_raw(header);
    lines
}

/// Waits until the server's log contains `text`.
fn wait_for_log(osprey: &Osprey, text: &str) {
    wait_until(&format!("the log says {text:?}"), ANSWER_TIMEOUT, || {
        osprey.log().contains(text).then_some(())
    });
}

/// 1. Start btcd, and osprey with a TLS and a WebSocket listener,
///    `--sessions-per-ip-max 2` and `--proxy-protocol-from 127.0.0.5/32`;
///    HAProxy in front of TCP (one `send-proxy`, one `send-proxy-v2`
///    frontend), TLS (`send-proxy-v2`) and WebSocket (`send-proxy`).
/// 2. Through the v1 frontend, 127.0.0.2 gets two sessions and its third
///    connection a -102 line: the cap counts 127.0.0.2, the address
///    HAProxy passed. Through the v2 frontend, 127.0.0.3 still gets two
///    (the cap did not count HAProxy's own address); the log names each
///    client and the proxy.
/// 3. TLS and WebSocket through HAProxy: the header comes before their
///    handshakes, and the sessions are served.
/// 4. Headers crafted from 127.0.0.5: two IPv6 addresses of one /64 share
///    its two places (v1 and v2 headers), another /64 does not; a LOCAL
///    header (a health check) counts as the proxy.
/// 5. From 127.0.0.5 without a header: closed unanswered. From anyone
///    else with a header (v1 or v2), to TCP and to WebSocket: closed
///    unanswered. A client that sends none is served as always.
#[test]
fn the_per_ip_cap_sees_the_client_haproxy_names() {
    // 1.
    let node = start_btcd();
    node.generate(3).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&[
            "--sessions-per-ip-max",
            "2",
            "--proxy-protocol-from",
            &format!("{PROXY_SOURCE}/32"),
            "--electrum-tls-addr",
            ANY_PORT,
            "--electrum-ws-addr",
            ANY_PORT,
        ]),
    );
    let reported = |protocol| {
        osprey
            .listening(protocol)
            .unwrap_or_else(|| panic!("osprey serves but reports no {protocol} listener"))
    };
    let (tls_addr, ws_addr) = (reported("tls"), reported("ws"));
    let front = |_| SocketAddr::from(([127, 0, 0, 1], free_port()));
    let [tcp_v1, tcp_v2, tls_v2, ws_v1]: [SocketAddr; 4] = [0, 1, 2, 3].map(front);
    let haproxy = Haproxy::start(
        dir.path(),
        &[
            (tcp_v1, osprey.addr(), "send-proxy"),
            (tcp_v2, osprey.addr(), "send-proxy-v2"),
            (tls_v2, tls_addr, "send-proxy-v2"),
            (ws_v1, ws_addr, "send-proxy"),
        ],
    );

    // 2.
    let mut from_2: Vec<Lines> = (0..2)
        .map(|_| Lines::new(connect_from("127.0.0.2", tcp_v1)))
        .collect();
    for (i, session) in from_2.iter_mut().enumerate() {
        assert!(
            session.served(),
            "127.0.0.2's session {i} through send-proxy"
        );
    }
    let mut third = Lines::new(connect_from("127.0.0.2", tcp_v1));
    assert!(!third.served(), "127.0.0.2's third session is refused");
    let mut from_3: Vec<Lines> = (0..2)
        .map(|_| Lines::new(connect_from("127.0.0.3", tcp_v2)))
        .collect();
    for (i, session) in from_3.iter_mut().enumerate() {
        assert!(
            session.served(),
            "127.0.0.3's session {i} through send-proxy-v2"
        );
    }
    assert!(
        !Lines::new(connect_from("127.0.0.3", tcp_v2)).served(),
        "127.0.0.3's third session is refused"
    );
    wait_for_log(&osprey, "peer=127.0.0.2:");
    wait_for_log(&osprey, "peer=127.0.0.3:");
    wait_for_log(&osprey, &format!("proxy={PROXY_SOURCE}:"));
    assert!(
        !osprey.log().contains(&format!("peer={PROXY_SOURCE}")),
        "no session was taken to come from HAProxy"
    );
    drop(from_2);
    wait_until("127.0.0.2's places come back", ANSWER_TIMEOUT, || {
        Lines::new(connect_from("127.0.0.2", tcp_v2))
            .served()
            .then_some(())
    });

    // 3.
    let config = ConfigBuilder::new()
        .validate_domain(false)
        .timeout(Some(ANSWER_TIMEOUT))
        .retry(0)
        .build();
    let tls = electrum_client::Client::from_config(&format!("ssl://{tls_v2}"), config)
        .unwrap_or_else(|e| panic!("TLS through HAProxy: {e:?}"));
    let features = tls.server_features().expect("server.features over TLS");
    assert!(features.server_version.starts_with("Osprey"));
    let stream = TcpStream::connect(ws_v1).expect("connecting to HAProxy's ws frontend");
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .expect("read timeout");
    let (mut ws, _) =
        tungstenite::client(format!("ws://{ws_v1}/"), stream).expect("WebSocket handshake");
    ws.send(Message::text(
        json!({"jsonrpc": "2.0", "id": 1, "method": "server.version", "params": ["it", "1.4"]})
            .to_string(),
    ))
    .expect("sending over WebSocket");
    let answer = ws.read().expect("an answer over WebSocket");
    assert!(answer.to_text().unwrap().contains("\"1.4\""), "{answer:?}");
    wait_for_log(&osprey, "protocol=tls proxy=127.0.0.5:");
    wait_for_log(&osprey, "protocol=ws proxy=127.0.0.5:");

    // 4.
    let same_64 = ["[2001:db8:1:2::1]:4001", "[2001:db8:1:2:ffff::9]:4002"];
    let mut v6 = [
        relayed(osprey.addr(), &v2_header(same_64[0].parse().unwrap())),
        relayed(
            osprey.addr(),
            b"PROXY TCP6 2001:db8:1:2:ffff::9 ::1 4002 50001\r\n",
        ),
    ];
    for (i, session) in v6.iter_mut().enumerate() {
        assert!(session.served(), "{}'s session", same_64[i]);
    }
    let third_in_64 = "[2001:db8:1:2:abcd::3]:4003".parse().unwrap();
    assert!(
        !relayed(osprey.addr(), &v2_header(third_in_64)).served(),
        "a third address of the same /64 is refused"
    );
    let next_64 = "[2001:db8:1:3::1]:4004".parse().unwrap();
    assert!(relayed(osprey.addr(), &v2_header(next_64)).served());
    let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";
    // One after the other: admitted in the order they connect.
    let mut checks = Vec::new();
    for i in 0..2 {
        let mut check = relayed(osprey.addr(), local);
        assert!(check.served(), "health check {i} is served");
        checks.push(check);
    }
    assert!(
        !relayed(osprey.addr(), local).served(),
        "a third counts against 127.0.0.5 like any address"
    );
    drop(checks);

    // 5.
    let mut headless = Lines::new(connect_from(PROXY_SOURCE, osprey.addr()));
    assert!(headless.closed_unanswered(), "no header from the proxy");
    wait_for_log(&osprey, "closing a connection from a proxy");
    let spoofs: [&[u8]; 2] = [
        b"PROXY TCP4 192.0.2.9 127.0.0.1 4000 50001\r\n",
        &v2_header("192.0.2.9:4000".parse().unwrap()),
    ];
    for spoof in spoofs {
        let mut direct = Lines::new(connect_from("127.0.0.4", osprey.addr()));
        direct.send_raw(spoof);
        assert!(direct.closed_unanswered(), "a header from 127.0.0.4");
        let mut through = Lines::new(connect_from("127.0.0.4", tcp_v2));
        through.send_raw(spoof);
        assert!(
            through.closed_unanswered(),
            "a second header, after HAProxy's"
        );
        let mut ws_direct = Lines::new(connect_from("127.0.0.4", ws_addr));
        // In one write: the server may close as soon as it sees the header.
        ws_direct.send_raw(&[spoof, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"].concat());
        assert!(ws_direct.read_line().is_none(), "a header to the ws port");
    }
    wait_for_log(
        &osprey,
        "a PROXY header from a source not in proxy_protocol_from",
    );
    assert!(
        !osprey.log().contains("peer=192.0.2.9"),
        "no session was taken to come from a spoofed address"
    );
    let mut plain = Lines::new(connect_from("127.0.0.4", osprey.addr()));
    assert!(plain.served(), "a client without a header is served");
    drop(haproxy);
}
