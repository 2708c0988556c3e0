//! The wall clock: milliseconds since the Unix epoch, as an input.
//!
//! The daemon makes one [`Clock`] ([`system`]) and hands it to what stamps times (checks, the
//! API, the store's housekeeping); paused-time tests hand in one that advances with
//! `tokio::time` instead ([`Timebase`], which the alert outbox also runs on). This module does
//! not own the monotonic time that deadlines and backoff run on: that is `tokio::time`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

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

/// A wall clock that advances with `tokio::time` (so paused-time tests control it).
#[derive(Debug, Clone, Copy)]
pub struct Timebase {
    wall_ms: i64,
    at: Instant,
}

impl Timebase {
    /// Now, from the system clock.
    pub fn system() -> Timebase {
        Timebase::starting_at(wall_ms())
    }

    /// `wall_ms` now, then advancing with `tokio::time::Instant`.
    pub fn starting_at(wall_ms: i64) -> Timebase {
        Timebase {
            wall_ms,
            at: Instant::now(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.saturating_add(elapsed)
    }
}
