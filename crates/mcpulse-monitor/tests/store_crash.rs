//! A monitor killed with SIGKILL in the middle of writing loses no committed result, corrupts
//! nothing, and resumes exactly where it was: no alert lost, none duplicated.
//!
//! This test binary is its own child (`harness = false`, so no hidden switches: the child is
//! chosen by an explicit `--writer <db>` argument):
//!
//! - **writer** (`store_crash --writer DB`): simulates a fleet with the real state machine and
//!   alert policy, resuming from whatever `DB` holds (states, open incidents, the last tick),
//!   and writes one batch of checks per transaction in a loop. It prints `writing N` before a
//!   batch and `committed N` after its commit.
//! - **scenario** (no arguments): runs the writer several times on one file, each time killing
//!   it (SIGKILL) as soon as it announces a batch, i.e. while that batch's transaction is open.
//!   After each kill it checks the file: `PRAGMA integrity_check` is ok; every batch reported
//!   committed is there, and only whole batches; and the states, open incidents and outbox
//!   are exactly those of an uninterrupted run of the same fleet up to the last stored tick
//!   (every alert once per sink, in order). Each round resumes from the file the previous
//!   kill left, so the comparison covers a run interrupted several times.
//!
//! Deterministic: the fleet is a pure function of (target, tick), and the checks hold
//! whatever batch the kill interrupts. Bounded: a few rounds of a few batches, with timeouts.

use mcpulse_monitor::alert::{Alert, Context, Incidents, alerts};
use mcpulse_monitor::check::CheckRecord;
use mcpulse_monitor::state::{Health, Observation, TargetState, Thresholds, observe};
use mcpulse_monitor::store::Store;
use rusqlite::Connection;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const TARGETS: u64 = 12;
/// Ticks (one check of every target each) per batch: 480 records a transaction.
const TICKS_PER_BATCH: u64 = 40;
const SINKS: usize = 2;

/// The identities of the [`SINKS`] sinks.
fn sink_ids() -> Vec<mcpulse_monitor::sink::SinkId> {
    (0..SINKS)
        .map(|i| mcpulse_monitor::sink::SinkId::new(format!("webhook-{i:016x}")))
        .collect()
}
const TICK_MS: i64 = 60_000;
const BASE_MS: i64 = 1_700_000_000_000;
const THRESHOLDS: Thresholds = Thresholds {
    failure: 2,
    success: 2,
    flap_window_ms: 20 * TICK_MS,
    flap_threshold: 4,
};
/// The writer stops by itself after this many ticks, should nobody kill it.
const MAX_TICKS: u64 = 400_000;
/// Per round: how many batches the writer announces, and how long after the last
/// announcement the kill comes (a batch takes milliseconds to write, so the kills land at
/// different points of its transaction, or after its commit).
const ROUNDS: [(u64, Duration); 6] = [
    (1, Duration::ZERO),
    (3, Duration::from_micros(300)),
    (2, Duration::from_millis(1)),
    (5, Duration::from_millis(3)),
    (2, Duration::from_millis(8)),
    (4, Duration::from_millis(20)),
];
/// How long to wait for any line from the writer.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.iter().position(|a| a == "--writer") {
        Some(i) => match args.get(i + 1) {
            Some(db) => writer(Path::new(db)),
            None => Err("--writer needs the database path".into()),
        },
        None => scenario(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store_crash: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------
// The fleet: a pure function of (target, tick), run through the real state machine and alert
// policy.

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn name(t: u64) -> String {
    format!("target-{t:02}")
}

fn at(tick: u64) -> i64 {
    BASE_MS + tick as i64 * TICK_MS
}

/// What target `t` shows at `tick`: long calm stretches, flaky ones (flapping), outages;
/// now and then a grade change or a drift.
fn observation(t: u64, tick: u64) -> (Observation, f64) {
    let h = mix(t << 40 ^ tick);
    let regime = mix(t ^ (tick / 64).wrapping_mul(0x0100_0000_01B3)) % 4;
    let status = match regime {
        0 | 1 if h.is_multiple_of(50) => Health::Degraded,
        0 | 1 => Health::Healthy,
        2 => [Health::Healthy, Health::Degraded, Health::Down][(h % 3) as usize],
        _ if h.is_multiple_of(10) => Health::Healthy,
        _ => Health::Down,
    };
    let duration = match status {
        Health::Down => 10_000.0,
        _ => (h % 400) as f64 + 5.0,
    };
    let grade = if (tick / 100 + t).is_multiple_of(7) {
        "B"
    } else {
        "A"
    };
    let obs = Observation {
        at_ms: at(tick),
        status,
        auth: "none".into(),
        era: Some("modern".into()),
        protocol_version: Some("2025-11-25".into()),
        grade: Some(grade.into()),
        contract_digest: Some(format!("sha256:{:016x}", mix(t) % 3)),
        drift: h.is_multiple_of(173).then(|| "risky".to_owned()),
        drift_changes: Vec::new(),
        drift_changes_more: 0,
        summary: format!("{} after {duration} ms", status.as_str()),
        components: BTreeMap::new(),
        by_components: false,
        server_answered: false,
        security: Vec::new(),
    };
    (obs, duration)
}

struct Fleet {
    targets: BTreeMap<String, (TargetState, Incidents)>,
    next_tick: u64,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet {
            targets: (0..TARGETS)
                .map(|t| (name(t), (TargetState::default(), Incidents::new())))
                .collect(),
            next_tick: 0,
        }
    }

    /// Where a killed writer left off: the stored states and the tick after the last stored.
    fn resume(store: &Store) -> Result<Fleet> {
        let mut fleet = Fleet::new();
        for (name, s) in store.load_states()? {
            fleet.targets.insert(name, s);
        }
        if let Some(last) = store.history(&name(0), None, 1)?.first() {
            fleet.next_tick = ((last.at_ms - BASE_MS) / TICK_MS) as u64 + 1;
        }
        Ok(fleet)
    }

    /// The checks of the next tick.
    fn tick(&mut self, out: &mut Vec<CheckRecord>) {
        let tick = self.next_tick;
        self.next_tick += 1;
        let labels = BTreeMap::from([("env".to_owned(), "crash-test".to_owned())]);
        for (t, (target, (state, incidents))) in self.targets.iter_mut().enumerate() {
            let (obs, duration) = observation(t as u64, tick);
            let now = at(tick);
            let (next, events) = observe(state, &obs, THRESHOLDS, now);
            let cx = Context {
                target,
                labels: &labels,
                now_ms: now,
                silenced: false,
                flapping: next.flapping,
                status: next.status,
                drift: None,
                drift_changes: "",
                reminder_ms: Some(30 * TICK_MS),
                components: &mcpulse_monitor::alert::NO_COMPONENTS,
                by_components: false,
                reason: "",
            };
            let sent: Vec<Alert> = alerts(&events, incidents, &cx);
            *state = next;
            out.push(CheckRecord {
                target: target.clone(),
                at_ms: now,
                status: obs.status,
                duration_ms: duration,
                timings: json!({
                    "connect": 1.25, "initialize": duration * 0.4,
                    "tools_list": duration * 0.3, "total": duration,
                }),
                findings: json!([{
                    "code": "MCP104", "severity": "warning",
                    "message": format!("tools/list took {duration} ms, over the 250 ms budget"),
                }]),
                grade: obs.grade.clone(),
                observation: obs,
                state: state.clone(),
                incidents: incidents.clone(),
                events,
                alerts: sent,
                contract: tick
                    .is_multiple_of(97)
                    .then(|| format!("{{\"tick\":{tick}}}")),
                calls: Vec::new(),
            });
        }
    }
}

// ---------------------------------------------------------------------------------------
// The writer (the child).

fn writer(db: &Path) -> Result<()> {
    let mut store = Store::open(db)?;
    let mut fleet = Fleet::resume(&store)?;
    let mut out = std::io::stdout().lock();
    let mut batch = Vec::new();
    while fleet.next_tick < MAX_TICKS {
        let first = fleet.next_tick;
        batch.clear();
        for _ in 0..TICKS_PER_BATCH {
            fleet.tick(&mut batch);
        }
        // A failed write means the parent is gone: stop.
        writeln!(out, "writing {first}")?;
        out.flush()?;
        let started = Instant::now();
        store.record(&batch, &sink_ids())?;
        let took = started.elapsed().as_micros();
        writeln!(out, "committed {} in {took} us", fleet.next_tick - 1)?;
        out.flush()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The scenario (the parent).

/// Kills the child on drop, whatever happens to the test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scenario() -> Result<()> {
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("mcpulse-store-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("history.sqlite3");
    let result = rounds(&db);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = result?;
    println!(
        "store_crash: ok: {summary} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn rounds(db: &Path) -> Result<String> {
    let exe = std::env::current_exe()?;
    let mut reported: Option<u64> = None;
    let mut interrupted = 0;
    let mut batch_us = Vec::new();
    for (round, &(announce, delay)) in ROUNDS.iter().enumerate() {
        let mut child = Killed(
            Command::new(&exe)
                .arg("--writer")
                .arg(db)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?,
        );
        let lines = read_lines(&mut child.0)?;
        // Let it announce `announce` batches, then kill it right after the last announcement:
        // it is then inside that batch's transaction.
        let mut announced = 0;
        let mut last_announced = None;
        while announced < announce {
            let line = next_line(&lines, &mut child)?;
            if let Some(n) = line.strip_prefix("writing ") {
                announced += 1;
                last_announced = Some(n.parse::<u64>()?);
            } else if let Some((n, us)) = committed(&line) {
                reported = Some(n);
                batch_us.push(us);
            }
        }
        std::thread::sleep(delay);
        child.0.kill()?;
        let status = child.0.wait()?;
        // Whatever it printed before dying.
        while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
            if let Some((n, us)) = committed(&line) {
                reported = Some(n);
                batch_us.push(us);
            }
        }
        use std::os::unix::process::ExitStatusExt;
        if status.signal() != Some(9) {
            return Err(
                format!("round {round}: the writer was not killed but ended: {status}").into(),
            );
        }
        let stored = verify(db, reported)?;
        let in_flight = last_announced.ok_or("no batch announced")?;
        if stored <= in_flight {
            interrupted += 1; // the kill came before the announced batch's commit
        }
        eprintln!(
            "store_crash: round {round}: killed {delay:?} after announcing ticks from \
             {in_flight}; reported committed up to tick {reported:?}; {stored} ticks stored"
        );
    }
    if interrupted == 0 {
        return Err("no kill landed before a batch's commit; the test proved nothing".into());
    }
    batch_us.sort_unstable();
    Ok(format!(
        "{} SIGKILLs, {interrupted} of them before the announced batch's commit; a batch of \
         {} records takes {} us (median) to write; every reported batch intact",
        ROUNDS.len(),
        TARGETS * TICKS_PER_BATCH,
        batch_us.get(batch_us.len() / 2).copied().unwrap_or(0),
    ))
}

/// `committed TICK in US us`.
fn committed(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("committed ")?;
    let (tick, rest) = rest.split_once(" in ")?;
    let us = rest.strip_suffix(" us")?;
    Some((tick.parse().ok()?, us.parse().ok()?))
}

/// The writer's stdout, line by line, on a channel (so reads can time out).
fn read_lines(child: &mut Child) -> Result<mpsc::Receiver<String>> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

fn next_line(lines: &mpsc::Receiver<String>, child: &mut Killed) -> Result<String> {
    match lines.recv_timeout(LINE_TIMEOUT) {
        Ok(line) => Ok(line),
        Err(_) => {
            let _ = child.0.kill();
            let mut err = String::new();
            if let Some(mut e) = child.0.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            Err(format!("the writer stopped talking; its stderr: {err}").into())
        }
    }
}

/// Checks the file after a kill; returns the number of ticks stored.
fn verify(db: &Path, reported: Option<u64>) -> Result<u64> {
    let c = Connection::open(db)?;
    let integrity: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if integrity != "ok" {
        return Err(format!("integrity_check: {integrity}").into());
    }
    // Whole batches only, every tick complete, nothing reported lost.
    let mut per_tick =
        c.prepare("SELECT at_ms, count(*) FROM checks GROUP BY at_ms ORDER BY at_ms")?;
    let ticks: Vec<(i64, i64)> = per_tick
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    drop(per_tick);
    for (i, (at_ms, n)) in ticks.iter().enumerate() {
        if *at_ms != at(i as u64) || *n != TARGETS as i64 {
            return Err(format!("tick {i}: {n} checks at {at_ms}: a torn or missing batch").into());
        }
    }
    let stored = ticks.len() as u64;
    if !stored.is_multiple_of(TICKS_PER_BATCH) {
        return Err(format!("{stored} ticks stored: not whole batches").into());
    }
    if let Some(r) = reported
        && stored < r + 1
    {
        return Err(format!(
            "batches up to tick {r} were reported committed; {stored} ticks stored"
        )
        .into());
    }

    // The uninterrupted run up to the same tick.
    let mut fleet = Fleet::new();
    let mut records = Vec::new();
    while fleet.next_tick < stored {
        fleet.tick(&mut records);
    }
    let expected_alerts: Vec<&Alert> = records.iter().flat_map(|r| &r.alerts).collect();
    let expected_events: usize = records.iter().map(|r| r.events.len()).sum();

    // The outbox: every alert once per sink, in order.
    let mut stmt = c.prepare("SELECT sink, alert FROM outbox ORDER BY id")?;
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    if rows.len() != expected_alerts.len() * SINKS {
        return Err(format!(
            "{} outbox rows, expected {} alerts × {SINKS} sinks",
            rows.len(),
            expected_alerts.len()
        )
        .into());
    }
    for sink in sink_ids() {
        let stored: Vec<Alert> = rows
            .iter()
            .filter(|(s, _)| s == sink.as_str())
            .map(|(_, a)| serde_json::from_str(a))
            .collect::<Result<_, _>>()?;
        if stored.iter().ne(expected_alerts.iter().copied()) {
            return Err(
                format!("sink {sink}: the outbox differs from the uninterrupted run").into(),
            );
        }
    }
    if stored > 0 && expected_alerts.is_empty() {
        return Err("the fleet raised no alert; the outbox check proved nothing".into());
    }
    let events: i64 = c.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    if events != expected_events as i64 {
        return Err(format!("{events} events stored, {expected_events} expected").into());
    }
    drop(c);

    // The state to resume: the uninterrupted run's, to the last field.
    let store = Store::open(db)?;
    let mut states = Fleet::new().targets;
    states.extend(store.load_states()?);
    if states != fleet.targets {
        return Err("the stored states or incidents differ from the uninterrupted run".into());
    }
    let flapping = states.values().filter(|(s, _)| s.flapping).count();
    let open: usize = states.values().map(|(_, i)| i.len()).sum();
    eprintln!(
        "store_crash:   {stored} ticks, {} alerts × {SINKS} sinks, {expected_events} events, \
         {open} open incidents, {flapping} flapping targets: as uninterrupted",
        expected_alerts.len()
    );
    Ok(stored)
}
