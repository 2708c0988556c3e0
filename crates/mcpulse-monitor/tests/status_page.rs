//! The status page over plain HTTP: the real router on 127.0.0.1:0, a real SQLite store file
//! behind it, and assertions on the HTML. The same page in headless Chromium:
//! crates/mcpulse/tests/browser.rs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use mcpulse_monitor::alert::Incidents;
use mcpulse_monitor::api::{self, ApiState, CSP};
use mcpulse_monitor::check::CheckRecord;
use mcpulse_monitor::config::{self, Config};
use mcpulse_monitor::fleet::{Fleet, LastCheck};
use mcpulse_monitor::state::{Health, Observation, TargetState};
use mcpulse_monitor::store::Store;
use mcpulse_monitor::store::adapters::StoreHistory;
use mcpulse_testkit::TempDir;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::oneshot;

/// "Now" for every test: the clock of the API is fixed here.
const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const HOUR: i64 = 3_600_000;

struct Server {
    addr: SocketAddr,
    fleet: Fleet,
    config: Config,
    store: Arc<Mutex<Store>>,
    _dir: TempDir,
    _stop: oneshot::Sender<()>,
}

fn parse_config(toml: &str) -> Config {
    config::parse(toml, "test.toml", Path::new("/tmp"), &|_| None)
        .unwrap_or_else(|e| panic!("test config: {e}"))
}

async fn start(toml: &str) -> Server {
    let dir = TempDir::new("status-page");
    let store = Arc::new(Mutex::new(
        Store::open(&dir.join("history.sqlite3")).unwrap(),
    ));
    let config = parse_config(toml);
    let fleet = Fleet::new();
    fleet.set_config_at(&config.targets, NOW - HOUR);
    let state = ApiState::new(
        fleet.clone(),
        Arc::new(StoreHistory::new(store.clone())),
        Arc::new(RwLock::new(config.clone())),
    )
    .with_clock(Arc::new(|| NOW));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(api::serve(listener, api::router(state), async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        fleet,
        config,
        store,
        _dir: dir,
        _stop: stop,
    }
}

struct Resp {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    send(addr, "GET", path, headers, "").await
}

/// One request over a fresh connection, read to the end.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Resp {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn obs(status: Health, at_ms: i64) -> Observation {
    Observation {
        at_ms,
        status,
        auth: "none".into(),
        era: Some("modern".into()),
        protocol_version: Some("2025-11-25".into()),
        grade: Some("A".into()),
        contract_digest: None,
        drift: None,
        drift_changes: Vec::new(),
        drift_changes_more: 0,
        summary: "ok".into(),
        components: BTreeMap::new(),
        by_components: false,
        server_answered: status != Health::Down,
        security: Vec::new(),
    }
}

fn target_state(status: Health, since_ms: i64) -> TargetState {
    TargetState {
        status,
        since_ms,
        last: Some(obs(status, since_ms)),
        ..TargetState::default()
    }
}

/// A plain check of `target` at `at_ms`.
fn check(target: &str, at_ms: i64, status: Health, total_ms: f64) -> CheckRecord {
    CheckRecord {
        target: target.into(),
        at_ms,
        status,
        duration_ms: total_ms,
        timings: json!({"connect": 1.0, "handshake": total_ms / 2.0, "tools_list": total_ms / 4.0, "total": total_ms}),
        findings: json!([]),
        grade: Some("A".into()),
        observation: obs(status, at_ms),
        state: target_state(status, at_ms),
        incidents: Incidents::new(),
        events: Vec::new(),
        alerts: Vec::new(),
        contract: None,
        calls: Vec::new(),
    }
}

fn cfg<'a>(s: &'a Server, name: &str) -> &'a config::TargetConfig {
    s.config.targets.iter().find(|t| t.name == name).unwrap()
}

/// Shows `name` in the fleet with a confirmed `status` since `since_ms` and a last check.
fn publish(s: &Server, name: &str, status: Health, since_ms: i64, last: Option<LastCheck>) {
    s.fleet.resume(
        cfg(s, name),
        &target_state(status, since_ms),
        &Incidents::new(),
    );
    let mut v = s.fleet.get(name).unwrap();
    v.last = last;
    s.fleet.update(name, v);
}

fn last_check(status: Health, grade: &str, tools: usize) -> LastCheck {
    LastCheck {
        at_ms: NOW - 60_000,
        status,
        duration_ms: Some(42.0),
        timings_ms: None,
        findings: Vec::new(),
        grade: Some(grade.into()),
        security_score: Some(90),
        era: Some("modern".into()),
        protocol_version: Some("2025-11-25".into()),
        auth: "none".into(),
        tool_count: Some(tools),
        contract_digest: None,
        security: Vec::new(),
    }
}

const FLEET: &str = r#"
[[targets]]
name = "alpha"
url = "http://127.0.0.1:9/mcp"
labels = { env = "prod" }

[[targets]]
name = "bravo"
url = "http://127.0.0.1:9/mcp"
labels = { env = "dev" }

[[targets]]
name = "charlie"
command = ["true"]

[[maintenance]]
targets = ["charlie"]
start = "2025-12-31T00:00:00Z"
end = "2026-01-02T00:00:00Z"
"#;

/// The text between `<tr data-target="name"` and the end of its row.
fn row<'a>(html: &'a str, name: &str) -> &'a str {
    let start = html
        .find(&format!("<tr data-target=\"{name}\""))
        .unwrap_or_else(|| panic!("no row for {name} in {html}"));
    let end = html[start..].find("</tr>").unwrap() + start;
    &html[start..end]
}

/// alpha healthy for 2 hours (grade A, 7 tools), bravo down for 5 minutes (grade C, 3 tools),
/// charlie never checked.
fn publish_fleet(s: &Server) {
    publish(
        s,
        "alpha",
        Health::Healthy,
        NOW - 2 * HOUR,
        Some(last_check(Health::Healthy, "A", 7)),
    );
    publish(
        s,
        "bravo",
        Health::Down,
        NOW - 5 * 60_000,
        Some(last_check(Health::Down, "C", 3)),
    );
}

#[tokio::test]
async fn the_fleet_view_shows_counts_rows_and_uptime_from_the_store() {
    let s = start(FLEET).await;
    publish_fleet(&s);
    // alpha: 3 of 4 checks up in the last hour, all 10 up 3 days ago; bravo: none up today.
    {
        let mut st = s.store.lock().unwrap();
        let mut batch = vec![
            check("alpha", NOW - 10 * 60_000, Health::Healthy, 20.0),
            check("alpha", NOW - 20 * 60_000, Health::Degraded, 20.0),
            check("alpha", NOW - 30 * 60_000, Health::Down, 20.0),
            check("alpha", NOW - 40 * 60_000, Health::Healthy, 20.0),
            check("bravo", NOW - 10 * 60_000, Health::Down, 20.0),
        ];
        batch.extend(
            (0..10).map(|i| check("alpha", NOW - 72 * HOUR - i * 60_000, Health::Healthy, 10.0)),
        );
        st.record(&batch, &[]).unwrap();
    }
    let r = get(s.addr, "/", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), "text/html; charset=utf-8");
    assert_eq!(r.header("content-security-policy"), CSP);
    let html = &r.body;
    for (key, n) in [
        ("total", 3),
        ("healthy", 1),
        ("down", 1),
        ("maintenance", 1),
        ("drifted", 0),
    ] {
        assert!(
            html.contains(&format!("data-count=\"{key}\">{n}<")),
            "{key} should count {n}: {html}"
        );
    }
    let alpha = row(html, "alpha");
    assert!(alpha.contains("data-field=\"status\">healthy<"), "{alpha}");
    assert!(alpha.contains("modern · 2025-11-25"), "{alpha}");
    assert!(alpha.contains(">A<") && alpha.contains(">7<"), "{alpha}");
    // 24h: 3 of 4 up; 7d: 13 of 14 up.
    assert!(alpha.contains(">75.00%<"), "{alpha}");
    assert!(alpha.contains(">92.86%<"), "{alpha}");
    assert!(
        alpha.contains("<time datetime=\"2025-12-31T22:00:00"),
        "{alpha}"
    );
    // The bar: 3 days ago all up, today 75% (low), the other days without data.
    assert!(
        alpha.contains("<path class=\"up\" d=\"M258 0h2v10h-2z\"/>"),
        "{alpha}"
    );
    assert!(
        alpha.contains("<path class=\"low\" d=\"M267 0h2v10h-2z\"/>"),
        "{alpha}"
    );
    let bravo = row(html, "bravo");
    assert!(
        bravo.contains(">down<") && bravo.contains(">0.00%<"),
        "{bravo}"
    );
    let charlie = row(html, "charlie");
    assert!(
        charlie.contains("maintenance") && charlie.contains("never"),
        "{charlie}"
    );
    // The assets are ours, with the same policy.
    let css = get(s.addr, "/assets/status.css", &[]).await;
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").starts_with("text/css"));
    assert!(css.body.contains("color-scheme: light dark") && css.body.contains("light-dark("));
    let js = get(s.addr, "/assets/status.js", &[]).await;
    assert_eq!(js.status, 200);
    assert!(js.header("content-type").starts_with("text/javascript"));
    assert!(html.contains("<script src=\"/assets/status.js\" defer></script>"));
    assert!(!html.contains("<script>"), "no inline script");
    assert!(!html.contains("style="), "no inline style");
}

#[tokio::test]
async fn the_fleet_view_filters_searches_sorts_and_pages_on_the_server() {
    let s = start(FLEET).await;
    publish_fleet(&s);
    let names = |html: &str| -> Vec<String> {
        html.split("<tr data-target=\"")
            .skip(1)
            .map(|r| r.split('"').next().unwrap().to_owned())
            .collect()
    };
    let body = |p: &'static str| {
        let addr = s.addr;
        async move {
            let r = get(addr, p, &[]).await;
            assert_eq!(r.status, 200, "{p}: {}", r.body);
            r.body
        }
    };
    assert_eq!(names(&body("/").await), ["alpha", "bravo", "charlie"]);
    assert_eq!(names(&body("/?state=down").await), ["bravo"]);
    assert_eq!(names(&body("/?state=maintenance").await), ["charlie"]);
    assert_eq!(names(&body("/?label=env%3Dprod").await), ["alpha"]);
    assert_eq!(names(&body("/?q=RAV").await), ["bravo"]);
    assert_eq!(
        names(&body("/?sort=state").await),
        ["bravo", "charlie", "alpha"]
    );
    assert_eq!(
        names(&body("/?sort=name&dir=desc").await),
        ["charlie", "bravo", "alpha"]
    );
    let p2 = body("/?per_page=2&page=2").await;
    assert_eq!(names(&p2), ["charlie"]);
    assert!(p2.contains("page 2 of 2"));
    assert!(p2.contains("rel=\"prev\" href=\"/?page=1&per_page=2"));
    assert_eq!(get(s.addr, "/?per_page=0", &[]).await.status, 400);
    assert_eq!(get(s.addr, "/?state=%3Cx%3E", &[]).await.status, 400);
}

#[tokio::test]
async fn the_page_is_under_the_api_token() {
    let s = start(&format!("[server]\ntoken = \"s3cret\"\n{FLEET}")).await;
    assert_eq!(get(s.addr, "/", &[]).await.status, 401);
    assert_eq!(
        get(s.addr, "/", &[("authorization", "Bearer nope")])
            .await
            .status,
        401
    );
    let ok = get(s.addr, "/", &[("authorization", "Bearer s3cret")]).await;
    assert_eq!(ok.status, 200);
    // The assets hold no data and stay open.
    assert_eq!(get(s.addr, "/assets/status.css", &[]).await.status, 200);

    // A browser: the page without the token is the sign-in form (401, a password field
    // posting to /login), and the JSON API stays JSON.
    let form = get(s.addr, "/targets/alpha", &[]).await;
    assert_eq!(form.status, 401);
    assert!(form.header("content-type").starts_with("text/html"));
    assert_eq!(form.header("content-security-policy"), CSP);
    assert!(
        form.body
            .contains("<form class=\"login\" method=\"post\" action=\"/login\">")
            && form.body.contains("type=\"password\" name=\"token\""),
        "{}",
        form.body
    );
    let api = get(s.addr, "/api/v1/fleet", &[]).await;
    assert_eq!(api.status, 401);
    assert!(api.header("content-type").starts_with("application/json"));
    // A wrong token: the form again, no cookie.
    let wrong = post_form(s.addr, "/login", "token=nope").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("The token is not valid"));
    assert_eq!(wrong.header("set-cookie"), "");
    // The right one: a cookie that holds a digest, not the token, scoped and hidden from
    // script, and back to the fleet.
    let right = post_form(s.addr, "/login", "token=s3cret").await;
    assert_eq!(right.status, 303, "{}", right.body);
    assert_eq!(right.header("location"), "/");
    let set = right.header("set-cookie").to_owned();
    assert!(
        set.starts_with("mcpulse_page=")
            && set.contains("; HttpOnly")
            && set.contains("; SameSite=Strict")
            && set.contains("; Path=/")
            && !set.contains("s3cret"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    for path in [
        "/",
        "/targets/alpha",
        "/api/v1/fleet",
        "/badges/alpha/status.svg",
    ] {
        let r = get(s.addr, path, &[("cookie", &cookie)]).await;
        assert_eq!(r.status, 200, "{path} with the cookie: {}", r.body);
    }
    // A cookie of another token, and the cookie on anything but a read, are refused.
    let forged = get(s.addr, "/", &[("cookie", "mcpulse_page=00ff")]).await;
    assert_eq!(forged.status, 401);
    let write = post_form(s.addr, "/api/v1/fleet", "").await;
    assert!(
        write.status == 401 || write.status == 405,
        "{}",
        write.status
    );
    // The sign-in form is the only form that posts; the pages it opens have none.
    let page = get(s.addr, "/", &[("cookie", &cookie)]).await;
    assert!(!page.body.contains("method=\"post\""), "{}", page.body);
}

/// One form POST (`application/x-www-form-urlencoded`).
async fn post_form(addr: SocketAddr, path: &str, body: &str) -> Resp {
    let form = [("content-type", "application/x-www-form-urlencoded")];
    send(addr, "POST", path, &form, body).await
}

// ---- the target view ------------------------------------------------------------------------

use mcpulse_monitor::alert::{Action, Alert, Kind, dedup_key};
use mcpulse_monitor::fleet::ComponentView;
use mcpulse_monitor::sink::SinkId;
use mcpulse_monitor::state::{DriftChange, DriftDiffLine, Event, SecurityEvidence};

fn alert(target: &str, kind: Kind, summary: &str, at_ms: i64) -> Alert {
    Alert {
        dedup_key: dedup_key(target, "status"),
        action: Action::Trigger,
        kind,
        target: target.into(),
        severity: "critical".into(),
        summary: summary.into(),
        at_ms,
        started_ms: at_ms,
        labels: BTreeMap::new(),
        removed: false,
    }
}

fn contract(server_name: &str, tool: &str, description: &str) -> String {
    json!({
        "schema": "mcpulse.contract/1",
        "target": "http://127.0.0.1:9/mcp",
        "digest": "sha256:0",
        "server": {
            "era": "modern", "protocol_version": "2025-11-25", "supported_versions": [],
            "capabilities": {}, "instructions": null, "digest": "sha256:1",
            "server_info": { "name": server_name, "version": "1.2.3" }
        },
        "tools": [{
            "key": tool, "digest": "sha256:2",
            "definition": {
                "name": tool,
                "description": description,
                "annotations": { "readOnlyHint": true },
                "inputSchema": { "type": "object", "properties": { "query": { "type": "string", "description": description } } }
            }
        }],
        "prompts": [], "resources": [], "resource_templates": []
    })
    .to_string()
}

/// Fills the store and the fleet for `name`: a day of checks, a transition, an alert delivered
/// to one sink and given up at another, an accepted contract, current drift, a component and
/// a finding whose message is `error`.
fn populate(s: &Server, name: &str, server_name: &str, description: &str, error: &str) {
    {
        let mut st = s.store.lock().unwrap();
        let mut batch: Vec<CheckRecord> = (0..24 * 12)
            .map(|i| {
                check(
                    name,
                    NOW - i * 5 * 60_000,
                    Health::Healthy,
                    20.0 + (i % 7) as f64,
                )
            })
            .collect();
        let mut down = check(name, NOW - 3 * HOUR, Health::Down, 5000.0);
        down.events = vec![Event::Transition {
            from: Health::Healthy,
            to: Health::Down,
            at_ms: NOW - 3 * HOUR,
            quiet: false,
            reason: error.into(),
        }];
        down.alerts = vec![alert(
            name,
            Kind::Down,
            &format!("{name} is down: {error}"),
            NOW - 3 * HOUR,
        )];
        batch.push(down);
        // A past drift with its classified diff (the server's words in it).
        let mut drifted = check(name, NOW - 2 * HOUR, Health::Healthy, 21.0);
        drifted.events = vec![Event::Drift {
            at_ms: NOW - 2 * HOUR,
            class: "breaking".into(),
            digest: Some("0123456789abcdef0123".into()),
            changes: vec![DriftDiffLine {
                class: "breaking".into(),
                code: "required-parameter-added".into(),
                path: "tools[search].inputSchema.required".into(),
                message: format!("{description} now requires region"),
                old: Some("[]".into()),
                new: Some(format!("[\"region\",{:?}]", description)),
            }],
            more: 3,
        }];
        batch.push(drifted);
        st.record(
            &batch,
            &[SinkId::new("webhook:aaaa"), SinkId::new("slack:bbbb")],
        )
        .unwrap();
        let due = st.due_alerts(NOW, 10).unwrap();
        assert_eq!(due.len(), 2);
        st.mark_delivered(due[0].id, NOW - 3 * HOUR + 1000).unwrap();
        st.give_up(
            due[1].id,
            &format!("HTTP 500: {error}"),
            NOW - 3 * HOUR + 2000,
        )
        .unwrap();
        st.set_accepted_contract(
            name,
            &contract(server_name, "search", description),
            NOW - 48 * HOUR,
        )
        .unwrap();
    }
    let finding: mcpulse_judge::Finding = serde_json::from_value(json!({
        "code": "tool-call-failed", "severity": "warning", "message": error
    }))
    .unwrap();
    let mut last = last_check(Health::Degraded, "B", 1);
    last.findings = vec![finding];
    last.protocol_version = Some(server_name.into());
    // The grade's evidence, in the server's words.
    last.security = vec![SecurityEvidence {
        code: "origin-not-validated".into(),
        severity: "high".into(),
        message: format!("{server_name} accepted a foreign Origin"),
        evidence: vec![format!(
            "POST /mcp with Origin: http://evil.example → HTTP 200 {description}"
        )],
    }];
    publish(s, name, Health::Degraded, NOW - HOUR, Some(last));
    let mut v = s.fleet.get(name).unwrap();
    v.drift = Some("breaking".into());
    v.drift_changes = vec![DriftChange {
        code: "tool-removed".into(),
        path: format!("tools/{description}"),
        class: "breaking".into(),
    }];
    v.components = vec![ComponentView {
        name: format!("db {server_name}"),
        status: Health::Down,
        since_ms: NOW - 10 * 60_000,
    }];
    s.fleet.update(name, v);
}

#[tokio::test]
async fn the_target_view_shows_verdict_chart_timeline_drift_contract_and_components() {
    let s = start(FLEET).await;
    populate(
        &s,
        "charlie",
        "files-server",
        "Search the index",
        "upstream timed out",
    );
    let r = get(s.addr, "/targets/charlie", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-security-policy"), CSP);
    let html = &r.body;
    // Verdict and findings, with the rule's explanation and its docs link.
    assert!(
        html.contains("data-live-target=\"charlie\" data-live-every=\"10000\">degraded<"),
        "{html}"
    );
    assert!(html.contains("docs/findings.md#tool-call-failed"), "{html}");
    assert!(html.contains("upstream timed out"));
    let why = mcpulse_judge::AnyRule::all()
        .find(|r| r.code() == "tool-call-failed")
        .unwrap()
        .why();
    assert!(
        html.contains(&*mcpulse_monitor::api::esc(why)),
        "the rule's explanation"
    );
    // Latency per phase: an SVG with p50 and p95 lines for total and handshake.
    assert!(html.contains("<svg class=\"chart\""));
    assert!(html.contains("<polyline class=\"s0 p50\""));
    assert!(html.contains("<polyline class=\"s3 p95\""));
    assert!(html.contains("aria-current=\"true\">24h<"));
    let week = get(s.addr, "/targets/charlie?range=7d", &[]).await;
    assert!(week.body.contains("aria-current=\"true\">7d<"));
    assert_eq!(
        get(s.addr, "/targets/charlie?range=1y", &[]).await.status,
        400
    );
    // Timeline: the transition, the alert and the sinks it went to.
    assert!(html.contains("transition"), "{html}");
    assert!(html.contains("webhook:aaaa") && html.contains("slack:bbbb"));
    assert!(html.contains("delivered <time") && html.contains("given up <time"));
    // Maintenance, drift, contract, grade, component.
    assert!(html.contains("(now)"), "the maintenance window: {html}");
    assert!(html.contains("tool-removed") && html.contains(">breaking<"));
    // The drift history: each past drift with its classified diff, old → new.
    let history = &html[html
        .find("<h3>Drift history</h3>")
        .expect("a drift history")..];
    assert!(
        history.contains("<code>required-parameter-added</code>")
            && history.contains("<code>tools[search].inputSchema.required</code>")
            && history.contains("<code>[]</code> → <code>[&quot;region&quot;,")
            && history.contains("and 3 more changes")
            && history.contains("contract 0123456789ab<"),
        "{history}"
    );
    assert!(html.contains("files-server") && html.contains("<code>search</code>"));
    assert!(html.contains("readOnlyHint"));
    assert!(html.contains("&quot;query&quot;"), "the schema");
    assert!(html.contains("Grade <strong class=\"grade\">B</strong>"));
    // The grade's evidence: each finding, its rule (linked) and the exchange that showed it.
    let security = &html[html.find("<h2>Security</h2>").expect("a security section")..];
    assert!(
        security.contains("docs/checks.md#origin-not-validated")
            && security.contains("files-server accepted a foreign Origin")
            && security.contains("<li><code>POST /mcp with Origin: http://evil.example → HTTP 200 Search the index</code></li>"),
        "{security}"
    );
    assert!(html.contains("db files-server"));
    // Unknown targets are a page, not JSON.
    let missing = get(s.addr, "/targets/nope", &[]).await;
    assert_eq!(missing.status, 404);
    assert!(missing.header("content-type").starts_with("text/html"));
}

// ---- live updates ---------------------------------------------------------------------------

/// The script updates the page from `/api/v1/fleet`: every field it reads must be served, and
/// the hooks it looks for must be in the HTML. (Running it is the browser tests' job.)
#[tokio::test]
async fn the_live_script_reads_what_the_api_serves_and_finds_its_hooks() {
    let s = start(FLEET).await;
    publish(
        &s,
        "alpha",
        Health::Healthy,
        NOW - HOUR,
        Some(last_check(Health::Healthy, "A", 7)),
    );
    let js = get(s.addr, "/assets/status.js", &[]).await.body;
    assert!(js.contains("fetch(\"/api/v1/fleet\""));
    let api = get(s.addr, "/api/v1/fleet", &[]).await;
    let f: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    assert!(f["generated_at_ms"].is_i64());
    let alpha = f["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "alpha")
        .unwrap();
    for field in ["name", "status", "last_check_ms", "last_status"] {
        assert!(
            js.contains(&format!(".{field}")),
            "the script reads {field}"
        );
        assert!(!alpha[field].is_null(), "the API serves {field}: {alpha}");
    }
    // Counts the script refreshes: the ones the API has (the others stay as rendered).
    let page = get(s.addr, "/", &[]).await.body;
    for key in ["total", "healthy", "degraded", "down", "flapping"] {
        assert!(f[key].is_u64(), "{key} in {f}");
        assert!(page.contains(&format!("data-count=\"{key}\"")));
    }
    for hook in [
        "data-target=\"alpha\"",
        "data-field=\"status\"",
        "data-field=\"last\"",
        "id=\"live\"",
    ] {
        assert!(page.contains(hook), "{hook}");
    }
    for hook in [
        "tr[data-target]",
        "[data-field=status]",
        "[data-field=last]",
        "[data-live-target]",
        "getElementById(\"live\")",
    ] {
        assert!(js.contains(hook), "{hook}");
    }
    let one = get(s.addr, "/targets/alpha", &[]).await.body;
    assert!(one.contains("data-live-target=\"alpha\"") && one.contains("id=\"live\""));
    // Only GETs: the page runs no mutating action.
    assert!(!js.contains("method:"), "the script only reads");
    assert!(!page.contains("method=\"post\""));
}

// ---- badges ---------------------------------------------------------------------------------

#[tokio::test]
async fn badges_are_svg_or_shields_json_cacheable_and_under_the_token() {
    let s = start(&format!("[server]\ntoken = \"s3cret\"\n{FLEET}")).await;
    let auth = [("authorization", "Bearer s3cret")];
    publish(
        &s,
        "alpha",
        Health::Down,
        NOW - HOUR,
        Some(last_check(Health::Down, "C", 7)),
    );
    {
        let mut st = s.store.lock().unwrap();
        let batch: Vec<CheckRecord> = (0..100)
            .map(|i| {
                let h = if i < 2 { Health::Down } else { Health::Healthy };
                check("alpha", NOW - i * 60_000, h, 150.0)
            })
            .collect();
        st.record(&batch, &[]).unwrap();
    }
    assert_eq!(
        get(s.addr, "/badges/alpha/status.svg", &[]).await.status,
        401
    );
    let status = get(s.addr, "/badges/alpha/status.svg", &auth).await;
    assert_eq!(status.status, 200);
    assert_eq!(status.header("content-type"), "image/svg+xml");
    assert_eq!(status.header("cache-control"), "max-age=60");
    assert!(
        status.body.starts_with("<svg") && status.body.contains(">down<"),
        "{}",
        status.body
    );
    let etag = status.header("etag").to_owned();
    assert!(etag.starts_with('"'));
    let again = get(
        s.addr,
        "/badges/alpha/status.svg",
        &[auth[0], ("if-none-match", &etag)],
    )
    .await;
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    let up = get(s.addr, "/badges/alpha/uptime-24h.svg", &auth).await;
    assert!(up.body.contains(">98.00%<"), "{}", up.body);
    for b in [
        "uptime-7d.svg",
        "uptime-30d.svg",
        "latency.svg",
        "grade.svg",
    ] {
        let r = get(s.addr, &format!("/badges/alpha/{b}"), &auth).await;
        assert_eq!(r.status, 200, "{b}");
        assert!(r.body.starts_with("<svg"), "{b}");
    }
    assert!(
        get(s.addr, "/badges/alpha/latency.svg", &auth)
            .await
            .body
            .contains(">150 ms<")
    );
    assert!(
        get(s.addr, "/badges/alpha/grade.svg", &auth)
            .await
            .body
            .contains(">C<")
    );
    let shields = get(s.addr, "/badges/alpha/shields.json?badge=uptime-24h", &auth).await;
    assert_eq!(shields.header("content-type"), "application/json");
    let v: serde_json::Value = serde_json::from_str(&shields.body).unwrap();
    assert_eq!(
        v,
        json!({"schemaVersion": 1, "label": "uptime 24h", "message": "98.00%", "color": "yellow"})
    );
    let default: serde_json::Value =
        serde_json::from_str(&get(s.addr, "/badges/alpha/shields.json", &auth).await.body).unwrap();
    assert_eq!(default["message"], "down");
    assert_eq!(
        get(s.addr, "/badges/alpha/nope.svg", &auth).await.status,
        404
    );
    assert_eq!(
        get(s.addr, "/badges/nobody/status.svg", &auth).await.status,
        404
    );
}

// ---- safety ---------------------------------------------------------------------------------

const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";
const MORE: &str = "'><svg onload=alert(1)><a href=\"javascript:alert(1)\">x</a><!--";

/// Every tag of `html` with its attributes: a small scanner, enough for markup we wrote (our
/// attribute values are always double-quoted and escaped).
fn tags(html: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest
            .find('>')
            .unwrap_or_else(|| panic!("unclosed tag: {rest}"));
        let inner = rest[..end].trim_end_matches('/');
        rest = &rest[end + 1..];
        if inner.starts_with('/') || inner.starts_with('!') {
            assert!(!inner.starts_with("!--"), "a comment: {inner}");
            continue;
        }
        let (name, mut attrs) = inner.split_once(char::is_whitespace).unwrap_or((inner, ""));
        let mut list = Vec::new();
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                break;
            }
            let n_end = attrs.find(['=', ' ']).unwrap_or(attrs.len());
            let n = attrs[..n_end].to_owned();
            attrs = &attrs[n_end..];
            let mut v = String::new();
            if let Some(a) = attrs.strip_prefix("=\"") {
                let close = a
                    .find('"')
                    .unwrap_or_else(|| panic!("unclosed value in <{inner}>"));
                v = a[..close].to_owned();
                attrs = &a[close + 1..];
            }
            list.push((n, v));
        }
        out.push((name.to_ascii_lowercase(), list));
    }
    out
}

/// The page has only the markup we write: known tags, no event handlers, no `javascript:`,
/// exactly one script (ours, from our origin), and the CSP header.
fn assert_inert(r: &Resp, what: &str) {
    assert_eq!(r.header("content-security-policy"), CSP, "{what}");
    const TAGS: &[&str] = &[
        "!doctype", "html", "head", "meta", "title", "link", "script", "body", "a", "header",
        "button", "main", "h1", "h2", "h3", "h4", "section", "ul", "li", "span", "p", "form",
        "label", "select", "option", "input", "div", "table", "caption", "thead", "tbody", "tr",
        "th", "td", "small", "br", "time", "svg", "rect", "title", "nav", "dl", "dt", "dd", "code",
        "strong", "details", "summary", "pre", "line", "text", "polyline", "path",
    ];
    let all = tags(&r.body);
    assert!(all.len() > 20, "{what}: too few tags to be the page");
    let mut scripts = 0;
    for (name, attrs) in &all {
        assert!(
            TAGS.contains(&name.as_str()),
            "{what}: unexpected tag <{name}>"
        );
        if name == "script" {
            scripts += 1;
            assert_eq!(
                attrs,
                &[
                    ("src".into(), "/assets/status.js".into()),
                    ("defer".into(), String::new())
                ]
            );
        }
        for (a, v) in attrs {
            assert!(
                !a.starts_with("on"),
                "{what}: an event handler {a}={v} on <{name}>"
            );
            assert!(
                a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "{what}: attribute {a:?} on <{name}>"
            );
            assert!(
                !v.to_ascii_lowercase().contains("javascript:"),
                "{what}: {a}={v}"
            );
            assert!(
                !v.contains('<') && !v.contains('>'),
                "{what}: raw markup in {a}={v}"
            );
        }
    }
    assert_eq!(scripts, 1, "{what}: only our script");
    assert!(
        !r.body.contains(SCRIPT) && !r.body.contains("<img") && !r.body.contains("<svg onload")
    );
}

#[tokio::test]
async fn a_hostile_server_and_config_render_inert() {
    let name = format!("evil{SCRIPT}{IMG}");
    let toml = format!(
        "[[targets]]\nname = {name:?}\nurl = \"http://127.0.0.1:9/mcp?q={}\"\nlabels = {{ {:?} = {:?} }}\n",
        pct(IMG),
        format!("team{IMG}"),
        format!("{SCRIPT}{MORE}"),
    );
    let s = start(&toml).await;
    populate(
        &s,
        &name,
        &format!("server{SCRIPT}{IMG}"),
        &format!("Searches{IMG}{MORE}"),
        &format!("error{SCRIPT}{MORE}\u{1b}[2J\u{202e}"),
    );
    let fleet = get(s.addr, "/", &[]).await;
    assert_eq!(fleet.status, 200);
    assert_inert(&fleet, "fleet view");
    assert!(
        fleet
            .body
            .contains("evil&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img"),
        "the name shows, escaped"
    );
    let path = format!("/targets/{}", pct(&name));
    let one = get(s.addr, &path, &[]).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_inert(&one, "target view");
    for shown in [
        "server&lt;script&gt;",
        "Searches&quot;&gt;&lt;img",
        "error&lt;script&gt;",
        "\\x1b[2J",
        "\\u{202e}",
    ] {
        assert!(one.body.contains(shown), "{shown} shows, inert");
    }
    // Searching for markup echoes it escaped; an unknown name is an escaped error page.
    let search = get(s.addr, &format!("/?q={}", pct(SCRIPT)), &[]).await;
    assert_inert(&search, "search");
    let missing = get(s.addr, &format!("/targets/{}", pct(SCRIPT)), &[]).await;
    assert_eq!(missing.status, 404);
    assert!(!missing.body.contains(SCRIPT));
    // Badges: the SVG is ours, with no script in it.
    let badge = get(s.addr, &format!("/badges/{}/status.svg", pct(&name)), &[]).await;
    assert_eq!(badge.status, 200);
    assert!(!badge.body.contains("<script") && !badge.body.contains("<img"));
}

/// Percent-encodes everything but ASCII letters and digits.
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

// ---- benchmark ------------------------------------------------------------------------------

/// Time to first byte (the response head) and to the whole body of `path`, over `runs` runs:
/// (median ms, worst ms, body bytes).
async fn timed(addr: SocketAddr, path: &str, runs: usize) -> (f64, f64, f64, usize) {
    let mut firsts = Vec::new();
    let mut wholes = Vec::new();
    let mut size = 0;
    for _ in 0..runs {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = http::Request::builder()
            .uri(path)
            .header("host", addr.to_string())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let t = std::time::Instant::now();
        let resp = sender.send_request(req).await.unwrap();
        let first = t.elapsed();
        assert_eq!(resp.status(), 200, "{path}");
        size = resp.into_body().collect().await.unwrap().to_bytes().len();
        firsts.push(first.as_secs_f64() * 1000.0);
        wholes.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    firsts.sort_by(f64::total_cmp);
    wholes.sort_by(f64::total_cmp);
    (firsts[runs / 2], firsts[runs - 1], wholes[runs / 2], size)
}

/// The status page at fleet scale: 10,000 targets with 30 days of hourly uptime rollups (7.2
/// million rows, as the writer would have left them at one or more checks an hour) and one
/// target with 30 days of checks once a minute (43,200 rows with timings), in a real SQLite
/// file. Prints time to first byte of the fleet view and of the target view; fails above the
/// issue's budgets (100 ms and 200 ms). Run it in release mode:
///
/// ```text
/// cargo test --release -p mcpulse-monitor --test status_page -- --ignored --nocapture status_page_at_10000_targets
/// ```
#[tokio::test]
#[ignore = "a benchmark: run in release mode with --ignored --nocapture"]
async fn status_page_at_10000_targets() {
    const TARGETS: i64 = 10_000;
    const DAYS: i64 = 30;
    let mut toml = String::with_capacity(TARGETS as usize * 80);
    for i in 0..TARGETS {
        let env = ["prod", "staging", "dev"][(i % 3) as usize];
        toml.push_str(&format!(
            "[[targets]]\nname = \"mcp-{i:05}\"\nurl = \"http://127.0.0.1:9/{i}\"\nlabels = {{ env = \"{env}\" }}\n"
        ));
    }
    let t = std::time::Instant::now();
    let s = start(&toml).await;
    let path = s.store.lock().unwrap().path().to_owned();
    let viewed = "mcp-00042";
    {
        // Fill through a second connection: the store holds the file in exclusive mode, so
        // release it for the fill and take it back after.
        let st = s.store.clone();
        let mut guard = st.lock().unwrap();
        let placeholder = Store::open_in_memory().unwrap();
        let real = std::mem::replace(&mut *guard, placeholder);
        drop(real);
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;")
            .unwrap();
        let from_hour = NOW / HOUR - DAYS * 24;
        c.execute_batch(&format!(
            "BEGIN;
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {TARGETS} - 1)
             INSERT INTO targets (name) SELECT printf('mcp-%05d', i) FROM n;
             WITH RECURSIVE h(k) AS (SELECT {from_hour} UNION ALL SELECT k + 1 FROM h WHERE k < {now_hour})
             INSERT INTO uptime_hourly (target_id, hour, checks, up, healthy)
               SELECT t.id, h.k, 60, 60 - (t.id + h.k) % 3 / 2, 58 FROM targets t, h ORDER BY t.id, h.k;
             WITH RECURSIVE m(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM m WHERE k < {DAYS} * 1440 - 1)
             INSERT INTO checks (target_id, at_ms, status, duration_ms, timings, findings, grade)
               SELECT (SELECT id FROM targets WHERE name = '{viewed}'), {NOW} - k * 60000,
                      CASE WHEN k % 97 = 0 THEN 'down' ELSE 'healthy' END, 40 + k % 13,
                      json_object('connect', 1 + k % 3, 'handshake', 20 + k % 11, 'tools_list', 10 + k % 7,
                                  'total', 40 + k % 13),
                      '[]', 'A'
               FROM m;
             COMMIT;",
            now_hour = NOW / HOUR
        ))
        .unwrap();
        drop(c);
        *guard = Store::open(Path::new(&path)).unwrap();
    }
    let fill = t.elapsed();
    for (i, cfg) in s.config.targets.iter().enumerate() {
        let status = [
            Health::Healthy,
            Health::Healthy,
            Health::Degraded,
            Health::Down,
        ][i % 4];
        let mut last = last_check(status, ["A", "B", "C"][i % 3], i % 40);
        last.at_ms = NOW - (i as i64 % 60) * 1000;
        s.fleet.resume(
            cfg,
            &target_state(status, NOW - (i as i64) * 1000),
            &Incidents::new(),
        );
        let mut v = s.fleet.get(&cfg.name).unwrap();
        v.last = Some(last);
        s.fleet.update(&cfg.name, v);
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(format!("{path}-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    println!(
        "filled {TARGETS} targets, {} rollup rows, {} checks in {:.1} s; database {:.0} MiB",
        TARGETS * (DAYS * 24 + 1),
        DAYS * 1440,
        fill.as_secs_f64(),
        size as f64 / 1048576.0
    );
    // Warm up (the first read pages the file in), then measure.
    let _ = timed(s.addr, "/", 3).await;
    let _ = timed(s.addr, &format!("/targets/{viewed}"), 3).await;
    println!("| request | first byte, median | first byte, worst | whole body, median | body |");
    println!("|---|---|---|---|---|");
    let mut results = Vec::new();
    for p in [
        "/".to_owned(),
        "/?page=150".to_owned(),
        "/?per_page=500".to_owned(),
        "/?state=down&sort=last&dir=desc".to_owned(),
        "/?label=env%3Dprod&q=mcp-09".to_owned(),
        format!("/targets/{viewed}"),
        format!("/targets/{viewed}?range=7d"),
        format!("/targets/{viewed}?range=30d"),
        format!("/badges/{viewed}/uptime-24h.svg"),
    ] {
        let (first, worst, whole, bytes) = timed(s.addr, &p, 21).await;
        println!(
            "| `GET {p}` | {first:.1} ms | {worst:.1} ms | {whole:.1} ms | {:.0} KiB |",
            bytes as f64 / 1024.0
        );
        results.push((p, first));
    }
    // In Chromium: navigation start to usable (DOMContentLoaded and the first rows painted).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Async: the server runs on this test's runtime and must go on serving meanwhile.
    let measured = tokio::process::Command::new("node")
        .arg(root.join("crates/mcpulse/tests/browser/status_page.cjs"))
        .arg(
            json!({
                "mode": "measure",
                "base": format!("http://{}", s.addr),
                "paths": ["/", "/?per_page=500", format!("/targets/{viewed}"), format!("/targets/{viewed}?range=30d")],
                "runs": 11,
                "playwright": root.join("target/interop/browser/node_modules/playwright-core"),
                "chromium": "/usr/bin/chromium",
            })
            .to_string(),
        )
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let out = String::from_utf8_lossy(&measured.stdout);
    println!(
        "| page in Chromium | usable, median | usable, worst | DOMContentLoaded, median | first paint, median |"
    );
    println!("|---|---|---|---|---|");
    let mut usable = Vec::new();
    for line in out.lines() {
        let Some(m) = line.strip_prefix("ok measure ") else {
            panic!("the browser measurement: {out}");
        };
        let m: serde_json::Value = serde_json::from_str(m).unwrap();
        let f = |k: &str, q: &str| m[k][q].as_f64().unwrap_or(f64::NAN);
        println!(
            "| `{}` | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |",
            m["path"].as_str().unwrap_or(""),
            f("usable", "median"),
            f("usable", "worst"),
            f("dcl", "median"),
            f("fcp", "median")
        );
        usable.push(f("usable", "median"));
    }
    assert!(measured.status.success(), "{out}");
    assert!(
        usable[0] < 1000.0,
        "the fleet view usable after {:.0} ms",
        usable[0]
    );
    assert!(
        results[0].1 < 100.0,
        "the fleet view's first byte: {:.1} ms",
        results[0].1
    );
    assert!(
        results[5].1 < 200.0,
        "a target view's first byte: {:.1} ms",
        results[5].1
    );
}

// ---- the rollup -----------------------------------------------------------------------------

/// Schema 4 fills the rollup from the checks a version-3 file already holds, the writer keeps
/// it up to date, and pruning and forgetting a target remove its rows.
#[test]
fn the_uptime_rollup_is_backfilled_kept_and_pruned() {
    let dir = TempDir::new("rollup");
    let path = dir.join("history.sqlite3");
    {
        let mut st = Store::open(&path).unwrap();
        st.record(
            &[
                check("a", 10 * HOUR + 1, Health::Healthy, 1.0),
                check("a", 10 * HOUR + 2, Health::Down, 1.0),
                check("a", 11 * HOUR, Health::Degraded, 1.0),
                check("b", 10 * HOUR, Health::Healthy, 1.0),
            ],
            &[],
        )
        .unwrap();
    }
    // Back to version 3: no rollup table.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("DROP TABLE uptime_hourly; PRAGMA user_version = 3;")
            .unwrap();
    }
    let mut st = Store::open(&path).unwrap();
    let rows = |st: &Store| {
        st.uptime_hours(&["a".into(), "b".into(), "nobody".into()], 0)
            .unwrap()
            .into_iter()
            .map(|h| (h.target, h.hour, h.checks, h.up, h.healthy))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&st),
        [
            ("a".into(), 10, 2, 1, 1),
            ("a".into(), 11, 1, 1, 0),
            ("b".into(), 10, 1, 1, 1)
        ]
    );
    st.record(&[check("a", 11 * HOUR + 5, Health::Healthy, 1.0)], &[])
        .unwrap();
    assert_eq!(rows(&st)[1], ("a".into(), 11, 2, 2, 1));
    assert_eq!(
        st.uptime_hours(&["a".into()], 11).unwrap().len(),
        1,
        "from_hour"
    );
    st.prune(11 * HOUR).unwrap();
    assert_eq!(rows(&st), [("a".into(), 11, 2, 2, 1)]);
    st.forget_target("a").unwrap();
    assert!(rows(&st).is_empty());
}
