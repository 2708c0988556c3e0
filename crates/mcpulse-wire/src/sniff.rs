//! Whose reply is a message too large to keep? A streaming look at the top level of a JSON
//! text, in constant memory.
//!
//! A frame over the response cap is dropped, not buffered (a server may send a gigabyte). Over a
//! channel shared by several requests (a stdio server's stdout, the legacy SSE stream) the
//! dropped frame may still have been the reply one of them waits for; without its id that
//! request would wait until the probe's deadline. [`ReplySniffer`] is fed the frame's bytes as
//! they pass and keeps only what it needs: the top-level `"id"` (a number or string of a few
//! bytes) and whether the top level names a `result` or an `error` and no `method`. Keys may
//! come in any order (an SDK may write `id` after a megabyte of `result`), so every byte goes
//! through a small tokenizer: nesting depth, strings and their escapes.
//!
//! Why by hand: serde_json parses whole texts, and a streaming JSON tokenizer crate would be a
//! dependency for these hundred lines.

use crate::jsonrpc::Id;

/// The longest top-level key this looks at (`"result"`), and the longest id it keeps.
const MAX_KEY: usize = 8;
const MAX_ID: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    Result,
    Error,
    Method,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Top {
    /// Before the first non-whitespace byte.
    Start,
    /// Inside the top-level object, where the next string is a key.
    ExpectKey,
    /// After a key, before its `:`.
    AfterKey,
    /// After a `:`, before the value.
    ExpectValue,
    /// Inside a scalar value (number, `true`, …) of the top level.
    Scalar,
    /// After a top-level value, before `,` or `}`.
    AfterValue,
    /// The top-level object ended.
    Done,
    /// Not an object, or not JSON: nothing to tell.
    Broken,
}

/// Fed the bytes of one JSON text, in chunks of any size; says whose reply it was.
#[derive(Debug, Clone)]
pub struct ReplySniffer {
    top: Top,
    /// Nesting depth: 1 inside the top-level object.
    depth: usize,
    in_string: bool,
    escaped: bool,
    key: Vec<u8>,
    current: Key,
    /// The raw bytes of the `id` value being read (a string with its quotes).
    id_raw: Vec<u8>,
    id_over: bool,
    id: Option<Vec<u8>>,
    answers: bool,
    method: bool,
}

impl Default for ReplySniffer {
    fn default() -> Self {
        ReplySniffer {
            top: Top::Start,
            depth: 0,
            in_string: false,
            escaped: false,
            key: Vec::new(),
            current: Key::Other,
            id_raw: Vec::new(),
            id_over: false,
            id: None,
            answers: false,
            method: false,
        }
    }
}

impl ReplySniffer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes of the text.
    pub fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if matches!(self.top, Top::Broken | Top::Done) {
                return;
            }
            if self.in_string {
                self.string_byte(b);
            } else {
                self.byte(b);
            }
        }
    }

    /// The id of the reply this text is (a `result` or an `error` with an id, and no
    /// `method`), when the bytes seen so far tell it.
    pub fn reply_id(&self) -> Option<Id> {
        if self.top == Top::Broken || !self.answers || self.method {
            return None;
        }
        let raw = self.id.as_ref()?;
        let value: serde_json::Value = serde_json::from_slice(raw).ok()?;
        match Id::from_value(&value)? {
            Id::Null => None,
            id => Some(id),
        }
    }

    /// The raw JSON of the top-level `id` (a number or a string of at most 64 bytes), whatever
    /// the message is: a request's too (the supervisor answers a too-long request by its id).
    pub fn id_raw(&self) -> Option<&[u8]> {
        if self.top == Top::Broken {
            return None;
        }
        self.id.as_deref()
    }

    /// Whether the bytes seen so far make a reply: a `result` or an `error`, and no `method`.
    pub fn is_reply(&self) -> bool {
        self.top != Top::Broken && self.answers && !self.method
    }

    /// Whether it has a top-level `method` (a request, given an id; else a notification).
    pub fn is_request(&self) -> bool {
        self.top != Top::Broken && self.method
    }

    fn string_byte(&mut self, b: u8) {
        let top_level = self.depth == 1;
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if top_level {
                match self.top {
                    // A key written with escapes (`"\u0069d"`) may be any key: the text is
                    // not read further rather than misread.
                    Top::ExpectKey if self.key.contains(&b'\\') => self.top = Top::Broken,
                    Top::ExpectKey => {
                        self.current = match self.key.as_slice() {
                            b"id" => Key::Id,
                            b"result" => Key::Result,
                            b"error" => Key::Error,
                            b"method" => Key::Method,
                            _ => Key::Other,
                        };
                        self.top = Top::AfterKey;
                    }
                    Top::Scalar => {
                        self.id_raw_push(b);
                        self.end_value();
                    }
                    _ => {}
                }
            }
            return;
        }
        if top_level {
            match self.top {
                Top::ExpectKey if self.key.len() <= MAX_KEY => self.key.push(b),
                Top::Scalar => self.id_raw_push(b),
                _ => {}
            }
        }
    }

    fn byte(&mut self, b: u8) {
        let ws = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        match self.top {
            Top::Start => match b {
                _ if ws => {}
                b'{' => {
                    self.depth = 1;
                    self.top = Top::ExpectKey;
                }
                _ => self.top = Top::Broken,
            },
            Top::ExpectKey => match b {
                _ if ws => {}
                b'"' => {
                    self.key.clear();
                    self.in_string = true;
                }
                b'}' => self.close(),
                _ => self.top = Top::Broken,
            },
            Top::AfterKey => match b {
                _ if ws => {}
                b':' => {
                    match self.current {
                        Key::Result | Key::Error => self.answers = true,
                        Key::Method => self.method = true,
                        Key::Id | Key::Other => {}
                    }
                    self.top = Top::ExpectValue;
                }
                _ => self.top = Top::Broken,
            },
            Top::ExpectValue => match b {
                _ if ws => {}
                b'{' | b'[' => {
                    if self.current == Key::Id {
                        // Not an id a reply can carry, and it replaces any before it.
                        self.id = None;
                    }
                    self.depth += 1;
                    self.top = Top::AfterValue;
                }
                b'"' => {
                    self.start_scalar(b);
                    self.in_string = true;
                }
                b'}' | b']' | b',' | b':' => self.top = Top::Broken,
                _ => self.start_scalar(b),
            },
            Top::Scalar => match b {
                _ if ws => self.end_value(),
                b',' => {
                    self.end_value();
                    self.top = Top::ExpectKey;
                }
                b'}' => {
                    self.end_value();
                    self.close();
                }
                _ => self.id_raw_push(b),
            },
            Top::AfterValue if self.depth > 1 => match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => self.depth -= 1,
                _ => {}
            },
            Top::AfterValue => match b {
                _ if ws => {}
                b',' => self.top = Top::ExpectKey,
                b'}' => self.close(),
                _ => self.top = Top::Broken,
            },
            Top::Done | Top::Broken => {}
        }
    }

    fn start_scalar(&mut self, b: u8) {
        self.top = Top::Scalar;
        self.id_raw.clear();
        self.id_over = false;
        self.id_raw_push(b);
    }

    fn id_raw_push(&mut self, b: u8) {
        if self.current != Key::Id {
            return;
        }
        if self.id_raw.len() < MAX_ID {
            self.id_raw.push(b);
        } else {
            self.id_over = true;
        }
    }

    fn end_value(&mut self) {
        if self.current == Key::Id {
            // A second `id` replaces the first, as serde_json's last-wins map does.
            self.id = (!self.id_over).then(|| std::mem::take(&mut self.id_raw));
        }
        self.top = Top::AfterValue;
    }

    fn close(&mut self) {
        self.depth = 0;
        self.top = Top::Done;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::jsonrpc::{self, Message};
    use proptest::prelude::*;

    fn sniff(text: &str) -> Option<Id> {
        let mut s = ReplySniffer::new();
        s.push(text.as_bytes());
        s.reply_id()
    }

    #[test]
    fn replies_with_the_id_anywhere() {
        assert_eq!(
            sniff(r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#),
            Some(Id::Num(7))
        );
        assert_eq!(
            sniff(r#"{"result":{"a":"}\"{[","b":[1,{"id":9}]},"jsonrpc":"2.0","id":"x-1"}"#),
            Some(Id::Str("x-1".into()))
        );
        assert_eq!(
            sniff(r#" { "error" : {"code":-1,"message":"m"} , "id" : 12 } "#),
            Some(Id::Num(12))
        );
        // The id is known before the text ends (the rest was cut).
        assert_eq!(
            sniff(r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"#),
            Some(Id::Num(3))
        );
    }

    #[test]
    fn not_replies() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"id":1,"result":2}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1.5e400,"result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            "<html>",
            "",
            r#"{"id":1 2,"result":{}}"#,
        ] {
            assert_eq!(sniff(text), None, "{text}");
        }
    }

    #[test]
    fn keys_are_read_as_the_decoder_reads_them() {
        // The last `id` wins, as in the decoder; one that is not a scalar is no id.
        assert_eq!(sniff(r#"{"id":1,"result":{},"id":2}"#), Some(Id::Num(2)));
        assert_eq!(sniff(r#"{"id":1,"result":{},"id":[2]}"#), None);
        assert_eq!(sniff(r#"{"id":1,"result":{},"id":{"a":2}}"#), None);
        // A key with escapes may be `id` or `method`: nothing is told.
        assert_eq!(sniff(r#"{"id":1,"result":{},"\u0069d":2}"#), None);
        assert_eq!(sniff(r#"{"id":1,"result":{},"\u006dethod":"x"}"#), None);
        // Escapes in values and nested keys are fine.
        assert_eq!(
            sniff(r#"{"id":"a\"b","result":{"\u0069d":9,"s":"\\"}}"#),
            Some(Id::Str("a\"b".into()))
        );
    }

    #[test]
    fn a_long_id_is_not_kept() {
        let long = "9".repeat(200);
        assert_eq!(sniff(&format!(r#"{{"id":{long},"result":{{}}}}"#)), None);
    }

    pub(crate) fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-z\"\\\\{}]{0,8}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(crate) fn envelope() -> impl Strategy<Value = serde_json::Value> {
        (
            prop::collection::btree_map(
                prop_oneof![
                    Just("id".to_owned()),
                    Just("result".to_owned()),
                    Just("error".to_owned()),
                    Just("method".to_owned()),
                    Just("jsonrpc".to_owned()),
                    "[a-z]{1,9}",
                ],
                json(),
                0..6,
            ),
            prop_oneof![
                any::<i64>().prop_map(serde_json::Value::from),
                ".{0,10}".prop_map(serde_json::Value::from),
                json(),
            ],
        )
            .prop_map(|(mut map, id)| {
                map.insert("id".to_owned(), id);
                serde_json::Value::Object(map.into_iter().collect())
            })
    }

    proptest! {
        /// Whatever the envelope, its key order, its spacing and its chunking: the sniffer
        /// names the reply the full decoder would name, or says nothing.
        #[test]
        fn agrees_with_the_decoder(
            value in envelope(),
            pretty in any::<bool>(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let text = if pretty {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            }
            .unwrap_or_default();
            let bytes = text.as_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.sort_unstable();
            let mut s = ReplySniffer::new();
            let mut from = 0;
            for to in at {
                s.push(&bytes[from..to]);
                from = to;
            }
            s.push(&bytes[from..]);
            // What the sniffer is to say: the id of an object with a `result` or an `error`
            // and no `method` (looser than the decoder, which also wants an error's code), if
            // the id is short enough to keep.
            let loose = value.as_object().and_then(|o| {
                let answers = o.contains_key("result") || o.contains_key("error");
                let short = serde_json::to_string(o.get("id")?).ok()?.len() <= MAX_ID;
                match Id::from_value(o.get("id")?)? {
                    Id::Null => None,
                    id => (answers && short && !o.contains_key("method")).then_some(id),
                }
            });
            prop_assert_eq!(&s.reply_id(), &loose, "{}", text);
            // And every reply the decoder names, the sniffer names too (ids kept short).
            if let Ok(Message::Result { id, .. } | Message::Error { id, .. }) =
                jsonrpc::decode(&text).map(|d| d.message)
                && id != Id::Null
                && loose.is_some()
            {
                prop_assert_eq!(s.reply_id(), Some(id));
            }
        }
    }
}
