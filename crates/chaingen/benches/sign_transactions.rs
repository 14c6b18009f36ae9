//! Transfers created and signed per second: the generator's hot path
//! (fresh output keys, assembly, ECDSA/Schnorr signatures, txid), on every
//! core and on one. BENCHMARKS.md workload 6; the bar is 10,000 transfers in
//! well under a second in a release build.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use osprey_chaingen::generate::bench_support;

fn sign_transactions(c: &mut Criterion) {
    let prepared = bench_support::prepare(10_000, 1);
    let mut group = c.benchmark_group("sign_transactions");
    group.sample_size(10);
    group.throughput(Throughput::Elements(prepared.len() as u64));
    group.bench_function(BenchmarkId::new("all_cores", prepared.len()), |b| {
        b.iter(|| prepared.build_parallel())
    });
    group.bench_function(BenchmarkId::new("one_core", prepared.len()), |b| {
        b.iter(|| prepared.build_serial())
    });
    group.finish();
}

criterion_group!(benches, sign_transactions);
criterion_main!(benches);
