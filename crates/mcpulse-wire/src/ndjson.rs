//! Newline-delimited frames, as stdio MCP servers write them.
//!
//! The decoder is incremental (bytes in, lines out) and capped: a line longer than the cap is
//! reported once and skipped, so a server that writes a gigabyte without a newline costs us the
//! cap, not the gigabyte.

/// One item out of the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line, without its `\n` (and without a trailing `\r`), lossily decoded as UTF-8.
    Text(String),
    /// A line longer than the cap; its bytes were dropped.
    TooLong { len_at_least: usize },
}

/// Splits a byte stream into lines.
#[derive(Debug)]
pub struct LineDecoder {
    buf: Vec<u8>,
    max: usize,
    /// Inside an over-long line: bytes are dropped until the next newline.
    skipping: bool,
    skipped: usize,
}

impl LineDecoder {
    pub fn new(max_line: usize) -> Self {
        LineDecoder {
            buf: Vec::new(),
            max: max_line,
            skipping: false,
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
                    if self.skipping {
                        out.push(Line::TooLong {
                            len_at_least: self.skipped + head.len(),
                        });
                        self.skipping = false;
                        self.skipped = 0;
                    } else if self.buf.len() + head.len() > self.max {
                        out.push(Line::TooLong {
                            len_at_least: self.buf.len() + head.len(),
                        });
                        self.buf.clear();
                    } else {
                        self.buf.extend_from_slice(head);
                        out.push(Line::Text(take_line(&mut self.buf)));
                    }
                }
                None => {
                    if self.skipping {
                        self.skipped += bytes.len();
                    } else if self.buf.len() + bytes.len() > self.max {
                        self.skipping = true;
                        self.skipped = self.buf.len() + bytes.len();
                        self.buf.clear();
                    } else {
                        self.buf.extend_from_slice(bytes);
                    }
                    bytes = &[];
                }
            }
        }
        out
    }

    /// At end of stream: the unterminated last line, if any.
    pub fn finish(&mut self) -> Option<Line> {
        if self.skipping {
            self.skipping = false;
            return Some(Line::TooLong {
                len_at_least: std::mem::take(&mut self.skipped),
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
        assert_eq!(
            d.push(b"ij\nok\n"),
            vec![Line::TooLong { len_at_least: 10 }, text("ok")]
        );
        assert_eq!(
            d.push(b"toolong\n"),
            vec![Line::TooLong { len_at_least: 7 }]
        );
        assert_eq!(d.push(b"tail"), vec![]);
        assert_eq!(d.finish(), Some(text("tail")));
    }

    #[test]
    fn invalid_utf8_is_lossy_not_fatal() {
        let mut d = LineDecoder::new(10);
        assert_eq!(d.push(b"\xff\xfe\n"), vec![text("\u{fffd}\u{fffd}")]);
    }
}
