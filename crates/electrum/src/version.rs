//! Protocol versions and their negotiation (`server.version`, "Version
//! Negotiation" in protocol-basics). Owns which versions Osprey speaks;
//! knows nothing of sessions or JSON.

use std::fmt;
use std::str::FromStr;

/// An Electrum protocol version such as "1.4" or "1.4.2".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolVersion {
    pub major: u16,
    pub minor: u16,
    pub revision: u16,
}

impl ProtocolVersion {
    pub const fn new(major: u16, minor: u16, revision: u16) -> Self {
        ProtocolVersion {
            major,
            minor,
            revision,
        }
    }

    /// The version a session speaks when it never sent `server.version`.
    pub const DEFAULT: ProtocolVersion = ProtocolVersion::new(1, 4, 0);
    /// From here on `server.version` must be the first message, headers come
    /// as a list, mempool transactions have a canonical order,
    /// `estimatefee` takes a mode, and `mempool.get_info` and
    /// `blockchain.transaction.broadcast_package` exist (the 1.6 released
    /// in spesmilo/electrum-protocol, tag 1.6).
    pub const V1_6: ProtocolVersion = ProtocolVersion::new(1, 6, 0);
    /// 1.7 as merged (spesmilo/electrum-protocol PR #2): the
    /// `blockchain.scripthash.*` methods give way to
    /// `blockchain.scriptpubkey.*`, outpoints can be followed
    /// (`blockchain.outpoint.*`), `server.ping` pads in both directions,
    /// `blockchain.transaction.testmempoolaccept` and `mempool.recent`
    /// exist, and "history too large" has its own code, 10001.
    pub const V1_7: ProtocolVersion = ProtocolVersion::new(1, 7, 0);
    pub const MIN: ProtocolVersion = ProtocolVersion::new(1, 4, 0);

    /// Every version Osprey speaks, lowest first. 1.5 was skipped by the
    /// protocol, so a client asking for "1.5" at most gets 1.4.2.
    pub const SUPPORTED: [ProtocolVersion; 5] = [
        ProtocolVersion::new(1, 4, 0),
        ProtocolVersion::new(1, 4, 1),
        ProtocolVersion::new(1, 4, 2),
        ProtocolVersion::V1_6,
        ProtocolVersion::V1_7,
    ];

    /// The highest version Osprey offers and negotiates (`protocol_max`).
    /// A version is offered only when all of it matches the protocol's
    /// text as merged.
    pub const MAX: ProtocolVersion = ProtocolVersion::V1_7;

    pub fn is_1_6_or_later(self) -> bool {
        self >= ProtocolVersion::V1_6
    }

    pub fn is_1_7_or_later(self) -> bool {
        self >= ProtocolVersion::V1_7
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.revision == 0 {
            write!(f, "{}.{}", self.major, self.minor)
        } else {
            write!(f, "{}.{}.{}", self.major, self.minor, self.revision)
        }
    }
}

/// Why a version string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid protocol version {0:?} (expected a dotted number such as \"1.4\")")]
pub struct ParseVersionError(pub String);

impl FromStr for ProtocolVersion {
    type Err = ParseVersionError;

    /// Parses "a.b" or "a.b.c" (the spec requires at least one dot).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseVersionError(s.to_string());
        let parts: Vec<&str> = s.split('.').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(err());
        }
        let mut nums = [0u16; 3];
        for (num, part) in nums.iter_mut().zip(&parts) {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            *num = part.parse().map_err(|_| err())?;
        }
        Ok(ProtocolVersion::new(nums[0], nums[1], nums[2]))
    }
}

/// Returns the highest supported version that is in the client's range,
/// or `None` when there is none (the server must then close the
/// connection). `allow_1_6` is false when other messages came before
/// `server.version`, which 1.6 forbids (and so every later version), so
/// such a session can only agree on a version below 1.6.
pub fn negotiate(
    client_min: ProtocolVersion,
    client_max: ProtocolVersion,
    allow_1_6: bool,
) -> Option<ProtocolVersion> {
    ProtocolVersion::SUPPORTED
        .iter()
        .rev()
        .copied()
        .filter(|v| allow_1_6 || !v.is_1_6_or_later())
        .find(|v| *v <= client_max && *v >= client_min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ProtocolVersion {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_displays_versions() {
        assert_eq!(v("1.4"), ProtocolVersion::new(1, 4, 0));
        assert_eq!(v("1.4.2").to_string(), "1.4.2");
        assert_eq!(v("1.6").to_string(), "1.6");
        for bad in [
            "1",
            "",
            "1.",
            ".4",
            "1.4.2.1",
            "a.b",
            "1.-4",
            "1. 4",
            "99999999.1",
        ] {
            assert!(bad.parse::<ProtocolVersion>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn negotiates_highest_common_version() {
        assert_eq!(ProtocolVersion::MAX.to_string(), "1.7");
        assert_eq!(
            ProtocolVersion::SUPPORTED.last(),
            Some(&ProtocolVersion::MAX)
        );
        assert_eq!(negotiate(v("1.4"), v("1.6"), true), Some(v("1.6")));
        assert_eq!(negotiate(v("1.4"), v("1.4"), true), Some(v("1.4")));
        // 1.5 does not exist: the best below it is 1.4.2.
        assert_eq!(negotiate(v("1.2"), v("1.5"), true), Some(v("1.4.2")));
        assert_eq!(negotiate(v("1.4"), v("1.7"), true), Some(v("1.7")));
        assert_eq!(negotiate(v("1.4"), v("2.0"), true), Some(v("1.7")));
        assert_eq!(negotiate(v("1.7"), v("2.0"), true), Some(v("1.7")));
        // Nothing in common.
        assert_eq!(negotiate(v("1.0"), v("1.3"), true), None);
        assert_eq!(negotiate(v("1.8"), v("2.0"), true), None);
        assert_eq!(negotiate(v("1.6"), v("1.4"), true), None);
        // After other messages, 1.6 and later are off the table.
        assert_eq!(negotiate(v("1.4"), v("1.6"), false), Some(v("1.4.2")));
        assert_eq!(negotiate(v("1.4"), v("1.7"), false), Some(v("1.4.2")));
        assert_eq!(negotiate(v("1.6"), v("1.6"), false), None);
        assert_eq!(negotiate(v("1.7"), v("1.7"), false), None);
    }
}
