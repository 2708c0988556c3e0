//! The probe's clock: milliseconds since the probe started, for every `at_ms` in a transcript.

use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    t0: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Clock { t0: Instant::now() }
    }

    /// Milliseconds since the start, with microsecond resolution.
    pub fn at(&self) -> f64 {
        ms(self.t0.elapsed())
    }

    /// Milliseconds from `since` until now.
    pub fn since(&self, since: Instant) -> f64 {
        ms(since.elapsed())
    }
}

/// A duration in milliseconds, rounded to microseconds.
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// The interval between two of the clock's readings (`at_ms` values), in milliseconds rounded
/// to microseconds and never negative: e.g. from a request's start to its reply's arrival.
pub fn between(from_ms: f64, to_ms: f64) -> f64 {
    ((to_ms - from_ms) * 1000.0).round().max(0.0) / 1000.0
}
