//! The latency chart of a target view: p50 and p95 of each phase per time bucket, drawn
//! server-side as an inline SVG (no script, no chart library), with a table of the same
//! figures for screen readers and for reading exact values.
//!
//! Pure: checks in, markup out. The phases are the judge's timings (`Timings`), read from the
//! stored JSON; a phase without any value in the range is left out.

use super::millis;
use std::fmt::Write as _;

/// The phases drawn, in order, and their labels. Six: one colour each in the stylesheet.
pub(super) const PHASES: [(&str, &str); 6] = [
    ("total", "total"),
    ("connect", "connect"),
    ("startup", "start-up"),
    ("handshake", "handshake"),
    ("tools_list", "tools/list"),
    ("calls", "calls"),
];

/// Buckets across the range.
pub(super) const BUCKETS: usize = 60;

const W: f64 = 900.0;
const H: f64 = 240.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 20.0;
const TOP: f64 = 8.0;

/// One phase's p50 and p95 per bucket (`None`: no value in that bucket).
pub(super) struct Series {
    pub phase: usize,
    pub p50: Vec<Option<f64>>,
    pub p95: Vec<Option<f64>>,
}

/// Buckets the checks of `(from_ms, to_ms]` (time, timings JSON) and takes nearest-rank p50
/// and p95 per phase and bucket. Down checks are left out by the caller: their durations say
/// how long failing took, not how fast the server is.
pub(super) fn series(
    checks: &[(i64, &crate::check::PhaseTimings)],
    from_ms: i64,
    to_ms: i64,
) -> Vec<Series> {
    let span = (to_ms - from_ms).max(1);
    let mut values: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); BUCKETS]; PHASES.len()];
    for (at, timings) in checks {
        let b = usize::try_from((at - from_ms - 1).max(0) * BUCKETS as i64 / span)
            .unwrap_or(0)
            .min(BUCKETS - 1);
        for (p, v) in timings.phases().into_iter().enumerate() {
            if let Some(v) = v
                && v.is_finite()
                && v >= 0.0
                && let Some(slot) = values.get_mut(p).and_then(|s| s.get_mut(b))
            {
                slot.push(v);
            }
        }
    }
    values
        .into_iter()
        .enumerate()
        .filter(|(_, buckets)| buckets.iter().any(|b| !b.is_empty()))
        .map(|(phase, buckets)| {
            let (mut p50, mut p95) = (Vec::new(), Vec::new());
            for mut b in buckets {
                b.sort_unstable_by(f64::total_cmp);
                p50.push(rank(&b, 50));
                p95.push(rank(&b, 95));
            }
            Series { phase, p50, p95 }
        })
        .collect()
}

fn rank(sorted: &[f64], p: usize) -> Option<f64> {
    let n = sorted.len();
    (n > 0).then(|| sorted[(p * n).div_ceil(100).clamp(1, n) - 1])
}

/// The SVG, its legend and a data table (in a `<details>`).
pub(super) fn render(series: &[Series], range_label: &str) -> String {
    if series.is_empty() {
        return "<p>No answered checks in this range.</p>\n".to_owned();
    }
    let max = series
        .iter()
        .flat_map(|s| s.p95.iter().chain(s.p50.iter()).flatten())
        .fold(0.0f64, |a, b| a.max(*b))
        .max(1.0);
    let x = |i: usize| LEFT + (W - LEFT - 4.0) * (i as f64 + 0.5) / BUCKETS as f64;
    let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - v / max);
    let mut s = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"latency per phase over {range_label}, p50 solid, p95 dashed; the table below has the figures\">\n"
    );
    for frac in [0.0, 0.5, 1.0] {
        let v = max * frac;
        let _ = writeln!(
            s,
            "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{W}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/><text x=\"2\" y=\"{ty:.1}\">{}</text>",
            millis(Some(v)),
            yy = y(v),
            ty = y(v) + 3.0
        );
    }
    for se in series {
        for (class, vals) in [("p50", &se.p50), ("p95", &se.p95)] {
            // A gap in the data breaks the line.
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for (i, v) in vals.iter().enumerate() {
                match v {
                    Some(v) => {
                        if let Some(r) = runs.last_mut() {
                            r.push((x(i), y(*v)));
                        }
                    }
                    None => runs.push(Vec::new()),
                }
            }
            for r in runs.iter_mut().filter(|r| !r.is_empty()) {
                // A lone bucket (a new target, or one between gaps) would be a line of no
                // length, which draws nothing: make it a short dash.
                if let [(px, py)] = r[..] {
                    *r = vec![(px - 3.0, py), (px + 3.0, py)];
                }
                let points: Vec<String> = r
                    .iter()
                    .map(|(px, py)| format!("{px:.1},{py:.1}"))
                    .collect();
                let _ = writeln!(
                    s,
                    "<polyline class=\"s{} {class}\" points=\"{}\"/>",
                    se.phase,
                    points.join(" ")
                );
            }
        }
    }
    s.push_str("</svg>\n<ul class=\"legend\">");
    for se in series {
        let _ = write!(
            s,
            "<li><span class=\"sw s{}\"></span>{}</li>",
            se.phase, PHASES[se.phase].1
        );
    }
    s.push_str("<li>solid p50 · dashed p95</li></ul>\n");
    s.push_str("<details><summary>Figures</summary><div class=\"scroll\"><table><thead><tr><th scope=\"col\">Bucket</th>");
    for se in series {
        let _ = write!(
            s,
            "<th scope=\"col\">{0} p50</th><th scope=\"col\">{0} p95</th>",
            PHASES[se.phase].1
        );
    }
    s.push_str("</tr></thead><tbody>");
    for i in 0..BUCKETS {
        if series.iter().all(|se| se.p50[i].is_none()) {
            continue;
        }
        let _ = write!(s, "<tr><th scope=\"row\">{}</th>", i + 1);
        for se in series {
            let _ = write!(
                s,
                "<td class=\"num\">{}</td><td class=\"num\">{}</td>",
                millis(se.p50[i]),
                millis(se.p95[i])
            );
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table></div></details>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn buckets_and_percentiles() {
        let t = |v: serde_json::Value| -> crate::check::PhaseTimings {
            serde_json::from_value(v).unwrap()
        };
        let a = t(json!({"total": 10.0, "handshake": 4.0, "dns": null, "other": {"x": 1}}));
        let b = t(json!({"total": 30.0, "handshake": 6.0, "connect": "n/a"}));
        let c = t(json!({"total": 20.0, "connect": null}));
        let checks = [(1, &a), (2, &b), (3, &c), (60_000, &a)];
        let s = series(&checks, 0, 60_000);
        assert_eq!(s.len(), 2, "total and handshake only");
        assert_eq!(s[0].phase, 0);
        assert_eq!(s[0].p50[0], Some(20.0));
        assert_eq!(s[0].p95[0], Some(30.0));
        assert_eq!(s[0].p50[BUCKETS - 1], Some(10.0));
        assert_eq!(s[0].p50[1], None);
        let svg = render(&s, "24h");
        assert!(svg.contains("<polyline class=\"s0 p50\""));
        assert!(svg.contains("<polyline class=\"s3 p95\""));
        // Handshake has one bucket: still drawn, as a short dash (two points), not a dot of
        // no length.
        for line in svg.lines().filter(|l| l.starts_with("<polyline")) {
            let points = line.split("points=\"").nth(1).unwrap_or("");
            assert!(points.split(' ').count() >= 2, "{line}");
        }
        assert_eq!(
            render(&[], "24h"),
            "<p>No answered checks in this range.</p>\n"
        );
    }
}
