//! The wire vocabulary of mcpulse, and nothing that touches a socket, a process or a clock.
//!
//! This crate owns:
//! - [`json`]: reading a server's JSON within a memory budget, saying why a text is unusable;
//! - [`jsonrpc`]: a tolerant JSON-RPC 2.0 envelope decoder that never panics and keeps the raw text;
//! - [`version`]: MCP protocol revisions and the two eras (stateful legacy, stateless modern);
//! - [`message`]: the exact requests a prober sends, per era;
//! - [`ndjson`] and [`sse`]: incremental, size-capped frame decoders for stdio and HTTP bodies;
//! - [`transcript`]: the record of what a probe saw, which the judge turns into a verdict;
//! - [`redact`]: how secrets are kept out of that record by construction;
//! - [`text`]: how server-controlled text is made inert before a person or a log sees it;
//! - [`checks`]: the values the probe sends that the judge recognises (foreign Origin, …);
//! - [`units`]: durations, sizes and timestamps, parsed and printed the same way everywhere;
//! - [`call`]: synthetic tool calls and health tools, what to expect of them, their record.
//!
//! It does not own I/O (see `mcpulse-transport`) or judgement (see `mcpulse-judge`).

pub mod auth;
pub mod call;
pub mod checks;
pub mod clientconfig;
pub mod env;
pub mod hosts;
pub mod json;
pub mod jsonrpc;
pub mod message;
pub mod ndjson;
pub mod redact;
pub mod sniff;
pub mod sse;
pub mod text;
pub mod transcript;
pub mod units;
pub mod version;
pub mod x509;
