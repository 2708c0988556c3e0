//! The `stdio` demo server: a legacy (2025-11-25) MCP server over newline-delimited JSON on
//! stdin and stdout, as `mcpulse demo-server stdio` runs it.
//!
//! It answers `initialize`, `ping`, `tools/list` and `tools/call`; anything else (including the
//! 2026 `server/discover` a prober sends first) gets -32601, which is what tells a client to
//! fall back to the legacy handshake in the same process. Nothing but JSON-RPC goes to stdout,
//! nothing goes to stderr, and it exits as soon as stdin reaches end-of-file.

use crate::mcp::{self, Catalogue, Incoming};
use serde_json::Value;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};

pub const NAME: &str = "mcpulse-demo-stdio";

/// The longest line read; a longer one is answered with a parse error and skipped.
const MAX_LINE: usize = 1024 * 1024;

/// Serves MCP on this process's stdin and stdout until stdin closes.
pub async fn serve_stdio() -> std::io::Result<()> {
    serve_ndjson(tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves MCP over any pair of byte streams (a test uses an in-memory duplex): one JSON-RPC
/// message per line in, one reply per request line out. Returns at end of input.
pub async fn serve_ndjson<R, W>(input: R, mut output: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let reply = if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
            skip_line(&mut input).await?;
            Some(mcp::error(
                &Value::Null,
                mcp::PARSE_ERROR,
                "Parse error: line too long",
                None,
            ))
        } else {
            let text = line.trim_ascii();
            if text.is_empty() {
                continue;
            }
            answer(text)
        };
        if let Some(reply) = reply {
            let mut out = reply.to_string().into_bytes();
            out.push(b'\n');
            output.write_all(&out).await?;
            output.flush().await?;
        }
    }
}

/// Discards input up to and including the next newline, without buffering it.
async fn skip_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<()> {
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

/// The reply to one line, if it needs one.
fn answer(line: &[u8]) -> Option<Value> {
    match mcp::parse(line) {
        Incoming::Invalid(e) => Some(e),
        Incoming::Response | Incoming::Notification { .. } => None,
        Incoming::Request { id, method, params } if method == "initialize" => {
            let requested = params.get("protocolVersion").and_then(Value::as_str);
            let version = mcp::negotiate(requested, mcp::LEGACY);
            let info = mcp::server_info(NAME, "mcpulse demo: stdio", true);
            let result = mcp::initialize_result(
                version,
                info,
                "A legacy MCP server over stdio, started by `mcpulse demo-server stdio`.",
            );
            Some(mcp::result(&id, result))
        }
        Incoming::Request { id, method, params } => Some(mcp::legacy_answer(
            &id,
            &method,
            &params,
            Catalogue::Basic,
            true,
        )),
    }
}
