//! Server-Sent Events framing (the WHATWG event-stream format), incremental and capped.
//!
//! Handles `event:`, `data:` (several lines joined with `\n`), `id:` and `retry:` fields, the
//! three line endings (`\n`, `\r\n`, `\r`), comment lines (`:` keep-alives, ignored) and a
//! leading byte-order mark. Events with empty data (priming events) are still returned: the
//! caller decides what to skip. An event over the cap is dropped, but still says whose reply it
//! was, when it was one (see [`crate::sniff`]).

use crate::jsonrpc::Id;
use crate::sniff::ReplySniffer;

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
    /// An event whose data grew past the cap; its data was dropped. `reply_to` is the request
    /// it answered, when its data said so.
    TooLarge {
        len_at_least: usize,
        reply_to: Option<Id>,
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
    /// Once the event is over the cap: its data, looked at as it passes (see [`ReplySniffer`]).
    sniffer: Option<ReplySniffer>,
    /// The line being read went over the cap, and (a data line) its value goes to the sniffer
    /// byte by byte.
    line_over: bool,
    line_sniffed: bool,
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
            sniffer: None,
            line_over: false,
            line_sniffed: false,
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
                        // A single line past the cap: stop buffering it. A data line's value
                        // goes on to the sniffer.
                        if !self.line_over {
                            self.line_over = true;
                            self.start_line_sniff();
                        }
                        if self.line_sniffed
                            && let Some(sniffer) = &mut self.sniffer
                        {
                            sniffer.push(&[b]);
                        }
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

    /// The line being read has just gone over the cap: if it is a data line, the sniffer takes
    /// the event's data kept so far and what this line holds, then the rest as it comes.
    fn start_line_sniff(&mut self) {
        // The stream's first line may still carry its byte-order mark (stripped at its end).
        let line = match self.line.strip_prefix("\u{feff}".as_bytes()) {
            Some(rest) if !self.started => rest,
            _ => &self.line[..],
        };
        let Some(value) = line.strip_prefix(b"data:") else {
            return;
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let sniffer = data_sniffer(&mut self.sniffer, &self.pending.data);
        sniffer.push(b"\n");
        sniffer.push(value);
        self.line_sniffed = true;
    }

    fn end_line(&mut self, out: &mut Vec<Item>) {
        self.line_over = false;
        let line_sniffed = std::mem::take(&mut self.line_sniffed);
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
            // Over the cap by a line that is not data (a long `id:` or comment), the data kept
            // whole is looked at now.
            let len_at_least = self.oversize_len + self.held();
            let sniffer = data_sniffer(&mut self.sniffer, &self.pending.data);
            out.push(Item::TooLarge {
                len_at_least,
                reply_to: sniffer.reply_id(),
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
        // What the event holds so far: its data, name and id count together against the cap
        // (each line alone is within it; three of them would be three times it).
        let name_len = self.pending.event.as_ref().map_or(0, String::len);
        let id_len = self.pending.id.as_ref().map_or(0, String::len);
        let held = self.pending.data.len() + name_len + id_len;
        match field {
            "event" => {
                if held - name_len + value.len() > self.max_event {
                    self.oversize = true;
                    self.oversize_len += value.len();
                } else {
                    self.pending.event = Some(value.to_owned());
                }
                self.has_fields = true;
            }
            "data" => {
                let over = self.oversize || held + value.len() > self.max_event;
                if over && !line_sniffed {
                    // JSON takes the newline that joins data lines as whitespace.
                    let sniffer = data_sniffer(&mut self.sniffer, &self.pending.data);
                    sniffer.push(b"\n");
                    sniffer.push(value.as_bytes());
                }
                if held + value.len() > self.max_event {
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
                if held - id_len + value.len() > self.max_event {
                    self.oversize = true;
                    self.oversize_len += value.len();
                } else if !value.contains('\0') {
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

    /// What the pending event holds: its data, name and id.
    fn held(&self) -> usize {
        self.pending.data.len()
            + self.pending.event.as_ref().map_or(0, String::len)
            + self.pending.id.as_ref().map_or(0, String::len)
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
        self.sniffer = None;
        self.data_lines = 0;
    }
}

/// The sniffer of an event over the cap, first fed the data kept before it went over.
fn data_sniffer<'a>(sniffer: &'a mut Option<ReplySniffer>, kept: &str) -> &'a mut ReplySniffer {
    sniffer.get_or_insert_with(|| {
        let mut s = ReplySniffer::new();
        s.push(kept.as_bytes());
        s
    })
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

    /// An event's name, id and data count together against the cap: three lines each within
    /// it are one event of three times it.
    #[test]
    fn name_id_and_data_count_together() {
        let mut d = Decoder::new(16);
        // Each line within the cap (16 bytes); the event's name, id and data together (24)
        // over it.
        let items = d.push(b"event: eeeeeeeee\nid: iiiiiiiiiiii\ndata: ddd\n\ndata: ok\n\n");
        assert!(
            matches!(items[0], Item::TooLarge { len_at_least, .. } if len_at_least >= 24),
            "{items:?}"
        );
        assert!(
            matches!(&items[1], Item::Event(ev) if ev.data == "ok"),
            "{items:?}"
        );
        // Within the cap together: one event.
        let items = d.push(b"event: message\nid: 7\ndata: {}\n\n");
        assert!(
            matches!(&items[0], Item::Event(ev) if ev.kind() == "message" && ev.id.as_deref() == Some("7"))
        );
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
    fn an_oversize_event_says_whose_reply_it_was() {
        let reply = r#"{"result":{"tools":["0123456789abcdef"]},"jsonrpc":"2.0","id":5}"#;
        let id = |items: &[Item]| match items {
            [Item::TooLarge { reply_to, .. }] => reply_to.clone(),
            other => panic!("{other:?}"),
        };
        // One long data line, fed whole and byte by byte; data lines that each fit but together
        // do not; a line that went over before the id came.
        let stream = format!("event: message\ndata: {reply}\n\n");
        let mut d = Decoder::new(16);
        assert_eq!(id(&d.push(stream.as_bytes())), Some(Id::Num(5)));
        let mut items = Vec::new();
        for b in stream.as_bytes() {
            items.extend(d.push(&[*b]));
        }
        assert_eq!(id(&items), Some(Id::Num(5)));
        // Data lines that each fit but together do not; a line that went over before the id
        // came; two lines over the cap, the id in the second.
        let pad = "x".repeat(40);
        for (text, cap, want) in [
            (
                "data: {\"result\":\ndata: {\"a\":\"0123\"},\ndata: \"id\":6}\n\n".to_owned(),
                20,
                6,
            ),
            (
                format!("data: {{\"result\":\"{pad}\",\ndata: \"id\":7}}\n\n"),
                16,
                7,
            ),
            (
                format!("data: {{\"result\":\"{pad}\",\ndata: \"pad\":\"{pad}\",\"id\":8}}\n\n"),
                16,
                8,
            ),
        ] {
            let got = id(&Decoder::new(cap).push(text.as_bytes()));
            assert_eq!(got, Some(Id::Num(want)), "{text}");
        }
        // A notification, or a long line that is not data, answers nobody; the next event is
        // sniffed afresh.
        let note =
            "data: {\"method\":\"notifications/message\",\"params\":{\"id\":1,\"result\":2}}\n\n";
        assert_eq!(id(&d.push(note.as_bytes())), None);
        let long_event = format!(
            "event: {}\ndata: {{\"id\":1,\"result\":{{}}}}\n\n",
            "e".repeat(40)
        );
        assert_eq!(
            id(&Decoder::new(16).push(long_event.as_bytes())),
            Some(Id::Num(1))
        );
        assert_eq!(id(&d.push(b"data: 0123456789abcdef0123\n\n")), None);
        // After a byte-order mark at the start of the stream too.
        let bom = format!("\u{feff}data: {reply}\n\n");
        assert_eq!(id(&Decoder::new(16).push(bom.as_bytes())), Some(Id::Num(5)));
        // Data within the cap, then a line that is not data over it: the data still tells.
        let long_after = format!(
            "data: {{\"id\":1,\"result\":0}}\nevent: {}\n\n",
            "e".repeat(60)
        );
        assert_eq!(
            id(&Decoder::new(30).push(long_after.as_bytes())),
            Some(Id::Num(1))
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
