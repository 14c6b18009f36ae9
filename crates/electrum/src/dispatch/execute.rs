//! Runs one parsed request: the method table, from `Request` to the method
//! family that answers it. Requests that change the session (the version,
//! subscriptions) go through `execute`; those that only read, which a batch
//! may run in parallel, through `execute_query`.

use super::reply_limit::reply_too_large;
use super::{Dispatcher, Effect, Outcome};
use crate::error::RpcError;
use crate::jsonrpc::Answer;
use crate::request::{Request, ScriptMethod};
use crate::script::ScriptKey;
use crate::server::PeerFeatures;
use crate::session::SessionState;
use crate::version::ProtocolVersion;
use crate::{fee, headers, mempool, outpoint, scripthash, server, silent_payments, transaction};
use osprey_answers::Backend;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;

impl Dispatcher {
    /// The read-only `blockchain.scripthash.*` (and 1.7
    /// `blockchain.scriptpubkey.*`) methods; histories as text, the full
    /// history shared between sessions (`shared`).
    fn script_query(&self, method: ScriptMethod, key: &ScriptKey) -> Result<Answer, RpcError> {
        let backend: &dyn Backend = &*self.backend;
        let max = self.config.reply_bytes_max;
        let sh = &key.scripthash;
        let text = match method {
            ScriptMethod::GetHistory => self.histories.history(backend, sh, max),
            ScriptMethod::GetMempool => backend
                .mempool_history(sh)
                .map(|entries| scripthash::history_text(&entries, max).map(Arc::from)),
            other => return scripthash::query(backend, other, key).map(Answer::from),
        };
        text.map_err(|e| scripthash::script_error(&key.form, e))?
            .and_then(|text| scripthash::history_answer(&key.form, text, max))
            .map(Answer::Text)
            .ok_or_else(|| reply_too_large(&format!("more than {max}"), max))
    }

    /// `server.add_peer`: whether the announced server was tentatively
    /// accepted. Features this server cannot use (another chain, no
    /// reachable host) are a `false`, as the spec's result is a boolean.
    pub(super) fn add_peer(&self, source: Option<IpAddr>, features: &Value) -> bool {
        let (Some(peers), Some(source)) = (&self.peers, source) else {
            return false;
        };
        match PeerFeatures::parse(features) {
            Ok(features) if features.genesis_hash == self.config.info.genesis_hash.to_string() => {
                peers.add(features, source)
            }
            Ok(_) => {
                tracing::debug!(%source, "add_peer refused: another chain's genesis hash");
                false
            }
            Err(e) => {
                tracing::debug!(%source, "add_peer refused: {e}");
                false
            }
        }
    }

    pub(super) fn execute(
        &self,
        state: &mut SessionState,
        request: Request,
        out: &mut Outcome,
    ) -> Result<Answer, RpcError> {
        if !matches!(request, Request::ServerVersion { .. }) {
            state.note_other_message();
        }
        let backend: &dyn Backend = &*self.backend;
        let config = &self.config;
        let value = match request {
            Request::ServerVersion {
                client_name,
                min,
                max,
            } => match state.negotiate(min, max) {
                Ok(version) => {
                    state.set_client_name(&client_name);
                    tracing::debug!(client = state.client_name().unwrap_or_default(), %version, "negotiated");
                    Ok(server::version(&config.info, version))
                }
                Err(e) => {
                    // No version in common: the spec says to close.
                    out.close = state.negotiated().is_none();
                    Err(e)
                }
            },
            Request::HeadersSubscribe => {
                let tip = headers::subscribe(backend)?;
                state.subscribe_headers();
                out.effects.push(Effect::HeadersSubscribed);
                Ok(tip)
            }
            Request::Script {
                method: ScriptMethod::Subscribe,
                key,
            } => {
                let new = state.subscribe(&key, config.subscriptions_per_session_max)?;
                let status = match scripthash::status(backend, &key) {
                    Ok(status) => status,
                    Err(e) => {
                        // Not subscribed if the client never got a status; a
                        // subscription it had before stays, as the notifier
                        // still has it.
                        if new {
                            state.unsubscribe(&key);
                        }
                        return Err(e);
                    }
                };
                out.effects.push(Effect::Subscribed { key, status });
                Ok(scripthash::status_json(status))
            }
            Request::Script {
                method: ScriptMethod::Unsubscribe,
                key,
            } => {
                let removed = state.unsubscribe(&key);
                if removed {
                    out.effects.push(Effect::Unsubscribed { key });
                }
                Ok(Value::Bool(removed))
            }
            Request::ServerAddPeer { features } => {
                Ok(Value::Bool(self.add_peer(state.source(), &features)))
            }
            Request::OutpointSubscribe { outpoint, spk_hint } => {
                let new =
                    state.subscribe_outpoint(&outpoint, config.subscriptions_per_session_max)?;
                let answer = match backend.outpoint_status(&outpoint, Some(&spk_hint)) {
                    Ok(answer) => answer,
                    Err(e) => {
                        // As for scripts: no status told, no subscription.
                        if new {
                            state.unsubscribe_outpoint(&outpoint);
                        }
                        return Err(e.into());
                    }
                };
                out.effects
                    .push(Effect::OutpointSubscribed { outpoint, answer });
                Ok(outpoint::status_json(&answer.status))
            }
            Request::OutpointUnsubscribe { outpoint } => {
                let removed = state.unsubscribe_outpoint(&outpoint);
                if removed {
                    out.effects.push(Effect::OutpointUnsubscribed { outpoint });
                }
                Ok(Value::Bool(removed))
            }
            Request::SilentPaymentsSubscribe(request) => {
                let subscription =
                    silent_payments::subscribe(backend, &config.silent_payments, state, request)?;
                let text = Arc::clone(&subscription.text);
                out.effects
                    .push(Effect::SilentPaymentsSubscribed(subscription));
                return Ok(Answer::Text(text));
            }
            Request::SilentPaymentsUnsubscribe(keys) => {
                let (address, removed) =
                    silent_payments::unsubscribe(&config.silent_payments, state, &keys)?;
                if removed {
                    out.effects.push(Effect::SilentPaymentsUnsubscribed {
                        address: address.clone(),
                    });
                }
                Ok(Value::String(address))
            }
            query => return self.execute_query(state.protocol(), query),
        };
        value.map(Answer::from)
    }

    /// Runs a request that reads the backend and nothing of the session but
    /// its protocol version, so batches run these in parallel.
    pub(super) fn execute_query(
        &self,
        protocol: ProtocolVersion,
        request: Request,
    ) -> Result<Answer, RpcError> {
        let backend: &dyn Backend = &*self.backend;
        let config = &self.config;
        let value = match request {
            Request::ServerBanner => Ok(Value::String(config.info.banner.clone())),
            Request::ServerDonationAddress => {
                Ok(Value::String(config.info.donation_address.clone()))
            }
            Request::ServerFeatures => Ok(server::features(
                &config.info,
                protocol,
                backend.sp_enabled(),
            )),
            Request::ServerPeersSubscribe => Ok(server::peers(
                &self.peers.as_ref().map(|p| p.known()).unwrap_or_default(),
            )),
            Request::ServerPing { pong_len } => {
                server::ping(protocol, pong_len, config.pong_len_max)
            }
            Request::BlockHeader { height, cp_height } => {
                headers::header(backend, height, cp_height)
            }
            Request::BlockHeaders {
                start_height,
                count,
                cp_height,
            } => headers::headers(
                backend,
                config.headers_per_call_max,
                protocol.is_1_6_or_later(),
                start_height,
                count,
                cp_height,
            ),
            Request::EstimateFee { number, mode } => {
                fee::estimatefee(backend, number, mode.as_deref())
            }
            // 1.6 replaced `relayfee` with `mempool.get_info`, but we keep
            // serving it: electrum-client 0.25 (BDK) negotiates 1.6 and still
            // calls it, and servers may support extra methods.
            Request::RelayFee => fee::relayfee(backend),
            Request::Script { method, key } => return self.script_query(method, &key),
            Request::OutpointGetStatus { outpoint, spk_hint } => {
                outpoint::get_status(backend, &outpoint, &spk_hint)
            }
            Request::TxBroadcast { raw_tx } => transaction::broadcast(backend, &raw_tx),
            Request::TxBroadcastPackage { raw_txs, verbose } => {
                transaction::broadcast_package(backend, &raw_txs, verbose)
            }
            Request::TxGet { txid, verbose } => transaction::get(backend, &txid, verbose),
            Request::TxGetMerkle { txid, height } => {
                transaction::get_merkle(backend, &txid, height)
            }
            Request::TxTestMempoolAccept { raw_txs } => {
                transaction::test_mempool_accept(backend, &raw_txs)
            }
            Request::TxIdFromPos {
                height,
                tx_pos,
                merkle,
            } => transaction::id_from_pos(backend, height, tx_pos, merkle),
            Request::MempoolFeeHistogram => Ok(mempool::fee_histogram(backend)),
            Request::MempoolGetInfo => mempool::info(backend),
            Request::MempoolRecent => Ok(mempool::recent(backend)),
            Request::ServerVersion { .. }
            | Request::HeadersSubscribe
            | Request::ServerAddPeer { .. }
            | Request::OutpointSubscribe { .. }
            | Request::OutpointUnsubscribe { .. }
            | Request::SilentPaymentsSubscribe(_)
            | Request::SilentPaymentsUnsubscribe(_) => Err(RpcError::Internal(
                "a request that changes the session was run as a query".into(),
            )),
        };
        value.map(Answer::from)
    }
}
