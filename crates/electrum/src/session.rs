//! Per-session protocol state: the negotiated version and the session's own
//! subscriptions. Enforces the negotiation rules (only the first
//! `server.version` is accepted; in 1.6 it must be the first message; a
//! session that never sends it speaks 1.4) and the per-session subscription
//! limit. Knows nothing of sockets or of other sessions.

use crate::error::RpcError;
use crate::request::{ScriptForm, ScriptKey};
use crate::version::{self, ProtocolVersion};
use bitcoin::OutPoint;
use osprey_core::ScriptHash;
use std::collections::{HashMap, HashSet};

/// The protocol state of one client connection.
#[derive(Debug, Default)]
pub struct SessionState {
    negotiated: Option<ProtocolVersion>,
    /// Whether any message other than `server.version` came first; 1.6
    /// requires `server.version` to be the very first message.
    other_message_seen: bool,
    /// Forms under which each script hash is subscribed (a client may use
    /// both `scripthash` and `scriptpubkey` for the same script).
    subscriptions: HashMap<ScriptHash, Vec<ScriptForm>>,
    /// Outpoints subscribed to (1.7 draft).
    outpoints: HashSet<OutPoint>,
    /// Scripts (in each form) and outpoints: what the limit counts.
    subscription_count: usize,
    headers_subscribed: bool,
}

impl SessionState {
    pub fn new() -> Self {
        Self::default()
    }

    /// The version this session speaks: the negotiated one, else 1.4.
    pub fn protocol(&self) -> ProtocolVersion {
        self.negotiated.unwrap_or(ProtocolVersion::DEFAULT)
    }

    pub fn negotiated(&self) -> Option<ProtocolVersion> {
        self.negotiated
    }

    /// Records that a message other than `server.version` arrived.
    pub fn note_other_message(&mut self) {
        self.other_message_seen = true;
    }

    /// Applies `server.version`, returning the version to speak from now on.
    ///
    /// # Errors
    /// `BadRequest` if a version was already negotiated, or if there is no
    /// version in common (the caller must then close the connection).
    pub fn negotiate(
        &mut self,
        client_min: ProtocolVersion,
        client_max: ProtocolVersion,
    ) -> Result<ProtocolVersion, RpcError> {
        if self.negotiated.is_some() {
            return Err(RpcError::BadRequest("server.version already sent".into()));
        }
        let Some(chosen) = version::negotiate(client_min, client_max, !self.other_message_seen)
        else {
            let why = if self.other_message_seen && client_max >= ProtocolVersion::V1_6 {
                " (1.6 requires server.version to be the first message)"
            } else {
                ""
            };
            return Err(RpcError::BadRequest(format!(
                "unsupported protocol version: [{client_min}, {client_max}]; this server speaks \
                 {} to {}{why}",
                ProtocolVersion::MIN,
                ProtocolVersion::MAX
            )));
        };
        self.negotiated = Some(chosen);
        Ok(chosen)
    }

    /// Records a subscription, returning whether it is new.
    ///
    /// # Errors
    /// `LimitExceeded` when a new subscription would pass `max`.
    pub fn subscribe(&mut self, key: &ScriptKey, max: usize) -> Result<bool, RpcError> {
        if self.is_subscribed(key) {
            return Ok(false);
        }
        if self.subscription_count >= max {
            return Err(RpcError::LimitExceeded(format!(
                "subscription limit of {max} per session reached"
            )));
        }
        self.subscriptions
            .entry(key.scripthash)
            .or_default()
            .push(key.form.clone());
        self.subscription_count += 1;
        Ok(true)
    }

    /// Removes a subscription, returning whether it existed.
    pub fn unsubscribe(&mut self, key: &ScriptKey) -> bool {
        let Some(forms) = self.subscriptions.get_mut(&key.scripthash) else {
            return false;
        };
        let Some(at) = forms.iter().position(|f| *f == key.form) else {
            return false;
        };
        forms.swap_remove(at);
        if forms.is_empty() {
            self.subscriptions.remove(&key.scripthash);
        }
        self.subscription_count -= 1;
        true
    }

    /// Records an outpoint subscription, returning whether it is new.
    ///
    /// # Errors
    /// `LimitExceeded` when a new subscription would pass `max` (scripts
    /// and outpoints count alike).
    pub fn subscribe_outpoint(
        &mut self,
        outpoint: &OutPoint,
        max: usize,
    ) -> Result<bool, RpcError> {
        if self.outpoints.contains(outpoint) {
            return Ok(false);
        }
        if self.subscription_count >= max {
            return Err(RpcError::LimitExceeded(format!(
                "subscription limit of {max} per session reached"
            )));
        }
        self.outpoints.insert(*outpoint);
        self.subscription_count += 1;
        Ok(true)
    }

    /// Removes an outpoint subscription, returning whether it existed.
    pub fn unsubscribe_outpoint(&mut self, outpoint: &OutPoint) -> bool {
        let removed = self.outpoints.remove(outpoint);
        if removed {
            self.subscription_count -= 1;
        }
        removed
    }

    pub fn is_subscribed(&self, key: &ScriptKey) -> bool {
        self.subscriptions
            .get(&key.scripthash)
            .is_some_and(|forms| forms.contains(&key.form))
    }

    pub fn subscription_count(&self) -> usize {
        self.subscription_count
    }

    pub fn subscribe_headers(&mut self) {
        self.headers_subscribed = true;
    }

    pub fn headers_subscribed(&self) -> bool {
        self.headers_subscribed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ProtocolVersion {
        s.parse().unwrap()
    }

    fn key(byte: u8, spk: bool) -> ScriptKey {
        let form = if spk {
            ScriptForm::ScriptPubKey(vec![byte].into())
        } else {
            ScriptForm::ScriptHash
        };
        ScriptKey {
            scripthash: ScriptHash([byte; 32]),
            form,
        }
    }

    #[test]
    fn defaults_to_1_4_and_accepts_only_the_first_version() {
        let mut s = SessionState::new();
        assert_eq!(s.protocol(), v("1.4"));
        assert_eq!(s.negotiate(v("1.4"), v("1.6")).unwrap(), v("1.6"));
        assert_eq!(s.protocol(), v("1.6"));
        let e = s.negotiate(v("1.4"), v("1.4")).unwrap_err();
        assert_eq!(
            e,
            RpcError::BadRequest("server.version already sent".into())
        );
        assert_eq!(
            s.protocol(),
            v("1.6"),
            "a second server.version changes nothing"
        );
    }

    #[test]
    fn version_after_other_messages_cannot_reach_1_6() {
        let mut s = SessionState::new();
        s.note_other_message();
        assert_eq!(s.negotiate(v("1.4"), v("1.6")).unwrap(), v("1.4.2"));
        let mut s = SessionState::new();
        s.note_other_message();
        let e = s.negotiate(v("1.6"), v("1.6")).unwrap_err();
        assert!(e.to_string().contains("first message"), "{e}");
        assert_eq!(s.negotiated(), None);
    }

    #[test]
    fn subscriptions_are_counted_per_form_and_limited() {
        let mut s = SessionState::new();
        assert!(s.subscribe(&key(1, false), 2).unwrap());
        assert!(
            !s.subscribe(&key(1, false), 2).unwrap(),
            "resubscribing is not new"
        );
        assert!(
            s.subscribe(&key(1, true), 2).unwrap(),
            "same script, other form"
        );
        assert_eq!(s.subscription_count(), 2);
        let e = s.subscribe(&key(2, false), 2).unwrap_err();
        assert_eq!(e.code(), -101);
        assert!(s.unsubscribe(&key(1, false)));
        assert!(!s.unsubscribe(&key(1, false)));
        assert!(s.is_subscribed(&key(1, true)));
        assert!(s.subscribe(&key(2, false), 2).unwrap());
        assert_eq!(s.subscription_count(), 2);
    }

    #[test]
    fn outpoints_share_the_subscription_limit() {
        use bitcoin::hashes::Hash;
        let outpoint = |vout| OutPoint {
            txid: bitcoin::Txid::from_byte_array([9; 32]),
            vout,
        };
        let mut s = SessionState::new();
        assert!(s.subscribe(&key(1, false), 2).unwrap());
        assert!(s.subscribe_outpoint(&outpoint(0), 2).unwrap());
        assert!(!s.subscribe_outpoint(&outpoint(0), 2).unwrap(), "not new");
        assert_eq!(s.subscription_count(), 2);
        assert_eq!(
            s.subscribe_outpoint(&outpoint(1), 2).unwrap_err().code(),
            -101
        );
        assert_eq!(s.subscribe(&key(2, false), 2).unwrap_err().code(), -101);
        assert!(s.unsubscribe_outpoint(&outpoint(0)));
        assert!(!s.unsubscribe_outpoint(&outpoint(0)));
        assert!(s.subscribe_outpoint(&outpoint(1), 2).unwrap());
    }
}
