//! The harness shared by the functional tests: the Osprey child process
//! ([`Osprey`]), raw JSON-RPC sessions ([`Session`]), the node's own view of
//! the chain and mempool from which expected answers are computed
//! ([`NodeView`]), the collection of one server's answers about a set of
//! scripts ([`answers`]), and one-shot `osprey` subcommands ([`command`]).
//! Nodes, and hand-built blocks for reorgs, come from `osprey-testenv`.
//! Expected answers never come from Osprey's index or code (the kill test
//! only watches a flat file's size as a trigger).

pub mod answers;
pub mod command;
pub mod merkle;
pub mod oracle;
pub mod osprey;
pub mod session;
pub mod small_fs;

use std::time::{Duration, Instant};

use bitcoin::hashes::{sha256, Hash};
use bitcoin::Script;
use osprey_testenv::{BtcdNode, Node};

pub use answers::collect_answers;
pub use oracle::NodeView;
pub use osprey::{Osprey, OspreyConfig};
pub use session::Session;

/// How long a server gets to catch up with the node before a test fails.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts a btcd regtest node, failing (never skipping) with the install
/// command when btcd is missing.
///
/// # Panics
/// When btcd cannot be found or started.
pub fn start_btcd() -> BtcdNode {
    match BtcdNode::start() {
        Ok(node) => {
            eprintln!("btcd: rpc {}, p2p {}", node.rpc_addr(), node.p2p_addr());
            node
        }
        Err(e) => panic!(
            "these tests need btcd 0.24.2: {e:#}\n\
             install it with `go install github.com/btcsuite/btcd@v0.24.2` \
             (or point $OSPREY_BTCD at it)"
        ),
    }
}

/// Returns the Electrum script hash of `script`: SHA-256 of the script,
/// shown byte-reversed in hex (protocol-basics, "Script Hashes").
pub fn scripthash(script: &Script) -> String {
    let mut hash = sha256::Hash::hash(script.as_bytes()).to_byte_array();
    hash.reverse();
    hex::encode(hash)
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `timeout`.
///
/// # Panics
/// With `what` when the time is up.
pub fn wait_until<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        if started.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A seed for a randomised choice: `$OSPREY_IT_SEED` when set (to replay a
/// run), else the clock. Printed so a failing run can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("OSPREY_IT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (replay with OSPREY_IT_SEED={seed})");
    seed
}

/// A small deterministic generator (xorshift64*) for seeded choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Returns a number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The scripts of a chaingen wallet (each checked against the manifest's
/// script hash) followed by `sample` other scripts of `view` drawn with
/// `rng`: what the generated-chain tests compare answers on.
pub fn wallet_and_sampled_scripts(
    manifest: &osprey_chaingen::Manifest,
    view: &NodeView,
    rng: &mut Rng,
    sample: usize,
) -> Vec<bitcoin::ScriptBuf> {
    use std::str::FromStr;
    let mut scripts: Vec<bitcoin::ScriptBuf> = manifest
        .wallet
        .addresses
        .iter()
        .map(|a| {
            let script = bitcoin::Address::from_str(&a.address)
                .expect("address")
                .require_network(bitcoin::Network::Regtest)
                .expect("a regtest address")
                .script_pubkey();
            assert_eq!(
                scripthash(&script),
                a.scripthash,
                "the manifest's script hash of {}",
                a.address
            );
            script
        })
        .collect();
    let mut others = view.scripts();
    for _ in 0..sample.min(others.len()) {
        let i = rng.below(others.len() as u64) as usize;
        scripts.push(others.swap_remove(i));
    }
    scripts
}
