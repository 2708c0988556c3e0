//! The history store on real SQLite files: schema and migrations, persistence across reopen,
//! the outbox, history pages, statistics, retention, and the files it must refuse.
//! (Crashes are in `store_crash.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_monitor::alert::{Action, Alert, Incident, Incidents, Kind, dedup_key};
use mcpulse_monitor::check::{CallSample, CheckRecord};
use mcpulse_monitor::sink::SinkId;
use mcpulse_monitor::state::{Event, Health, Observation, TargetState};
use mcpulse_monitor::store::{PruneFrom, SCHEMA_VERSION, Store, StoreError};
use rusqlite::Connection;
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A directory of its own under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("mcpulse-store-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn db(&self) -> PathBuf {
        self.0.join("history.sqlite3")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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
        contract_digest: Some("sha256:abc".into()),
        drift: None,
        drift_changes: Vec::new(),
        drift_changes_more: 0,
        summary: "ok".into(),
        components: BTreeMap::new(),
        by_components: false,
        server_answered: false,
        security: Vec::new(),
    }
}

fn state(status: Health, at_ms: i64) -> TargetState {
    TargetState {
        status,
        since_ms: at_ms,
        streak: Some((Health::Down, 1)),
        transitions: VecDeque::from([at_ms - 1000, at_ms]),
        flapping: false,
        last: Some(obs(status, at_ms)),
        last_up: None,
        components: BTreeMap::new(),
        unexplained: 0,
    }
}

fn alert(target: &str, action: Action, kind: Kind, family: &str, at_ms: i64) -> Alert {
    Alert {
        dedup_key: dedup_key(target, family),
        action,
        kind,
        target: target.into(),
        severity: "critical".into(),
        summary: format!("{target} {action:?} at {at_ms}"),
        at_ms,
        started_ms: at_ms,
        labels: BTreeMap::from([("team".into(), "search".into())]),
        removed: false,
    }
}

/// The identities of `n` sinks: `s0`, `s1`, ….
fn sinks(n: usize) -> Vec<SinkId> {
    (0..n).map(|i| SinkId::new(format!("s{i}"))).collect()
}

fn incidents(target: &str, at_ms: i64) -> Incidents {
    BTreeMap::from([(
        "status".into(),
        Incident {
            dedup_key: dedup_key(target, "status"),
            family: "status".into(),
            kind: Kind::Down,
            severity: "critical".into(),
            summary: format!("{target} is down"),
            opened_ms: at_ms,
            notified_ms: at_ms,
        },
    )])
}

/// A plain check: no events, no alerts.
fn check(target: &str, at_ms: i64, status: Health, duration_ms: f64) -> CheckRecord {
    CheckRecord {
        target: target.into(),
        at_ms,
        status,
        duration_ms,
        timings: json!({"connect": 1.5, "initialize": duration_ms / 2.0, "total": duration_ms}),
        findings: json!([{"code": "MCP101", "severity": "warning", "message": "slow"}]),
        grade: Some("B".into()),
        observation: obs(status, at_ms),
        state: state(status, at_ms),
        incidents: Incidents::new(),
        events: Vec::new(),
        alerts: Vec::new(),
        contract: None,
        calls: Vec::new(),
    }
}

/// A check that confirms `target` down: a transition, an open incident and a trigger.
fn down(target: &str, at_ms: i64) -> CheckRecord {
    let mut r = check(target, at_ms, Health::Down, 10_000.0);
    r.events = vec![Event::Transition {
        from: Health::Healthy,
        to: Health::Down,
        at_ms,
        quiet: false,
        reason: "connect refused".into(),
    }];
    r.incidents = incidents(target, at_ms);
    r.alerts = vec![alert(target, Action::Trigger, Kind::Down, "status", at_ms)];
    r
}

/// A check that recovers `target`: a transition and a resolve.
fn recovered(target: &str, at_ms: i64) -> CheckRecord {
    let mut r = check(target, at_ms, Health::Healthy, 40.0);
    r.events = vec![Event::Transition {
        from: Health::Down,
        to: Health::Healthy,
        at_ms,
        quiet: false,
        reason: String::new(),
    }];
    r.alerts = vec![alert(
        target,
        Action::Resolve,
        Kind::Recovered,
        "status",
        at_ms,
    )];
    r
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn count(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn a_new_file_gets_the_whole_schema_in_wal_mode() {
    let dir = TempDir::new("new");
    let path = dir.0.join("not/yet/there/history.sqlite3");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.path(), path.display().to_string());
    drop(store);
    assert!(path.exists());
    let c = raw(&path);
    let version: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let app: i64 = c
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_eq!(app, 0x4d43_504c);
    let mode: String = c
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let mut names: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    names.sort();
    assert_eq!(
        names,
        [
            "calls",
            "calls_by_target_time",
            "checks",
            "checks_by_target_time",
            "events",
            "events_by_target_time",
            "outbox",
            "outbox_due",
            "outbox_pending",
            "targets",
            "uptime_hourly"
        ]
    );
    // Opening again finds it up to date and changes nothing.
    drop(c);
    drop(Store::open(&path).unwrap());
}

#[test]
fn an_empty_file_is_a_new_database() {
    let dir = TempDir::new("empty");
    std::fs::write(dir.db(), b"").unwrap();
    let mut store = Store::open(&dir.db()).unwrap();
    store
        .record(&[check("a", 1, Health::Healthy, 5.0)], &sinks(1))
        .unwrap();
}

#[test]
fn everything_survives_a_reopen() {
    let dir = TempDir::new("reopen");
    let path = dir.db();
    let mut store = Store::open(&path).unwrap();
    let mut with_contract = check("search", 60_000, Health::Healthy, 30.0);
    with_contract.contract = Some(r#"{"tools":["find"]}"#.into());
    store
        .record(
            &[
                check("search", 0, Health::Healthy, 20.0),
                with_contract,
                down("files", 60_000),
            ],
            &sinks(2),
        )
        .unwrap();
    store.set_accepted_contract("files", "{}", 70_000).unwrap();
    let due = store.due_alerts(60_000, 10).unwrap();
    assert_eq!(due.len(), 2);
    store.mark_delivered(due[0].id, 61_000).unwrap();
    store.mark_failed(due[1].id, "503", 90_000).unwrap();

    let before = (
        store.load_states().unwrap(),
        store.history("search", None, 10).unwrap(),
        store.history("files", None, 10).unwrap(),
        store.transitions("files", 10).unwrap(),
        store.stats("search", 100_000).unwrap(),
    );
    drop(store);

    let store = Store::open(&path).unwrap();
    let after = (
        store.load_states().unwrap(),
        store.history("search", None, 10).unwrap(),
        store.history("files", None, 10).unwrap(),
        store.transitions("files", 10).unwrap(),
        store.stats("search", 100_000).unwrap(),
    );
    assert_eq!(before, after);
    assert_eq!(after.1.len(), 2);
    assert_eq!(
        store.accepted_contract("search").unwrap().as_deref(),
        Some(r#"{"tools":["find"]}"#)
    );
    assert_eq!(
        store.accepted_contract("files").unwrap().as_deref(),
        Some("{}")
    );
    assert_eq!(store.accepted_contract("nobody").unwrap(), None);
    // The delivered alert is gone from the queue; the failed one is back at its new time.
    assert!(store.due_alerts(89_999, 10).unwrap().is_empty());
    let again = store.due_alerts(90_000, 10).unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempts), (due[1].id, 1));
}

#[test]
fn load_states_round_trips_the_last_state_of_each_target() {
    let mut store = Store::open_in_memory().unwrap();
    assert!(store.load_states().unwrap().is_empty());
    let first = down("a", 1_000);
    let mut second = check("a", 2_000, Health::Down, 9_000.0);
    second.state.streak = None;
    second.state.flapping = true;
    second.incidents = incidents("a", 1_000);
    let b = check("b", 1_500, Health::Healthy, 12.0);
    store
        .record(&[first, second.clone(), b.clone()], &sinks(1))
        .unwrap();

    let states = store.load_states().unwrap();
    assert_eq!(states.len(), 2);
    assert_eq!(states["a"], (second.state, second.incidents));
    assert_eq!(states["b"], (b.state, Incidents::new()));

    // A later batch replaces it; an incident closed is gone.
    let r = recovered("a", 3_000);
    store.record(std::slice::from_ref(&r), &sinks(1)).unwrap();
    assert_eq!(
        store.load_states().unwrap()["a"],
        (r.state, Incidents::new())
    );
    // A contract alone does not make a target with a state to resume.
    store.set_accepted_contract("c", "{}", 1).unwrap();
    assert_eq!(store.load_states().unwrap().len(), 2);
}

#[test]
fn the_outbox_hands_out_due_alerts_in_order_and_keeps_retries() {
    let mut store = Store::open_in_memory().unwrap();
    // Three sinks: one row per alert per sink.
    store
        .record(&[down("a", 1_000), down("b", 2_000)], &sinks(3))
        .unwrap();
    assert!(store.due_alerts(999, 100).unwrap().is_empty());
    let due = store.due_alerts(1_000, 100).unwrap();
    assert_eq!(due.len(), 3);
    assert_eq!(
        due.iter().map(|i| i.sink.as_str()).collect::<Vec<_>>(),
        ["s0", "s1", "s2"]
    );
    assert!(due.iter().all(|i| i.alert.target == "a" && i.attempts == 0));
    let due = store.due_alerts(5_000, 100).unwrap();
    assert_eq!(due.len(), 6);
    assert!(due.windows(2).all(|w| w[0].id < w[1].id), "oldest first");
    assert_eq!(store.due_alerts(5_000, 4).unwrap().len(), 4);

    // Sink 0 fails for a's trigger: it comes back after the backoff, counted.
    let a0 = due[0].id;
    store.mark_failed(a0, "connection refused", 11_000).unwrap();
    store.mark_failed(a0, "connection refused", 31_000).unwrap();
    for id in due.iter().skip(1).map(|i| i.id) {
        store.mark_delivered(id, 5_000).unwrap();
    }
    assert!(store.due_alerts(30_999, 100).unwrap().is_empty());

    // a recovers meanwhile: its resolve for sink 0 waits behind the trigger being retried,
    // the other sinks get it at once.
    store.record(&[recovered("a", 20_000)], &sinks(3)).unwrap();
    let due = store.due_alerts(20_000, 100).unwrap();
    assert_eq!(
        due.iter()
            .map(|i| (i.sink.as_str(), i.alert.action))
            .collect::<Vec<_>>(),
        [("s1", Action::Resolve), ("s2", Action::Resolve)]
    );
    let due = store.due_alerts(31_000, 100).unwrap();
    assert_eq!(due[0].id, a0);
    assert_eq!(due[0].attempts, 2);
    assert_eq!(due[0].alert.action, Action::Trigger);
    assert!(
        !due.iter()
            .any(|i| i.sink.as_str() == "s0" && i.alert.action == Action::Resolve)
    );
    // Once the trigger is given up (or delivered), the resolve follows.
    store
        .give_up(a0, "gave up after 2 attempts", 31_000)
        .unwrap();
    let due = store.due_alerts(31_000, 100).unwrap();
    assert!(
        due.iter()
            .any(|i| i.sink.as_str() == "s0" && i.alert.action == Action::Resolve)
    );

    // A permanent failure (never retry) gives up too, instead of parking the row forever in
    // front of its incident's later alerts; it keeps its error and counts the attempt.
    store.record(&[down("d", 60_000)], &sinks(1)).unwrap();
    let d = store.due_alerts(60_000, 100).unwrap();
    let d = d.iter().find(|i| i.alert.target == "d").unwrap().id;
    store.mark_failed(d, "400 bad request", i64::MAX).unwrap();
    store.record(&[recovered("d", 70_000)], &sinks(1)).unwrap();
    let due = store.due_alerts(i64::MAX, 100).unwrap();
    assert!(!due.iter().any(|i| i.id == d));
    assert!(
        due.iter()
            .any(|i| i.alert.target == "d" && i.alert.action == Action::Resolve)
    );

    // Marking a settled or unknown row is harmless.
    store.mark_delivered(a0, 40_000).unwrap();
    store.mark_failed(a0, "late", 50_000).unwrap();
    store.mark_delivered(987_654, 1).unwrap();
    assert!(
        !store
            .due_alerts(i64::MAX, 100)
            .unwrap()
            .iter()
            .any(|i| i.id == a0)
    );

    // No sinks: nothing is queued.
    store.record(&[down("c", 50_000)], &sinks(0)).unwrap();
    assert!(
        !store
            .due_alerts(i64::MAX, 100)
            .unwrap()
            .iter()
            .any(|i| i.alert.target == "c")
    );
}

#[test]
fn history_pages_newest_first_without_gaps_or_repeats() {
    let mut store = Store::open_in_memory().unwrap();
    let mut batch: Vec<CheckRecord> = (0..25)
        .map(|i| check("a", i * 60_000, Health::Healthy, i as f64))
        .collect();
    // Two checks at the same millisecond, and one recorded late (an older time, a newer id).
    batch.push(check("a", 10 * 60_000, Health::Degraded, 100.0));
    batch.insert(0, check("a", 30 * 60_000, Health::Healthy, 200.0));
    batch.push(check("other", 5, Health::Down, 1.0));
    store.record(&batch, &sinks(1)).unwrap();

    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.history("a", cursor, 10).unwrap();
        if page.is_empty() {
            break;
        }
        pages += 1;
        cursor = page.last().map(|r| r.id);
        seen.extend(page);
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 27);
    assert!(
        seen.windows(2)
            .all(|w| (w[0].at_ms, w[0].id) > (w[1].at_ms, w[1].id)),
        "strictly newest first"
    );
    assert_eq!(seen[0].duration_ms, 200.0);
    let first = &seen[0];
    assert_eq!(first.status, Health::Healthy);
    assert_eq!(first.grade.as_deref(), Some("B"));
    assert_eq!(first.timings["total"], json!(200.0));
    assert_eq!(first.findings[0]["code"], json!("MCP101"));

    assert!(store.history("nobody", None, 10).unwrap().is_empty());
    assert!(store.history("a", Some(999_999), 10).unwrap().is_empty());
    assert!(store.history("a", None, 0).unwrap().is_empty());
}

#[test]
fn a_history_cursor_that_is_gone_is_told_apart_from_the_end() {
    let mut store = Store::open_in_memory().unwrap();
    let batch: Vec<CheckRecord> = (0..6)
        .map(|i| check("a", i * 60_000, Health::Healthy, i as f64))
        .chain([check("b", 5, Health::Down, 1.0)])
        .collect();
    store.record(&batch, &sinks(1)).unwrap();
    let all = store.history_page("a", None, 10).unwrap().unwrap();
    assert_eq!(all.len(), 6);
    let oldest = all[5].id;
    let b = store.history("b", None, 1).unwrap()[0].id;

    // The oldest check is a cursor with nothing after it: an empty page, the real end.
    assert_eq!(
        store.history_page("a", Some(oldest), 10).unwrap(),
        Some(vec![])
    );
    // Another target's check, or an id no check has: no page can be placed.
    assert_eq!(store.history_page("a", Some(b), 10).unwrap(), None);
    assert_eq!(store.history_page("a", Some(999_999), 10).unwrap(), None);
    assert_eq!(
        store.history_page("nobody", Some(oldest), 10).unwrap(),
        None
    );

    // Pruned: the cursor's row is gone (and the older ones with it).
    let third = all[2].id;
    assert_eq!(store.prune(4 * 60_000).unwrap(), 5, "four of a, one of b");
    assert_eq!(store.history_page("a", Some(third), 10).unwrap(), None);
    let newest = all[0].id;
    assert_eq!(
        store
            .history_page("a", Some(newest), 10)
            .unwrap()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn transitions_are_listed_newest_first() {
    let mut store = Store::open_in_memory().unwrap();
    store.record(&[down("a", 1_000)], &sinks(1)).unwrap();
    let mut flap = recovered("a", 2_000);
    flap.events.push(Event::FlappingStarted {
        at_ms: 2_000,
        transitions: 5,
    });
    store.record(&[flap], &sinks(1)).unwrap();
    let t = store.transitions("a", 10).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t[0]["event"], json!("flapping_started"));
    assert_eq!(t[1]["event"], json!("transition"));
    assert_eq!(t[1]["to"], json!("healthy"));
    assert_eq!(t[2]["to"], json!("down"));
    assert_eq!(store.transitions("a", 1).unwrap().len(), 1);
    assert!(store.transitions("b", 10).unwrap().is_empty());
    // It is the serde form of the event.
    let back: Event = serde_json::from_value(t[2].clone()).unwrap();
    assert!(matches!(back, Event::Transition { at_ms: 1_000, .. }));
}

#[test]
fn stats_over_30_days_of_minutely_checks() {
    let dir = TempDir::new("stats");
    let mut store = Store::open(&dir.db()).unwrap();
    let now: i64 = 40 * 86_400_000;
    // 30 days of one check a minute, the newest at `now`: 43,200 checks. Durations cycle
    // 1..=60 ms within each hour; every 100th check is down (10 s to fail), every 10th
    // degraded.
    let n = 43_200i64;
    let batch: Vec<CheckRecord> = (0..n)
        .map(|i| {
            let at = now - (n - 1 - i) * 60_000;
            let status = if i % 100 == 0 {
                Health::Down
            } else if i % 10 == 0 {
                Health::Degraded
            } else {
                Health::Healthy
            };
            let d = if status == Health::Down {
                10_000.0
            } else {
                (i % 60 + 1) as f64
            };
            check("a", at, status, d)
        })
        .collect();
    for chunk in batch.chunks(5_000) {
        store.record(chunk, &sinks(1)).unwrap();
    }
    // A check outside every window, and one in the future, are ignored.
    store
        .record(
            &[
                check("a", now - 31 * 86_400_000, Health::Down, 1.0),
                check("a", now + 1, Health::Down, 1.0),
            ],
            &sinks(1),
        )
        .unwrap();

    // Expected figures by brute force over the same definition.
    let expect = |w: i64| {
        let rows: Vec<&CheckRecord> = batch.iter().filter(|r| r.at_ms > now - w).collect();
        let checks = rows.len() as u64;
        let up = rows.iter().filter(|r| r.status != Health::Down).count() as f64;
        let healthy = rows.iter().filter(|r| r.status == Health::Healthy).count() as f64;
        let mut d: Vec<f64> = rows
            .iter()
            .filter(|r| r.status != Health::Down)
            .map(|r| r.duration_ms)
            .collect();
        d.sort_by(f64::total_cmp);
        let p = |p: usize| d[(p * d.len()).div_ceil(100) - 1];
        (
            checks,
            up / checks as f64,
            healthy / checks as f64,
            p(50),
            p(95),
            p(99),
        )
    };
    let started = std::time::Instant::now();
    let stats = store.stats("a", now).unwrap();
    let took = started.elapsed();
    let names: Vec<&str> = stats.iter().map(|s| s.window.as_str()).collect();
    assert_eq!(names, ["1h", "24h", "7d", "30d"]);
    for (s, w) in stats
        .iter()
        .zip([3_600_000, 86_400_000, 604_800_000, 2_592_000_000])
    {
        let (checks, up, healthy, p50, p95, p99) = expect(w);
        assert_eq!(s.checks, checks, "{}", s.window);
        assert_eq!(s.uptime, Some(up), "{}", s.window);
        assert_eq!(s.healthy_ratio, Some(healthy), "{}", s.window);
        assert_eq!(
            (s.p50_ms, s.p95_ms, s.p99_ms),
            (Some(p50), Some(p95), Some(p99)),
            "{}",
            s.window
        );
    }
    assert_eq!(stats[0].checks, 60);
    assert_eq!(stats[3].checks, 43_200);
    // The down checks (10 s to fail) are left out: the tail is the slowest answer.
    assert_eq!(stats[3].p99_ms, Some(60.0));
    // Cheap enough for an API call even unoptimised (the release figure is in the benchmark).
    assert!(took.as_millis() < 2_000, "stats took {took:?}");

    // A target without checks in a window has no figures, not zeros.
    let empty = store.stats("nobody", now).unwrap();
    assert!(
        empty
            .iter()
            .all(|s| s.checks == 0 && s.uptime.is_none() && s.p50_ms.is_none())
    );
}

#[test]
fn stats_percentiles_are_nearest_rank() {
    let mut store = Store::open_in_memory().unwrap();
    let now = 10_000_000;
    // 100 answers of 1..=100 ms in a scrambled order, and 5 failures of 9.999 s, in the last
    // hour; 20 answers of 1 000 ms a day ago.
    let mut batch: Vec<CheckRecord> = (0..100)
        .map(|i| {
            let d = ((i * 37) % 100 + 1) as f64;
            check("a", now - 3_000_000 + i * 1_000, Health::Healthy, d)
        })
        .collect();
    batch.extend((0..5).map(|i| check("a", now - i, Health::Down, 9_999.0)));
    batch.extend((0..20).map(|i| check("a", now - 86_000_000 + i, Health::Degraded, 1_000.0)));
    store.record(&batch, &sinks(1)).unwrap();
    let s = store.stats("a", now).unwrap();
    let hour = &s[0];
    assert_eq!(hour.checks, 105);
    assert_eq!(
        (hour.p50_ms, hour.p95_ms, hour.p99_ms),
        (Some(50.0), Some(95.0), Some(99.0))
    );
    assert_eq!(hour.uptime, Some(100.0 / 105.0));
    assert_eq!(hour.healthy_ratio, Some(100.0 / 105.0));
    let day = &s[1];
    assert_eq!(day.checks, 125);
    // 120 answers: rank ⌈0.5·120⌉ = 60 → 60 ms; ⌈0.95·120⌉ = 114 → 1 000 ms (the 20 slow
    // ones are ranks 101..=120); ⌈0.99·120⌉ = 119.
    assert_eq!(
        (day.p50_ms, day.p95_ms, day.p99_ms),
        (Some(60.0), Some(1_000.0), Some(1_000.0))
    );
    assert_eq!(day.uptime, Some(120.0 / 125.0));
    assert_eq!(day.healthy_ratio, Some(100.0 / 125.0));
    assert_eq!(s[3].checks, 125);
}

/// Each synthetic call is kept with its check, and its tool's figures come out per window:
/// counts, errors, and nearest-rank percentiles like the checks' own; forgetting the target
/// and pruning take them too.
#[test]
fn tool_stats_are_per_tool_with_errors_and_nearest_rank_percentiles() {
    let mut store = Store::open_in_memory().unwrap();
    let now = 10_000_000;
    // 100 checks in the last hour, each calling `lookup` (1..=100 ms, every 10th failing)
    // and `ping` (5 ms); 10 day-old checks whose `lookup` took 2 s.
    let mut batch: Vec<CheckRecord> = (0..100)
        .map(|i| {
            let mut r = check("a", now - 3_000_000 + i * 1_000, Health::Healthy, 10.0);
            r.calls = vec![
                CallSample {
                    tool: "lookup".into(),
                    ok: i % 10 != 0,
                    ms: Some(((i * 37) % 100 + 1) as f64),
                },
                CallSample {
                    tool: "ping".into(),
                    ok: true,
                    ms: Some(5.0),
                },
            ];
            r
        })
        .collect();
    batch.extend((0..10).map(|i| {
        let mut r = check("a", now - 86_000_000 + i, Health::Healthy, 10.0);
        r.calls = vec![CallSample {
            tool: "lookup".into(),
            ok: true,
            ms: Some(2_000.0),
        }];
        r
    }));
    store.record(&batch, &sinks(1)).unwrap();
    // The history shows each check's calls, per tool, in the order made.
    let newest = store.history("a", None, 2).unwrap();
    assert_eq!(newest[0].at_ms, now - 3_000_000 + 99_000);
    assert_eq!(
        newest[0].calls,
        [
            CallSample {
                tool: "lookup".into(),
                ok: true,
                ms: Some(((99 * 37) % 100 + 1) as f64),
            },
            CallSample {
                tool: "ping".into(),
                ok: true,
                ms: Some(5.0),
            },
        ]
    );
    assert_eq!(newest[1].calls[0].ms, Some(((98 * 37) % 100 + 1) as f64));
    let t = store.tool_stats("a", now).unwrap();
    let tools: Vec<&str> = t.iter().map(|s| s.tool.as_str()).collect();
    assert_eq!(tools, ["lookup", "ping"]);
    let hour = &t[0].windows[0];
    assert_eq!(hour.window, "1h");
    assert_eq!((hour.calls, hour.errors), (100, 10));
    assert_eq!(hour.error_ratio, Some(0.1));
    assert_eq!(
        (hour.p50_ms, hour.p95_ms, hour.p99_ms),
        (Some(50.0), Some(95.0), Some(99.0))
    );
    let day = &t[0].windows[1];
    assert_eq!(day.calls, 110);
    assert_eq!(day.p95_ms, Some(2_000.0));
    assert_eq!(t[1].windows[0].p99_ms, Some(5.0));
    assert!(store.tool_stats("nobody", now).unwrap().is_empty());
    store.prune(now - 3_600_000).unwrap();
    assert_eq!(store.tool_stats("a", now).unwrap()[0].windows[3].calls, 100);
    store.forget_target("a").unwrap();
    assert!(store.tool_stats("a", now).unwrap().is_empty());
}

#[test]
fn prune_in_steps_deletes_what_one_prune_does_a_few_rows_at_a_time() {
    let fill = |dir: &TempDir| {
        let mut store = Store::open(&dir.db()).unwrap();
        let mut checks = Vec::new();
        for t in ["a", "b", "c", "d"] {
            for i in 0..3 {
                checks.push(check(t, 1_000 + i, Health::Healthy, 1.0));
            }
            checks.push(check(t, 9_000, Health::Healthy, 1.0));
        }
        store.record(&checks, &sinks(1)).unwrap();
        store
    };
    let whole = TempDir::new("prune-whole");
    let expected = fill(&whole).prune(5_000).unwrap();
    assert_eq!(expected, 12);

    let stepped = TempDir::new("prune-steps");
    let mut store = fill(&stepped);
    let (mut deleted, mut steps, mut from) = (0, 0, Some(PruneFrom::default()));
    while let Some(at) = from {
        let step = store.prune_step(5_000, at, 2).unwrap();
        assert!(
            step.deleted <= 2,
            "never past the limit, even within one target: {step:?}"
        );
        deleted += step.deleted;
        from = step.next;
        steps += 1;
        assert!(steps <= 20, "the prune does not end");
    }
    assert_eq!(deleted, expected);
    assert!(steps >= 6, "12 rows at 2 a step: {steps} steps");
    for t in ["a", "b", "c", "d"] {
        assert_eq!(store.history(t, None, 10).unwrap().len(), 1, "{t}");
    }
    assert_eq!(store.prune(5_000).unwrap(), 0);
}

#[test]
fn prune_drops_what_is_older_than_the_horizon() {
    let dir = TempDir::new("prune");
    let mut store = Store::open(&dir.db()).unwrap();
    store
        .record(
            &[
                down("a", 1_000),
                check("a", 2_000, Health::Down, 1.0),
                down("b", 1_500),
                recovered("a", 10_000),
            ],
            &sinks(1),
        )
        .unwrap();
    // a's trigger delivered at 3 000; b's trigger still pending; a's resolve delivered late.
    let by = |store: &Store, t: &str, a: Action| {
        store
            .due_alerts(i64::MAX, 10)
            .unwrap()
            .iter()
            .find(|i| i.alert.target == t && i.alert.action == a)
            .unwrap()
            .id
    };
    let trigger = by(&store, "a", Action::Trigger);
    store.mark_delivered(trigger, 3_000).unwrap();
    let resolve = by(&store, "a", Action::Resolve);
    store.mark_delivered(resolve, 12_000).unwrap();

    // Checks before 5 000 (3), their events (2), the trigger delivered at 3 000 (1).
    assert_eq!(store.prune(5_000).unwrap(), 6);
    assert_eq!(store.history("a", None, 10).unwrap().len(), 1);
    assert!(store.history("b", None, 10).unwrap().is_empty());
    assert_eq!(store.transitions("a", 10).unwrap().len(), 1);
    // b's undelivered trigger stays, however old.
    let pending = store.due_alerts(i64::MAX, 10).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].alert.target, "b");
    // The state to resume is not history: it stays.
    assert_eq!(store.load_states().unwrap().len(), 2);
    assert_eq!(store.prune(5_000).unwrap(), 0);
    drop(store);
    let c = raw(&dir.db());
    assert_eq!(count(&c, "SELECT count(*) FROM outbox"), 2);
}

#[test]
fn forget_target_removes_everything_about_it() {
    let mut store = Store::open_in_memory().unwrap();
    store
        .record(&[down("a", 1), down("b", 1)], &sinks(2))
        .unwrap();
    store.set_accepted_contract("a", "{}", 1).unwrap();
    store.forget_target("a").unwrap();
    store.forget_target("never-seen").unwrap();
    assert!(store.history("a", None, 10).unwrap().is_empty());
    assert!(store.transitions("a", 10).unwrap().is_empty());
    assert_eq!(store.accepted_contract("a").unwrap(), None);
    assert_eq!(
        store.load_states().unwrap().keys().collect::<Vec<_>>(),
        ["b"]
    );
    let due = store.due_alerts(i64::MAX, 10).unwrap();
    assert_eq!(due.len(), 2);
    assert!(due.iter().all(|i| i.alert.target == "b"));
}

#[test]
fn a_database_from_a_newer_mcpulse_is_refused() {
    let dir = TempDir::new("newer");
    let path = dir.db();
    Store::open(&path)
        .unwrap()
        .record(&[check("a", 1, Health::Healthy, 1.0)], &sinks(1))
        .unwrap();
    let c = raw(&path);
    c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(c);
    let err = Store::open(&path).err().unwrap();
    assert!(
        matches!(err, StoreError::TooNew { found, supported, .. } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("written by a newer mcpulse"), "{msg}");
    assert!(msg.contains("upgrade mcpulse"), "{msg}");
    // Refusing touched nothing.
    let c = raw(&path);
    assert_eq!(count(&c, "SELECT count(*) FROM checks"), 1);
}

#[test]
fn a_file_that_is_not_a_database_is_refused_clearly() {
    let dir = TempDir::new("garbage");
    let path = dir.db();
    let junk: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::write(&path, &junk).unwrap();
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, StoreError::Damaged { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("is not an SQLite database or is damaged"),
        "{msg}"
    );
    assert!(msg.contains("move it aside"), "{msg}");
    // It was not overwritten.
    assert_eq!(std::fs::read(&path).unwrap(), junk);
}

#[test]
fn a_corrupted_database_is_refused_clearly() {
    let dir = TempDir::new("corrupt");
    let path = dir.db();
    let mut store = Store::open(&path).unwrap();
    let batch: Vec<CheckRecord> = (0..2_000)
        .map(|i| check("a", i, Health::Healthy, 1.0))
        .collect();
    store.record(&batch, &sinks(1)).unwrap();
    drop(store); // checkpoints the WAL into the file
    // Scribble over the schema page and the first pages after it.
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 5 * 4096);
    for b in &mut bytes[100..5 * 4096] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, StoreError::Damaged { .. }), "{err:?}");
    assert!(err.to_string().contains("move it aside"), "{err}");
}

#[test]
fn an_sqlite_file_of_another_program_is_refused() {
    let dir = TempDir::new("foreign");
    let path = dir.db();
    raw(&path)
        .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, StoreError::NotMcpulse { .. }), "{err:?}");
    assert!(err.to_string().contains("mcpulse did not create"), "{err}");
    assert_eq!(count(&raw(&path), "SELECT count(*) FROM notes"), 1);
}

#[test]
fn a_second_monitor_on_the_same_file_is_refused_while_the_first_runs() {
    let dir = TempDir::new("locked");
    let path = dir.db();
    let first = Store::open(&path).unwrap();
    let started = std::time::Instant::now();
    let err = Store::open(&path).err().unwrap();
    // The sidecar lock answers at once: no busy timeout is waited.
    assert!(started.elapsed().as_secs() < 2);
    let lock = mcpulse_monitor::store::lock_path(&path);
    match &err {
        StoreError::AnotherMonitor { lock: l, pid, .. } => {
            assert_eq!(l, &lock.display().to_string());
            assert_eq!(
                *pid,
                Some(std::process::id()),
                "the holder's pid, from the lock file"
            );
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    for part in [
        "another mcpulse monitor (pid ",
        &path.display().to_string(),
        "another storage.path",
        "docs/history.md",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    drop(first);
    // Released with the store; the file stays and is taken again.
    assert!(lock.exists());
    drop(Store::open(&path).unwrap());
}

#[test]
fn readers_read_while_the_store_writes() {
    let dir = TempDir::new("readers");
    let path = dir.db();
    let mut store = Store::open(&path).unwrap();
    store
        .record(&[check("svc", 1_000, Health::Healthy, 10.0)], &[])
        .unwrap();
    // Another connection, as sqlite3 or a backup opens the file: not blocked, sees the commit.
    let reader = Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM checks"), 1);
    // A read transaction left open does not stop the writer.
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM checks;")
        .unwrap();
    store
        .record(&[check("svc", 2_000, Health::Down, 10.0)], &[])
        .unwrap();
    assert_eq!(
        count(&reader, "SELECT count(*) FROM checks"),
        1,
        "its snapshot"
    );
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM checks"), 2);
}

#[test]
fn a_missing_directory_that_cannot_be_created_is_a_clear_error() {
    let dir = TempDir::new("cannot");
    std::fs::write(dir.0.join("file"), b"x").unwrap();
    // A "directory" that is a file.
    let err = Store::open(&dir.0.join("file/history.sqlite3"))
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("could not open the history database"),
        "{err}"
    );
}

/// The schema as mcpulse with schema version 1 wrote it (sinks named by index).
const SCHEMA_V1: &str = "
    CREATE TABLE targets (
        id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, state TEXT, incidents TEXT,
        updated_ms INTEGER, contract TEXT, contract_ms INTEGER
    ) STRICT;
    CREATE TABLE checks (
        id INTEGER PRIMARY KEY, target_id INTEGER NOT NULL, at_ms INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('unknown', 'healthy', 'degraded', 'down')),
        duration_ms REAL NOT NULL, timings TEXT NOT NULL, findings TEXT NOT NULL, grade TEXT
    ) STRICT;
    CREATE INDEX checks_by_target_time ON checks (target_id, at_ms, status, duration_ms);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY, target_id INTEGER NOT NULL, check_id INTEGER NOT NULL,
        at_ms INTEGER NOT NULL, kind TEXT NOT NULL, event TEXT NOT NULL
    ) STRICT;
    CREATE INDEX events_by_target_time ON events (target_id, at_ms);
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY, target_id INTEGER NOT NULL, check_id INTEGER NOT NULL,
        seq INTEGER NOT NULL, sink INTEGER NOT NULL, dedup_key TEXT NOT NULL,
        created_ms INTEGER NOT NULL, due_ms INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, done_ms INTEGER,
        delivered INTEGER NOT NULL DEFAULT 0, alert TEXT NOT NULL,
        UNIQUE (check_id, seq, sink)
    ) STRICT;
    CREATE INDEX outbox_pending ON outbox (sink, dedup_key, id) WHERE done_ms IS NULL;
    CREATE INDEX outbox_due ON outbox (due_ms) WHERE done_ms IS NULL;
    PRAGMA application_id = 1296257100;
    PRAGMA user_version = 1;
";

#[test]
fn a_version_1_outbox_keeps_its_pending_rows_and_maps_sink_indexes_to_identities() {
    let dir = TempDir::new("v1");
    let path = dir.db();
    {
        let c = raw(&path);
        c.execute_batch(SCHEMA_V1).unwrap();
        c.execute("INSERT INTO targets (id, name) VALUES (1, 'a')", [])
            .unwrap();
        let trigger =
            serde_json::to_string(&alert("a", Action::Trigger, Kind::Down, "status", 1_000))
                .unwrap();
        // A trigger for sinks 0, 1 and 2: pending for 0 (retrying), delivered to 1, pending
        // for 2; a delivered row of sink 0 from earlier.
        let mut insert = c
            .prepare(
                "INSERT INTO outbox (id, target_id, check_id, seq, sink, dedup_key, created_ms,
                                     due_ms, attempts, last_error, done_ms, delivered, alert)
                 VALUES (?1, 1, ?2, 0, ?3, ?4, 1000, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .unwrap();
        let key = dedup_key("a", "status");
        let none: Option<i64> = None;
        let no_error: Option<&str> = None;
        insert
            .execute(rusqlite::params![
                1,
                1,
                0,
                key,
                1_000,
                0,
                no_error,
                Some(900),
                1,
                trigger
            ])
            .unwrap();
        insert
            .execute(rusqlite::params![
                2,
                2,
                0,
                key,
                4_000,
                2,
                Some("HTTP 503"),
                none,
                0,
                trigger
            ])
            .unwrap();
        insert
            .execute(rusqlite::params![
                3,
                2,
                1,
                key,
                1_000,
                0,
                no_error,
                Some(1_100),
                1,
                trigger
            ])
            .unwrap();
        insert
            .execute(rusqlite::params![
                4, 2, 2, key, 1_000, 0, no_error, none, 0, trigger
            ])
            .unwrap();
    }

    let mut store = Store::open(&path).unwrap();
    // Migrated: nothing lost, the order kept, the sink not yet known.
    let due = store.due_alerts(i64::MAX, 10).unwrap();
    assert_eq!(
        due.iter()
            .map(|i| (i.id, i.sink.as_str(), i.attempts))
            .collect::<Vec<_>>(),
        [(2, "legacy#0", 2), (4, "legacy#2", 0)]
    );
    // The config the monitor starts with has two sinks: index 0 and 1 are theirs; index 2 is
    // past the end and its pending row is set aside, not sent anywhere.
    let ids = vec![SinkId::new("webhook-aaaa"), SinkId::new("slack-bbbb")];
    assert_eq!(store.adopt_legacy_sinks(&ids).unwrap(), 3);
    let abandoned = store.abandon_missing_sinks(&ids, 5_000).unwrap();
    assert_eq!(abandoned, vec![(SinkId::new("legacy#2"), 1)]);
    let due = store.due_alerts(i64::MAX, 10).unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].id, due[0].sink.as_str(), due[0].attempts),
        (2, "webhook-aaaa", 2)
    );
    assert_eq!(due[0].alert.target, "a");
    assert!(!due[0].alert.removed);
    drop(store);
    let c = raw(&path);
    let (error, done, delivered): (String, i64, i64) = c
        .query_row(
            "SELECT last_error, done_ms, delivered FROM outbox WHERE id = 4",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (error.as_str(), done, delivered),
        (
            "not delivered: sink legacy#2 is no longer in the configuration",
            5_000,
            0
        )
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM outbox WHERE sink = 'slack-bbbb'"),
        1
    );
    let version: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // Reopening is a no-op: already at the latest version, nothing left to map.
    drop(c);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.adopt_legacy_sinks(&ids).unwrap(), 0);
    assert_eq!(store.due_alerts(i64::MAX, 10).unwrap().len(), 1);
}

#[test]
fn rows_of_a_sink_that_left_the_config_are_set_aside_and_the_others_keep_their_sink() {
    let dir = TempDir::new("abandon");
    let mut store = Store::open(&dir.db()).unwrap();
    let (a, b, c) = (
        SinkId::new("webhook-a"),
        SinkId::new("slack-b"),
        SinkId::new("command-c"),
    );
    store
        .record(&[down("x", 1_000)], &[a.clone(), b.clone(), c.clone()])
        .unwrap();
    // A reload: the sinks reordered, `b` removed.
    let abandoned = store
        .abandon_missing_sinks(&[c.clone(), a.clone()], 2_000)
        .unwrap();
    assert_eq!(abandoned, vec![(b.clone(), 1)]);
    let due = store.due_alerts(i64::MAX, 10).unwrap();
    assert_eq!(
        due.iter().map(|i| i.sink.clone()).collect::<Vec<_>>(),
        vec![a.clone(), c.clone()]
    );
    // Nothing more to set aside the second time.
    assert!(
        store
            .abandon_missing_sinks(&[c, a], 3_000)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_removal_queues_its_resolves_records_the_event_and_clears_the_incidents() {
    use mcpulse_monitor::check::Removal;
    let dir = TempDir::new("removal");
    let mut store = Store::open(&dir.db()).unwrap();
    let (a, b) = (SinkId::new("webhook-a"), SinkId::new("pagerduty-b"));
    store
        .record(&[down("x", 1_000)], &[a.clone(), b.clone()])
        .unwrap();
    let mut open = store.load_states().unwrap()["x"].1.clone();
    assert_eq!(open.len(), 1);
    let resolves = mcpulse_monitor::alert::resolve_removed("x", &BTreeMap::new(), &mut open, 5_000);
    assert!(open.is_empty());
    assert_eq!(resolves.len(), 1);
    assert_eq!(resolves[0].dedup_key, dedup_key("x", "status"));
    assert_eq!(
        (resolves[0].action, resolves[0].kind),
        (Action::Resolve, Kind::Recovered)
    );
    assert!(resolves[0].removed);
    let removal = Removal {
        target: "x".into(),
        at_ms: 5_000,
        event: Event::Removed {
            at_ms: 5_000,
            resolved: vec![dedup_key("x", "status")],
        },
        alerts: resolves.clone(),
        sinks: vec![b.clone()],
    };
    store.record_removal(&removal).unwrap();
    // The resolve waits behind the trigger of its incident for that sink, then goes.
    let due = store.due_alerts(i64::MAX, 10).unwrap();
    assert_eq!(due.len(), 2, "{due:?}");
    assert!(due.iter().all(|i| i.alert.action == Action::Trigger));
    let trigger_b = due.iter().find(|i| i.sink == b).unwrap().id;
    store.mark_delivered(trigger_b, 5_100).unwrap();
    let due = store.due_alerts(i64::MAX, 10).unwrap();
    let resolve = due.iter().find(|i| i.sink == b).unwrap();
    assert_eq!(resolve.alert, resolves[0]);
    // The removal is in the history; neither the state nor the incidents are kept (a target
    // added back starts afresh, so a recovered one does not page for its old outage).
    let events = store.transitions("x", 10).unwrap();
    assert_eq!(events[0]["event"], "removed");
    assert!(!store.load_states().unwrap().contains_key("x"));
    // A target the store never saw, with nothing to resolve, leaves no trace.
    store
        .record_removal(&Removal {
            target: "never".into(),
            at_ms: 6_000,
            event: Event::Removed {
                at_ms: 6_000,
                resolved: Vec::new(),
            },
            alerts: Vec::new(),
            sinks: vec![a],
        })
        .unwrap();
    assert!(store.transitions("never", 10).unwrap().is_empty());
    assert!(!store.load_states().unwrap().contains_key("never"));
}

/// A removal written late, after the target was added back and checked again, resolves the old
/// incident but leaves the state stored since: the new incident stays open in the store.
#[test]
fn a_removal_written_after_the_target_was_checked_again_keeps_the_new_state() {
    use mcpulse_monitor::check::Removal;
    let dir = TempDir::new("late-removal");
    let mut store = Store::open(&dir.db()).unwrap();
    store.record(&[down("x", 1_000)], &[]).unwrap();
    // Removed at 5 s; added back, and down again at 12 s, written before the removal.
    store.record(&[down("x", 12_000)], &[]).unwrap();
    store
        .record_removal(&Removal {
            target: "x".into(),
            at_ms: 5_000,
            event: Event::Removed {
                at_ms: 5_000,
                resolved: vec![dedup_key("x", "status")],
            },
            alerts: Vec::new(),
            sinks: Vec::new(),
        })
        .unwrap();
    let states = store.load_states().unwrap();
    let (state, open) = &states["x"];
    assert_eq!(state.since_ms, 12_000);
    assert_eq!(open["status"].opened_ms, 12_000);
    let events = store.transitions("x", 10).unwrap();
    assert!(events.iter().any(|e| e["event"] == "removed"), "{events:?}");
}

/// The read interface of docs/history.md: every view exists with its documented columns, in
/// order, and returns the rows written through the store, with names and RFC 3339 times.
#[test]
fn the_documented_views_exist_and_return_the_history() {
    let dir = TempDir::new("views");
    let path = dir.db();
    let mut store = Store::open(&path).unwrap();
    let mut first = down("svc", 3_600_000);
    first.calls = vec![CallSample {
        tool: "ping_db".into(),
        ok: false,
        ms: Some(12.5),
    }];
    store
        .record(&[first, recovered("svc", 3_660_000)], &sinks(1))
        .unwrap();
    let reader = raw(&path);
    let columns = |view: &str| -> Vec<String> {
        let stmt = reader.prepare(&format!("SELECT * FROM {view}")).unwrap();
        stmt.column_names().map(str::to_owned).collect()
    };
    let documented: [(&str, &[&str]); 6] = [
        (
            "v_checks",
            &[
                "check_id",
                "target",
                "at_ms",
                "at",
                "status",
                "duration_ms",
                "grade",
                "timings",
                "findings",
            ],
        ),
        (
            "v_events",
            &[
                "event_id", "target", "check_id", "at_ms", "at", "kind", "event",
            ],
        ),
        (
            "v_transitions",
            &[
                "event_id",
                "target",
                "check_id",
                "at_ms",
                "at",
                "from_status",
                "to_status",
                "reason",
                "quiet",
            ],
        ),
        (
            "v_alerts",
            &[
                "alert_id",
                "target",
                "check_id",
                "dedup_key",
                "sink",
                "action",
                "kind",
                "severity",
                "summary",
                "created_ms",
                "created",
                "done_ms",
                "done",
                "delivered",
                "attempts",
                "last_error",
            ],
        ),
        (
            "v_calls",
            &[
                "call_id", "target", "check_id", "at_ms", "at", "tool", "ok", "ms",
            ],
        ),
        (
            "v_uptime_hourly",
            &["target", "hour_ms", "hour", "checks", "up", "healthy"],
        ),
    ];
    for (view, cols) in documented {
        assert_eq!(columns(view), *cols, "{view}");
        assert!(
            count(&reader, &format!("SELECT count(*) FROM {view}")) > 0,
            "{view} is empty"
        );
    }
    // Three text columns of every row.
    let triples = |sql: &str| -> Vec<(String, String, String)> {
        reader
            .prepare(sql)
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let s = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    assert_eq!(
        triples("SELECT target, at, status FROM v_checks ORDER BY at_ms"),
        [
            s("svc", "1970-01-01T01:00:00.000Z", "down"),
            s("svc", "1970-01-01T01:01:00.000Z", "healthy"),
        ]
    );
    assert_eq!(
        triples("SELECT from_status, to_status, reason FROM v_transitions ORDER BY at_ms"),
        [
            s("healthy", "down", "connect refused"),
            s("down", "healthy", ""),
        ]
    );
    assert_eq!(
        triples("SELECT action, kind, sink FROM v_alerts ORDER BY alert_id"),
        [s("trigger", "down", "s0"), s("resolve", "recovered", "s0"),]
    );
    let hour: (String, i64, i64, i64) = reader
        .query_row(
            "SELECT hour, checks, up, healthy FROM v_uptime_hourly WHERE target = 'svc'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(hour, ("1970-01-01T01:00:00Z".into(), 2, 1, 1));
    let call: (String, i64, f64) = reader
        .query_row("SELECT tool, ok, ms FROM v_calls", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(call, ("ping_db".into(), 0, 12.5));
}
