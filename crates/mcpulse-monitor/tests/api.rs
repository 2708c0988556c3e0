//! The HTTP API end to end: a real server on 127.0.0.1:0, real HTTP requests, scripted MCP
//! servers from `mcpulse-testkit` behind `/probe`, and every `/metrics` and `/probe` body read
//! by a strict exposition parser (below) that rejects what Prometheus would reject and more.
//!
//! Nothing sleeps to synchronise; the only waits are probe timeouts, kept short.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use mcpulse_monitor::alert::Incidents;
use mcpulse_monitor::api::{self, ApiState, HistorySource};
use mcpulse_monitor::check::{HistoryRow, Stats};
use mcpulse_monitor::config::{self, Config};
use mcpulse_monitor::fleet::{Fleet, TargetView};
use mcpulse_monitor::state::{Health, TargetState};
use mcpulse_monitor::store::StoreError;
use mcpulse_testkit::scenario::{self, Framing};
use mcpulse_testkit::{Act, FakeHttp, Reply, StdioScript, TempDir, mcp};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The store's error when SQLite is busy, as the fake history reports it.
fn locked() -> StoreError {
    StoreError::Sqlite {
        path: "fake.db".into(),
        source: rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        ),
    }
}

// ---- a history source over a vector ---------------------------------------------------------

#[derive(Default)]
struct FakeHistory {
    rows: BTreeMap<String, Vec<HistoryRow>>,
    failing: AtomicBool,
}

impl FakeHistory {
    fn with_rows(target: &str, n: i64) -> FakeHistory {
        let rows = (1..=n)
            .map(|id| HistoryRow {
                id,
                at_ms: 1_000_000 + id * 60_000,
                status: if id % 3 == 0 {
                    Health::Down
                } else {
                    Health::Healthy
                },
                duration_ms: 10.0 + id as f64,
                timings: serde_json::json!({ "total": 10.0 + id as f64 }),
                findings: serde_json::json!([]),
                calls: Vec::new(),
                grade: Some("A".into()),
            })
            .collect();
        FakeHistory {
            rows: BTreeMap::from([(target.to_owned(), rows)]),
            failing: AtomicBool::new(false),
        }
    }
}

impl HistorySource for FakeHistory {
    fn history(
        &self,
        target: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Option<Vec<HistoryRow>>, StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(locked());
        }
        let all = self.rows.get(target).cloned().unwrap_or_default();
        if before.is_some_and(|b| !all.iter().any(|r| r.id == b)) {
            return Ok(None);
        }
        let mut rows: Vec<HistoryRow> = all
            .into_iter()
            .filter(|r| before.is_none_or(|b| r.id < b))
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.id));
        rows.truncate(limit);
        Ok(Some(rows))
    }

    fn stats(&self, target: &str, _now_ms: i64) -> Result<Vec<Stats>, StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(locked());
        }
        let n = self.rows.get(target).map_or(0, Vec::len) as u64;
        Ok(vec![Stats {
            window: "24h".into(),
            checks: n,
            uptime: Some(1.0),
            healthy_ratio: Some(1.0),
            p50_ms: Some(12.0),
            p95_ms: Some(15.0),
            p99_ms: Some(16.0),
        }])
    }
}

// ---- the server under test ------------------------------------------------------------------

struct Server {
    addr: SocketAddr,
    fleet: Fleet,
    config: Config,
    _stop: oneshot::Sender<()>,
}

fn parse_config(toml: &str) -> Config {
    config::parse(toml, "test.toml", Path::new("/tmp"), &|_| None)
        .unwrap_or_else(|e| panic!("test config: {e}"))
}

async fn start(toml: &str, history: Arc<dyn HistorySource>) -> Server {
    start_with(toml, history, |s| s).await
}

async fn start_with(
    toml: &str,
    history: Arc<dyn HistorySource>,
    tune: impl FnOnce(ApiState) -> ApiState,
) -> Server {
    let config = parse_config(toml);
    let fleet = Fleet::new();
    fleet.set_config(&config.targets);
    let state = tune(ApiState::new(
        fleet.clone(),
        history,
        Arc::new(RwLock::new(config.clone())),
    ));
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
        _stop: stop,
    }
}

struct Resp {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
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

fn cfg<'a>(server: &'a Server, name: &str) -> &'a config::TargetConfig {
    server
        .config
        .targets
        .iter()
        .find(|t| t.name == name)
        .unwrap()
}

/// Sets a target's confirmed status in the fleet.
fn set_status(server: &Server, name: &str, status: Health, since_ms: i64) {
    let state = TargetState {
        status,
        since_ms,
        ..TargetState::default()
    };
    server
        .fleet
        .resume(cfg(server, name), &state, &Incidents::new());
}

/// Probes a configured target for real and publishes the check, as the scheduler does.
async fn check_for_real(server: &Server, name: &str, status: Health) {
    let t = cfg(server, name);
    let target = match &t.endpoint {
        config::Endpoint::Url(u) | config::Endpoint::Health(u) => {
            mcpulse_probe::Target::http(u).unwrap()
        }
        config::Endpoint::Command { argv, .. } => mcpulse_probe::Target::stdio(argv).unwrap(),
    };
    let plan = mcpulse_probe::Plan {
        era: t.era,
        timeout: t.timeout,
        security: t.security,
        ..mcpulse_probe::Plan::default()
    };
    let tr = mcpulse_probe::probe(&target, &plan).await;
    let report = mcpulse_judge::judge(&tr, &mcpulse_judge::Policy::default());
    let state = TargetState {
        status,
        since_ms: 1_700_000_000_000,
        ..TargetState::default()
    };
    server.fleet.update_from(
        t,
        &state,
        &Incidents::new(),
        &report,
        1_700_000_060_000,
        &[],
    );
}

const TOKEN: &str = "Bearer s3cret-token";

fn dead_url() -> String {
    // A port that was just free: connection refused.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}/mcp")
}

// ---- a strict exposition parser --------------------------------------------------------------

/// One sample.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Exposition {
    /// Family name → type.
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample that matches.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.find(name, labels);
        assert_eq!(
            found.len(),
            1,
            "expected one sample {name}{labels:?}, found {found:?}"
        );
        found[0].value
    }

    fn label_names(&self) -> BTreeSet<String> {
        self.samples
            .iter()
            .flat_map(|s| s.labels.keys().cloned())
            .collect()
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !s.starts_with("__")
}

/// Parses `{a="x",b="y"}` at the start of `s`; returns the labels and the rest.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((labels, s));
    };
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("a label without =")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("a label value must be quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("an unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("a bad escape {other:?}")),
                },
                Some((_, '\n')) => return Err("a raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err(format!("expected , or }} at {rest:?}"));
        }
    }
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ if s.starts_with("0x") => Err(format!("a hex value {s:?}")),
        _ => s.parse().map_err(|_| format!("bad value {s:?}")),
    }
}

/// Parses an exposition strictly: the Prometheus text format 0.0.4 (`openmetrics = false`)
/// or OpenMetrics 1.0 text. Every family has HELP and TYPE before its samples, its samples are
/// contiguous and named as its type requires, no series repeats, no timestamps, and
/// OpenMetrics ends in `# EOF`.
fn parse_exposition(text: &str, openmetrics: bool) -> Result<Exposition, String> {
    let mut ex = Exposition::default();
    if !text.ends_with('\n') {
        return Err("the exposition must end with a newline".into());
    }
    let mut lines: Vec<&str> = text.lines().collect();
    if openmetrics {
        if lines.pop() != Some("# EOF") {
            return Err("OpenMetrics must end with # EOF".into());
        }
        if lines.contains(&"# EOF") {
            return Err("# EOF before the end".into());
        }
    }
    let mut current: Option<String> = None;
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut helps: BTreeSet<String> = BTreeSet::new();
    let mut series: BTreeSet<String> = BTreeSet::new();
    for (n, line) in lines.iter().enumerate() {
        let at = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if line.is_empty() {
            if openmetrics {
                return Err(at("an empty line".into()));
            }
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let kind = parts.next().unwrap_or("");
            let name = parts.next().unwrap_or("").to_owned();
            let rest = parts.next().unwrap_or("");
            match kind {
                "HELP" => {
                    if !is_metric_name(&name) || !helps.insert(name.clone()) {
                        return Err(at("a bad or repeated HELP".into()));
                    }
                    // Backslashes only as escapes; in OpenMetrics no raw double quote either.
                    let mut chars = rest.chars();
                    while let Some(c) = chars.next() {
                        match c {
                            '"' if openmetrics => return Err(at("a raw quote in HELP".into())),
                            '\\' => match chars.next() {
                                Some('\\' | 'n') => {}
                                Some('"') if openmetrics => {}
                                _ => return Err(at("a bad escape in HELP".into())),
                            },
                            _ => {}
                        }
                    }
                    if current.as_ref() != Some(&name) {
                        if let Some(c) = current.take() {
                            done.insert(c);
                        }
                        if done.contains(&name) {
                            return Err(at("a family that is not contiguous".into()));
                        }
                        current = Some(name);
                    }
                }
                "TYPE" => {
                    let allowed: &[&str] = if openmetrics {
                        &[
                            "counter",
                            "gauge",
                            "info",
                            "stateset",
                            "unknown",
                            "histogram",
                            "gaugehistogram",
                            "summary",
                        ]
                    } else {
                        &["counter", "gauge", "histogram", "summary", "untyped"]
                    };
                    if !allowed.contains(&rest) {
                        return Err(at(format!("type {rest:?} is not allowed here")));
                    }
                    if current.as_ref() != Some(&name) {
                        return Err(at("TYPE without its HELP just before".into()));
                    }
                    if ex.types.insert(name, rest.to_owned()).is_some() {
                        return Err(at("a repeated TYPE".into()));
                    }
                }
                "UNIT" if openmetrics => {
                    if current.as_ref() != Some(&name) || !name.ends_with(&format!("_{rest}")) {
                        return Err(at("a UNIT that is not the family's suffix".into()));
                    }
                }
                _ => return Err(at("an unknown comment".into())),
            }
            continue;
        }
        if line.starts_with('#') {
            return Err(at("a comment that is neither HELP nor TYPE".into()));
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| at("a sample without a value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = parse_labels(&line[name_end..]).map_err(at)?;
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before the value".into()))?;
        if value.contains(' ') {
            return Err(at("a timestamp or trailing text".into()));
        }
        let value = parse_value(value).map_err(at)?;
        let family = current
            .clone()
            .ok_or_else(|| at("a sample before any TYPE".into()))?;
        let ty = ex
            .types
            .get(&family)
            .cloned()
            .ok_or_else(|| at("a sample before its TYPE".into()))?;
        let expected = match (openmetrics, ty.as_str()) {
            (true, "counter") => format!("{family}_total"),
            (true, "info") => format!("{family}_info"),
            _ => family.clone(),
        };
        if name != expected {
            return Err(at(format!(
                "sample {name} in family {family} ({ty}): expected {expected}"
            )));
        }
        if (ty == "counter" || ty == "info") && (value < 0.0 || value.is_nan()) {
            return Err(at("a counter or info below zero".into()));
        }
        if ty == "info" && value != 1.0 {
            return Err(at("an info sample must be 1".into()));
        }
        let key = format!("{name}{labels:?}");
        if !series.insert(key) {
            return Err(at("a repeated series".into()));
        }
        ex.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    Ok(ex)
}

/// Scrapes `path` in both formats; checks the content types and parses both strictly; returns
/// the OpenMetrics one after checking both hold the same samples.
async fn scrape(addr: SocketAddr, path: &str, auth: &[(&str, &str)]) -> Exposition {
    let text = get(addr, path, auth).await;
    assert_eq!(text.status, 200, "{}", text.body);
    assert_eq!(
        text.content_type(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let prom = parse_exposition(&text.body, false)
        .unwrap_or_else(|e| panic!("text format: {e}\n{}", text.body));
    let mut headers = auth.to_vec();
    // What Prometheus 3 sends by default.
    headers.push(("accept", "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"));
    let om = get(addr, path, &headers).await;
    assert_eq!(om.status, 200, "{}", om.body);
    assert_eq!(
        om.content_type(),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let open = parse_exposition(&om.body, true)
        .unwrap_or_else(|e| panic!("OpenMetrics: {e}\n{}", om.body));
    // The same series in both (counters are `_total` and info `_info` in both formats). The
    // digest is masked: the fakes change their tool list between two probes.
    let set = |e: &Exposition| {
        e.samples
            .iter()
            .map(|s| {
                let mut labels = s.labels.clone();
                if let Some(d) = labels.get_mut("digest") {
                    *d = "…".into();
                }
                format!("{}{labels:?}", s.name)
            })
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(set(&prom), set(&open));
    open
}

/// The labels the exposition may use: one `target` per monitored server, and small closed
/// sets (plus `digest`, `protocol_version` and `version` on info metrics).
const ALLOWED_LABELS: &[&str] = &[
    "target",
    "phase",
    "status",
    "grade",
    "digest",
    "severity",
    "era",
    "protocol_version",
    "auth",
    "version",
];

fn assert_bounded_labels(ex: &Exposition) {
    for l in ex.label_names() {
        assert!(
            ALLOWED_LABELS.contains(&l.as_str()),
            "unexpected label {l:?}"
        );
    }
    for s in &ex.samples {
        if let Some(p) = s.labels.get("phase") {
            assert!(
                ["dns", "connect", "tls", "handshake", "tools_list"].contains(&p.as_str()),
                "phase {p}"
            );
        }
    }
}

// ---- tests ----------------------------------------------------------------------------------

const TWO_TARGETS: &str = r#"
[server]
token = "s3cret-token"
[defaults]
interval = "30s"
timeout = "2s"
[[targets]]
name = "search"
url = "https://mcp.example.com/mcp?key=abc"
[[targets]]
name = "files"
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"]
"#;

#[tokio::test]
async fn the_token_guards_everything_but_the_health_endpoints() {
    let s = start(TWO_TARGETS, Arc::new(FakeHistory::default())).await;
    for open in ["/livez", "/readyz"] {
        let r = get(s.addr, open, &[]).await;
        assert_eq!(r.status, 200, "{open}: {}", r.body);
        assert_eq!(r.content_type(), "application/health+json");
    }
    for path in [
        "/metrics",
        "/probe?target=search",
        "/api/v1/fleet",
        "/api/v1/targets",
        "/api/v1/targets/search",
        "/api/v1/targets/search/history",
    ] {
        let r = get(s.addr, path, &[]).await;
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(
            r.headers.get("www-authenticate").unwrap(),
            "Bearer realm=\"mcpulse\""
        );
        assert!(
            r.json()["error"].as_str().unwrap().contains("Bearer"),
            "{}",
            r.body
        );
        let r = get(s.addr, path, &[("authorization", "Bearer wrong")]).await;
        assert_eq!(r.status, 401, "{path}");
        assert!(r.json()["error"].as_str().unwrap().contains("not valid"));
        let r = get(s.addr, path, &[("authorization", "Basic czNjcmV0LXRva2Vu")]).await;
        assert_eq!(r.status, 401, "{path}");
    }
    let r = get(s.addr, "/api/v1/fleet", &[("authorization", TOKEN)]).await;
    assert_eq!(r.status, 200);
    let r = get(
        s.addr,
        "/api/v1/fleet",
        &[("authorization", "bearer s3cret-token")],
    )
    .await;
    assert_eq!(r.status, 200, "the scheme is case-insensitive");
}

#[tokio::test]
async fn without_a_token_the_api_is_open_and_unknown_paths_are_json_404s() {
    let toml = "[[targets]]\nname = \"a\"\nurl = \"http://a.example/mcp\"\n";
    let s = start(toml, Arc::new(FakeHistory::default())).await;
    assert_eq!(get(s.addr, "/api/v1/fleet", &[]).await.status, 200);
    let r = get(s.addr, "/api/v2/nothing", &[]).await;
    assert_eq!(r.status, 404);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("/api/v1/fleet")
    );
}

#[tokio::test]
async fn fleet_summary_counts_and_percentage() {
    let toml = r#"
[[targets]]
name = "a"
url = "http://a.example/mcp"
[[targets]]
name = "b"
url = "http://b.example/mcp"
[[targets]]
name = "c"
url = "http://c.example/mcp"
[[targets]]
name = "d"
url = "http://d.example/mcp"
[[targets]]
name = "e"
command = ["server"]
"#;
    let s = start(toml, Arc::new(FakeHistory::default())).await;
    set_status(&s, "a", Health::Healthy, 1);
    set_status(&s, "b", Health::Healthy, 2);
    set_status(&s, "c", Health::Degraded, 3);
    set_status(&s, "d", Health::Down, 4);
    let mut flapping = s.fleet.get("d").unwrap();
    flapping.flapping = true;
    s.fleet.update("d", flapping);
    let f = get(s.addr, "/api/v1/fleet", &[]).await.json();
    assert_eq!(f["total"], 5);
    assert_eq!(f["healthy"], 2);
    assert_eq!(f["degraded"], 1);
    assert_eq!(f["down"], 1);
    assert_eq!(f["unknown"], 1);
    assert_eq!(f["flapping"], 1);
    assert_eq!(f["percentage"], 40.0);
    let names: Vec<&str> = f["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    assert_eq!(f["targets"][3]["status"], "down");
    assert_eq!(f["targets"][3]["since_ms"], 4);
    assert_eq!(f["targets"][4]["status"], "unknown");
    assert_eq!(f["targets"][4]["kind"], "stdio");
}

#[tokio::test]
async fn a_target_in_detail_and_unknown_names() {
    let history = Arc::new(FakeHistory::with_rows("search", 3));
    let s = start(TWO_TARGETS, history.clone()).await;
    set_status(&s, "search", Health::Healthy, 10);
    let r = get(
        s.addr,
        "/api/v1/targets/search",
        &[("authorization", TOKEN)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let t = r.json();
    assert_eq!(t["name"], "search");
    assert_eq!(t["status"], "healthy");
    assert_eq!(
        t["endpoint"], "https://mcp.example.com/mcp?key=<redacted>",
        "credentials never leave the config (a URL with user:password is refused by the config)"
    );
    assert_eq!(t["stats"][0]["checks"], 3);
    assert!(!r.body.contains("abc"), "{}", r.body);

    let r = get(s.addr, "/api/v1/targets/nope", &[("authorization", TOKEN)]).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["status"], 404);
    assert!(r.json()["error"].as_str().unwrap().contains("\"nope\""));
    let r = get(
        s.addr,
        "/api/v1/targets/nope/history",
        &[("authorization", TOKEN)],
    )
    .await;
    assert_eq!(r.status, 404);

    // The store failing does not hide the live view.
    history.failing.store(true, Ordering::SeqCst);
    let r = get(
        s.addr,
        "/api/v1/targets/search",
        &[("authorization", TOKEN)],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["stats"], Value::Null);
    assert!(
        r.json()["stats_error"]
            .as_str()
            .unwrap()
            .contains("database is locked")
    );

    let all = get(s.addr, "/api/v1/targets", &[("authorization", TOKEN)])
        .await
        .json();
    assert_eq!(all["targets"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn history_pages_by_keyset() {
    let toml = "[[targets]]\nname = \"my target\"\nurl = \"http://a.example/mcp\"\n";
    let history = Arc::new(FakeHistory::with_rows("my target", 7));
    let s = start(toml, history.clone()).await;
    let mut path = "/api/v1/targets/my%20target/history?limit=3".to_owned();
    let mut pages = Vec::new();
    loop {
        let r = get(s.addr, &path, &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let page = r.json();
        let ids: Vec<i64> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_i64().unwrap())
            .collect();
        pages.push(ids);
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(
                    page["next_before"].as_i64(),
                    pages.last().unwrap().last().copied()
                );
                path = next.to_owned();
            }
            None => {
                assert_eq!(page["next_before"], Value::Null);
                break;
            }
        }
    }
    assert_eq!(pages, vec![vec![7, 6, 5], vec![4, 3, 2], vec![1]]);

    // An exact multiple of the page size ends without an empty page.
    let r = get(s.addr, "/api/v1/targets/my%20target/history?limit=7", &[]).await;
    assert_eq!(r.json()["next"], Value::Null);
    let r = get(s.addr, "/api/v1/targets/my%20target/history", &[]).await;
    assert_eq!(r.json()["limit"], 50);
    assert_eq!(r.json()["items"][0]["status"], "healthy");

    for bad in [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "before=yesterday",
        "page=2",
    ] {
        let r = get(
            s.addr,
            &format!("/api/v1/targets/my%20target/history?{bad}"),
            &[],
        )
        .await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.json()["error"].is_string());
    }
    // A cursor that is not one of the target's checks (pruned, say): 410, not an empty page
    // that would end the paging as if the oldest check had been reached.
    let r = get(s.addr, "/api/v1/targets/my%20target/history?before=99", &[]).await;
    assert_eq!(r.status, 410, "{}", r.body);
    let message = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("before=99 is not a check in the history of \"my target\"")
            && message.contains("pruned")
            && message.contains("without before"),
        "{message}"
    );
    history.failing.store(true, Ordering::SeqCst);
    let r = get(s.addr, "/api/v1/targets/my%20target/history", &[]).await;
    assert_eq!(r.status, 503);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("database is locked")
    );
}

#[tokio::test]
async fn readyz_fails_when_the_store_fails() {
    let s = start(TWO_TARGETS, Arc::new(FakeHistory::default())).await;
    s.fleet.store_ok(1);
    let r = get(s.addr, "/readyz", &[]).await;
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_eq!(body["status"], "pass");
    assert_eq!(body["checks"]["store:writable"][0]["status"], "pass");
    assert_eq!(body["checks"]["config:loaded"][0]["observedValue"], 2);
    assert!(body.get("output").is_none(), "no output on pass");

    s.fleet.store_failed(2, "disk I/O error");
    let r = get(s.addr, "/readyz", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.content_type(), "application/health+json");
    let body = r.json();
    assert_eq!(body["status"], "fail");
    assert_eq!(body["checks"]["store:writable"][0]["status"], "fail");
    assert_eq!(
        body["checks"]["store:writable"][0]["componentType"],
        "datastore"
    );
    assert!(body["output"].as_str().unwrap().contains("disk I/O error"));

    let r = get(s.addr, "/readyz?verbose", &[]).await;
    assert_eq!(r.status, 503);
    assert!(
        r.body
            .contains("[-]store failed: the last write failed: disk I/O error"),
        "{}",
        r.body
    );
    assert!(r.body.contains("[+]config ok"));
    assert!(r.body.ends_with("readyz check failed\n"));
    let r = get(s.addr, "/readyz?exclude=store", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Liveness does not depend on the store.
    assert_eq!(get(s.addr, "/livez", &[]).await.status, 200);
    s.fleet.store_ok(3);
    assert_eq!(get(s.addr, "/readyz", &[]).await.status, 200);
}

#[tokio::test]
async fn readyz_fails_before_a_config_and_when_checks_stop() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = parse_config(TWO_TARGETS);
    let fleet = Fleet::new();
    let now = Arc::new(std::sync::atomic::AtomicI64::new(1_000_000));
    let clock = now.clone();
    let state = ApiState::new(
        fleet.clone(),
        Arc::new(FakeHistory::default()),
        Arc::new(RwLock::new(config.clone())),
    )
    .with_clock(Arc::new(move || clock.load(Ordering::SeqCst)));
    tokio::spawn(api::serve(
        listener,
        api::router(state),
        std::future::pending(),
    ));
    let r = get(addr, "/readyz", &[]).await;
    assert_eq!(r.status, 503);
    assert!(
        r.json()["output"]
            .as_str()
            .unwrap()
            .contains("no configuration")
    );
    fleet.set_config_at(&config.targets, 1_000_000);
    assert_eq!(get(addr, "/readyz", &[]).await.status, 200);
    // Two 30 s intervals, the 2 s timeout and 30 s of slack later, no check came: stale.
    now.store(1_000_000 + 93_000, Ordering::SeqCst);
    let r = get(addr, "/readyz", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.json()["checks"]["scheduler:checks"][0]["observedValue"],
        2
    );
    let uptime = get(addr, "/livez", &[]).await.json();
    assert_eq!(uptime["checks"]["process:uptime"][0]["observedValue"], 93);
}

#[tokio::test]
async fn metrics_are_strict_exposition_with_bounded_labels() {
    let modern = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let legacy = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let toml = format!(
        r#"
[defaults]
interval = "30s"
timeout = "2s"
[[targets]]
name = "modern"
url = "{}"
[[targets]]
name = "legacy"
url = "{}"
security = false
[[targets]]
name = "dead"
url = "{}"
[[targets]]
name = 'we"ird\name'
url = "http://never.example/mcp"
"#,
        modern.url("/mcp"),
        legacy.url("/mcp"),
        dead_url()
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;
    check_for_real(&s, "modern", Health::Healthy).await;
    check_for_real(&s, "legacy", Health::Degraded).await;
    check_for_real(&s, "dead", Health::Down).await;
    s.fleet.store_ok(1_700_000_000_000);
    s.fleet.store_failed(1_700_000_001_000, "disk full");

    let ex = scrape(s.addr, "/metrics", &[]).await;
    assert_bounded_labels(&ex);
    // The state set: one series per status, exactly one of them 1.
    for (target, status) in [
        ("modern", "healthy"),
        ("legacy", "degraded"),
        ("dead", "down"),
        ("we\"ird\\name", "unknown"),
    ] {
        let series = ex.find("mcpulse_target_status", &[("target", target)]);
        assert_eq!(series.len(), 4, "{target}");
        assert_eq!(series.iter().map(|s| s.value).sum::<f64>(), 1.0);
        assert_eq!(
            ex.value(
                "mcpulse_target_status",
                &[("target", target), ("status", status)]
            ),
            1.0
        );
    }
    assert_eq!(ex.types["mcpulse_target_status"], "gauge");
    assert_eq!(
        ex.value("mcpulse_probe_success", &[("target", "modern")]),
        1.0
    );
    assert_eq!(
        ex.value("mcpulse_probe_success", &[("target", "legacy")]),
        1.0
    );
    assert_eq!(
        ex.value("mcpulse_probe_success", &[("target", "dead")]),
        0.0
    );
    assert!(
        ex.find("mcpulse_probe_success", &[("target", "we\"ird\\name")])
            .is_empty()
    );
    assert_eq!(ex.value("mcpulse_tools", &[("target", "modern")]), 1.0);
    assert_eq!(
        ex.value(
            "mcpulse_protocol_info",
            &[
                ("target", "modern"),
                ("era", "modern"),
                ("protocol_version", "2026-07-28")
            ]
        ),
        1.0
    );
    assert_eq!(
        ex.value(
            "mcpulse_protocol_info",
            &[
                ("target", "legacy"),
                ("era", "legacy"),
                ("protocol_version", "2025-11-25")
            ]
        ),
        1.0
    );
    let contract = ex.find("mcpulse_contract_info", &[("target", "modern")]);
    assert_eq!(contract.len(), 1);
    assert!(contract[0].labels["digest"].starts_with("sha256:"));
    assert!(ex.value("mcpulse_contract_hash", &[("target", "modern")]) > 0.0);
    for phase in ["connect", "handshake", "tools_list"] {
        let v = ex.value(
            "mcpulse_probe_phase_duration_seconds",
            &[("target", "modern"), ("phase", phase)],
        );
        assert!((0.0..2.0).contains(&v), "{phase} {v}");
    }
    assert!(
        ex.find(
            "mcpulse_probe_phase_duration_seconds",
            &[("target", "modern"), ("phase", "tls")]
        )
        .is_empty(),
        "no TLS on plain HTTP: no series"
    );
    assert!(ex.value("mcpulse_probe_duration_seconds", &[("target", "dead")]) < 2.5);
    assert_eq!(
        ex.value(
            "mcpulse_probe_findings",
            &[("target", "dead"), ("severity", "critical")]
        ),
        1.0
    );
    // Security graded where it is on (the default), not where it is off.
    let grades = ex.find("mcpulse_security_grade", &[("target", "modern")]);
    assert_eq!(grades.len(), 5);
    assert_eq!(grades.iter().map(|s| s.value).sum::<f64>(), 1.0);
    assert!(
        ex.find("mcpulse_security_grade", &[("target", "legacy")])
            .is_empty()
    );
    assert_eq!(
        ex.value(
            "mcpulse_last_transition_timestamp_seconds",
            &[("target", "modern")]
        ),
        1_700_000_000.0
    );
    assert_eq!(
        ex.value(
            "mcpulse_last_check_timestamp_seconds",
            &[("target", "modern")]
        ),
        1_700_000_060.0
    );
    assert_eq!(
        ex.value("mcpulse_target_flapping", &[("target", "dead")]),
        0.0
    );
    // The monitor itself.
    assert_eq!(ex.types["mcpulse_checks"], "counter");
    assert_eq!(ex.value("mcpulse_checks_total", &[]), 3.0);
    assert_eq!(ex.value("mcpulse_store_write_errors_total", &[]), 1.0);
    assert_eq!(ex.value("mcpulse_targets", &[]), 4.0);
    assert_eq!(ex.types["mcpulse_build"], "info");
    assert_eq!(ex.find("mcpulse_build_info", &[]).len(), 1);
}

fn probe_config(extra_server: &str, targets: &str) -> String {
    format!("[server]\n{extra_server}\n[defaults]\ninterval = \"30s\"\ntimeout = \"3s\"\n{targets}")
}

#[tokio::test]
async fn probe_answers_like_blackbox_for_configured_targets() {
    let modern = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let legacy = FakeHttp::start_script(scenario::legacy_sse()).await;
    let toml = probe_config(
        "",
        &format!(
            // The legacy target's latency budget is tiny: its own settings apply, so it is slow.
            "[[targets]]\nname = \"modern\"\nurl = \"{}\"\n[[targets]]\nname = \"legacy\"\nurl = \"{}\"\nlatency_budget = \"0.001ms\"\n[[targets]]\nname = \"dead\"\nurl = \"{}\"\n",
            modern.url("/mcp"),
            legacy.url("/sse"),
            dead_url()
        ),
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;

    let ex = scrape(s.addr, "/probe?target=modern&module=default", &[]).await;
    assert_bounded_labels(&ex);
    assert!(
        ex.label_names().iter().all(|l| l != "target"),
        "Prometheus adds the instance"
    );
    assert_eq!(ex.value("probe_success", &[]), 1.0);
    assert_eq!(ex.value("probe_mcp_status", &[("status", "healthy")]), 1.0);
    assert_eq!(ex.value("probe_mcp_status", &[("status", "down")]), 0.0);
    assert_eq!(ex.value("probe_mcp_tools", &[]), 1.0);
    assert_eq!(
        ex.value(
            "probe_mcp_era_info",
            &[("era", "modern"), ("protocol_version", "2026-07-28")]
        ),
        1.0
    );
    assert_eq!(ex.value("probe_mcp_auth", &[("auth", "none")]), 1.0);
    assert_eq!(ex.value("probe_timeout_seconds", &[]), 3.0);
    let d = ex.value("probe_duration_seconds", &[]);
    assert!(d > 0.0 && d < 3.0, "{d}");
    let score = ex.value("probe_mcp_security_score", &[]);
    assert!((0.0..=100.0).contains(&score));
    assert_eq!(ex.find("probe_mcp_security_grade", &[]).len(), 5);
    assert_eq!(ex.find("probe_mcp_contract_info", &[]).len(), 1);

    let ex = scrape(s.addr, "/probe?target=legacy", &[]).await;
    assert_eq!(ex.value("probe_success", &[]), 1.0);
    assert_eq!(
        ex.value("probe_mcp_status", &[("status", "degraded")]),
        1.0,
        "the target's own latency budget applies"
    );
    assert_eq!(
        ex.value(
            "probe_mcp_era_info",
            &[("era", "legacy"), ("protocol_version", "2024-11-05")]
        ),
        1.0
    );
    assert_eq!(
        ex.value("probe_mcp_findings", &[("severity", "warning")]),
        1.0
    );

    let ex = scrape(s.addr, "/probe?target=dead", &[]).await;
    assert_eq!(ex.value("probe_success", &[]), 0.0);
    assert_eq!(ex.value("probe_mcp_status", &[("status", "down")]), 1.0);
    assert_eq!(
        ex.value("probe_mcp_findings", &[("severity", "critical")]),
        1.0
    );
    assert!(ex.find("probe_mcp_tools", &[]).is_empty());
    assert!(ex.find("probe_mcp_security_score", &[]).is_empty());

    // The scrape timeout bounds the probe, less blackbox's half-second offset.
    let ex = scrape(
        s.addr,
        "/probe?target=modern",
        &[("x-prometheus-scrape-timeout-seconds", "2")],
    )
    .await;
    assert_eq!(ex.value("probe_timeout_seconds", &[]), 1.5);

    // debug=true: what the probe saw, then the metrics.
    let r = get(s.addr, "/probe?target=dead&debug=true", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("Status: down"), "{}", r.body);
    assert!(
        r.body.contains("connect-failed") || r.body.contains("critical"),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("Metrics that would have been returned:\n# HELP probe_success")
    );

    // The probes show in the monitor's own metrics.
    let ex = scrape(s.addr, "/metrics", &[]).await;
    assert_eq!(ex.value("mcpulse_api_probes_total", &[]), 9.0);
    assert_eq!(ex.value("mcpulse_api_probes_in_flight", &[]), 0.0);
}

/// `/probe?debug=true` is read by people: a server's protocol version and error messages are
/// shown inert (issue #14).
#[tokio::test]
async fn probe_debug_text_shows_server_text_inert() {
    use mcpulse_testkit::scenario::HOSTILE;
    let odd = FakeHttp::start_script(scenario::hostile(HOSTILE, HOSTILE, false)).await;
    let rejecting = FakeHttp::start_script(scenario::hostile(
        HOSTILE,
        mcpulse_testkit::mcp::LEGACY,
        true,
    ))
    .await;
    let toml = probe_config(
        "",
        &format!(
            "[[targets]]\nname = \"odd\"\nurl = \"{}\"\n[[targets]]\nname = \"rejecting\"\nurl = \"{}\"\n",
            odd.url("/mcp"),
            rejecting.url("/mcp")
        ),
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;
    for target in ["odd", "rejecting"] {
        let r = get(s.addr, &format!("/probe?target={target}&debug=true"), &[]).await;
        assert_eq!(r.status, 200);
        // The metrics keep Prometheus's own escaping; the text for people is inert.
        let (people, _) = r
            .body
            .split_once("Metrics that would have been returned")
            .unwrap();
        assert!(
            !people
                .chars()
                .any(|c| c != '\n' && mcpulse_wire::text::is_escaped(c)),
            "{people:?}"
        );
        assert!(people.contains("evil\\x1b]0;pwned\\x07"), "{people}");
    }
    // The metrics too: the server's protocol version is a label value, made inert (no raw
    // escape a terminal or a log would act on), not only Prometheus-escaped.
    let r = get(s.addr, "/probe?target=odd", &[]).await;
    assert_eq!(r.status, 200);
    assert!(
        !r.body
            .chars()
            .any(|c| c != '\n' && mcpulse_wire::text::is_escaped(c)),
        "{:?}",
        r.body
    );
    assert!(r.body.contains("protocol_version=\"evil"), "{}", r.body);
}

#[tokio::test]
async fn probe_refuses_bad_parameters_with_a_message() {
    let toml = probe_config(
        "",
        "[modules.fast]\ntimeout = \"1s\"\n[[targets]]\nname = \"a\"\nurl = \"http://a.example/mcp\"\n",
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;
    for (path, status, says) in [
        ("/probe", 400, "target parameter is missing"),
        ("/probe?target=", 400, "target parameter is missing"),
        (
            "/probe?target=a&module=nope",
            400,
            "unknown module \"nope\": the config defines default, fast",
        ),
        ("/probe?target=a&target=b", 400, "once"),
        ("/probe?target=b", 400, "no target named \"b\""),
        ("/probe?target=a&module=default&module=fast", 400, "once"),
    ] {
        let r = get(s.addr, path, &[]).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(r.content_type(), "text/plain; charset=utf-8");
        assert!(r.body.contains(says), "{path}: {}", r.body);
    }
    let r = get(
        s.addr,
        "/probe?target=a",
        &[("x-prometheus-scrape-timeout-seconds", "soon")],
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("X-Prometheus-Scrape-Timeout-Seconds"));
}

#[tokio::test]
async fn url_probes_are_refused_unless_configured_or_allowed() {
    let modern = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let url = modern.url("/mcp");
    let other = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let other_url = other.url("/mcp");
    let toml = probe_config(
        "",
        &format!("[[targets]]\nname = \"known\"\nurl = \"{url}\"\n"),
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;

    // Outside the config: refused, and nothing is sent to it.
    let r = get(
        s.addr,
        &format!("/probe?target={}", encode(&other_url)),
        &[],
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("allow_url_probes = true"), "{}", r.body);
    assert!(
        other.requests().is_empty(),
        "a refused URL is never contacted"
    );
    // A credential in a refused URL is not echoed back.
    let r = get(
        s.addr,
        &format!(
            "/probe?target={}",
            encode("http://u:hunter2@10.0.0.1/?token=hunter2")
        ),
        &[],
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(!r.body.contains("hunter2"), "{}", r.body);
    // A configured target's URL is the configured target.
    let ex = scrape(s.addr, &format!("/probe?target={}", encode(&url)), &[]).await;
    assert_eq!(ex.value("probe_success", &[]), 1.0);
    // Neither commands nor other schemes, ever.
    for target in [
        "sh -c 'touch /tmp/mcpulse-pwned'",
        "file:///etc/passwd",
        "stdio://sh",
    ] {
        let r = get(s.addr, &format!("/probe?target={}", encode(target)), &[]).await;
        assert_eq!(r.status, 400, "{target}: {}", r.body);
    }

    // Allowed: any http(s) URL, with the module's settings.
    let toml = probe_config(
        "allow_url_probes = true",
        "[modules.quick]\ntimeout = \"2s\"\nera = \"modern\"\n",
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;
    let ex = scrape(
        s.addr,
        &format!("/probe?target={}&module=quick", encode(&other_url)),
        &[],
    )
    .await;
    assert_eq!(ex.value("probe_success", &[]), 1.0);
    assert_eq!(ex.value("probe_timeout_seconds", &[]), 2.0);
    assert!(!other.requests().is_empty());
    assert!(
        ex.find("probe_mcp_security_score", &[]).is_empty(),
        "modules leave the security checks off unless they ask"
    );
    let r = get(
        s.addr,
        &format!("/probe?target={}", encode("file:///etc/passwd")),
        &[],
    )
    .await;
    assert_eq!(r.status, 400, "allowing URLs does not allow other schemes");
    let r = get(
        s.addr,
        &format!("/probe?target={}", encode("sh -c id")),
        &[],
    )
    .await;
    assert_eq!(r.status, 400, "nor commands");
}

#[tokio::test]
async fn a_stdio_target_is_probed_only_by_its_configured_name() {
    let dir = TempDir::new("api-stdio");
    let ran = dir.join("ran");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(ran.clone()))
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                mcp::tools(&["echo", "read"]),
                None,
                false,
            ))],
        );
    let path = script.write(&dir, "server.sh");
    let toml = probe_config(
        "allow_url_probes = true",
        &format!(
            "[[targets]]\nname = \"local\"\ncommand = [\"sh\", \"{}\"]\nera = \"legacy\"\n",
            path.display()
        ),
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;
    let ex = scrape(s.addr, "/probe?target=local", &[]).await;
    assert_eq!(ex.value("probe_success", &[]), 1.0);
    assert_eq!(ex.value("probe_mcp_tools", &[]), 2.0);
    assert!(
        ex.find("probe_mcp_phase_duration_seconds", &[("phase", "connect")])
            .is_empty(),
        "no network phases on stdio"
    );
    assert!(ran.exists());
    // The same command by any other spelling is not a target.
    std::fs::remove_file(&ran).unwrap();
    for target in [format!("sh {}", path.display()), path.display().to_string()] {
        let r = get(s.addr, &format!("/probe?target={}", encode(&target)), &[]).await;
        assert_eq!(r.status, 400, "{target}: {}", r.body);
    }
    assert!(!ran.exists(), "a refused command never runs");
}

#[tokio::test]
async fn probes_beyond_the_limit_wait_then_get_503() {
    // One slot; a silent server holds it for its whole timeout.
    let silent = FakeHttp::start(|_| Reply::silence()).await;
    let toml = probe_config(
        "",
        &format!(
            "[[targets]]\nname = \"silent\"\nurl = \"{}\"\n",
            silent.url("/mcp")
        ),
    );
    let s = start_with(&toml, Arc::new(FakeHistory::default()), |st| {
        st.with_probe_limit(1)
    })
    .await;
    let addr = s.addr;
    let first = tokio::spawn(async move { get(addr, "/probe?target=silent", &[]).await });
    // Wait until the first probe holds the slot (it shows as in flight).
    let t0 = Instant::now();
    while s.fleet.monitor().probes_in_flight == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the first probe never started"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t1 = Instant::now();
    let r = get(
        s.addr,
        "/probe?target=silent",
        &[("x-prometheus-scrape-timeout-seconds", "0.6")],
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("too many probes in flight"), "{}", r.body);
    assert!(
        t1.elapsed() < Duration::from_secs(2),
        "bounded by the scrape budget"
    );
    let first = first.await.unwrap();
    assert_eq!(first.status, 200);
    let ex = parse_exposition(&first.body, false).unwrap();
    assert_eq!(ex.value("probe_success", &[]), 0.0);
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[test]
fn the_parser_is_strict() {
    let ok = "# HELP a_seconds x\n# TYPE a_seconds gauge\n# UNIT a_seconds seconds\na_seconds{target=\"q\\\"\\\\\"} 1.5\n# EOF\n";
    let ex = parse_exposition(ok, true).unwrap();
    assert_eq!(ex.samples[0].labels["target"], "q\"\\");
    for bad in [
        "# HELP a x\n# TYPE a gauge\na 1\n",            // no EOF
        "# HELP a x\n# TYPE a gauge\na 1 123\n# EOF\n", // a timestamp
        "# HELP a x\n# TYPE a gauge\na{b=\"1\"} 1\na{b=\"1\"} 2\n# EOF\n", // repeated series
        "# HELP a x\n# TYPE a counter\na 1\n# EOF\n",   // counter without _total
        "# HELP a x\n# TYPE a gauge\nb 1\n# EOF\n",     // foreign sample
        "a 1\n# EOF\n",                                 // no TYPE
        "# HELP a x\n# TYPE a gauge\na{b=1} 1\n# EOF\n", // unquoted
        "# HELP a x\n# TYPE a gauge\na{b=\"\\x\"} 1\n# EOF\n", // bad escape
        "# HELP a x\n# TYPE a info\na_info 2\n# EOF\n", // info not 1
        "# HELP a say \"x\"\n# TYPE a gauge\na 1\n# EOF\n", // raw quote in HELP
        "# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\n# HELP a x\n# TYPE a gauge\n# EOF\n",
    ] {
        assert!(parse_exposition(bad, true).is_err(), "accepted: {bad:?}");
    }
    assert!(parse_exposition("# HELP a x\n# TYPE a info\na 1\n", false).is_err());
    assert!(
        parse_exposition(
            "# HELP a_total x\n# TYPE a_total counter\na_total 1\n",
            false
        )
        .is_ok()
    );
}

/// The rendered view of a configured target has everything the brief lists.
#[tokio::test]
async fn a_checked_target_shows_its_last_check() {
    let modern = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let toml = probe_config(
        "",
        &format!(
            "[[targets]]\nname = \"m\"\nurl = \"{}\"\nlabels = {{ team = \"search\" }}\n",
            modern.url("/mcp")
        ),
    );
    let s = start(&toml, Arc::new(FakeHistory::default())).await;
    check_for_real(&s, "m", Health::Healthy).await;
    let t = get(s.addr, "/api/v1/targets/m", &[]).await.json();
    assert_eq!(t["labels"]["team"], "search");
    let last = &t["last"];
    assert_eq!(last["status"], "healthy");
    assert_eq!(last["era"], "modern");
    assert_eq!(last["protocol_version"], "2026-07-28");
    assert_eq!(last["auth"], "none");
    assert_eq!(last["tool_count"], 1);
    assert!(
        last["contract_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(last["timings_ms"]["handshake"].is_number());
    assert!(last["findings"].is_array());
    assert!(last["grade"].is_string());
    let view: TargetView = s.fleet.get("m").unwrap();
    assert_eq!(view.last.unwrap().at_ms, 1_700_000_060_000);
}

/// `/probe` is stateless, as a blackbox exporter's probe is: every request is one auto probe,
/// which asks a legacy server `server/discover` every time (the scheduled checks' era memory,
/// `runner::EraMemo`, is not consulted). The URL is outside the config, so no scheduled check
/// reaches the server during the test.
#[tokio::test]
async fn probe_remembers_no_era_between_requests() {
    let legacy = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let s = start(
        &probe_config("allow_url_probes = true", ""),
        Arc::new(FakeHistory::default()),
    )
    .await;
    let url = legacy.url("/mcp");
    for k in 1..=3 {
        let r = get(s.addr, &format!("/probe?target={}", encode(&url)), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains("probe_success 1"), "{}", r.body);
        let discovers = legacy
            .methods()
            .iter()
            .filter(|m| *m == "server/discover")
            .count();
        assert_eq!(discovers, k, "probe {k}: {:?}", legacy.methods());
    }
}

async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    post_body(addr, path, headers, "").await
}

async fn post_body(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(
            req.body(http_body_util::Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
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

/// `POST /api/v1/targets/{name}/accept` changes what the monitor alerts on: it needs the token
/// even where the API is otherwise open (403 without one configured, saying what to set), a
/// bearer (the page's cookie is for reads), and a configured target; it is answered 202 and the
/// target's view shows `accept_pending` until its next check takes the contract.
#[tokio::test]
async fn accepting_a_baseline_needs_the_token_and_shows_as_pending() {
    let open = start(
        "[[targets]]\nname = \"a\"\nurl = \"http://a.example/mcp\"\n",
        Arc::new(FakeHistory::default()),
    )
    .await;
    let r = post(open.addr, "/api/v1/targets/a/accept", &[]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("set token = \"${MCPULSE_API_TOKEN}\" in [server]"),
        "{}",
        r.body
    );
    assert!(open.fleet.get("a").is_some_and(|v| !v.accept_pending));

    let s = start(TWO_TARGETS, Arc::new(FakeHistory::default())).await;
    let path = "/api/v1/targets/search/accept";
    assert_eq!(post(s.addr, path, &[]).await.status, 401);
    assert_eq!(
        post(s.addr, path, &[("authorization", "Bearer wrong")])
            .await
            .status,
        401
    );
    // The status page's cookie (what `/login` sets) is not enough for a change.
    let login = post_body(
        s.addr,
        "/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        "token=s3cret-token",
    )
    .await;
    let cookie = login
        .headers
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no cookie: {} {}", login.status, login.body));
    assert_eq!(
        get(s.addr, "/api/v1/targets/search", &[("cookie", cookie)])
            .await
            .status,
        200,
        "the cookie reads"
    );
    assert_eq!(post(s.addr, path, &[("cookie", cookie)]).await.status, 401);
    let r = post(
        s.addr,
        "/api/v1/targets/nope/accept",
        &[("authorization", TOKEN)],
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = post(s.addr, path, &[("authorization", TOKEN)]).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["accept_pending"], true);
    let view = get(
        s.addr,
        "/api/v1/targets/search",
        &[("authorization", TOKEN)],
    )
    .await
    .json();
    assert_eq!(view["accept_pending"], true, "{view}");
    assert!(
        get(s.addr, "/api/v1/targets/files", &[("authorization", TOKEN)])
            .await
            .json()
            .get("accept_pending")
            .is_none()
    );
    // Not by a check whose probe started before the request.
    assert!(!s.fleet.take_accept("search", 0, 1_000));
    // Taken by the next check with a contract, and pending until the store has written it.
    let mark = s.fleet.accept_mark();
    assert!(s.fleet.take_accept("search", mark, 1_000));
    let view = get(
        s.addr,
        "/api/v1/targets/search",
        &[("authorization", TOKEN)],
    )
    .await
    .json();
    assert_eq!(view["accept_pending"], true, "{view}");
    assert!(view.get("baseline").is_none(), "{view}");
    s.fleet.baseline_stored("search", "sha256:ab", 1_000);
    let view = get(
        s.addr,
        "/api/v1/targets/search",
        &[("authorization", TOKEN)],
    )
    .await
    .json();
    assert!(view.get("accept_pending").is_none(), "{view}");
    assert_eq!(
        view["baseline"],
        serde_json::json!({"digest": "sha256:ab", "accepted_ms": 1_000}),
        "{view}"
    );
    let r = get(s.addr, path, &[("authorization", TOKEN)]).await;
    assert_eq!(r.status, 405, "{}", r.body);

    // A health-only target has no contract: nothing to accept.
    let h = start(
        "[server]\ntoken = \"s3cret-token\"\n[[targets]]\nname = \"h\"\nhealth_url = \"http://127.0.0.1:9/readyz\"\n",
        Arc::new(FakeHistory::default()),
    )
    .await;
    let r = post(
        h.addr,
        "/api/v1/targets/h/accept",
        &[("authorization", TOKEN)],
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.json()["error"].as_str().unwrap().contains("health-only"),
        "{}",
        r.body
    );
    assert!(h.fleet.get("h").is_some_and(|v| !v.accept_pending));
}

/// Review of c75cf77: `mcpulse monitor accept` reports success from a stored fact, the view's
/// `baseline` (digest and time) changed once the store wrote it, not from `accept_pending`
/// turning false: a request that vanished (a restart, the target reloaded away and back) is
/// reported as lost, not as accepted.
#[tokio::test]
async fn the_accept_command_succeeds_only_once_the_new_baseline_is_stored() {
    use mcpulse_monitor::accept::{AcceptError, Api, Outcome};
    let s = start(TWO_TARGETS, Arc::new(FakeHistory::default())).await;
    let api = Api {
        base: format!("http://{}", s.addr),
        token: Some("s3cret-token".into()),
    };
    let wait = Some(std::time::Duration::from_secs(30));
    // The request vanishes: the target leaves the fleet and comes back without it.
    let fleet = s.fleet.clone();
    let config = s.config.clone();
    let vanish = tokio::spawn(async move {
        while !fleet.get("search").is_some_and(|v| v.accept_pending) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        fleet.remove("search");
        fleet.set_config(&config.targets);
    });
    assert_eq!(api.accept("search", wait).await, Err(AcceptError::Lost));
    vanish.await.unwrap();

    // Taken by a check, and written: accepted.
    let fleet = s.fleet.clone();
    let store = tokio::spawn(async move {
        while !fleet.get("search").is_some_and(|v| v.accept_pending) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(fleet.take_accept("search", fleet.accept_mark(), 2_000));
        // Taken, not yet written: still pending.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        fleet.baseline_stored("search", "sha256:ab", 2_000);
    });
    assert_eq!(
        api.accept("search", wait).await,
        Ok(Outcome::Accepted { drift_before: None })
    );
    store.await.unwrap();
}
