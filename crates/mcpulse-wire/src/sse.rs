//! Server-Sent Events framing (the WHATWG event-stream format), incremental and capped.
//!
//! Handles `event:`, `data:` (several lines joined with `\n`), `id:` and `retry:` fields, the
//! three line endings (`\n`, `\r\n`, `\r`), comment lines (`:` keep-alives, ignored) and a
//! leading byte-order mark. Events with empty data (priming events) are still returned: the
//! caller decides what to skip.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field; `None` means the default type, `message`.
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
    pub retry_ms: Option<u64>,
}

impl Event {
    /// The event type, with the default applied.
    pub fn kind(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// What the decoder yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Event(Event),
    /// An event whose data grew past the cap; its data was dropped.
    TooLarge {
        len_at_least: usize,
    },
}

/// Incremental SSE decoder.
#[derive(Debug)]
pub struct Decoder {
    line: Vec<u8>,
    pending: Event,
    has_fields: bool,
    data_lines: usize,
    max_event: usize,
    oversize: bool,
    oversize_len: usize,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    after_cr: bool,
    started: bool,
}

impl Decoder {
    pub fn new(max_event: usize) -> Self {
        Decoder {
            line: Vec::new(),
            pending: Event::default(),
            has_fields: false,
            data_lines: 0,
            max_event,
            oversize: false,
            oversize_len: 0,
            after_cr: false,
            started: false,
        }
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Item> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(&mut out),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut out);
                }
                _ => {
                    if self.line.len() > self.max_event {
                        // A single line past the cap: stop buffering it.
                        self.oversize = true;
                        self.oversize_len += 1;
                    } else {
                        self.line.push(b);
                    }
                }
            }
        }
        out
    }

    fn end_line(&mut self, out: &mut Vec<Item>) {
        let mut line = std::mem::take(&mut self.line);
        if !self.started {
            self.started = true;
            if line.starts_with("\u{feff}".as_bytes()) {
                line.drain(..3);
            }
        }
        if line.is_empty() && !self.oversize {
            self.dispatch(out);
            return;
        }
        if self.oversize && line.is_empty() {
            out.push(Item::TooLarge {
                len_at_least: self.oversize_len + self.pending.data.len(),
            });
            self.reset();
            return;
        }
        if line.first() == Some(&b':') {
            return; // comment / keep-alive
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let v = &text[i + 1..];
                (&text[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&text[..], ""),
        };
        match field {
            "event" => {
                self.pending.event = Some(value.to_owned());
                self.has_fields = true;
            }
            "data" => {
                if self.pending.data.len() + value.len() > self.max_event {
                    self.oversize = true;
                    self.oversize_len += value.len();
                } else {
                    if self.has_data() {
                        self.pending.data.push('\n');
                    }
                    self.pending.data.push_str(value);
                    self.data_lines += 1;
                }
                self.has_fields = true;
            }
            "id" => {
                if !value.contains('\0') {
                    self.pending.id = Some(value.to_owned());
                }
                self.has_fields = true;
            }
            "retry" => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.pending.retry_ms = Some(ms);
                }
                self.has_fields = true;
            }
            _ => {}
        }
    }

    fn has_data(&self) -> bool {
        self.data_lines > 0
    }

    fn dispatch(&mut self, out: &mut Vec<Item>) {
        if self.has_fields {
            out.push(Item::Event(std::mem::take(&mut self.pending)));
        }
        self.reset();
    }

    fn reset(&mut self) {
        self.pending = Event::default();
        self.has_fields = false;
        self.oversize = false;
        self.oversize_len = 0;
        self.data_lines = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(items: Vec<Item>) -> Vec<Event> {
        items
            .into_iter()
            .map(|i| match i {
                Item::Event(e) => e,
                Item::TooLarge { .. } => panic!("unexpected TooLarge"),
            })
            .collect()
    }

    #[test]
    fn priming_event_then_message() {
        let mut d = Decoder::new(1024);
        let got = events(d.push(b"id: 0\ndata: \n\nevent: message\nid: 1\ndata: {\"id\":1}\n\n"));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].data, "");
        assert_eq!(got[0].id.as_deref(), Some("0"));
        assert_eq!(got[1].kind(), "message");
        assert_eq!(got[1].data, "{\"id\":1}");
    }

    #[test]
    fn comments_multiline_data_and_line_endings() {
        let mut d = Decoder::new(1024);
        let mut got = events(d.push(b": keep-alive\r\n\r\ndata: a\r"));
        got.extend(events(
            d.push(b"\ndata:b\r\revent: endpoint\ndata: /m?s=1\n\n"),
        ));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].data, "a\nb");
        assert_eq!(got[1].kind(), "endpoint");
        assert_eq!(got[1].data, "/m?s=1");
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let stream = b"\xef\xbb\xbfevent: endpoint\ndata: /messages\nretry: 100\n\n";
        let mut whole = Decoder::new(64);
        let a = events(whole.push(stream));
        let mut byte = Decoder::new(64);
        let mut b = Vec::new();
        for x in stream {
            b.extend(events(byte.push(&[*x])));
        }
        assert_eq!(a, b);
        assert_eq!(a[0].kind(), "endpoint");
        assert_eq!(a[0].retry_ms, Some(100));
    }

    #[test]
    fn oversize_event_is_reported_and_stream_recovers() {
        let mut d = Decoder::new(8);
        let items = d.push(b"data: 0123456789abcdef\n\ndata: ok\n\n");
        assert!(matches!(items[0], Item::TooLarge { .. }));
        assert_eq!(
            items[1],
            Item::Event(Event {
                data: "ok".into(),
                ..Event::default()
            })
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut d = Decoder::new(16);
        for chunk in [
            &b"\x00\xff:::\r\r\n\n"[..],
            b"data",
            b":\xc3",
            b"\n\n",
            b"id: a\x00b\n\n",
        ] {
            let _ = d.push(chunk);
        }
    }
}
