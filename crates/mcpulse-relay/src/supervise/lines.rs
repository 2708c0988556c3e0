//! Reading one newline-delimited message with a bound on its length, for both directions.
//!
//! tokio's `read_until` finds the newline (with a fast byte search) inside a `take` that
//! stops one byte past the bound, so a line without end cannot grow memory: at most
//! `max + 1` bytes are held. An over-long line is skipped to its newline, every byte going
//! through [`ReplySniffer`] (constant memory) to find the top-level id of the request or reply
//! it carried, wherever it sits: the TypeScript SDK writes `id` after the `result`.

use mcpulse_wire::sniff::ReplySniffer;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// What is known of a line over the bound, which was dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Clipped {
    /// Its top-level id, canonical ([`super::envelope::canonical_id`]); never a nested one.
    pub id: Option<String>,
    /// Whether it was a reply (`result` or `error`, no `method`).
    pub reply: bool,
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
    }
}

/// Reads the next line of at most `max` bytes (newline excluded).
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> LineRead {
    let mut buf = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(2);
    match (&mut *reader).take(limit).read_until(b'\n', &mut buf).await {
        Ok(0) | Err(_) => return LineRead::Eof,
        Ok(_) => {}
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        if buf.len() <= max {
            return LineRead::Line(buf);
        }
        let mut sniffer = ReplySniffer::new();
        sniffer.push(&buf);
        return LineRead::TooLong(clipped(&sniffer));
    }
    if buf.len() <= max {
        // The stream ended without a final newline: the last line still counts.
        return LineRead::Line(buf);
    }
    let mut sniffer = ReplySniffer::new();
    sniffer.push(&buf);
    drop(buf);
    // Skip to the end of the line, a bounded chunk at a time.
    let mut skip = Vec::new();
    loop {
        skip.clear();
        match (&mut *reader)
            .take(64 * 1024)
            .read_until(b'\n', &mut skip)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) if skip.last() == Some(&b'\n') => {
                sniffer.push(&skip[..skip.len() - 1]);
                break;
            }
            Ok(_) => sniffer.push(&skip),
        }
    }
    LineRead::TooLong(clipped(&sniffer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_too_long_line_gives_its_top_level_id_wherever_it_is_never_a_nested_one() {
        // The TypeScript SDK's order: the id after a long result, which holds an "id" itself.
        let pad = "x".repeat(20_000);
        let input = format!(
            "{{\"result\":{{\"id\":5,\"text\":\"{pad}\"}},\"jsonrpc\":\"2.0\",\"id\":7}}\n{{\"jsonrpc\":\"2.0\",\"id\":\"caf\\u00e9\",\"method\":\"x\",\"params\":\"{pad}\"}}\nok\n"
        );
        let mut r = tokio::io::BufReader::with_capacity(4096, input.as_bytes());
        assert_eq!(
            read_line(&mut r, 1000).await,
            LineRead::TooLong(Clipped {
                id: Some("7".into()),
                reply: true
            })
        );
        assert_eq!(
            read_line(&mut r, 1000).await,
            LineRead::TooLong(Clipped {
                id: Some("\"café\"".into()),
                reply: false
            })
        );
        assert_eq!(
            read_line(&mut r, 1000).await,
            LineRead::Line(b"ok".to_vec())
        );
    }

    #[tokio::test]
    async fn lines_within_the_bound_pass_and_longer_ones_are_skipped_whole() {
        let input = b"{\"a\":1}\r\n0123456789ABCDEF\nok\nlast".to_vec();
        let mut r = tokio::io::BufReader::with_capacity(4, &input[..]);
        assert_eq!(
            read_line(&mut r, 10).await,
            LineRead::Line(b"{\"a\":1}".to_vec())
        );
        assert_eq!(
            read_line(&mut r, 10).await,
            LineRead::TooLong(Clipped::default())
        );
        assert_eq!(read_line(&mut r, 10).await, LineRead::Line(b"ok".to_vec()));
        assert_eq!(
            read_line(&mut r, 10).await,
            LineRead::Line(b"last".to_vec())
        );
        assert_eq!(read_line(&mut r, 10).await, LineRead::Eof);
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_bound_passes() {
        let input = b"0123456789\n01234567890\n".to_vec();
        let mut r = &input[..];
        assert_eq!(
            read_line(&mut r, 10).await,
            LineRead::Line(b"0123456789".to_vec())
        );
        assert!(matches!(read_line(&mut r, 10).await, LineRead::TooLong(_)));
        assert_eq!(read_line(&mut r, 10).await, LineRead::Eof);
    }
}
