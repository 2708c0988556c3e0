//! The monitor against the real thing: a real Prometheus scrapes `mcpulse monitor`'s `/probe`
//! and `/metrics` with the configuration docs/prometheus.md documents, and evaluates the alert
//! rules documented there; the Alertmanager sink delivers to a real Alertmanager, which groups,
//! deduplicates, notifies and resolves.
//!
//! Prometheus and Alertmanager are Debian 12's packages (`prometheus` 2.42, `prometheus-
//! alertmanager` 0.25), installed by scripts/ci-packages.sh (which .ci/run and scripts/test.sh
//! call). Without them these tests fail, naming the script: they are part of the suite, not
//! optional.
//!
//! Everything runs on loopback: the fake MCP servers (mcpulse-testkit), the monitor, Prometheus
//! and Alertmanager, each on a port chosen at run time (bound at port 0 first, then handed to
//! the process). Every process is killed when its test ends, passed or failed ([`Proc`]), and
//! every wait is bounded ([`WAIT`]); a timeout reports the last thing seen and the process
//! logs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/engines.rs"]
mod engines;

use engines::*;
use mcpulse_testkit::{FakeHttp, Reply, TempDir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Prometheus' own tool (in the `prometheus` package): `check metrics` parses and lints the
/// 0.0.4 text format, which Prometheus 2.42 never asks for when OpenMetrics is offered.
const PROMTOOL: &str = "/usr/bin/promtool";

/// A [`Proc`] whose Drop never runs (the test binary SIGKILLed) is still killed: by the kernel,
/// when the thread that started it goes (PR_SET_PDEATHSIG). Here that thread ends after
/// forgetting it.
#[test]
fn a_proc_dies_with_the_thread_that_started_it() {
    let dir = TempDir::new("pdeathsig");
    let pid = std::thread::scope(|s| {
        s.spawn(|| {
            let p = Proc::spawn("sleep", "sleep", &["60".to_owned()], &dir);
            let pid = p.child.id();
            std::mem::forget(p);
            pid
        })
        .join()
        .unwrap()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        // Killed and reparented to init (or a subreaper), it is a zombie or gone.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
        if matches!(state, None | Some('Z') | Some('X')) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child {pid} outlived the thread that started it: {stat}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Reap it if it is still ours (it is: its parent is this process).
    // SAFETY: waitpid on a pid this process spawned; no memory is shared.
    #[allow(unsafe_code)]
    unsafe {
        libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
    }
}

/// The alert rules' unit tests (deploy/prometheus/rules_test.yml, `promtool test rules`): among
/// them, MCPServerDown holds, with no false "resolved", when every monitor dies while the
/// server is down.
#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    let out = Command::new(PROMTOOL)
        .args(["test", "rules", "rules_test.yml"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("starting {PROMTOOL}: {e}; run scripts/ci-packages.sh"));
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool check metrics` over the monitor's `path` in the 0.0.4 text format: the exposition
/// parses, and passes Prometheus' naming lints.
async fn promtool_check(monitor: u16, path: &str) {
    let auth = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Accept", "text/plain;version=0.0.4"),
    ];
    let (status, body) = http("GET", monitor, path, &headers, None)
        .await
        .unwrap_or_else(|| panic!("no answer from the monitor to {path}"));
    assert_eq!(status, 200, "{path}: {body}");
    assert!(
        body.starts_with("# HELP"),
        "{path} is not the text format:\n{body}"
    );
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {PROMTOOL}: {e}"));
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(body.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics on {path} ({}):\n{said}\n--- exposition ---\n{body}",
        out.status
    );
}

/// The list items of the first `- targets:` in `block` replaced by `targets`.
fn with_targets(block: &str, targets: &[String]) -> String {
    let mut out = String::new();
    let mut lines = block.lines().peekable();
    let mut done = false;
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        if !done && line.trim() == "- targets:" {
            let indent = line.len() - line.trim_start().len() + 4;
            while lines.peek().is_some_and(|l| {
                l.trim_start().starts_with("- ") && l.len() - l.trim_start().len() >= indent
            }) {
                lines.next();
            }
            for t in targets {
                let _ = writeln!(out, "{}- {t}", " ".repeat(indent));
            }
            done = true;
        }
    }
    assert!(done, "no `- targets:` list in:\n{block}");
    out
}

/// The documented scrape configs with this test's addresses, one Prometheus config:
/// - the `/metrics` job (`job_name: mcpulse`) as documented, pointed at the monitor;
/// - the blackbox-style `/probe` job (`job_name: mcp`) as documented (relabeling, module,
///   authorization), with this test's targets, the monitor's address, and a 1 s interval;
/// - the documented alerting rules, evaluated every second.
fn prometheus_config(
    doc: &str,
    monitor: u16,
    probe_targets: &[String],
    token_file: &Path,
    rules_file: &Path,
) -> String {
    let token = token_file.display().to_string();
    let metrics = doc_block(doc, "job_name: mcpulse\n");
    let metrics = swap(&metrics, "/etc/prometheus/mcpulse.token", &token);
    let metrics = swap(
        &metrics,
        "\"mcpulse.example.internal:9477\"",
        &format!("\"127.0.0.1:{monitor}\""),
    );
    let probe = doc_block(doc, "replacement: 127.0.0.1:9477");
    let probe = swap(&probe, "scrape_interval: 30s", "scrape_interval: 1s");
    let probe = swap(&probe, "scrape_timeout: 15s", "scrape_timeout: 1s");
    let probe = swap(&probe, "/etc/prometheus/mcpulse.token", &token);
    let probe = swap(
        &probe,
        "replacement: 127.0.0.1:9477",
        &format!("replacement: 127.0.0.1:{monitor}"),
    );
    let probe = with_targets(&probe, probe_targets);
    let jobs = |block: &str| {
        let body = swap(block, "scrape_configs:\n", "");
        assert!(body.starts_with("  - job_name:"), "{body}");
        body
    };
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\nscrape_configs:\n{}{}",
        rules_file.display(),
        jobs(&metrics),
        jobs(&probe)
    )
}

// ---- Prometheus -----------------------------------------------------------------------------

/// A real Prometheus scrapes `/probe` and `/metrics` with the documented configuration: both
/// expositions are accepted (every scrape `up`, no scrape error), `probe_success` is 1 for the
/// live server (by name and by URL) and 0 for the dead one, the monitor's
/// `mcpulse_target_status{status="down"}` is ingested, and the documented alert rules load and
/// evaluate, with the "down" alerts pending for the dead target only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_probe_and_metrics_as_documented() {
    require(PROMETHEUS, "prometheus");
    require(PROMTOOL, "prometheus");
    let dir = TempDir::new("prometheus");
    let live = mcp_server(Arc::new(AtomicBool::new(true))).await;
    let live_url = live.url("/mcp");
    let dead_url = format!("http://127.0.0.1:{}/mcp", free_port());

    let (mut mon, mon_port) = monitor(
        "monitor",
        &dir,
        &format!(
            "[defaults]\ninterval = \"1s\"\ntimeout = \"500ms\"\nfailure_threshold = 1\n\
             success_threshold = 1\nsecurity = false\n\n\
             [[targets]]\nname = \"live\"\nurl = \"{live_url}\"\n\n\
             [[targets]]\nname = \"dead\"\nurl = \"{dead_url}\"\n"
        ),
    )
    .await;

    let doc = prometheus_doc();
    let token_file = dir.join("mcpulse.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let rules_file = dir.join("rules.yml");
    std::fs::write(&rules_file, doc_block(&doc, "groups:\n")).unwrap();
    let config = prometheus_config(
        &doc,
        mon_port,
        &["live".to_owned(), "dead".to_owned(), live_url.clone()],
        &token_file,
        &rules_file,
    );
    let config_file = dir.join("prometheus.yml");
    std::fs::write(&config_file, &config).unwrap();
    let prom_port = free_port();
    let args = [
        format!("--config.file={}", config_file.display()),
        format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
        format!("--web.listen-address=127.0.0.1:{prom_port}"),
    ];
    let mut prom = Proc::spawn("prometheus", PROMETHEUS, &args, &dir);
    ready(prom_port, "/-/ready", &mut prom).await;

    // Every scrape succeeds: Prometheus parsed both expositions (it asks for OpenMetrics first).
    until(
        "all 4 scrape targets to be up with no scrape error",
        &mut [&mut prom, &mut mon],
        || async {
            let (_, body) = get(prom_port, "/api/v1/targets?state=active")
                .await
                .ok_or("no answer")?;
            let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let targets = v["data"]["activeTargets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut seen = BTreeSet::new();
            for t in &targets {
                if t["health"] != "up" || t["lastError"] != "" {
                    return Err(format!("not up yet: {t}"));
                }
                seen.insert((
                    t["labels"]["job"].as_str().unwrap_or("").to_owned(),
                    t["labels"]["instance"].as_str().unwrap_or("").to_owned(),
                    t["scrapeUrl"].as_str().unwrap_or("").to_owned(),
                ));
            }
            let m = format!("http://127.0.0.1:{mon_port}");
            let want = BTreeSet::from([
                (
                    "mcpulse".to_owned(),
                    format!("127.0.0.1:{mon_port}"),
                    format!("{m}/metrics"),
                ),
                (
                    "mcp".to_owned(),
                    "live".to_owned(),
                    format!("{m}/probe?module=default&target=live"),
                ),
                (
                    "mcp".to_owned(),
                    "dead".to_owned(),
                    format!("{m}/probe?module=default&target=dead"),
                ),
                (
                    "mcp".to_owned(),
                    live_url.clone(),
                    format!("{m}/probe?module=default&target={}", encode(&live_url)),
                ),
            ]);
            if seen == want {
                Ok(())
            } else {
                Err(format!("targets {seen:?}, want {want:?}"))
            }
        },
    )
    .await;

    // /probe: the blackbox-style job, instance = the MCP server.
    until(
        "probe_success{job=\"mcp\"}: 1 for live (by name and URL), 0 for dead",
        &mut [&mut prom, &mut mon],
        || async {
            let got = by_label(
                &query(prom_port, "probe_success{job=\"mcp\"}").await?,
                "instance",
            );
            let want = [
                ("dead".to_owned(), "0".to_owned()),
                ("live".to_owned(), "1".to_owned()),
                (live_url.clone(), "1".to_owned()),
            ]
            .into_iter()
            .collect();
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    let status = query(
        prom_port,
        "probe_mcp_status{job=\"mcp\",instance=\"live\"} == 1",
    )
    .await
    .unwrap();
    assert_eq!(
        by_label(&status, "status").into_keys().collect::<Vec<_>>(),
        ["healthy"]
    );
    let tools = query(prom_port, "probe_mcp_tools{job=\"mcp\",instance=\"live\"}")
        .await
        .unwrap();
    assert_eq!(tools[0]["value"][1], "1", "{tools:?}");
    let era = query(
        prom_port,
        "probe_mcp_era_info{job=\"mcp\",instance=\"live\"}",
    )
    .await
    .unwrap();
    assert_eq!(era[0]["metric"]["era"], "modern", "{era:?}");
    let timeout = query(prom_port, "probe_timeout_seconds{instance=\"live\"}")
        .await
        .unwrap();
    let timeout: f64 = timeout[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(
        timeout > 0.0 && timeout <= 0.5,
        "the probe's budget is the scrape timeout (1 s) less 0.5 s at most: {timeout}"
    );

    // /metrics: the monitor's own view, with its thresholds applied.
    until(
        "mcpulse_target_status{status=\"down\"}: 1 for dead, 0 for live",
        &mut [&mut prom, &mut mon],
        || async {
            let got = by_label(
                &query(
                    prom_port,
                    "mcpulse_target_status{job=\"mcpulse\",status=\"down\"}",
                )
                .await?,
                "target",
            );
            let want = [
                ("dead".to_owned(), "1".to_owned()),
                ("live".to_owned(), "0".to_owned()),
            ]
            .into_iter()
            .collect();
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    let checks = query(prom_port, "mcpulse_checks_total{job=\"mcpulse\"}")
        .await
        .unwrap();
    assert!(
        checks[0]["value"][1]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap()
            > 0.0,
        "the counter is ingested: {checks:?}"
    );
    let build = query(prom_port, "mcpulse_build_info{job=\"mcpulse\"}")
        .await
        .unwrap();
    assert_eq!(
        build[0]["metric"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{build:?}"
    );

    // The other exposition format, 0.0.4 text, through Prometheus' own parser and lints.
    promtool_check(mon_port, "/metrics").await;
    promtool_check(mon_port, "/probe?target=live").await;
    promtool_check(mon_port, "/probe?target=dead").await;

    // The documented alert rules load, evaluate without error, and the "down" ones match the
    // dead target only (pending: their `for` is minutes).
    until(
        "the documented rules to evaluate, with MCPServerDown and MCPTargetDown for dead",
        &mut [&mut prom, &mut mon],
        || async {
            let (_, body) = get(prom_port, "/api/v1/rules").await.ok_or("no answer")?;
            let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let groups = v["data"]["groups"].as_array().cloned().unwrap_or_default();
            let names: BTreeSet<&str> = groups.iter().filter_map(|g| g["name"].as_str()).collect();
            if names != BTreeSet::from(["mcp-monitor", "mcp-probe"]) {
                return Err(format!("rule groups {names:?}"));
            }
            let mut firing = BTreeSet::new();
            for g in &groups {
                for r in g["rules"].as_array().cloned().unwrap_or_default() {
                    if r["health"] != "ok" {
                        return Err(format!("rule not evaluated ok: {r}"));
                    }
                    for a in r["alerts"].as_array().cloned().unwrap_or_default() {
                        // /probe series name the MCP server in `instance`, the monitor's
                        // own series in `target` (their `instance` is the monitor).
                        let who = a["labels"]["target"]
                            .as_str()
                            .or(a["labels"]["instance"].as_str())
                            .unwrap_or("")
                            .to_owned();
                        firing.insert((r["name"].as_str().unwrap_or("").to_owned(), who));
                    }
                }
            }
            let want = BTreeSet::from([
                ("MCPServerDown".to_owned(), "dead".to_owned()),
                ("MCPTargetDown".to_owned(), "dead".to_owned()),
            ]);
            if firing == want {
                Ok(())
            } else {
                Err(format!("alerts {firing:?}"))
            }
        },
    )
    .await;
}

// ---- Alertmanager ---------------------------------------------------------------------------

/// The alerts Alertmanager holds (active ones: `/api/v2/alerts` leaves out resolved alerts)
/// for the `live` target with this alertname.
async fn am_alerts(port: u16, alertname: &str) -> Result<Vec<Value>, String> {
    let filter = encode(&format!("alertname=\"{alertname}\""));
    let path = format!(
        "/api/v2/alerts?filter={filter}&filter={}",
        encode("target=\"live\"")
    );
    let (status, body) = get(port, &path)
        .await
        .ok_or("Alertmanager did not answer")?;
    if status != 200 {
        return Err(format!("HTTP {status}: {body}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

/// The one active `MCPServerDown` alert Alertmanager holds, if `ok` holds for it (for `until`).
async fn the_down_alert(port: u16, ok: impl Fn(&Value) -> bool) -> Result<Value, String> {
    let alerts = am_alerts(port, "MCPServerDown").await?;
    match alerts.as_slice() {
        [a] if a["status"]["state"] == "active" && ok(a) => Ok(a.clone()),
        _ => Err(format!("not one matching active alert: {alerts:?}")),
    }
}

/// No active `MCPServerDown` alert (for `until`).
async fn no_down_alert(port: u16) -> Result<(), String> {
    let alerts = am_alerts(port, "MCPServerDown").await?;
    if alerts.is_empty() {
        Ok(())
    } else {
        Err(format!("{alerts:?}"))
    }
}

/// The Alertmanager sink against a real Alertmanager: a target that goes down becomes one
/// firing alert with mcpulse's labels; reminders re-post it and it stays one alert (identical
/// labels fold), notified once; when the target recovers the alert is resolved, and the
/// receiver gets the resolve. The variant mcpulse sends already ended (MCPServerDegraded) is
/// never notified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_receives_dedups_and_resolves() {
    require(ALERTMANAGER, "prometheus-alertmanager");
    let dir = TempDir::new("alertmanager");
    let up = Arc::new(AtomicBool::new(true));
    let live = mcp_server(up.clone()).await;
    let hook = FakeHttp::start(|_| Reply::status(200)).await;

    let am_config = format!(
        "route:\n  receiver: mcpulse-test\n  group_by: [alertname, target]\n  group_wait: 1s\n  \
         group_interval: 1s\n  repeat_interval: 1h\n\
         receivers:\n  - name: mcpulse-test\n    webhook_configs:\n      - url: {}\n        \
         send_resolved: true\n",
        hook.url("/alerts")
    );
    let am_file = dir.join("alertmanager.yml");
    std::fs::write(&am_file, &am_config).unwrap();
    let am_port = free_port();
    let args = [
        format!("--config.file={}", am_file.display()),
        format!("--storage.path={}", dir.join("am-data").display()),
        format!("--web.listen-address=127.0.0.1:{am_port}"),
        "--cluster.listen-address=".to_owned(),
    ];
    let mut am = Proc::spawn("alertmanager", ALERTMANAGER, &args, &dir);
    ready(am_port, "/-/ready", &mut am).await;

    let config = format!(
        "[defaults]\ninterval = \"1s\"\ntimeout = \"500ms\"\nfailure_threshold = 1\n\
         success_threshold = 1\nsecurity = false\nreminder = \"2s\"\n\n\
         [[targets]]\nname = \"live\"\nurl = \"{}\"\nlabels = {{ team = \"search\" }}\n\n\
         [[alerts]]\nkind = \"alertmanager\"\nurl = \"http://127.0.0.1:{am_port}\"\n",
        live.url("/mcp")
    );
    let (mut mon, mon_port) = monitor("monitor", &dir, &config).await;
    // Healthy first (a new target becomes healthy quietly), then down.
    until("the monitor to see live healthy", &mut [&mut mon], || {
        healthy(mon_port, "live")
    })
    .await;
    up.store(false, Ordering::SeqCst);

    let first = until(
        "one firing MCPServerDown alert for live",
        &mut [&mut am, &mut mon],
        || the_down_alert(am_port, |_| true),
    )
    .await;
    let labels = first["labels"].as_object().unwrap();
    let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["alertname", "dedup_key", "severity", "target", "team"],
        "{first}"
    );
    assert_eq!(labels["alertname"], "MCPServerDown");
    assert_eq!(labels["target"], "live");
    assert_eq!(labels["severity"], "critical");
    assert_eq!(labels["team"], "search");
    let dedup = labels["dedup_key"].as_str().unwrap();
    assert!(
        dedup.len() == "mcpulse-".len() + 24
            && dedup.starts_with("mcpulse-")
            && dedup[8..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{dedup}"
    );
    assert!(
        first["annotations"]["summary"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{first}"
    );
    let ends = first["endsAt"].as_str().unwrap().to_owned();

    // A reminder re-posts the same alert: Alertmanager updates the one it has (its endsAt moves
    // on by the time between the posts) and still holds one.
    let again = until(
        "a reminder to re-post the alert (its endsAt moves)",
        &mut [&mut am, &mut mon],
        || the_down_alert(am_port, |a| a["endsAt"].as_str() != Some(ends.as_str())),
    )
    .await;
    assert_eq!(again["labels"], first["labels"]);
    assert_eq!(
        again["startsAt"], first["startsAt"],
        "the incident's start stays"
    );

    // A restart (a crash: SIGKILL) with the same config and history: the incident resumes, and
    // its next reminder comes from the new process with the same labels, the same dedup key and
    // the same start. Still one alert.
    let first_log = mon.log.clone();
    drop(mon);
    // What the first process posted last: any later change comes from the restarted one.
    let before = am_alerts(am_port, "MCPServerDown").await.unwrap();
    assert_eq!(before.len(), 1, "{before:?}");
    let ends = before[0]["endsAt"].as_str().unwrap().to_owned();
    let (mut restarted, _) = monitor("monitor-restarted", &dir, &config).await;
    let after_restart = until(
        "the restarted monitor to re-post the alert",
        &mut [&mut am, &mut restarted],
        || the_down_alert(am_port, |a| a["endsAt"].as_str() != Some(ends.as_str())),
    )
    .await;
    assert_eq!(after_restart["labels"], first["labels"]);
    assert_eq!(after_restart["startsAt"], first["startsAt"]);
    assert_eq!(
        am_alerts(am_port, "MCPServerDegraded").await.unwrap(),
        Vec::<Value>::new(),
        "the degraded variant is sent ended, so Alertmanager holds nothing active for it"
    );

    // The receiver was notified once for the incident, with one alert.
    let firing = until(
        "the webhook receiver to get the firing notification",
        &mut [&mut am, &mut restarted],
        || async {
            let n: Vec<Value> = notifications(&hook)
                .into_iter()
                .filter(|n| n["commonLabels"]["alertname"] == "MCPServerDown")
                .collect();
            if n.is_empty() {
                Err("nothing yet".into())
            } else {
                Ok(n)
            }
        },
    )
    .await;
    assert_eq!(firing.len(), 1, "one notification: {firing:?}");
    assert_eq!(firing[0]["status"], "firing");
    assert_eq!(
        firing[0]["alerts"].as_array().unwrap().len(),
        1,
        "{firing:?}"
    );
    assert_eq!(firing[0]["alerts"][0]["labels"], first["labels"]);

    // Recovery: the alert is resolved (gone from the active alerts) and the receiver told so.
    up.store(true, Ordering::SeqCst);
    until(
        "MCPServerDown for live to be resolved",
        &mut [&mut am, &mut restarted],
        || no_down_alert(am_port),
    )
    .await;
    let resolved = until(
        "the webhook receiver to get the resolved notification",
        &mut [&mut am, &mut restarted],
        || async {
            notifications(&hook)
                .into_iter()
                .find(|n| {
                    n["commonLabels"]["alertname"] == "MCPServerDown" && n["status"] == "resolved"
                })
                .ok_or_else(|| format!("{:?}", notifications(&hook)))
        },
    )
    .await;
    assert_eq!(
        resolved["alerts"].as_array().unwrap().len(),
        1,
        "{resolved}"
    );
    assert_eq!(resolved["alerts"][0]["labels"], first["labels"]);
    assert_eq!(resolved["alerts"][0]["status"], "resolved");

    let all = notifications(&hook);
    let down: Vec<&Value> = all
        .iter()
        .filter(|n| n["commonLabels"]["alertname"] == "MCPServerDown")
        .collect();
    assert_eq!(
        down.iter()
            .map(|n| n["status"].as_str().unwrap_or(""))
            .collect::<Vec<_>>(),
        ["firing", "resolved"],
        "one firing and one resolved notification for the incident, whatever the reminders: {all:?}"
    );
    assert!(
        all.iter()
            .all(|n| n["commonLabels"]["alertname"] != "MCPServerDegraded"),
        "an alert that was only ever sent ended is never notified: {all:?}"
    );
    for log in [&first_log, &restarted.log] {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(
            !text.contains("alert delivery failed") && !text.contains("alert not delivered"),
            "Alertmanager should take every post at the first attempt:\n{text}"
        );
    }
}

/// Alertmanager keeps alerts in memory only: one that restarts has lost them. The Alertmanager
/// sink re-sends the open incidents every `resend` (here 1 s, and no reminders), so the firing
/// alert comes back to the new process with the same labels and start; when the target's labels
/// change, the alert under the old label set ends and the incident fires under the new one; and
/// once the target recovers, the resolve closes it and no later re-send revives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_alertmanager_gets_the_open_alert_back_from_the_resend() {
    require(ALERTMANAGER, "prometheus-alertmanager");
    let dir = TempDir::new("alertmanager-restart");
    let up = Arc::new(AtomicBool::new(true));
    let live = mcp_server(up.clone()).await;
    let am_file = dir.join("alertmanager.yml");
    std::fs::write(
        &am_file,
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    )
    .unwrap();
    let am_port = free_port();
    let start_am = |name: &'static str, data: &str| {
        let args = [
            format!("--config.file={}", am_file.display()),
            format!("--storage.path={}", dir.join(data).display()),
            format!("--web.listen-address=127.0.0.1:{am_port}"),
            "--cluster.listen-address=".to_owned(),
        ];
        Proc::spawn(name, ALERTMANAGER, &args, &dir)
    };
    let mut am = start_am("alertmanager", "am-data-1");
    ready(am_port, "/-/ready", &mut am).await;

    let config = format!(
        "[defaults]\ninterval = \"1s\"\ntimeout = \"500ms\"\nfailure_threshold = 1\n\
         success_threshold = 1\nsecurity = false\n\n\
         [[targets]]\nname = \"live\"\nurl = \"{}\"\n\n\
         [[alerts]]\nkind = \"alertmanager\"\nurl = \"http://127.0.0.1:{am_port}\"\nresend = \"1s\"\n",
        live.url("/mcp")
    );
    let (mut mon, _) = monitor("monitor", &dir, &config).await;
    // Let the target be seen healthy, then take it down.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    up.store(false, Ordering::SeqCst);
    let first = until(
        "one firing MCPServerDown alert",
        &mut [&mut am, &mut mon],
        || the_down_alert(am_port, |_| true),
    )
    .await;

    // Alertmanager restarts with an empty memory (and a fresh data directory).
    drop(am);
    let mut am = start_am("alertmanager-restarted", "am-data-2");
    ready(am_port, "/-/ready", &mut am).await;
    let back = until(
        "the re-send to bring the alert back",
        &mut [&mut am, &mut mon],
        || the_down_alert(am_port, |_| true),
    )
    .await;
    assert_eq!(back["labels"], first["labels"]);
    assert_eq!(
        back["startsAt"], first["startsAt"],
        "the incident's start stays"
    );

    // The target's labels change (SIGHUP): Alertmanager knows an alert by its label set, so the
    // alert under the old set is ended and the incident fires on under the new one.
    let relabelled = config.replace(
        "name = \"live\"\n",
        "name = \"live\"\nlabels = { team = \"payments\" }\n",
    );
    assert_ne!(relabelled, config);
    std::fs::write(
        dir.join("mcpulse.toml"),
        format!(
            "[server]\ntoken = \"{TOKEN}\"\n\n[storage]\npath = \"{}\"\n\n{relabelled}",
            dir.join("mcpulse.db").display()
        ),
    )
    .unwrap();
    let pid = i32::try_from(mon.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid; no memory is touched.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(rc, 0);
    let moved = until(
        "the alert to move to the new label set",
        &mut [&mut am, &mut mon],
        || the_down_alert(am_port, |a| a["labels"]["team"] == "payments"),
    )
    .await;
    assert_eq!(moved["labels"]["dedup_key"], first["labels"]["dedup_key"]);

    // Recovery closes it, and the re-sends that follow do not revive it.
    up.store(true, Ordering::SeqCst);
    until(
        "MCPServerDown to be resolved",
        &mut [&mut am, &mut mon],
        || no_down_alert(am_port),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        am_alerts(am_port, "MCPServerDown").await.unwrap(),
        Vec::<Value>::new(),
        "three re-send periods later, still resolved"
    );
}
