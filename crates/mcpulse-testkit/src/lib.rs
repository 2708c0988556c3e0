//! Dev-only: scriptable misbehaving MCP servers on real loopback sockets and as child
//! processes, for mcpulse's integration tests.
//!
//! - [`http`]: a hand-written HTTP/1.1 server on `127.0.0.1:0` that answers from a script and
//!   records every request: it can hang, drip, stream forever, send HTML or a body past any cap;
//! - [`mcp`]: the MCP messages the fakes send (results, errors, SSE framing);
//! - [`scenario`]: ready-made HTTP servers: modern (2026-07-28), dual-era, legacy Streamable
//!   HTTP (JSON or SSE replies), legacy HTTP+SSE, and servers behind a 401;
//! - [`stdio`]: generated `sh` scripts that act as stdio servers, and process liveness checks.
//!
//! It owns no assertions about mcpulse: tests do. Nothing here binds a fixed port, reads the
//! environment, or outlives its owner: servers stop and temp dirs go when dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod http;
pub mod mcp;
pub mod scenario;
pub mod stdio;

pub use http::{Body, FakeHttp, Piece, Reply, Request, Then};
pub use stdio::{Act, StdioScript, TempDir};
