//! What a correct server answers, derived from the chaingen manifest, and the
//! comparison of each answer with it. The status hash is computed here from
//! the Electrum spec, independently of osprey's own code, so the instrument
//! cannot share a bug with the server it measures.

use crate::error::{excerpt, BenchError, Wrong};
use bitcoin::hashes::{sha256, Hash, HashEngine};
use osprey_chaingen::manifest::Manifest;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};

/// Characters of a server's answer quoted in a mismatch.
const EXCERPT_CHARS: usize = 200;

/// Returns the Electrum status of a history given as `(txid, height)` pairs
/// in protocol order: the hex (not reversed) SHA-256 of the concatenated
/// `"txid:height:"` strings, or `None` (JSON `null`) for an empty history.
/// See "Status" in the Electrum protocol-basics.
pub fn status_hash<'a>(history: impl IntoIterator<Item = (&'a str, i64)>) -> Option<String> {
    let mut engine = sha256::Hash::engine();
    let mut any = false;
    for (txid, height) in history {
        engine.input(txid.as_bytes());
        engine.input(b":");
        engine.input(height.to_string().as_bytes());
        engine.input(b":");
        any = true;
    }
    any.then(|| hex::encode(sha256::Hash::from_engine(engine).to_byte_array()))
}

/// The answers a correct server gives about one wallet address.
#[derive(Clone, Debug)]
pub struct ExpectedAddress {
    /// Electrum script hash, lower-case hex.
    pub scripthash: String,
    /// Confirmed history in protocol order: (txid lower-case hex, height).
    pub history: Vec<(String, u32)>,
    pub status: Option<String>,
}

/// The answers a correct server gives about the manifest's chain and wallet.
#[derive(Clone, Debug)]
pub struct Expected {
    pub addresses: Vec<ExpectedAddress>,
    /// Block hashes by height (display hex, lower case).
    pub block_hashes: Vec<String>,
    /// Distinct txids of the wallet's history, in first-seen order.
    pub txids: Vec<String>,
    /// Distinct heights of the wallet's history, ascending.
    pub heights: Vec<u32>,
    by_scripthash: HashMap<String, usize>,
}

impl Expected {
    /// Validates the manifest and derives the expected answers from it.
    ///
    /// # Errors
    /// When a hash is not 64 hex characters, a height has no block hash, or a
    /// script hash appears twice.
    pub fn from_manifest(manifest: &Manifest) -> Result<Expected, BenchError> {
        let bad = |what: String| BenchError::Manifest(what);
        let block_hashes: Vec<String> = manifest
            .block_hashes
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        for (height, hash) in block_hashes.iter().enumerate() {
            if !is_hash_hex(hash) {
                return Err(bad(format!(
                    "block hash at height {height} is not 64 hex characters: {hash:?}"
                )));
            }
        }
        if block_hashes.len() != manifest.tip_height as usize + 1 {
            return Err(bad(format!(
                "{} block hashes for tip height {} (expected {})",
                block_hashes.len(),
                manifest.tip_height,
                manifest.tip_height as u64 + 1
            )));
        }
        let mut addresses = Vec::with_capacity(manifest.wallet.addresses.len());
        let mut by_scripthash = HashMap::new();
        let mut seen_txids = HashSet::new();
        let mut txids = Vec::new();
        let mut heights = BTreeSet::new();
        for address in &manifest.wallet.addresses {
            let scripthash = address.scripthash.to_ascii_lowercase();
            if !is_hash_hex(&scripthash) {
                return Err(bad(format!(
                    "address {}: script hash is not 64 hex characters: {scripthash:?}",
                    address.address
                )));
            }
            let mut history = Vec::with_capacity(address.history.len());
            for (txid, height) in &address.history {
                let txid = txid.to_ascii_lowercase();
                if !is_hash_hex(&txid) {
                    return Err(bad(format!(
                        "scripthash {scripthash}: txid is not 64 hex characters: {txid:?}"
                    )));
                }
                if *height == 0 || *height > manifest.tip_height {
                    return Err(bad(format!(
                        "scripthash {scripthash}: txid {txid} at height {height}, outside 1..={}",
                        manifest.tip_height
                    )));
                }
                if seen_txids.insert(txid.clone()) {
                    txids.push(txid.clone());
                }
                heights.insert(*height);
                history.push((txid, *height));
            }
            let status = status_hash(history.iter().map(|(t, h)| (t.as_str(), i64::from(*h))));
            if by_scripthash
                .insert(scripthash.clone(), addresses.len())
                .is_some()
            {
                return Err(bad(format!("scripthash {scripthash} is listed twice")));
            }
            addresses.push(ExpectedAddress {
                scripthash,
                history,
                status,
            });
        }
        Ok(Expected {
            addresses,
            block_hashes,
            txids,
            heights: heights.into_iter().collect(),
            by_scripthash,
        })
    }

    /// Returns the address with this script hash, if it is the wallet's.
    pub fn address(&self, scripthash: &str) -> Option<&ExpectedAddress> {
        self.by_scripthash
            .get(&scripthash.to_ascii_lowercase())
            .map(|&i| &self.addresses[i])
    }

    /// Returns the number of history entries over all addresses.
    pub fn history_entries(&self) -> usize {
        self.addresses.iter().map(|a| a.history.len()).sum()
    }

    /// Checks the result of `blockchain.headers.subscribe`: the server's tip
    /// must be the manifest's, or every later answer is about another chain.
    ///
    /// # Errors
    /// When the tip's height or header differs.
    /// The height of the manifest's tip.
    pub fn tip_height(&self) -> u32 {
        (self.block_hashes.len() - 1) as u32
    }

    pub fn check_tip(&self, result: &Value) -> Result<(), Wrong> {
        let subject = "the chain tip";
        let tip_height = self.block_hashes.len() - 1;
        let height = result.get("height").and_then(Value::as_u64);
        let header = result.get("hex").and_then(Value::as_str);
        let (Some(height), Some(header)) = (height, header) else {
            return Err(Wrong::new(
                subject,
                format!(
                    "expected {{height, hex}}, got {}",
                    excerpt(&result.to_string(), EXCERPT_CHARS)
                ),
            ));
        };
        if height != tip_height as u64 {
            return Err(Wrong::new(
                subject,
                format!(
                    "server tip is height {height}, the manifest's tip is height {tip_height} \
                     (server still syncing, or fed another chain)"
                ),
            ));
        }
        self.check_header_hex(tip_height as u32, header)
    }

    /// Checks the status returned by `blockchain.scripthash.subscribe`.
    ///
    /// # Errors
    /// When the status differs from the hash of the manifest's history.
    pub fn check_status(&self, address: &ExpectedAddress, result: &Value) -> Result<(), Wrong> {
        let subject = format!("scripthash {}", address.scripthash);
        let got = match result {
            Value::Null => None,
            Value::String(s) => Some(s.to_ascii_lowercase()),
            other => {
                return Err(Wrong::new(
                    subject,
                    format!(
                        "status is neither a hex string nor null: {}",
                        excerpt(&other.to_string(), EXCERPT_CHARS)
                    ),
                ))
            }
        };
        if got == address.status {
            return Ok(());
        }
        let n = address.history.len();
        let detail = match (&got, &address.status) {
            (None, Some(expected)) => {
                format!("status null (no history), expected {expected} for {n} history entries")
            }
            (Some(got), None) => {
                format!("status {got}, expected null: the manifest has no history for it")
            }
            (Some(got), Some(expected)) => {
                format!("status {got}, expected {expected} (the hash of {n} history entries)")
            }
            (None, None) => unreachable!("equal statuses returned above"),
        };
        Err(Wrong::new(subject, detail))
    }

    /// Checks the result of `blockchain.scripthash.get_history` and returns
    /// its `(txid, height)` entries.
    ///
    /// # Errors
    /// When the history differs from the manifest's; a mempool entry is a
    /// difference, as the bench's chain has an empty mempool.
    pub fn check_history(
        &self,
        address: &ExpectedAddress,
        result: &Value,
    ) -> Result<Vec<(String, i64)>, Wrong> {
        let subject = format!("scripthash {}", address.scripthash);
        let got = parse_history(result).map_err(|detail| Wrong::new(subject.clone(), detail))?;
        if let Some((i, (txid, height))) = got.iter().enumerate().find(|(_, (_, h))| *h <= 0) {
            return Err(Wrong::new(
                subject,
                format!(
                    "entry {i} ({txid}, height {height}) is a mempool entry; \
                     a bench needs an empty mempool (and the manifest has none)"
                ),
            ));
        }
        if let Some(detail) = diff_history(&got, &address.history) {
            return Err(Wrong::new(subject, detail));
        }
        Ok(got)
    }

    /// Checks the result of `blockchain.transaction.get` (non-verbose).
    ///
    /// # Errors
    /// When the result is not the hex of a transaction with this txid.
    pub fn check_transaction(&self, txid: &str, result: &Value) -> Result<(), Wrong> {
        let subject = format!("txid {txid}");
        let raw = decode_hex_result(result).map_err(|d| Wrong::new(subject.clone(), d))?;
        let tx: bitcoin::Transaction = bitcoin::consensus::deserialize(&raw).map_err(|e| {
            Wrong::new(
                subject.clone(),
                format!(
                    "{} bytes that do not decode as a transaction: {e}",
                    raw.len()
                ),
            )
        })?;
        let got = tx.compute_txid().to_string();
        if !got.eq_ignore_ascii_case(txid) {
            return Err(Wrong::new(
                subject,
                format!("returned transaction {got}, not the one asked for"),
            ));
        }
        Ok(())
    }

    /// Checks the result of `blockchain.block.header` (no checkpoint).
    ///
    /// # Errors
    /// When the result is not an 80-byte header hashing to the manifest's
    /// block hash at `height`.
    pub fn check_header(&self, height: u32, result: &Value) -> Result<(), Wrong> {
        let Some(hex_str) = result.as_str() else {
            return Err(Wrong::new(
                format!("height {height}"),
                format!(
                    "header is not a hex string: {}",
                    excerpt(&result.to_string(), EXCERPT_CHARS)
                ),
            ));
        };
        self.check_header_hex(height, hex_str)
    }

    fn check_header_hex(&self, height: u32, hex_str: &str) -> Result<(), Wrong> {
        let subject = format!("height {height}");
        let raw = hex::decode(hex_str).map_err(|e| {
            Wrong::new(
                subject.clone(),
                format!(
                    "header is not hex ({e}): {}",
                    excerpt(hex_str, EXCERPT_CHARS)
                ),
            )
        })?;
        if raw.len() != 80 {
            return Err(Wrong::new(
                subject,
                format!("header is {} bytes, expected 80", raw.len()),
            ));
        }
        let header: bitcoin::block::Header = bitcoin::consensus::deserialize(&raw)
            .map_err(|e| Wrong::new(subject.clone(), format!("header does not decode: {e}")))?;
        let got = header.block_hash().to_string();
        let Some(expected) = self.block_hashes.get(height as usize) else {
            return Err(Wrong::new(subject, "height is past the manifest's tip"));
        };
        if &got != expected {
            return Err(Wrong::new(
                subject,
                format!(
                    "header hashes to {got}, the manifest's block at this height is {expected}"
                ),
            ));
        }
        Ok(())
    }

    /// Checks a notification received during a run: on a still chain none
    /// should change anything, so a new tip or a changed status is wrong.
    ///
    /// # Errors
    /// When the notification announces a change. Returns the method with it.
    pub fn check_notification(&self, notification: &Value) -> Result<(), (String, Wrong)> {
        let method = notification
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let params = notification.get("params").cloned().unwrap_or(Value::Null);
        match method.as_str() {
            "blockchain.scripthash.subscribe" => {
                let scripthash = params.get(0).and_then(Value::as_str).unwrap_or("");
                let status = params.get(1).cloned().unwrap_or(Value::Null);
                match self.address(scripthash) {
                    Some(address) => self
                        .check_status(address, &status)
                        .map_err(|w| (method.clone(), Wrong::new(w.subject, format!("notification: {}", w.detail)))),
                    None => Err((
                        method.clone(),
                        Wrong::new(
                            format!("scripthash {}", excerpt(scripthash, 80)),
                            "notification for a script hash this session never subscribed",
                        ),
                    )),
                }
            }
            "blockchain.headers.subscribe" => Err((
                method.clone(),
                Wrong::new(
                    "the chain tip",
                    format!(
                        "notification of a new tip during the bench ({}): the chain must stay still",
                        excerpt(&params.to_string(), EXCERPT_CHARS)
                    ),
                ),
            )),
            // Other notifications (none are defined today) say nothing about
            // the answers under test.
            _ => Ok(()),
        }
    }
}

/// Parses a `get_history` result into `(txid, height)` pairs.
fn parse_history(result: &Value) -> Result<Vec<(String, i64)>, String> {
    let Some(entries) = result.as_array() else {
        return Err(format!(
            "history is not an array: {}",
            excerpt(&result.to_string(), EXCERPT_CHARS)
        ));
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let txid = entry.get("tx_hash").and_then(Value::as_str);
            let height = entry.get("height").and_then(Value::as_i64);
            match (txid, height) {
                (Some(txid), Some(height)) => Ok((txid.to_ascii_lowercase(), height)),
                _ => Err(format!(
                    "entry {i} is not {{tx_hash, height}}: {}",
                    excerpt(&entry.to_string(), EXCERPT_CHARS)
                )),
            }
        })
        .collect()
}

/// Describes the first difference between a server's history and the
/// manifest's, or returns `None` when they are equal.
fn diff_history(got: &[(String, i64)], expected: &[(String, u32)]) -> Option<String> {
    let show = |(txid, height): (&str, i64)| format!("({txid}, height {height})");
    for (i, pair) in got.iter().zip(expected).enumerate() {
        let ((got_txid, got_height), (exp_txid, exp_height)) = pair;
        if got_txid != exp_txid || *got_height != i64::from(*exp_height) {
            return Some(format!(
                "entry {i} is {}, expected {}",
                show((got_txid, *got_height)),
                show((exp_txid, i64::from(*exp_height)))
            ));
        }
    }
    match got.len().cmp(&expected.len()) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => {
            let (txid, height) = &got[expected.len()];
            Some(format!(
                "{} entries, expected {}; first extra entry {}",
                got.len(),
                expected.len(),
                show((txid, *height))
            ))
        }
        std::cmp::Ordering::Less => {
            let (txid, height) = &expected[got.len()];
            Some(format!(
                "{} entries, expected {}; first missing entry {}",
                got.len(),
                expected.len(),
                show((txid, i64::from(*height)))
            ))
        }
    }
}

fn decode_hex_result(result: &Value) -> Result<Vec<u8>, String> {
    let Some(text) = result.as_str() else {
        return Err(format!(
            "result is not a hex string: {}",
            excerpt(&result.to_string(), EXCERPT_CHARS)
        ));
    };
    hex::decode(text)
        .map_err(|e| format!("result is not hex ({e}): {}", excerpt(text, EXCERPT_CHARS)))
}

fn is_hash_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Lets callers turn a `check_*` failure into a [`BenchError`] in one call.
pub trait WrongExt<T> {
    fn named(self, server: &str, method: &str) -> Result<T, BenchError>;
}

impl<T> WrongExt<T> for Result<T, Wrong> {
    fn named(self, server: &str, method: &str) -> Result<T, BenchError> {
        self.map_err(|w| w.into_error(server, method))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "Status Example" of the Electrum protocol-basics.
    #[test]
    fn status_hash_matches_spec_example() {
        let history = [
            (
                "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347",
                2472,
            ),
            (
                "9c42f84b2fcdaff676ba25d9d4941741cc0d1a01cce0c23fdc4c0b2afa38431c",
                2473,
            ),
            (
                "770f2d4371b3fabb902dd9a103e2dd005fcd3971181078fca4a2a1d6ff127b30",
                2473,
            ),
            (
                "80b19848aed792565ab7c5a79b7c2a00fbf985741579396ebe0ab6098e607311",
                0,
            ),
            (
                "e02a1dadfa83b996b24175df807b271ea5d02937ef5b35c195fac1e1bdc3198f",
                0,
            ),
            (
                "bb4c8ab438c13b89ca80d1d5bee25b0b6b7f55673f4d801998ba97db161d9e85",
                -1,
            ),
        ];
        assert_eq!(
            status_hash(history).as_deref(),
            Some("78e96c6562cafa71c115503b9411fdfdc595a45031e2ab76ff75162fe1b0590d")
        );
        // Order matters, and the empty history is null.
        let mut swapped = history;
        swapped.swap(1, 2);
        assert_ne!(
            status_hash(swapped).as_deref(),
            Some("78e96c6562cafa71c115503b9411fdfdc595a45031e2ab76ff75162fe1b0590d")
        );
        assert_eq!(status_hash(std::iter::empty()), None);
    }

    #[test]
    fn diff_history_names_the_first_difference() {
        let a = "aa".repeat(32);
        let b = "bb".repeat(32);
        let expected = vec![(a.clone(), 5), (b.clone(), 7)];
        assert_eq!(
            diff_history(&[(a.clone(), 5), (b.clone(), 7)], &expected),
            None
        );
        let wrong_height = diff_history(&[(a.clone(), 5), (b.clone(), 6)], &expected).unwrap();
        assert!(wrong_height.contains("entry 1"), "{wrong_height}");
        assert!(
            wrong_height.contains(&format!("({b}, height 6), expected ({b}, height 7)")),
            "{wrong_height}"
        );
        let missing = diff_history(&[(a.clone(), 5)], &expected).unwrap();
        assert!(missing.contains("first missing entry"), "{missing}");
        let extra = diff_history(&[(a.clone(), 5), (b.clone(), 7), (a, 8)], &expected).unwrap();
        assert!(extra.contains("first extra entry"), "{extra}");
    }

    #[test]
    fn parse_history_rejects_malformed_entries() {
        assert!(parse_history(&serde_json::json!({"tx_hash": "x"})).is_err());
        let err =
            parse_history(&serde_json::json!([{"tx_hash": "ab", "height": "5"}])).unwrap_err();
        assert!(err.contains("entry 0"), "{err}");
        let ok =
            parse_history(&serde_json::json!([{"tx_hash": "AB", "height": 5, "fee": 1}])).unwrap();
        assert_eq!(ok, vec![("ab".to_owned(), 5)]);
    }
}
