//! The `blockchain.silentpayments.*` family: BIP-352 silent payments as
//! Frigate serves them and Sparrow speaks them (docs/silent-payments.md,
//! section 1). Here: the parameters and every error of 1.2, the
//! subscription's text (the result, repeated byte for byte by every
//! notification) and the notifications' text (1.3). The scans and the
//! notifications' timing belong to `osprey-server`.
//!
//! The scan key is a third party's secret: no message, log line or `Debug`
//! output here ever shows it.

use crate::error::RpcError;
use crate::jsonrpc::Params;
use crate::params::ParamReader;
use crate::session::SessionState;
use bitcoin::secp256k1::{PublicKey, SecretKey};
use osprey_answers::{Backend, SpMatch};
use osprey_core::Height;
use osprey_sp::ScanKeys;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

pub const SP_SUBSCRIBE: &str = "blockchain.silentpayments.subscribe";
pub const SP_UNSUBSCRIBE: &str = "blockchain.silentpayments.unsubscribe";

/// Parameter names, in order (by-name calls use them).
const SUBSCRIBE_PARAMS: &[&str] = &["scan_private_key", "spend_public_key", "start", "labels"];
const UNSUBSCRIBE_PARAMS: &[&str] = &["scan_private_key", "spend_public_key"];

/// A `start` from here on is a Unix time, not a height: nLockTime's
/// convention, which Sparrow's own comparison follows (`>=`; Frigate's is
/// `>`, and no block will reach this height).
pub const TIME_THRESHOLD: u64 = 500_000_000;

const SCAN_KEY_ERROR: &str = "scan_private_key must be a 32-byte secret key in hex";
const SPEND_KEY_ERROR: &str = "spend_public_key must be a compressed public key in hex";
const START_ERROR: &str = "start must be a height, a Unix time or \"FROM-TO\"";
const LABELS_ERROR: &str = "labels must be integers from 0 to 4294967295";
/// A range string longer than this is not repeated in an error whole.
const RANGE_ECHO_MAX: usize = 24;

/// What the family needs of the server's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SilentPaymentsConfig {
    /// Picks the addresses' prefix: `sp`, `tsp` or `sprt`.
    pub network: bitcoin::Network,
    /// Labels one subscription may scan besides the change label
    /// (`sp_labels_max`; Frigate's `maxLabels` is 10).
    pub labels_max: usize,
    /// Addresses one connection may subscribe
    /// (`sp_subscriptions_per_session_max`).
    pub subscriptions_per_session_max: usize,
}

/// Whether `method` is one of this family's.
pub fn is_method(method: &str) -> bool {
    method == SP_SUBSCRIBE || method == SP_UNSUBSCRIBE
}

/// The error of both methods on a server without the index (-32601).
pub fn not_served(method: &str) -> RpcError {
    RpcError::MethodUnavailable {
        method: method.to_string(),
        why: "this server keeps no silent payments index".into(),
    }
}

/// The keys that name a silent-payment address: `b_scan` and `B_spend`.
/// `Debug` shows the spend key only; the scan key is erased (best effort)
/// when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct SpKeys {
    scan_secret: SecretKey,
    spend_public: PublicKey,
}

impl Drop for SpKeys {
    fn drop(&mut self) {
        self.scan_secret.non_secure_erase();
    }
}

impl fmt::Debug for SpKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpKeys")
            .field("scan_private_key", &"(not shown)")
            .field("spend_public_key", &self.spend_public.to_string())
            .finish()
    }
}

impl SpKeys {
    /// The keys a subscription scans with: these and `labels` (the change
    /// label is always added).
    ///
    /// # Errors
    /// `InvalidParams` in the 2^-128 case that a label's tweak is invalid.
    pub fn scan_keys(&self, labels: &[u32]) -> Result<ScanKeys, RpcError> {
        ScanKeys::new(self.scan_secret, self.spend_public, labels.iter().copied())
            .map_err(|_| RpcError::InvalidParams(SCAN_KEY_ERROR.into()))
    }
}

/// Where a subscription's historical scan starts, as the client said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpStart {
    /// From this height to the tip.
    Height(Height),
    /// From the height this Unix time resolves to (1.2.1) to the tip.
    Time(u64),
    /// `"FROM-TO"`: these heights, both included (`from <= to`).
    Range { from: Height, to: Height },
}

/// `blockchain.silentpayments.subscribe`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpSubscribeRequest {
    pub keys: SpKeys,
    pub start: SpStart,
    /// The labels asked for besides the change label: ascending, without
    /// duplicates or 0.
    pub labels: Vec<u32>,
    /// Whether the parameters came by name: the notifications then do too.
    pub named: bool,
}

/// Parses `blockchain.silentpayments.subscribe`'s parameters.
///
/// # Errors
/// `InvalidParams` with 1.2's messages.
pub fn parse_subscribe(params: &Params) -> Result<SpSubscribeRequest, RpcError> {
    let p = ParamReader::new(SUBSCRIBE_PARAMS, params, false)?;
    Ok(SpSubscribeRequest {
        keys: keys(&p)?,
        start: start(p.opt_value(2))?,
        labels: labels(p.opt_value(3))?,
        named: matches!(params, Params::Named(_)),
    })
}

/// Parses `blockchain.silentpayments.unsubscribe`'s parameters.
///
/// # Errors
/// `InvalidParams` with 1.2's messages for the keys.
pub fn parse_unsubscribe(params: &Params) -> Result<SpKeys, RpcError> {
    keys(&ParamReader::new(UNSUBSCRIBE_PARAMS, params, false)?)
}

fn invalid(message: &str) -> RpcError {
    RpcError::InvalidParams(message.to_string())
}

/// `len` hex characters as bytes, or `None`.
fn hex_of_len(value: Option<&Value>, len: usize) -> Option<Vec<u8>> {
    let s = value?.as_str()?;
    if s.len() != len {
        return None;
    }
    hex::decode(s).ok()
}

fn keys(p: &ParamReader) -> Result<SpKeys, RpcError> {
    let scan_secret = hex_of_len(p.opt_value(0), 64)
        .and_then(|bytes| SecretKey::from_slice(&bytes).ok())
        .ok_or_else(|| invalid(SCAN_KEY_ERROR))?;
    // 66 characters and a 02/03 prefix: `from_slice` alone would also take
    // an uncompressed key.
    let spend_public = hex_of_len(p.opt_value(1), 66)
        .filter(|bytes| matches!(bytes[0], 0x02 | 0x03))
        .and_then(|bytes| PublicKey::from_slice(&bytes).ok())
        .ok_or_else(|| invalid(SPEND_KEY_ERROR))?;
    Ok(SpKeys {
        scan_secret,
        spend_public,
    })
}

/// `start`, told apart by JSON type and value (Frigate's
/// `getHeightRange`): absent or null is height 0.
fn start(value: Option<&Value>) -> Result<SpStart, RpcError> {
    match value {
        None => Ok(SpStart::Height(Height(0))),
        // `as_u64` is `None` for negative and fractional numbers.
        Some(Value::Number(n)) => match n.as_u64() {
            Some(time) if time >= TIME_THRESHOLD => Ok(SpStart::Time(time)),
            // Below the threshold, so it fits.
            Some(height) => Ok(SpStart::Height(Height(height as u32))),
            None => Err(invalid(START_ERROR)),
        },
        Some(Value::String(range)) => parse_range(range),
        Some(_) => Err(invalid(START_ERROR)),
    }
}

/// `"FROM-TO"`, two decimal heights with `FROM <= TO` (that `TO` is not
/// above the tip is checked when the subscription is made).
fn parse_range(range: &str) -> Result<SpStart, RpcError> {
    let height = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
            .map(Height)
    };
    let bounds = range
        .split_once('-')
        .and_then(|(from, to)| Some((height(from)?, height(to)?)));
    let Some((from, to)) = bounds else {
        let shown: String = range.chars().take(RANGE_ECHO_MAX).collect();
        let more = if shown.len() < range.len() { "..." } else { "" };
        return Err(RpcError::InvalidParams(format!(
            "start range \"{shown}{more}\" must be two decimal heights, \"FROM-TO\""
        )));
    };
    if from > to {
        return Err(RpcError::InvalidParams(format!(
            "start range \"{from}-{to}\": FROM is above TO"
        )));
    }
    Ok(SpStart::Range { from, to })
}

/// `labels`: integers from 0 to 2^32 − 1 (BIP-352's `ser32(m)`); 0 and
/// duplicates are dropped (the change label is always scanned).
fn labels(value: Option<&Value>) -> Result<Vec<u32>, RpcError> {
    let items = match value {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(invalid(LABELS_ERROR)),
    };
    let mut labels = items
        .iter()
        .map(|item| {
            item.as_u64()
                .and_then(|m| u32::try_from(m).ok())
                .ok_or_else(|| invalid(LABELS_ERROR))
        })
        .collect::<Result<Vec<u32>, RpcError>>()?;
    labels.sort_unstable();
    labels.dedup();
    labels.retain(|&m| m != 0);
    Ok(labels)
}

/// Makes the subscription `request` asks for, recorded in the session
/// (which answers the start height on a subscribe again: coverage is never
/// narrowed).
///
/// # Errors
/// 1.2's: `InvalidParams` for too many labels, a range past the tip or the
/// session's limit; `ServerBusy` when the client memory budget is spent.
pub fn subscribe(
    backend: &dyn Backend,
    config: &SilentPaymentsConfig,
    state: &mut SessionState,
    request: SpSubscribeRequest,
) -> Result<SpSubscription, RpcError> {
    if request.labels.len() > config.labels_max {
        return Err(RpcError::InvalidParams(format!(
            "at most {} labels",
            config.labels_max
        )));
    }
    let (tip, _) = backend.tip();
    let (start, end) = scan_range(request.start, tip, |time| backend.sp_height_at(time))?;
    let keys = request.keys.scan_keys(&request.labels)?;
    let address = keys.address(config.network);
    let start = state.subscribe_silent(&address, start, config.subscriptions_per_session_max)?;
    Ok(SpSubscription::new(
        keys,
        address,
        (start, end),
        tip,
        request.named,
    ))
}

/// Forgets the session's subscription to the address of `keys`, if any;
/// returns the address (the answer either way, as Frigate's) and whether
/// there was one.
///
/// # Errors
/// `InvalidParams` in the 2^-128 case that the keys derive no address.
pub fn unsubscribe(
    config: &SilentPaymentsConfig,
    state: &mut SessionState,
    keys: &SpKeys,
) -> Result<(String, bool), RpcError> {
    let address = keys.scan_keys(&[])?.address(config.network);
    let removed = state.unsubscribe_silent(&address);
    Ok((address, removed))
}

/// The heights a subscription's historical scan covers: `start` resolved
/// (a time through `height_at`) to `tip`, or the range, whose end must
/// not be above `tip`.
///
/// # Errors
/// `InvalidParams` for a range ending above the tip.
pub fn scan_range(
    start: SpStart,
    tip: Height,
    height_at: impl FnOnce(u64) -> Height,
) -> Result<(Height, Height), RpcError> {
    match start {
        SpStart::Height(height) => Ok((height, tip)),
        SpStart::Time(time) => Ok((height_at(time), tip)),
        SpStart::Range { from, to } if to > tip => Err(RpcError::InvalidParams(format!(
            "start range \"{from}-{to}\": TO is above the tip ({tip})"
        ))),
        SpStart::Range { from, to } => Ok((from, to)),
    }
}

/// A subscription as its subscribe answered it: what the server's scans
/// need, and the text every notification repeats.
#[derive(Clone)]
pub struct SpSubscription {
    /// Shared with the scan that uses them, and nowhere else: when the
    /// subscription goes, so do they.
    pub keys: Arc<ScanKeys>,
    pub address: String,
    /// The historical scan's first and last heights; live updates follow
    /// from the last.
    pub start_height: Height,
    pub end_height: Height,
    /// The tip when subscribed: live updates cover the blocks after it
    /// (and after `end_height`). A range's end does not stop them, nor do
    /// they fill in the blocks between it and this tip (Frigate's).
    pub tip_height: Height,
    /// `{"address":...,"labels":[...],"start_height":...}`, exactly.
    pub text: Arc<str>,
    /// Whether notifications name their parameters (the subscribe did).
    pub named: bool,
}

impl fmt::Debug for SpSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpSubscription")
            .field("text", &self.text)
            .field("end_height", &self.end_height)
            .field("named", &self.named)
            .finish()
    }
}

/// Two subscriptions are equal when they say the same to the client (the
/// address stands for the public keys; the secret is never compared).
impl PartialEq for SpSubscription {
    fn eq(&self, other: &Self) -> bool {
        (&self.text, self.end_height, self.tip_height, self.named)
            == (&other.text, other.end_height, other.tip_height, other.named)
    }
}

impl SpSubscription {
    /// The subscription of `keys` at `address`, scanning `start..=end`.
    pub fn new(
        keys: ScanKeys,
        address: String,
        (start_height, end_height): (Height, Height),
        tip_height: Height,
        named: bool,
    ) -> SpSubscription {
        let labels: Vec<u32> = keys.labels().collect();
        let text = subscription_text(&address, &labels, start_height);
        SpSubscription {
            keys: Arc::new(keys),
            address,
            start_height,
            end_height,
            tip_height,
            text: text.into(),
            named,
        }
    }

    /// A notification: this subscription, `progress` (0.0 to 1.0) and
    /// `history`, positional or named as the subscribe was.
    pub fn notification(&self, progress: f64, history: &[SpMatch]) -> String {
        let progress = Value::from(progress.clamp(0.0, 1.0));
        let history = history_text(history);
        let params = if self.named {
            format!(
                "{{\"subscription\":{},\"progress\":{progress},\"history\":{history}}}",
                self.text
            )
        } else {
            format!("[{},{progress},{history}]", self.text)
        };
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"{SP_SUBSCRIBE}\",\"params\":{params}}}")
    }
}

/// The result of a subscribe: exactly `address`, `labels` (ascending, 0
/// first) and `start_height`, in that order (Sparrow's
/// `SilentPaymentsSubscription` binds no other key).
fn subscription_text(address: &str, labels: &[u32], start_height: Height) -> String {
    let labels = Value::from(labels.to_vec());
    let address = Value::from(address);
    format!(
        "{{\"address\":{address},\"labels\":{labels},\"start_height\":{}}}",
        start_height.0
    )
}

/// `[{"height":..,"tx_hash":..,"tweak_key":..}, ...]`: exactly these keys
/// (Sparrow's `SilentPaymentsTx`).
fn history_text(history: &[SpMatch]) -> String {
    let entries: Vec<String> = history
        .iter()
        .map(|m| {
            format!(
                "{{\"height\":{},\"tx_hash\":\"{}\",\"tweak_key\":\"{}\"}}",
                m.height,
                m.txid,
                hex::encode(m.tweak_key)
            )
        })
        .collect();
    format!("[{}]", entries.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;
    use bitcoin::Txid;

    fn subscription(named: bool) -> SpSubscription {
        let mut scan = [0u8; 32];
        scan[31] = 1;
        let keys = SpKeys {
            scan_secret: SecretKey::from_slice(&scan).unwrap(),
            spend_public: "0220bcfac5b99e04ad1a06ddfb016ee13582609d60b6291e98d01a9bc9a16c96d4"
                .parse()
                .unwrap(),
        };
        let keys = keys.scan_keys(&[5]).unwrap();
        let address = keys.address(bitcoin::Network::Bitcoin);
        SpSubscription::new(
            keys,
            address,
            (Height(882_000), Height(890_000)),
            Height(890_000),
            named,
        )
    }

    fn history() -> Vec<SpMatch> {
        vec![
            SpMatch {
                height: 890_004,
                txid: Txid::from_byte_array([0xac; 32]),
                tweak_key: [0x03; 33],
            },
            SpMatch {
                height: 0,
                txid: Txid::from_byte_array([0xf4; 32]),
                tweak_key: [0x02; 33],
            },
        ]
    }

    fn keys_of(value: &Value) -> Vec<&str> {
        value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect()
    }

    /// Positional after a positional subscribe: `[subscription, progress,
    /// history]`, the subscription byte for byte the result's text, each
    /// entry exactly `height`, `tx_hash`, `tweak_key`.
    #[test]
    fn positional_notifications_repeat_the_subscription() {
        let subscription = subscription(false);
        let line = subscription.notification(1.0, &history());
        let prefix = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"{SP_SUBSCRIBE}\",\"params\":[{},1.0,[",
            subscription.text
        );
        assert!(line.starts_with(&prefix), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(keys_of(&v), ["jsonrpc", "method", "params"]);
        let params = v["params"].as_array().unwrap();
        assert_eq!(params.len(), 3);
        assert_eq!(keys_of(&params[0]), ["address", "labels", "start_height"]);
        assert!(params[0]["address"].as_str().unwrap().starts_with("sp1q"));
        assert_eq!(params[0]["labels"], serde_json::json!([0, 5]));
        assert_eq!(params[0]["start_height"], 882_000);
        let entries = params[2].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        for entry in entries {
            let mut keys = keys_of(entry);
            keys.sort_unstable();
            assert_eq!(keys, ["height", "tweak_key", "tx_hash"]);
            assert_eq!(entry["tweak_key"].as_str().unwrap().len(), 66);
        }
        let first = format!(
            "{{\"height\":890004,\"tx_hash\":\"{}\",\"tweak_key\":\"{}\"}}",
            "ac".repeat(32),
            "03".repeat(33)
        );
        assert!(line.contains(&first), "{line}");
        assert_eq!(entries[0]["height"], 890_004);
        assert_eq!(entries[0]["tx_hash"], "ac".repeat(32));
        assert_eq!(entries[1]["height"], 0);
        assert_eq!(entries[1]["tweak_key"], "02".repeat(33));
    }

    /// Named after a named subscribe: exactly `subscription`, `progress`
    /// and `history`; progress is a number from 0 to 1.
    #[test]
    fn named_notifications_name_their_three_parameters() {
        let subscription = subscription(true);
        let line = subscription.notification(0.25, &[]);
        assert!(
            line.contains(&format!(
                "\"params\":{{\"subscription\":{},\"progress\":0.25,\"history\":[]}}",
                subscription.text
            )),
            "{line}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        let mut keys = keys_of(&v["params"]);
        keys.sort_unstable();
        assert_eq!(keys, ["history", "progress", "subscription"]);
        let over = subscription.notification(7.0, &[]);
        assert!(over.contains("\"progress\":1.0"), "{over}");
    }
}
