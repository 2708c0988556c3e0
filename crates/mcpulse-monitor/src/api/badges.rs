//! Badges: `/badges/{name}/{badge}` as an SVG (`status.svg`, `uptime-24h.svg`, `uptime-7d.svg`,
//! `uptime-30d.svg`, `latency.svg`, `grade.svg`) or as Shields' endpoint JSON
//! (`shields.json?badge=status|uptime-24h|…`, for `img.shields.io/endpoint?url=…`).
//!
//! Cacheable: `Cache-Control: max-age=60` (a minute is about one check interval) and a strong
//! `ETag` (a hash of the body), answered with 304 when it matches. Under the API's token like
//! the API itself. Labels are ours; the messages are a status, a percentage, a duration or a
//! grade, and everything is escaped anyway.
//!
//! This module does not own the figures: the fleet snapshot and the store's statistics.

use super::page::{esc, security_headers};
use super::{ApiState, error};
use crate::check::Stats;
use crate::state::Health;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

/// How long a badge may be cached, in seconds.
pub const BADGE_MAX_AGE: u32 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Badge {
    Status,
    Uptime(&'static str),
    Latency,
    Grade,
}

impl Badge {
    fn parse(s: &str) -> Option<Badge> {
        Some(match s {
            "status" => Badge::Status,
            "uptime-24h" => Badge::Uptime("24h"),
            "uptime-7d" => Badge::Uptime("7d"),
            "uptime-30d" => Badge::Uptime("30d"),
            "latency" => Badge::Latency,
            "grade" => Badge::Grade,
            _ => return None,
        })
    }

    fn needs_stats(self) -> bool {
        matches!(self, Badge::Uptime(_) | Badge::Latency)
    }
}

/// Shields' named colours, which the SVG spells as hex.
fn hex(color: &str) -> &'static str {
    match color {
        "brightgreen" => "#4c1",
        "green" => "#97ca00",
        "yellow" => "#dfb317",
        "orange" => "#fe7d37",
        "red" => "#e05d44",
        _ => "#9f9f9f",
    }
}

/// Label, message and colour of a badge.
fn face(
    b: Badge,
    status: Health,
    grade: Option<&str>,
    stats: &[Stats],
) -> (String, String, &'static str) {
    let window = |w: &str| stats.iter().find(|s| s.window == w);
    match b {
        Badge::Status => {
            let color = match status {
                Health::Healthy => "brightgreen",
                Health::Degraded => "yellow",
                Health::Down => "red",
                Health::Unknown => "lightgrey",
            };
            ("mcp".into(), status.as_str().into(), color)
        }
        Badge::Uptime(w) => match window(w).and_then(|s| s.uptime) {
            Some(u) => {
                let color = match u {
                    u if u >= 0.999 => "brightgreen",
                    u if u >= 0.99 => "green",
                    u if u >= 0.95 => "yellow",
                    u if u >= 0.9 => "orange",
                    _ => "red",
                };
                (format!("uptime {w}"), format!("{:.2}%", u * 100.0), color)
            }
            None => (format!("uptime {w}"), "no data".into(), "lightgrey"),
        },
        Badge::Latency => match window("24h").and_then(|s| s.p50_ms) {
            Some(ms) => {
                let color = match ms {
                    ms if ms < 200.0 => "brightgreen",
                    ms if ms < 500.0 => "green",
                    ms if ms < 1000.0 => "yellow",
                    ms if ms < 3000.0 => "orange",
                    _ => "red",
                };
                let msg = if ms >= 1000.0 {
                    format!("{:.1} s", ms / 1000.0)
                } else {
                    format!("{ms:.0} ms")
                };
                ("latency p50 24h".into(), msg, color)
            }
            None => ("latency p50 24h".into(), "no data".into(), "lightgrey"),
        },
        Badge::Grade => match grade {
            Some(g) => {
                let color = match g {
                    "A" => "brightgreen",
                    "B" => "green",
                    "C" => "yellow",
                    "D" => "orange",
                    _ => "red",
                };
                (
                    "security".into(),
                    mcpulse_wire::text::field(g).into_owned(),
                    color,
                )
            }
            None => ("security".into(), "not graded".into(), "lightgrey"),
        },
    }
}

/// Roughly the width of `s` in 11px Verdana, as Shields measures it.
fn width(s: &str) -> usize {
    s.chars()
        .map(|c| {
            if c.is_ascii_uppercase() || c == 'm' || c == 'w' {
                9
            } else {
                7
            }
        })
        .sum::<usize>()
        + 10
}

/// A flat badge, two boxes.
fn svg(label: &str, message: &str, color: &str) -> String {
    let (lw, mw) = (width(label), width(message));
    let w = lw + mw;
    let (label, message) = (esc(label), esc(message));
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"20\" role=\"img\" aria-label=\"{label}: {message}\">\
<title>{label}: {message}</title>\
<rect width=\"{lw}\" height=\"20\" fill=\"#555\"/><rect x=\"{lw}\" width=\"{mw}\" height=\"20\" fill=\"{color}\"/>\
<g fill=\"#fff\" text-anchor=\"middle\" font-family=\"Verdana,Geneva,DejaVu Sans,sans-serif\" font-size=\"11\">\
<text x=\"{lx}\" y=\"14\">{label}</text><text x=\"{mx}\" y=\"14\">{message}</text></g></svg>\n",
        color = hex(color),
        lx = lw / 2,
        mx = lw + mw / 2,
    )
}

pub(super) async fn badge_handler(
    State(s): State<ApiState>,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let Ok(Path((name, file))) = p else {
        return error(StatusCode::BAD_REQUEST, "the badge path is malformed");
    };
    let (badge, json) = if file == "shields.json" {
        let which = q
            .ok()
            .and_then(|Query(p)| p.into_iter().find(|(k, _)| k == "badge").map(|(_, v)| v))
            .unwrap_or_else(|| "status".into());
        (Badge::parse(&which), true)
    } else {
        (file.strip_suffix(".svg").and_then(Badge::parse), false)
    };
    let Some(badge) = badge else {
        return error(
            StatusCode::NOT_FOUND,
            "no such badge: status.svg, uptime-24h.svg, uptime-7d.svg, uptime-30d.svg, latency.svg, grade.svg, or shields.json?badge=<one of those names>",
        );
    };
    let Some(view) = s.fleet.get(&name) else {
        return super::fleet::unknown_target(&name);
    };
    let stats = if badge.needs_stats() {
        let now = s.now();
        match super::read_history(&s, move |h| h.stats(&name, now)).await {
            Ok(st) => st,
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
        }
    } else {
        Vec::new()
    };
    let grade = view.last.as_ref().and_then(|l| l.grade.as_deref());
    let (label, message, color) = face(badge, view.status, grade, &stats);
    let (body, kind) = if json {
        let body =
            json!({ "schemaVersion": 1, "label": label, "message": message, "color": color });
        (body.to_string(), "application/json")
    } else {
        (svg(&label, &message, color), "image/svg+xml")
    };
    let etag = format!("\"{}\"", hex_digest(&body));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body.into_response()
    };
    let h = r.headers_mut();
    if !fresh {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    }
    security_headers(h);
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={BADGE_MAX_AGE}")) {
        h.insert(header::CACHE_CONTROL, v);
    }
    r
}

fn hex_digest(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faces() {
        let stats = [Stats {
            window: "24h".into(),
            checks: 10,
            uptime: Some(0.995),
            healthy_ratio: Some(0.9),
            p50_ms: Some(1234.0),
            p95_ms: None,
            p99_ms: None,
        }];
        assert_eq!(
            face(Badge::Status, Health::Down, None, &[]),
            ("mcp".into(), "down".into(), "red")
        );
        assert_eq!(
            face(Badge::Uptime("24h"), Health::Down, None, &stats),
            ("uptime 24h".into(), "99.50%".into(), "green")
        );
        assert_eq!(
            face(Badge::Uptime("7d"), Health::Down, None, &stats).1,
            "no data"
        );
        assert_eq!(face(Badge::Latency, Health::Down, None, &stats).1, "1.2 s");
        assert_eq!(
            face(Badge::Grade, Health::Down, Some("A"), &[]).2,
            "brightgreen"
        );
        assert!(svg("a<b", "c\"d", "red").contains("a&lt;b: c&quot;d"));
    }
}
