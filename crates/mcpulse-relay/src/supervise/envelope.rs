//! The little the relay reads of a message: its id, method, a `tools/call`'s tool name, the
//! modern protocol version in `_meta`, and (for replies) whether it is an error or a tool error.
//!
//! One borrowed `serde` pass, no tree: the id stays a raw slice of the line, of a result only
//! `isError` is read, other fields are skipped unread, so a large message (a 1 MiB tool
//! result) costs one scan and no copies. The line itself is forwarded as it came. The rare
//! replies whose result the relay reads whole (`initialize`'s) parse it again
//! ([`raw_result`]).

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A JSON-RPC message's envelope, borrowing from its line.
#[derive(Debug, Deserialize)]
pub struct Envelope<'a> {
    /// The raw JSON of the id (`7`, `"abc"`), absent for notifications and `null` ids.
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub params: Option<Params<'a>>,
    /// The result, read in the same pass only as far as its `isError`. `Some` whenever the
    /// key is there, `"result": null` included: JSON-RPC allows a null result (a Go `nil`, a
    /// Rust `()`), and it is a reply like any other.
    #[serde(default, deserialize_with = "present")]
    pub result: Option<ResultHead>,
    #[serde(default)]
    pub error: Option<IgnoredAny>,
}

/// A field that is `Some` whenever its key is present, whatever its value (`null` too):
/// serde's own `Option` reads `null` as absent. An absent key is `None` through
/// `#[serde(default)]`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ResultHead>, D::Error> {
    ResultHead::deserialize(d).map(Some)
}

/// What the relay reads of a result: whether it is a tool error (`"isError": true`). Any JSON
/// is accepted (a result need not be an object, `isError` need not be a boolean): reading it
/// never turns a reply into junk.
#[derive(Debug, Default, Clone, Copy)]
pub struct ResultHead {
    pub is_error: bool,
}

impl<'de> Deserialize<'de> for ResultHead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ResultHead, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ResultHead;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON-RPC result")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ResultHead, A::Error> {
                let mut head = ResultHead::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "isError" {
                        head.is_error =
                            matches!(map.next_value::<IgnoredOr<bool>>()?, IgnoredOr::Is(true));
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(head)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ResultHead, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ResultHead::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
            fn visit_unit<E>(self) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
            fn visit_none<E>(self) -> Result<ResultHead, E> {
                Ok(ResultHead::default())
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A `T`, or anything else (skipped): a lenient field.
enum IgnoredOr<T> {
    Is(T),
    Other,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for IgnoredOr<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<IgnoredOr<T>, D::Error> {
        // Buffered only for `isError`'s value, a scalar in every sane reply.
        let v = serde_json::Value::deserialize(d)?;
        Ok(T::deserialize(v).map_or(IgnoredOr::Other, IgnoredOr::Is))
    }
}

/// The raw `result` of a reply line: for the few replies read whole (`initialize`'s), parsed
/// again rather than kept from every reply's pass.
pub fn raw_result(line: &[u8]) -> Option<&str> {
    #[derive(Deserialize)]
    struct Whole<'a> {
        #[serde(borrow, default)]
        result: Option<&'a RawValue>,
    }
    serde_json::from_slice::<Whole<'_>>(line)
        .ok()?
        .result
        .map(RawValue::get)
}

/// The params the relay looks at.
#[derive(Debug, Deserialize)]
pub struct Params<'a> {
    /// A `tools/call`'s tool.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<Meta<'a>>,
    /// A `notifications/cancelled`'s request.
    #[serde(borrow, default, rename = "requestId")]
    pub request_id: Option<&'a RawValue>,
}

/// A modern request's per-request `_meta`.
#[derive(Debug, Deserialize)]
pub struct Meta<'a> {
    #[serde(borrow, default, rename = "io.modelcontextprotocol/protocolVersion")]
    pub protocol_version: Option<Cow<'a, str>>,
}

/// What a message is, by the shape of its envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
    /// Valid JSON, but not a JSON-RPC message we can route (an array, a bare value...).
    Other,
}

impl<'a> Envelope<'a> {
    /// Parses a line; `None` when it is not a JSON object.
    pub fn parse(line: &'a [u8]) -> Option<Envelope<'a>> {
        // serde would also read a struct from an array (`[1]`): only an object is a message.
        if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        serde_json::from_slice(line)
            .ok()
            .or_else(|| Envelope::loose(line))
    }

    /// [`Envelope::parse`] without the lenient fallback: `None` also when a field the relay
    /// reads has an unexpected type or is given twice (`"params":{"name":"a","name":"b"}`).
    /// For a door that relays the body as it came: a reader where the last key wins would run
    /// a tool other than the one the policies saw.
    pub fn strict(line: &'a [u8]) -> Option<Envelope<'a>> {
        if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        serde_json::from_slice(line).ok()
    }

    /// The id and method of an object whose other fields do not have the expected types
    /// (`"params":{"name":7}`, `"method":7`): the server still answers it (with an error,
    /// likely), so the relay must still route that answer. Only on the failure path.
    fn loose(line: &'a [u8]) -> Option<Envelope<'a>> {
        #[derive(Deserialize)]
        struct Loose<'a> {
            #[serde(borrow, default)]
            id: Option<&'a RawValue>,
            #[serde(borrow, default)]
            method: Option<&'a RawValue>,
            #[serde(default, deserialize_with = "present")]
            result: Option<ResultHead>,
            #[serde(default)]
            error: Option<IgnoredAny>,
        }
        let l: Loose<'a> = serde_json::from_slice(line).ok()?;
        // A method that is not a string is still a request (an invalid one): its name is "".
        let method = l
            .method
            .map(|m| serde_json::from_str::<Cow<'a, str>>(m.get()).unwrap_or(Cow::Borrowed("")));
        Some(Envelope {
            id: l.id,
            method,
            params: None,
            result: l.result,
            error: l.error,
        })
    }

    pub fn kind(&self) -> Kind {
        match (&self.method, &self.id) {
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, Some(_)) if self.result.is_some() || self.error.is_some() => Kind::Response,
            (None, None) if self.error.is_some() => Kind::Response, // an error with a null id
            _ => Kind::Other,
        }
    }

    /// The id's raw JSON text.
    pub fn id_text(&self) -> Option<&'a str> {
        self.id.map(RawValue::get)
    }

    pub fn tool(&self) -> Option<&str> {
        self.params.as_ref()?.name.as_deref()
    }

    /// A `notifications/cancelled`'s request id, raw.
    pub fn cancelled_id(&self) -> Option<&'a str> {
        self.params.as_ref()?.request_id.map(RawValue::get)
    }

    /// The modern revision named in `_meta`, if any.
    pub fn modern_version(&self) -> Option<&str> {
        self.params
            .as_ref()?
            .meta
            .as_ref()?
            .protocol_version
            .as_deref()
    }

    /// For a reply: whether a result says `isError: true` (a tool error, not a JSON-RPC one).
    pub fn is_tool_error(&self) -> bool {
        self.result.is_some_and(|r| r.is_error)
    }
}

/// An id as the relay keys it: two spellings of one JSON value (`"caf\u00e9"` and `"café"`,
/// `"a\/b"` and `"a/b"`, `1e2`, `100.0` and `100`) give one key, since a server may re-encode
/// the id it echoes (a JavaScript server echoes `1.0` as `1`). The common case (a string
/// without escapes, an integer) is returned as it is.
pub fn canonical_id(raw: &str) -> Cow<'_, str> {
    let plain = !raw.contains('\\')
        && (raw.starts_with('"') || raw.bytes().all(|b| b.is_ascii_digit() || b == b'-'));
    if plain {
        return Cow::Borrowed(raw);
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        // A whole number written as a float is the integer's key (exactly representable ones:
        // below 2^53).
        Ok(serde_json::Value::Number(n))
            if n.as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
                && !n.is_i64()
                && !n.is_u64() =>
        {
            #[allow(clippy::cast_possible_truncation)]
            let whole = n.as_f64().map_or(0, |f| f as i64);
            Cow::Owned(whole.to_string())
        }
        Ok(v) => Cow::Owned(v.to_string()),
        Err(_) => Cow::Borrowed(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_of_each_kind() {
        let req = br#"{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":"echo","arguments":{"x":[1,2,{"id":9}]}}}"#;
        let e = Envelope::parse(req).unwrap();
        assert_eq!(e.kind(), Kind::Request);
        assert_eq!(e.id_text(), Some(r#""a\"b""#));
        assert_eq!(e.tool(), Some("echo"));
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(Envelope::parse(note).unwrap().kind(), Kind::Notification);
        let reply = br#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"isError":true}}"#;
        let e = Envelope::parse(reply).unwrap();
        assert_eq!(e.kind(), Kind::Response);
        assert!(e.is_tool_error());
        assert_eq!(raw_result(reply), Some(r#"{"content":[],"isError":true}"#));
        // Any result is a reply: not an object, or a non-boolean isError, is no tool error.
        for odd in [
            &br#"{"jsonrpc":"2.0","id":3,"result":[1,{"isError":true}]}"#[..],
            br#"{"jsonrpc":"2.0","id":3,"result":"text"}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{"isError":"yes","x":{"isError":true}}}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{"isError":false}}"#,
        ] {
            let e = Envelope::parse(odd).unwrap();
            assert_eq!(e.kind(), Kind::Response);
            assert!(!e.is_tool_error());
        }
        // A null result is a result (Go's nil, Rust's ()): a reply, not junk.
        let null = br#"{"jsonrpc":"2.0","id":4,"result":null}"#;
        let e = Envelope::parse(null).unwrap();
        assert_eq!(e.kind(), Kind::Response);
        assert!(!e.is_tool_error());
        assert_eq!(Envelope::strict(null).unwrap().kind(), Kind::Response);
        // No result key and no error: not a reply.
        assert_eq!(
            Envelope::parse(br#"{"jsonrpc":"2.0","id":4}"#)
                .unwrap()
                .kind(),
            Kind::Other
        );
        let err = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#;
        assert_eq!(Envelope::parse(err).unwrap().kind(), Kind::Response);
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(
            Envelope::parse(modern).unwrap().modern_version(),
            Some("2026-07-28")
        );
        assert!(Envelope::parse(b"hello").is_none());
        assert!(Envelope::parse(b"[1]").is_none());
        assert_eq!(Envelope::parse(b"{}").unwrap().kind(), Kind::Other);
    }

    #[test]
    fn ids_are_keyed_by_value_not_spelling() {
        assert_eq!(canonical_id(r#""caf\u00e9""#), r#""café""#);
        assert_eq!(canonical_id(r#""café""#), r#""café""#);
        assert_eq!(canonical_id(r#""a\/b""#), r#""a/b""#);
        assert_eq!(canonical_id(r#""a\"b""#), r#""a\"b""#);
        assert_eq!(canonical_id("-42"), "-42");
        assert_eq!(canonical_id("1e2"), canonical_id("100.0"));
        // A whole float is the integer (a JavaScript server echoes `1.0` as `1`).
        assert_eq!(canonical_id("1.0"), "1");
        assert_eq!(canonical_id("1e2"), "100");
        assert_eq!(canonical_id("-3.0"), "-3");
        assert_eq!(canonical_id("-0.0"), "0");
        assert_eq!(canonical_id("1.5"), "1.5");
        assert_eq!(canonical_id("1e300"), canonical_id("1.0e300"));
    }

    #[test]
    fn a_request_with_mistyped_fields_still_has_its_id() {
        let e = Envelope::parse(
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":7}}"#,
        )
        .unwrap();
        assert_eq!(e.kind(), Kind::Request);
        assert_eq!(e.id_text(), Some("3"));
        assert_eq!(e.method.as_deref(), Some("tools/call"));
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":"x","method":7}"#).unwrap();
        assert_eq!(e.kind(), Kind::Request);
        assert_eq!(e.id_text(), Some(r#""x""#));
        // The lenient reading keeps a null result a reply too.
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":5,"result":null,"method":7}"#);
        assert_eq!(e.unwrap().kind(), Kind::Request);
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":5,"result":null,"params":7}"#);
        assert_eq!(e.unwrap().kind(), Kind::Response);
    }
}
