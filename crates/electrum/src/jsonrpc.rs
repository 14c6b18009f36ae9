//! JSON-RPC 2.0 framing of one line: a request object or a batch array in,
//! response objects out. Owns the envelope (`jsonrpc`, `id`, `method`,
//! `params`); knows nothing of methods or their parameters (see `request`).

use crate::error::RpcError;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};
use std::fmt;
use std::sync::Arc;

/// The parameters of a call: absent, by position, or by name.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    None,
    Positional(Vec<Value>),
    Named(Map<String, Value>),
}

/// A well-formed call. `id` is `None` for a notification, which gets no
/// response; `Some(Value::Null)` is a request whose id is null.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: Option<Value>,
    pub method: String,
    pub params: Params,
}

/// One element of a line.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Call(Call),
    /// Not a valid call: answered with this error and this id.
    Invalid {
        id: Value,
        error: RpcError,
    },
    /// A response object (we never send requests, so it is ignored).
    Response,
}

/// What a line holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A blank line: ignored, as nc and telnet users send them.
    Empty,
    Single(Message),
    Batch(Vec<Message>),
    /// The line as a whole is unusable (malformed JSON, an empty batch):
    /// one error response with a null id.
    Error(RpcError),
}

/// Parses one line (without its newline). Never panics on any input.
pub fn parse_line(line: &[u8], batch_requests_max: usize) -> Incoming {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Empty;
    }
    let parsed: Line = match serde_json::from_slice(line) {
        Ok(parsed) => parsed,
        Err(e) => return Incoming::Error(RpcError::Parse(e.to_string())),
    };
    match parsed {
        Line::Batch(items) => {
            if items.is_empty() {
                return Incoming::Error(RpcError::InvalidRequest("empty batch".into()));
            }
            if items.len() > batch_requests_max {
                // A batch is answered by an array (JSON-RPC 2.0): every
                // request in it gets the error under its own id, so the
                // client can tell which of its calls failed.
                let error = RpcError::LimitExceeded(format!(
                    "batch of {} requests exceeds the limit of {batch_requests_max}",
                    items.len()
                ));
                let refused = items
                    .into_iter()
                    .map(parse_message)
                    .map(|message| match message {
                        Message::Call(Call { id: Some(id), .. }) | Message::Invalid { id, .. } => {
                            Message::Invalid {
                                id,
                                error: error.clone(),
                            }
                        }
                        // Notifications and responses get no answer.
                        other => other,
                    })
                    .collect();
                return Incoming::Batch(refused);
            }
            Incoming::Batch(items.into_iter().map(parse_message).collect())
        }
        Line::Single(item) => Incoming::Single(parse_message(item)),
    }
}

fn parse_message(item: Item) -> Message {
    let Item::Object(envelope) = item else {
        return invalid(Value::Null, "expected a request object");
    };
    let id = match envelope.id {
        None => None,
        Some(id @ (Value::Null | Value::Number(_) | Value::String(_))) => Some(id),
        Some(_) => return invalid(Value::Null, "id must be a string, a number or null"),
    };
    let reply_id = id.clone().unwrap_or(Value::Null);
    if envelope.method.is_none() && envelope.result_or_error {
        return Message::Response;
    }
    match envelope.jsonrpc {
        // JSON-RPC 1.0 clients send no version or "1.0"; both are served.
        None => {}
        Some(Value::String(v)) if v == "2.0" || v == "1.0" => {}
        Some(_) => return invalid(reply_id, "jsonrpc must be \"2.0\""),
    }
    let method = match envelope.method {
        Some(Value::String(method)) => method,
        Some(_) => return invalid(reply_id, "method must be a string"),
        None => return invalid(reply_id, "missing method"),
    };
    let params = match envelope.params {
        None | Some(Value::Null) => Params::None,
        Some(Value::Array(items)) => Params::Positional(items),
        Some(Value::Object(map)) => Params::Named(map),
        Some(_) => {
            return Message::Invalid {
                id: reply_id,
                error: RpcError::InvalidParams("params must be an array or an object".into()),
            }
        }
    };
    Message::Call(Call { id, method, params })
}

/// A line as read: one element, or a batch of them.
enum Line {
    Single(Item),
    Batch(Vec<Item>),
}

/// One element of a line: an object (a request, or a response sent to
/// us), or anything else, which is an invalid request.
enum Item {
    Object(Envelope),
    Other,
}

/// The members of an object this layer reads; the others are parsed and
/// dropped. Read straight into this rather than into a `Value` map: a map
/// costs an allocation per key, and the envelope was most of the parsing
/// of a reconnecting wallet's batches. Same meaning as a map: a member
/// given twice counts with its last value. Skipped values are parsed as
/// `Value`s all the same, not `IgnoredAny`: that one lets through what a
/// `Value` refuses (invalid UTF-8 in a string, a number out of range), and
/// a line must be refused exactly when it is not JSON.
#[derive(Default)]
struct Envelope {
    id: Option<Value>,
    jsonrpc: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    /// Whether a `result` or `error` member is present.
    result_or_error: bool,
}

/// An envelope member's name.
enum Member {
    Id,
    Jsonrpc,
    Method,
    Params,
    ResultOrError,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Names;
        impl Visitor<'_> for Names {
            type Value = Member;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Member, E> {
                Ok(match name {
                    "id" => Member::Id,
                    "jsonrpc" => Member::Jsonrpc,
                    "method" => Member::Method,
                    "params" => Member::Params,
                    "result" | "error" => Member::ResultOrError,
                    _ => Member::Other,
                })
            }
        }
        deserializer.deserialize_identifier(Names)
    }
}

/// Reads any JSON value as a [`Line`] or an [`Item`] (`batch`: whether an
/// array is a batch, as it is at the top of a line).
struct Elements {
    batch: bool,
}

/// What [`Elements`] read.
enum Element {
    Object(Envelope),
    Array(Vec<Item>),
    Other,
}

impl<'de> Visitor<'de> for Elements {
    type Value = Element;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Element, E> {
        Ok(Element::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Element, E> {
        Ok(Element::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Element, E> {
        Ok(Element::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Element, E> {
        Ok(Element::Other)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Element, E> {
        Ok(Element::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Element, E> {
        Ok(Element::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
        if !self.batch {
            while seq.next_element::<Value>()?.is_some() {}
            return Ok(Element::Other);
        }
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element::<Item>()? {
            items.push(item);
        }
        Ok(Element::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Element, A::Error> {
        let mut envelope = Envelope::default();
        while let Some(member) = map.next_key::<Member>()? {
            match member {
                Member::Id => envelope.id = Some(map.next_value()?),
                Member::Jsonrpc => envelope.jsonrpc = Some(map.next_value()?),
                Member::Method => envelope.method = Some(map.next_value()?),
                Member::Params => envelope.params = Some(map.next_value()?),
                Member::ResultOrError => {
                    map.next_value::<Value>()?;
                    envelope.result_or_error = true;
                }
                Member::Other => {
                    map.next_value::<Value>()?;
                }
            }
        }
        Ok(Element::Object(envelope))
    }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(
            match deserializer.deserialize_any(Elements { batch: false })? {
                Element::Object(envelope) => Item::Object(envelope),
                Element::Array(_) | Element::Other => Item::Other,
            },
        )
    }
}

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(
            match deserializer.deserialize_any(Elements { batch: true })? {
                Element::Object(envelope) => Line::Single(Item::Object(envelope)),
                Element::Array(items) => Line::Batch(items),
                Element::Other => Line::Single(Item::Other),
            },
        )
    }
}

fn invalid(id: Value, why: &str) -> Message {
    Message::Invalid {
        id,
        error: RpcError::InvalidRequest(why.into()),
    }
}

/// Returns the response object for a request.
pub fn response(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "result": result, "id": id}),
        Err(error) => json!({"jsonrpc": "2.0", "error": error.to_json(), "id": id}),
    }
}

/// A request's result as it goes out: a JSON value, or JSON text written
/// once and shared by every session that asks the same (a long history
/// fifty sessions re-ask is serialized once, not fifty times, and never
/// held as a tree of values: ~800 bytes per history entry as a `Value`,
/// ~85 as text).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Value(Value),
    /// Valid JSON, written as it is.
    Text(Arc<str>),
}

impl From<Value> for Answer {
    fn from(value: Value) -> Self {
        Answer::Value(value)
    }
}

impl Answer {
    fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match self {
            Answer::Value(value) => serde_json::to_writer(out, value).map_err(Into::into),
            Answer::Text(text) => out.write_all(text.as_bytes()),
        }
    }
}

/// One response object, to be written into a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Value,
    pub outcome: Result<Answer, RpcError>,
}

impl Response {
    pub fn new(id: Value, outcome: Result<Answer, RpcError>) -> Self {
        Response { id, outcome }
    }

    /// Appends the response object to `line`, as [`response`]`(id,
    /// outcome).to_string()` would write it (members in the same order)
    /// without building the map first.
    pub fn write(&self, line: &mut Vec<u8>) {
        // Writing to a Vec cannot fail, nor can serializing a Value.
        let _ = self.write_to(line);
    }

    /// How many bytes [`Response::write`] writes, without keeping them
    /// (a shared text answer is counted, not copied).
    pub fn written_len(&self) -> usize {
        let mut counter = ByteCounter(0);
        // Writing to a counter cannot fail.
        let _ = self.write_to(&mut counter);
        counter.0
    }

    fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match &self.outcome {
            Ok(result) => {
                out.write_all(b"{\"id\":")?;
                serde_json::to_writer(&mut *out, &self.id)?;
                out.write_all(b",\"jsonrpc\":\"2.0\",\"result\":")?;
                result.write_to(out)?;
            }
            Err(error) => {
                out.write_all(b"{\"error\":")?;
                serde_json::to_writer(&mut *out, &error.to_json())?;
                out.write_all(b",\"id\":")?;
                serde_json::to_writer(&mut *out, &self.id)?;
                out.write_all(b",\"jsonrpc\":\"2.0\"")?;
            }
        }
        out.write_all(b"}")
    }
}

/// Counts what is written to it.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A line of responses: one object, or an array of them for a batch.
pub fn write_line(responses: &[Response], batch: bool) -> String {
    // Room for the texts up front: a shared history is megabytes, and
    // growing to it by doubling would copy it several times.
    let texts: usize = responses
        .iter()
        .map(|r| match &r.outcome {
            Ok(Answer::Text(text)) => text.len(),
            _ => 0,
        })
        .sum();
    let mut line = Vec::with_capacity(texts + 96 * responses.len() + 2);
    if batch {
        line.push(b'[');
    }
    for (i, response) in responses.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        response.write(&mut line);
    }
    if batch {
        line.push(b']');
    }
    // Only serde_json output and JSON text answers went in: UTF-8.
    String::from_utf8(line).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The same answer with every result replaced by `error`, each under its
/// request's id (an array for a batch): how a response that cannot be sent
/// is refused.
pub fn refusal(answer: &Value, error: &RpcError) -> Value {
    let refuse = |answer: &Value| response(answer["id"].clone(), Err(error.clone()));
    match answer {
        Value::Array(answers) => Value::Array(answers.iter().map(refuse).collect()),
        answer => refuse(answer),
    }
}

/// Returns a notification object (a server push: no id).
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(line: &str) -> Message {
        match parse_line(line.as_bytes(), 10) {
            Incoming::Single(m) => m,
            other => panic!("expected a single message, got {other:?}"),
        }
    }

    #[test]
    fn parses_positional_named_and_absent_params() {
        let m = single(r#"{"jsonrpc":"2.0","id":1,"method":"server.ping","params":[]}"#);
        assert_eq!(
            m,
            Message::Call(Call {
                id: Some(json!(1)),
                method: "server.ping".into(),
                params: Params::Positional(vec![])
            })
        );
        let m = single(r#"{"id":"a","method":"blockchain.block.header","params":{"height":5}}"#);
        let Message::Call(call) = m else { panic!() };
        assert_eq!(call.id, Some(json!("a")));
        assert!(matches!(call.params, Params::Named(ref p) if p["height"] == json!(5)));
        let Message::Call(call) = single(r#"{"id":null,"method":"server.banner"}"#) else {
            panic!()
        };
        assert_eq!((call.id, call.params), (Some(Value::Null), Params::None));
        let Message::Call(call) = single(r#"{"method":"server.ping"}"#) else {
            panic!()
        };
        assert_eq!(call.id, None, "no id is a notification");
    }

    #[test]
    fn malformed_json_is_a_parse_error() {
        for line in ["{", "{\"id\":1,", "nope", "[1,", "\u{7f}"] {
            match parse_line(line.as_bytes(), 10) {
                Incoming::Error(e) => assert_eq!(e.code(), -32700, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        // Invalid UTF-8 never panics either.
        assert!(matches!(
            parse_line(&[0xff, 0xfe], 10),
            Incoming::Error(RpcError::Parse(_))
        ));
        // Not JSON anywhere, a member nobody reads included (found by
        // fuzzing: skipped unread, these lines were served).
        let mut bad_utf8 = br#"[{"id":1,"method":"a","x":"#.to_vec();
        bad_utf8.extend_from_slice(b"\"\x92\"}]");
        for line in [
            bad_utf8,
            br#"{"id":1,"method":"a","x":1e400}"#.to_vec(),
            br#"[[1e400],{"id":1,"method":"a"}]"#.to_vec(),
        ] {
            assert!(
                matches!(parse_line(&line, 10), Incoming::Error(RpcError::Parse(_))),
                "{}",
                String::from_utf8_lossy(&line)
            );
        }
        assert_eq!(parse_line(b"  \r", 10), Incoming::Empty);
    }

    #[test]
    fn invalid_envelopes_are_invalid_requests() {
        let cases = [
            (r#"5"#, Value::Null),
            (r#""server.ping""#, Value::Null),
            (r#"{"id":1}"#, json!(1)),
            (r#"{"id":1,"method":7}"#, json!(1)),
            (r#"{"id":[1],"method":"server.ping"}"#, Value::Null),
            (
                r#"{"id":2,"jsonrpc":"3.0","method":"server.ping"}"#,
                json!(2),
            ),
        ];
        for (line, want_id) in cases {
            match single(line) {
                Message::Invalid { id, error } => {
                    assert_eq!(id, want_id, "{line}");
                    assert_eq!(error.code(), -32600, "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        match single(r#"{"id":3,"method":"server.ping","params":"x"}"#) {
            Message::Invalid { id, error } => assert_eq!((id, error.code()), (json!(3), -32602)),
            other => panic!("{other:?}"),
        }
        assert_eq!(single(r#"{"id":3,"result":null}"#), Message::Response);
    }

    /// The envelope is read member by member, with a JSON object's
    /// meaning: the last of repeated members counts, escaped names are
    /// names, unknown members (however deep) are skipped, and only a
    /// string is a version.
    #[test]
    fn envelopes_mean_what_a_json_object_means() {
        let call = |line: &str| match single(line) {
            Message::Call(call) => call,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(call(r#"{"id":1,"id":2,"method":"a"}"#).id, Some(json!(2)));
        assert_eq!(call(r#"{"\u0069d":5,"method":"a"}"#).id, Some(json!(5)));
        assert_eq!(call(r#"{"id":1.5,"method":"a"}"#).id, Some(json!(1.5)));
        let deep = call(r#"{"id":1,"x":{"y":[1,{"z":null}]},"method":"a","params":["b"]}"#);
        assert_eq!(
            (deep.method.as_str(), deep.params),
            ("a", Params::Positional(vec![json!("b")]))
        );
        assert_eq!(
            call(r#"{"id":1,"method":"a","method":"b","result":1}"#).method,
            "b",
            "a call that also has a result is still a call"
        );
        assert_eq!(single(r#"{"id":1,"error":null}"#), Message::Response);
        for line in [
            r#"{"id":1,"jsonrpc":null,"method":"a"}"#,
            "null",
            "true",
            "\"x\"",
        ] {
            let Message::Invalid { error, .. } = single(line) else {
                panic!("{line}")
            };
            assert_eq!(error.code(), -32600, "{line}");
        }
        match parse_line(br#"[[{"id":1,"method":"a"}],{"id":2,"method":"a"}]"#, 10) {
            Incoming::Batch(items) => {
                assert!(
                    matches!(
                        &items[0],
                        Message::Invalid {
                            id: Value::Null,
                            ..
                        }
                    ),
                    "an array in a batch is not a request"
                );
                assert!(
                    matches!(&items[1], Message::Call(Call { id: Some(id), .. }) if *id == json!(2))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn batches_are_bounded_and_never_empty() {
        match parse_line(br#"[{"id":1,"method":"a"},7]"#, 10) {
            Incoming::Batch(items) => {
                assert_eq!(items.len(), 2);
                assert!(matches!(items[1], Message::Invalid { .. }));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_line(b"[]", 10),
            Incoming::Error(RpcError::InvalidRequest(_))
        ));
        let mut calls = vec![r#"{"id":1,"method":"a"}"#; 10];
        calls.push(r#"{"method":"server.ping"}"#);
        let line = format!("[{}]", calls.join(","));
        match parse_line(line.as_bytes(), 10) {
            Incoming::Batch(items) => {
                assert_eq!(items.len(), 11);
                for item in &items[..10] {
                    let Message::Invalid { id, error } = item else {
                        panic!("{item:?}")
                    };
                    assert_eq!(*id, json!(1));
                    assert_eq!(error.code(), -101);
                    assert!(error.to_string().contains("limit of 10"), "{error}");
                }
                assert!(
                    matches!(&items[10], Message::Call(Call { id: None, .. })),
                    "a notification is not answered"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// Written in place, a response is the same text as the object
    /// [`response`] builds, serialized.
    #[test]
    fn written_responses_are_the_built_ones() {
        let error = RpcError::InvalidParams("bad \"x\"".into());
        for id in [json!(7), json!("a\"b"), Value::Null, json!(1.5)] {
            for outcome in [Ok(json!("ab")), Ok(Value::Null), Err(error.clone())] {
                let built = response(id.clone(), outcome.clone()).to_string();
                let written = Response::new(id.clone(), outcome.map(Answer::Value));
                let mut line = Vec::new();
                written.write(&mut line);
                assert_eq!(String::from_utf8(line).unwrap(), built);
                assert_eq!(written.written_len(), built.len(), "counted as written");
            }
        }
    }

    #[test]
    fn builds_responses_and_notifications() {
        assert_eq!(
            response(json!(7), Ok(json!("x"))),
            json!({"jsonrpc":"2.0","result":"x","id":7})
        );
        assert_eq!(
            response(Value::Null, Err(RpcError::Parse("eof".into()))),
            json!({"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error: eof"},"id":null})
        );
        assert_eq!(
            notification("blockchain.headers.subscribe", json!([{"height": 1}])),
            json!({"jsonrpc":"2.0","method":"blockchain.headers.subscribe","params":[{"height":1}]})
        );
    }
}
