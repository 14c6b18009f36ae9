//! What `osprey index` says of the index it built: the LSM's shape (for
//! people in the log, for `osprey bench index` on stdout) and where the
//! index's bytes go.

use anyhow::Context;
use osprey_store::{Part, Store};

/// Logs the LSM's shape (`when`: the moment, "synced" or "flushed") and,
/// for `--progress-json`, prints it as one `{"lsm": ...}` line, which
/// `osprey bench index` records beside the batches.
pub fn lsm(store: &Store, when: &str, json: bool) -> anyhow::Result<()> {
    let shape = store.lsm_shape().context("reading the index's LSM shape")?;
    for cf in shape
        .column_families
        .iter()
        .filter(|cf| !cf.files.is_empty())
    {
        tracing::info!(
            "lsm {when}: {:<8} files per level {:?}, MB per level {:?}",
            cf.name,
            cf.files,
            cf.bytes.iter().map(|b| b / 1_000_000).collect::<Vec<_>>(),
        );
    }
    tracing::info!(
        "lsm {when}: write stalls {:.1} s; flushed {} MB, compactions read {} MB and wrote {} MB; \
         bulk load merged {} runs in {:.1} s, its runs and merged files {} MB",
        shape.stall_micros as f64 / 1e6,
        shape.flush_write_bytes / 1_000_000,
        shape.compact_read_bytes / 1_000_000,
        shape.compact_write_bytes / 1_000_000,
        shape.bulk_runs_merged.unwrap_or(0),
        shape.bulk_merge_micros.unwrap_or(0) as f64 / 1e6,
        shape.bulk_write_bytes / 1_000_000,
    );
    if json {
        let column_families: serde_json::Map<String, serde_json::Value> = shape
            .column_families
            .iter()
            .map(|cf| {
                let levels = serde_json::json!({"files": cf.files, "bytes": cf.bytes});
                (cf.name.to_string(), levels)
            })
            .collect();
        let line = serde_json::json!({"lsm": {
            "when": when,
            "column_families": column_families,
            "stall_micros": shape.stall_micros,
            "flush_write_bytes": shape.flush_write_bytes,
            "compact_read_bytes": shape.compact_read_bytes,
            "compact_write_bytes": shape.compact_write_bytes,
            "bulk_runs_merged": shape.bulk_runs_merged,
            "bulk_write_bytes": shape.bulk_write_bytes,
            "bulk_merge_micros": shape.bulk_merge_micros,
            "bulk_merged_at_height": shape.bulk_merged_at_height,
        }});
        // Beside the progress stream of `osprey index`.
        #[allow(clippy::print_stdout)]
        {
            println!("{line}");
        }
    }
    Ok(())
}

/// One line per part of the index: its bytes, its records, and both per
/// transaction, which is how an index's size scales to a bigger chain.
pub fn footprint(parts: &[Part]) {
    let txs = parts
        .iter()
        .find(|p| p.name == "txids.dat")
        .map_or(0, |p| p.records)
        .max(1) as f64;
    let total: u64 = parts.iter().map(|p| p.bytes).sum();
    for part in parts {
        tracing::info!(
            "index part {:<12} {:>14} bytes {:>7.2} B/tx {:>13} records {:>5.2} per tx",
            part.name,
            part.bytes,
            part.bytes as f64 / txs,
            part.records,
            part.records as f64 / txs,
        );
    }
    tracing::info!(
        "index total {total} bytes, {:.2} B/tx over {txs} transactions",
        total as f64 / txs
    );
}
