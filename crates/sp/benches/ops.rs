//! What BIP-352's arithmetic costs on this machine (docs/silent-payments.md,
//! 2.5 and phase 0): the libsecp256k1 operations the index and the scanner
//! are made of, then the per-transaction work as `osprey-sp` does it (the
//! index's tweak data, with and without the product `input_hash·A`, and
//! the scan kernel on one record). The scan bar is 15,000 records per
//! second per core, 66.7 µs a record.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`),
//! not wall time: the bar is per core, and this machine's two cores are
//! shared, so wall time would count other processes' turns.
//!
//! `cargo bench -p osprey-sp --bench ops`

use bitcoin::hashes::{hash160, sha256, Hash};
use bitcoin::secp256k1::{ecdh, PublicKey, Scalar, Secp256k1, SecretKey};
use bitcoin::{
    absolute, transaction, Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Txid,
    Witness,
};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use osprey_sp::{append_block_records, BlockRecords, ScanKeys, TweakData};

/// Distinct inputs per benchmark, cycled, so no result is computed once and
/// reused.
const INPUTS: usize = 64;

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`), in
/// nanoseconds.
struct ThreadCpuTime;

fn thread_cpu_nanos() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_nanos() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns (CPU)")
        } else if typical_ns < 1e6 {
            (1e-3, "µs (CPU)")
        } else {
            (1e-6, "ms (CPU)")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iteration = match throughput {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => {
                *n as f64
            }
        };
        values
            .iter_mut()
            .for_each(|ns| *ns = per_iteration * 1e9 / *ns);
        "/CPU-s"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns (CPU)"
    }
}

fn secret(domain: u8, i: usize) -> SecretKey {
    let digest = sha256::Hash::hash(&[&[domain][..], &i.to_le_bytes()].concat());
    SecretKey::from_slice(digest.as_byte_array())
        .expect("a hash is a valid key but with probability 2^-128")
}

fn primitives(c: &mut Criterion<ThreadCpuTime>) {
    let secp = Secp256k1::new();
    let secrets: Vec<SecretKey> = (0..INPUTS).map(|i| secret(1, i)).collect();
    let others: Vec<SecretKey> = (0..INPUTS).map(|i| secret(2, i)).collect();
    let points: Vec<PublicKey> = secrets.iter().map(|s| s.public_key(&secp)).collect();
    let compressed: Vec<[u8; 33]> = points.iter().map(PublicKey::serialize).collect();
    let uncompressed: Vec<[u8; 65]> = points
        .iter()
        .map(PublicKey::serialize_uncompressed)
        .collect();
    let mut i = 0;
    let mut next = || {
        i = (i + 1) % INPUTS;
        i
    };
    let mut group = c.benchmark_group("primitives");
    group.bench_function("parse_compressed_A", |b| {
        b.iter(|| PublicKey::from_slice(&compressed[next()]))
    });
    group.bench_function("parse_uncompressed_A", |b| {
        b.iter(|| PublicKey::from_slice(&uncompressed[next()]))
    });
    group.bench_function("ecdh_constant_time", |b| {
        b.iter(|| {
            let j = next();
            ecdh::shared_secret_point(&points[j], &others[j])
        })
    });
    group.bench_function("point_mul_variable_time", |b| {
        b.iter(|| {
            let j = next();
            points[j].mul_tweak(&secp, &Scalar::from(others[j]))
        })
    });
    group.bench_function("generator_mul_constant_time", |b| {
        b.iter(|| PublicKey::from_secret_key(&secp, &others[next()]))
    });
    group.bench_function("tweak_add_variable_time", |b| {
        b.iter(|| {
            let j = next();
            points[j].add_exp_tweak(&secp, &Scalar::from(others[j]))
        })
    });
    group.bench_function("combine_two_points", |b| {
        b.iter(|| {
            let j = next();
            points[j].combine(&points[(j + 1) % INPUTS])
        })
    });
    group.bench_function("sum_three_keys", |b| {
        b.iter(|| {
            let j = next();
            PublicKey::combine_keys(&[
                &points[j],
                &points[(j + 1) % INPUTS],
                &points[(j + 2) % INPUTS],
            ])
        })
    });
    group.bench_function("serialize_compressed", |b| {
        b.iter(|| points[next()].serialize())
    });
    group.bench_function("x_only", |b| b.iter(|| points[next()].x_only_public_key()));
    group.bench_function("scalar_product", |b| {
        b.iter(|| {
            let j = next();
            secrets[j].mul_tweak(&Scalar::from(others[j]))
        })
    });
    group.bench_function("tagged_hash_inputs", |b| {
        b.iter(|| {
            let outpoint = OutPoint {
                txid: Txid::from_byte_array([next() as u8; 32]),
                vout: 0,
            };
            osprey_sp::input_hash([&outpoint], &points[next()])
        })
    });
    group.bench_function("tagged_hash_shared_secret", |b| {
        b.iter(|| osprey_sp::shared_secret_tweak(&compressed[next()], 0))
    });
    group.bench_function("hash160_p2pkh_window", |b| {
        b.iter(|| hash160::Hash::hash(&compressed[next()]))
    });
    group.finish();
}

/// A transaction spending two P2WPKH outputs (the commonest counted kind)
/// and paying one taproot output and one P2WPKH change.
fn two_input_transaction(
    secp: &Secp256k1<bitcoin::secp256k1::All>,
    i: usize,
) -> (Transaction, Vec<TxOut>) {
    let keys = [secret(3, 2 * i), secret(3, 2 * i + 1)];
    let input = |k: &SecretKey, vout| TxIn {
        previous_output: OutPoint {
            txid: Txid::from_byte_array([i as u8; 32]),
            vout,
        },
        script_sig: ScriptBuf::new(),
        sequence: Sequence::MAX,
        // A DER signature's length, then the compressed key.
        witness: Witness::from_slice(&[vec![0x30; 71], k.public_key(secp).serialize().to_vec()]),
    };
    let p2wpkh = |k: &SecretKey| {
        ScriptBuf::new_p2wpkh(&bitcoin::CompressedPublicKey(k.public_key(secp)).wpubkey_hash())
    };
    let taproot = ScriptBuf::new_p2tr(secp, secret(4, i).x_only_public_key(secp).0, None);
    let tx = Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input: vec![input(&keys[0], 0), input(&keys[1], 1)],
        output: vec![
            TxOut {
                value: Amount::from_sat(50_000),
                script_pubkey: taproot,
            },
            TxOut {
                value: Amount::from_sat(20_000),
                script_pubkey: p2wpkh(&keys[0]),
            },
        ],
    };
    let spent = keys
        .iter()
        .map(|k| TxOut {
            value: Amount::from_sat(40_000),
            script_pubkey: p2wpkh(k),
        })
        .collect();
    (tx, spent)
}

fn per_transaction(c: &mut Criterion<ThreadCpuTime>) {
    let secp = Secp256k1::new();
    let transactions: Vec<(Transaction, Vec<TxOut>)> = (0..INPUTS)
        .map(|i| two_input_transaction(&secp, i))
        .collect();
    // Each transaction's record, as the second transaction of a block.
    let coinbase = Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint::null(),
            script_sig: ScriptBuf::from_bytes(vec![1, 1]),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        output: Vec::new(),
    };
    let mut records = Vec::new();
    let mut offsets = vec![0];
    for (tx, spent) in &transactions {
        append_block_records(&[coinbase.clone(), tx.clone()], spent, &mut records)
            .expect("a valid block");
        offsets.push(records.len());
    }
    let change_only =
        ScanKeys::new(secret(5, 0), secret(6, 0).public_key(&secp), []).expect("valid keys");
    let ten_labels =
        ScanKeys::new(secret(5, 0), secret(6, 0).public_key(&secp), 1..=10).expect("valid keys");
    let mut i = 0;
    let mut next = || {
        i = (i + 1) % INPUTS;
        i
    };
    let mut group = c.benchmark_group("per_transaction");
    // Reported as transactions (records) per CPU-second too.
    group.throughput(Throughput::Elements(1));
    group.bench_function("index_factors_two_p2wpkh_inputs", |b| {
        b.iter(|| {
            let (tx, spent) = &transactions[next()];
            osprey_sp::tweak_data(tx, spent)
        })
    });
    group.bench_function("index_product_two_p2wpkh_inputs", |b| {
        b.iter(|| {
            let (tx, spent) = &transactions[next()];
            osprey_sp::tweak_data(tx, spent).map(|tweak| tweak.map(|t| t.tweak_key()))
        })
    });
    let record = |j: usize| {
        BlockRecords::new(&records[offsets[j]..offsets[j + 1]])
            .next()
            .expect("one record")
            .expect("well formed")
    };
    for (name, keys) in [
        ("scan_kernel_change_label", &change_only),
        ("scan_kernel_11_labels", &ten_labels),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let record = record(next());
                let candidates = keys
                    .first_output_candidates(&record.tweak_data().expect("valid record"))
                    .expect("valid keys");
                candidates.prefix_hits(&record).count()
            })
        });
    }
    // The lever measured: the same kernel when A comes compressed (the
    // design's first record) and must be decompressed. Re-encoding it for
    // `TweakData::from_bytes` adds about 0.15 µs.
    let compressed: Vec<[u8; 33]> = (0..INPUTS)
        .map(|j| {
            record(j)
                .tweak_data()
                .expect("valid record")
                .input_key_sum()
                .serialize()
        })
        .collect();
    group.bench_function("scan_kernel_change_label_compressed_A", |b| {
        b.iter(|| {
            let j = next();
            let record = record(j);
            let key = PublicKey::from_slice(&compressed[j]).expect("a key");
            let mut xy = [0u8; 64];
            xy.copy_from_slice(&key.serialize_uncompressed()[1..]);
            let tweak = TweakData::from_bytes(&xy, record.input_hash).expect("valid record");
            let candidates = change_only
                .first_output_candidates(&tweak)
                .expect("valid keys");
            candidates.prefix_hits(&record).count()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = primitives, per_transaction
}
criterion_main!(benches);
