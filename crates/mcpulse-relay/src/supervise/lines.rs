//! Reading newline-delimited messages with a bound on their length, for both directions.
//!
//! [`LineReader`] reads straight into the buffer a line is handed out in: a large message (a
//! 1 MiB tool result, which the widened pipe holds whole) arrives in one `read` into a buffer
//! already sized for it (the previous line's length is the hint), the newline is found with
//! `memchr`, and the buffer itself becomes the line, no copy. A `BufReader` + `read_until`
//! (what this replaced) read it in sixteen 64 KiB rounds and copied every byte once more, out
//! of the `BufReader` into a `Vec` that grew by doubling (docs/benchmarks-supervise.md).
//! Small lines, several to a read, are copied out (a few bytes each) so that none of them
//! carries a large buffer's capacity into the relay's queues.
//!
//! Memory: while no newline is found, at most `max + 2` bytes of a line are held (`max`, an
//! optional `\r`, the `\n`), in a buffer of at most about twice that capacity (a `Vec`'s
//! growth) plus one 64 KiB read. An over-long line is skipped to its newline, a bounded chunk
//! at a time, every byte going through [`ReplySniffer`] (constant memory) to find the
//! top-level id of the request or reply it carried, wherever it sits: the TypeScript SDK
//! writes `id` after the `result`.

use mcpulse_wire::sniff::ReplySniffer;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The smallest read: what a fresh buffer reserves at least.
const MIN_READ: usize = 64 * 1024;
/// What is known of a line over the bound, which was dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Clipped {
    /// Its top-level id, canonical ([`super::envelope::canonical_id`]); never a nested one.
    pub id: Option<String>,
    /// Whether it was a reply (`result` or `error`, no `method`).
    pub reply: bool,
    /// Whether it had a top-level `method` (a request when it has an id).
    pub request: bool,
}

/// One read.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A line, without its `\n` (or `\r\n`); may be empty.
    Line(Vec<u8>),
    /// A line over the bound, dropped.
    TooLong(Clipped),
    /// End of stream (or a read error: the stream is over either way).
    Eof,
}

fn clipped(sniffer: &ReplySniffer) -> Clipped {
    Clipped {
        id: sniffer
            .id_raw()
            .map(|raw| super::envelope::canonical_id(&String::from_utf8_lossy(raw)).into_owned()),
        reply: sniffer.is_reply(),
        request: sniffer.is_request(),
    }
}

/// Reads lines of at most `max` bytes (newline excluded) from a stream.
pub struct LineReader<R> {
    inner: R,
    max: usize,
    /// Bytes read and not yet handed out: `buf[pos..]`.
    buf: Vec<u8>,
    pos: usize,
    /// `buf[pos..scanned]` is known to hold no newline (never scanned twice).
    scanned: usize,
    /// The last line's length plus its newline: what a fresh buffer reserves, so that a run of
    /// large messages reads each in one go into one allocation. At most `max + 2`.
    hint: usize,
    /// Skipping the rest of a line over the bound, with what was learnt of it so far: kept here,
    /// not in a local, so that a call dropped while it waits resumes the skip.
    skipping: Option<ReplySniffer>,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner,
            max,
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            hint: 0,
            skipping: None,
        }
    }

    /// Reads the next line. Cancel-safe: every byte read is kept in the reader (and a skip in
    /// progress in [`LineReader::skipping`]) before any wait, so the relay can poll it in a
    /// `select!` and drop the call when another branch wins, losing nothing.
    pub async fn next_line(&mut self) -> LineRead {
        let limit = self.max.saturating_add(2);
        if self.skipping.is_some() {
            return self.skip_rest().await;
        }
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let nl = self.scanned + i;
                let mut line = self.take(nl);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() <= self.max {
                    return LineRead::Line(line);
                }
                let mut sniffer = ReplySniffer::new();
                sniffer.push(&line);
                return LineRead::TooLong(clipped(&sniffer));
            }
            self.scanned = self.buf.len();
            let pending = self.buf.len() - self.pos;
            // Over `max + 1` bytes with no newline: even a `\r\n` next would not save it.
            if pending >= limit {
                return self.skip_rest().await;
            }
            self.make_room(limit - pending);
            match self.inner.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) if pending == 0 => return LineRead::Eof,
                Err(_) => {
                    // Old behaviour: a read error ends the stream, dropping a partial line.
                    self.discard();
                    return LineRead::Eof;
                }
                Ok(0) => {
                    // The stream ended without a final newline: the last line still counts.
                    let end = self.buf.len();
                    let line = self.take_until(end);
                    if line.len() <= self.max {
                        return LineRead::Line(line);
                    }
                    let mut sniffer = ReplySniffer::new();
                    sniffer.push(&line);
                    return LineRead::TooLong(clipped(&sniffer));
                }
                Ok(_) => {}
            }
        }
    }

    /// Makes room for the next read: compacts the buffer when what is pending sits past its
    /// middle, and reserves at least [`MIN_READ`], or the hint for a fresh line, never more
    /// than `room` (what the line may still grow by) beyond [`MIN_READ`].
    fn make_room(&mut self, room: usize) {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            self.scanned = 0;
        } else if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.scanned -= self.pos;
            self.pos = 0;
        }
        let want = self.hint.saturating_sub(self.buf.len() - self.pos);
        self.buf.reserve(want.min(room).max(MIN_READ));
    }

    /// Hands out `buf[pos..nl]` and consumes the newline at `nl`.
    fn take(&mut self, nl: usize) -> Vec<u8> {
        let line = self.take_until(nl);
        self.pos += 1;
        self.scanned = self.pos;
        self.hint = line.len().saturating_add(1).min(self.max.saturating_add(2));
        line
    }

    /// Hands out `buf[pos..end]` (the caller consumes what follows): the buffer itself when the
    /// line is most of it (a large message, read in one go), a copy otherwise. Either way the
    /// line has room for one more byte.
    fn take_until(&mut self, end: usize) -> Vec<u8> {
        let len = end - self.pos;
        let rest = self.buf.len() - end;
        if self.pos == 0 && rest <= len && len.saturating_mul(2) >= self.buf.capacity() {
            let tail = self.buf.split_off(end);
            let mut line = std::mem::replace(&mut self.buf, tail);
            line.truncate(end);
            self.pos = 0;
            self.scanned = 0;
            return line;
        }
        // One byte more: the relay appends the `\n` back without growing (copying) the line.
        let mut line = Vec::with_capacity(len + 1);
        line.extend_from_slice(&self.buf[self.pos..end]);
        self.pos = end;
        self.scanned = end;
        line
    }

    fn discard(&mut self) {
        self.buf.clear();
        self.pos = 0;
        self.scanned = 0;
    }

    /// The current line is over the bound: sniff what is held, drop it, and skip the rest of
    /// the line a bounded chunk at a time.
    async fn skip_rest(&mut self) -> LineRead {
        if self.skipping.is_none() {
            let mut sniffer = ReplySniffer::new();
            sniffer.push(&self.buf[self.pos..]);
            self.discard();
            self.hint = 0;
            self.skipping = Some(sniffer);
        }
        loop {
            self.buf.reserve(MIN_READ);
            match (&mut self.inner)
                .take(MIN_READ as u64)
                .read_buf(&mut self.buf)
                .await
            {
                Ok(0) | Err(_) => {
                    self.discard();
                    break;
                }
                Ok(_) => {}
            }
            let Some(sniffer) = self.skipping.as_mut() else {
                break;
            };
            if let Some(i) = memchr::memchr(b'\n', &self.buf) {
                sniffer.push(&self.buf[..i]);
                self.pos = i + 1;
                self.scanned = self.pos;
                break;
            }
            sniffer.push(&self.buf);
            self.discard();
        }
        let sniffer = self.skipping.take().unwrap_or_default();
        LineRead::TooLong(clipped(&sniffer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// A stream that hands out at most `chunk` bytes per read, as a pipe does when the writer
    /// is slower than the reader; with `one_line`, never past a newline, as a pipe does when
    /// the writer waits for an answer before its next message.
    struct Chunked<'a> {
        data: &'a [u8],
        chunk: usize,
        one_line: bool,
        reads: usize,
    }

    impl AsyncRead for Chunked<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            self.reads += 1;
            let mut n = self.chunk.min(buf.remaining()).min(self.data.len());
            if self.one_line
                && let Some(i) = memchr::memchr(b'\n', &self.data[..n])
            {
                n = i + 1;
            }
            let (head, tail) = self.data.split_at(n);
            buf.put_slice(head);
            self.data = tail;
            Poll::Ready(Ok(()))
        }
    }

    fn reader(data: &[u8], chunk: usize, max: usize) -> LineReader<Chunked<'_>> {
        LineReader::new(
            Chunked {
                data,
                chunk,
                one_line: false,
                reads: 0,
            },
            max,
        )
    }

    #[tokio::test]
    async fn a_too_long_line_gives_its_top_level_id_wherever_it_is_never_a_nested_one() {
        // The TypeScript SDK's order: the id after a long result, which holds an "id" itself.
        let pad = "x".repeat(20_000);
        let input = format!(
            "{{\"result\":{{\"id\":5,\"text\":\"{pad}\"}},\"jsonrpc\":\"2.0\",\"id\":7}}\n{{\"jsonrpc\":\"2.0\",\"id\":\"caf\\u00e9\",\"method\":\"x\",\"params\":\"{pad}\"}}\nok\n"
        );
        for chunk in [1, 7, 4096, usize::MAX] {
            let mut r = reader(input.as_bytes(), chunk, 1000);
            assert_eq!(
                r.next_line().await,
                LineRead::TooLong(Clipped {
                    id: Some("7".into()),
                    reply: true,
                    request: false,
                })
            );
            assert_eq!(
                r.next_line().await,
                LineRead::TooLong(Clipped {
                    id: Some("\"café\"".into()),
                    reply: false,
                    request: true,
                })
            );
            assert_eq!(r.next_line().await, LineRead::Line(b"ok".to_vec()));
            assert_eq!(r.next_line().await, LineRead::Eof);
        }
    }

    #[tokio::test]
    async fn lines_within_the_bound_pass_and_longer_ones_are_skipped_whole() {
        let input = b"{\"a\":1}\r\n0123456789ABCDEF\nok\n\nlast".to_vec();
        for chunk in [1, 4, 100] {
            let mut r = reader(&input, chunk, 10);
            assert_eq!(r.next_line().await, LineRead::Line(b"{\"a\":1}".to_vec()));
            assert_eq!(r.next_line().await, LineRead::TooLong(Clipped::default()));
            assert_eq!(r.next_line().await, LineRead::Line(b"ok".to_vec()));
            assert_eq!(r.next_line().await, LineRead::Line(Vec::new()));
            assert_eq!(r.next_line().await, LineRead::Line(b"last".to_vec()));
            assert_eq!(r.next_line().await, LineRead::Eof);
        }
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_bound_passes() {
        let input = b"0123456789\n0123456789\r\n01234567890\n0123456789A".to_vec();
        for chunk in [1, 3, 11, 100] {
            let mut r = reader(&input, chunk, 10);
            assert_eq!(r.next_line().await, LineRead::Line(b"0123456789".to_vec()));
            assert_eq!(r.next_line().await, LineRead::Line(b"0123456789".to_vec()));
            assert!(matches!(r.next_line().await, LineRead::TooLong(_)));
            assert!(matches!(r.next_line().await, LineRead::TooLong(_)));
            assert_eq!(r.next_line().await, LineRead::Eof);
        }
    }

    /// The point of the reader: a large message that is in the pipe whole is read in one go
    /// into the buffer it is handed out in, and a small line never carries a large buffer.
    #[tokio::test]
    async fn a_large_line_is_handed_out_in_its_own_buffer_and_small_ones_are_copied_out() {
        let big = vec![b'x'; 1 << 20];
        let mut input = Vec::new();
        for _ in 0..3 {
            input.extend_from_slice(&big);
            input.push(b'\n');
        }
        input.extend_from_slice(b"a\nb\n");
        // The pipe holds one message at a time (the client waits for each reply).
        let mut r = reader(&input, usize::MAX, 2 << 20);
        r.inner.one_line = true;
        for i in 0..3 {
            let before = r.inner.reads;
            let LineRead::Line(line) = r.next_line().await else {
                panic!("not a line");
            };
            assert_eq!(line, big);
            if i > 0 {
                // Sized by the previous line: one read, not sixteen 64 KiB ones.
                assert_eq!(r.inner.reads - before, 1);
            }
            // Room for the `\n` the relay appends, and no more than a Vec's doubling.
            assert!(line.capacity() > line.len() && line.capacity() <= 2 * line.len() + MIN_READ);
        }
        for want in [&b"a"[..], b"b"] {
            let LineRead::Line(line) = r.next_line().await else {
                panic!("not a line");
            };
            assert_eq!(line, want);
            assert!(line.capacity() < 64, "{}", line.capacity());
        }
        assert_eq!(r.next_line().await, LineRead::Eof);
    }

    /// Many lines of random lengths, read in random chunks, come out as they went in.
    #[test]
    fn any_split_of_the_stream_gives_the_same_lines() {
        use proptest::prelude::*;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        proptest!(|(lens in proptest::collection::vec(0usize..3000, 0..40), chunk in 1usize..5000)| {
            let mut input = Vec::new();
            for (i, n) in lens.iter().enumerate() {
                input.extend((0..*n).map(|k| b'a' + ((i + k) % 26) as u8));
                input.push(b'\n');
            }
            let got = rt.block_on(async {
                let mut r = reader(&input, chunk, 2000);
                let mut got = Vec::new();
                loop {
                    match r.next_line().await {
                        LineRead::Eof => break,
                        other => got.push(other),
                    }
                }
                got
            });
            let want: Vec<LineRead> = input
                .split(|b| *b == b'\n')
                .take(lens.len())
                .map(|l| if l.len() <= 2000 { LineRead::Line(l.to_vec()) } else { LineRead::TooLong(Clipped::default()) })
                .collect();
            prop_assert_eq!(got, want);
        });
    }

    /// A stream that is not ready every other poll (it wakes at once), as a pipe is between
    /// two writes of a slow writer.
    struct Stuttering<'a> {
        inner: Chunked<'a>,
        ready: bool,
    }

    impl AsyncRead for Stuttering<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            self.ready = !self.ready;
            if !self.ready {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    /// The relay polls `next_line` in a `select!` and drops the call whenever another branch
    /// wins: a call dropped at any wait, mid-line or mid-skip of an over-long line, loses
    /// nothing, and the next call goes on where it stopped.
    #[test]
    fn a_call_dropped_while_it_waits_loses_nothing() {
        let pad = "x".repeat(5000);
        let input = format!(
            "{{\"id\":1}}\n{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"m\",\"params\":\"{pad}\"}}\nshort\n{pad}\nlast\n"
        );
        let mut r = LineReader::new(
            Stuttering {
                inner: Chunked {
                    data: input.as_bytes(),
                    chunk: 700,
                    one_line: false,
                    reads: 0,
                },
                ready: false,
            },
            1000,
        );
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        let mut dropped = 0;
        for _ in 0..1000 {
            // One poll per call, then the call is dropped (as a lost `select!` branch is).
            let polled = std::pin::pin!(r.next_line()).as_mut().poll(&mut cx);
            match polled {
                Poll::Ready(LineRead::Eof) => break,
                Poll::Ready(other) => got.push(other),
                Poll::Pending => dropped += 1,
            }
        }
        assert!(dropped > 10, "the calls were not cut: {dropped}");
        assert_eq!(
            got,
            vec![
                LineRead::Line(b"{\"id\":1}".to_vec()),
                LineRead::TooLong(Clipped {
                    id: Some("9".into()),
                    reply: false,
                    request: true,
                }),
                LineRead::Line(b"short".to_vec()),
                LineRead::TooLong(Clipped::default()),
                LineRead::Line(b"last".to_vec()),
            ]
        );
    }
}
