//! How fast the history store takes results, and how fast it answers the API's queries.
//!
//! ```text
//! cargo run --release -p mcpulse-monitor --example store_bench -- [options]
//!   --records N        results to write (default 1000000)
//!   --batch N          results per transaction (default 500)
//!   --targets N        distinct targets, checked round-robin (default 1000)
//!   --sinks N          configured sinks (default 2)
//!   --alert-every N    one result in N carries a transition and an alert (default 50)
//!   --durability D     process (synchronous=NORMAL, the default) | power (synchronous=FULL)
//!   --dir PATH         where to put the database (default: a new temp directory, removed)
//! ```
//!
//! Not a test: it measures and prints. The write phase times every `Store::record` call (one
//! transaction) into a real file and reports the sustained rate over the whole run, which
//! includes WAL checkpoints and index growth. Results are built before the clock starts for
//! each batch, the way the daemon hands a finished batch to the store thread. The query phase
//! adds one target with 30 days of minutely checks (43,200 rows) and times `stats`, `history`
//! and `due_alerts`, and, for comparison, percentiles computed in SQL with `ORDER BY … OFFSET`.

use mcpulse_monitor::alert::{Action, Alert, Incidents, Kind, dedup_key};
use mcpulse_monitor::check::CheckRecord;
use mcpulse_monitor::state::{Event, Health, Observation, TargetState};
use mcpulse_monitor::store::{Durability, Store};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

struct Options {
    records: usize,
    batch: usize,
    targets: usize,
    sinks: usize,
    alert_every: usize,
    durability: Durability,
    dir: Option<PathBuf>,
}

fn options() -> Result<Options> {
    let mut o = Options {
        records: 1_000_000,
        batch: 500,
        targets: 1_000,
        sinks: 2,
        alert_every: 50,
        durability: Durability::ProcessCrash,
        dir: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--records" => o.records = value()?.parse()?,
            "--batch" => o.batch = value()?.parse()?,
            "--targets" => o.targets = value()?.parse()?,
            "--sinks" => o.sinks = value()?.parse()?,
            "--alert-every" => o.alert_every = value()?.parse()?,
            "--durability" => {
                o.durability = match value()?.as_str() {
                    "process" => Durability::ProcessCrash,
                    "power" => Durability::PowerLoss,
                    other => return Err(format!("unknown durability {other}").into()),
                }
            }
            "--dir" => o.dir = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    if o.batch == 0 || o.targets == 0 || o.alert_every == 0 {
        return Err("--batch, --targets and --alert-every must be positive".into());
    }
    Ok(o)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("store_bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let o = options()?;
    let (dir, remove) = match &o.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("mcpulse-store-bench-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("history.sqlite3");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let result = bench(&o, &path);
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

const BASE_MS: i64 = 1_767_225_600_000; // 2026-01-01

fn observation(status: Health, at_ms: i64) -> Observation {
    Observation {
        at_ms,
        status,
        auth: "required".into(),
        era: Some("modern".into()),
        protocol_version: Some("2025-11-25".into()),
        grade: Some("B".into()),
        contract_digest: Some(
            "sha256:9f2c4a1be0d3c5f7a8e6b4d2c0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1".into(),
        ),
        drift: None,
        drift_changes: Vec::new(),
        drift_changes_more: 0,
        summary: "tools/list took 312 ms, over the 250 ms budget".into(),
        components: BTreeMap::new(),
        by_components: false,
        server_answered: false,
        security: Vec::new(),
    }
}

/// One result with the sizes a real one has: four timings, two findings with evidence-sized
/// messages, a state with its last observation and a few recent transitions.
fn record(target: &str, i: usize, at_ms: i64, alert_every: usize) -> CheckRecord {
    let status = match i % 20 {
        0 => Health::Degraded,
        7 if i % 140 == 7 => Health::Down,
        _ => Health::Healthy,
    };
    let duration = 20.0 + (i * 7919 % 400) as f64 + 0.25;
    let mut r = CheckRecord {
        target: target.to_owned(),
        at_ms,
        status,
        duration_ms: duration,
        timings: json!({
            "connect": 1.84, "initialize": duration * 0.42, "initialized": 0.31,
            "tools_list": duration * 0.33, "prompts_list": 4.2, "resources_list": 3.9,
            "total": duration,
        }),
        findings: json!([
            {"code": "MCP104", "severity": "warning",
             "message": format!("tools/list took {duration} ms, over the 250 ms latency budget")},
            {"code": "SEC203", "severity": "info",
             "message": "the server accepts requests without an Origin header; browsers always send one"},
        ]),
        grade: Some("B".into()),
        observation: observation(status, at_ms),
        state: TargetState {
            status: Health::Healthy,
            since_ms: at_ms - 3_600_000,
            streak: (status != Health::Healthy).then_some((status, 1)),
            transitions: VecDeque::from([at_ms - 7_200_000, at_ms - 3_600_000]),
            flapping: false,
            last: Some(observation(status, at_ms)),
            last_up: None, // stored only during an outage
            components: BTreeMap::new(),
            unexplained: 0,
        },
        incidents: Incidents::new(),
        events: Vec::new(),
        alerts: Vec::new(),
        contract: None,
        calls: Vec::new(),
    };
    if i.is_multiple_of(alert_every) {
        r.events.push(Event::Transition {
            from: Health::Healthy,
            to: Health::Down,
            at_ms,
            quiet: false,
            reason: "connect refused".into(),
        });
        r.alerts.push(Alert {
            dedup_key: dedup_key(target, "status"),
            action: Action::Trigger,
            kind: Kind::Down,
            target: target.to_owned(),
            severity: "critical".into(),
            summary: format!("{target} is down: connect refused"),
            at_ms,
            started_ms: at_ms,
            labels: BTreeMap::from([
                ("team".into(), "platform".into()),
                ("env".into(), "prod".into()),
            ]),
            removed: false,
        });
    }
    r
}

fn bench(o: &Options, path: &std::path::Path) -> Result<()> {
    let names: Vec<String> = (0..o.targets)
        .map(|t| format!("mcp-server-{t:05}"))
        .collect();
    let mut store = Store::open_with(path, o.durability)?;
    let sinks: Vec<mcpulse_monitor::sink::SinkId> = (0..o.sinks)
        .map(|i| mcpulse_monitor::sink::SinkId::new(format!("webhook-{i:016x}")))
        .collect();
    println!(
        "store_bench: {} results, batches of {}, {} targets, {} sinks, one alert per {} results, \
         durability {:?}, file {}",
        o.records,
        o.batch,
        o.targets,
        o.sinks,
        o.alert_every,
        o.durability,
        path.display()
    );

    // Write phase.
    let cpu_before = cpu_seconds();
    let mut in_store = Duration::ZERO;
    let mut latencies = Vec::new();
    let wall = Instant::now();
    let mut i = 0;
    let mut batch = Vec::with_capacity(o.batch);
    while i < o.records {
        batch.clear();
        for _ in 0..o.batch.min(o.records - i) {
            let t = i % o.targets;
            let tick = (i / o.targets) as i64;
            batch.push(record(&names[t], i, BASE_MS + tick * 60_000, o.alert_every));
            i += 1;
        }
        let started = Instant::now();
        store.record(&batch, &sinks)?;
        let took = started.elapsed();
        in_store += took;
        latencies.push(took);
    }
    let wall = wall.elapsed();
    let cpu = cpu_seconds()
        .zip(cpu_before)
        .map(|(a, b)| (a.0 - b.0, a.1 - b.1));
    latencies.sort_unstable();
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    let size = |suffix: &str| {
        std::fs::metadata(format!("{}{suffix}", path.display()))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    println!(
        "write: {:.0} results/s sustained (time in Store::record: {:.2} s); {:.0} results/s \
         wall, building the results included ({:.2} s)",
        o.records as f64 / in_store.as_secs_f64(),
        in_store.as_secs_f64(),
        o.records as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "write: per batch (one transaction) p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} \
         batches",
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(pick(1.0)),
        latencies.len()
    );
    if let Some((user, sys)) = cpu {
        println!(
            "write: CPU {user:.2} s user + {sys:.2} s system (building the results included): \
             {:.0} results per CPU-second",
            o.records as f64 / (user + sys)
        );
    }
    println!(
        "write: file {:.1} MiB + WAL {:.1} MiB = {:.0} bytes per result",
        size("") as f64 / 1_048_576.0,
        size("-wal") as f64 / 1_048_576.0,
        (size("") + size("-wal")) as f64 / o.records.max(1) as f64
    );

    // Query phase: one target with 30 days of minutely checks.
    let now = BASE_MS + 30 * 86_400_000;
    let n = 43_200usize;
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        batch.clear();
        for _ in 0..o.batch.min(n - i) {
            let at = now - (n - 1 - i) as i64 * 60_000;
            batch.push(record("stats-target", i, at, usize::MAX));
            i += 1;
        }
        store.record(&batch, &sinks)?;
    }
    println!(
        "query: 43200 checks of one target written in {:.0} ms",
        ms(started.elapsed())
    );
    let stats = time(50, || store.stats("stats-target", now).map(drop))?;
    let s = store.stats("stats-target", now)?;
    let month = s.last().ok_or("no stats")?;
    println!(
        "query: stats (1h, 24h, 7d, 30d; 43200 rows in 30d) median {:.2} ms, max {:.2} ms; \
         30d: {} checks, uptime {:.4}, p50 {:?} p95 {:?} p99 {:?}",
        ms(stats.0),
        ms(stats.1),
        month.checks,
        month.uptime.unwrap_or(0.0),
        month.p50_ms,
        month.p95_ms,
        month.p99_ms
    );
    let first = time(50, || store.history("stats-target", None, 50).map(drop))?;
    let deep_cursor = {
        let mut cursor = None;
        for _ in 0..100 {
            cursor = store
                .history("stats-target", cursor, 50)?
                .last()
                .map(|r| r.id);
        }
        cursor
    };
    let deep = time(50, || {
        store.history("stats-target", deep_cursor, 50).map(drop)
    })?;
    println!(
        "query: history page of 50: first {:.3} ms, 101st {:.3} ms (medians)",
        ms(first.0),
        ms(deep.0)
    );
    let due = time(50, || store.due_alerts(i64::MAX, 100).map(drop))?;
    println!(
        "query: due_alerts(100) with every alert pending: median {:.3} ms",
        ms(due.0)
    );
    let prune_started = Instant::now();
    let pruned = store.prune(BASE_MS + 30 * 60_000)?;
    println!(
        "query: prune of {pruned} rows in {:.0} ms",
        ms(prune_started.elapsed())
    );
    drop(store);

    // For comparison: the percentiles in SQL, one ORDER BY … OFFSET per window and percentile.
    let c = rusqlite::Connection::open(path)?;
    let tid: i64 = c.query_row(
        "SELECT id FROM targets WHERE name = 'stats-target'",
        [],
        |r| r.get(0),
    )?;
    let sql = time(20, || {
        for w in [3_600_000i64, 86_400_000, 604_800_000, 2_592_000_000] {
            let count: i64 = c.query_row(
                "SELECT count(*) FROM checks WHERE target_id = ?1 AND at_ms > ?2 AND at_ms <= ?3
                 AND status != 'down'",
                rusqlite::params![tid, now - w, now],
                |r| r.get(0),
            )?;
            for p in [50i64, 95, 99] {
                let offset = ((p * count + 99) / 100 - 1).max(0);
                let _: Option<f64> = c
                    .query_row(
                        "SELECT duration_ms FROM checks
                         WHERE target_id = ?1 AND at_ms > ?2 AND at_ms <= ?3 AND status != 'down'
                         ORDER BY duration_ms LIMIT 1 OFFSET ?4",
                        rusqlite::params![tid, now - w, now, offset],
                        |r| r.get(0),
                    )
                    .ok();
            }
        }
        Ok::<(), rusqlite::Error>(())
    })?;
    println!(
        "query: the same percentiles in SQL (ORDER BY duration_ms OFFSET k, 12 queries): median \
         {:.2} ms",
        ms(sql.0)
    );
    Ok(())
}

/// This process's user and system CPU time so far, from `/proc/self/stat` (Linux; `None`
/// elsewhere). A figure that other load on the machine disturbs less than wall time.
fn cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and
    // 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? / 100.0, ticks(12)? / 100.0))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median and max of `runs` timed calls, after one warm-up call.
fn time<E: Into<Box<dyn std::error::Error>>>(
    runs: usize,
    mut f: impl FnMut() -> std::result::Result<(), E>,
) -> Result<(Duration, Duration)> {
    f().map_err(Into::into)?;
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        f().map_err(Into::into)?;
        t.push(started.elapsed());
    }
    t.sort_unstable();
    Ok((t[t.len() / 2], t[t.len() - 1]))
}
