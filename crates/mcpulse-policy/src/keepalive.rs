//! SSE comment keep-alives: when the next one is due on a response stream.
//!
//! Proxies and load balancers cut a connection that has been silent for a while (nginx's
//! `proxy_read_timeout` is 60 s, many cloud load balancers 60 s too), and a long tool call or an
//! idle GET stream is silent for as long as the upstream is. A comment line every `interval`
//! (default 15 s) keeps it open; clients ignore comments, as the SSE spec requires.
//!
//! The cadence counts from the **last byte written**, events included: a stream that carries an
//! event every second never gets a comment, and one that goes quiet gets its first comment one
//! interval after its last event. A timer that fires late sends one comment, not a burst to catch
//! up, and the next is due one interval after it.
//!
//! [`COMMENT`] is a single comment line with no blank line after it. It may therefore be written
//! between **any two lines** of the stream, even between two lines of one event (the decoder
//! skips a comment line and goes on with the event), while a blank line there would end the
//! event early. The caller writes it only at a line boundary: never in the middle of a line.
//!
//! Time is milliseconds on the caller's monotonic clock. The I/O side is a `sleep_until(due)`
//! in the gateway's stream loop, reset whenever it writes.

use crate::window::millis;
use std::time::Duration;

/// The comment to write.
pub const COMMENT: &[u8] = b": keep-alive\n";

/// The default interval: 15 s (the issue's; axum's `KeepAlive` default too).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);

/// One stream's keep-alive clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAlive {
    /// `None`: keep-alives are off.
    interval_ms: Option<u64>,
    last_write_ms: u64,
}

impl KeepAlive {
    /// A stream opened (its headers written) at `now_ms`, with comments every `interval`;
    /// `None` or zero turns them off.
    pub fn new(interval: Option<Duration>, now_ms: u64) -> KeepAlive {
        let interval_ms = interval.filter(|d| !d.is_zero()).map(|d| millis(d).max(1));
        KeepAlive {
            interval_ms,
            last_write_ms: now_ms,
        }
    }

    /// Bytes (an event, a comment, anything) were written at `now_ms`.
    pub fn wrote(&mut self, now_ms: u64) {
        self.last_write_ms = self.last_write_ms.max(now_ms);
    }

    /// When the next comment is due (`None`: never).
    pub fn due_at(&self) -> Option<u64> {
        self.interval_ms
            .map(|i| self.last_write_ms.saturating_add(i))
    }

    /// Whether to write [`COMMENT`] now; when it says yes, it counts the comment as written.
    pub fn poll(&mut self, now_ms: u64) -> bool {
        match self.due_at() {
            Some(due) if now_ms >= due => {
                self.wrote(now_ms);
                true
            }
            _ => false,
        }
    }
}

impl Default for KeepAlive {
    /// Every 15 s, from time 0.
    fn default() -> KeepAlive {
        KeepAlive::new(Some(DEFAULT_INTERVAL), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpulse_wire::sse::{Decoder, Item};

    #[test]
    fn a_silent_stream_gets_a_comment_every_interval() {
        let mut k = KeepAlive::new(Some(DEFAULT_INTERVAL), 1_000);
        let mut sent = Vec::new();
        // A timer that checks every 100 ms for two minutes.
        for now in (1_000..=121_000).step_by(100) {
            if k.poll(now) {
                sent.push(now);
            }
        }
        assert_eq!(
            sent,
            [
                16_000, 31_000, 46_000, 61_000, 76_000, 91_000, 106_000, 121_000
            ]
        );
    }

    #[test]
    fn any_write_pushes_the_next_comment_back() {
        let mut k = KeepAlive::default();
        assert_eq!(k.due_at(), Some(15_000));
        k.wrote(10_000); // an event
        assert!(!k.poll(15_000));
        assert_eq!(k.due_at(), Some(25_000));
        assert!(k.poll(25_000));
        // A clock that steps back does not bring the comment forward.
        k.wrote(1);
        assert_eq!(k.due_at(), Some(40_000));
    }

    #[test]
    fn a_late_timer_sends_one_comment_not_a_burst() {
        let mut k = KeepAlive::default();
        assert!(k.poll(50_000), "15 s overdue by 35 s");
        assert!(!k.poll(50_000));
        assert!(!k.poll(64_999));
        assert!(k.poll(65_000));
    }

    #[test]
    fn none_or_zero_turns_them_off() {
        for interval in [None, Some(Duration::ZERO)] {
            let mut k = KeepAlive::new(interval, 0);
            assert_eq!(k.due_at(), None);
            assert!(!k.poll(u64::MAX));
        }
    }

    #[test]
    fn a_client_ignores_the_comment_even_between_two_lines_of_an_event() {
        let mut plain = Decoder::new(1 << 16);
        let mut with_comments = Decoder::new(1 << 16);
        let event = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\n\ndata: {}\n\n";
        let want = plain.push(event);
        let mut got: Vec<Item> = with_comments.push(COMMENT);
        for line in event.split_inclusive(|b| *b == b'\n') {
            got.extend(with_comments.push(line));
            got.extend(with_comments.push(COMMENT));
        }
        assert_eq!(want.len(), 2);
        assert_eq!(got, want);
    }
}
