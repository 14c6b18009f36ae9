//! `osprey demo --silent-payments`, as a Sparrow user meets it: the real
//! binary prints a seed, an address and how many payments to expect; this
//! test, as the wallet, derives the keys from the printed seed itself
//! (BIP-39 and BIP-32 here, BIP-352's paths as Sparrow's drongo takes them,
//! spdk's address encoding), subscribes as Sparrow does (the birth date
//! as a Unix time, no labels) and checks that the scan lists exactly what
//! the demo's manifest says it paid that wallet.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bitcoin::bip32::{DerivationPath, Xpriv};
use bitcoin::hashes::hmac::{Hmac, HmacEngine};
use bitcoin::hashes::{sha512, Hash, HashEngine};
use bitcoin::secp256k1::{PublicKey, Secp256k1, SecretKey};
use osprey_chaingen::Manifest;
use serde_json::json;
use silentpayments::SilentPaymentCode;

use crate::common::Session;
use crate::silent_payments::{scan_to_end, Entry, SP_METHOD};

/// Generating the tiny chain and indexing it take seconds; the margin is
/// for cores the tests beside this one keep busy.
const DEMO_READY_TIMEOUT: Duration = Duration::from_secs(300);

/// `osprey demo`, killed when dropped.
struct Demo {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Demo {
    fn start(dir: &Path) -> Demo {
        let stdout = dir.join("demo.out");
        let stderr = dir.join("demo.err");
        let mut command = Command::new(env!("CARGO_BIN_EXE_osprey"));
        command
            .args(["demo", "--silent-payments", "--dir"])
            .arg(dir.join("demo"))
            .args(["--electrum-rpc-addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("creating the stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("creating the stderr file"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OSPREY_") {
                command.env_remove(key);
            }
        }
        let child = command.spawn().expect("starting osprey demo");
        Demo {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits for the demo's instructions and for its server to have
    /// indexed the chain; returns them and the address it serves on.
    fn wait_ready(&mut self) -> (String, SocketAddr) {
        let started = Instant::now();
        loop {
            let out = std::fs::read_to_string(&self.stdout).unwrap_or_default();
            let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            let serving = err
                .lines()
                .filter(|line| line.contains("serving Electrum clients"))
                .find_map(|line| {
                    line.split_whitespace()
                        .find_map(|field| field.strip_prefix("addr="))
                        .and_then(|addr| addr.parse().ok())
                });
            if let (true, Some(addr)) = (out.contains("Stop with Ctrl-C."), serving) {
                return (out, addr);
            }
            if let Some(status) = self.child.try_wait().expect("waiting on the demo") {
                panic!("the demo exited with {status}:\n{out}\n{err}");
            }
            assert!(
                started.elapsed() < DEMO_READY_TIMEOUT,
                "the demo was not serving after {DEMO_READY_TIMEOUT:?}:\n{out}\n{err}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- the demo's log ----\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The line after the one containing `marker`, trimmed.
fn line_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let mut lines = text.lines();
    lines
        .by_ref()
        .find(|line| line.contains(marker))
        .unwrap_or_else(|| panic!("no {marker:?} in:\n{text}"));
    lines.next().expect("a line after the marker").trim()
}

/// BIP-39's seed of `mnemonic` without passphrase: PBKDF2-HMAC-SHA512,
/// 2048 rounds, salt "mnemonic", one 64-byte block.
fn bip39_seed(mnemonic: &str) -> [u8; 64] {
    let mac = |data: &[u8]| {
        let mut engine = HmacEngine::<sha512::Hash>::new(mnemonic.as_bytes());
        engine.input(data);
        Hmac::<sha512::Hash>::from_engine(engine).to_byte_array()
    };
    let mut block = mac(&[b"mnemonic".as_slice(), &1u32.to_be_bytes()].concat());
    let mut seed = block;
    for _ in 1..2048 {
        block = mac(&block);
        seed.iter_mut().zip(block).for_each(|(s, b)| *s ^= b);
    }
    seed
}

/// The scan secret and spend key of Sparrow's silent-payment wallet of
/// `mnemonic` off mainnet (account 0, coin type 1').
fn sparrow_keys(mnemonic: &str) -> (SecretKey, PublicKey) {
    let secp = Secp256k1::new();
    let master = Xpriv::new_master(bitcoin::NetworkKind::Test, &bip39_seed(mnemonic)).unwrap();
    let key = |path: &str| {
        let path: DerivationPath = path.parse().unwrap();
        master.derive_priv(&secp, &path).unwrap().private_key
    };
    let scan = key("m/352'/1'/0'/1'/0");
    let spend = key("m/352'/1'/0'/0'/0").public_key(&secp);
    (scan, spend)
}

/// Sparrow's birth date, as it sends it: Unix seconds at the day's start
/// (UTC here).
fn unix_day(date: &str) -> u64 {
    let parts: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let (y, m, d) = (parts[0], parts[1], parts[2]);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400).unwrap()
}

#[test]
fn demo_pays_the_printed_seeds_silent_payment_wallet() {
    assert_eq!(unix_day("1970-01-01"), 0);
    assert_eq!(unix_day("2017-07-14"), 1_499_990_400);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut demo = Demo::start(dir.path());
    let (out, addr) = demo.wait_ready();
    eprintln!("{out}");

    let mnemonic = line_after(&out, "never use it for real funds");
    assert_eq!(mnemonic.split(' ').count(), 12, "{mnemonic:?}");
    let address = line_after(&out, "Silent payments: the chain pays");
    let paid: usize = out
        .split("Silent payments: the chain pays ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the number of payments printed");
    let birth_date = out
        .split("and pick ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("the birth date printed");

    let (scan, spend) = sparrow_keys(mnemonic);
    let secp = Secp256k1::new();
    let code = SilentPaymentCode::new_v0(
        scan.public_key(&secp),
        spend,
        silentpayments::Network::Regtest,
    );
    assert_eq!(
        address,
        code.to_string(),
        "the printed address is the seed's"
    );

    let manifest: Manifest = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("demo/chain/manifest.json")).unwrap(),
    )
    .unwrap();
    let receivers = manifest
        .silent_payments
        .expect("a chain with silent payments");
    let wallet = receivers
        .iter()
        .find(|r| r.address == address)
        .expect("the manifest lists the demo wallet");
    assert_eq!(wallet.payments.len(), paid, "as many payments as printed");
    assert!(paid > 3, "{paid} payments");

    let mut session = Session::connect(addr);
    let start = unix_day(birth_date);
    let subscription = session.call(
        SP_METHOD,
        json!([
            hex::encode(scan.secret_bytes()),
            spend.to_string(),
            start,
            []
        ]),
    );
    assert_eq!(subscription["address"], address);
    let first_paid = wallet.payments.iter().map(|p| p.height).min().unwrap();
    let start_height = subscription["start_height"].as_u64().expect("start_height");
    assert!(
        start_height <= u64::from(first_paid),
        "the printed birth date starts the scan at {start_height}, after the first payment at {first_paid}"
    );
    let found = scan_to_end(&mut session, std::slice::from_ref(&subscription)).remove(0);
    let expected: BTreeSet<Entry> = wallet
        .payments
        .iter()
        .map(|p| (u64::from(p.height), p.txid.clone(), p.tweak_key.clone()))
        .collect();
    assert_eq!(found.len(), paid);
    assert_eq!(found, expected);
}
