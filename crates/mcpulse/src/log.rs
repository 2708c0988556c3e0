//! How log fields are written: every value of every line, whoever logs it, is made inert.
//!
//! tracing-subscriber's default writes a `%value` (Display) field raw, so a server's error
//! message, a protocol version or an imported target name could carry ESC sequences and
//! newlines into the monitor's log, and forge whole lines (`INFO alert target=prod
//! kind=recovered`). Rather than remember a wrapper at each of the daemon's call sites, the
//! subscriber formats fields with [`InertFields`]: the message through
//! [`text::message`](mcpulse_wire::text::message), every other value through
//! [`text::log_value`](mcpulse_wire::text::log_value) — bare when it is one plain token
//! (`kind=degraded`, `action=Trigger`), quoted with `"` and `\` escaped otherwise
//! (`summary="search is down: connect-failed"`), so a value can neither end its line nor pass
//! for another field, and every field is quoted by the same rule.
//!
//! [`InertJson`] writes the same events as one JSON object a line (`--log-json`): the values
//! are made inert by the same functions before serde_json quotes them, so besides `"`, `\` and
//! C0 controls (which JSON escapes anyway) neither C1 controls nor bidi overrides reach a
//! terminal that shows the file.

use mcpulse_wire::text;
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `--log-level`: error, warn, info, debug or trace.
pub fn level(level: &str) -> anyhow::Result<tracing::Level> {
    level.parse().map_err(|_| {
        anyhow::anyhow!("--log-level {level:?}: use error, warn, info, debug or trace")
    })
}

/// Sets up logging for a long-running command (`supervise`, `gateway`): stderr, or `file`
/// (appended to, created if missing); text with every field inert ([`InertFields`]) or, with
/// `json`, one JSON object a line ([`InertJson`]). Never stdout.
pub fn init(level_name: &str, file: Option<&std::path::Path>, json: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    let level = level(level_name)?;
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .with_timer(Timestamp);
    let result = match file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("--log-file {}", path.display()))?;
            let builder = builder
                .with_writer(std::sync::Mutex::new(file))
                .with_ansi(false);
            if json {
                builder.event_format(InertJson).try_init()
            } else {
                builder.fmt_fields(InertFields).try_init()
            }
        }
        None => {
            use std::io::IsTerminal;
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let builder = builder.with_writer(std::io::stderr);
            if json {
                builder.with_ansi(false).event_format(InertJson).try_init()
            } else {
                builder.with_ansi(ansi).fmt_fields(InertFields).try_init()
            }
        }
    };
    // A subscriber already set (in-process tests) keeps logging where it did.
    drop(result);
    Ok(())
}

/// The text lines' timestamp, as tracing-subscriber's default writes it
/// (`2026-12-02T07:11:32.078122Z`, UTC, microseconds), with the date and time up to the
/// second formatted once a second per thread rather than on every line: the gateway writes a
/// line for every relayed request, and formatting the date was a quarter of the line's cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timestamp;

thread_local! {
    /// The second last formatted, and its `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: std::cell::RefCell<(u64, String)> =
        const { std::cell::RefCell::new((u64::MAX, String::new())) };
}

impl tracing_subscriber::fmt::time::FormatTime for Timestamp {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = now.as_secs();
        SECOND.with_borrow_mut(|(at, prefix)| {
            if *at != secs || prefix.is_empty() {
                let ms = i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
                let full = mcpulse_wire::units::format_rfc3339(ms);
                prefix.clear();
                prefix.push_str(full.split('.').next().unwrap_or(&full));
                *at = secs;
            }
            w.write_str(prefix)?;
            // `.uuuuuuZ`, the digits without the formatting machinery.
            let mut tail = *b".000000Z";
            let mut us = now.subsec_micros();
            for d in tail[1..7].iter_mut().rev() {
                *d = b'0' + (us % 10) as u8;
                us /= 10;
            }
            w.write_str(std::str::from_utf8(&tail).map_err(|_| fmt::Error)?)
        })
    }
}

/// One JSON object a line: `timestamp` (RFC 3339, UTC, ms), `level`, `message`, then the
/// event's fields (numbers and booleans as such, everything else an inert string). Span
/// fields are left out.
#[derive(Debug, Clone, Copy, Default)]
pub struct InertJson;

impl<S, N> FormatEvent<S, N> for InertJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut map = serde_json::Map::new();
        map.insert(
            "timestamp".into(),
            mcpulse_wire::units::format_rfc3339(now_ms).into(),
        );
        map.insert("level".into(), event.metadata().level().as_str().into());
        event.record(&mut JsonVisitor(&mut map));
        let line = serde_json::to_string(&map).map_err(|_| fmt::Error)?;
        writeln!(writer, "{line}")
    }
}

struct JsonVisitor<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl JsonVisitor<'_> {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        let name = field.name();
        let name = name.strip_prefix("r#").unwrap_or(name);
        // Our own keys come first and stay ours.
        if name != "timestamp" && name != "level" {
            self.0.insert(name.to_string(), value);
        }
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, text::message(value).into_owned().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(
            field,
            text::message(&format!("{value:?}")).into_owned().into(),
        );
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
}

/// The field formatter of mcpulse's log lines (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct InertFields;

impl<'writer> FormatFields<'writer> for InertFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut v = Visitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct Visitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visitor<'_, '_> {
    fn field(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if !self.first {
            self.result = self.writer.write_char(' ');
        }
        self.first = false;
        let name = field.name();
        self.result = self.result.and_then(|()| {
            if name == "message" {
                self.writer.write_str(&text::message(value))
            } else {
                self.writer
                    .write_str(name.strip_prefix("r#").unwrap_or(name))?;
                self.writer.write_char('=')?;
                self.writer.write_str(&text::log_value(value))
            }
        });
    }

    /// A number: inert as it is (digits, `.`, `-`, `e`, `inf`, `NaN`), written as its
    /// `Debug` (what `record_debug` gave) without a string in between.
    fn number(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        if !self.first {
            self.result = self.writer.write_char(' ');
        }
        self.first = false;
        let name = field.name();
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.result = self
            .result
            .and_then(|()| write!(self.writer, "{name}={value:?}"));
    }
}

impl Visit for Visitor<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here too, their Debug being their Display.
        self.field(field, &format!("{value:?}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.number(field, &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, &value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, &value);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::InertFields;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes as text lines, without the time: every field through [`InertFields`].
    fn text_lines(log: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .fmt_fields(InertFields)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn json_lines_are_inert_and_one_object_each() {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .event_format(super::InertJson)
            .finish();
        let hostile = "x\x1b]0;owned\x07\n{\"level\":\"ERROR\"}\u{9b}31m\u{202e}";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(tool = %hostile, failures = 3u64, busy = true, level = "forged", "junk {hostile}");
        });
        let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            !log.chars()
                .any(|c| c != '\n' && mcpulse_wire::text::is_escaped(c)),
            "{log:?}"
        );
        let v: serde_json::Value = serde_json::from_str(log.trim_end()).unwrap();
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["failures"], 3);
        assert_eq!(v["busy"], true);
        assert_eq!(
            v["tool"],
            "x\\x1b]0;owned\\x07\\n{\"level\":\"ERROR\"}\\u{9b}31m\\u{202e}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .starts_with("junk x\\x1b]0;owned")
        );
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn every_field_is_inert_and_quoted_by_one_rule() {
        let summary = "initialize was rejected: -32000 \x1b]0;owned\x07\x1b[2J\nFAKE 2026-12-01T00:00:00Z  INFO alert target=prod kind=\"recovered\"\u{9b}31m";
        let log = text_lines(|| {
            tracing::info!(target = %"prod\u{202e}", kind = "degraded", action = ?Some(1), summary = %summary, "alert");
        });
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            !log.trim_end_matches('\n')
                .chars()
                .any(mcpulse_wire::text::is_escaped),
            "{log:?}"
        );
        assert!(
            log.contains(
                "INFO alert target=\"prod\\u{202e}\" kind=degraded action=Some(1) summary=\"initialize was rejected: -32000 \\x1b]0;owned\\x07\\x1b[2J\\nFAKE 2026-12-01T00:00:00Z  INFO alert target=prod kind=\\\"recovered\\\"\\u{9b}31m\"\n"
            ),
            "{log}"
        );
    }

    #[test]
    fn the_timestamp_is_the_default_format_and_the_clock_time() {
        use tracing_subscriber::fmt::time::FormatTime;
        let line = |t: &dyn Fn(&mut super::Writer<'_>) -> std::fmt::Result| {
            let mut s = String::new();
            t(&mut super::Writer::new(&mut s)).unwrap();
            s
        };
        let before = std::time::SystemTime::now();
        let ours = line(&|w| super::Timestamp.format_time(w));
        let again = line(&|w| super::Timestamp.format_time(w));
        let theirs = line(&|w| tracing_subscriber::fmt::time::SystemTime.format_time(w));
        let after = std::time::SystemTime::now();
        for t in [&ours, &again] {
            // tracing-subscriber's own layout: `2026-12-02T07:11:32.078122Z`.
            assert_eq!(t.len(), theirs.len(), "{t} against {theirs}");
            assert!(t.ends_with('Z') && t.as_bytes()[19] == b'.', "{t}");
            assert!(t[20..26].bytes().all(|b| b.is_ascii_digit()), "{t}");
            let second = |at: std::time::SystemTime| {
                let ms = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis();
                mcpulse_wire::units::format_rfc3339(i64::try_from(ms).unwrap())[..19].to_owned()
            };
            assert!(t[..19] == second(before) || t[..19] == second(after), "{t}");
        }
    }

    #[test]
    fn numbers_are_written_as_their_debug() {
        let log = text_lines(|| {
            tracing::info!(
                duration_ms = 0.998,
                n = 3u64,
                d = -2i64,
                r#type = 1e300,
                nan = f64::NAN,
                method = "tools/call",
                "request"
            );
        });
        assert!(
            log.ends_with(
                "INFO request duration_ms=0.998 n=3 d=-2 type=1e300 nan=NaN method=tools/call\n"
            ),
            "{log:?}"
        );
    }
}
