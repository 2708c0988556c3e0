//! Scale-out on the real engines (docs/prometheus.md#scale-out), with the files under deploy/:
//! two `mcpulse monitor` instances serve `/probe`; four Prometheus servers (2 shards × 2
//! replicas, `hashmod`) probe through both; two Alertmanager peers gossip on loopback; one
//! webhook receiver (a loopback HTTP server here) records what they notify. And the daemon's
//! own HA: two monitor replicas with Alertmanager sinks to the same cluster.
//!
//! Prometheus 2.42 and Alertmanager 0.25 are Debian 12's packages (scripts/ci-packages.sh);
//! without them the tests fail, naming the script. Every process runs on a loopback port
//! chosen at run time and is killed when its test ends (`Proc`); every wait polls with a
//! deadline (`until`). The only fixed sleeps prove an absence: after the last notification
//! the test waits [`QUIET`], longer than the second Alertmanager peer's `--cluster.peer-timeout`
//! plus a `group_interval`, for a duplicate that must not come.
//!
//! The deploy files are used as shipped, with the `${…}` placeholders filled in ([`fill`]) and
//! only these documented changes ([`swap`]): the 30 s intervals become 1 s, `MCPServerDown`'s
//! `for: 5m` and `keep_firing_for: 2m` become 2 s, `group_wait: 30s`/`group_interval: 5m`
//! become 1 s/5 s, and the example target list becomes this test's four servers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/engines.rs"]
mod engines;

use engines::*;
use mcpulse_testkit::{FakeHttp, Reply, TempDir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the test waits for a notification that must not come (see the module doc).
const QUIET: Duration = Duration::from_secs(8);
/// The second Alertmanager peer's wait before it notifies what the first has not. It must stay
/// well below `group_interval` (5 s here): the waiting peer takes its snapshot of the alerts
/// before it waits, so with a wait longer than `group_interval` its flush from before a resolve
/// finds the first peer's resolved notification in the log and sends the alert as firing again
/// (seen with 2 s against 1 s). Deployments keep 15 s against 5 m. And it must be longer than
/// the gossip of the first peer's notification log takes, or the second notifies too: 2 s
/// leaves room on a loaded machine.
const PEER_TIMEOUT: &str = "2s";

/// A file under deploy/.
fn deploy(rel: &str) -> String {
    let path = format!("{}/../../deploy/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// `text` with every `${NAME}` of `vars` filled in, as `envsubst` with that variable list does;
/// fails if a variable is not in the text or a placeholder is left.
fn fill(text: &str, vars: &[(&str, String)]) -> String {
    let mut out = text.to_owned();
    for (name, value) in vars {
        let placeholder = format!("${{{name}}}");
        assert!(out.contains(&placeholder), "no {placeholder} in:\n{text}");
        out = out.replace(&placeholder, value);
    }
    // The header comment spells the variable list out; the config itself must have none left.
    let config: String = out
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert!(!config.contains("${"), "a placeholder is left:\n{out}");
    out
}

/// The alerting rules as shipped, with `MCPServerDown`'s durations shortened. Also checks that
/// docs/prometheus.md shows exactly this file.
fn rules() -> String {
    let rules = deploy("prometheus/rules.yml");
    assert_eq!(
        doc_block(&prometheus_doc(), "groups:\n"),
        rules,
        "docs/prometheus.md's alerting rules and deploy/prometheus/rules.yml differ"
    );
    let rules = swap(
        &rules,
        "for: 5m\n        keep_firing_for: 2m",
        "for: 2s\n        keep_firing_for: 2s",
    );
    assert!(
        rules.find("for: 2s").unwrap() < rules.find("alert: MCPServerDegraded").unwrap(),
        "the shortened durations must be MCPServerDown's"
    );
    rules
}

/// The four MCP servers' names, and the shard `hashmod` (md5 of the name, modulus 2) puts each
/// in (computed once with Python's hashlib: `int.from_bytes(md5(name)[8:], "big") % 2`).
const SERVERS: [(&str, usize); 4] = [("search", 1), ("files", 1), ("docs", 0), ("tickets", 0)];

/// An Alertmanager peer.
struct Peer {
    proc_: Proc,
    port: u16,
}

/// Starts two Alertmanager peers gossiping on loopback with deploy/alertmanager/alertmanager.yml,
/// notifying `webhook`, and waits until both are ready and see each other.
async fn alertmanager_cluster(dir: &TempDir, webhook: &str) -> Vec<Peer> {
    let config = fill(
        &deploy("alertmanager/alertmanager.yml"),
        &[("WEBHOOK_URL", webhook.to_owned())],
    );
    let config = swap(&config, "group_wait: 30s", "group_wait: 1s");
    let config = swap(&config, "group_interval: 5m", "group_interval: 5s");
    assert_eq!(
        doc_block(&prometheus_doc(), "route:\n"),
        deploy("alertmanager/alertmanager.yml"),
        "docs/prometheus.md shows deploy/alertmanager/alertmanager.yml"
    );
    let file = dir.join("alertmanager.yml");
    std::fs::write(&file, config).unwrap();
    let gossip = [free_port(), free_port()];
    let mut peers = Vec::new();
    for (i, name) in ["alertmanager-0", "alertmanager-1"].into_iter().enumerate() {
        let port = free_port();
        let args = [
            format!("--config.file={}", file.display()),
            format!(
                "--storage.path={}",
                dir.join(&format!("{name}-data")).display()
            ),
            format!("--web.listen-address=127.0.0.1:{port}"),
            format!("--cluster.listen-address=127.0.0.1:{}", gossip[i]),
            format!("--cluster.peer=127.0.0.1:{}", gossip[1 - i]),
            format!("--cluster.peer-timeout={PEER_TIMEOUT}"),
            // Gossip 4x as often as the default 200 ms: the peers settle (10 gossip intervals,
            // three times over) before they notify, in 2 s instead of 6 s.
            "--cluster.gossip-interval=50ms".to_owned(),
        ];
        let proc_ = Proc::spawn(name, ALERTMANAGER, &args, dir);
        peers.push(Peer { proc_, port });
    }
    for p in &mut peers {
        ready(p.port, "/-/ready", &mut p.proc_).await;
    }
    for i in 0..2 {
        let port = peers[i].port;
        let mut procs: Vec<&mut Proc> = peers.iter_mut().map(|p| &mut p.proc_).collect();
        until("the Alertmanager cluster to form", &mut procs, || async {
            let s = status(port).await?;
            let n = s["cluster"]["peers"].as_array().map_or(0, Vec::len);
            if s["cluster"]["status"] == "ready" && n == 2 {
                Ok(())
            } else {
                Err(format!("{}", s["cluster"]))
            }
        })
        .await;
    }
    peers
}

/// An Alertmanager's `/api/v2/status`.
async fn status(port: u16) -> Result<Value, String> {
    let (code, body) = get(port, "/api/v2/status").await.ok_or("no answer")?;
    if code != 200 {
        return Err(format!("HTTP {code}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
}

/// The index of the peer that notifies first: Alertmanager orders the peers by name, and the
/// one at position 0 does not wait.
async fn first_peer(peers: &[Peer]) -> usize {
    let mut names = Vec::new();
    for p in peers {
        let s = status(p.port).await.unwrap();
        names.push(s["cluster"]["name"].as_str().unwrap().to_owned());
    }
    (0..names.len()).min_by_key(|&i| names[i].clone()).unwrap()
}

/// The statuses (`firing`, `resolved`) of the notifications the receiver got for `alertname`
/// with `label` = `value`, in order, each with one alert.
fn notified(hook: &FakeHttp, alertname: &str, label: &str, value: &str) -> Vec<String> {
    notifications(hook)
        .iter()
        .filter(|n| {
            n["commonLabels"]["alertname"] == alertname && n["commonLabels"][label] == value
        })
        .map(|n| {
            // One alert per notification: two would be the replicas' or the probers' copies
            // that should have been one label set.
            let alerts = n["alerts"].as_array().map_or(0, Vec::len);
            let status = n["status"].as_str().unwrap_or("");
            if alerts == 1 {
                status.to_owned()
            } else {
                format!("{status} with {alerts} alerts")
            }
        })
        .collect()
}

/// Waits until the receiver's notifications for the alert are `want` (failing at once on any
/// other list as long), then, if `quiet`, for [`QUIET`], and checks that nothing more came.
async fn notified_exactly(
    hook: &FakeHttp,
    (alertname, label, value): (&str, &str, &str),
    want: &[&str],
    quiet: bool,
    procs: &mut [&mut Proc],
) {
    let what = format!("notifications {want:?} for {alertname} {label}={value}");
    until(&what, procs, || async {
        let got = notified(hook, alertname, label, value);
        if got == want {
            Ok(())
        } else if got.len() >= want.len() {
            panic!("{what}: got {got:?}: {:?}", notifications(hook));
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    if !quiet {
        return;
    }
    tokio::time::sleep(QUIET).await;
    let got = notified(hook, alertname, label, value);
    assert_eq!(got, want, "{what}, and no more: {:?}", notifications(hook));
}

/// A Prometheus server of the scale-out, and the shard it runs.
struct Prom {
    proc_: Proc,
    port: u16,
    shard: usize,
}

/// The active scrape targets of a Prometheus as (instance, prober, monitor port), once all
/// are up.
async fn scraped(port: u16) -> Result<BTreeSet<(String, String, u16)>, String> {
    let (_, body) = get(port, "/api/v1/targets?state=active")
        .await
        .ok_or("no answer")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let mut seen = BTreeSet::new();
    for t in v["data"]["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        if t["health"] != "up" {
            return Err(format!("not up yet: {t}"));
        }
        let url = t["scrapeUrl"].as_str().unwrap_or("");
        let port = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|r| r.split('/').next())
            .and_then(|p| p.parse().ok())
            .ok_or(format!("scrape URL {url}"))?;
        seen.insert((
            t["labels"]["instance"].as_str().unwrap_or("").to_owned(),
            t["labels"]["prober"].as_str().unwrap_or("").to_owned(),
            port,
        ));
    }
    Ok(seen)
}

/// Takes `server` down, waits for one firing notification, brings the server back and waits
/// for one resolve, and that nothing more comes (a duplicate firing would come before the
/// resolve and fail the wait for it).
async fn incident(hook: &FakeHttp, server: &str, up: &Arc<AtomicBool>, procs: &mut [&mut Proc]) {
    let alert = ("MCPServerDown", "instance", server);
    up.store(false, Ordering::SeqCst);
    notified_exactly(hook, alert, &["firing"], false, procs).await;
    up.store(true, Ordering::SeqCst);
    notified_exactly(hook, alert, &["firing", "resolved"], true, procs).await;
}

/// The whole scale-out: sharding, replicas, one notification per incident, and no alert lost
/// when a monitor or the notifying Alertmanager peer is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_ha_prometheus_and_alertmanager_cluster_notify_once() {
    require(PROMETHEUS, "prometheus");
    require(ALERTMANAGER, "prometheus-alertmanager");
    let started = Instant::now();
    let mut marks: Vec<(&str, Duration)> = Vec::new();
    let dir = TempDir::new("scaleout");

    // The MCP servers, each with a switch.
    let mut ups = BTreeMap::new();
    let mut servers = Vec::new();
    let mut targets = String::new();
    for (name, _) in SERVERS {
        let up = Arc::new(AtomicBool::new(true));
        let server = mcp_server(up.clone()).await;
        targets.push_str(&format!(
            "[[targets]]\nname = \"{name}\"\nurl = \"{}\"\n\n",
            server.url("/mcp")
        ));
        ups.insert(name, up);
        servers.push(server);
    }
    // Two monitors on one config (each its own history file). Their own schedule is slow: the
    // probing here is Prometheus' /probe.
    let config = format!(
        "[defaults]\ninterval = \"1h\"\ntimeout = \"500ms\"\nsecurity = false\n\n{targets}"
    );
    let mon_dirs = [
        TempDir::new("scaleout-mcpulse-0"),
        TempDir::new("scaleout-mcpulse-1"),
    ];
    let (mon0, port0) = monitor("mcpulse-0", &mon_dirs[0], &config).await;
    let (mon1, port1) = monitor("mcpulse-1", &mon_dirs[1], &config).await;
    let mut monitors = vec![mon0, mon1];
    let mon_ports = [port0, port1];

    let hook = FakeHttp::start(|_| Reply::status(200)).await;
    let mut peers = alertmanager_cluster(&dir, &hook.url("/alerts")).await;
    marks.push(("monitors and Alertmanager cluster up", started.elapsed()));

    // Four Prometheus servers: shards 0 and 1, replicas a and b.
    let token_file = dir.join("mcpulse.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let rules_file = dir.join("rules.yml");
    std::fs::write(&rules_file, rules()).unwrap();
    let shipped = deploy("prometheus/prometheus-shard.yml");
    assert_eq!(
        doc_block(&prometheus_doc(), "regex: \"${SHARD}\""),
        shipped,
        "docs/prometheus.md shows deploy/prometheus/prometheus-shard.yml"
    );
    let mut shard_config = shipped;
    for (from, to) in [
        ("scrape_interval: 30s", "scrape_interval: 1s"),
        ("scrape_timeout: 15s", "scrape_timeout: 1s"),
        ("evaluation_interval: 30s", "evaluation_interval: 1s"),
        (
            "          - search\n          - files\n          - https://mcp.example.com/mcp\n",
            "          - search\n          - files\n          - docs\n          - tickets\n",
        ),
    ] {
        shard_config = swap(&shard_config, from, to);
    }
    let mut proms = Vec::new();
    for (shard, replica) in [(0, "a"), (0, "b"), (1, "a"), (1, "b")] {
        let name: &'static str = [
            "prometheus-0a",
            "prometheus-0b",
            "prometheus-1a",
            "prometheus-1b",
        ][shard * 2 + usize::from(replica == "b")];
        let config = fill(
            &shard_config,
            &[
                ("SHARD", shard.to_string()),
                ("REPLICA", replica.to_owned()),
                ("MCPULSE_0", format!("127.0.0.1:{}", mon_ports[0])),
                ("MCPULSE_1", format!("127.0.0.1:{}", mon_ports[1])),
                ("ALERTMANAGER_0", format!("127.0.0.1:{}", peers[0].port)),
                ("ALERTMANAGER_1", format!("127.0.0.1:{}", peers[1].port)),
                ("RULES", rules_file.display().to_string()),
                ("TOKEN_FILE", token_file.display().to_string()),
            ],
        );
        let file = dir.join(&format!("{name}.yml"));
        std::fs::write(&file, config).unwrap();
        let port = free_port();
        let args = [
            format!("--config.file={}", file.display()),
            format!(
                "--storage.tsdb.path={}",
                dir.join(&format!("{name}-tsdb")).display()
            ),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        let proc_ = Proc::spawn(name, PROMETHEUS, &args, &dir);
        proms.push(Prom { proc_, port, shard });
    }
    for p in &mut proms {
        ready(p.port, "/-/ready", &mut p.proc_).await;
    }

    // Every server is probed by exactly its shard (both replicas), through both monitors.
    let mut split = [BTreeSet::new(), BTreeSet::new()];
    for i in 0..proms.len() {
        let (port, shard) = (proms[i].port, proms[i].shard);
        let want: BTreeSet<(String, String, u16)> = SERVERS
            .iter()
            .filter(|(_, s)| *s == shard)
            .flat_map(|(name, _)| {
                [("0", mon_ports[0]), ("1", mon_ports[1])]
                    .map(|(prober, port)| ((*name).to_owned(), prober.to_owned(), port))
            })
            .collect();
        let mut procs: Vec<&mut Proc> = proms.iter_mut().map(|p| &mut p.proc_).collect();
        procs.extend(monitors.iter_mut());
        let seen = until(
            &format!("prometheus {i} to scrape its shard's servers, all up"),
            &mut procs,
            || async {
                let seen = scraped(port).await?;
                if seen == want {
                    Ok(seen)
                } else {
                    Err(format!("{seen:?}, want {want:?}"))
                }
            },
        )
        .await;
        split[shard].extend(seen.into_iter().map(|(name, _, _)| name));
    }
    marks.push(("Prometheus up, shards checked", started.elapsed()));
    assert!(
        split[0].is_disjoint(&split[1]) && split.iter().all(|s| s.len() == 2),
        "{split:?}"
    );

    let mut all: Vec<&mut Proc> = proms.iter_mut().map(|p| &mut p.proc_).collect();
    all.extend(peers.iter_mut().map(|p| &mut p.proc_));
    all.extend(monitors.iter_mut());

    // 1. Everything up: one incident, two replicas and two peers saw it, one notification each
    //    way.
    incident(&hook, "docs", &ups["docs"], &mut all).await;
    drop(all);
    marks.push(("incident 1 (all up)", started.elapsed()));

    // 2. A monitor dies while an alert fires: the other prober carries the same series, so the
    //    alert neither resolves nor fires again, and its resolve still comes once.
    let alert = ("MCPServerDown", "instance", "search");
    ups["search"].store(false, Ordering::SeqCst);
    {
        let mut all: Vec<&mut Proc> = proms.iter_mut().map(|p| &mut p.proc_).collect();
        all.extend(peers.iter_mut().map(|p| &mut p.proc_));
        all.extend(monitors.iter_mut());
        notified_exactly(&hook, alert, &["firing"], false, &mut all).await;
    }
    drop(monitors.remove(0)); // SIGKILL
    let shard1 = proms[2].port;
    // The alert names the dead monitor by address (label `monitor`, relabelled from the
    // scrape address in prometheus-shard.yml).
    let monitor_0 = format!("127.0.0.1:{}", mon_ports[0]);
    let mut all: Vec<&mut Proc> = proms.iter_mut().map(|p| &mut p.proc_).collect();
    all.extend(peers.iter_mut().map(|p| &mut p.proc_));
    all.extend(monitors.iter_mut());
    until("prober 0 to be seen down", &mut all, || async {
        let down = query(shard1, "up{job=\"mcp\",prober=\"0\"} == 0").await?;
        if down.len() == 2 {
            Ok(())
        } else {
            Err(format!("{down:?}"))
        }
    })
    .await;
    // Held past the rule's keep_firing_for (2 s) and a group_interval with prober 0 gone: still
    // just the one firing, no resolve.
    notified_exactly(&hook, alert, &["firing"], true, &mut all).await;
    until(
        "MCPulseProberDown to be pending for prober 0",
        &mut all,
        || async {
            let a = query(shard1, "ALERTS{alertname=\"MCPulseProberDown\"}").await?;
            match a.as_slice() {
                [x] if x["metric"]["prober"] == "0"
                    && x["metric"]["monitor"] == monitor_0.as_str()
                    && x["metric"]["alertstate"] == "pending" =>
                {
                    Ok(())
                }
                _ => Err(format!("{a:?}")),
            }
        },
    )
    .await;
    ups["search"].store(true, Ordering::SeqCst);
    notified_exactly(&hook, alert, &["firing", "resolved"], true, &mut all).await;
    drop(all);
    marks.push(("incident 2 (a monitor killed)", started.elapsed()));

    // 3. The Alertmanager peer that notifies first dies: the other one notifies, once, after
    //    its peer timeout.
    let first = first_peer(&peers).await;
    drop(peers.remove(first)); // SIGKILL
    let mut all: Vec<&mut Proc> = proms.iter_mut().map(|p| &mut p.proc_).collect();
    all.extend(peers.iter_mut().map(|p| &mut p.proc_));
    all.extend(monitors.iter_mut());
    incident(&hook, "tickets", &ups["tickets"], &mut all).await;

    // Nothing else was notified: every notification is one of the three incidents.
    let other: Vec<Value> = notifications(&hook)
        .into_iter()
        .filter(|n| n["commonLabels"]["alertname"] != "MCPServerDown")
        .collect();
    assert!(other.is_empty(), "{other:?}");
    marks.push((
        "incident 3 (an Alertmanager peer killed)",
        started.elapsed(),
    ));
    eprintln!("scale-out timings (since start): {marks:?}");
}

/// The webhook bodies `hook` got, as (action, dedup_key).
fn webhook_posts(hook: &FakeHttp) -> Vec<(String, String)> {
    notifications(hook)
        .iter()
        .map(|b| {
            (
                b["action"].as_str().unwrap_or("").to_owned(),
                b["dedup_key"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The daemon's own HA: two `mcpulse monitor` replicas on one config (each its own history
/// file), each with an Alertmanager sink to both peers. Both see the target go down and both
/// post, but their label sets are identical (deterministic `dedup_key`, no replica label, no
/// time in a label), so Alertmanager holds one alert and the receiver gets one firing and one
/// resolved notification. A webhook sink in the same config, for contrast, gets each replica's
/// trigger and resolve: two of each, with the same `dedup_key` for the receiver to fold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_replicas_notify_once_through_the_alertmanager_cluster() {
    require(ALERTMANAGER, "prometheus-alertmanager");
    let started = Instant::now();
    let dir = TempDir::new("monitor-ha");
    let up = Arc::new(AtomicBool::new(true));
    let server = mcp_server(up.clone()).await;
    let hook = FakeHttp::start(|_| Reply::status(200)).await;
    let direct = FakeHttp::start(|_| Reply::status(200)).await;
    let mut peers = alertmanager_cluster(&dir, &hook.url("/alerts")).await;
    let config = format!(
        "[defaults]\ninterval = \"1s\"\ntimeout = \"500ms\"\nfailure_threshold = 1\n\
         success_threshold = 1\nsecurity = false\n\n\
         [[targets]]\nname = \"search\"\nurl = \"{}\"\nlabels = {{ team = \"search\" }}\n\n\
         [[alerts]]\nkind = \"alertmanager\"\nurl = \"http://127.0.0.1:{}\"\n\n\
         [[alerts]]\nkind = \"alertmanager\"\nurl = \"http://127.0.0.1:{}\"\n\n\
         [[alerts]]\nkind = \"webhook\"\nurl = \"{}\"\n",
        server.url("/mcp"),
        peers[0].port,
        peers[1].port,
        direct.url("/hook")
    );
    let mon_dirs = [TempDir::new("monitor-ha-0"), TempDir::new("monitor-ha-1")];
    let (mon0, port0) = monitor("mcpulse-0", &mon_dirs[0], &config).await;
    let (mon1, port1) = monitor("mcpulse-1", &mon_dirs[1], &config).await;
    let mut monitors = [mon0, mon1];
    let peer_ports = [peers[0].port, peers[1].port];
    let mut all: Vec<&mut Proc> = peers.iter_mut().map(|p| &mut p.proc_).collect();
    all.extend(monitors.iter_mut());

    // Both replicas see the target healthy first (a new target becomes healthy quietly).
    for port in [port0, port1] {
        until("both replicas to see search healthy", &mut all, || {
            healthy(port, "search")
        })
        .await;
    }

    let alert = ("MCPServerDown", "target", "search");
    up.store(false, Ordering::SeqCst);
    notified_exactly(&hook, alert, &["firing"], false, &mut all).await;
    // Both replicas posted to both peers (their webhook triggers show they raised it), and each
    // peer holds one alert.
    until("both replicas to raise the alert", &mut all, || async {
        let triggers = webhook_posts(&direct)
            .into_iter()
            .filter(|(action, _)| action == "trigger")
            .count();
        if triggers == 2 {
            Ok(())
        } else {
            Err(format!("{triggers} triggers"))
        }
    })
    .await;
    let filter = encode("alertname=\"MCPServerDown\"");
    let mut label_sets = Vec::new();
    for port in peer_ports {
        let (_, body) = get(port, &format!("/api/v2/alerts?filter={filter}"))
            .await
            .unwrap();
        let alerts: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(
            alerts.len(),
            1,
            "one alert for the two replicas' posts: {alerts:?}"
        );
        label_sets.push(alerts[0]["labels"].clone());
    }
    assert_eq!(label_sets[0], label_sets[1]);
    let keys: Vec<&str> = label_sets[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["alertname", "dedup_key", "severity", "target", "team"]
    );

    up.store(true, Ordering::SeqCst);
    notified_exactly(&hook, alert, &["firing", "resolved"], true, &mut all).await;

    // The webhook sink has no one to fold the replicas' copies: two triggers, two resolves,
    // one dedup_key.
    let posts = webhook_posts(&direct);
    let mut actions: Vec<&str> = posts.iter().map(|(a, _)| a.as_str()).collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        ["resolve", "resolve", "trigger", "trigger"],
        "{posts:?}"
    );
    let keys: BTreeSet<&str> = posts.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(keys.len(), 1, "{posts:?}");
    assert_eq!(
        Some(&Value::from(*keys.first().unwrap())),
        label_sets[0].get("dedup_key")
    );
    eprintln!("monitor HA: {:?}", started.elapsed());
}
