//! The status page (`/`, `/targets/{name}`): server-rendered HTML over the fleet snapshot and
//! the store, readable without JavaScript, with a small script of our own (`/assets/status.js`)
//! for live updates, local times and the theme toggle.
//!
//! Why hand-written HTML: the page is a few tables and one chart, and every string in it that
//! a server or a config chose goes through one of three helpers here ([`field`], [`message`],
//! [`block`]) that first make it inert (`mcpulse_wire::text`: controls, bidi overrides and
//! invisible characters escaped, length bounded) and then HTML-escape it. A template engine
//! would add a dependency and a build step for what `format!` does. The page is served with a
//! strict Content-Security-Policy ([`CSP`]): no inline script or style, nothing from another
//! origin, so even a missed escape could not run script.
//!
//! This module owns the shared frame (head, navigation, headers) and the assets; `fleet` the
//! fleet view, `target` one target's view, `chart` the SVG latency chart. It does not own the
//! data: the fleet snapshot ([`crate::fleet`]) and the store ([`super::HistorySource`]).

mod chart;
mod fleet;
mod target;

pub(super) use fleet::fleet_page;
pub(super) use target::target_page;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcpulse_wire::text;
use std::borrow::Cow;
use std::fmt::Write as _;

/// The page's Content-Security-Policy: only our own stylesheet and script, images only inline
/// (`data:`), requests only back to the monitor, no `<base>`, no framing.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The stylesheet and the script, compiled into the binary (no CDN, no build step).
const CSS: &str = include_str!("../../../assets/status.css");
const JS: &str = include_str!("../../../assets/status.js");

/// HTML-escapes `s` for text and double- or single-quoted attribute values. Borrowed when
/// there is nothing to escape.
pub fn esc(s: &str) -> Cow<'_, str> {
    if !s.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A one-line fact from a server or a config (a name, a version, a label), inert, at most
/// [`text::FIELD_CHARS`] characters, HTML-escaped.
pub(super) fn field(s: &str) -> String {
    esc(&text::field(s)).into_owned()
}

/// A message from a server (a finding, an error, an alert summary), inert, at most
/// [`text::MESSAGE_CHARS`] characters, HTML-escaped.
pub(super) fn message(s: &str) -> String {
    esc(&text::message(s)).into_owned()
}

/// Several lines (a pretty-printed schema) for a `<pre>`: each line inert, HTML-escaped, cut to
/// `max_lines` lines.
pub(super) fn block(s: &str, max_lines: usize) -> String {
    let mut out = String::new();
    for (i, line) in s.lines().enumerate() {
        if i == max_lines {
            out.push('\n');
            out.push(text::MARKER);
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&message(line));
    }
    out
}

/// A `<time>` the script shows in the viewer's zone; without the script, UTC.
pub(super) fn time(ms: i64) -> String {
    let iso = mcpulse_wire::units::format_rfc3339(ms);
    format!("<time datetime=\"{iso}\">{}</time>", iso.replace('T', " "))
}

/// How long ago, roughly (`3m`, `2h 5m`, `4d 1h`), from `now_ms`.
pub(super) fn ago(since_ms: i64, now_ms: i64) -> String {
    let s = (now_ms - since_ms).max(0) / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

/// A percentage with two decimals, or an em dash without data.
pub(super) fn percent(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "—".to_owned(), |r| format!("{:.2}%", r * 100.0))
}

/// Milliseconds, short.
pub(super) fn millis(ms: Option<f64>) -> String {
    match ms {
        Some(v) if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Some(v) => format!("{v:.0} ms"),
        None => "—".to_owned(),
    }
}

/// How often the script polls the API, in milliseconds: the shortest check interval of the
/// targets shown, so that a change shows within one check interval, but at least once a second
/// and at most every 10 seconds (a fleet of hourly checks still sees its counts move).
pub(super) fn live_every(intervals: impl Iterator<Item = i64>) -> i64 {
    intervals.min().unwrap_or(10_000).clamp(1_000, 10_000)
}

/// Percent-encodes a path segment or a query value.
pub(super) fn encode(s: &str) -> String {
    use mcpulse_transport::reference::{UNRESERVED, percent_encode};
    percent_encode(s, UNRESERVED)
}

/// The document around `body`: head, header with the theme toggle, and the script. The empty
/// icon keeps browsers from asking for `/favicon.ico` (a 404 on every page view).
pub(super) fn frame(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title} · mcpulse</title>\n\
         <link rel=\"icon\" href=\"data:,\">\n\
         <link rel=\"stylesheet\" href=\"/assets/status.css\">\n\
         <script src=\"/assets/status.js\" defer></script>\n</head>\n<body>\n\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\n\
         <header><a class=\"brand\" href=\"/\">mcpulse</a>\
         <button type=\"button\" id=\"theme\" aria-pressed=\"false\" hidden>Dark theme</button></header>\n\
         <main id=\"main\">\n{body}</main>\n</body>\n</html>\n",
        title = esc(title),
    );
    out
}

/// An HTML page with the security headers: CSP, no sniffing, no referrer, no caching (the
/// page shows live state).
pub(super) fn html(status: StatusCode, page: String) -> Response {
    let mut r = (status, page).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    security_headers(h);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The headers every page, asset and badge carries.
pub(in crate::api) fn security_headers(h: &mut axum::http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// `GET /login`: the form (with no token configured, there is nothing to enter).
pub(super) async fn login() -> Response {
    login_page("")
}

/// The token form, answered `401` (with the bearer challenge, as the API answers). It posts to
/// `/login` (same origin, as the CSP's `form-action 'self'` requires); the field is a password
/// field, so the token is not shown or kept in the form history.
pub(in crate::api) fn login_page(error: &str) -> Response {
    let mut b = String::from("<h1>Sign in</h1>\n");
    if !error.is_empty() {
        let _ = writeln!(
            b,
            "<p class=\"error\" role=\"alert\">{}</p>",
            message(error)
        );
    }
    b.push_str(
        "<p>This monitor's page needs its API token (<code>[server] token</code>). It is kept in \
         this browser for the session, as a cookie only the monitor can read.</p>\n\
         <form class=\"login\" method=\"post\" action=\"/login\">\
         <label>Token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required autofocus></label> \
         <button type=\"submit\">Sign in</button></form>\n",
    );
    let mut r = html(StatusCode::UNAUTHORIZED, frame("Sign in", &b));
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mcpulse\""),
    );
    r
}

/// An error as a page (a browser asked for HTML).
pub(super) fn error_page(status: StatusCode, msg: &str) -> Response {
    let body = format!(
        "<h1>{}</h1>\n<p>{}</p>\n<p><a href=\"/\">Back to the fleet</a></p>\n",
        status.as_u16(),
        message(msg)
    );
    html(status, frame("Error", &body))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    security_headers(h);
    // Compiled in: it changes only with the binary. An hour keeps a restart's new version
    // from waiting long.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    r
}

pub(super) async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

pub(super) async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(esc("plain"), "plain");
        assert_eq!(
            esc("<script>\"a\"&'b'</script>"),
            "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(field("a\u{202e}b<"), "a\\u{202e}b&lt;");
        assert_eq!(
            block("{\n  \"<x>\": 1\n}", 2),
            "{\n  &quot;&lt;x&gt;&quot;: 1\n…"
        );
    }

    #[test]
    fn the_script_polls_once_per_shortest_interval_within_bounds() {
        assert_eq!(live_every([30_000, 2_000, 60_000].into_iter()), 2_000);
        assert_eq!(live_every([500].into_iter()), 1_000);
        assert_eq!(live_every([3_600_000].into_iter()), 10_000);
        assert_eq!(live_every(std::iter::empty()), 10_000);
    }

    #[test]
    fn durations() {
        assert_eq!(ago(0, 5_000), "5s");
        assert_eq!(ago(0, 125_000), "2m");
        assert_eq!(ago(0, 3_900_000), "1h 5m");
        assert_eq!(ago(0, 90_000_000), "1d 1h");
    }
}
