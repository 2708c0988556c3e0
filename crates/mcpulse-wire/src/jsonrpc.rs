//! A tolerant JSON-RPC 2.0 envelope decoder.
//!
//! Servers send all sorts of things; the decoder classifies rather than rejects. It never
//! panics, keeps what it needs of the raw value, and reports envelope defects (a missing
//! `"jsonrpc":"2.0"`, an error object without a numeric code) as flags for the judge.

use crate::json::{self, JsonError, Limits, Parsed};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON-RPC id. `Null` appears in error responses that could not be tied to a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    Num(i64),
    Str(String),
    Null,
}

impl Id {
    pub(crate) fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Null => Some(Id::Null),
            Value::String(s) => Some(Id::Str(s.clone())),
            Value::Number(n) => n.as_i64().map(Id::Num),
            _ => None,
        }
    }

    /// Whether this id answers the integer id we sent. A server that echoes our numeric id
    /// as a string (`"1"`) is tolerated: it is a defect, not a different request.
    pub fn matches(&self, sent: i64) -> bool {
        match self {
            Id::Num(n) => *n == sent,
            Id::Str(s) => s.parse::<i64>().ok() == Some(sent),
            Id::Null => false,
        }
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Str(s) => write!(f, "{s:?}"),
            Id::Null => f.write_str("null"),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// One decoded JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Result {
        id: Id,
        result: Value,
    },
    Error {
        id: Id,
        error: ErrorObject,
    },
}

impl Message {
    /// The id of a response (result or error), if this is one.
    pub fn response_id(&self) -> Option<&Id> {
        match self {
            Message::Result { id, .. } | Message::Error { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// A decoded message and the defects of its envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub message: Message,
    /// `"jsonrpc":"2.0"` was absent or had another value.
    pub bad_version: bool,
}

/// Why a text is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not JSON at all (an HTML page, a log line).
    NotJson,
    /// Valid JSON that cannot be used: nested too deep, a number out of range, or more than the
    /// memory budget to hold (see [`crate::json`]).
    Unusable(JsonError),
    /// JSON, but an array: a batch, which no revision we speak allows in replies to us.
    Batch,
    /// JSON, but not an object with the members of a request, notification or response.
    NotEnvelope(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotJson => f.write_str("not JSON"),
            DecodeError::Unusable(e) => write!(f, "not usable JSON: {e}"),
            DecodeError::Batch => f.write_str("a JSON-RPC batch (array)"),
            DecodeError::NotEnvelope(why) => write!(f, "not a JSON-RPC message: {why}"),
        }
    }
}

/// Decodes one JSON-RPC message from text.
pub fn decode(text: &str) -> Result<Decoded, DecodeError> {
    decode_within(text, &Limits::UNBOUNDED).map(|(d, _)| d)
}

/// Decodes one JSON-RPC message from text, building no more of it than `limits` allow (see
/// [`crate::json`]); also returns what the read cost and how many list items it skipped.
pub fn decode_within(text: &str, limits: &Limits) -> Result<(Decoded, Parsed), DecodeError> {
    let mut parsed = json::parse(text, limits).map_err(|e| {
        if e.is_valid_json() {
            DecodeError::Unusable(e)
        } else {
            DecodeError::NotJson
        }
    })?;
    let value = std::mem::take(&mut parsed.value);
    decode_value(value).map(|d| (d, parsed))
}

/// The envelope of one JSON-RPC message, without building its payload: what a transport needs
/// to tell which request a frame answers. The message is [`decode`]'s, with `params`, `result`
/// and the error's `data` left out (`None`, `null`, `None`), so it costs the envelope's bytes,
/// not a DOM of the payload (a 8 MiB `tools/list` result is skipped, not built), and a payload
/// that [`decode`] would refuse (a number out of range, nesting too deep) still answers its
/// request: the judge, which decodes it in full, says what is wrong with it.
pub fn peek(text: &str) -> Result<Decoded, DecodeError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let top = de::Deserializer::deserialize_any(&mut de, TopVisitor)
        .and_then(|t| de.end().map(|()| t))
        .map_err(|_| DecodeError::NotJson)?;
    let mut obj = match top {
        Top::Object(o) => o,
        Top::Array => return Err(DecodeError::Batch),
        Top::Scalar => return Err(DecodeError::NotEnvelope("not an object")),
    };
    if let Some(error) = obj.remove("error") {
        let (code, message) = match error {
            Small::Error { code, message } => (code, message),
            _ => (None, None),
        };
        let mut e = Map::new();
        if let Some(code) = code {
            e.insert("code".into(), code.into_value());
        }
        if let Some(message) = message {
            e.insert("message".into(), message.into_value());
        }
        obj.insert("error".into(), Small::Value(Value::Object(e)));
    }
    let value: Map<String, Value> = obj.into_iter().map(|(k, v)| (k, v.into_value())).collect();
    decode_value(Value::Object(value))
}

/// What [`peek`] keeps of the top-level value.
enum Top {
    Object(std::collections::BTreeMap<String, Small>),
    Array,
    Scalar,
}

/// What [`peek`] keeps of a member: scalars (the envelope's `jsonrpc`, `id`, `method`) as they
/// are, an error's code and message, and for anything else only that it was there.
enum Small {
    Value(Value),
    /// A container or a payload: present, not kept.
    Skipped,
    Error {
        code: Option<Box<Small>>,
        message: Option<Box<Small>>,
    },
}

impl Small {
    fn into_value(self) -> Value {
        match self {
            Small::Value(v) => v,
            // Not a string, number or null: what `decode_value` rejects an id or a method for,
            // as it would the container the server sent.
            Small::Skipped | Small::Error { .. } => Value::Array(Vec::new()),
        }
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
        Ok(Top::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<Top, E> {
        Ok(Top::Scalar)
    }
    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::Scalar)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Top::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut out = std::collections::BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = match key.as_str() {
                "jsonrpc" | "id" | "method" => map.next_value_seed(SmallSeed { error: false })?,
                "error" => map.next_value_seed(SmallSeed { error: true })?,
                "result" | "params" => {
                    map.next_value::<IgnoredAny>()?;
                    Small::Value(Value::Null)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            // `params` is left out of the message (`None`), as it says.
            if key != "params" {
                out.insert(key, v);
            }
        }
        Ok(Top::Object(out))
    }
}

/// A member's value: scalars kept, containers skipped; with `error`, an object's `code` and
/// `message` kept.
struct SmallSeed {
    error: bool,
}

impl<'de> DeserializeSeed<'de> for SmallSeed {
    type Value = Small;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Small, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SmallSeed {
    type Value = Small;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Small, E> {
        Ok(Small::Value(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Small, E> {
        Ok(Small::Value(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Small, E> {
        Ok(Small::Value(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Small, E> {
        Ok(Small::Value(
            serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<Small, E> {
        Ok(Small::Value(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Small, E> {
        Ok(Small::Value(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Small, E> {
        Ok(Small::Value(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Small, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Small::Skipped)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Small, A::Error> {
        let (mut code, mut message) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "code" if self.error => {
                    code = Some(Box::new(map.next_value_seed(SmallSeed { error: false })?));
                }
                "message" if self.error => {
                    message = Some(Box::new(map.next_value_seed(SmallSeed { error: false })?));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(if self.error {
            Small::Error { code, message }
        } else {
            Small::Skipped
        })
    }
}

/// Decodes one JSON-RPC message from an already parsed value.
pub fn decode_value(value: Value) -> Result<Decoded, DecodeError> {
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => return Err(DecodeError::Batch),
        _ => return Err(DecodeError::NotEnvelope("not an object")),
    };
    let bad_version = obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0");
    let id = match obj.get("id") {
        Some(v) => Some(Id::from_value(v).ok_or(DecodeError::NotEnvelope(
            "id is not a string, number or null",
        ))?),
        None => None,
    };
    let message = if let Some(method) = obj.get("method") {
        let method = method
            .as_str()
            .ok_or(DecodeError::NotEnvelope("method is not a string"))?
            .to_owned();
        let params = obj.remove("params");
        match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        }
    } else if let Some(result) = obj.remove("result") {
        let id = id.ok_or(DecodeError::NotEnvelope("result without id"))?;
        Message::Result { id, result }
    } else if let Some(error) = obj.remove("error") {
        let id = id.unwrap_or(Id::Null);
        let code = error
            .get("code")
            .and_then(Value::as_i64)
            .ok_or(DecodeError::NotEnvelope("error without an integer code"))?;
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let data = error.get("data").cloned();
        Message::Error {
            id,
            error: ErrorObject {
                code,
                message,
                data,
            },
        }
    } else {
        return Err(DecodeError::NotEnvelope("no method, result or error"));
    };
    Ok(Decoded {
        message,
        bad_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_each_kind() {
        let r = decode(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#).unwrap();
        assert_eq!(
            r.message,
            Message::Result {
                id: Id::Num(1),
                result: json!({"tools":[]})
            }
        );
        assert!(!r.bad_version);
        let e = decode(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Server not initialized"}}"#).unwrap();
        assert!(
            matches!(e.message, Message::Error { id: Id::Null, ref error } if error.code == -32000)
        );
        let n =
            decode(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#).unwrap();
        assert!(matches!(n.message, Message::Notification { .. }));
        let q = decode(r#"{"jsonrpc":"2.0","id":"a","method":"roots/list"}"#).unwrap();
        assert!(matches!(q.message, Message::Request { id: Id::Str(_), .. }));
    }

    #[test]
    fn tolerates_and_flags_defects() {
        let r = decode(r#"{"id":1,"result":{}}"#).unwrap();
        assert!(r.bad_version);
        let e = decode(r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse"}}"#).unwrap();
        assert_eq!(e.message.response_id(), Some(&Id::Null));
    }

    #[test]
    fn rejects_non_messages() {
        assert_eq!(decode("<html>ok</html>"), Err(DecodeError::NotJson));
        assert_eq!(decode(""), Err(DecodeError::NotJson));
        assert_eq!(decode("[]"), Err(DecodeError::Batch));
        assert!(matches!(decode("42"), Err(DecodeError::NotEnvelope(_))));
        assert!(matches!(
            decode(r#"{"jsonrpc":"2.0"}"#),
            Err(DecodeError::NotEnvelope(_))
        ));
        assert!(matches!(
            decode(r#"{"id":{},"result":1}"#),
            Err(DecodeError::NotEnvelope(_))
        ));
        assert!(matches!(
            decode(r#"{"id":1,"error":{"code":"x"}}"#),
            Err(DecodeError::NotEnvelope(_))
        ));
        assert!(matches!(
            decode(r#"{"method":5}"#),
            Err(DecodeError::NotEnvelope(_))
        ));
    }

    #[test]
    fn id_matching_tolerates_stringified_numbers() {
        assert!(Id::Num(3).matches(3));
        assert!(Id::Str("3".into()).matches(3));
        assert!(!Id::Str("server-error".into()).matches(3));
        assert!(!Id::Null.matches(3));
    }

    /// `decode`'s message with the payloads `peek` leaves out.
    fn stripped(d: Decoded) -> Decoded {
        let message = match d.message {
            Message::Request { id, method, .. } => Message::Request {
                id,
                method,
                params: None,
            },
            Message::Notification { method, .. } => Message::Notification {
                method,
                params: None,
            },
            Message::Result { id, .. } => Message::Result {
                id,
                result: Value::Null,
            },
            Message::Error { id, error } => Message::Error {
                id,
                error: ErrorObject {
                    data: None,
                    ..error
                },
            },
        };
        Decoded { message, ..d }
    }

    #[test]
    fn peek_answers_a_reply_whose_payload_is_unusable() {
        for result in [
            "[1e999999]",
            &format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"tools":{result}}}}}"#);
            let p = peek(&text).unwrap();
            assert_eq!(p.message.response_id(), Some(&Id::Num(7)));
            assert!(matches!(decode(&text), Err(DecodeError::Unusable(_))));
        }
        let e = peek(r#"{"id":3,"error":{"code":-32000,"message":"m","data":[1e999999]}}"#);
        assert!(
            matches!(e.unwrap().message, Message::Error { id: Id::Num(3), error } if error.code == -32000 && error.message == "m")
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// Whatever the envelope: `peek` says what `decode` says, without the payloads.
        #[test]
        fn peek_agrees_with_decode(value in crate::sniff::tests::envelope(), pretty in proptest::prelude::any::<bool>()) {
            let text = if pretty {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            }
            .unwrap();
            proptest::prop_assert_eq!(peek(&text), decode(&text).map(stripped), "{}", text);
        }

        /// The bounded reader reads what serde_json reads, and stays within its budget.
        #[test]
        fn bounded_read_agrees_with_serde_json(value in crate::sniff::tests::json(), budget in 0usize..4096) {
            let text = serde_json::to_string(&value).unwrap();
            let want: Value = serde_json::from_str(&text).unwrap();
            let all = json::parse(&text, &Limits::UNBOUNDED).unwrap();
            proptest::prop_assert_eq!(&all.value, &want);
            match json::parse(&text, &Limits { budget, list: None }) {
                Ok(p) => {
                    proptest::prop_assert_eq!(&p.value, &want);
                    proptest::prop_assert!(p.cost <= budget);
                }
                Err(e) => proptest::prop_assert_eq!(e.kind, json::JsonErrorKind::OverBudget { budget }),
            }
        }
    }
}
