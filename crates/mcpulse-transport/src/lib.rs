//! The I/O half of a probe: moving MCP frames over stdio, Streamable HTTP and legacy HTTP+SSE.
//!
//! Every operation here takes a deadline and *always* returns an
//! [`Exchange`](mcpulse_wire::transcript::Exchange) describing what happened on the wire,
//! including the failures: a refused connection, a hung server or an HTML page are recorded
//! outcomes, not errors. This crate decides nothing about health and nothing about which era
//! or step comes next; that is `mcpulse-probe` (flow) and `mcpulse-judge` (meaning).
//!
//! - [`http`]: a small HTTP/1.1 client on hyper's connection API, timing DNS, connect and TLS;
//! - [`reference`]: RFC 3986 resolution of the URLs a server names (`endpoint`, `Location`);
//! - [`streamable_http`]: one JSON-RPC POST whose reply is JSON or an SSE stream;
//! - [`legacy_sse`]: the 2024-11-05 GET stream + `endpoint` event + POST transport;
//! - [`stdio`]: a child process in its own process group, NDJSON over its stdin/stdout;
//! - [`queue`]: a hand-over between tasks bounded by bytes as well as by count.

pub mod clock;
pub mod command;
pub mod http;
pub mod legacy_sse;
pub mod queue;
pub mod reference;
pub mod stdio;
pub mod streamable_http;

/// One JSON-RPC message to send, and how its exchange is named in the transcript. Every
/// transport sends one: a POST ([`streamable_http::Post`]), a POST on the legacy stream
/// ([`legacy_sse::SseStream::send`]), a line on a child's stdin ([`stdio::StdioChild::send`]).
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub step: mcpulse_wire::transcript::Step,
    pub era: Option<mcpulse_wire::version::Era>,
    pub page: Option<u32>,
    /// The id of the request, or `None` for a notification.
    pub id: Option<i64>,
    pub message: &'a serde_json::Value,
}

/// Limits every transport applies.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most bytes one response (body, SSE stream or stdout line) may take.
    pub max_response_bytes: usize,
}

/// What one message kept in a transcript costs beside its own bytes (its frame, the allocation
/// of its text, the list's spare room), charged against the response cap with them: a stream of
/// tiny messages (`data:1` events, `{}` lines) then holds about the cap, not ten times it.
pub const FRAME_COST: usize = 128;

/// How much of a non-JSON-RPC body is kept in a transcript for a person to read.
pub const BODY_SNIPPET: usize = 2048;

/// The first `BODY_SNIPPET` bytes of a body as text, cut at a character boundary.
pub fn snippet(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(BODY_SNIPPET)];
    String::from_utf8_lossy(cut).into_owned()
}
