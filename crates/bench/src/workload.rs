//! The workloads of BENCHMARKS.md, as an Electrum wallet runs them: initial
//! wallet load (subscribe every address), wallet refresh (history, then
//! transactions, then headers) and many concurrent wallets (each session the
//! initial load then the refresh of its own slice of the wallet). Every
//! answer is checked against the manifest as it arrives; the time spent
//! checking is measured and kept out of the single-session wall times.

use crate::check::{Expected, ExpectedAddress, WrongExt};
use crate::client::{Limits, Session, SessionStats};
use crate::error::{excerpt, BenchError};
use crate::scans::ScanActivity;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The Electrum methods the bench sends, named in one place.
pub mod method {
    pub const VERSION: &str = "server.version";
    pub const HEADERS_SUBSCRIBE: &str = "blockchain.headers.subscribe";
    pub const SCRIPTHASH_SUBSCRIBE: &str = "blockchain.scripthash.subscribe";
    pub const GET_HISTORY: &str = "blockchain.scripthash.get_history";
    pub const TRANSACTION_GET: &str = "blockchain.transaction.get";
    pub const BLOCK_HEADER: &str = "blockchain.block.header";
}

/// Client name sent in `server.version`.
pub const CLIENT_NAME: &str = "osprey-bench";
/// Protocol versions the bench speaks: 1.4 (electrs, Fulcrum 1.x) to 1.6.
pub const PROTOCOL_MIN: &str = "1.4";
pub const PROTOCOL_MAX: &str = "1.6";

/// A measured workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Workload 1: subscribe every address of the wallet.
    InitialLoad,
    /// Workload 2: history of every address, every transaction, every header.
    Refresh,
    /// Workload 5: concurrent sessions each running workloads 1 and 2 on
    /// its own slice of the wallet's addresses.
    ManyWallets,
}

impl Workload {
    pub const ALL: [Workload; 3] = [
        Workload::InitialLoad,
        Workload::Refresh,
        Workload::ManyWallets,
    ];

    /// Returns the name used on the command line and in file names.
    pub fn slug(self) -> &'static str {
        match self {
            Workload::InitialLoad => "initial-load",
            Workload::Refresh => "refresh",
            Workload::ManyWallets => "many-wallets",
        }
    }

    /// Returns the name used in reports.
    pub fn title(self) -> &'static str {
        match self {
            Workload::InitialLoad => "initial wallet load",
            Workload::Refresh => "wallet refresh",
            Workload::ManyWallets => "many wallets",
        }
    }
}

/// Settings shared by every run.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Requests per JSON-RPC batch.
    pub batch: usize,
    /// Concurrent sessions of the many-wallets workload.
    pub wallets: usize,
    /// Addresses per session of the many-wallets workload (see [`session_slice`]).
    pub slice: usize,
    pub limits: Limits,
}

/// What the server says it is in its answer to `server.version`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Server software and version, e.g. "ElectrumX 1.16.0" or "electrs/0.10.0".
    pub software: String,
    /// Negotiated protocol version.
    pub protocol: String,
}

/// The raw numbers of one run, over all its sessions.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// First request to last response; for a single session without the
    /// client's own checking time.
    pub wall: Duration,
    /// Time the client spent checking answers (summed over sessions).
    pub check: Duration,
    pub sessions: usize,
    pub requests: u64,
    pub batches: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub batch_latencies: Vec<Duration>,
    /// Highest RSS of the server's process sampled during the run, in bytes;
    /// `None` when not sampled (see `server_process`).
    pub server_rss_peak_bytes: Option<u64>,
    /// What the `--sp-scans` sessions did during the run; `None` without them.
    pub sp_scans: Option<ScanActivity>,
}

impl Measured {
    fn of_sessions(sessions: &[(SessionStats, Duration)], subtract_checks: bool) -> Measured {
        let first = sessions.iter().filter_map(|(s, _)| s.first_request).min();
        let last = sessions.iter().filter_map(|(s, _)| s.last_response).max();
        let check: Duration = sessions.iter().map(|(_, c)| *c).sum();
        let span = match (first, last) {
            (Some(first), Some(last)) => last.saturating_duration_since(first),
            _ => Duration::ZERO,
        };
        Measured {
            wall: if subtract_checks {
                span.saturating_sub(check)
            } else {
                span
            },
            check,
            sessions: sessions.len(),
            requests: sessions.iter().map(|(s, _)| s.requests).sum(),
            batches: sessions.iter().map(|(s, _)| s.batches).sum(),
            bytes_out: sessions.iter().map(|(s, _)| s.bytes_out).sum(),
            bytes_in: sessions.iter().map(|(s, _)| s.bytes_in).sum(),
            batch_latencies: sessions
                .iter()
                .flat_map(|(s, _)| s.batch_latencies.iter().copied())
                .collect(),
            server_rss_peak_bytes: None,
            sp_scans: None,
        }
    }
}

/// The result of one run: what was measured up to the end or the failure.
#[derive(Debug)]
pub struct Outcome {
    pub measured: Measured,
    pub error: Option<BenchError>,
}

/// Opens a session and negotiates the protocol with `server.version`.
///
/// # Errors
/// When the connection fails or the server rejects the version.
pub async fn open_session(
    address: &str,
    limits: Limits,
) -> Result<(Session, ServerInfo), BenchError> {
    let mut session = Session::connect(address, limits).await?;
    let info = negotiate(&mut session, address).await?;
    Ok((session, info))
}

/// Checks, on a session of its own, that the server is at the manifest's tip:
/// a server still syncing would otherwise fail with confusing mismatches.
///
/// # Errors
/// When the server cannot be reached or its tip differs from the manifest's.
pub async fn preflight(
    address: &str,
    expected: &Expected,
    limits: Limits,
) -> Result<ServerInfo, BenchError> {
    let (mut session, info) = open_session(address, limits).await?;
    let tip = session.call(method::HEADERS_SUBSCRIBE, json!([])).await?;
    let manifest_tip = expected.tip_height();
    if tip.get("height").and_then(Value::as_u64) > Some(u64::from(manifest_tip)) {
        // The chain grew past the manifest's tip (a generated chain's old
        // timestamps keep Bitcoin Core in initial block download until one
        // recent block is mined): fine if it is still the manifest's chain.
        // Blocks that touched the wallet would fail the answer checks.
        let header = session
            .call(method::BLOCK_HEADER, json!([manifest_tip]))
            .await?;
        expected
            .check_header(manifest_tip, &header)
            .named(session.server(), method::BLOCK_HEADER)?;
    } else {
        expected
            .check_tip(&tip)
            .named(session.server(), method::HEADERS_SUBSCRIBE)?;
    }
    Ok(info)
}

/// Runs `workload` once against `address` and returns what it measured.
pub async fn run_once(
    address: &str,
    workload: Workload,
    expected: Arc<Expected>,
    config: Config,
) -> Outcome {
    match workload {
        Workload::InitialLoad | Workload::Refresh => {
            let whole_wallet: Vec<&ExpectedAddress> = expected.addresses.iter().collect();
            let (stats, check, result) =
                wallet_session(address, &[workload], &expected, &whole_wallet, config, None).await;
            Outcome {
                measured: Measured::of_sessions(&[(stats, check)], true),
                error: result.err(),
            }
        }
        Workload::ManyWallets => many_wallets(address, expected, config).await,
    }
}

/// Runs workloads on one fresh session, on the wallet addresses `addresses`.
/// When `start` is given, waits there after connecting, so concurrent
/// sessions begin their requests together.
async fn wallet_session(
    address: &str,
    workloads: &[Workload],
    expected: &Expected,
    addresses: &[&ExpectedAddress],
    config: Config,
    start: Option<&tokio::sync::Barrier>,
) -> (SessionStats, Duration, Result<(), BenchError>) {
    let mut check = Duration::ZERO;
    let session = Session::connect(address, config.limits).await;
    if let Some(barrier) = start {
        // Even a failed session reaches the barrier, or the others would wait forever.
        barrier.wait().await;
    }
    let mut session = match session {
        Ok(session) => session,
        Err(e) => return (SessionStats::default(), check, Err(e)),
    };
    let result = async {
        negotiate(&mut session, address).await?;
        for workload in workloads {
            match workload {
                Workload::InitialLoad => {
                    initial_load(&mut session, expected, addresses, config.batch, &mut check)
                        .await?
                }
                Workload::Refresh => {
                    refresh(&mut session, expected, addresses, config.batch, &mut check).await?
                }
                Workload::ManyWallets => {}
            }
        }
        Ok(())
    }
    .await;
    (session.stats().clone(), check, result)
}

/// Sends `server.version`, which Electrum servers require before anything
/// else, and names the session's server after the answer. Timed as part of a
/// run: a wallet cannot ask anything before it.
async fn negotiate(session: &mut Session, address: &str) -> Result<ServerInfo, BenchError> {
    let result = session
        .call(
            method::VERSION,
            json!([CLIENT_NAME, [PROTOCOL_MIN, PROTOCOL_MAX]]),
        )
        .await?;
    let (Some(software), Some(protocol)) = (
        result.get(0).and_then(Value::as_str),
        result.get(1).and_then(Value::as_str),
    ) else {
        return Err(BenchError::Protocol {
            server: session.server().to_owned(),
            method: method::VERSION.to_owned(),
            detail: format!(
                "expected [software, protocol], got {}",
                excerpt(&result.to_string(), 200)
            ),
        });
    };
    let info = ServerInfo {
        software: software.to_owned(),
        protocol: protocol.to_owned(),
    };
    session.set_server(format!("{} at {address}", info.software));
    Ok(info)
}

/// Workload 1: subscribes every address of `addresses`, checking each status.
async fn initial_load(
    session: &mut Session,
    expected: &Expected,
    addresses: &[&ExpectedAddress],
    batch: usize,
    check: &mut Duration,
) -> Result<(), BenchError> {
    for chunk in addresses.chunks(batch) {
        let params = chunk.iter().map(|a| json!([a.scripthash])).collect();
        let results = session.batch(method::SCRIPTHASH_SUBSCRIBE, params).await?;
        let started = Instant::now();
        for (address, result) in chunk.iter().zip(&results) {
            if let Err(wrong) = expected.check_status(address, result) {
                let detail = diagnose_status(session, expected, address).await;
                let mut error = wrong.into_error(session.server(), method::SCRIPTHASH_SUBSCRIBE);
                if let BenchError::Mismatch { detail: d, .. } = &mut error {
                    d.push_str(&detail);
                }
                return Err(error);
            }
        }
        check_notifications(session, expected)?;
        *check += started.elapsed();
    }
    Ok(())
}

/// After a wrong status, asks for the address's history to say what differs:
/// "status X, expected Y" alone does not tell an operator what is wrong.
async fn diagnose_status(
    session: &mut Session,
    expected: &Expected,
    address: &ExpectedAddress,
) -> String {
    let Ok(mut results) = session
        .batch(method::GET_HISTORY, vec![json!([address.scripthash])])
        .await
    else {
        return String::new();
    };
    let result = results.pop().unwrap_or(Value::Null);
    match expected.check_history(address, &result) {
        Err(wrong) => format!("; its {} differs: {}", method::GET_HISTORY, wrong.detail),
        Ok(_) => format!(
            "; its {} matches the manifest, so the status hash itself is computed wrongly",
            method::GET_HISTORY
        ),
    }
}

/// Workload 2: the history of every address of `addresses`, then every
/// transaction seen, then the header of every height seen.
async fn refresh(
    session: &mut Session,
    expected: &Expected,
    addresses: &[&ExpectedAddress],
    batch: usize,
    check: &mut Duration,
) -> Result<(), BenchError> {
    let mut txids: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut heights: BTreeSet<u32> = BTreeSet::new();
    for chunk in addresses.chunks(batch) {
        let params = chunk.iter().map(|a| json!([a.scripthash])).collect();
        let results = session.batch(method::GET_HISTORY, params).await?;
        let started = Instant::now();
        for (address, result) in chunk.iter().zip(&results) {
            let history = expected
                .check_history(address, result)
                .named(session.server(), method::GET_HISTORY)?;
            for (txid, height) in history {
                // check_history admits only heights of the manifest (1..=tip).
                heights.insert(u32::try_from(height).unwrap_or(0));
                if seen.insert(txid.clone()) {
                    txids.push(txid);
                }
            }
        }
        check_notifications(session, expected)?;
        *check += started.elapsed();
    }
    for chunk in txids.chunks(batch) {
        let params = chunk.iter().map(|t| json!([t])).collect();
        let results = session.batch(method::TRANSACTION_GET, params).await?;
        let started = Instant::now();
        for (txid, result) in chunk.iter().zip(&results) {
            expected
                .check_transaction(txid, result)
                .named(session.server(), method::TRANSACTION_GET)?;
        }
        check_notifications(session, expected)?;
        *check += started.elapsed();
    }
    let heights: Vec<u32> = heights.into_iter().collect();
    for chunk in heights.chunks(batch) {
        let params = chunk.iter().map(|h| json!([h])).collect();
        let results = session.batch(method::BLOCK_HEADER, params).await?;
        let started = Instant::now();
        for (height, result) in chunk.iter().zip(&results) {
            expected
                .check_header(*height, result)
                .named(session.server(), method::BLOCK_HEADER)?;
        }
        check_notifications(session, expected)?;
        *check += started.elapsed();
    }
    Ok(())
}

fn check_notifications(session: &mut Session, expected: &Expected) -> Result<(), BenchError> {
    for notification in session.take_notifications() {
        expected
            .check_notification(&notification)
            .map_err(|(method, wrong)| wrong.into_error(session.server(), &method))?;
    }
    Ok(())
}

/// Workload 5: `config.wallets` concurrent sessions, each running workloads
/// 1 and 2 on its own slice of `config.slice` addresses, as that many
/// wallets of a typical size would. The wall time spans all sessions and
/// includes the client's checks, which overlap other sessions' waits.
async fn many_wallets(address: &str, expected: Arc<Expected>, config: Config) -> Outcome {
    let sessions = config.wallets.max(1);
    let start = Arc::new(tokio::sync::Barrier::new(sessions));
    let mut tasks = Vec::with_capacity(sessions);
    for session in 0..sessions {
        let (address, expected, start) = (
            address.to_owned(),
            Arc::clone(&expected),
            Arc::clone(&start),
        );
        tasks.push(tokio::spawn(async move {
            let slice: Vec<&ExpectedAddress> =
                session_slice(session, config.slice, expected.addresses.len())
                    .into_iter()
                    .map(|i| &expected.addresses[i])
                    .collect();
            wallet_session(
                &address,
                &[Workload::InitialLoad, Workload::Refresh],
                &expected,
                &slice,
                config,
                Some(&start),
            )
            .await
        }));
    }
    let mut measured = Vec::with_capacity(sessions);
    let mut error = None;
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await {
            Ok((stats, check, result)) => {
                measured.push((stats, check));
                if let Err(e) = result {
                    error.get_or_insert(e);
                }
            }
            Err(join_error) => {
                error.get_or_insert(BenchError::Internal {
                    server: address.to_owned(),
                    detail: format!("session {i} of {sessions} panicked: {join_error}"),
                });
            }
        }
    }
    Outcome {
        measured: Measured::of_sessions(&measured, false),
        error,
    }
}

/// Returns the indices of the wallet addresses that session `session` (from
/// 0) of the many-wallets workload works on: `slice` consecutive addresses
/// from `session * slice`, wrapping around the end of a wallet of
/// `wallet_len` addresses, so 50 sessions of 60 cover a 3000-address wallet
/// exactly once. Never more than the wallet holds: a session would otherwise
/// subscribe an address twice.
pub fn session_slice(session: usize, slice: usize, wallet_len: usize) -> Vec<usize> {
    if wallet_len == 0 {
        return Vec::new();
    }
    // (a*b) mod n from a mod n and b mod n: no overflow for any session and slice.
    let start = (session % wallet_len) * (slice % wallet_len) % wallet_len;
    (0..slice.min(wallet_len))
        .map(|k| (start + k) % wallet_len)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_take_consecutive_slices_wrapping_around() {
        assert_eq!(session_slice(0, 2, 5), [0, 1]);
        assert_eq!(session_slice(1, 2, 5), [2, 3]);
        assert_eq!(session_slice(2, 2, 5), [4, 0]);
        assert_eq!(session_slice(3, 2, 5), [1, 2]);
        assert_eq!(session_slice(7, 3, 10), [1, 2, 3]);
    }

    #[test]
    fn fifty_sessions_of_sixty_cover_three_thousand_addresses_once() {
        let mut seen = vec![0u32; 3000];
        for session in 0..50 {
            let slice = session_slice(session, 60, 3000);
            assert_eq!(slice.len(), 60);
            assert_eq!(slice[0], session * 60);
            for i in slice {
                seen[i] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        // A 51st session starts over from the first address.
        assert_eq!(session_slice(50, 60, 3000), (0..60).collect::<Vec<_>>());
    }

    #[test]
    fn a_slice_never_holds_an_address_twice() {
        assert_eq!(session_slice(1, 60, 5), [0, 1, 2, 3, 4]);
        assert_eq!(session_slice(3, 7, 7), [0, 1, 2, 3, 4, 5, 6]);
        assert!(session_slice(4, 60, 0).is_empty());
        assert_eq!(session_slice(usize::MAX, usize::MAX, 7).len(), 7);
    }
}
