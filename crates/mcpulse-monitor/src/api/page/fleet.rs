//! The fleet view (`/`): counts, then one row per target of the requested page, filtered,
//! searched and sorted on the server, with uptime over 24h, 7d, 30d and 90d.
//!
//! Everything but uptime comes from the in-memory fleet snapshot. Uptime comes from the
//! store's hourly rollup in **one** query for the targets of the page
//! ([`super::super::HistorySource::uptime_hours`]), never one per target, so the cost of a
//! page is bounded by its size, not the fleet's.

use super::{ago, encode, field, frame, html, percent, time};
use crate::api::ApiState;
use crate::config::Maintenance;
use crate::fleet::TargetView;
use crate::state::Health;
use crate::store::{HOUR_MS, HourCount};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use std::collections::HashMap;
use std::fmt::Write as _;

/// Rows per page by default, and at most.
pub const DEFAULT_PER_PAGE: usize = 50;
pub const MAX_PER_PAGE: usize = 500;

/// The uptime windows of the fleet view, in hours of the rollup.
const WINDOWS: [(&str, i64); 4] = [
    ("24h", 24),
    ("7d", 7 * 24),
    ("30d", 30 * 24),
    ("90d", 90 * 24),
];

/// The days of the uptime bar.
const BAR_DAYS: i64 = 90;

/// The state filter's choices ("" is any).
const STATES: [&str; 8] = [
    "",
    "healthy",
    "degraded",
    "down",
    "unknown",
    "drifted",
    "flapping",
    "maintenance",
];

/// The sort keys.
const SORTS: [(&str, &str); 6] = [
    ("name", "Name"),
    ("state", "State"),
    ("since", "State since"),
    ("last", "Last check"),
    ("grade", "Grade"),
    ("tools", "Tools"),
];

/// The page's request, validated.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FleetQuery {
    state: String,
    label: String,
    q: String,
    sort: String,
    desc: bool,
    page: usize,
    per_page: usize,
}

impl Default for FleetQuery {
    fn default() -> Self {
        FleetQuery {
            state: String::new(),
            label: String::new(),
            q: String::new(),
            sort: "name".into(),
            desc: false,
            page: 1,
            per_page: DEFAULT_PER_PAGE,
        }
    }
}

impl FleetQuery {
    fn parse(pairs: Vec<(String, String)>) -> Result<FleetQuery, String> {
        let mut f = FleetQuery::default();
        for (k, v) in pairs {
            match k.as_str() {
                "state" if STATES.contains(&v.as_str()) => f.state = v,
                "state" => return Err(format!("state must be one of {}", STATES[1..].join(", "))),
                "label" => f.label = v.trim().to_owned(),
                "q" => f.q = v.trim().to_owned(),
                "sort" if SORTS.iter().any(|(s, _)| *s == v) => f.sort = v,
                "sort" => {
                    return Err("sort must be name, state, since, last, grade or tools".into());
                }
                "dir" if v == "asc" || v == "desc" => f.desc = v == "desc",
                "dir" => return Err("dir must be asc or desc".into()),
                "page" => {
                    f.page = v
                        .parse()
                        .ok()
                        .filter(|p| *p >= 1)
                        .ok_or("page must be a whole number from 1")?
                }
                "per_page" => {
                    f.per_page = v
                        .parse()
                        .ok()
                        .filter(|p| (1..=MAX_PER_PAGE).contains(p))
                        .ok_or(format!(
                            "per_page must be a whole number from 1 to {MAX_PER_PAGE}"
                        ))?
                }
                _ => {}
            }
        }
        Ok(f)
    }

    /// This query's string with `page` replaced.
    fn with_page(&self, page: usize) -> String {
        let mut s = format!("?page={page}&per_page={}", self.per_page);
        for (k, v) in [
            ("state", &self.state),
            ("label", &self.label),
            ("q", &self.q),
        ] {
            if !v.is_empty() {
                let _ = write!(s, "&{k}={}", encode(v));
            }
        }
        let _ = write!(
            s,
            "&sort={}&dir={}",
            self.sort,
            if self.desc { "desc" } else { "asc" }
        );
        s
    }
}

/// Whether a maintenance window covers `name` at `now_ms` (the alert policy's rule: no
/// targets listed means every target).
pub(super) fn in_maintenance(windows: &[Maintenance], name: &str, now_ms: i64) -> bool {
    windows.iter().any(|w| {
        w.start_ms <= now_ms
            && now_ms < w.end_ms
            && (w.targets.is_empty() || w.targets.iter().any(|t| t == name))
    })
}

fn matches(v: &TargetView, f: &FleetQuery, maint: bool) -> bool {
    let state = match f.state.as_str() {
        "" => true,
        "drifted" => v.drift.is_some(),
        "flapping" => v.flapping,
        "maintenance" => maint,
        s => v.status.as_str() == s,
    };
    let label = f.label.is_empty()
        || match f.label.split_once('=') {
            Some((k, val)) => v.labels.get(k.trim()).is_some_and(|x| x == val.trim()),
            None => v.labels.contains_key(&f.label) || v.labels.values().any(|x| *x == f.label),
        };
    let q = f.q.is_empty() || v.name.to_lowercase().contains(&f.q.to_lowercase());
    state && label && q
}

/// Worst first: down, degraded, unknown, healthy.
fn rank(h: Health) -> u8 {
    match h {
        Health::Down => 0,
        Health::Degraded => 1,
        Health::Unknown => 2,
        Health::Healthy => 3,
    }
}

fn sort(rows: &mut [(&TargetView, bool)], f: &FleetQuery) {
    let last = |v: &TargetView| v.last.as_ref().map(|l| l.at_ms);
    match f.sort.as_str() {
        "state" => rows.sort_by(|a, b| {
            rank(a.0.status)
                .cmp(&rank(b.0.status))
                .then(a.0.name.cmp(&b.0.name))
        }),
        "since" => rows.sort_by(|a, b| {
            a.0.since_ms
                .cmp(&b.0.since_ms)
                .then(a.0.name.cmp(&b.0.name))
        }),
        "last" => rows.sort_by(|a, b| last(a.0).cmp(&last(b.0)).then(a.0.name.cmp(&b.0.name))),
        "grade" => rows.sort_by(|a, b| {
            let g = |v: &TargetView| v.last.as_ref().and_then(|l| l.grade.clone());
            g(a.0).cmp(&g(b.0)).then(a.0.name.cmp(&b.0.name))
        }),
        "tools" => rows.sort_by(|a, b| {
            let t = |v: &TargetView| v.last.as_ref().and_then(|l| l.tool_count);
            t(a.0).cmp(&t(b.0)).then(a.0.name.cmp(&b.0.name))
        }),
        _ => {} // by name: the snapshot's order
    }
    if f.desc {
        rows.reverse();
    }
}

/// One target's uptime per window and its daily bar, from its rollup rows.
pub(super) struct Uptime {
    pub windows: [(&'static str, Option<f64>); 4],
    /// Per day, oldest first: `None` without checks.
    pub days: Vec<Option<f64>>,
}

pub(super) fn uptime(rows: &[&HourCount], now_ms: i64) -> Uptime {
    let now_hour = now_ms.div_euclid(HOUR_MS);
    let windows = WINDOWS.map(|(name, hours)| {
        let (mut checks, mut up) = (0u64, 0u64);
        for r in rows.iter().filter(|r| r.hour > now_hour - hours) {
            checks += r.checks;
            up += r.up;
        }
        (name, (checks > 0).then(|| up as f64 / checks as f64))
    });
    let mut days = vec![(0u64, 0u64); BAR_DAYS as usize];
    for r in rows {
        let age = (now_hour - r.hour).div_euclid(24);
        if let Some(d) = usize::try_from(BAR_DAYS - 1 - age)
            .ok()
            .and_then(|i| days.get_mut(i))
        {
            d.0 += r.checks;
            d.1 += r.up;
        }
    }
    Uptime {
        windows,
        days: days
            .into_iter()
            .map(|(c, u)| (c > 0).then(|| u as f64 / c as f64))
            .collect(),
    }
}

/// A CSS class for an uptime ratio.
pub(super) fn uptime_class(r: Option<f64>) -> &'static str {
    match r {
        None => "none",
        Some(r) if r >= 0.999 => "up",
        Some(r) if r >= 0.95 => "part",
        Some(_) => "low",
    }
}

/// The 90-day bar: one path per uptime class, a 2×10 box per day, so a row costs four
/// elements rather than ninety (a page of 50 rows was 450 KiB with one `<rect>` a day). The
/// figures themselves are in the row's cells, for screen readers and for exact values.
pub(super) fn bar(u: &Uptime) -> String {
    let mut paths: [(&str, String); 4] = [
        ("up", String::new()),
        ("part", String::new()),
        ("low", String::new()),
        ("none", String::new()),
    ];
    for (i, d) in u.days.iter().enumerate() {
        let class = uptime_class(*d);
        if let Some((_, p)) = paths.iter_mut().find(|(c, _)| *c == class) {
            let _ = write!(p, "M{} 0h2v10h-2z", i * 3);
        }
    }
    let mut s = format!(
        "<svg class=\"bar\" viewBox=\"0 0 {w} 10\" width=\"{w}\" height=\"10\" role=\"img\" aria-label=\"daily uptime over 90 days, oldest first\">",
        w = BAR_DAYS * 3
    );
    for (class, d) in paths.iter().filter(|(_, d)| !d.is_empty()) {
        let _ = write!(s, "<path class=\"{class}\" d=\"{d}\"/>");
    }
    s.push_str("</svg>");
    s
}

pub(in crate::api) async fn fleet_page(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let f = match q
        .map_err(|e| e.to_string())
        .and_then(|Query(p)| FleetQuery::parse(p))
    {
        Ok(f) => f,
        Err(e) => return super::error_page(StatusCode::BAD_REQUEST, &e),
    };
    let now = s.now();
    let snap = s.fleet.snapshot();
    let windows = s.with_config(|c| c.maintenance.clone());
    let maint: Vec<bool> = snap
        .targets
        .iter()
        .map(|t| in_maintenance(&windows, &t.name, now))
        .collect();
    let summary = snap.summary();
    let drifted = snap.targets.iter().filter(|t| t.drift.is_some()).count();
    let in_maint = maint.iter().filter(|m| **m).count();

    let mut rows: Vec<(&TargetView, bool)> = snap
        .targets
        .iter()
        .zip(maint.iter().copied())
        .filter(|(v, m)| matches(v, &f, *m))
        .collect();
    sort(&mut rows, &f);
    let matched = rows.len();
    let pages = matched.div_ceil(f.per_page).max(1);
    let page = f.page.min(pages);
    let shown: Vec<(&TargetView, bool)> = rows
        .into_iter()
        .skip((page - 1) * f.per_page)
        .take(f.per_page)
        .collect();

    let names: Vec<String> = shown.iter().map(|(v, _)| v.name.clone()).collect();
    let from_hour = now.div_euclid(HOUR_MS) - BAR_DAYS * 24;
    let (counts, store_error) =
        match crate::api::read_history(&s, move |h| h.uptime_hours(&names, from_hour)).await {
            Ok(c) => (c, None),
            Err(e) => (Vec::new(), Some(e)),
        };
    let mut by_target: HashMap<&str, Vec<&HourCount>> = HashMap::new();
    for c in &counts {
        by_target.entry(c.target.as_str()).or_default().push(c);
    }

    let mut b = String::with_capacity(2048 + shown.len() * 6000);
    b.push_str(
        "<h1>Fleet</h1>\n<section aria-label=\"summary\"><ul class=\"summary\" id=\"summary\">",
    );
    for (key, label, n) in [
        ("total", "Total", summary.total),
        ("healthy", "Healthy", summary.healthy),
        ("degraded", "Degraded", summary.degraded),
        ("down", "Down", summary.down),
        ("drifted", "Drifted", drifted),
        ("flapping", "Flapping", summary.flapping),
        ("maintenance", "In maintenance", in_maint),
    ] {
        let href = if key == "total" {
            "/".to_owned()
        } else {
            format!("/?state={key}")
        };
        let _ = write!(
            b,
            "<li class=\"s-{key}\"><a href=\"{href}\"><span class=\"n\" data-count=\"{key}\">{n}</span> {label}</a></li>"
        );
    }
    b.push_str("</ul></section>\n");
    if let Some(e) = &store_error {
        let _ = writeln!(
            b,
            "<p class=\"error\" role=\"alert\">{}</p>",
            super::message(e)
        );
    }
    filter_form(&mut b, &f);
    let _ = writeln!(
        b,
        "<p class=\"count\">{matched} of {} targets · page {page} of {pages} · generated {} \
         <span id=\"live\" aria-live=\"polite\" data-live-every=\"{}\"></span></p>",
        summary.total,
        time(now),
        super::live_every(snap.targets.iter().map(|t| t.interval_ms))
    );
    b.push_str(
        "<div class=\"scroll\"><table class=\"fleet\" id=\"fleet\">\n<caption class=\"visually-hidden\">Targets</caption>\n<thead><tr>\
         <th scope=\"col\">Target</th><th scope=\"col\">State</th><th scope=\"col\">Era · protocol</th>\
         <th scope=\"col\">Grade</th><th scope=\"col\">Tools</th><th scope=\"col\">Last check</th>\
         <th scope=\"col\">24h</th><th scope=\"col\">7d</th><th scope=\"col\">30d</th><th scope=\"col\">90d</th>\
         <th scope=\"col\">Daily uptime (90 days)</th></tr></thead>\n<tbody>\n",
    );
    for (v, maint) in &shown {
        let rows = by_target
            .get(v.name.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        row(&mut b, v, *maint, &uptime(rows, now), now);
    }
    if shown.is_empty() {
        b.push_str("<tr><td colspan=\"11\">No target matches.</td></tr>\n");
    }
    b.push_str("</tbody></table></div>\n");
    pager(&mut b, &f, page, pages);
    html(StatusCode::OK, frame("Fleet", &b))
}

fn row(b: &mut String, v: &TargetView, maint: bool, u: &Uptime, now: i64) {
    let name = field(&v.name);
    let state = v.status.as_str();
    let _ = write!(
        b,
        "<tr data-target=\"{name}\"><th scope=\"row\"><a href=\"/targets/{}\">{name}</a>",
        encode(&v.name)
    );
    for (k, val) in &v.labels {
        let _ = write!(
            b,
            " <span class=\"label\">{}={}</span>",
            field(k),
            field(val)
        );
    }
    let _ = write!(
        b,
        "</th><td class=\"state\"><span class=\"pill {state}\" data-field=\"status\">{state}</span>"
    );
    if v.flapping {
        b.push_str(" <span class=\"pill flapping\">flapping</span>");
    }
    if v.drift.is_some() {
        b.push_str(" <span class=\"pill drifted\">drifted</span>");
    }
    if maint {
        b.push_str(" <span class=\"pill maintenance\">maintenance</span>");
    }
    if let Some(since) = v.since_ms {
        let _ = write!(
            b,
            "<br><small data-field=\"since\">for {} (since {})</small>",
            ago(since, now),
            time(since)
        );
    }
    b.push_str("</td>");
    let last = v.last.as_ref();
    let era = last
        .and_then(|l| l.era.as_deref())
        .map_or_else(|| "—".to_owned(), field);
    let proto = last
        .and_then(|l| l.protocol_version.as_deref())
        .map_or_else(|| "—".to_owned(), field);
    let grade = last
        .and_then(|l| l.grade.as_deref())
        .map_or_else(|| "—".to_owned(), field);
    let tools = last
        .and_then(|l| l.tool_count)
        .map_or_else(|| "—".to_owned(), |n| n.to_string());
    let checked = last.map_or_else(
        || "never".to_owned(),
        |l| format!("{} <small>({})</small>", time(l.at_ms), l.status.as_str()),
    );
    let _ = write!(
        b,
        "<td>{era} · {proto}</td><td class=\"grade\">{grade}</td><td class=\"num\">{tools}</td><td data-field=\"last\">{checked}</td>"
    );
    for (_, r) in u.windows {
        let _ = write!(
            b,
            "<td class=\"num u-{}\">{}</td>",
            uptime_class(r),
            percent(r)
        );
    }
    let _ = writeln!(b, "<td>{}</td></tr>", bar(u));
}

fn filter_form(b: &mut String, f: &FleetQuery) {
    b.push_str("<form class=\"filters\" method=\"get\" action=\"/\" role=\"search\">");
    b.push_str("<label>State <select name=\"state\">");
    for st in STATES {
        let sel = if f.state == st { " selected" } else { "" };
        let label = if st.is_empty() { "any" } else { st };
        let _ = write!(b, "<option value=\"{st}\"{sel}>{label}</option>");
    }
    let _ = write!(
        b,
        "</select></label> <label>Label <input name=\"label\" placeholder=\"env=prod\" value=\"{}\"></label> \
         <label>Name <input type=\"search\" name=\"q\" value=\"{}\"></label> <label>Sort <select name=\"sort\">",
        field(&f.label),
        field(&f.q)
    );
    for (k, label) in SORTS {
        let sel = if f.sort == k { " selected" } else { "" };
        let _ = write!(b, "<option value=\"{k}\"{sel}>{label}</option>");
    }
    let (asc, desc) = if f.desc {
        ("", " selected")
    } else {
        (" selected", "")
    };
    let _ = writeln!(
        b,
        "</select></label> <label>Order <select name=\"dir\"><option value=\"asc\"{asc}>ascending</option>\
         <option value=\"desc\"{desc}>descending</option></select></label> \
         <label>Per page <input type=\"number\" name=\"per_page\" min=\"1\" max=\"{MAX_PER_PAGE}\" value=\"{}\"></label> \
         <button type=\"submit\">Apply</button></form>",
        f.per_page
    );
}

fn pager(b: &mut String, f: &FleetQuery, page: usize, pages: usize) {
    b.push_str("<nav class=\"pager\" aria-label=\"pages\">");
    if page > 1 {
        let _ = write!(
            b,
            "<a rel=\"prev\" href=\"/{}\">← previous</a> ",
            f.with_page(page - 1)
        );
    }
    let _ = write!(b, "<span>page {page} of {pages}</span>");
    if page < pages {
        let _ = write!(
            b,
            " <a rel=\"next\" href=\"/{}\">next →</a>",
            f.with_page(page + 1)
        );
    }
    b.push_str("</nav>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        let f = FleetQuery::parse(vec![
            ("state".into(), "down".into()),
            ("page".into(), "2".into()),
            ("q".into(), "a b".into()),
        ])
        .unwrap_or_default();
        assert_eq!(f.state, "down");
        assert_eq!(
            f.with_page(3),
            "?page=3&per_page=50&state=down&q=a%20b&sort=name&dir=asc"
        );
        assert!(FleetQuery::parse(vec![("per_page".into(), "0".into())]).is_err());
        assert!(FleetQuery::parse(vec![("sort".into(), "x".into())]).is_err());
        assert!(FleetQuery::parse(vec![("dir".into(), "up".into())]).is_err());
        assert!(FleetQuery::parse(vec![("dir".into(), "desc".into())]).is_ok_and(|f| f.desc));
    }

    #[test]
    fn uptime_from_hours() {
        let now = 100 * 24 * HOUR_MS;
        let h = |hour, checks, up| HourCount {
            target: "a".into(),
            hour,
            checks,
            up,
            healthy: up,
        };
        let rows = [h(2400 - 1, 10, 5), h(2400 - 48, 10, 10)];
        let refs: Vec<&HourCount> = rows.iter().collect();
        let u = uptime(&refs, now);
        assert_eq!(u.windows[0].1, Some(0.5));
        assert_eq!(u.windows[1].1, Some(0.75));
        assert_eq!(u.days.len(), 90);
        assert_eq!(u.days[89], Some(0.5));
        assert_eq!(u.days[87], Some(1.0));
        assert_eq!(u.days[0], None);
    }
}
