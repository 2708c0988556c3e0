//! The retry policy, pure: when to try a failed delivery again ([`next_attempt`]), how long a
//! sink's `Retry-After` may hold its queue ([`retry_after`]), and when an alert is no longer
//! worth sending ([`expired`]). Time is an argument, so the schedule is testable (the loop's
//! tests run it under paused time, `tests/sinks.rs`).
//!
//! This module does not wait or deliver: the [`super::outbox`] loop and the
//! [`super::delivery`] workers do, with these answers.

use super::human_duration;
use crate::alert::{Action, Alert};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The first retry comes after about this long…
pub const BACKOFF_BASE_MS: i64 = 1_000;
/// …doubling up to this cap.
pub const BACKOFF_CAP_MS: i64 = 300_000;

/// When to try again after `attempts` failed attempts (1 after the first failure).
///
/// Exponential backoff with *equal jitter* (conventions §5.4): the ceiling is
/// `min(5 min, 1 s · 2^(attempts-1))` and the delay is uniform in `[ceiling/2, ceiling]`:
/// 0.5–1 s, 1–2 s, 2–4 s, … and 150–300 s from the 10th failure on. Half the ceiling is a floor
/// so that a sink that is down is never hammered (full jitter can retry after ~0 ms); the other
/// half spreads the alerts of one outage so they do not retry in lockstep against a sink that
/// just came back.
///
/// The jitter is derived from SHA-256 of `(dedup_key, attempts)` rather than a random number:
/// the same inputs always give the same time, so the schedule is testable and a restart does
/// not reshuffle it, while different incidents still spread out.
pub fn next_attempt(attempts: u32, now_ms: i64, dedup_key: &str) -> i64 {
    let n = attempts.max(1);
    let ceiling = BACKOFF_BASE_MS
        .saturating_mul(1i64 << (n - 1).min(20))
        .min(BACKOFF_CAP_MS);
    let mut h = Sha256::new();
    h.update(dedup_key.as_bytes());
    h.update([0]);
    h.update(n.to_be_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    let half = ceiling / 2;
    // A uniform draw in [0, half].
    let jitter = ((u128::from(u64::from_be_bytes(b)) * (half as u128 + 1)) >> 64) as i64;
    now_ms.saturating_add(ceiling - half + jitter)
}

/// The longest `Retry-After` honoured: a sink asking for more is asked again after an hour.
pub const RETRY_AFTER_CAP_MS: i64 = 3_600_000;

/// A `Retry-After` value (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) as milliseconds from
/// `now`, capped at [`RETRY_AFTER_CAP_MS`]; `None` when it is neither.
pub fn retry_after(value: &str, now: std::time::SystemTime) -> Option<i64> {
    let v = value.trim();
    let ms = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Seconds; a number too long for u64 is "very long".
        v.parse::<u64>().map_or(i64::MAX, |s| {
            i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
        })
    } else {
        let at = httpdate::parse_http_date(v).ok()?;
        at.duration_since(now)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    };
    Some(ms.min(RETRY_AFTER_CAP_MS))
}

/// Why an alert is no longer worth sending, if it is not: a trigger, reminder or notice raised
/// longer than `expire` ago (resolves are always sent).
pub fn expired(alert: &Alert, attempts: u32, now_ms: i64, expire: Duration) -> Option<String> {
    let age = now_ms.saturating_sub(alert.at_ms);
    (alert.action != Action::Resolve && age > i64::try_from(expire.as_millis()).unwrap_or(i64::MAX))
        .then(|| {
            format!(
                "gave up after {attempts} attempts: the alert is {} old",
                human_duration(u128::try_from(age).unwrap_or(0))
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date_capped_at_an_hour() {
        use std::time::{Duration, UNIX_EPOCH};
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(retry_after("120", now), Some(120_000));
        assert_eq!(retry_after(" 0 ", now), Some(0));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:29:30 GMT", now),
            Some(90_000)
        );
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(0));
        assert_eq!(retry_after("86400", now), Some(RETRY_AFTER_CAP_MS));
        assert_eq!(
            retry_after("99999999999999999999999", now),
            Some(RETRY_AFTER_CAP_MS)
        );
        assert_eq!(retry_after("-5", now), None);
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("", now), None);
    }
}
