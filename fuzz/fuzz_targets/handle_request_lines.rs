//! Request lines, from JSON-RPC envelope to response line.
//!
//! Input: the lines one session sends (split on `\n`, at most 16). Each is
//! parsed (`jsonrpc::parse_line`), each call in it parsed against the
//! method table at every protocol version (`Request::parse`), then the line
//! is answered by a `Dispatcher` over the in-memory fake backend, the
//! session's state carried from line to line (so `server.version`,
//! subscriptions and batches meet).
//! Properties: nothing panics; a batch keeps its length and, over the
//! limit, answers every request with -101; a request is refused only as an
//! unknown method (-32601) or with invalid params (-32602); a parsed
//! request holds only what validation lets through; every response line is
//! JSON-RPC 2.0 (an object, or a non-empty array of them, each with an id
//! and exactly one of result or error, never -32603 "internal error"), and
//! stays within `reply_bytes_max` unless it is the refusal of an oversized
//! reply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey_electrum::fake::FakeBackend;
use osprey_electrum::jsonrpc::{parse_line, Call, Incoming, Message};
use osprey_electrum::{
    BatchThreads, DispatchConfig, Dispatcher, ProtocolVersion, Request, ScriptForm, ServerInfo,
    SessionState,
};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

const BATCH_REQUESTS_MAX: usize = 4;
const REPLY_BYTES_MAX: usize = 2048;
const LINES_MAX: usize = 16;
/// Threads batches are spread over, as many as the server gives them when
/// transactions come from the node (the fake's case).
const BATCH_THREADS: usize = 8;

fn dispatcher() -> &'static Dispatcher {
    static DISPATCHER: OnceLock<Dispatcher> = OnceLock::new();
    DISPATCHER.get_or_init(|| {
        let backend = FakeBackend::with_tip(20);
        let config = DispatchConfig {
            info: ServerInfo {
                server_version: "Osprey fuzz".into(),
                banner: "fuzz".into(),
                donation_address: String::new(),
                genesis_hash: bitcoin::constants::genesis_block(bitcoin::Network::Regtest)
                    .block_hash(),
                hosts: Vec::new(),
            },
            headers_per_call_max: 2016,
            batch_requests_max: BATCH_REQUESTS_MAX,
            subscriptions_per_session_max: 3,
            pong_len_max: 64,
            reply_bytes_max: REPLY_BYTES_MAX,
            subscription_budget: None,
            silent_payments: osprey_electrum::SilentPaymentsConfig {
                network: bitcoin::Network::Regtest,
                labels_max: 3,
                subscriptions_per_session_max: 2,
            },
        };
        Dispatcher::new(Arc::new(backend), config)
    })
}

fn batch_threads() -> &'static BatchThreads {
    static THREADS: OnceLock<BatchThreads> = OnceLock::new();
    THREADS.get_or_init(|| BatchThreads::new(BATCH_THREADS).expect("batch threads"))
}

fuzz_target!(|data: &[u8]| {
    let mut state = SessionState::new();
    for line in data.split(|&b| b == b'\n').take(LINES_MAX) {
        check_parse(line);
        let outcome = dispatcher().handle_line(&mut state, line, Some(batch_threads()));
        if let Some(response) = outcome.response {
            check_response(&response);
        }
        if outcome.close {
            break;
        }
    }
});

fn check_parse(line: &[u8]) {
    let messages = match parse_line(line, BATCH_REQUESTS_MAX) {
        Incoming::Empty => {
            assert!(line.iter().all(u8::is_ascii_whitespace));
            return;
        }
        Incoming::Error(e) => {
            assert!(matches!(e.code(), -32700 | -32600), "{e:?}");
            return;
        }
        Incoming::Single(message) => vec![message],
        Incoming::Batch(messages) => {
            let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(line) else {
                panic!("a batch from a line that is not a JSON array");
            };
            assert_eq!(messages.len(), items.len());
            if messages.len() > BATCH_REQUESTS_MAX {
                for m in &messages {
                    match m {
                        Message::Invalid { error, .. } => assert_eq!(error.code(), -101),
                        Message::Call(Call { id, .. }) => assert!(id.is_none(), "{m:?}"),
                        Message::Response => {}
                    }
                }
                return;
            }
            messages
        }
    };
    for message in messages {
        match message {
            Message::Invalid { id, error } => {
                assert!(matches!(
                    id,
                    Value::Null | Value::Number(_) | Value::String(_)
                ));
                assert!(matches!(error.code(), -32600 | -32602), "{error:?}");
            }
            Message::Response => {}
            Message::Call(call) => {
                for protocol in ProtocolVersion::SUPPORTED {
                    match Request::parse(&call.method, &call.params, protocol) {
                        Ok(request) => check_request(&request, protocol),
                        Err(e) => assert!(matches!(e.code(), -32601 | -32602), "{e:?}"),
                    }
                }
            }
        }
    }
}

/// What validation promises the method families.
fn check_request(request: &Request, protocol: ProtocolVersion) {
    let is_hex = |s: &str| s.len() % 2 == 0 && s.bytes().all(|b| b.is_ascii_hexdigit());
    match request {
        // Each form at its versions only: script hashes up to 1.6, scripts
        // from 1.7 on.
        Request::Script { key, .. } => match &key.form {
            ScriptForm::ScriptHash => assert!(!protocol.is_1_7_or_later()),
            ScriptForm::ScriptPubKey => assert!(protocol.is_1_7_or_later()),
        },
        Request::TxBroadcast { raw_tx } => assert!(!raw_tx.is_empty() && is_hex(raw_tx)),
        Request::TxBroadcastPackage { raw_txs, .. } => {
            assert!(!raw_txs.is_empty());
            assert!(raw_txs.iter().all(|tx| !tx.is_empty() && is_hex(tx)));
        }
        Request::TxTestMempoolAccept { raw_txs } => {
            assert!(protocol.is_1_7_or_later());
            assert!(!raw_txs.is_empty());
            assert!(raw_txs.iter().all(|tx| !tx.is_empty() && is_hex(tx)));
        }
        Request::OutpointSubscribe { .. }
        | Request::OutpointGetStatus { .. }
        | Request::OutpointUnsubscribe { .. }
        | Request::MempoolRecent => assert!(protocol.is_1_7_or_later()),
        Request::EstimateFee {
            mode: Some(mode), ..
        } => {
            assert!(["ECONOMICAL", "CONSERVATIVE", "UNSET"].contains(&mode.as_str()));
        }
        Request::ServerVersion { min, max, .. } => {
            // Both parsed from "a.b" or "a.b.c": they print back as such.
            for v in [min, max] {
                let printed = v.to_string();
                assert_eq!(printed.parse::<ProtocolVersion>().as_ref(), Ok(v));
            }
        }
        _ => {}
    }
}

fn check_response(response: &str) {
    let value: Value = serde_json::from_str(response).expect("a response line is JSON");
    let answers = match &value {
        Value::Array(answers) => {
            assert!(!answers.is_empty(), "an empty batch response");
            answers.clone()
        }
        answer => vec![answer.clone()],
    };
    let mut refused_as_too_long = true;
    for answer in &answers {
        let object = answer.as_object().expect("each answer is an object");
        assert_eq!(object["jsonrpc"], "2.0");
        let id = object.get("id").expect("each answer has an id");
        assert!(matches!(
            id,
            Value::Null | Value::Number(_) | Value::String(_)
        ));
        assert_eq!(
            object.contains_key("result"),
            !object.contains_key("error"),
            "{answer}"
        );
        if let Some(error) = object.get("error") {
            let code = error["code"].as_i64().expect("an error has a code");
            assert_ne!(code, -32603, "internal error: {answer}");
            assert!(error["message"].is_string());
            refused_as_too_long &= code == -101;
        } else {
            refused_as_too_long = false;
        }
    }
    assert!(
        response.len() <= REPLY_BYTES_MAX || refused_as_too_long,
        "a reply of {} bytes",
        response.len()
    );
}
