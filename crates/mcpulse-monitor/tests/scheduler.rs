//! The scheduler (`runner::run`, one target's loop) under paused time, with a scripted prober.
//!
//! Two real transcripts are recorded once, on a thread whose clock runs: a healthy one (the real
//! probe against a testkit legacy Streamable HTTP server) and a down one (the real probe against
//! a loopback port nobody listens on). Each test then runs in a runtime that starts paused, with
//! target loops whose [`Prober`] hands those transcripts back by script: up or down, and how
//! long the "probe" takes, per target and per call. The check clock (`Shared::clock`) is a
//! [`Timebase`] that advances with `tokio::time`, so check times, reminders and maintenance
//! windows are exact: every timing assertion below is an equality, not a range.
//!
//! What is covered: the first check's offset (`runner::phase`), the cadence, a tick missed by a
//! slow probe (skipped, not replayed), the global concurrency limit, thresholds (one down alert,
//! one recovery), reminders, maintenance windows, and stopping (the memory comes back and a
//! restart carries on from it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_monitor::alert::{Action, Kind, dedup_key};
use mcpulse_monitor::check::CheckRecord;
use mcpulse_monitor::config::{self, Maintenance, TargetConfig};
use mcpulse_monitor::fleet::Fleet;
use mcpulse_monitor::runner::{self, Memory, Prober, Shared};
use mcpulse_monitor::sink::Timebase;
use mcpulse_monitor::state::Health;
use mcpulse_probe::{Plan, Target, Transcript};
use mcpulse_testkit::FakeHttp;
use mcpulse_testkit::scenario::{self, Framing};
use mcpulse_wire::version::EraMode;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The wall clock at the start of every test (2027-01-15T08:00:00Z).
const WALL0: i64 = 1_800_000_000_000;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

// ---- transcripts -------------------------------------------------------------------------

/// A healthy and a down transcript from real probes, recorded once per test binary on a
/// thread of its own with a runtime whose clock runs (the tests' own runtimes start paused,
/// where a probe waiting on a socket would see its timeout fire at once).
fn transcripts() -> (Transcript, Transcript) {
    static CACHE: OnceLock<(Transcript, Transcript)> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            std::thread::spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(record_transcripts())
            })
            .join()
            .unwrap()
        })
        .clone()
}

async fn record_transcripts() -> (Transcript, Transcript) {
    let plan = Plan {
        timeout: secs(5),
        security: false,
        ..Plan::default()
    };
    let server = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let healthy = mcpulse_probe::probe(&Target::http(&server.url("/mcp")).unwrap(), &plan).await;
    drop(server);
    // A loopback port that was just free: the connection is refused.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let down = mcpulse_probe::probe(&Target::http(&url).unwrap(), &plan).await;
    let policy = mcpulse_judge::Policy {
        latency_budget_ms: 3000.0,
        expect_auth: false,
    };
    assert_eq!(
        mcpulse_judge::judge(&healthy, &policy).status,
        mcpulse_judge::Status::Healthy,
        "the healthy transcript must judge healthy"
    );
    assert_eq!(
        mcpulse_judge::judge(&down, &policy).status,
        mcpulse_judge::Status::Down,
        "the down transcript must judge down"
    );
    (healthy, down)
}

// ---- the scripted prober -------------------------------------------------------------------

/// What one call of the prober does: answer up or down, after this long.
#[derive(Debug, Clone, Copy)]
struct Step {
    up: bool,
    takes: Duration,
}

const UP: Step = Step {
    up: true,
    takes: Duration::ZERO,
};
const DOWN: Step = Step {
    up: false,
    takes: Duration::ZERO,
};

/// One probe call, as the prober saw it.
#[derive(Debug, Clone)]
struct Call {
    target: String,
    start: Instant,
    end: Option<Instant>,
    /// The era the plan asked for.
    era: EraMode,
}

/// Answers from a script per target (call `k` gets `script[k]`, the last step repeats), and
/// records when each call started and ended, and how many ran at once.
struct Scripted {
    healthy: Transcript,
    down: Transcript,
    scripts: Mutex<BTreeMap<String, Vec<Step>>>,
    calls: Mutex<Vec<Call>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Scripted {
    fn script(&self, target: &str, steps: Vec<Step>) {
        self.scripts
            .lock()
            .unwrap()
            .insert(target.to_owned(), steps);
    }

    /// The era each call of `target` asked for, in order.
    fn eras(&self, target: &str) -> Vec<EraMode> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.target == target)
            .map(|c| c.era)
            .collect()
    }

    /// When each call of `target` started, in order.
    fn starts(&self, target: &str) -> Vec<Instant> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.target == target)
            .map(|c| c.start)
            .collect()
    }
}

/// The target's name: the last path segment of its URL (`http://127.0.0.1:9/<name>`).
fn name_of(target: &Target) -> String {
    match target {
        Target::Http { url } => url.path().trim_start_matches('/').to_owned(),
        Target::Stdio { program, .. } => program.clone(),
    }
}

impl Prober for Scripted {
    fn probe<'a>(
        &'a self,
        target: &'a Target,
        plan: &'a Plan,
    ) -> Pin<Box<dyn Future<Output = Transcript> + Send + 'a>> {
        Box::pin(async move {
            let name = name_of(target);
            let (index, k) = {
                let mut calls = self.calls.lock().unwrap();
                let k = calls.iter().filter(|c| c.target == name).count();
                calls.push(Call {
                    target: name.clone(),
                    start: Instant::now(),
                    end: None,
                    era: plan.era,
                });
                (calls.len() - 1, k)
            };
            let step = {
                let scripts = self.scripts.lock().unwrap();
                let s = scripts
                    .get(&name)
                    .unwrap_or_else(|| panic!("no script for {name}"));
                *s.get(k).or(s.last()).unwrap()
            };
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            if !step.takes.is_zero() {
                tokio::time::sleep(step.takes).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.calls.lock().unwrap()[index].end = Some(Instant::now());
            if step.up {
                self.healthy.clone()
            } else {
                self.down.clone()
            }
        })
    }
}

// ---- the harness ---------------------------------------------------------------------------

struct Harness {
    prober: Arc<Scripted>,
    shared: Shared,
    records: mpsc::Receiver<CheckRecord>,
    /// `tokio::time` when the harness was made: time zero of every schedule below.
    base: Instant,
}

struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<Memory>,
}

impl Running {
    /// Stops the loop through its watch channel and returns its memory.
    async fn stop(self) -> Memory {
        self.stop.send(true).unwrap();
        self.task.await.unwrap()
    }
}

impl Harness {
    /// A prober and a fleet with room for `limit` probes at once. Call it at the start of a
    /// test whose runtime starts paused (`start_paused = true`): timers fire on whole
    /// milliseconds from the runtime's start, so `base` must be that start for every deadline
    /// below to be met exactly rather than rounded up.
    fn new(limit: usize) -> Harness {
        let (healthy, down) = transcripts();
        let prober = Arc::new(Scripted {
            healthy,
            down,
            scripts: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let (tx, records) = mpsc::channel(100_000);
        let clock = Timebase::starting_at(WALL0);
        let shared = Shared {
            prober: prober.clone(),
            semaphore: Arc::new(Semaphore::new(limit)),
            memory: mcpulse_monitor::memory::MemoryBudget::default(),
            records: tx,
            fleet: Fleet::new(),
            maintenance: Arc::new(RwLock::new(Vec::new())),
            clock: Arc::new(move || clock.now_ms()),
            baselines: None,
        };
        Harness {
            prober,
            shared,
            records,
            base: Instant::now(),
        }
    }

    fn start(&self, cfg: &TargetConfig, memory: Memory) -> Running {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(runner::run(cfg.clone(), memory, self.shared.clone(), rx));
        Running { stop, task }
    }

    /// Lets the schedule run until `base + at` (choose an instant between ticks).
    async fn run_until(&self, at: Duration) {
        tokio::time::sleep_until(self.base + at).await;
    }

    /// The records sent to the writer so far (drained), of one target.
    fn take(&mut self, target: &str) -> Vec<CheckRecord> {
        let mut out = Vec::new();
        while let Ok(r) = self.records.try_recv() {
            if r.target == target {
                out.push(r);
            }
        }
        out
    }

    /// `base + at` as the check clock shows it.
    fn wall(&self, at: Duration) -> i64 {
        WALL0 + ms(at)
    }
}

/// Targets from config text (defaults, then `[[targets]]` with `url = "http://127.0.0.1:9/<name>"`).
fn targets(defaults: &str, names: &[&str]) -> Vec<TargetConfig> {
    let mut text = format!("[defaults]\n{defaults}\n");
    for n in names {
        text.push_str(&format!(
            "[[targets]]\nname = \"{n}\"\nurl = \"http://127.0.0.1:9/{n}\"\n"
        ));
    }
    config::parse(&text, "scheduler.toml", Path::new("/nonexistent"), &|_| {
        None
    })
    .unwrap()
    .targets
}

fn one(defaults: &str, name: &str) -> TargetConfig {
    targets(defaults, &[name]).remove(0)
}

/// Every alert in the records, as (action, kind, at_ms, dedup_key).
fn alerts(records: &[CheckRecord]) -> Vec<(Action, Kind, i64, String)> {
    records
        .iter()
        .flat_map(|r| r.alerts.iter())
        .map(|a| (a.action, a.kind, a.at_ms, a.dedup_key.clone()))
        .collect()
}

// ---- the tests -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn first_check_at_the_phase_offset_then_every_interval() {
    let mut h = Harness::new(64);
    let interval = secs(10);
    let cfgs = targets(
        "interval = \"10s\"\ntimeout = \"5s\"\nsecurity = false",
        &["alpha", "bravo", "charlie", "delta"],
    );
    let phases: Vec<Duration> = cfgs
        .iter()
        .map(|c| runner::phase(&c.name, interval))
        .collect();
    // The offsets are the documented hash of the name, inside the interval, and spread out.
    assert!(phases.iter().all(|p| *p < interval));
    let distinct: std::collections::BTreeSet<_> = phases.iter().collect();
    assert!(distinct.len() > 1, "{phases:?}");
    let running: Vec<Running> = cfgs
        .iter()
        .map(|c| {
            h.prober.script(&c.name, vec![UP]);
            h.start(c, Memory::default())
        })
        .collect();
    // Ten intervals and a half: every target has had exactly ten or eleven checks.
    h.run_until(interval * 10 + Duration::from_millis(5_500))
        .await;
    for (c, p) in cfgs.iter().zip(&phases) {
        let expected: Vec<Instant> = (0u32..)
            .map(|k| h.base + *p + interval * k)
            .take_while(|t| *t <= h.base + interval * 10 + Duration::from_millis(5_500))
            .collect();
        assert_eq!(
            h.prober.starts(&c.name),
            expected,
            "{}: phase {p:?}",
            c.name
        );
    }
    for r in running {
        r.stop().await;
    }
    // Check times come from the check clock, which follows tokio::time.
    let alpha = h.take("alpha");
    let p = phases[0];
    let at: Vec<i64> = alpha.iter().map(|r| r.at_ms).collect();
    let want: Vec<i64> = (0..at.len() as u32)
        .map(|k| h.wall(p + interval * k))
        .collect();
    assert_eq!(at, want);
}

#[tokio::test(start_paused = true)]
async fn a_tick_missed_by_a_slow_probe_is_skipped_not_replayed() {
    let h = Harness::new(64);
    let interval = secs(10);
    let cfg = one(
        "interval = \"10s\"\ntimeout = \"5s\"\nsecurity = false",
        "slow",
    );
    let p = runner::phase("slow", interval);
    // The second check takes 25 s: it spans the ticks at p+20 and p+30.
    h.prober.script(
        "slow",
        vec![
            UP,
            Step {
                up: true,
                takes: secs(25),
            },
            UP,
        ],
    );
    let r = h.start(&cfg, Memory::default());
    h.run_until(p + secs(75)).await;
    let _ = r.stop().await;
    let starts: Vec<Duration> = h
        .prober
        .starts("slow")
        .iter()
        .map(|t| *t - h.base)
        .collect();
    // p, p+10 (slow, ends at p+35); then the missed ticks are not replayed in a burst: one
    // check as soon as the slow one is done, and the schedule resumes on its own grid (p+40,
    // p+50, ...), not shifted to the late check.
    let want = vec![
        p,
        p + secs(10),
        p + secs(35),
        p + secs(40),
        p + secs(50),
        p + secs(60),
        p + secs(70),
    ];
    assert_eq!(starts, want);
}

#[tokio::test(start_paused = true)]
async fn the_global_semaphore_bounds_concurrent_probes() {
    let names: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let slow = Step {
        up: true,
        takes: secs(4),
    };
    // Unbounded (64), eight 4 s probes in a 10 s interval overlap...
    let unbounded = {
        let h = Harness::new(64);
        let cfgs = targets(
            "interval = \"10s\"\ntimeout = \"5s\"\nsecurity = false",
            &names,
        );
        let running: Vec<Running> = cfgs
            .iter()
            .map(|c| {
                h.prober.script(&c.name, vec![slow]);
                h.start(c, Memory::default())
            })
            .collect();
        h.run_until(secs(60)).await;
        for r in running {
            r.stop().await;
        }
        h.prober.max_in_flight.load(Ordering::SeqCst)
    };
    assert!(
        unbounded > 2,
        "the probes overlap without a limit: {unbounded}"
    );
    // ...with a limit of 2, never more than two run at once, and every target still gets
    // checked.
    let h = Harness::new(2);
    let cfgs = targets(
        "interval = \"10s\"\ntimeout = \"5s\"\nsecurity = false",
        &names,
    );
    let running: Vec<Running> = cfgs
        .iter()
        .map(|c| {
            h.prober.script(&c.name, vec![slow]);
            h.start(c, Memory::default())
        })
        .collect();
    h.run_until(secs(60)).await;
    for r in running {
        r.stop().await;
    }
    assert_eq!(h.prober.max_in_flight.load(Ordering::SeqCst), 2);
    // Re-derive the bound from the recorded calls, too: no instant with three probes running.
    let calls = h.prober.calls.lock().unwrap().clone();
    for c in &calls {
        let overlapping = calls
            .iter()
            .filter(|o| o.start <= c.start && o.end.is_none_or(|e| e > c.start))
            .count();
        assert!(overlapping <= 2, "{overlapping} probes at {:?}", c.start);
    }
    for n in &names {
        assert!(h.prober.starts(n).len() >= 2, "{n} was starved");
    }
}

#[tokio::test(start_paused = true)]
async fn thresholds_give_one_down_alert_and_one_recovery() {
    let mut h = Harness::new(64);
    let interval = secs(10);
    let cfg = one(
        "interval = \"10s\"\ntimeout = \"5s\"\nfailure_threshold = 3\nsuccess_threshold = 2\nsecurity = false\nera = \"legacy\"",
        "svc",
    );
    let p = runner::phase("svc", interval);
    // (The era is set: in auto mode a check that finds the server down after the era was
    // remembered probes twice, and these scripts give one step per check.)
    // Checks 0-2 up; 3-8 down (with one up in the middle that must not reset anything
    // visible); then up.
    h.prober.script(
        "svc",
        vec![
            UP, UP, UP, DOWN, DOWN, UP, DOWN, DOWN, DOWN, DOWN, UP, DOWN, UP, UP, UP,
        ],
    );
    let r = h.start(&cfg, Memory::default());
    h.run_until(p + interval * 16 + secs(5)).await;
    let memory = r.stop().await;
    let records = h.take("svc");
    assert_eq!(records.len(), 17);
    let statuses: Vec<Health> = records.iter().map(|r| r.state.status).collect();
    use Health::*;
    assert_eq!(
        statuses,
        vec![
            Healthy, Healthy, Healthy, Healthy, Healthy,
            Healthy, // a down pair, an up: no change
            Healthy, Healthy, Down, // the third down in a row confirms it (check 8)
            Down, Down, Down, // one up (10) is not a recovery
            Down, Healthy, // the second up in a row (13) is
            Healthy, Healthy, Healthy,
        ]
    );
    let key = dedup_key("svc", "status");
    assert_eq!(
        alerts(&records),
        vec![
            (
                Action::Trigger,
                Kind::Down,
                h.wall(p + interval * 8),
                key.clone()
            ),
            (
                Action::Resolve,
                Kind::Recovered,
                h.wall(p + interval * 13),
                key.clone()
            ),
        ]
    );
    // The records carry the incident while it is open, and the transitions as events.
    assert!(records[8].incidents.contains_key("status"));
    assert!(records[12].incidents.contains_key("status"));
    assert!(records[13].incidents.is_empty());
    assert!(memory.incidents.is_empty());
    // The fleet view follows the confirmed status.
    let view = h.shared.fleet.get("svc").unwrap();
    assert_eq!(view.status, Healthy);
    assert_eq!(view.since_ms, Some(h.wall(p + interval * 13)));
}

/// With the default interval, thresholds and flap settings, a server that goes down for 3
/// checks and comes back for 2, again and again, is flapping: one `flapping` alert. Its checks
/// do not land on the dot (here each probe takes 10 ms more than the one before, a server
/// slowing down as it flaps): 5 transitions take 10 intervals and a little more, which the
/// old fixed 10-minute window never held (it held them only when every check ran on the dot).
#[tokio::test(start_paused = true)]
async fn with_the_defaults_a_server_down_three_checks_up_two_is_flapping() {
    let mut h = Harness::new(64);
    let cfg = one("security = false\nera = \"legacy\"", "svc");
    assert_eq!(cfg.interval, secs(60), "the default interval");
    assert_eq!(
        (
            cfg.failure_threshold,
            cfg.success_threshold,
            cfg.flap_threshold
        ),
        (3, 2, 4)
    );
    let interval = cfg.interval;
    let p = runner::phase("svc", interval);
    let slower = |k: u64, up: bool| Step {
        up,
        takes: Duration::from_millis(10 * k),
    };
    // Two healthy checks, then six rounds of down 3, up 2.
    let mut steps = vec![slower(0, true), slower(1, true)];
    for round in 0..6u64 {
        for i in 0..5u64 {
            steps.push(slower(2 + round * 5 + i, i >= 3));
        }
    }
    let checks = steps.len() as u32;
    h.prober.script("svc", steps);
    let r = h.start(&cfg, Memory::default());
    h.run_until(p + interval * checks - secs(30)).await;
    r.stop().await;
    let records = h.take("svc");
    assert_eq!(records.len(), checks as usize);
    let flapping: Vec<_> = alerts(&records)
        .into_iter()
        .filter(|a| a.1 == Kind::Flapping)
        .collect();
    assert!(
        matches!(
            flapping.first(),
            Some((Action::Trigger, Kind::Flapping, ..))
        ),
        "{:?}",
        alerts(&records)
    );
    // Detected at the fifth transition: the third outage confirmed, at its third down check
    // (check 2 + 2·5 + 2 = 14).
    let first = records
        .iter()
        .position(|r| r.state.flapping)
        .expect("flapping");
    assert_eq!(first, 14, "{:?}", alerts(&records));
}

/// With the defaults, one outage and its recovery are two transitions: not flapping.
#[tokio::test(start_paused = true)]
async fn with_the_defaults_one_outage_and_recovery_is_not_flapping() {
    let mut h = Harness::new(64);
    let cfg = one("security = false\nera = \"legacy\"", "svc");
    let interval = cfg.interval;
    let p = runner::phase("svc", interval);
    let mut steps = vec![UP, UP];
    steps.extend([DOWN; 6]);
    steps.extend([UP; 20]);
    let checks = steps.len() as u32;
    h.prober.script("svc", steps);
    let r = h.start(&cfg, Memory::default());
    h.run_until(p + interval * checks - secs(30)).await;
    r.stop().await;
    let records = h.take("svc");
    assert!(records.iter().all(|r| !r.state.flapping));
    let kinds: Vec<(Action, Kind)> = alerts(&records).iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(
        kinds,
        vec![
            (Action::Trigger, Kind::Down),
            (Action::Resolve, Kind::Recovered)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn reminders_fire_at_the_configured_interval() {
    let mut h = Harness::new(64);
    let interval = secs(10);
    let cfg = one(
        "interval = \"10s\"\ntimeout = \"5s\"\nfailure_threshold = 2\nreminder = \"1m\"\nsecurity = false",
        "svc",
    );
    let p = runner::phase("svc", interval);
    h.prober.script("svc", vec![DOWN]);
    let r = h.start(&cfg, Memory::default());
    h.run_until(p + secs(205)).await;
    r.stop().await;
    let key = dedup_key("svc", "status");
    // Down confirmed at the second check (p+10); reminded every minute after it, at the first
    // check at least a minute after the last notice.
    assert_eq!(
        alerts(&h.take("svc")),
        vec![
            (
                Action::Trigger,
                Kind::Down,
                h.wall(p + secs(10)),
                key.clone()
            ),
            (
                Action::Remind,
                Kind::Down,
                h.wall(p + secs(70)),
                key.clone()
            ),
            (
                Action::Remind,
                Kind::Down,
                h.wall(p + secs(130)),
                key.clone()
            ),
            (
                Action::Remind,
                Kind::Down,
                h.wall(p + secs(190)),
                key.clone()
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_maintenance_window_silences_alerts_and_the_outage_pages_when_it_ends() {
    let mut h = Harness::new(64);
    let interval = secs(10);
    let defaults = "interval = \"10s\"\ntimeout = \"5s\"\nfailure_threshold = 2\nsecurity = false";
    let cfgs = targets(defaults, &["quiet", "loud"]);
    // A window over "quiet" only, for the first five minutes.
    *h.shared.maintenance.write().unwrap() = vec![Maintenance {
        targets: vec!["quiet".into()],
        start_ms: WALL0 - 1,
        end_ms: WALL0 + 300_000,
    }];
    let pq = runner::phase("quiet", interval);
    // Down from the start; it recovers inside the window, goes down again, and is still down
    // when the window ends.
    let mut quiet = vec![DOWN; 6];
    quiet.extend([UP, UP, UP]);
    quiet.push(DOWN);
    h.prober.script("quiet", quiet);
    h.prober.script("loud", vec![DOWN]);
    let running: Vec<Running> = cfgs.iter().map(|c| h.start(c, Memory::default())).collect();
    // Inside the window: "quiet" goes down, recovers and goes down again without a word;
    // "loud" (not in the window) pages.
    h.run_until(secs(290)).await;
    let mut records = Vec::new();
    while let Ok(r) = h.records.try_recv() {
        records.push(r);
    }
    let quiet_records: Vec<CheckRecord> = records
        .iter()
        .filter(|r| r.target == "quiet")
        .cloned()
        .collect();
    let loud_records: Vec<CheckRecord> = records
        .iter()
        .filter(|r| r.target == "loud")
        .cloned()
        .collect();
    assert!(
        quiet_records
            .iter()
            .any(|r| r.events.iter().any(|e| matches!(
                e,
                mcpulse_monitor::state::Event::Transition {
                    to: Health::Down,
                    ..
                }
            ))),
        "the transitions are still recorded"
    );
    assert_eq!(alerts(&quiet_records), vec![], "silenced");
    assert!(quiet_records.iter().all(|r| r.incidents.is_empty()));
    assert_eq!(quiet_records.last().unwrap().state.status, Health::Down);
    let loud = alerts(&loud_records);
    assert_eq!(loud.len(), 1, "{loud:?}");
    assert_eq!((loud[0].0, loud[0].1), (Action::Trigger, Kind::Down));
    // After the window: the outage that is still there is paged once, at the first check
    // after the window, and not again.
    h.run_until(secs(400)).await;
    for r in running {
        r.stop().await;
    }
    let after = h.take("quiet");
    let first_after = (0u32..)
        .map(|k| pq + interval * k)
        .find(|t| WALL0 + ms(*t) >= WALL0 + 300_000)
        .unwrap();
    assert_eq!(
        alerts(&after),
        vec![(
            Action::Trigger,
            Kind::Down,
            h.wall(first_after),
            dedup_key("quiet", "status")
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn stopping_returns_the_memory_and_a_restart_carries_on() {
    let mut h = Harness::new(64);
    let interval = secs(10);
    let cfg = one(
        "interval = \"10s\"\ntimeout = \"5s\"\nfailure_threshold = 3\nsuccess_threshold = 2\nsecurity = false\nera = \"legacy\"",
        "svc",
    );
    let p = runner::phase("svc", interval);
    // (The era is set, as above: one probe per check.) Up, then two downs: one short of the threshold when it stops.
    h.prober.script("svc", vec![UP, DOWN, DOWN, DOWN, DOWN, UP]);
    let r = h.start(&cfg, Memory::default());
    let stopped = p + interval * 2 + secs(5);
    h.run_until(stopped).await;
    let memory = r.stop().await;
    assert_eq!(memory.state.status, Health::Healthy);
    assert_eq!(memory.state.streak, Some((Health::Down, 2)));
    assert!(memory.accepted.is_some(), "the contract baseline is kept");
    assert_eq!(h.take("svc").len(), 3);
    // Stopped means stopped: no check while it is not running.
    let restarted = stopped + interval * 4;
    h.run_until(restarted).await;
    assert_eq!(h.prober.starts("svc").len(), 3);
    // Restarted with its memory: its first check is at the phase offset again, and that down
    // is the third in a row, which confirms it.
    let r = h.start(&cfg, memory);
    h.run_until(restarted + p + secs(1)).await;
    let memory = r.stop().await;
    assert_eq!(
        *h.prober.starts("svc").last().unwrap(),
        h.base + restarted + p
    );
    let records = h.take("svc");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].state.status, Health::Down);
    let key = dedup_key("svc", "status");
    assert_eq!(
        alerts(&records),
        vec![(
            Action::Trigger,
            Kind::Down,
            h.wall(restarted + p),
            key.clone()
        )]
    );
    // The open incident carries over a stop too: no second page, and one resolve.
    assert!(memory.incidents.contains_key("status"));
    let again = restarted + p + secs(1);
    let r = h.start(&cfg, memory);
    h.run_until(again + p + interval * 3 + secs(5)).await;
    let memory = r.stop().await;
    let records = h.take("svc");
    assert_eq!(
        records.iter().map(|r| r.state.status).collect::<Vec<_>>(),
        vec![Health::Down, Health::Down, Health::Healthy, Health::Healthy]
    );
    assert_eq!(
        alerts(&records),
        vec![(
            Action::Resolve,
            Kind::Recovered,
            h.wall(again + p + interval * 2),
            key
        )]
    );
    assert!(memory.incidents.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stdio_target_keeps_the_era_it_was_found_in_and_detects_again_before_counting_a_failure()
{
    let mut h = Harness::new(64);
    let text = "[defaults]\ninterval = \"60s\"\ntimeout = \"5s\"\n\
                [[targets]]\nname = \"files\"\ncommand = [\"stdio-server\"]\n\
                [[targets]]\nname = \"web\"\nurl = \"http://127.0.0.1:9/web\"\n";
    let cfgs = config::parse(text, "scheduler.toml", Path::new("/nonexistent"), &|_| None)
        .unwrap()
        .targets;
    // Up, up; then the pinned era fails once (the server changed era), and auto mode finds it
    // up again at once; up from then on.
    h.prober.script("stdio-server", vec![UP, UP, DOWN, UP]);
    h.prober.script("web", vec![UP]);
    let running: Vec<Running> = cfgs.iter().map(|c| h.start(c, Memory::default())).collect();
    // 70 checks each: past the hour after the era was first found (check 0).
    h.run_until(secs(70 * 60)).await;
    for r in running {
        r.stop().await;
    }
    let eras = h.prober.eras("stdio-server");
    assert_eq!(
        eras.len(),
        71,
        "70 checks, one of them probed twice: {eras:?}"
    );
    let (auto, legacy) = (EraMode::Auto, EraMode::Legacy);
    // Found legacy at check 0 and pinned; the pinned probe of check 2 fails, so check 2 probes
    // again in auto mode (call 3) and counts that.
    assert_eq!(eras[..5], [auto, legacy, legacy, auto, legacy], "{eras:?}");
    // The pin from check 0 lasts an hour (60 checks at 60 s): check 60 (call 61) detects again.
    let detections: Vec<usize> = (0..eras.len()).filter(|&i| eras[i] == auto).collect();
    assert_eq!(detections, [0, 3, 61], "{eras:?}");
    // The era change never showed as a failed check.
    let records = h.take("files");
    assert_eq!(records.len(), 70);
    assert!(
        records.iter().all(|r| r.status == Health::Healthy),
        "{:?}",
        records.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    // An HTTP target (this legacy one) detects afresh every 10th check: detection costs it a
    // request, not a second process.
    let web = h.prober.eras("web");
    assert_eq!(web.len(), 70);
    let detections: Vec<usize> = (0..web.len()).filter(|&i| web[i] == auto).collect();
    assert_eq!(detections, [0, 10, 20, 30, 40, 50, 60], "{web:?}");
}

/// An HTTP target checked less often than every six minutes detects afresh hourly, before its
/// tenth check; a pinned check that finds it down is made again in auto mode before it counts.
#[tokio::test(start_paused = true)]
async fn an_http_target_detects_its_era_afresh_at_least_hourly() {
    let mut h = Harness::new(64);
    let cfg = one("interval = \"10m\"\ntimeout = \"5s\"", "web");
    h.prober.script("web", vec![UP, UP, DOWN, UP]);
    let running = h.start(&cfg, Memory::default());
    // 13 checks: 0 .. 12, at 10-minute steps after the phase offset.
    h.run_until(runner::phase("web", secs(600)) + secs(12 * 600 + 1))
        .await;
    running.stop().await;
    let eras = h.prober.eras("web");
    let (auto, legacy) = (EraMode::Auto, EraMode::Legacy);
    // Check 2's pinned probe (call 2) fails: call 3 retries in auto mode, and counts.
    assert_eq!(eras[..5], [auto, legacy, legacy, auto, legacy], "{eras:?}");
    // The pin of check 0 ends an hour later, at check 6 (call 7), and that one at check 12.
    let detections: Vec<usize> = (0..eras.len()).filter(|&i| eras[i] == auto).collect();
    assert_eq!(detections, [0, 3, 7, 13], "{eras:?}");
    let records = h.take("web");
    assert_eq!(records.len(), 13);
    assert!(records.iter().all(|r| r.status == Health::Healthy));
}

/// Review of c75cf77: an accept requested while a check's probe is in flight is not taken by
/// that check (its probe may have fetched the contract before the request, the contract being
/// accepted away): the next check's probe, started after the request, takes it. The accept
/// stays pending until the store has written the baseline.
#[tokio::test(start_paused = true)]
async fn an_accept_is_taken_only_by_a_check_whose_probe_started_after_it() {
    let mut h = Harness::new(4);
    let cfg = one("interval = \"60s\"\ntimeout = \"30s\"", "acc");
    h.shared.fleet.set_config(std::slice::from_ref(&cfg));
    // Every probe takes 20 s.
    h.prober.script(
        "acc",
        vec![Step {
            up: true,
            takes: secs(20),
        }],
    );
    let phase = runner::phase("acc", secs(60));
    let running = h.start(&cfg, Memory::default());
    // The first check takes the first baseline.
    h.run_until(phase + secs(30)).await;
    let first = h.take("acc");
    assert_eq!(first.len(), 1);
    assert!(first[0].contract.is_some());
    // The second check's probe runs from phase + 60 s to phase + 80 s: the accept comes
    // in between.
    h.run_until(phase + secs(70)).await;
    assert!(h.shared.fleet.request_accept("acc"));
    h.run_until(phase + secs(90)).await;
    let second = h.take("acc");
    assert_eq!(second.len(), 1);
    assert_eq!(
        second[0].contract, None,
        "its probe started before the request"
    );
    assert!(h.shared.fleet.get("acc").unwrap().accept_pending);
    // The third check's probe starts after the request: it takes it.
    h.run_until(phase + secs(150)).await;
    let third = h.take("acc");
    assert_eq!(third.len(), 1);
    assert!(third[0].contract.is_some(), "the accept is taken");
    let view = h.shared.fleet.get("acc").unwrap();
    assert!(view.accept_pending, "pending until the store wrote it");
    assert_eq!(view.baseline, None);
    let digest = third[0].observation.contract_digest.clone().unwrap();
    h.shared
        .fleet
        .baseline_stored("acc", &digest, third[0].at_ms);
    let view = h.shared.fleet.get("acc").unwrap();
    assert!(!view.accept_pending);
    assert_eq!(view.baseline.unwrap().accepted_ms, third[0].at_ms);
    running.stop().await;
}

/// Review of c75cf77: a stored baseline whose read failed (here the real file's `targets`
/// table is out of reach, as a read error of the store would be) is not an error until an
/// accept: it is read again before the next check, and drift is judged against it from then
/// on. Meanwhile the target's view and `/readyz` (a `warn`) say why drift is not judged. A
/// baseline whose text does not parse stays an error (only an accept replaces it).
#[tokio::test(start_paused = true)]
async fn a_baseline_whose_read_failed_is_read_again_at_the_next_check() {
    use mcpulse_monitor::runner::BaselineRead;
    use mcpulse_monitor::store::Store;
    let dir = mcpulse_testkit::TempDir::new("baseline-read");
    let db = dir.join("mcpulse.db");
    let store = Arc::new(Mutex::new(Store::open(&db).unwrap()));
    let mut h = Harness::new(4);
    let reader = store.clone();
    h.shared.baselines = Some(Arc::new(move |name: &str| {
        reader.lock().unwrap().accepted_contract_at(name)
    }));
    let (healthy, _) = transcripts();
    let policy = mcpulse_judge::Policy {
        latency_budget_ms: 3000.0,
        expect_auth: false,
    };
    let contract = mcpulse_judge::judge(&healthy, &policy).contract.unwrap();
    let text = serde_json::to_string(&contract).unwrap();
    let cfgs = targets("interval = \"60s\"", &["reread", "garbled"]);
    h.shared.fleet.set_config(&cfgs);
    {
        let mut s = store.lock().unwrap();
        s.set_accepted_contract("reread", &text, 500).unwrap();
        s.set_accepted_contract("garbled", "{\"not\": \"a baseline\"}", 500)
            .unwrap();
    }
    let disk = rusqlite::Connection::open(&db).unwrap();
    disk.execute_batch("ALTER TABLE targets RENAME TO targets_away;")
        .unwrap();
    let mut reread = Memory::default();
    BaselineRead::of(store.lock().unwrap().accepted_contract_at("reread")).apply(
        "reread",
        &mut reread,
        &h.shared.fleet,
    );
    let error = h
        .shared
        .fleet
        .get("reread")
        .unwrap()
        .baseline_error
        .unwrap();
    assert!(
        error.starts_with("reading the stored baseline failed"),
        "{error}"
    );
    let ready = h.shared.fleet.snapshot().readiness(WALL0);
    let baselines = ready.iter().find(|c| c.name == "baselines").unwrap();
    assert_eq!(baselines.status, mcpulse_policy::health::CheckStatus::Warn);
    assert!(
        baselines
            .output
            .as_deref()
            .unwrap()
            .starts_with("drift is not judged for reread: reading the stored baseline failed"),
        "{baselines:?}"
    );
    // The store reads again.
    disk.execute_batch("ALTER TABLE targets_away RENAME TO targets;")
        .unwrap();
    let mut garbled = Memory::default();
    BaselineRead::of(store.lock().unwrap().accepted_contract_at("garbled")).apply(
        "garbled",
        &mut garbled,
        &h.shared.fleet,
    );
    h.prober.script("reread", vec![UP]);
    h.prober.script("garbled", vec![UP]);
    let running = [h.start(&cfgs[0], reread), h.start(&cfgs[1], garbled)];
    h.run_until(secs(61)).await;
    let reread = h.shared.fleet.get("reread").unwrap();
    assert_eq!(reread.baseline_error, None, "read again at its check");
    assert_eq!(reread.baseline.unwrap().digest, contract.digest);
    let garbled = h.shared.fleet.get("garbled").unwrap();
    assert!(
        garbled
            .baseline_error
            .unwrap()
            .starts_with("the stored baseline cannot be parsed"),
    );
    let [r, g] = running;
    let memory = r.stop().await;
    assert!(memory.accepted.is_some());
    assert!(!memory.baseline_unread);
    assert!(g.stop().await.accepted.is_none());
    // No record carries a new baseline: the garbled one is replaced by an accept alone, and
    // the one read again is the server's contract already.
    let records: Vec<CheckRecord> = std::iter::from_fn(|| h.records.try_recv().ok()).collect();
    for name in ["reread", "garbled"] {
        assert!(records.iter().any(|r| r.target == name), "{name} checked");
    }
    assert!(records.iter().all(|r| r.contract.is_none()), "{records:?}");
}

/// Review of 1e23492: a baseline read that keeps failing is read again backing off (15 s,
/// doubling up to 10 min), not at every check; and before the probe slot is taken (the read
/// waits on the store's lock, held by a writer retrying a failing write: it must not hold a
/// slot of the fleet's meanwhile).
#[tokio::test(start_paused = true)]
async fn a_failing_baseline_read_is_retried_backing_off_and_before_the_probe_slot() {
    use mcpulse_monitor::store::StoreError;
    // No probe slot free at first.
    let mut h = Harness::new(0);
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    h.shared.baselines = Some(Arc::new(move |_: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::Locked {
            path: "mcpulse.db".into(),
        })
    }));
    let cfg = one("interval = \"10s\"\ntimeout = \"5s\"", "unread");
    h.shared.fleet.set_config(std::slice::from_ref(&cfg));
    h.prober.script(&cfg.name, vec![UP]);
    let memory = Memory {
        baseline_unread: true,
        baseline_error: Some("reading the stored baseline failed".into()),
        ..Memory::default()
    };
    let running = h.start(&cfg, memory);
    h.run_until(Duration::from_secs(60)).await;
    assert!(h.take("unread").is_empty(), "no slot: no check");
    assert_eq!(reads.load(Ordering::SeqCst), 1, "read before the slot");

    // Slots free: a check every 10 s for ten minutes, the read tried 15, 30, 60, 120, 240 s
    // after the last failure.
    h.shared.semaphore.add_permits(4);
    h.run_until(Duration::from_secs(660)).await;
    assert!(h.take("unread").len() >= 55);
    let n = reads.load(Ordering::SeqCst);
    assert!((5..=7).contains(&n), "{n} reads");
    let memory = running.stop().await;
    assert!(memory.baseline_unread);
    assert!(memory.baseline_error.is_some());
}
