//! The progress stream of `osprey index --progress-json` (one JSON object
//! per committed batch on stdout) and its division into tenths of the chain.
//! Pure functions, no I/O.
//!
//! A batch is only seen when it commits, and batches are coarse (up to 2000
//! blocks or 2M rows, so a `large` chain has a few dozen of them): a tenth's
//! figures are the sum of each batch's share of it, the share being the
//! batch's transactions inside the tenth over all its transactions. Blocks,
//! bytes and seconds are thus spread evenly over a batch: a tenth shares its
//! rate with the batches that straddle its bounds, which is why the report
//! says how many batches each tenth draws on.

use serde::{Deserialize, Serialize};

/// One committed batch as `osprey index --progress-json` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Height of the batch's last block.
    pub height: u32,
    /// The source's tip when the batch was fetched.
    pub source_height: u32,
    pub blocks: u32,
    pub txs: u64,
    pub rows: u64,
    pub block_bytes: u64,
    /// Silent-payment records the batch wrote (its eligible transactions):
    /// 0 without silent payments, absent from an indexer that predates them.
    #[serde(default)]
    pub sp_records: u64,
    /// Time the indexer spent on this batch.
    pub batch_secs: f64,
    /// Seconds since the indexer started syncing, at this batch's commit.
    pub elapsed_secs: f64,
}

impl Batch {
    /// Height of the batch's first block.
    pub fn first_height(&self) -> u32 {
        (self.height + 1).saturating_sub(self.blocks)
    }
}

/// Why the progress stream cannot be measured.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProgressError {
    #[error("progress line {line}: not a batch record ({detail}): {text}")]
    Malformed {
        line: usize,
        detail: String,
        text: String,
    },
    #[error(
        "progress line {line}: a batch of 0 blocks, or more blocks than heights up to {height}"
    )]
    BadBlockCount { line: usize, height: u32 },
    #[error(
        "progress line {line}: the batch starts at height {first}, but the previous one ended \
         at {previous}: the indexer skipped or repeated blocks"
    )]
    NotContiguous {
        line: usize,
        first: u32,
        previous: u32,
    },
    #[error("progress line {line}: elapsed_secs went back from {previous} to {elapsed}")]
    TimeWentBack {
        line: usize,
        previous: f64,
        elapsed: f64,
    },
    #[error("the indexer printed no progress line: it indexed nothing")]
    Empty,
}

/// The LSM's shape as `osprey index --progress-json` prints it once synced
/// and once flushed (`{"lsm": {...}}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LsmShape {
    /// "synced" or "flushed".
    pub when: String,
    /// Live SST files and bytes per level (level 0 first) by column family.
    pub column_families: std::collections::BTreeMap<String, CfLevels>,
    pub stall_micros: u64,
    pub flush_write_bytes: u64,
    pub compact_read_bytes: u64,
    pub compact_write_bytes: u64,
    /// Runs the bulk load's merge took; `None`: none (or an indexer that
    /// predates runs).
    #[serde(default)]
    pub bulk_runs_merged: Option<u64>,
    /// Bytes of the bulk load's runs and merged files (RocksDB's counters
    /// leave them out).
    #[serde(default)]
    pub bulk_write_bytes: u64,
    /// The bulk load's merge: how long it took, and the height it merged
    /// the index at (the blocks after it came after the merge).
    #[serde(default)]
    pub bulk_merge_micros: Option<u64>,
    #[serde(default)]
    pub bulk_merged_at_height: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CfLevels {
    pub files: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl LsmShape {
    /// Levels holding files in the column family `name` (0 if it has none).
    pub fn levels(&self, name: &str) -> usize {
        self.column_families
            .get(name)
            .map_or(0, |cf| cf.files.iter().filter(|&&n| n > 0).count())
    }
}

/// One line of the indexer's stdout.
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    Batch(Batch),
    Lsm(LsmShape),
}

#[derive(Deserialize)]
struct LsmLine {
    lsm: LsmShape,
}

/// Parses one stdout line: `Ok(None)` for a line that is not a JSON object
/// (nothing else should be on stdout, but a stray line is not a measurement
/// error), an error for an object that is neither a batch record nor an
/// LSM shape.
///
/// # Errors
/// When the line looks like JSON but does not parse as either.
pub fn parse_line(line_number: usize, text: &str) -> Result<Option<Line>, ProgressError> {
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        return Ok(None);
    }
    if trimmed.starts_with(r#"{"lsm""#) {
        return serde_json::from_str::<LsmLine>(trimmed)
            .map(|line| Some(Line::Lsm(line.lsm)))
            .map_err(|e| ProgressError::Malformed {
                line: line_number,
                detail: e.to_string(),
                text: crate::error::excerpt(trimmed, 200),
            });
    }
    serde_json::from_str(trimmed)
        .map(|batch| Some(Line::Batch(batch)))
        .map_err(|e| ProgressError::Malformed {
            line: line_number,
            detail: e.to_string(),
            text: crate::error::excerpt(trimmed, 200),
        })
}

/// Checks that the batches cover consecutive heights and that time runs
/// forward, so the tenths computed from them account for every block once.
///
/// # Errors
/// On an empty stream, a batch of no blocks, a gap or overlap, or time going back.
pub fn check_sequence(batches: &[Batch]) -> Result<(), ProgressError> {
    if batches.is_empty() {
        return Err(ProgressError::Empty);
    }
    let mut previous: Option<&Batch> = None;
    for (i, batch) in batches.iter().enumerate() {
        let line = i + 1;
        if batch.blocks == 0 || batch.blocks > batch.height.saturating_add(1) {
            return Err(ProgressError::BadBlockCount {
                line,
                height: batch.height,
            });
        }
        if let Some(prev) = previous {
            if batch.first_height() != prev.height.wrapping_add(1) {
                return Err(ProgressError::NotContiguous {
                    line,
                    first: batch.first_height(),
                    previous: prev.height,
                });
            }
            if batch.elapsed_secs < prev.elapsed_secs {
                return Err(ProgressError::TimeWentBack {
                    line,
                    previous: prev.elapsed_secs,
                    elapsed: batch.elapsed_secs,
                });
            }
        }
        previous = Some(batch);
    }
    Ok(())
}

/// A stretch of a sync that indexed nothing, after the batch that reached
/// `after_height`: the bulk load's merge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pause {
    pub after_height: u32,
    pub seconds: f64,
}

impl Pause {
    /// The bulk load's merge an LSM shape reports, if one ended.
    pub fn bulk_merge(shape: &LsmShape) -> Option<Pause> {
        Some(Pause {
            after_height: shape.bulk_merged_at_height?,
            seconds: shape.bulk_merge_micros? as f64 / 1e6,
        })
    }
}

/// Number of parts the chain is cut into for the flat-ingest check.
pub const TENTHS: usize = 10;

/// One tenth of the indexed transactions and what the indexer did in it.
/// Blocks, txs, bytes and seconds are fractional: see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tenth {
    /// 1..=10.
    pub tenth: usize,
    /// Heights of the tenth's first and last transaction (estimated within
    /// a batch, whose transactions are spread evenly over its blocks).
    pub first_height: u32,
    pub last_height: u32,
    pub blocks: f64,
    pub txs: f64,
    pub block_bytes: f64,
    /// Wall seconds of the batches' intervals attributed to this tenth.
    pub seconds: f64,
    /// Batches with at least one transaction in this tenth.
    pub batches: usize,
    /// `None` when the tenth holds no block (chains under ten blocks) or took no time.
    pub txs_per_second: Option<f64>,
    pub block_mb_per_second: Option<f64>,
}

/// Cuts the transactions the batches cover into ten equal parts (differing
/// by at most one when the count does not divide) and attributes each
/// batch to them in proportion to its transactions in each part.
///
/// By transactions, not heights: how fast the index grows with what it
/// already holds is the question, and the index grows with transactions.
/// A mainnet-profile chain's early blocks hold few, and a chain with
/// placeholder signatures ends with 2,100 blocks of a coinbase each; cut by
/// heights, those would be whole tenths that index nothing.
///
/// A batch's time is the interval since the previous commit
/// (`elapsed_secs` minus the previous line's, from 0 for the first), not its
/// `batch_secs`: the intervals tile the whole sync, so the tenths add up to
/// it, waits for the block reader included.
///
/// `pause`, a stretch that indexed nothing (the bulk load's merge), is
/// taken out of the interval of the first batch after it: what the tenths
/// compare is the rate of indexing, and the merge is reported on its own.
///
/// The batches must have passed [`check_sequence`].
pub fn tenths(batches: &[Batch], pause: Option<Pause>) -> Vec<Tenth> {
    if batches.is_empty() {
        return Vec::new();
    }
    let count: u64 = batches.iter().map(|b| b.txs).sum();
    // Tenth k covers transactions [bound(k), bound(k + 1)).
    let bound = |k: usize| count * k as u64 / TENTHS as u64;
    let mut parts: Vec<Tenth> = (0..TENTHS)
        .map(|k| Tenth {
            tenth: k + 1,
            first_height: u32::MAX,
            last_height: 0,
            blocks: 0.0,
            txs: 0.0,
            block_bytes: 0.0,
            seconds: 0.0,
            batches: 0,
            txs_per_second: None,
            block_mb_per_second: None,
        })
        .collect();
    let mut previous_elapsed = 0.0;
    let mut lo = 0;
    let mut pause = pause;
    for batch in batches {
        let hi = lo + batch.txs;
        let mut interval = (batch.elapsed_secs - previous_elapsed).max(0.0);
        previous_elapsed = batch.elapsed_secs;
        if let Some(p) = pause.filter(|p| batch.first_height() > p.after_height) {
            interval = (interval - p.seconds).max(0.0);
            pause = None;
        }
        // The height of the batch's transaction `tx` (counted over all).
        let height_of = |tx: u64| {
            let into = (tx - lo) * u64::from(batch.blocks) / batch.txs.max(1);
            batch.first_height() + into as u32
        };
        for (k, part) in parts.iter_mut().enumerate() {
            let (from, to) = (lo.max(bound(k)), hi.min(bound(k + 1)));
            if to <= from {
                continue;
            }
            let share = (to - from) as f64 / batch.txs as f64;
            part.first_height = part.first_height.min(height_of(from));
            part.last_height = part.last_height.max(height_of(to - 1));
            part.blocks += f64::from(batch.blocks) * share;
            part.txs += (to - from) as f64;
            part.block_bytes += batch.block_bytes as f64 * share;
            part.seconds += interval * share;
            part.batches += 1;
        }
        lo = hi;
    }
    // A tenth with no transaction (fewer than ten in all) sits where the
    // one before it ended.
    let mut end = batches[0].first_height();
    for part in &mut parts {
        if part.batches == 0 {
            (part.first_height, part.last_height) = (end, end);
        }
        end = part.last_height;
    }
    for part in &mut parts {
        if part.blocks > 0.0 && part.seconds > 0.0 {
            part.txs_per_second = Some(part.txs / part.seconds);
            part.block_mb_per_second = Some(part.block_bytes / part.seconds / 1e6);
        }
    }
    parts
}

/// Returns last tenth's rate over the first's by `rate` (1.0: flat ingest;
/// below 1: the index slows down as it grows), or `None` when either is
/// unknown.
pub fn last_over_first(tenths: &[Tenth], rate: impl Fn(&Tenth) -> Option<f64>) -> Option<f64> {
    let first = rate(tenths.first()?)?;
    let last = rate(tenths.last()?)?;
    (first > 0.0).then(|| last / first)
}

/// Returns last tenth's rate over the median tenth's by `rate`: unlike
/// [`last_over_first`], blind to a chain whose first blocks are unlike the
/// rest (tiny early blocks go fast everywhere).
pub fn last_over_median(tenths: &[Tenth], rate: impl Fn(&Tenth) -> Option<f64>) -> Option<f64> {
    let rates: Vec<f64> = tenths.iter().map(&rate).collect::<Option<_>>()?;
    let last = *rates.last()?;
    let median = crate::stats::median(&rates)?;
    (median > 0.0).then(|| last / median)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(height: u32, blocks: u32, txs: u64, elapsed_secs: f64) -> Batch {
        Batch {
            height,
            source_height: 99,
            blocks,
            txs,
            rows: txs * 4,
            block_bytes: txs * 1000,
            sp_records: 0,
            batch_secs: 0.0,
            elapsed_secs,
        }
    }

    #[test]
    fn parses_the_indexer_line() {
        let line = r#"{"height":479,"source_height":480,"blocks":472,"txs":950,"rows":4100,"block_bytes":123456,"batch_secs":0.25,"elapsed_secs":0.5}"#;
        let Some(Line::Batch(b)) = parse_line(1, line).unwrap() else {
            panic!("not a batch");
        };
        assert_eq!((b.height, b.source_height, b.blocks), (479, 480, 472));
        assert_eq!((b.txs, b.rows, b.block_bytes), (950, 4100, 123_456));
        assert_eq!((b.batch_secs, b.elapsed_secs), (0.25, 0.5));
        assert_eq!(b.first_height(), 8);
        assert_eq!(b.sp_records, 0, "a line without silent payments");
        let line = r#"{"height":9,"source_height":9,"blocks":10,"txs":30,"rows":90,"block_bytes":9000,"sp_records":7,"batch_secs":0.1,"elapsed_secs":0.1}"#;
        let Some(Line::Batch(b)) = parse_line(1, line).unwrap() else {
            panic!("not a batch");
        };
        assert_eq!(b.sp_records, 7);
    }

    #[test]
    fn parses_the_lsm_line() {
        let line = r#"{"lsm":{"when":"synced","column_families":{"history":{"files":[3,0,0,0,0,0,7],"bytes":[30,0,0,0,0,0,700]},"meta":{"files":[],"bytes":[]}},"stall_micros":5,"flush_write_bytes":1,"compact_read_bytes":2,"compact_write_bytes":3,"bulk_runs_merged":null}}"#;
        let Some(Line::Lsm(shape)) = parse_line(1, line).unwrap() else {
            panic!("not an LSM shape");
        };
        assert_eq!(shape.when, "synced");
        assert_eq!((shape.levels("history"), shape.levels("meta")), (2, 0));
        assert_eq!(shape.bulk_runs_merged, None);
        let err = parse_line(4, r#"{"lsm":{"when":"synced"}}"#).unwrap_err();
        assert!(
            matches!(err, ProgressError::Malformed { line: 4, .. }),
            "{err}"
        );
    }

    #[test]
    fn skips_stray_text_but_rejects_broken_records() {
        assert_eq!(parse_line(1, "hello"), Ok(None));
        assert_eq!(parse_line(1, ""), Ok(None));
        let err = parse_line(7, r#"{"height": 5}"#).unwrap_err();
        assert!(
            matches!(err, ProgressError::Malformed { line: 7, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    #[test]
    fn sequence_must_be_contiguous_and_forward() {
        assert_eq!(check_sequence(&[]), Err(ProgressError::Empty));
        let ok = [batch(49, 50, 10, 1.0), batch(99, 50, 10, 2.0)];
        assert_eq!(check_sequence(&ok), Ok(()));
        let gap = [batch(49, 50, 10, 1.0), batch(99, 40, 10, 2.0)];
        assert_eq!(
            check_sequence(&gap),
            Err(ProgressError::NotContiguous {
                line: 2,
                first: 60,
                previous: 49
            })
        );
        let overlap = [batch(49, 50, 10, 1.0), batch(99, 51, 10, 2.0)];
        assert!(matches!(
            check_sequence(&overlap),
            Err(ProgressError::NotContiguous { first: 49, .. })
        ));
        let back = [batch(49, 50, 10, 2.0), batch(99, 50, 10, 1.0)];
        assert!(matches!(
            check_sequence(&back),
            Err(ProgressError::TimeWentBack { line: 2, .. })
        ));
        assert!(matches!(
            check_sequence(&[batch(9, 0, 0, 1.0)]),
            Err(ProgressError::BadBlockCount { .. })
        ));
        assert!(matches!(
            check_sequence(&[batch(9, 11, 0, 1.0)]),
            Err(ProgressError::BadBlockCount { .. })
        ));
    }

    #[test]
    fn one_batch_per_tenth_maps_exactly() {
        // Heights 0..=99, ten batches of ten blocks; batch k takes k+1 seconds.
        let mut elapsed = 0.0;
        let batches: Vec<Batch> = (0..10u32)
            .map(|k| {
                elapsed += f64::from(k + 1);
                batch(k * 10 + 9, 10, 100, elapsed)
            })
            .collect();
        check_sequence(&batches).unwrap();
        let t = tenths(&batches, None);
        assert_eq!(t.len(), TENTHS);
        assert_eq!((t[0].first_height, t[0].last_height), (0, 9));
        assert_eq!((t[9].first_height, t[9].last_height), (90, 99));
        assert_eq!(t[0].txs_per_second, Some(100.0));
        assert_eq!(t[9].txs_per_second, Some(10.0));
        assert_eq!(t[9].block_mb_per_second, Some(100.0 * 1000.0 / 10.0 / 1e6));
        assert!(t.iter().all(|p| p.batches == 1 && p.blocks == 10.0));
        let ratio = last_over_first(&t, |p| p.txs_per_second).unwrap();
        assert!((ratio - 0.1).abs() < 1e-12, "{ratio}");
        // Rates 100, 50, 33.3, 25, 20, 16.7, 14.3, 12.5, 11.1, 10: the
        // median is (20 + 16.7) / 2.
        let ratio = last_over_median(&t, |p| p.txs_per_second).unwrap();
        let median = (100.0 / 5.0 + 100.0 / 6.0) / 2.0;
        assert!((ratio - 10.0 / median).abs() < 1e-12, "{ratio}");
    }

    #[test]
    fn the_bulk_merge_is_left_out_of_the_tenth_it_falls_in() {
        // Ten batches of one second each, then a 30 s merge after height
        // 89: the last batch's interval is 31 s.
        let mut elapsed = 0.0;
        let batches: Vec<Batch> = (0..10u32)
            .map(|k| {
                elapsed += if k == 9 { 31.0 } else { 1.0 };
                batch(k * 10 + 9, 10, 100, elapsed)
            })
            .collect();
        let merge = Pause {
            after_height: 89,
            seconds: 30.0,
        };
        let with = tenths(&batches, None);
        assert_eq!(with[9].txs_per_second, Some(100.0 / 31.0));
        let without = tenths(&batches, Some(merge));
        assert_eq!(without[9].txs_per_second, Some(100.0));
        assert_eq!(
            without[..9],
            with[..9],
            "only the batch after the merge changes"
        );
    }

    #[test]
    fn straddling_batches_are_split_by_transactions() {
        // Heights 0..=99 in a batch of 15 blocks (3 s) and one of 85 (17 s).
        let batches = [batch(14, 15, 30, 3.0), batch(99, 85, 170, 20.0)];
        let t = tenths(&batches, None);
        // Tenth 2 (heights 10..=19): 5 blocks of each batch.
        assert_eq!((t[1].first_height, t[1].last_height), (10, 19));
        assert_eq!(t[1].batches, 2);
        assert!((t[1].blocks - 10.0).abs() < 1e-12);
        assert!((t[1].txs - (30.0 * 5.0 / 15.0 + 170.0 * 5.0 / 85.0)).abs() < 1e-9);
        assert!((t[1].seconds - (3.0 * 5.0 / 15.0 + 17.0 * 5.0 / 85.0)).abs() < 1e-9);
        // Everything is attributed exactly once.
        let sum = |f: fn(&Tenth) -> f64| t.iter().map(f).sum::<f64>();
        assert!((sum(|p| p.blocks) - 100.0).abs() < 1e-9);
        assert!((sum(|p| p.txs) - 200.0).abs() < 1e-9);
        assert!((sum(|p| p.seconds) - 20.0).abs() < 1e-9);
        assert!((sum(|p| p.block_bytes) - 200_000.0).abs() < 1e-6);
    }

    #[test]
    fn tenths_follow_transactions_not_heights() {
        // 50 blocks of 10 transactions (5 s), then a tail of 50 blocks of
        // one (0.5 s): the tail is in the last tenth, not half the tenths.
        let batches = [batch(49, 50, 500, 5.0), batch(99, 50, 50, 5.5)];
        let t = tenths(&batches, None);
        assert_eq!((t[0].first_height, t[0].last_height), (0, 5));
        assert_eq!(t[8].last_height, 49);
        // The last tenth: 5 transactions of the first batch, the whole tail.
        assert_eq!((t[9].first_height, t[9].last_height), (49, 99));
        assert!((t[9].txs - 55.0).abs() < 1e-9);
        assert!((t[9].blocks - (0.5 + 50.0)).abs() < 1e-9);
        assert!((t[9].seconds - (0.05 + 0.5)).abs() < 1e-9);
        assert_eq!(t[9].batches, 2);
        assert!(t[..9].iter().all(|p| p.txs == 55.0 && p.batches == 1));
    }

    #[test]
    fn uneven_counts_and_offsets() {
        // Heights 5..=27: 23 blocks; bounds 5, 7, 9, 11, 14, 16, 18, 21, 23, 25, 28.
        let t = tenths(&[batch(27, 23, 23, 2.3)], None);
        let sizes: Vec<f64> = t.iter().map(|p| p.blocks).collect();
        assert_eq!(sizes, [2.0, 2.0, 2.0, 3.0, 2.0, 2.0, 3.0, 2.0, 2.0, 3.0]);
        assert_eq!(t[0].first_height, 5);
        assert_eq!(t[9].last_height, 27);
        assert!(t
            .windows(2)
            .all(|w| w[1].first_height == w[0].last_height + 1));
    }

    #[test]
    fn fewer_transactions_than_tenths_leave_empty_tenths() {
        let t = tenths(&[batch(2, 3, 3, 1.0)], None);
        assert_eq!(t.iter().filter(|p| p.blocks > 0.0).count(), 3);
        assert!(t.iter().any(|p| p.txs_per_second.is_none()));
        assert_eq!(t.iter().map(|p| p.blocks).sum::<f64>(), 3.0);
        assert!(tenths(&[], None).is_empty());
    }
}
