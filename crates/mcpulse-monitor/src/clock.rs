//! The wall clock: milliseconds since the Unix epoch, as an input.
//!
//! The daemon makes one [`Clock`] ([`system`]) and hands it to what stamps times (checks, the
//! API, the store's housekeeping); paused-time tests hand in one that advances with
//! `tokio::time` instead (see [`crate::sink::Timebase`]). This module does not own the
//! monotonic time that deadlines and backoff run on: that is `tokio::time`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the Unix epoch; an input so tests can fix it.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system's wall clock, in milliseconds since the Unix epoch (0 before it; `i64::MAX`
/// past what an `i64` holds).
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// [`wall_ms`] as a [`Clock`].
pub fn system() -> Clock {
    Arc::new(wall_ms)
}
