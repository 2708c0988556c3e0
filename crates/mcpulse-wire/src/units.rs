//! Durations, sizes and timestamps: how a person writes them (on the command line, in the
//! monitor's config) and how mcpulse prints them (reports, alerts, the API). One set of rules
//! for every place, so `--timeout 30s` and `timeout = "30s"` mean the same thing.
//!
//! Accepted forms:
//! - a duration is a non-negative number (a fraction allowed) and a unit: `500ms`, `10s`, `1.5m`,
//!   `2h`, `30d`; a bare number is seconds (`10` is `10s`). It is more than zero and at most
//!   37,000 days; a setting may bound it further (the CLI's timeouts at a day).
//! - a size is a whole number and an optional unit, case-insensitive: `4096` or `4096B`, `1KB`
//!   or `1K` (1000), `512KiB` (1024), `MB`/`M`, `MiB`, `GB`/`G`, `GiB`. A setting may set a floor.
//! - a timestamp is RFC 3339 (`2026-12-01T02:00:00Z`; a fraction, an offset such as `+01:00`,
//!   a lowercase `t`/`z` or a space for the `T` allowed), kept as Unix milliseconds. It is
//!   printed in UTC with milliseconds: `2026-12-01T02:00:00.000Z`.
//!
//! Durations and sizes are small grammars written here: `humantime` would drop forms accepted
//! today (`1.5m`, a bare number of seconds) and add ones not needed (`1h 30m`). Dates go through
//! the `time` crate, whose calendar arithmetic and RFC 3339 grammar are well tested.
//!
//! This module does not know which setting a value is for: callers put their own name before the
//! error ("timeout: …") and check their own bounds.

use std::time::Duration;
use thiserror::Error;

/// Why a duration, size or timestamp was not accepted. Each message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitError {
    #[error("{0:?} is not a duration: write e.g. 30s, 500ms, 5m, 1h or 30d")]
    NotADuration(String),
    #[error("{input:?}: unknown unit {unit:?}; use ms, s, m, h or d")]
    DurationUnit { input: String, unit: String },
    #[error("{0:?} is too large: the most is 37000d (about a century)")]
    DurationTooLarge(String),
    #[error("{0:?} must be more than zero")]
    Zero(String),
    #[error("{0:?} is not a size: write e.g. 8MiB, 512KiB or 4096")]
    NotASize(String),
    #[error("{input:?}: unknown unit {unit:?}; use KiB, MiB or GiB")]
    SizeUnit { input: String, unit: String },
    #[error("{0:?} is too large")]
    SizeTooLarge(String),
    #[error("{0:?} is not an RFC 3339 time: write e.g. 2026-12-01T02:00:00Z")]
    NotATime(String),
}

/// The longest duration accepted: 37,000 days (about a century), far beyond any sane interval
/// or retention, and far from where the arithmetic on it could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(37_000 * 86_400);

/// Parses a duration: `500ms`, `10s`, `1.5m`, `2h`, `30d`, or a bare number of seconds.
pub fn duration(s: &str) -> Result<Duration, UnitError> {
    let t = s.trim();
    let i = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(i);
    let n: f64 = num
        .parse()
        .map_err(|_| UnitError::NotADuration(s.to_owned()))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        other => {
            return Err(UnitError::DurationUnit {
                input: s.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
    // Too large is its own error: a huge number of days is not "zero".
    if !secs.is_finite() || secs > MAX_DURATION.as_secs_f64() {
        return Err(UnitError::DurationTooLarge(s.to_owned()));
    }
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(UnitError::Zero(s.to_owned())),
    }
}

/// Prints a span of milliseconds for a person: `45s`, `12m`, `2h 5m`, `3d 4h`; under a second
/// as `250ms`. Rounded down to the two largest units, as an alert line wants.
pub fn human_duration(ms: u128) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 if (s % 3600) / 60 == 0 => format!("{}h", s / 3600),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ if (s % 86_400) / 3600 == 0 => format!("{}d", s / 86_400),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Parses a size in bytes: `4096`, `1KB` (1000), `512KiB` (1024), `8MiB`, `1GB`, `1GiB`.
pub fn size(s: &str) -> Result<usize, UnitError> {
    let t = s.trim();
    let i = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(i);
    let n: usize = num.parse().map_err(|_| UnitError::NotASize(s.to_owned()))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1024,
        "m" | "mb" => 1_000_000,
        "mib" => 1024 * 1024,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1024 * 1024 * 1024,
        other => {
            return Err(UnitError::SizeUnit {
                input: s.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| UnitError::SizeTooLarge(s.to_owned()))
}

/// Parses an RFC 3339 timestamp to Unix milliseconds (a finer fraction is truncated).
pub fn parse_rfc3339(s: &str) -> Result<i64, UnitError> {
    use time::format_description::well_known::Rfc3339;
    let t = time::OffsetDateTime::parse(s.trim(), &Rfc3339)
        .map_err(|_| UnitError::NotATime(s.to_owned()))?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000))
        .map_err(|_| UnitError::NotATime(s.to_owned()))
}

/// Prints Unix milliseconds as RFC 3339 UTC with milliseconds, `2026-12-01T02:00:00.000Z`.
/// Times before 1970 print as the epoch and times after 9999 as its last millisecond: neither
/// is a time mcpulse records, and a printer must not fail.
pub fn format_rfc3339(unix_ms: i64) -> String {
    let nanos = i128::from(unix_ms.max(0)) * 1_000_000;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or_else(|_| {
        time::PrimitiveDateTime::MAX
            .assume_utc()
            .replace_nanosecond(999_000_000)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    });
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(duration(" 2 "), Ok(Duration::from_secs(2)), "bare seconds");
        assert_eq!(duration("37000d"), Ok(MAX_DURATION));
        assert_eq!(
            duration("10000000000000d"),
            Err(UnitError::DurationTooLarge("10000000000000d".into()))
        );
        assert_eq!(duration("0s"), Err(UnitError::Zero("0s".into())));
        for bad in ["soon", "-1s", "", "s", "1..2s"] {
            assert!(
                matches!(duration(bad), Err(UnitError::NotADuration(_))),
                "{bad}"
            );
        }
        assert_eq!(
            duration("5 fortnights").unwrap_err().to_string(),
            "\"5 fortnights\": unknown unit \"fortnights\"; use ms, s, m, h or d"
        );
        assert_eq!(
            duration("ten").unwrap_err().to_string(),
            "\"ten\" is not a duration: write e.g. 30s, 500ms, 5m, 1h or 30d"
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(250), "250ms");
        assert_eq!(human_duration(45_000), "45s");
        assert_eq!(human_duration(12 * 60_000 + 5_000), "12m");
        assert_eq!(human_duration(2 * 3_600_000), "2h");
        assert_eq!(human_duration(2 * 3_600_000 + 5 * 60_000), "2h 5m");
        assert_eq!(human_duration(3 * 86_400_000 + 4 * 3_600_000), "3d 4h");
    }

    #[test]
    fn sizes() {
        assert_eq!(size("8MiB"), Ok(8 << 20));
        assert_eq!(size("8mib"), Ok(8 << 20));
        assert_eq!(size("512 KiB"), Ok(512 << 10));
        assert_eq!(size("1KB"), Ok(1000));
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(size("12"), Ok(12), "a floor is the caller's");
        assert!(matches!(
            size("99999999999999999999GiB"),
            Err(UnitError::NotASize(_))
        ));
        assert!(matches!(
            size("18446744073709551615GiB"),
            Err(UnitError::SizeTooLarge(_))
        ));
        assert!(matches!(size("lots"), Err(UnitError::NotASize(_))));
        assert!(matches!(size("3 TiB"), Err(UnitError::SizeUnit { .. })));
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01Z"), Ok(1000));
        assert_eq!(
            parse_rfc3339("2026-12-01T02:00:00+01:00"),
            parse_rfc3339("2026-12-01T01:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2026-12-01T02:00:00-01:30"),
            parse_rfc3339("2026-12-01T03:30:00Z")
        );
        assert_eq!(
            parse_rfc3339("2026-12-01 02:00:00.5z"),
            parse_rfc3339("2026-12-01T02:00:00.500Z")
        );
        assert_eq!(
            parse_rfc3339("2026-12-01t02:00:00.123456Z").map(|m| m % 1000),
            Ok(123),
            "truncated to milliseconds"
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59.999Z"), Ok(-1));
        for bad in [
            "yesterday",
            "2026-02-31T00:00:00Z",
            "2026-12-01T25:00:00Z",
            "",
        ] {
            assert!(
                matches!(parse_rfc3339(bad), Err(UnitError::NotATime(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn printed_timestamps() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339(1_795_000_000_123),
            "2026-11-18T11:06:40.123Z"
        );
        assert_eq!(format_rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_rfc3339(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
        // What is printed parses back.
        for ms in [0, 1_795_000_000_123, 951_782_400_000, 253_402_300_799_999] {
            assert_eq!(parse_rfc3339(&format_rfc3339(ms)), Ok(ms));
        }
    }
}
