//! The arithmetic's limit a scan is held against: every eligible record
//! costs at least one variable-base point multiplication (the ECDH
//! `input_hash·b_scan·A`) and one fixed-base one (`t_0·G`), so no scan can
//! beat the rate of those two pairs. Measured with the very calls the scan
//! kernel makes, through the libsecp256k1 the `osprey-sp` crate links
//! (`secp256k1` 0.29, constant time both, each giving an affine point as
//! the kernel needs), on the thread and clock the scans are timed with.

use bitcoin::hashes::{sha256, Hash};
use bitcoin::secp256k1::{ecdh, PublicKey, Secp256k1, SecretKey, Signing};
use std::hint::black_box;
use std::time::Duration;

/// Distinct points and scalars, cycled, so no result is computed once and
/// reused, and the inputs stay in the cache as a scan's keys do.
const INPUTS: usize = 64;

/// Pairs per measurement: about a second of CPU on the 2-core VM, long
/// enough that the clock's resolution and a preemption do not matter.
const PAIRS: usize = 20_000;

/// Pairs of (one constant-time ECDH + one constant-time generator
/// multiplication) per second of this thread's CPU time, timed by
/// `thread_cpu_time`.
pub fn multiplication_pairs_per_cpu_second(thread_cpu_time: fn() -> Duration) -> f64 {
    let secp = Secp256k1::new();
    let scalars: Vec<SecretKey> = (0..INPUTS).map(|i| secret(1, i)).collect();
    let points: Vec<PublicKey> = (0..INPUTS)
        .map(|i| secret(2, i).public_key(&secp))
        .collect();
    // Warm the caches and the generator's table.
    pairs(&secp, &scalars, &points, INPUTS);
    let started = thread_cpu_time();
    pairs(&secp, &scalars, &points, PAIRS);
    let spent = thread_cpu_time().saturating_sub(started);
    PAIRS as f64 / spent.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// `count` pairs, as the kernel does them: `s·A` with libsecp256k1's
/// ECDH (`ecdh::shared_secret_point`), then `t·G`
/// (`PublicKey::from_secret_key`).
fn pairs<C: Signing>(
    secp: &Secp256k1<C>,
    scalars: &[SecretKey],
    points: &[PublicKey],
    count: usize,
) {
    for i in 0..count {
        let scalar = &scalars[i % scalars.len()];
        black_box(ecdh::shared_secret_point(
            black_box(&points[i % points.len()]),
            black_box(scalar),
        ));
        black_box(PublicKey::from_secret_key(
            secp,
            black_box(&scalars[(i + 1) % scalars.len()]),
        ));
    }
}

fn secret(domain: u8, i: usize) -> SecretKey {
    let digest = sha256::Hash::hash(&[&[domain][..], &i.to_le_bytes()].concat());
    SecretKey::from_slice(digest.as_byte_array())
        .expect("a hash is a valid key but with probability 2^-128")
}
