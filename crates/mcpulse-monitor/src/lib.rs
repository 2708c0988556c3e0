//! The monitor daemon: a fleet from a config file, checked on schedules, judged, remembered,
//! and alerted on.
//!
//! ```text
//! config ─► scheduler ─► probe → judge ─► Observation ─► state::observe ─► alert::alerts
//!                                               │               │                │
//!                                               └──────► store (SQLite: checks, state, incidents, outbox)
//!                                                                                └─► sinks (retry, backoff)
//!                                 fleet snapshot ─► api (/livez /readyz /metrics /probe /api/v1/…)
//! ```
//!
//! - [`config`]: the TOML file into validated types, with [`config::import`]: MCP client config
//!   files;
//! - [`runner`]: one target's loop; [`probe`]: probe → judge for a target, shared by the
//!   runner and `/probe`;
//! - [`state`]: the pure per-target state machine (thresholds, flapping, signals);
//! - [`alert`]: the pure alert policy (incidents, dedup keys, reminders, maintenance);
//! - [`store`]: SQLite, with [`store::adapters`] (the outbox and history views async code uses);
//! - [`sink`]: payloads per sink, [`sink::delivery`], [`sink::outbox`], [`sink::backoff`];
//! - [`api`]: the HTTP API, one module per concern; [`metrics`]: the Prometheus text;
//! - [`clock`]: the one wall clock, made by the [`daemon`] and passed in;
//! - [`accept`]: the client side of `POST /api/v1/targets/{name}/accept` (a new drift baseline).

pub mod accept;
pub mod alert;
pub mod api;
pub mod check;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod fleet;
pub mod memory;
pub mod metrics;
pub mod probe;
pub mod runner;
pub mod sink;
pub mod state;
pub mod store;

/// The importer lives under [`config`]; this keeps its old path.
pub use config::import;
