//! Reading one newline-delimited message with a bound on its length, for both directions.
//!
//! tokio's `read_until` finds the newline (with a fast byte search) inside a `take` that
//! stops one byte past the bound, so a line without end cannot grow memory: at most
//! `max + 1` bytes are held. An over-long line is skipped to its newline, keeping only a
//! prefix ([`PREFIX`]) to find the id of the request or reply it carried.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// How much of an over-long line is kept to look for its id.
pub const PREFIX: usize = 4096;

/// One read.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A line, without its `\n` (or `\r\n`); may be empty.
    Line(Vec<u8>),
    /// A line over the bound, dropped; its first [`PREFIX`] bytes.
    TooLong(Vec<u8>),
    /// End of stream (or a read error: the stream is over either way).
    Eof,
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
        buf.truncate(PREFIX);
        return LineRead::TooLong(buf);
    }
    if buf.len() <= max {
        // The stream ended without a final newline: the last line still counts.
        return LineRead::Line(buf);
    }
    buf.truncate(PREFIX);
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
            Ok(_) if skip.last() == Some(&b'\n') => break,
            Ok(_) => {}
        }
    }
    LineRead::TooLong(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            LineRead::TooLong(b"0123456789AB".to_vec())
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
