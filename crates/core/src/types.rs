//! Newtypes for everything that ends up in a database key or on the wire.

use bitcoin::hashes::{sha256, Hash};
use std::fmt;
use std::str::FromStr;

/// A block height. Heights index the headers file and the tx-count table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Height(pub u32);

impl Height {
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Height {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A transaction's position in the chain: 0 is the genesis coinbase, and
/// tx_num order is blockchain order. Keys store it as 5 big-endian bytes, so
/// byte order equals chain order and 2^40 transactions fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxNum(pub u64);

impl TxNum {
    /// Bytes used for a tx_num inside keys and values.
    pub const LEN: usize = 5;
    pub const MAX: u64 = (1 << 40) - 1;

    pub fn to_bytes(self) -> [u8; Self::LEN] {
        assert!(self.0 <= Self::MAX, "tx_num {} exceeds 40 bits", self.0);
        let b = self.0.to_be_bytes();
        [b[3], b[4], b[5], b[6], b[7]]
    }

    pub fn from_bytes(b: [u8; Self::LEN]) -> TxNum {
        TxNum(u64::from_be_bytes([0, 0, 0, b[0], b[1], b[2], b[3], b[4]]))
    }
}

impl fmt::Display for TxNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The SHA-256 of a locking script (scriptPubKey), as defined by the Electrum
/// protocol ("Script Hashes" in protocol-basics). Stored in hash byte order;
/// shown and parsed as hex with the bytes reversed, like txids.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScriptHash(pub [u8; 32]);

impl ScriptHash {
    pub fn from_script(script: &[u8]) -> ScriptHash {
        ScriptHash(sha256::Hash::hash(script).to_byte_array())
    }
}

impl fmt::Display for ScriptHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rev = self.0;
        rev.reverse();
        f.write_str(&crate::to_hex(&rev))
    }
}

impl fmt::Debug for ScriptHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScriptHash({self})")
    }
}

/// Why a client-supplied hash could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseHashError {
    #[error("expected 64 hex characters, got {0}")]
    Length(usize),
    #[error("invalid hex: {0}")]
    Hex(String),
}

/// Parses 64 hex digits (either case) into 32 bytes in reverse order, as
/// hashes are shown. Hand-rolled rather than `hex` then a reverse: a wallet
/// sends one per request, and this was a visible part of answering a
/// reconnecting wallet's subscriptions.
fn parse_reversed_hex(s: &str) -> Result<[u8; 32], ParseHashError> {
    let digits = s.as_bytes();
    if digits.len() != 64 {
        return Err(ParseHashError::Length(s.len()));
    }
    let mut bytes = [0u8; 32];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        let (Some(high), Some(low)) = (hex_digit(pair[0]), hex_digit(pair[1])) else {
            let at = 2 * i + usize::from(hex_digit(pair[0]).is_some());
            // The first bad byte starts a character: every byte before it
            // is an ASCII digit.
            let c = s.get(at..).and_then(|rest| rest.chars().next());
            let c = c.unwrap_or(char::REPLACEMENT_CHARACTER);
            return Err(ParseHashError::Hex(format!(
                "invalid character {c:?} at position {at}"
            )));
        };
        bytes[31 - i] = high << 4 | low;
    }
    Ok(bytes)
}

/// The value of each byte as a hex digit; `INVALID` for a non-digit.
const HEX_DIGITS: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};
const INVALID: u8 = 0xff;

fn hex_digit(c: u8) -> Option<u8> {
    let value = HEX_DIGITS[usize::from(c)];
    (value != INVALID).then_some(value)
}

impl FromStr for ScriptHash {
    type Err = ParseHashError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_reversed_hex(s).map(ScriptHash)
    }
}

/// The status of a script hash: SHA-256 of the concatenated
/// `"tx_hash:height:"` strings of its history (see "Status" in the Electrum
/// protocol-basics). Shown as plain (not reversed) hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct StatusHash(pub [u8; 32]);

impl StatusHash {
    /// Returns the status of a history given as `(txid, height)` pairs in
    /// protocol order, or `None` for an empty history.
    pub fn of_history<'a>(
        entries: impl IntoIterator<Item = (&'a bitcoin::Txid, i64)>,
    ) -> Option<StatusHash> {
        let mut engine = sha256::Hash::engine();
        let mut any = false;
        for (txid, height) in entries {
            use bitcoin::hashes::HashEngine;
            engine.input(format!("{txid}:{height}:").as_bytes());
            any = true;
        }
        any.then(|| StatusHash(sha256::Hash::from_engine(engine).to_byte_array()))
    }
}

impl fmt::Display for StatusHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::to_hex(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_num_round_trips_and_sorts_bytewise() {
        for n in [0u64, 1, 255, 256, 1 << 32, TxNum::MAX] {
            assert_eq!(TxNum::from_bytes(TxNum(n).to_bytes()), TxNum(n));
        }
        assert!(TxNum(255).to_bytes() < TxNum(256).to_bytes());
        assert!(TxNum(1 << 32).to_bytes() > TxNum((1 << 32) - 1).to_bytes());
    }

    /// The worked examples of "Script Hashes" in protocol-basics.
    #[test]
    fn script_hash_matches_spec_examples() {
        let p2pkh = hex::decode("76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac").unwrap();
        assert_eq!(
            ScriptHash::from_script(&p2pkh).to_string(),
            "8b01df4e368ea28f8dc0423bcf7a4923e3a12d307c875e47a0cfbf90b5c39161"
        );
        let p2pk = hex::decode(concat!(
            "4104678afdb0fe5548271967f1a67130b7105cd6a828e03909a67962e0ea1f61deb",
            "649f6bc3f4cef38c4f35504e51ec112de5c384df7ba0b8d578a4c702b6bf11d5fac"
        ))
        .unwrap();
        let sh = ScriptHash::from_script(&p2pk);
        assert_eq!(
            sh.to_string(),
            "740485f380ff6379d11ef6fe7d7cdd68aea7f8bd0d953d9fdf3531fb7d531833"
        );
        assert_eq!(sh.to_string().parse::<ScriptHash>().unwrap(), sh);
    }

    #[test]
    fn script_hash_parse_rejects_bad_input() {
        assert_eq!("ab".parse::<ScriptHash>(), Err(ParseHashError::Length(2)));
        assert_eq!(
            "zz".repeat(32).parse::<ScriptHash>(),
            Err(ParseHashError::Hex(
                "invalid character 'z' at position 0".into()
            ))
        );
        // Every position of a digit pair, and a multi-byte character (64
        // bytes long, but not 64 digits).
        for at in 0..64 {
            let mut s = "0".repeat(64);
            s.replace_range(at..=at, "g");
            assert_eq!(
                s.parse::<ScriptHash>(),
                Err(ParseHashError::Hex(format!(
                    "invalid character 'g' at position {at}"
                )))
            );
        }
        let s = format!("é{}", "0".repeat(62));
        assert!(matches!(
            s.parse::<ScriptHash>(),
            Err(ParseHashError::Hex(_))
        ));
    }

    /// Parsing agrees with the `hex` crate, reversed, on every digit in
    /// every position, in both cases.
    #[test]
    fn script_hash_parse_is_reversed_hex() {
        let digits = "0123456789abcdefABCDEF";
        for start in 0..digits.len() {
            let s: String = digits.chars().cycle().skip(start).take(64).collect();
            let mut want = [0u8; 32];
            hex::decode_to_slice(&s, &mut want).unwrap();
            want.reverse();
            assert_eq!(s.parse::<ScriptHash>().unwrap().0, want, "{s}");
        }
    }

    /// The "Status Example" of protocol-basics: three confirmed transactions
    /// (two in one block, in block order), two mempool transactions with
    /// confirmed inputs sorted by txid, then one with an unconfirmed input.
    #[test]
    fn status_hash_matches_spec_example() {
        let history: Vec<(bitcoin::Txid, i64)> = [
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
        ]
        .into_iter()
        .map(|(t, h)| (t.parse().unwrap(), h))
        .collect();
        let status = StatusHash::of_history(history.iter().map(|(t, h)| (t, *h))).unwrap();
        assert_eq!(
            status.to_string(),
            "78e96c6562cafa71c115503b9411fdfdc595a45031e2ab76ff75162fe1b0590d"
        );
        assert_eq!(StatusHash::of_history(std::iter::empty()), None);
    }
}
