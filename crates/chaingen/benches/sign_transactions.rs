//! Transfers created and signed per second: the generator's hot path
//! (fresh output keys, assembly, ECDSA/Schnorr signatures, txid), on every
//! core and on one, plus the elliptic-curve operations it is made of.
//! BENCHMARKS.md workload 6; the bar is 10,000 transfers in well under a
//! second in a release build.
//!
//! `cargo bench -p osprey-chaingen --bench sign_transactions`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use osprey_chaingen::generate::bench_support;
use osprey_chaingen::sign::{Key, ScriptKind, SECP};

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

/// The parts: what one fresh output key, one script and one signature cost.
fn key_operations(c: &mut Criterion) {
    let mut group = c.benchmark_group("key_operations");
    let key = Key::from_seed(1, 1);
    let msg = bitcoin::secp256k1::Message::from_digest([7; 32]);
    let mut i = 0u64;
    group.bench_function("derive_key", |b| {
        b.iter(|| {
            i += 1;
            Key::from_seed(2, i)
        })
    });
    group.bench_function("script_pubkey_p2wpkh", |b| {
        b.iter(|| key.script_pubkey(ScriptKind::P2wpkh))
    });
    group.bench_function("script_pubkey_p2tr", |b| {
        b.iter(|| key.script_pubkey(ScriptKind::P2tr))
    });
    group.bench_function("sign_ecdsa", |b| {
        b.iter(|| SECP.sign_ecdsa(&msg, key.secret_key()))
    });
    group.bench_function("sign_schnorr_taproot", |b| {
        b.iter(|| SECP.sign_schnorr_no_aux_rand(&msg, &key.taproot_keypair()))
    });
    group.finish();
}

criterion_group!(benches, sign_transactions, key_operations);
criterion_main!(benches);
