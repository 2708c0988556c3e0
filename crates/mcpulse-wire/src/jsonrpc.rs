//! A tolerant JSON-RPC 2.0 envelope decoder.
//!
//! Servers send all sorts of things; the decoder classifies rather than rejects. It never
//! panics, keeps what it needs of the raw value, and reports envelope defects (a missing
//! `"jsonrpc":"2.0"`, an error object without a numeric code) as flags for the judge.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// JSON, but an array: a batch, which no revision we speak allows in replies to us.
    Batch,
    /// JSON, but not an object with the members of a request, notification or response.
    NotEnvelope(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotJson => f.write_str("not JSON"),
            DecodeError::Batch => f.write_str("a JSON-RPC batch (array)"),
            DecodeError::NotEnvelope(why) => write!(f, "not a JSON-RPC message: {why}"),
        }
    }
}

/// Decodes one JSON-RPC message from text.
pub fn decode(text: &str) -> Result<Decoded, DecodeError> {
    let value: Value = serde_json::from_str(text).map_err(|_| DecodeError::NotJson)?;
    decode_value(value)
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
}
