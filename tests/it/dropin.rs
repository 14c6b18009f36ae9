//! Osprey as a drop-in for electrs: each node distribution's own launch of
//! electrs (its working directory, `HOME`, arguments, variables and config
//! files, as `tests/data/dropin/<distribution>/launch.toml` reproduces
//! them from the distribution's sources, named in each file's header),
//! with the program renamed `osprey` and nothing else changed but what a
//! test on one machine must (regtest, the node's address and credentials,
//! loopback ports, paths under a temporary root), starts Osprey against
//! one Bitcoin Core regtest node and serves the node's tip.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use osprey_testenv::{BitcoindNode, BitcoindOptions, Node};
use serde_json::json;

use crate::common::osprey::free_port;
use crate::common::{Session, SYNC_TIMEOUT};

/// The distributions, one directory each under `tests/data/dropin/`.
const DISTRIBUTIONS: &[&str] = &[
    "umbrel",
    "start9",
    "nix-bitcoin",
    "mynode",
    "raspiblitz",
    "citadel",
    "ronindojo",
    "parmanode",
];

/// Osprey's own app definitions (`contrib/`), reproduced as the
/// distributions' launches are, under `tests/data/dropin/`.
const APP_DEFINITIONS: &[&str] = &["app-startos", "app-mynode", "app-raspiblitz"];

/// Lines of Osprey's log shown when a launch fails.
const LOG_TAIL_LINES: usize = 60;

/// What a `launch.toml` says, its placeholders filled in.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Launch {
    cwd: PathBuf,
    home: PathBuf,
    args: Vec<String>,
    /// Lines the log must contain: the startup warnings this launch earns.
    expect_log: Vec<String>,
    env: std::collections::BTreeMap<String, String>,
    /// A file of the fixture's directory -> where the distribution writes it.
    files: std::collections::BTreeMap<String, PathBuf>,
    /// Where the distribution mounts the node's data -> the node's path.
    links: std::collections::BTreeMap<PathBuf, PathBuf>,
    /// Files of Osprey's own app definitions (`contrib/`), laid out as
    /// the app lays them out.
    #[serde(default)]
    from_contrib: Vec<FromContrib>,
    /// `[file, line]`: lines a file of `contrib/` must have, so that the
    /// launch reproduced here is the app definition's.
    #[serde(default)]
    contrib_lines: Vec<[String; 2]>,
}

/// A file of `contrib/` (or the lines of it between two lines: a script's
/// heredoc) written where the app writes it, with what a test on one
/// machine must change replaced.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FromContrib {
    file: String,
    between: Option<[String; 2]>,
    to: PathBuf,
    /// `[from, to]`, in order; each `from` must be in the text, so a
    /// change of the file cannot make a replacement silently miss.
    replace: Vec<[String; 2]>,
}

impl FromContrib {
    fn text(&self) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(&self.file);
        let whole = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut text = match &self.between {
            None => whole,
            Some([first, last]) => {
                let lines: Vec<&str> = whole.lines().collect();
                let start = lines
                    .iter()
                    .position(|l| l == first)
                    .unwrap_or_else(|| panic!("{}: no line {first:?}", self.file));
                let len = lines[start + 1..]
                    .iter()
                    .position(|l| l == last)
                    .unwrap_or_else(|| panic!("{}: no line {last:?} after {first:?}", self.file));
                lines[start + 1..start + 1 + len].join("\n") + "\n"
            }
        };
        for [from, to] in &self.replace {
            assert!(
                text.contains(from.as_str()),
                "{}: {from:?} is not in the text to replace",
                self.file
            );
            text = text.replace(from.as_str(), to);
        }
        text
    }
}

/// The values the placeholders of one launch stand for.
struct Placeholders {
    root: PathBuf,
    rpc: SocketAddr,
    user: String,
    password: String,
    datadir: PathBuf,
    electrum: SocketAddr,
    monitoring: SocketAddr,
}

impl Placeholders {
    fn fill(&self, text: &str) -> String {
        text.replace("{root}", &self.root.display().to_string())
            .replace("{rpc}", &self.rpc.to_string())
            .replace("{user}", &self.user)
            .replace("{password}", &self.password)
            .replace("{datadir}", &self.datadir.display().to_string())
            .replace("{electrum}", &self.electrum.to_string())
            .replace("{monitoring}", &self.monitoring.to_string())
    }
}

/// `osprey` started as a distribution starts electrs; killed when dropped,
/// its log shown if the test is failing.
struct Started {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Started {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- {}: last {LOG_TAIL_LINES} lines of {} ----\n{}\n----",
                self.name,
                self.log.display(),
                self.log_tail()
            );
        }
    }
}

/// Lays out `name`'s launch under `root` (files, links, directories) and
/// starts `osprey` so; returns it and where it serves.
fn start(name: &'static str, node: &BitcoindNode, root: &Path) -> (Started, Launch) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/dropin")
        .join(name);
    let (user, password) = node.auth();
    let values = Placeholders {
        root: root.to_path_buf(),
        rpc: node.rpc_addr(),
        user: user.to_string(),
        password: password.to_string(),
        datadir: node.datadir().to_path_buf(),
        electrum: SocketAddr::from(([127, 0, 0, 1], free_port())),
        monitoring: SocketAddr::from(([127, 0, 0, 1], free_port())),
    };
    let read = |file: &str| {
        let path = fixture.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        values.fill(&text)
    };
    let launch: Launch =
        toml::from_str(&read("launch.toml")).unwrap_or_else(|e| panic!("{name}/launch.toml: {e}"));
    for dir in [&launch.cwd, &launch.home] {
        std::fs::create_dir_all(dir).unwrap();
    }
    for (file, to) in &launch.files {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, read(file)).unwrap();
    }
    for from in &launch.from_contrib {
        std::fs::create_dir_all(from.to.parent().unwrap()).unwrap();
        std::fs::write(&from.to, from.text()).unwrap();
    }
    for [file, line] in &launch.contrib_lines {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        assert!(
            text.lines().any(|l| l == line),
            "{name}: {file} has no line {line:?}"
        );
    }
    for (link, target) in &launch.links {
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, link).unwrap();
    }
    let log = root.join("osprey.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_osprey"));
    command
        .args(&launch.args)
        .current_dir(&launch.cwd)
        // Only what the distribution sets: no variable of this machine.
        .env_clear()
        .env("HOME", &launch.home)
        .envs(&launch.env)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", env!("CARGO_BIN_EXE_osprey")));
    eprintln!(
        "{name}: osprey {:?} in {}, serving {}, log {}",
        launch.args,
        launch.cwd.display(),
        values.electrum,
        log.display()
    );
    let electrum = values.electrum;
    let mut started = Started { name, child, log };
    wait_for_tip(&mut started, electrum, node);
    (started, launch)
}

/// Waits until `blockchain.headers.subscribe` at `electrum` answers the
/// node's height, failing with the log if Osprey exits or time runs out.
fn wait_for_tip(started: &mut Started, electrum: SocketAddr, node: &BitcoindNode) {
    let (height, _) = node.tip().expect("the node's tip");
    let began = Instant::now();
    loop {
        // The port may open before the first sync, and answer with an
        // error until the index has a tip: wait on, as a wallet retries.
        if let Ok(mut session) = Session::try_connect(electrum) {
            session.negotiate(json!("1.4"));
            let tip = session.raw_call("blockchain.headers.subscribe", json!([]));
            if tip.is_ok_and(|tip| tip["height"] == json!(height)) {
                return;
            }
        }
        if let Some(status) = started.child.try_wait().expect("waiting on osprey") {
            panic!(
                "{}: osprey exited ({status}) before serving height {height}",
                started.name
            );
        }
        assert!(
            began.elapsed() < SYNC_TIMEOUT,
            "{}: height {height} not served after {SYNC_TIMEOUT:?}",
            started.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every distribution's launch of electrs, renamed, serves the node's tip
/// and says in its log what Osprey does not honour as electrs does.
#[test]
fn node_packages_start_osprey_as_they_start_electrs() {
    serve_the_tip_as_launched(DISTRIBUTIONS);
}

/// Osprey's own app definitions in `contrib/` (StartOS, myNode,
/// RaspiBlitz; Umbrel's compose runs in scripts/test-umbrel.sh) start it
/// against the node and serve the tip, with no startup warning about
/// electrs settings.
#[test]
fn app_definitions_in_contrib_start_osprey() {
    serve_the_tip_as_launched(APP_DEFINITIONS);
}

/// Starts each of `names`' launches in turn against one Core node, each
/// until it serves the tip, and checks its log.
fn serve_the_tip_as_launched(names: &[&'static str]) {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    node.generate(20).expect("mining a short chain");
    for name in names {
        let root = tempfile::Builder::new()
            .prefix(&format!("osprey-dropin-{name}-"))
            .tempdir()
            .unwrap();
        let began = Instant::now();
        let (started, launch) = start(name, &node, root.path());
        eprintln!("{name}: served the tip in {:?}", began.elapsed());
        let log = started.log();
        for line in &launch.expect_log {
            assert!(
                log.contains(line.as_str()),
                "{name}: no {line:?} in the log"
            );
        }
        let differences = log
            .lines()
            .filter(|l| l.contains("electrs settings Osprey does not honour"))
            .count();
        let allowed = usize::from(!launch.expect_log.is_empty());
        assert!(
            differences <= allowed,
            "{name}: {differences} lines of differences, at most {allowed}"
        );
    }
}
