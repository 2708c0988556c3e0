//! Dev-only: scriptable misbehaving MCP servers on real loopback sockets and as child
//! processes, for mcpulse's integration tests.
//!
//! - [`http`]: a hand-written HTTP/1.1 server on `127.0.0.1:0` that answers from a script and
//!   records every request: it can hang, drip, stream forever, send HTML or a body past any cap;
//! - [`mcp`]: the MCP messages the fakes send (results, errors, SSE framing);
//! - [`scenario`]: ready-made HTTP servers: modern (2026-07-28), dual-era, legacy Streamable
//!   HTTP (JSON or SSE replies), legacy HTTP+SSE, and servers behind a 401;
//! - [`posture`]: servers with a security posture to grade, one knob per security rule, from a
//!   server that earns no finding (foreign `Origin`/`Host`, CORS, session ids, error leaks,
//!   OAuth metadata variants);
//! - [`stdio`]: generated `sh` scripts that act as stdio servers, and process liveness checks;
//! - [`tools`]: a catalogue of tools standing for dependencies (a health tool, a tool whose
//!   database is down, a broken `outputSchema`, a silent tool, a destructive one), served
//!   over stdio and Streamable HTTP;
//! - [`tls`]: a throwaway CA issuing certificates with any validity period, for HTTPS fakes;
//! - [`run`]: running the binary under test with a bound on its time;
//! - [`port`]: a loopback port held for a server that goes away and comes back on it.
//!
//! It owns no assertions about mcpulse: tests do. Nothing here binds a fixed port, reads the
//! environment, or outlives its owner: servers stop and temp dirs go when dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod http;
pub mod logs;
pub mod mcp;
pub mod port;
pub mod posture;
pub mod run;
pub mod scenario;
pub mod stdio;
pub mod tls;
pub mod tools;

pub use http::{Body, FakeHttp, Piece, RawListener, Reply, Request, Then};
pub use stdio::{Act, StdioScript, TempDir};
