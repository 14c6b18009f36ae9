//! The `osprey serve` child process: started against a harness node with
//! its Electrum port at 0, so that the process binds a free loopback port
//! itself and no other process can take it between a pick and the bind;
//! the test reads the bound address back from the log. Waited for until it
//! serves the node's tip, stopped with SIGTERM or SIGKILL, and killed when
//! dropped. Its stderr goes to a log file next to its `--db-dir` (appended
//! to across restarts, each start marked); when a test fails, the drop
//! prints the address, the directory and the log's tail.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use electrum_client::{Client, ConfigBuilder};
use osprey_testenv::{Node, NodeKind};
use serde_json::json;

use super::session::Session;
use super::SYNC_TIMEOUT;

/// Lines of the server's log printed when a test fails.
const LOG_TAIL_LINES: usize = 150;
/// A script hash no chain pays: asking its balance tells whether wallets
/// are served yet.
const UNUSED_SCRIPTHASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How Osprey is started: extra flags on top of the harness's own.
#[derive(Clone, Debug, Default)]
pub struct OspreyConfig {
    /// Extra `osprey serve` flags, e.g. `["--batch-requests-max", "5"]`.
    pub args: Vec<String>,
    /// The log's path when not the one beside `--db-dir` (a read-only
    /// replica shares its writer's `--db-dir`).
    pub log_path: Option<PathBuf>,
    /// `TMPDIR` of the process (a replica's RocksDB secondary directory
    /// goes there).
    pub tmpdir: Option<PathBuf>,
    /// Extra environment variables (not `OSPREY_*`: those are removed),
    /// e.g. an `LD_PRELOAD` that injects faults.
    pub env: Vec<(String, String)>,
    /// `--electrum-rpc-addr` when not [`ANY_PORT`]: a server that must
    /// name its own port in a setting (`--public-hosts`).
    pub electrum_rpc_addr: Option<String>,
}

impl OspreyConfig {
    pub fn with_args(args: &[&str]) -> OspreyConfig {
        OspreyConfig {
            args: args.iter().map(|a| a.to_string()).collect(),
            ..OspreyConfig::default()
        }
    }

    /// `osprey serve --read-only`, logging to `log_path`, with `tmpdir` as
    /// its `TMPDIR`.
    pub fn read_only(log_path: &Path, tmpdir: &Path) -> OspreyConfig {
        OspreyConfig {
            args: vec!["--read-only".into()],
            log_path: Some(log_path.to_path_buf()),
            tmpdir: Some(tmpdir.to_path_buf()),
            ..OspreyConfig::default()
        }
    }
}

/// What a listener flag set to this lets the process pick: a free
/// loopback port, bound once, reported in its log.
pub const ANY_PORT: &str = "127.0.0.1:0";

/// A loopback port that was free a moment ago, for a port a test must
/// write down before the process that binds it starts (an electrs config
/// file, HAProxy's frontends): another process may take it in between.
/// Osprey's own listeners take [`ANY_PORT`] instead.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    listener
        .local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// A running (or stopped) `osprey serve`.
pub struct Osprey {
    child: Option<Child>,
    /// Where Electrum clients connect, once the process reported it.
    addr: Option<SocketAddr>,
    db_dir: PathBuf,
    log_path: PathBuf,
    /// Where this start's part of the log begins.
    log_start: usize,
    node_rpc: SocketAddr,
    config: OspreyConfig,
    started: Instant,
}

impl Osprey {
    /// Starts `osprey serve` on `db_dir` against `node` and waits until it
    /// serves the node's tip.
    ///
    /// # Panics
    /// When it exits or does not catch up within [`SYNC_TIMEOUT`].
    pub fn start(node: &dyn Node, db_dir: &Path, config: OspreyConfig) -> Osprey {
        let mut osprey = Osprey::spawn(node, db_dir, config);
        osprey.wait_ready(node);
        osprey
    }

    /// Starts `osprey serve` without waiting for anything.
    ///
    /// # Panics
    /// When the binary cannot be run.
    pub fn spawn(node: &dyn Node, db_dir: &Path, config: OspreyConfig) -> Osprey {
        let log_path = config
            .log_path
            .clone()
            .unwrap_or_else(|| db_dir.with_extension("log"));
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log_path.display()));
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--network".into(),
            "regtest".into(),
            "--daemon-rpc-addr".into(),
            node.rpc_addr().to_string(),
        ];
        // Bitcoin Core as its users run it: the cookie and the block files
        // found through --daemon-dir. btcd: its RPC user and password.
        match node.kind() {
            NodeKind::Bitcoind => {
                args.extend(["--daemon-dir".into(), node.datadir().display().to_string()])
            }
            NodeKind::Btcd => {
                let (user, pass) = node.auth();
                args.extend(["--auth".into(), format!("{user}:{pass}")]);
            }
        }
        args.extend([
            "--db-dir".into(),
            db_dir.display().to_string(),
            "--electrum-rpc-addr".into(),
            config
                .electrum_rpc_addr
                .clone()
                .unwrap_or_else(|| ANY_PORT.into()),
            "--poll-interval-ms".into(),
            "100".into(),
            "--log-filter".into(),
            "debug".into(),
        ]);
        args.extend(config.args.iter().cloned());
        writeln!(log, "\n===== osprey {} =====", args.join(" ")).expect("writing the log");
        let log_start = std::fs::metadata(&log_path)
            .map(|m| m.len() as usize)
            .unwrap_or_default();
        let mut command = Command::new(env!("CARGO_BIN_EXE_osprey"));
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        // A log for people: no colour codes.
        command.env("NO_COLOR", "1");
        // No stray ./osprey.toml or OSPREY_* variable may change the setup.
        command.current_dir(db_dir.parent().unwrap_or(Path::new("/")));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OSPREY_") {
                command.env_remove(key);
            }
        }
        if let Some(tmpdir) = &config.tmpdir {
            command.env("TMPDIR", tmpdir);
        }
        command.envs(config.env.iter().map(|(k, v)| (k, v)));
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", env!("CARGO_BIN_EXE_osprey")));
        eprintln!(
            "osprey pid {}, db {}, log {}, node rpc {}",
            child.id(),
            db_dir.display(),
            log_path.display(),
            node.rpc_addr()
        );
        Osprey {
            child: Some(child),
            addr: None,
            db_dir: db_dir.to_path_buf(),
            log_path,
            log_start,
            node_rpc: node.rpc_addr(),
            config,
            started: Instant::now(),
        }
    }

    /// The address the process reports its `protocol` listener (`tcp`,
    /// `tls`, `ws` or `wss`) bound, in this start's log; `None` until it
    /// logged it.
    pub fn listening(&self, protocol: &str) -> Option<SocketAddr> {
        let log = self.log();
        complete_lines(log.get(self.log_start..).unwrap_or_default())
            .into_iter()
            .find_map(|line| listening_on(line, protocol))
    }

    /// The address `/metrics` is served on, as the process reports it in
    /// this start's log (`--monitoring-addr`).
    ///
    /// # Panics
    /// When the process has not logged it.
    pub fn metrics_addr(&self) -> SocketAddr {
        let log = self.log();
        let this_start = log.get(self.log_start..).unwrap_or_default();
        complete_lines(this_start)
            .into_iter()
            .find_map(|l| {
                let (_, rest) = l.split_once("metrics: http://")?;
                rest.strip_suffix("/metrics")?.parse().ok()
            })
            .unwrap_or_else(|| panic!("no metrics address in the log:\n{this_start}"))
    }

    /// Waits until a whole line of this start's log satisfies `wanted`, and
    /// returns it: the process said it reached a state.
    ///
    /// # Panics
    /// When the process exits first, or no such line comes within
    /// `timeout` (`what` says what was awaited).
    pub fn wait_log_line(
        &mut self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        let started = Instant::now();
        loop {
            let log = self.log();
            let this_start = log.get(self.log_start..).unwrap_or_default();
            if let Some(line) = complete_lines(this_start).into_iter().find(|l| wanted(l)) {
                return line.to_string();
            }
            if let Some(status) = self.try_wait() {
                panic!(
                    "osprey exited with {status} before {what}; log:\n{}",
                    self.log_tail(LOG_TAIL_LINES)
                );
            }
            assert!(
                started.elapsed() < timeout,
                "no log line after {timeout:?}: {what}; log:\n{}",
                self.log_tail(LOG_TAIL_LINES)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Where Electrum clients connect: the TCP listener's bound address.
    ///
    /// # Panics
    /// When it is not known yet (see [`Osprey::wait_listening`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr
            .expect("the Electrum port is not known yet: wait_listening or wait_ready reads it")
    }

    /// Waits until the process reports its Electrum TCP port bound (it
    /// opens before the first sync), and returns it.
    ///
    /// # Panics
    /// When the process exits first or does not bind within
    /// [`SYNC_TIMEOUT`].
    pub fn wait_listening(&mut self) -> SocketAddr {
        if let Some(addr) = self.addr {
            return addr;
        }
        let line = self.wait_log_line("the Electrum TCP port is bound", SYNC_TIMEOUT, |line| {
            listening_on(line, "tcp").is_some()
        });
        let addr = listening_on(&line, "tcp").expect("the line was picked for its address");
        eprintln!("osprey pid {:?} listens for Electrum on {addr}", self.pid());
        self.addr = Some(addr);
        addr
    }

    /// Waits (after a [`Osprey::spawn`]) until the server listens,
    /// answers `server.version`, and serves the node's tip.
    ///
    /// # Panics
    /// When it exits or does not catch up within [`SYNC_TIMEOUT`].
    pub fn wait_ready(&mut self, node: &dyn Node) {
        let addr = self.wait_listening();
        let mut session = Session::try_connect(addr)
            .unwrap_or_else(|e| panic!("osprey listens on {addr} but refuses: {e}"));
        session.negotiate(json!("1.4"));
        self.wait_synced(node);
    }

    /// Waits until `blockchain.headers.subscribe` reports the node's tip
    /// (height and header bytes).
    ///
    /// # Panics
    /// When that takes longer than [`SYNC_TIMEOUT`].
    pub fn wait_synced(&mut self, node: &dyn Node) {
        let mut session = self.session();
        session.negotiate(json!("1.4"));
        let started = Instant::now();
        loop {
            let (height, hash) = node.tip().expect("asking the node for its tip");
            let header: String = node
                .rpc()
                .call("getblockheader", &[json!(hash.to_string()), json!(false)])
                .expect("getblockheader");
            // Every call is a fresh answer: the subscription's first reply
            // (an error before the first sync's first commit).
            let tip = session
                .raw_call("blockchain.headers.subscribe", json!([]))
                .unwrap_or_default();
            // Headers are answered during the first sync too: at the tip,
            // wallets are served once a script question gets no error.
            if tip["height"] == json!(height)
                && tip["hex"] == json!(header)
                && session
                    .raw_call(
                        "blockchain.scripthash.get_balance",
                        json!([UNUSED_SCRIPTHASH]),
                    )
                    .is_ok()
            {
                return;
            }
            if started.elapsed() > SYNC_TIMEOUT {
                panic!(
                    "osprey at {} still reports tip {tip} after {SYNC_TIMEOUT:?}; node is at {height} {hash}",
                    self.addr()
                );
            }
            if let Some(status) = self.try_wait() {
                panic!("osprey exited with {status} while catching up");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A fresh raw JSON-RPC session (no `server.version` sent yet).
    pub fn session(&self) -> Session {
        Session::connect(self.addr())
    }

    /// A fresh `electrum-client` connection (it negotiates protocol 1.6),
    /// with a timeout so that a hung server fails the test.
    pub fn client(&self) -> Client {
        let config = ConfigBuilder::new()
            .timeout(Some(Duration::from_secs(30)))
            .retry(0)
            .build();
        let addr = self.addr();
        Client::from_config(&format!("tcp://{addr}"), config)
            .unwrap_or_else(|e| panic!("electrum-client connecting to {addr}: {e:?}"))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Time since the process was started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("waiting on osprey"))
    }

    /// Returns true while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if started.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits (bounded) for a clean exit.
    ///
    /// # Panics
    /// When it does not exit within 30 s or exits with an error.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.pid().expect("osprey is running");
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("running kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let status = match self.wait_exit(Duration::from_secs(30)) {
            Some(status) => status,
            None => panic!(
                "osprey {pid} still runs 30 s after SIGTERM; log:\n{}",
                self.log_tail(LOG_TAIL_LINES)
            ),
        };
        self.child = None;
        status
    }

    /// Kills the process with SIGKILL, as a power cut would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Lets the process run for `duration` (or until it exits, which is
    /// returned) and then returns: the timer of a kill test.
    pub fn run_for(&mut self, duration: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            std::thread::sleep(
                Duration::from_millis(5).min(until.saturating_duration_since(Instant::now())),
            );
        }
        None
    }

    /// The whole log (every start on this `--db-dir`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The address in a line `Electrum server listening protocol=PROTOCOL
/// addr=ADDR` (the server crate's, logged once the listener is bound).
fn listening_on(line: &str, protocol: &str) -> Option<SocketAddr> {
    if !line.contains("Electrum server listening") {
        return None;
    }
    let mut fields = line.split_whitespace();
    let wanted = format!("protocol={protocol}");
    if !fields.clone().any(|field| field == wanted) {
        return None;
    }
    fields
        .find_map(|field| field.strip_prefix("addr="))
        .and_then(|addr| addr.parse().ok())
}

/// The lines of a log being written that are whole: a line still being
/// written could end in a shorter port number.
fn complete_lines(log: &str) -> Vec<&str> {
    log.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
        .collect()
}

impl Drop for Osprey {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- osprey on {:?} (db {}, node rpc {}, flags {:?}): last {LOG_TAIL_LINES} log lines of {} ----\n{}\n----",
                self.addr,
                self.db_dir.display(),
                self.node_rpc,
                self.config.args,
                self.log_path.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        self.kill9();
    }
}
