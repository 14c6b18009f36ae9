//! Summary statistics of raw measurements: medians of runs, percentiles and
//! log-bucketed histograms of batch latencies. Pure functions, no I/O.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Returns the median of `values` (the mean of the middle two for an even
/// count), or `None` when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// Returns the `p`-th percentile (0..=100) of `sorted` by nearest rank.
/// `sorted` must be ascending; returns zero for an empty slice.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Percentiles of batch latencies, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    pub fn of(latencies: &[Duration]) -> LatencySummary {
        let mut sorted = latencies.to_vec();
        sorted.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let total: Duration = sorted.iter().sum();
        LatencySummary {
            count: sorted.len(),
            mean_ms: if sorted.is_empty() {
                0.0
            } else {
                ms(total) / sorted.len() as f64
            },
            p50_ms: ms(percentile(&sorted, 50.0)),
            p90_ms: ms(percentile(&sorted, 90.0)),
            p99_ms: ms(percentile(&sorted, 99.0)),
            max_ms: ms(sorted.last().copied().unwrap_or_default()),
        }
    }
}

/// One bucket of a latency histogram: batches slower than the previous
/// bucket's bound and at most `le_us` microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub le_us: u64,
    pub count: u64,
}

/// Returns a histogram with 1-2-5 bucket bounds from 10 µs up to the first
/// bound that holds the slowest batch, so any two runs share bucket edges
/// and can be compared bucket by bucket.
pub fn histogram(latencies: &[Duration]) -> Vec<Bucket> {
    let max_us = latencies.iter().map(|d| d.as_micros()).max().unwrap_or(0);
    let mut bounds = Vec::new();
    let mut decade: u64 = 10;
    'outer: loop {
        for step in [1, 2, 5] {
            let bound = decade.saturating_mul(step);
            bounds.push(bound);
            if u128::from(bound) >= max_us || bound == u64::MAX {
                break 'outer;
            }
        }
        decade = decade.saturating_mul(10);
    }
    let mut buckets: Vec<Bucket> = bounds
        .into_iter()
        .map(|le_us| Bucket { le_us, count: 0 })
        .collect();
    for latency in latencies {
        let us = latency.as_micros();
        let index = buckets
            .iter()
            .position(|b| us <= u128::from(b.le_us))
            .unwrap_or(buckets.len() - 1);
        buckets[index].count += 1;
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&sorted, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&sorted, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&sorted, 0.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn histogram_counts_every_batch_once() {
        let latencies = [5, 10, 11, 150, 2_000_000].map(Duration::from_micros);
        let buckets = histogram(&latencies);
        assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), 5);
        assert_eq!(
            buckets[0],
            Bucket {
                le_us: 10,
                count: 2
            }
        );
        assert_eq!(
            buckets[1],
            Bucket {
                le_us: 20,
                count: 1
            }
        );
        assert_eq!(
            buckets.last().unwrap(),
            &Bucket {
                le_us: 2_000_000,
                count: 1
            }
        );
        assert_eq!(
            histogram(&[]),
            vec![Bucket {
                le_us: 10,
                count: 0
            }]
        );
    }
}
