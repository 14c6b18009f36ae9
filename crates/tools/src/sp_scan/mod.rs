//! `osprey bench sp-scan`: how fast Osprey scans its silent-payment index
//! for a receiver (docs/silent-payments.md, 4.5), without a server.
//!
//! Opens an index built with silent payments on (`osprey bench index
//! --silent-payments --keep-db`, or `osprey index --silent-payments`),
//! through the store and `Query` the server uses, and scans the whole
//! chain with each receiver's keys of the chain's manifest, in chunks of
//! `--chunk-records` records through `Query::sp_scan`, as the server's
//! scans do. Every scan's matches are checked against the manifest's
//! payments of its receiver: a missing or an extra one fails the run, so
//! a fast but wrong scan is never reported.
//!
//! Each run scans every receiver twice: one scan at a time on one thread,
//! then two at once on two threads taking the receivers in turn. Each scan
//! is timed by its thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: what the
//! bar of 15,000 records per second per core is about, and what other jobs
//! on a shared machine do not inflate) and by the wall clock.
//!
//! Each run also measures, before its scans and after them, the limit no
//! scan can beat ([`limit`]): pairs of the two point multiplications every
//! record costs, per CPU-second of the same thread, on the same machine at
//! the same time; the report gives each phase's records per CPU-second as
//! a share of it (issue 35's bar: at least 0.9).
//!
//! ```text
//! osprey bench sp-scan --chain DIR --db-dir DIR [--out OUTDIR] [--runs 3]
//!     [--chunk-records 1000]
//! ```
//!
//! The store is opened as the server opens it: no row is written, but
//! opening it takes RocksDB's lock (no server may run on the index
//! meanwhile) and cuts the flat files back to the tip, as every open does.
//!
//! This lives in `osprey-tools` rather than `osprey-bench`, which shares
//! no code with the servers it measures: this bench measures Osprey's own
//! code, so it links it.

mod limit;
mod report;

use anyhow::{bail, ensure, Context};
use bitcoin::secp256k1::{PublicKey, SecretKey};
use osprey_answers::{InPlace, SpCursor};
use osprey_bench::machine::{self, Machine};
use osprey_bench::SpScanArgs;
use osprey_chain::BlkFiles;
use osprey_chaingen::manifest::{Manifest, SilentPaymentReceiver};
use osprey_core::{Height, Network};
use osprey_query::{Query, QueryConfig};
use osprey_sp::ScanKeys;
use osprey_store::{Store, StoreConfig};
use report::{Phase, RunRecord, ScanRecord, SpScanReport};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// File name of the Markdown report inside the output directory.
pub const REPORT_FILE: &str = "sp-scan.md";
/// File name of the JSON record of every scan inside the output directory.
pub const RECORD_FILE: &str = "sp-scan.json";

/// Scans run at once in the second phase of every run.
const CONCURRENT_SCANS: usize = 2;

/// A payment as a scan reports it and as the manifest lists it: height,
/// txid (display hex), `ser_P(input_hash·A)` (hex).
type Payment = (u32, String, String);

/// A receiver of the manifest: its keys and the payments a scan of them
/// from height 0 must find, no more.
struct Receiver {
    address: String,
    keys: Arc<ScanKeys>,
    payments: BTreeSet<Payment>,
}

impl Receiver {
    fn from_manifest(receiver: &SilentPaymentReceiver) -> anyhow::Result<Receiver> {
        let scan: SecretKey = receiver
            .scan_private_key
            .parse()
            .with_context(|| format!("scan key of {}", receiver.address))?;
        let spend: PublicKey = receiver
            .spend_public_key
            .parse()
            .with_context(|| format!("spend key of {}", receiver.address))?;
        let keys = ScanKeys::new(scan, spend, receiver.labels.iter().copied())
            .with_context(|| format!("scan keys of {}", receiver.address))?;
        Ok(Receiver {
            address: receiver.address.clone(),
            keys: Arc::new(keys),
            payments: receiver
                .payments
                .iter()
                .map(|p| (p.height, p.txid.clone(), p.tweak_key.clone()))
                .collect(),
        })
    }
}

/// Runs `osprey bench sp-scan`: the planned runs, then the reports into
/// `--out`, printing the Markdown one.
///
/// # Errors
/// On unusable arguments, chain or index, when a scan fails or reports a
/// payment the manifest does not list or misses one it does, and when the
/// reports cannot be written.
pub fn run(args: &SpScanArgs) -> anyhow::Result<()> {
    ensure!(args.runs > 0, "--runs must be at least 1");
    ensure!(args.chunk_records > 0, "--chunk-records must be at least 1");
    let manifest = Manifest::load(&args.chain)
        .with_context(|| format!("loading the manifest of {}", args.chain.display()))?;
    let receivers = match &manifest.silent_payments {
        Some(receivers) if !receivers.is_empty() => receivers
            .iter()
            .map(Receiver::from_manifest)
            .collect::<anyhow::Result<Vec<_>>>()?,
        _ => bail!(
            "{}: the chain has no silent payments (generate it with `osprey chaingen --sp-share`)",
            args.chain.display()
        ),
    };
    let query = open(&args.chain, &args.db_dir, &manifest)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;

    let date = machine::utc_now();
    let load_before = load_average();
    let mut runs = Vec::with_capacity(args.runs);
    for run in 1..=args.runs {
        let limit_before = limit::multiplication_pairs_per_cpu_second(thread_cpu_time);
        let mut phases = Vec::with_capacity(2);
        for threads in [1, CONCURRENT_SCANS] {
            tracing::info!(run, threads, receivers = receivers.len(), "scanning");
            let phase = scan_phase(&query, &receivers, threads, args.chunk_records)?;
            tracing::info!(
                run,
                threads,
                records_per_cpu_second = phase.records_per_cpu_second(),
                records_per_wall_second = phase.records_per_wall_second(),
                "scans done, every match as the manifest says"
            );
            phases.push(phase);
        }
        let limit_after = limit::multiplication_pairs_per_cpu_second(thread_cpu_time);
        tracing::info!(
            run,
            limit_before,
            limit_after,
            "multiplication pairs per CPU-second, before and after the scans"
        );
        runs.push(RunRecord {
            run,
            limit_pairs_per_cpu_second: [limit_before, limit_after],
            phases,
        });
    }
    let report = SpScanReport {
        date,
        machine: Machine::current(),
        chain: args.chain.display().to_string(),
        db_dir: args.db_dir.display().to_string(),
        tip_height: manifest.tip_height,
        tx_count: manifest.tx_count,
        receivers: receivers.iter().map(|r| r.address.clone()).collect(),
        payments: receivers.iter().map(|r| r.payments.len()).sum(),
        chunk_records: args.chunk_records,
        load_before,
        load_after: load_average(),
        runs,
    };
    let json = serde_json::to_string_pretty(&report).context("serialising the scan records")?;
    let markdown = report.to_markdown();
    for (name, text) in [(RECORD_FILE, &json), (REPORT_FILE, &markdown)] {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    #[allow(clippy::print_stdout)] // The command's output is its report.
    {
        println!("{markdown}");
        println!(
            "Reports written to {}: {REPORT_FILE}, {RECORD_FILE}.",
            args.out.display()
        );
    }
    Ok(())
}

/// Opens the index of `db_dir` (its network's directory, as `osprey`
/// lays it out) and checks that it holds the manifest's chain, with
/// silent payments, to its tip.
fn open(chain: &Path, db_dir: &Path, manifest: &Manifest) -> anyhow::Result<Query> {
    let network: Network = manifest
        .network
        .parse()
        .map_err(|e| anyhow::anyhow!("the manifest's network: {e}"))?;
    let index_dir = db_dir.join(network.name());
    ensure!(
        index_dir.is_dir(),
        "--db-dir {}: no {} index in it",
        db_dir.display(),
        network.name()
    );
    let config = StoreConfig {
        silent_payments: true,
        ..StoreConfig::default()
    };
    let store = Store::open(&index_dir, network.name(), config).with_context(|| {
        format!(
            "opening the index in {} (built with silent payments on?)",
            index_dir.display()
        )
    })?;
    let tip = store
        .tip()
        .map(|(height, hash)| (height.0, hash.to_string()));
    ensure!(
        tip == Some((manifest.tip_height, manifest.tip_hash.clone())),
        "the index's tip is {tip:?}, the manifest's is height {} {}: not this chain, or not \
         indexed to its end",
        manifest.tip_height,
        manifest.tip_hash
    );
    // `Query` wants a chain source; a scan never asks it anything.
    let blocks = BlkFiles::open(&chain.join("blocks"), network)
        .with_context(|| format!("reading the blocks of {}", chain.display()))?;
    Ok(Query::new(
        Arc::new(store),
        Arc::new(blocks),
        QueryConfig::default(),
    ))
}

/// Scans every receiver once on `threads` threads, which take the receivers
/// in turn; checks each scan against the manifest as it ends.
fn scan_phase(
    query: &Query,
    receivers: &[Receiver],
    threads: usize,
    chunk_records: usize,
) -> anyhow::Result<Phase> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let scans = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let next = &next;
                scope.spawn(move || -> anyhow::Result<Vec<ScanRecord>> {
                    let mut scans = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(receiver) = receivers.get(i) else {
                            return Ok(scans);
                        };
                        let scan = scan_whole_chain(query, receiver, chunk_records)
                            .and_then(|scan| check(receiver, &scan.matches).map(|()| scan));
                        let scan = match scan {
                            Ok(scan) => scan,
                            Err(e) => {
                                // The run has failed: the other threads take
                                // no further receiver.
                                next.store(receivers.len(), Ordering::Relaxed);
                                return Err(e);
                            }
                        };
                        scans.push(ScanRecord {
                            receiver: i,
                            thread,
                            records: scan.records,
                            chunks: scan.chunks,
                            matches: scan.matches.len(),
                            cpu_seconds: scan.cpu.as_secs_f64(),
                            wall_seconds: scan.wall.as_secs_f64(),
                        });
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .map_err(|_| anyhow::anyhow!("a scanning thread panicked"))?
            })
            .collect::<anyhow::Result<Vec<Vec<ScanRecord>>>>()
    })?;
    let wall_seconds = started.elapsed().as_secs_f64();
    let mut scans: Vec<ScanRecord> = scans.into_iter().flatten().collect();
    scans.sort_by_key(|s| s.receiver);
    // Every scan covers the whole chain: the same records, whoever scans.
    if let Some(first) = scans.first() {
        if let Some(other) = scans.iter().find(|s| s.records != first.records) {
            bail!(
                "receiver {} scanned {} records, receiver {} scanned {}: scans of the whole \
                 chain must all see its every record",
                first.receiver,
                first.records,
                other.receiver,
                other.records
            );
        }
    }
    Ok(Phase {
        threads,
        wall_seconds,
        scans,
    })
}

/// One receiver's scan from height 0 to the tip.
struct Scan {
    records: usize,
    chunks: usize,
    matches: Vec<Payment>,
    /// This thread's CPU time over the scan.
    cpu: Duration,
    wall: Duration,
}

/// Scans the whole chain for `receiver` in chunks of `chunk_records`
/// records, each chunk resuming where the last one stopped.
fn scan_whole_chain(
    query: &Query,
    receiver: &Receiver,
    chunk_records: usize,
) -> anyhow::Result<Scan> {
    let (tip, _) = query.tip();
    let cpu_start = thread_cpu_time();
    let started = Instant::now();
    let mut cursor = SpCursor::at_height(Height(0));
    let mut scan = Scan {
        records: 0,
        chunks: 0,
        matches: Vec::new(),
        cpu: Duration::ZERO,
        wall: Duration::ZERO,
    };
    loop {
        let chunk = query
            // In place: the thread's CPU time is the scan's.
            .sp_scan(&receiver.keys, cursor, tip, chunk_records, &InPlace)
            .with_context(|| format!("scanning for {}", receiver.address))?;
        scan.chunks += 1;
        scan.records += chunk.records;
        scan.matches.extend(
            chunk
                .matches
                .into_iter()
                .map(|m| (m.height, m.txid.to_string(), hex::encode(m.tweak_key))),
        );
        if chunk.done {
            break;
        }
        ensure!(
            chunk.records > 0,
            "a chunk from {cursor:?} scanned nothing and did not end the scan"
        );
        cursor = chunk.next;
    }
    scan.wall = started.elapsed();
    scan.cpu = thread_cpu_time().saturating_sub(cpu_start);
    Ok(scan)
}

/// Fails unless `found` is exactly the receiver's payments in the
/// manifest, each once.
fn check(receiver: &Receiver, found: &[Payment]) -> anyhow::Result<()> {
    let distinct: BTreeSet<Payment> = found.iter().cloned().collect();
    let missing: Vec<&Payment> = receiver.payments.difference(&distinct).collect();
    let extra: Vec<&Payment> = distinct.difference(&receiver.payments).collect();
    let repeated = found.len() - distinct.len();
    if missing.is_empty() && extra.is_empty() && repeated == 0 {
        return Ok(());
    }
    let show = |payments: &[&Payment]| {
        payments
            .iter()
            .take(3)
            .map(|(height, txid, tweak)| format!("{txid} at {height} (tweak {tweak})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    bail!(
        "the scan for {} is wrong: {} of the manifest's {} payments missing [{}], {} reported \
         that the manifest does not list [{}], {} reported twice",
        receiver.address,
        missing.len(),
        receiver.payments.len(),
        show(&missing),
        extra.len(),
        show(&extra),
        repeated
    )
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// `/proc/loadavg`'s first three fields, to say how busy the machine was.
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver(payments: &[(u32, &str, &str)]) -> Receiver {
        let scan = SecretKey::from_slice(&[1; 32]).unwrap();
        let spend = SecretKey::from_slice(&[2; 32])
            .unwrap()
            .public_key(&bitcoin::secp256k1::Secp256k1::new());
        Receiver {
            address: "sprt1qtest".into(),
            keys: Arc::new(ScanKeys::new(scan, spend, []).unwrap()),
            payments: payments
                .iter()
                .map(|&(h, txid, tweak)| (h, txid.to_owned(), tweak.to_owned()))
                .collect(),
        }
    }

    fn payment(height: u32, txid: &str, tweak: &str) -> Payment {
        (height, txid.to_owned(), tweak.to_owned())
    }

    #[test]
    fn a_scan_must_find_the_manifests_payments_exactly() {
        let r = receiver(&[(5, "aa", "02"), (9, "bb", "03")]);
        assert!(check(&r, &[payment(5, "aa", "02"), payment(9, "bb", "03")]).is_ok());

        let err = check(&r, &[payment(5, "aa", "02")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1 of the manifest's 2 payments missing [bb at 9 (tweak 03)]"),
            "{err}"
        );
        // The right transaction with a wrong tweak is both missing and extra.
        let err = check(&r, &[payment(5, "aa", "02"), payment(9, "bb", "02")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1 reported that the manifest does not list [bb at 9 (tweak 02)]"),
            "{err}"
        );
        let err = check(
            &r,
            &[
                payment(5, "aa", "02"),
                payment(9, "bb", "03"),
                payment(9, "bb", "03"),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("1 reported twice"), "{err}");
    }

    #[test]
    fn thread_cpu_time_counts_this_threads_work_only() {
        let before = thread_cpu_time();
        // Work the optimiser cannot drop.
        let mut x = 1u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        let spent = thread_cpu_time().saturating_sub(before);
        assert!(spent > Duration::ZERO, "{x}");
        // A new thread doing next to nothing has spent less than that: the
        // clock is each thread's, not the process's.
        let idle = std::thread::spawn(|| {
            let start = thread_cpu_time();
            let _ = std::hint::black_box(1 + 1);
            thread_cpu_time().saturating_sub(start)
        })
        .join()
        .unwrap();
        assert!(idle < spent, "{idle:?} vs {spent:?}");
    }
}
