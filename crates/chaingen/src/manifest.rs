//! The manifest written next to a generated chain: what the chain is, and the
//! answers an exact Electrum server must give about its big wallet. `osprey
//! bench` checks servers against it; `osprey demo` prints the wallet from it.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// File name of the manifest inside a chaingen output directory.
pub const MANIFEST_FILE: &str = "manifest.json";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    /// Always "regtest" for now.
    pub network: String,
    pub preset: String,
    pub seed: u64,
    /// Height of the last block (the genesis block is height 0).
    pub tip_height: u32,
    pub tip_hash: String,
    /// Block hashes by height, genesis first (display hex).
    pub block_hashes: Vec<String>,
    /// Transactions in the chain, coinbases and genesis included.
    pub tx_count: u64,
    /// Inputs and outputs over all transactions, coinbases included.
    pub input_count: u64,
    pub output_count: u64,
    /// `blk*.dat` file names under `blocks/`, in order.
    pub blk_files: Vec<String>,
    pub wallet: WalletManifest,
    /// Present only for a chain with placeholder signatures (absent from
    /// the files of every other chain, which stay as they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder_signatures: Option<PlaceholderSignatures>,
    /// The receivers of the chain's silent payments and every payment made
    /// to them: present only for a chain generated with a silent-payment
    /// share above 0 (absent from the files of every other chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_payments: Option<Vec<SilentPaymentReceiver>>,
}

/// A receiver of silent payments (BIP-352) and what a server must report
/// to a subscription of its keys from height 0.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SilentPaymentReceiver {
    /// `b_scan`, 64 hex digits, as `blockchain.silentpayments.subscribe`
    /// takes it.
    pub scan_private_key: String,
    /// `B_spend`, compressed, 66 hex digits.
    pub spend_public_key: String,
    /// The unlabelled address (regtest: `sprt1q...`).
    pub address: String,
    /// The labels a subscription must name to see every payment (the
    /// change label 0, always scanned, is not listed).
    pub labels: Vec<u32>,
    /// In chain order.
    pub payments: Vec<SilentPayment>,
}

/// One transaction paying a receiver.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SilentPayment {
    /// Display hex.
    pub txid: String,
    pub height: u32,
    /// `ser_P(input_hash·A)`, 66 hex digits, as a server reports it.
    pub tweak_key: String,
    /// The receiver's outputs in the transaction, by `vout`.
    pub outputs: Vec<SilentPaymentOutput>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SilentPaymentOutput {
    pub vout: u32,
    /// Satoshis.
    pub value: u64,
    /// BIP-352's output number for the receiver's scan key.
    pub k: u32,
    /// The label paid, `None` for the unlabelled address.
    pub label: Option<u32>,
}

/// Where a chain has placeholder signatures, and how a node accepts it:
/// Bitcoin Core with `-assumevalid=<assumevalid>` and every header known
/// before it connects the blocks (`-reindex` from the blk files, or
/// `osprey chaingen submit`, which sends the headers first).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PlaceholderSignatures {
    /// Height of the last block that may hold placeholder signatures; the
    /// blocks above it, up to the tip, hold only their coinbase, so a node
    /// checks their scripts without finding any.
    pub last_height: u32,
    /// Hash of the block at `last_height`: the node's `-assumevalid`.
    pub assumevalid: String,
}

/// The benchmark's "big wallet": a BIP84 wallet from a fixed test seed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WalletManifest {
    /// Output descriptor of the receive chain (`wpkh(tprv.../84h/1h/0h/0/*)`).
    pub receive_descriptor: String,
    /// Output descriptor of the change chain (`.../1/*`).
    pub change_descriptor: String,
    /// Every used address, receive chain first, each chain by index.
    pub addresses: Vec<WalletAddress>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WalletAddress {
    pub address: String,
    /// Electrum script hash (reversed hex of SHA-256 of the scriptPubKey).
    pub scripthash: String,
    /// 0 = receive, 1 = change.
    pub chain: u32,
    pub index: u32,
    /// Confirmed history in protocol order: (txid, height).
    pub history: Vec<(String, u32)>,
    /// Confirmed balance in satoshis.
    pub balance: u64,
    /// Number of unspent outputs.
    pub utxo_count: u32,
}

impl Manifest {
    /// Reads and parses `path` (a manifest file, or a directory holding one).
    ///
    /// # Errors
    /// When the file cannot be read or is not a manifest.
    pub fn load(path: &Path) -> std::io::Result<Manifest> {
        let file = if path.is_dir() {
            path.join(MANIFEST_FILE)
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&file)?;
        serde_json::from_str(&text).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: not a chaingen manifest: {e}", file.display()),
            )
        })
    }

    /// Writes the manifest as pretty JSON to `dir/manifest.json`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("manifest serialises");
        std::fs::write(dir.join(MANIFEST_FILE), text)
    }
}
