//! Newline-delimited frames, as stdio MCP servers write them.
//!
//! The decoder is incremental (bytes in, lines out) and capped: a line longer than the cap is
//! reported once and skipped, so a server that writes a gigabyte without a newline costs us the
//! cap, not the gigabyte. A skipped line still says whose reply it was, when it was one (see
//! [`crate::sniff`]).

use crate::jsonrpc::Id;
use crate::sniff::ReplySniffer;

/// One item out of the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line, without its `\n` (and without a trailing `\r`), lossily decoded as UTF-8.
    Text(String),
    /// A line longer than the cap; its bytes were dropped. `reply_to` is the request it
    /// answered, when its bytes said so.
    TooLong {
        len_at_least: usize,
        reply_to: Option<Id>,
    },
}

/// Splits a byte stream into lines.
#[derive(Debug)]
pub struct LineDecoder {
    buf: Vec<u8>,
    max: usize,
    /// Inside an over-long line: bytes are dropped until the next newline, and looked at on
    /// the way for the id of the reply it may be.
    skipping: Option<ReplySniffer>,
    skipped: usize,
}

impl LineDecoder {
    pub fn new(max_line: usize) -> Self {
        LineDecoder {
            buf: Vec::new(),
            max: max_line,
            skipping: None,
            skipped: 0,
        }
    }

    /// Feeds bytes and returns the lines they complete.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Line> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            match bytes.iter().position(|&b| b == b'\n') {
                Some(pos) => {
                    let (head, rest) = bytes.split_at(pos);
                    bytes = &rest[1..];
                    if let Some(mut sniffer) = self.skipping.take() {
                        sniffer.push(head);
                        out.push(Line::TooLong {
                            len_at_least: self.skipped + head.len(),
                            reply_to: sniffer.reply_id(),
                        });
                        self.skipped = 0;
                    } else if self.buf.len() + head.len() > self.max {
                        let mut sniffer = self.start_skipping();
                        sniffer.push(head);
                        out.push(Line::TooLong {
                            len_at_least: std::mem::take(&mut self.skipped) + head.len(),
                            reply_to: sniffer.reply_id(),
                        });
                    } else {
                        self.buf.extend_from_slice(head);
                        out.push(Line::Text(take_line(&mut self.buf)));
                    }
                }
                None => {
                    if let Some(sniffer) = &mut self.skipping {
                        sniffer.push(bytes);
                        self.skipped += bytes.len();
                    } else if self.buf.len() + bytes.len() > self.max {
                        let mut sniffer = self.start_skipping();
                        sniffer.push(bytes);
                        self.skipped += bytes.len();
                        self.skipping = Some(sniffer);
                    } else {
                        self.buf.extend_from_slice(bytes);
                    }
                    bytes = &[];
                }
            }
        }
        out
    }

    /// Drops the line buffered so far (counted in `skipped`) after a sniffer has seen it.
    fn start_skipping(&mut self) -> ReplySniffer {
        let mut sniffer = ReplySniffer::new();
        sniffer.push(&self.buf);
        self.skipped = self.buf.len();
        self.buf.clear();
        sniffer
    }

    /// At end of stream: the unterminated last line, if any.
    pub fn finish(&mut self) -> Option<Line> {
        if let Some(sniffer) = self.skipping.take() {
            return Some(Line::TooLong {
                len_at_least: std::mem::take(&mut self.skipped),
                reply_to: sniffer.reply_id(),
            });
        }
        if self.buf.is_empty() {
            None
        } else {
            Some(Line::Text(take_line(&mut self.buf)))
        }
    }
}

fn take_line(buf: &mut Vec<u8>) -> String {
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    let s = String::from_utf8_lossy(buf).into_owned();
    buf.clear();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Line {
        Line::Text(s.into())
    }

    fn too_long(len_at_least: usize) -> Line {
        Line::TooLong {
            len_at_least,
            reply_to: None,
        }
    }

    #[test]
    fn a_dropped_line_says_whose_reply_it_was() {
        let reply = br#"{"jsonrpc":"2.0","result":{"tools":["0123456789"]},"id":4}"#;
        // Over the cap within one chunk, across chunks, and cut by the end of the stream.
        let mut d = LineDecoder::new(16);
        let mut line = reply.to_vec();
        line.push(b'\n');
        let want = Line::TooLong {
            len_at_least: reply.len(),
            reply_to: Some(Id::Num(4)),
        };
        assert_eq!(d.push(&line), vec![want.clone()]);
        let mut got = Vec::new();
        for chunk in line.chunks(5) {
            got.extend(d.push(chunk));
        }
        assert_eq!(got, vec![want.clone()]);
        assert_eq!(d.push(reply), vec![]);
        assert_eq!(d.finish(), Some(want));
        // A request or a notification is nobody's reply.
        let note =
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"0123456789"}}"#;
        assert!(matches!(
            d.push(&[&note[..], b"\n"].concat())[..],
            [Line::TooLong { reply_to: None, .. }]
        ));
    }

    #[test]
    fn splits_across_chunks() {
        let mut d = LineDecoder::new(100);
        assert_eq!(d.push(b"{\"a\":"), vec![]);
        assert_eq!(d.push(b"1}\n{\"b\""), vec![text("{\"a\":1}")]);
        assert_eq!(d.push(b":2}\r\n\n"), vec![text("{\"b\":2}"), text("")]);
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn caps_long_lines_and_recovers() {
        let mut d = LineDecoder::new(4);
        assert_eq!(d.push(b"abc"), vec![]);
        assert_eq!(d.push(b"defgh"), vec![]);
        assert_eq!(d.push(b"ij\nok\n"), vec![too_long(10), text("ok")]);
        assert_eq!(d.push(b"toolong\n"), vec![too_long(7)]);
        assert_eq!(d.push(b"tail"), vec![]);
        assert_eq!(d.finish(), Some(text("tail")));
    }

    #[test]
    fn invalid_utf8_is_lossy_not_fatal() {
        let mut d = LineDecoder::new(10);
        assert_eq!(d.push(b"\xff\xfe\n"), vec![text("\u{fffd}\u{fffd}")]);
    }
}
