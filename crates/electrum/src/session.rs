//! Per-session protocol state: the negotiated version and the session's own
//! subscriptions. Enforces the negotiation rules (only the first
//! `server.version` is accepted; in 1.6 it must be the first message; a
//! session that never sends it speaks 1.4) and the per-session subscription
//! limit, and charges its subscriptions to the server's memory budget.
//! Knows nothing of sockets or of other sessions.

use crate::error::RpcError;
use crate::script::{ScriptForm, ScriptKey};
use crate::version::{self, ProtocolVersion};
use bitcoin::OutPoint;
use osprey_core::{ByteBudget, Charge, Height, ScriptHash};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

/// The protocol state of one client connection.
#[derive(Debug, Default)]
pub struct SessionState {
    negotiated: Option<ProtocolVersion>,
    /// The client's name from `server.version`, cut to
    /// [`CLIENT_NAME_CHARS_MAX`] characters (for the admin interface).
    client_name: Option<String>,
    /// Whether any message other than `server.version` came first; 1.6
    /// requires `server.version` to be the very first message.
    other_message_seen: bool,
    /// Forms under which each script hash is subscribed: `scripthash` up
    /// to 1.6, `scriptpubkey` from 1.7 on (one session speaks one version,
    /// so one form, but this state does not depend on that).
    subscriptions: HashMap<ScriptHash, Vec<ScriptForm>>,
    /// Outpoints subscribed to (1.7).
    outpoints: HashSet<OutPoint>,
    /// Scripts (in each form) and outpoints: what the limit counts.
    subscription_count: usize,
    /// Silent-payment subscriptions by address, with the start height the
    /// client was last told.
    silent: HashMap<String, Height>,
    /// This session's subscriptions, charged to the server's client memory
    /// budget at [`SUBSCRIPTION_BYTES`] each (none in tests that have no
    /// budget), and what they must leave free of it.
    subscription_charge: Option<(Charge, usize)>,
    headers_subscribed: bool,
    /// The client's address, for `server.add_peer` (a peer must announce
    /// a host at the address it calls from).
    source: Option<IpAddr>,
}

/// What one script subscription costs the server: this session's map entry
/// and the notifier's registry entry. Measured: 400,000 subscriptions
/// raised the server's RSS by ~250 bytes each.
pub const SUBSCRIPTION_BYTES: usize = 256;

/// How much of a client's self-chosen name a session keeps.
pub const CLIENT_NAME_CHARS_MAX: usize = 64;

/// What one silent-payments subscription may hold while it scans
/// (docs/silent-payments.md, 3.6): its keys and up to 11 label points
/// (under 1 KB), a page of 100 entries waiting to be sent (about 20 KB of
/// text), and the records of one scan chunk (at most 256 KiB).
pub const SP_SUBSCRIPTION_BYTES: usize = 288 * 1024;

/// Where subscriptions are charged: the server's client memory budget, of
/// which they leave `keep_free` bytes for requests and replies in flight
/// (held a moment, not for the session's life), so that subscriptions can
/// never stop the server from reading requests and answering them.
#[derive(Debug, Clone)]
pub struct SubscriptionBudget {
    pub budget: Arc<ByteBudget>,
    pub keep_free: usize,
}

impl SessionState {
    pub fn new() -> Self {
        Self::default()
    }

    /// The state of a connection from `source`.
    pub fn from_source(source: IpAddr) -> Self {
        SessionState {
            source: Some(source),
            ..Self::default()
        }
    }

    pub fn source(&self) -> Option<IpAddr> {
        self.source
    }

    /// This session, with its subscriptions charged to `budget`.
    pub fn charged_to(self, budget: &SubscriptionBudget) -> Self {
        SessionState {
            subscription_charge: Some((Charge::new(&budget.budget), budget.keep_free)),
            ..self
        }
    }

    /// The version this session speaks: the negotiated one, else 1.4.
    pub fn protocol(&self) -> ProtocolVersion {
        self.negotiated.unwrap_or(ProtocolVersion::DEFAULT)
    }

    pub fn negotiated(&self) -> Option<ProtocolVersion> {
        self.negotiated
    }

    /// Records the name the client gave in `server.version`.
    pub fn set_client_name(&mut self, name: &str) {
        self.client_name = Some(name.chars().take(CLIENT_NAME_CHARS_MAX).collect());
    }

    /// The name the client gave in `server.version`, if it sent one.
    pub fn client_name(&self) -> Option<&str> {
        self.client_name.as_deref()
    }

    /// Records that a message other than `server.version` arrived.
    pub fn note_other_message(&mut self) {
        self.other_message_seen = true;
    }

    /// Applies `server.version`, returning the version to speak from now on:
    /// the highest both the client and Osprey take.
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
                ProtocolVersion::MAX,
            )));
        };
        self.negotiated = Some(chosen);
        Ok(chosen)
    }

    /// Records a subscription, returning whether it is new.
    ///
    /// # Errors
    /// `LimitExceeded` when a new subscription would pass `max`;
    /// `ServerBusy` when the server's client memory budget is spent.
    pub fn subscribe(&mut self, key: &ScriptKey, max: usize) -> Result<bool, RpcError> {
        if self.is_subscribed(key) {
            return Ok(false);
        }
        if self.subscription_count >= max {
            return Err(RpcError::LimitExceeded(format!(
                "subscription limit of {max} per session reached"
            )));
        }
        self.charge_one_more()?;
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
        self.recharge();
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
        self.charge_one_more()?;
        self.outpoints.insert(*outpoint);
        self.subscription_count += 1;
        Ok(true)
    }

    /// What `scripts` subscriptions (scripts and outpoints) and `silent`
    /// silent-payment ones are charged.
    fn held_bytes(scripts: usize, silent: usize) -> usize {
        scripts * SUBSCRIPTION_BYTES + silent * SP_SUBSCRIPTION_BYTES
    }

    /// Charges the budget for one subscription more than the session holds.
    fn charge_one_more(&mut self) -> Result<(), RpcError> {
        self.charge(Self::held_bytes(
            self.subscription_count + 1,
            self.silent.len(),
        ))
    }

    /// Charges the budget `bytes` for the session's subscriptions.
    fn charge(&mut self, bytes: usize) -> Result<(), RpcError> {
        if let Some((charge, keep_free)) = &mut self.subscription_charge {
            if !charge.resize_keeping_free(bytes, *keep_free) {
                return Err(RpcError::ServerBusy(
                    "the server holds as many subscriptions as its memory budget allows; \
                     try again later"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Gives back the charge of subscriptions the session no longer holds.
    fn recharge(&mut self) {
        let bytes = Self::held_bytes(self.subscription_count, self.silent.len());
        if let Some((charge, _)) = &mut self.subscription_charge {
            charge.resize(bytes);
        }
    }

    /// Records a silent-payments subscription to `address` from `start`,
    /// returning the start height to answer: the lower of `start` and that
    /// of an earlier subscription to the address (coverage is never
    /// narrowed).
    ///
    /// # Errors
    /// `InvalidParams` when a new address would pass `max` (Frigate's
    /// wording and code); `ServerBusy` when the server's client memory
    /// budget is spent.
    pub fn subscribe_silent(
        &mut self,
        address: &str,
        start: Height,
        max: usize,
    ) -> Result<Height, RpcError> {
        if let Some(told) = self.silent.get_mut(address) {
            *told = (*told).min(start);
            return Ok(*told);
        }
        if self.silent.len() >= max {
            return Err(RpcError::InvalidParams(format!(
                "subscription limit reached ({max}) for this connection"
            )));
        }
        self.charge(Self::held_bytes(
            self.subscription_count,
            self.silent.len() + 1,
        ))?;
        self.silent.insert(address.to_string(), start);
        Ok(start)
    }

    /// Forgets a silent-payments subscription, returning whether it existed.
    pub fn unsubscribe_silent(&mut self, address: &str) -> bool {
        let removed = self.silent.remove(address).is_some();
        if removed {
            self.recharge();
        }
        removed
    }

    pub fn silent_subscription_count(&self) -> usize {
        self.silent.len()
    }

    /// Removes an outpoint subscription, returning whether it existed.
    pub fn unsubscribe_outpoint(&mut self, outpoint: &OutPoint) -> bool {
        let removed = self.outpoints.remove(outpoint);
        if removed {
            self.subscription_count -= 1;
            self.recharge();
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
            ScriptForm::ScriptPubKey
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
