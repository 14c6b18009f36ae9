//! `osprey admin`: a local interface for the operator of a running
//! `osprey serve` (FulcrumAdmin's and ElectrumX's `electrumx_rpc`'s role).
//!
//! The server listens on a Unix socket in the network's index directory,
//! `<db_dir>/<network>/admin.sock`, created mode 0660: only the owner and
//! the group of the process (the data directory's) can connect, so the
//! file's mode is the credential and no cookie or port is needed; nothing
//! outside the machine can reach it. One JSON object per line each way:
//! `{"command": "kick", "args": ["3"]}` in, `{"result": ...}` or
//! `{"error": "..."}` out, a request at most [`REQUEST_BYTES_MAX`] bytes.
//! `osprey admin COMMAND` finds the socket from the same settings as
//! `osprey serve` (config files, `--network`, `--db-dir`), sends one
//! request and prints the answer, as text or with `--json` as it came.

use crate::bans::BanFile;
use crate::config::Config;
use anyhow::{bail, Context};
use osprey_core::{Network, ScriptHash};
use osprey_metrics::Metrics;
use osprey_query::Query;
use osprey_server::{
    PeerStatus, PeerView, PublicHost, SessionFilter, SessionInfo, Sessions, Subnet,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The socket's name in the network's index directory.
pub const SOCKET_NAME: &str = "admin.sock";
/// The longest request line the server reads; commands are short.
pub const REQUEST_BYTES_MAX: usize = 4096;
/// The longest answer `osprey admin` reads (a `sessions` list of a busy
/// server: ~200 bytes a session).
const ANSWER_BYTES_MAX: usize = 64 << 20;
/// How long `osprey admin` waits for an answer (`query` reads the index).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// Who may connect: the owner and the group of the data directory.
const SOCKET_MODE: u32 = 0o660;

/// What `osprey admin` lists in its help.
pub const COMMANDS: &str = "Commands:
  getinfo                     version, heights, initial sync, sessions, subscriptions, memory, uptime
  sessions                    every session: id, address, client, protocol, subscriptions, cost, bytes
  kick ID|ADDRESS             close a session, or every session from an address
  ban ADDRESS|PREFIX          refuse an address or network (10.0.0.0/8, 2001:db8:1:2::/64), closing its
                              sessions; kept across restarts
  unban ADDRESS|PREFIX        lift a ban
  listbanned                  the banned addresses and networks
  peers                       the peer servers: configured or learned, verified or not
  addpeer HOST[:PORT]         add a peer server (PORT its TCP port, else the network's; or HOST:tPORT:sPORT)
                              and check it now; until the server stops (--peers lasts)
  rmpeer HOST                 forget a peer server
  loglevel FILTER             set the log filter (as --log-filter: info, debug, osprey_server=trace)
  query ADDRESS|SCRIPTHASH    history count, balance, first and last height of a script
  stop                        shut the server down, as SIGTERM does";

/// One admin command, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    GetInfo,
    Sessions,
    Kick(SessionFilter),
    Ban(Subnet),
    Unban(Subnet),
    ListBanned,
    Peers,
    /// A host without ports is at the network's Electrum port, which the
    /// server fills in.
    AddPeer(PublicHost),
    RmPeer(String),
    LogLevel(String),
    /// An address or a script hash, resolved by the server (an address
    /// needs the server's network).
    Query(String),
    Stop,
}

impl Request {
    /// Parses `command` and its `args`, with the usage in the error.
    pub fn parse(command: &str, args: &[String]) -> Result<Request, String> {
        let one = |what: &str| match args {
            [arg] => Ok(arg.clone()),
            _ => Err(format!("{command} takes one argument: {command} {what}")),
        };
        let none = |request: Request| match args {
            [] => Ok(request),
            _ => Err(format!("{command} takes no arguments")),
        };
        match command {
            "getinfo" => none(Request::GetInfo),
            "sessions" => none(Request::Sessions),
            "stop" => none(Request::Stop),
            "listbanned" => none(Request::ListBanned),
            "peers" => none(Request::Peers),
            "ban" | "unban" => {
                let subnet = one("ADDRESS|PREFIX")?
                    .parse::<Subnet>()
                    .map_err(|e| format!("{command}: {e}"))?;
                Ok(if command == "ban" {
                    Request::Ban(subnet)
                } else {
                    Request::Unban(subnet)
                })
            }
            "kick" => {
                let target = one("ID|ADDRESS")?;
                if let Ok(id) = target.parse::<u64>() {
                    Ok(Request::Kick(SessionFilter::Id(id)))
                } else if let Ok(ip) = target.parse::<IpAddr>() {
                    Ok(Request::Kick(SessionFilter::Address(ip)))
                } else {
                    Err(format!(
                        "kick: {target:?} is neither a session id nor an IP address"
                    ))
                }
            }
            "loglevel" => {
                let filter = one("FILTER")?;
                tracing_subscriber::EnvFilter::try_new(&filter)
                    .map_err(|e| format!("loglevel: invalid filter {filter:?}: {e}"))?;
                Ok(Request::LogLevel(filter))
            }
            "query" => Ok(Request::Query(one("ADDRESS|SCRIPTHASH")?)),
            "addpeer" => peer_host(&one("HOST[:PORT]")?)
                .map(Request::AddPeer)
                .map_err(|e| format!("addpeer: {e}")),
            "rmpeer" => {
                let target = one("HOST")?;
                // As `peers` lists it: a name or an address, no port.
                let host = match target.parse::<IpAddr>() {
                    Ok(ip) => Some(ip.to_string()),
                    Err(_) => peer_host(&target)
                        .ok()
                        .filter(|h| h.tcp_port.is_none() && h.ssl_port.is_none())
                        .map(|h| h.host),
                };
                host.map(Request::RmPeer)
                    .ok_or_else(|| format!("rmpeer: {target:?} is not a host name or address"))
            }
            _ => Err(format!("unknown command {command:?}\n{COMMANDS}")),
        }
    }

    /// Parses one request line as the socket receives it.
    pub fn from_line(line: &[u8]) -> Result<Request, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            command: String,
            #[serde(default)]
            args: Vec<String>,
        }
        let wire: Wire = serde_json::from_slice(line).map_err(|e| {
            format!(r#"malformed request ({e}); expected {{"command": "getinfo", "args": []}}"#)
        })?;
        Request::parse(&wire.command, &wire.args)
    }
}

/// A peer as `addpeer` names it: Electrum's `HOST:tPORT[:sPORT]`,
/// `HOST:PORT` (a TCP port: checks speak TCP), or a bare `HOST`, returned
/// without ports (the network's default port, for the server to fill in).
/// An IPv6 address with a port goes in brackets, `[2001:db8::1]:50001`.
fn peer_host(target: &str) -> Result<PublicHost, String> {
    if let Ok(host) = PublicHost::from_str(target) {
        return Ok(host);
    }
    let bad = || format!("{target:?} is not HOST, HOST:PORT or HOST:tPORT:sPORT");
    match target.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            PublicHost::from_str(&format!("{host}:t{port}")).map_err(|_| bad())
        }
        _ => {
            // Checked as a host with a placeholder port, then without one.
            let mut host = PublicHost::from_str(&format!("{target}:t1")).map_err(|_| bad())?;
            host.tcp_port = None;
            Ok(host)
        }
    }
}

/// What the admin socket answers from.
pub struct AdminContext {
    pub query: Arc<Query>,
    pub metrics: Arc<Metrics>,
    pub sessions: Sessions,
    pub peers: PeerView,
    /// Set by `stop`: what SIGTERM sets.
    pub stop: Arc<AtomicBool>,
    pub network: Network,
    pub started: Instant,
    /// Applies a new log filter (`loglevel`).
    pub set_log_filter: fn(&str) -> Result<(), String>,
    /// Where bans are kept across restarts.
    pub bans: BanFile,
}

/// The listening socket; the file is removed when this is dropped.
pub struct AdminSocket {
    path: PathBuf,
    accepting: tokio::task::JoinHandle<()>,
}

impl AdminSocket {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        self.accepting.abort();
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), "removing the admin socket: {e}");
        }
    }
}

/// The longest path a Unix socket can be bound at (Linux' `sun_path`,
/// 108 bytes with the terminating NUL).
const SOCKET_PATH_BYTES_MAX: usize = 107;

/// Creates `dir/admin.sock`, mode 0660, replacing a stale one, and serves
/// it on `runtime` until dropped. `None`, with a warning, when `dir` is too
/// deep for a Unix socket: the server runs on without its admin interface
/// rather than refusing an index directory it served before.
///
/// # Errors
/// A non-socket file in its place, or the socket cannot be created.
pub fn start(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    ctx: AdminContext,
) -> anyhow::Result<Option<AdminSocket>> {
    let path = dir.join(SOCKET_NAME);
    // Bound under a name of its own first (below): that one is longer.
    let unready = dir.join(format!("{SOCKET_NAME}.{}", std::process::id()));
    if unready.as_os_str().len() > SOCKET_PATH_BYTES_MAX {
        tracing::warn!(
            path = %path.display(),
            "no admin interface: the path is longer than a Unix socket's {SOCKET_PATH_BYTES_MAX} bytes \
             (a shorter --db-dir gives one)"
        );
        return Ok(None);
    }
    match std::fs::symlink_metadata(&path) {
        // Left by a server that did not exit cleanly: RocksDB's lock on
        // the index next to it means no other server is using it.
        Ok(found) if found.file_type().is_socket() => std::fs::remove_file(&path)
            .with_context(|| format!("removing the stale admin socket {}", path.display()))?,
        Ok(_) => bail!(
            "{} exists and is not a socket: move it away to let the admin socket be created",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("checking {}", path.display())),
    }
    // Bound under a name of its own, then made 0660, then renamed into
    // place: nobody can connect under `admin.sock` before the mode is set.
    let _ = std::fs::remove_file(&unready);
    let listener = std::os::unix::net::UnixListener::bind(&unready)
        .with_context(|| format!("creating the admin socket {}", unready.display()))?;
    std::fs::set_permissions(&unready, std::fs::Permissions::from_mode(SOCKET_MODE))
        .and_then(|()| std::fs::rename(&unready, &path))
        .and_then(|()| listener.set_nonblocking(true))
        .with_context(|| format!("creating the admin socket {}", path.display()))?;
    let _entered = runtime.enter();
    let listener = tokio::net::UnixListener::from_std(listener)
        .with_context(|| format!("serving the admin socket {}", path.display()))?;
    let ctx = Arc::new(ctx);
    let accepting = runtime.spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, Arc::clone(&ctx)));
                }
                Err(e) => {
                    // Out of file descriptors, typically: back off.
                    tracing::warn!("admin socket: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(Some(AdminSocket { path, accepting }))
}

/// Answers the requests of one connection, one line each, until it closes
/// or sends a line longer than [`REQUEST_BYTES_MAX`].
async fn serve_connection(stream: tokio::net::UnixStream, ctx: Arc<AdminContext>) {
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = (REQUEST_BYTES_MAX + 1) as u64;
        let read_line = {
            let mut bounded = tokio::io::AsyncReadExt::take(&mut read, limit);
            bounded.read_until(b'\n', &mut line).await
        };
        match read_line {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complete = line.last() == Some(&b'\n');
        let too_long = line.len() > REQUEST_BYTES_MAX;
        let answer = if too_long {
            json!({ "error": format!("request exceeds {REQUEST_BYTES_MAX} bytes") })
        } else {
            match Request::from_line(&line) {
                Ok(request) => answer(request, &ctx).await,
                Err(error) => json!({ "error": error }),
            }
        };
        let mut text = answer.to_string();
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() || too_long || !complete {
            return;
        }
    }
}

/// Carries out `request`.
async fn answer(request: Request, ctx: &Arc<AdminContext>) -> Value {
    let result = match request {
        Request::GetInfo => Ok(getinfo(ctx)),
        Request::Sessions => Ok(Value::Array(
            ctx.sessions.list().iter().map(session_json).collect(),
        )),
        Request::Kick(filter) => {
            let kicked = ctx.sessions.kick(filter);
            if kicked.is_empty() {
                Err(format!("no session matches {}", describe_filter(filter)))
            } else {
                tracing::info!(?kicked, "admin: sessions kicked");
                Ok(json!({ "kicked": kicked }))
            }
        }
        Request::Ban(subnet) => match ctx.sessions.ban(subnet) {
            Ok((new, kicked)) => {
                tracing::info!(%subnet, ?kicked, "admin: banned");
                save_bans(ctx)
                    .await
                    .map(|()| json!({ "banned": subnet.to_string(), "new": new, "kicked": kicked }))
            }
            Err(e) => Err(e),
        },
        Request::Unban(subnet) => {
            if ctx.sessions.unban(subnet) {
                tracing::info!(%subnet, "admin: ban lifted");
                save_bans(ctx)
                    .await
                    .map(|()| json!({ "unbanned": subnet.to_string() }))
            } else {
                Err(format!("{subnet} is not banned"))
            }
        }
        Request::Peers => Ok(Value::Array(
            ctx.peers.list().iter().map(peer_json).collect(),
        )),
        Request::AddPeer(mut host) => {
            if host.tcp_port.is_none() && host.ssl_port.is_none() {
                host.tcp_port = Some(ctx.network.default_electrum_port());
            }
            let new = ctx.peers.add(host.clone());
            tracing::info!(peer = %host.host, new, "admin: peer added, checking it");
            Ok(json!({
                "added": host.host,
                "tcp_port": host.tcp_port,
                "ssl_port": host.ssl_port,
                "new": new,
            }))
        }
        Request::RmPeer(host) => {
            let removed = ctx.peers.remove(&host);
            if removed.is_empty() {
                Err(format!("no peer is named {host}"))
            } else {
                tracing::info!(peer = %host, "admin: peer removed");
                Ok(json!({ "removed": host }))
            }
        }
        Request::ListBanned => Ok(Value::Array(
            ctx.sessions
                .banned()
                .iter()
                .map(|subnet| json!(subnet.to_string()))
                .collect(),
        )),
        Request::LogLevel(filter) => {
            // Before: under a quieter filter this line would not show.
            tracing::info!(%filter, "admin: setting the log filter");
            (ctx.set_log_filter)(&filter).map(|()| json!({ "log_filter": filter }))
        }
        Request::Query(target) => {
            let ctx = Arc::clone(ctx);
            // Reads the index: off the async threads.
            tokio::task::spawn_blocking(move || query(&ctx, &target))
                .await
                .unwrap_or_else(|e| Err(format!("the query failed: {e}")))
        }
        Request::Stop => {
            tracing::info!("admin: stop requested, shutting down");
            ctx.stop.store(true, Ordering::Relaxed);
            Ok(json!({ "stopping": true }))
        }
    };
    match result {
        Ok(result) => json!({ "result": result }),
        Err(error) => json!({ "error": error }),
    }
}

/// Writes the ban list to disk, off the async threads (it fsyncs). A ban
/// or unban is in force either way; a failed write is the command's error,
/// so that the operator knows it will not last a restart.
async fn save_bans(ctx: &Arc<AdminContext>) -> Result<(), String> {
    let ctx = Arc::clone(ctx);
    tokio::task::spawn_blocking(move || {
        ctx.bans.save(&ctx.sessions.banned()).map_err(|e| {
            let path = ctx.bans.path().display();
            tracing::warn!(%path, "saving the ban list: {e}");
            format!("in force until the server stops, but not saved to {path}: {e}")
        })
    })
    .await
    .unwrap_or_else(|e| Err(format!("saving the ban list failed: {e}")))
}

fn describe_filter(filter: SessionFilter) -> String {
    match filter {
        SessionFilter::Id(id) => format!("id {id}"),
        SessionFilter::Address(ip) => format!("address {ip}"),
    }
}

fn getinfo(ctx: &AdminContext) -> Value {
    let metrics = &ctx.metrics;
    metrics.process.refresh();
    let index_height = ctx.query.tip().0 .0;
    let node_height = metrics.index.node_height.get();
    let initial_sync = ctx.query.indexing().map(|indexing| {
        let node = indexing.node_height.0.max(1);
        json!({
            "height": indexing.height.0,
            "node_height": indexing.node_height.0,
            "progress": f64::from(indexing.height.0) / f64::from(node),
        })
    });
    let sessions = ctx.sessions.list().len();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "network": ctx.network.name(),
        "index_height": index_height,
        "node_height": node_height,
        "initial_sync": initial_sync,
        "sessions": sessions,
        "subscriptions": metrics.sessions.subscriptions.get(),
        "resident_memory_bytes": metrics.process.resident_memory_bytes.get(),
        "uptime_seconds": ctx.started.elapsed().as_secs(),
        // FulcrumAdmin's `getinfo` keys with the same meaning, for the
        // scripts that read them: RaspiBlitz's sync display divides
        // `height` by the node's height, once `version` (above) is there.
        // Fulcrum's `subscriptions` is ours, above, too.
        "height": index_height,
        "chain": ctx.network.bitcoin().to_core_arg(),
        "genesis_hash": ctx.network.genesis_hash().to_string(),
        "clients_connected": sessions,
        "pid": std::process::id(),
    })
}

fn session_json(session: &SessionInfo) -> Value {
    json!({
        "id": session.id,
        "address": session.peer.to_string(),
        "listener": session.listener.to_string(),
        "client": session.client,
        "protocol": session.protocol,
        "subscriptions": session.subscriptions,
        "received_bytes": session.received_bytes,
        "sent_bytes": session.sent_bytes,
        "cost": session.cost,
        "connected_seconds": session.connected.as_secs(),
        "idle_seconds": session.idle.as_secs(),
    })
}

fn peer_json(peer: &PeerStatus) -> Value {
    let verified = peer.verified.as_ref();
    json!({
        "host": peer.host.host,
        "tcp_port": peer.host.tcp_port,
        "ssl_port": peer.host.ssl_port,
        "configured": peer.configured,
        "verified": verified.is_some(),
        "ip": verified.map(|v| v.ip.to_string()),
        "protocol_max": verified.map(|v| v.protocol_max.clone()),
        "failures": peer.failures,
    })
}

/// The script hash `target` names: 64 hex digits as Electrum shows a
/// script hash, else an address of the server's network.
fn scripthash_of(target: &str, network: Network) -> Result<ScriptHash, String> {
    if let Ok(scripthash) = ScriptHash::from_str(target) {
        return Ok(scripthash);
    }
    let address = bitcoin::Address::from_str(target)
        .map_err(|e| format!("{target:?} is neither a script hash nor an address: {e}"))?
        .require_network(network.bitcoin())
        .map_err(|e| format!("{target:?}: {e} (this server is on {network})"))?;
    Ok(ScriptHash::from_script(address.script_pubkey().as_bytes()))
}

fn query(ctx: &AdminContext, target: &str) -> Result<Value, String> {
    if ctx.query.indexing().is_some() {
        return Err("the initial sync is still running: histories are not complete yet".into());
    }
    let scripthash = scripthash_of(target, ctx.network)?;
    let history = ctx.query.history(&scripthash).map_err(|e| e.to_string())?;
    let balance = ctx.query.balance(&scripthash).map_err(|e| e.to_string())?;
    let confirmed_heights = || history.iter().map(|e| e.height).filter(|h| *h > 0);
    Ok(json!({
        "scripthash": scripthash.to_string(),
        "history": history.len(),
        "confirmed_balance": balance.confirmed,
        "unconfirmed_balance": balance.unconfirmed,
        "first_height": confirmed_heights().min(),
        "last_height": confirmed_heights().max(),
    }))
}

/// `osprey admin`: sends one request to the server `config` describes and
/// prints its answer.
///
/// # Errors
/// A bad command, no server, or the server's error.
pub fn run(config: &Config, json: bool, command: &str, args: &[String]) -> anyhow::Result<()> {
    Request::parse(command, args).map_err(anyhow::Error::msg)?;
    let path = config.db_path.join(SOCKET_NAME);
    let result = ask(&path, command, args)?;
    let text = if json {
        result.to_string()
    } else {
        render(command, &result)
    };
    #[allow(clippy::print_stdout)]
    {
        println!("{text}");
    }
    Ok(())
}

/// Sends one request on the socket at `path` and returns its result.
fn ask(path: &Path, command: &str, args: &[String]) -> anyhow::Result<Value> {
    let mut stream = match std::os::unix::net::UnixStream::connect(path) {
        Ok(stream) => stream,
        // The socket's mode is the credential: say so, not that no server runs.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
            "not allowed to connect to {} ({e}): run osprey admin as the server's user or group",
            path.display()
        ),
        Err(e) => bail!("no Osprey is running on {}: {e}", path.display()),
    };
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let mut request = json!({ "command": command, "args": args }).to_string();
    request.push('\n');
    stream
        .write_all(request.as_bytes())
        .with_context(|| format!("sending to {}", path.display()))?;
    let mut line = Vec::new();
    BufReader::new(stream.take(ANSWER_BYTES_MAX as u64 + 1))
        .read_until(b'\n', &mut line)
        .with_context(|| format!("reading the answer from {}", path.display()))?;
    if line.is_empty() {
        bail!("{} closed the connection without answering", path.display());
    }
    if line.len() > ANSWER_BYTES_MAX {
        bail!("the answer exceeds {ANSWER_BYTES_MAX} bytes");
    }
    let mut answer: Value = serde_json::from_slice(&line)
        .with_context(|| format!("reading the answer from {}", path.display()))?;
    if let Some(error) = answer.get("error").and_then(Value::as_str) {
        bail!("{error}");
    }
    match answer.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => bail!("an answer without a result: {answer}"),
    }
}

/// The answer to `command` for a person.
fn render(command: &str, result: &Value) -> String {
    let text = |value: &Value| match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    match (command, result) {
        ("sessions", Value::Array(sessions)) => {
            let mut lines = vec![format!(
                "{:>6}  {:<40} {:<5} {:<24} {:<8} {:>5} {:>10} {:>12} {:>12}",
                "ID", "ADDRESS", "PORT", "CLIENT", "PROTOCOL", "SUBS", "COST", "RECV", "SENT"
            )];
            for s in sessions {
                lines.push(format!(
                    "{:>6}  {:<40} {:<5} {:<24} {:<8} {:>5} {:>10} {:>12} {:>12}",
                    text(&s["id"]),
                    text(&s["address"]),
                    text(&s["listener"]),
                    text(&s["client"]),
                    text(&s["protocol"]),
                    text(&s["subscriptions"]),
                    text(&s["cost"]),
                    text(&s["received_bytes"]),
                    text(&s["sent_bytes"]),
                ));
            }
            lines.join("\n")
        }
        ("peers", Value::Array(peers)) => {
            let mut lines = vec![format!(
                "{:<40} {:>6} {:>6} {:<10} {:<8} {:>8}",
                "HOST", "TCP", "SSL", "SOURCE", "VERIFIED", "FAILURES"
            )];
            for p in peers {
                let source = if p["configured"] == json!(true) {
                    "configured"
                } else {
                    "learned"
                };
                lines.push(format!(
                    "{:<40} {:>6} {:>6} {:<10} {:<8} {:>8}",
                    text(&p["host"]),
                    text(&p["tcp_port"]),
                    text(&p["ssl_port"]),
                    source,
                    text(&p["verified"]),
                    text(&p["failures"]),
                ));
            }
            lines.join("\n")
        }
        ("kick", _) => format!("kicked sessions: {}", text(&result["kicked"])),
        ("ban", _) => format!(
            "banned {} (closed sessions: {})",
            text(&result["banned"]),
            text(&result["kicked"])
        ),
        ("unban", _) => format!("unbanned {}", text(&result["unbanned"])),
        ("addpeer", _) => format!(
            "added peer {} (tcp {}, ssl {}), checking it: see peers",
            text(&result["added"]),
            text(&result["tcp_port"]),
            text(&result["ssl_port"])
        ),
        ("rmpeer", _) => format!("removed peer {}", text(&result["removed"])),
        ("listbanned", Value::Array(banned)) => {
            banned.iter().map(text).collect::<Vec<_>>().join("\n")
        }
        ("loglevel", _) => format!("log filter: {}", text(&result["log_filter"])),
        ("stop", _) => "stopping".into(),
        (_, Value::Object(fields)) => fields
            .iter()
            .map(|(key, value)| match value {
                Value::Object(inner) => format!(
                    "{key}: {}",
                    inner
                        .iter()
                        .map(|(k, v)| format!("{k} {}", text(v)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => format!("{key}: {}", text(value)),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        (_, other) => text(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Request, String> {
        Request::from_line(line.as_bytes())
    }

    #[test]
    fn requests_are_parsed_with_their_arguments() {
        assert_eq!(parse(r#"{"command":"getinfo"}"#), Ok(Request::GetInfo));
        assert_eq!(
            parse(r#"{"command":"sessions","args":[]}"#),
            Ok(Request::Sessions)
        );
        assert_eq!(
            parse(r#"{"command":"kick","args":["7"]}"#),
            Ok(Request::Kick(SessionFilter::Id(7)))
        );
        assert_eq!(
            parse(r#"{"command":"kick","args":["::1"]}"#),
            Ok(Request::Kick(SessionFilter::Address(
                "::1".parse().unwrap()
            )))
        );
        assert_eq!(
            parse(r#"{"command":"loglevel","args":["osprey_server=trace"]}"#),
            Ok(Request::LogLevel("osprey_server=trace".into()))
        );
        assert_eq!(
            parse(r#"{"command":"query","args":["bcrt1qxyz"]}"#),
            Ok(Request::Query("bcrt1qxyz".into()))
        );
        assert_eq!(parse(r#"{"command":"stop"}"#), Ok(Request::Stop));
        assert_eq!(
            parse(r#"{"command":"ban","args":["10.0.0.0/8"]}"#),
            Ok(Request::Ban("10.0.0.0/8".parse().unwrap()))
        );
        assert_eq!(
            parse(r#"{"command":"unban","args":["2001:db8::1"]}"#),
            Ok(Request::Unban("2001:db8::1/128".parse().unwrap()))
        );
        assert_eq!(parse(r#"{"command":"peers"}"#), Ok(Request::Peers));
        assert_eq!(
            parse(r#"{"command":"listbanned"}"#),
            Ok(Request::ListBanned)
        );
        let host = |host: &str, tcp_port, ssl_port| PublicHost {
            host: host.into(),
            tcp_port,
            ssl_port,
        };
        for (arg, wanted) in [
            (
                "Electrum.Example.com",
                host("electrum.example.com", None, None),
            ),
            ("127.0.0.1:50001", host("127.0.0.1", Some(50001), None)),
            (
                "[2001:db8::1]:50001",
                host("2001:db8::1", Some(50001), None),
            ),
            ("[2001:db8::1]", host("2001:db8::1", None, None)),
            ("a.example:t1:s2", host("a.example", Some(1), Some(2))),
            ("a.example:s50002", host("a.example", None, Some(50002))),
        ] {
            let line = json!({ "command": "addpeer", "args": [arg] }).to_string();
            assert_eq!(parse(&line), Ok(Request::AddPeer(wanted)), "{arg}");
        }
        for (arg, wanted) in [
            ("a.example", "a.example"),
            ("2001:db8::1", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
        ] {
            let line = json!({ "command": "rmpeer", "args": [arg] }).to_string();
            assert_eq!(parse(&line), Ok(Request::RmPeer(wanted.into())), "{arg}");
        }
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (line, says) in [
            ("not json", "malformed request"),
            (r#"{"command":"getinfo","extra":1}"#, "malformed request"),
            (r#"{"args":[]}"#, "malformed request"),
            (r#"{"command":"frobnicate"}"#, "unknown command"),
            (
                r#"{"command":"getinfo","args":["x"]}"#,
                "takes no arguments",
            ),
            (r#"{"command":"kick"}"#, "kick ID|ADDRESS"),
            (r#"{"command":"kick","args":["1","2"]}"#, "kick ID|ADDRESS"),
            (
                r#"{"command":"kick","args":["nobody"]}"#,
                "neither a session id",
            ),
            (r#"{"command":"loglevel","args":["[["]}"#, "invalid filter"),
            (r#"{"command":"query"}"#, "query ADDRESS|SCRIPTHASH"),
            (r#"{"command":"ban"}"#, "ban ADDRESS|PREFIX"),
            (
                r#"{"command":"ban","args":["10.0.0.1/8"]}"#,
                "bits set past",
            ),
            (
                r#"{"command":"unban","args":["nowhere"]}"#,
                "not an IP address",
            ),
            (r#"{"command":"addpeer"}"#, "addpeer HOST[:PORT]"),
            (
                r#"{"command":"addpeer","args":["a.example:0"]}"#,
                "is not HOST, HOST:PORT or HOST:tPORT:sPORT",
            ),
            (
                r#"{"command":"addpeer","args":["a.example:"]}"#,
                "is not HOST, HOST:PORT",
            ),
            (
                r#"{"command":"addpeer","args":["no spaces"]}"#,
                "is not HOST, HOST:PORT",
            ),
            (
                r#"{"command":"rmpeer","args":["a.example:t50001"]}"#,
                "is not a host name or address",
            ),
        ] {
            let error = parse(line).expect_err(line);
            assert!(error.contains(says), "{line}: {error}");
        }
    }

    #[test]
    fn a_query_names_a_script_hash_or_an_address_of_the_network() {
        let hash = "a".repeat(64);
        assert_eq!(
            scripthash_of(&hash, Network::Regtest).map(|s| s.to_string()),
            Ok(hash)
        );
        // The same key's P2WPKH on regtest and on mainnet.
        let regtest = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";
        let script = bitcoin::Address::from_str(regtest)
            .unwrap()
            .assume_checked()
            .script_pubkey();
        assert_eq!(
            scripthash_of(regtest, Network::Regtest),
            Ok(ScriptHash::from_script(script.as_bytes()))
        );
        let error = scripthash_of(regtest, Network::Bitcoin).unwrap_err();
        assert!(error.contains("this server is on"), "{error}");
        let error = scripthash_of("xyz", Network::Regtest).unwrap_err();
        assert!(
            error.contains("neither a script hash nor an address"),
            "{error}"
        );
    }
}
