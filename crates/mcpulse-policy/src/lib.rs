//! `mcpulse-policy`: the inside-out half's decisions, as pure state machines.
//!
//! Nothing here waits, spawns, reads a clock or does I/O: every function takes the current time
//! as an argument (milliseconds on a monotonic clock the caller owns) and returns what to do.
//! The supervisor (`mcpulse-relay::supervise`), the gateway and the kit for rmcp servers call
//! the same code, and the tests drive it with plain numbers: time is an argument, so a test
//! steps it exactly as paused tokio time would, without a runtime.

pub mod backoff;
pub mod breaker;
pub mod check;
pub mod health;
pub mod heartbeat;
pub mod keepalive;
pub mod limit;
pub mod restart;
pub mod retry;
pub mod thresholds;
pub mod timeout;
pub mod window;
