//! The supervisor in-process, against real scripted children (mcpulse-testkit's `sh` servers),
//! the client's side through `tokio::io::duplex`. Short real intervals (100 ms heartbeats);
//! every wait is bounded, and every test ends by checking that no process it started (child,
//! grandchild, `setsid` escapee) is left running.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_relay::status::{CallOutcome, ChildState, HeartbeatOutcome, Observer, RestartReason};
use mcpulse_relay::supervise::{
    Backoff, HeartbeatPolicy, Outcome, Program, RestartPolicy, Settings, Timeouts, codes, run,
    run_until,
};
use mcpulse_testkit::stdio::{read_pids, still_running_after};
use mcpulse_testkit::{Act, StdioScript, TempDir};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;

/// What the observer saw.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    State(ChildState),
    Restart(&'static str),
    Heartbeat(HeartbeatOutcome),
    Tool(String, CallOutcome),
    Junk(String),
    /// The status's `fatal_reason` (what `/readyz` shows in FATAL).
    FatalReason(String),
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl Recorder {
    fn push(&self, s: Seen) {
        self.0.lock().unwrap().push(s);
    }
    fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
    fn count(&self, f: impl Fn(&Seen) -> bool) -> usize {
        self.all().iter().filter(|s| f(s)).count()
    }
}

impl Observer for Recorder {
    fn status(&self, status: &mcpulse_relay::status::Status) {
        let mut v = self.0.lock().unwrap();
        if let Some(why) = &status.fatal_reason
            && !v.contains(&Seen::FatalReason(why.clone()))
        {
            v.push(Seen::FatalReason(why.clone()));
        }
        if v.iter().rev().find_map(|s| match s {
            Seen::State(st) => Some(*st),
            _ => None,
        }) != Some(status.state)
        {
            v.push(Seen::State(status.state));
        }
    }
    fn restart(&self, reason: &RestartReason) {
        self.push(Seen::Restart(reason.label()));
    }
    fn heartbeat(&self, outcome: HeartbeatOutcome, _latency: Option<Duration>) {
        self.push(Seen::Heartbeat(outcome));
    }
    fn tool_call(&self, tool: &str, outcome: CallOutcome, _latency: Duration) {
        self.push(Seen::Tool(tool.to_owned(), outcome));
    }
    fn junk_line(&self, line: &str) {
        self.push(Seen::Junk(line.to_owned()));
    }
}

/// Fast settings: 100 ms heartbeats (80 ms timeout), 3 failures, 200 ms busy grace, a 20 ms →
/// 100 ms backoff, 5 restarts a minute, 300 ms stop grace.
fn settings(script: &Path) -> Settings {
    let mut s = Settings::new(Program {
        program: "sh".into(),
        args: vec![script.to_string_lossy().into_owned()],
    });
    s.heartbeat_interval = Duration::from_millis(100);
    s.heartbeat_timeout = Duration::from_millis(80);
    s.heartbeat = HeartbeatPolicy {
        failures: 3,
        busy_grace: Duration::from_millis(200),
    };
    s.restart = RestartPolicy {
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(100),
        },
        reset_after: Duration::from_secs(60),
        max_restarts: 5,
        window: Duration::from_secs(60),
    };
    s.stop_grace = Duration::from_millis(300);
    s.start_timeout = Duration::from_secs(3);
    s
}

/// A healthy legacy server that records its pid in `pids`, answers `initialize`, `ping`,
/// `tools/list` and `tools/call`, and does `rules` first (a script's first matching rule wins).
fn server(pids: &Path, rules: Vec<(&str, Vec<Act>)>) -> StdioScript {
    let mut script = StdioScript::new().at_start(Act::RecordPid(pids.to_path_buf()));
    for (method, acts) in rules {
        script = script.on(method, acts);
    }
    script
        .on(
            "initialize",
            vec![Act::Result(mcpulse_testkit::mcp::initialize_result(
                mcpulse_testkit::mcp::LEGACY,
            ))],
        )
        .on("ping", vec![Act::Result(json!({}))])
        .on(
            "tools/list",
            vec![Act::Result(
                json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
            )],
        )
        .on(
            "tools/call",
            vec![Act::Result(
                json!({"content": [{"type": "text", "text": "hi"}]}),
            )],
        )
}

struct Client {
    input: Option<DuplexStream>,
    output: Lines<BufReader<DuplexStream>>,
    task: JoinHandle<Outcome>,
    seen: Arc<Recorder>,
}

const WAIT: Duration = Duration::from_secs(10);

impl Client {
    fn start(settings: Settings) -> Client {
        let (input, sup_in) = tokio::io::duplex(1 << 20);
        let (sup_out, output) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Recorder::default());
        let task = tokio::spawn(run(settings, sup_in, sup_out, seen.clone()));
        Client {
            input: Some(input),
            output: BufReader::new(output).lines(),
            task,
            seen,
        }
    }

    async fn send(&mut self, v: Value) {
        let input = self.input.as_mut().unwrap();
        input.write_all(format!("{v}\n").as_bytes()).await.unwrap();
    }

    /// One line as written (a spelling `json!` would normalise).
    async fn send_raw(&mut self, line: &str) {
        let input = self.input.as_mut().unwrap();
        input
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.output.next_line())
            .await
            .expect("no message from the supervisor within 10 s")
            .unwrap()
            .expect("the supervisor closed its output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Nothing arrives within `d`.
    async fn quiet(&mut self, d: Duration) {
        if let Ok(line) = tokio::time::timeout(d, self.output.next_line()).await {
            panic!("unexpected output: {line:?}");
        }
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let reply = self.recv().await;
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    async fn initialize(&mut self) -> Value {
        let reply = self
            .request(
                1,
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        reply
    }

    /// Closes the client's input; returns the outcome and what was still written.
    async fn close(mut self) -> (Outcome, Vec<Value>) {
        drop(self.input.take());
        let mut rest = Vec::new();
        while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, self.output.next_line()).await {
            rest.push(serde_json::from_str(&line).unwrap());
        }
        let outcome = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the supervisor did not stop within 10 s")
            .unwrap();
        (outcome, rest)
    }
}

fn assert_all_gone(files: &[&Path]) {
    let pids: Vec<u32> = files.iter().flat_map(|f| read_pids(f)).collect();
    assert!(!pids.is_empty(), "no pid was recorded");
    let left = still_running_after(&pids, Duration::from_secs(3));
    mcpulse_testkit::stdio::kill(&left);
    assert!(left.is_empty(), "left running: {left:?} of {pids:?}");
}

/// The file's text once it exists (a script writes it when it gets to it; bounded).
async fn wait_for_file(path: &Path) -> String {
    let until = std::time::Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return text;
        }
        assert!(
            std::time::Instant::now() < until,
            "{} never written",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills every process recorded in these files when dropped: a failing test (a panic before
/// its last check) leaves nothing behind either, a `setsid` escapee included.
struct Reap(Vec<std::path::PathBuf>);

impl Drop for Reap {
    fn drop(&mut self) {
        let pids: Vec<u32> = self.0.iter().flat_map(|f| read_pids(f)).collect();
        mcpulse_testkit::stdio::kill(&pids);
    }
}

fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {reply}"))
}

#[tokio::test]
async fn relays_both_ways_and_keeps_its_heartbeats_to_itself() {
    let dir = TempDir::new("relay");
    let pids = dir.join("pids");
    let script = server(&pids, vec![]).write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    let init = c.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let reply = c
        .request(2, "tools/call", json!({"name": "echo", "arguments": {}}))
        .await;
    assert_eq!(reply["result"]["content"][0]["text"], "hi");
    // Several heartbeats go by; none of their replies reaches the client.
    c.quiet(Duration::from_millis(600)).await;
    let seen = c.seen.all();
    assert!(
        c.seen
            .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Ok))
            >= 3,
        "{seen:?}"
    );
    assert!(seen.contains(&Seen::Tool("echo".into(), CallOutcome::Ok)));
    assert!(seen.contains(&Seen::State(ChildState::Running)));
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(read_pids(&pids).len(), 1, "restarted without cause");
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn no_heartbeat_before_the_clients_handshake() {
    let dir = TempDir::new("nohandshake");
    let pids = dir.join("pids");
    let lines = dir.join("lines");
    let script =
        server(&pids, vec![("ping", vec![Act::RecordLine(lines.clone())])]).write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.quiet(Duration::from_millis(500)).await;
    assert!(!lines.exists(), "pinged before the client's initialize");
    assert_eq!(c.seen.count(|s| matches!(s, Seen::Heartbeat(_))), 0);
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_hung_child_is_restarted_and_the_session_goes_on() {
    let dir = TempDir::new("hang");
    let pids = dir.join("pids");
    let lines = dir.join("inits");
    // `hang` blocks the server for good, ignoring SIGTERM.
    let script = server(
        &pids,
        vec![
            (
                "initialize",
                vec![
                    Act::RecordLine(lines.clone()),
                    Act::Result(mcpulse_testkit::mcp::initialize_result(
                        mcpulse_testkit::mcp::LEGACY,
                    )),
                ],
            ),
            ("tools/call", vec![Act::Hang]),
        ],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow"}}))
        .await;
    // Busy for 200 ms, then three failed heartbeats: restarted, and the call is answered.
    let lost = c.recv().await;
    assert_eq!(lost["id"], 5);
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED, "{lost}");
    let message = lost["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("stopped answering (3 heartbeats missed)"),
        "{message}"
    );
    // The new child got the replayed initialize (and its reply was not forwarded).
    let tools = c.request(6, "tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"][0]["name"], "echo", "{tools}");
    assert_eq!(read_pids(&pids).len(), 2);
    let inits = std::fs::read_to_string(&lines).unwrap();
    assert_eq!(inits.lines().count(), 2, "{inits}");
    assert!(
        inits.lines().nth(1).unwrap().contains("\"mcpulse-"),
        "replayed under our id: {inits}"
    );
    let seen = c.seen.all();
    assert!(seen.contains(&Seen::Restart("unresponsive")), "{seen:?}");
    assert!(
        seen.contains(&Seen::Heartbeat(HeartbeatOutcome::Busy)),
        "{seen:?}"
    );
    assert!(seen.contains(&Seen::Tool("slow".into(), CallOutcome::Lost)));
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_slow_answer_while_busy_is_busy_not_a_restart() {
    let dir = TempDir::new("busy");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![(
            "tools/call",
            vec![Act::Sleep(900), Act::Result(json!({"content": []}))],
        )],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.heartbeat.busy_grace = Duration::from_secs(5);
    // It asserts that no heartbeat failed: a roomier timeout than 80 ms, so that a loaded
    // machine (a fork of `sed` per message in the scripted server) does not fail one before
    // the call; the 900 ms call still misses several.
    s.heartbeat_interval = Duration::from_millis(200);
    s.heartbeat_timeout = Duration::from_millis(150);
    let mut c = Client::start(s);
    c.initialize().await;
    let reply = c.request(2, "tools/call", json!({"name": "slow"})).await;
    assert!(reply["result"].is_object(), "{reply}");
    let seen = c.seen.all();
    assert!(
        seen.contains(&Seen::Heartbeat(HeartbeatOutcome::Busy)),
        "{seen:?}"
    );
    assert!(seen.contains(&Seen::State(ChildState::Busy)), "{seen:?}");
    assert!(
        !seen.iter().any(|s| matches!(s, Seen::Restart(_))),
        "{seen:?}"
    );
    assert_eq!(
        c.seen
            .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Failed)),
        0
    );
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_eq!(read_pids(&pids).len(), 1);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_crash_answers_the_request_in_flight_with_the_reason_and_stderr() {
    let dir = TempDir::new("crash");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![(
            "crash",
            vec![
                Act::Stderr("fatal: \u{1b}[31mout of memory".into()),
                Act::Exit(3),
            ],
        )],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    let message = lost["error"]["message"].as_str().unwrap();
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(message.contains("out of memory"), "{message}");
    assert!(
        !message.contains('\u{1b}'),
        "stderr not made inert: {message:?}"
    );
    let next = c.request(3, "tools/call", json!({"name": "echo"})).await;
    assert!(next["result"].is_object(), "{next}");
    assert!(c.seen.all().contains(&Seen::Restart("exited")));
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_eq!(read_pids(&pids).len(), 2);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_child_that_exits_at_start_once_is_restarted_and_then_serves() {
    let dir = TempDir::new("exitstart");
    let pids = dir.join("pids");
    let script = server(&pids, vec![])
        .at_start(Act::ExitOnce(dir.join("once")))
        .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    // Give the first child time to die; the client's initialize then reaches the second.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let init = c.initialize().await;
    assert!(init["result"].is_object(), "{init}");
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_eq!(read_pids(&pids).len(), 2);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_crash_loop_spends_the_budget_then_answers_every_request_with_why() {
    let dir = TempDir::new("loop");
    let pids = dir.join("pids");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(pids.clone()))
        .at_start(Act::Stderr("cannot bind: address in use".into()))
        .at_start(Act::Exit(1))
        .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.restart.max_restarts = 3;
    let mut c = Client::start(s);
    // Wait for FATAL.
    let until = std::time::Instant::now() + WAIT;
    while !c.seen.all().contains(&Seen::State(ChildState::Fatal)) {
        assert!(std::time::Instant::now() < until, "{:?}", c.seen.all());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reply = c.request(1, "initialize", json!({})).await;
    assert_eq!(error_code(&reply), codes::SUPERVISOR_GAVE_UP, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("4 times within 60s"), "{message}");
    assert!(message.contains("exited with code 1"), "{message}");
    assert!(message.contains("address in use"), "{message}");
    // The server's stderr goes to the client (its own server's) but not into the status that
    // /readyz serves to any local user.
    let reasons: Vec<String> = c
        .seen
        .all()
        .into_iter()
        .filter_map(|s| match s {
            Seen::FatalReason(r) => Some(r),
            _ => None,
        })
        .collect();
    assert!(!reasons.is_empty());
    assert!(
        reasons.iter().all(|r| !r.contains("address in use")),
        "{reasons:?}"
    );
    // Never spins: one start and three restarts, and no more however long we wait.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read_pids(&pids).len(), 4);
    assert_eq!(c.seen.count(|s| matches!(s, Seen::Restart(_))), 3);
    let (outcome, _) = c.close().await;
    assert!(outcome.fatal.is_some());
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn junk_on_stdout_is_kept_from_the_client_and_reported() {
    let dir = TempDir::new("junk");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![(
            "tools/call",
            vec![
                Act::Stdout("Downloading packages... done".into()),
                Act::Stdout("[1,2,3]".into()),
                Act::Result(json!({"content": []})),
            ],
        )],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    let reply = c.request(2, "tools/call", json!({"name": "echo"})).await;
    assert!(reply["result"].is_object(), "{reply}");
    c.quiet(Duration::from_millis(200)).await;
    let junk: Vec<Seen> = c
        .seen
        .all()
        .into_iter()
        .filter(|s| matches!(s, Seen::Junk(_)))
        .collect();
    assert_eq!(
        junk,
        vec![
            Seen::Junk("Downloading packages... done".into()),
            Seen::Junk("[1,2,3]".into())
        ]
    );
    let (_, rest) = c.close().await;
    assert!(rest.is_empty());
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn grandchildren_go_with_the_child_even_those_that_left_its_session() {
    let dir = TempDir::new("grandchildren");
    let pids = dir.join("pids");
    let grand = dir.join("grandchildren");
    let escaped = dir.join("setsid");
    let script = server(&pids, vec![("crash", vec![Act::Exit(2)])])
        .at_start(Act::SpawnGrandchild(grand.clone()))
        .at_start(Act::SpawnSessionLeader(escaped.clone()))
        .write(&dir, "s.sh");
    let _reap = Reap(vec![pids.clone(), grand.clone(), escaped.clone()]);
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    // Let the first generation's setsid grandchild record itself, then crash the child: its
    // grandchildren must go with it, before the next one starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first: Vec<u32> = read_pids(&grand)
        .into_iter()
        .chain(read_pids(&escaped))
        .collect();
    assert_eq!(first.len(), 2, "{first:?}");
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    let reply = c.request(3, "tools/list", json!({})).await;
    assert!(reply["result"].is_object(), "{reply}");
    let left = still_running_after(&first, Duration::from_secs(3));
    mcpulse_testkit::stdio::kill(&left);
    assert!(
        left.is_empty(),
        "the first child's grandchildren outlived it: {left:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_eq!(read_pids(&escaped).len(), 2);
    assert_all_gone(&[&pids, &grand, &escaped]);
}

#[tokio::test]
async fn a_changed_protocol_version_after_a_restart_is_told_to_the_client() {
    let dir = TempDir::new("version");
    let pids = dir.join("pids");
    let init = |v: &str| {
        Act::Result(
            json!({"protocolVersion": v, "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}),
        )
    };
    let script = StdioScript::new()
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "initialize",
            vec![Act::FirstTimeElse(
                dir.join("first"),
                Box::new(init("2025-06-18")),
                Box::new(init("2025-03-26")),
            )],
        )
        .on("ping", vec![Act::Result(json!({}))])
        .on("tools/list", vec![Act::Result(json!({"tools": []}))])
        .on("crash", vec![Act::Exit(1)])
        .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    let next = c.request(3, "tools/list", json!({})).await;
    assert_eq!(error_code(&next), codes::SESSION_CHANGED, "{next}");
    let message = next["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2025-03-26 instead of 2025-06-18"),
        "{message}"
    );
    // Initializing again clears it.
    let again = c.initialize().await;
    assert_eq!(again["result"]["protocolVersion"], "2025-03-26");
    let ok = c.request(4, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_request_past_its_timeout_is_answered_and_cancelled_and_its_late_reply_dropped() {
    let dir = TempDir::new("timeout");
    let pids = dir.join("pids");
    let lines = dir.join("cancelled");
    let script = server(
        &pids,
        vec![
            (
                "tools/call",
                vec![Act::Sleep(700), Act::Result(json!({"content": []}))],
            ),
            (
                "notifications/cancelled",
                vec![Act::RecordLine(lines.clone())],
            ),
        ],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.heartbeat.busy_grace = Duration::from_secs(5);
    s.timeouts = Timeouts {
        request: None,
        tools: vec![("slow".into(), Duration::from_millis(200))],
    };
    let mut c = Client::start(s);
    c.initialize().await;
    let started = std::time::Instant::now();
    let reply = c.request(7, "tools/call", json!({"name": "slow"})).await;
    assert_eq!(error_code(&reply), codes::REQUEST_TIMEOUT, "{reply}");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    // The late reply (at ~700 ms) never reaches the client.
    c.quiet(Duration::from_millis(900)).await;
    let cancelled = wait_for_file(&lines).await;
    let note: Value = serde_json::from_str(cancelled.lines().next().unwrap()).unwrap();
    assert_eq!(note["params"]["requestId"], 7, "{note}");
    assert!(
        c.seen
            .all()
            .contains(&Seen::Tool("slow".into(), CallOutcome::Timeout))
    );
    // Still busy with the timed-out call, the child missed heartbeats: busy, not restarted.
    assert_eq!(read_pids(&pids).len(), 1, "{:?}", c.seen.all());
    // Another tool has no timeout.
    let fine = c.request(8, "tools/call", json!({"name": "other"})).await;
    assert!(fine["result"].is_object(), "{fine}");
    let (_, rest) = c.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_all_gone(&[&pids]);
}

/// A server that records every line it gets in `lines`, crashes on `crash`, and is slow to
/// start after a restart (500 ms): the restart lasts at least that long, whatever the jitter.
fn queue_server(dir: &TempDir, pids: &Path, lines: &Path) -> std::path::PathBuf {
    let record = |acts: Vec<Act>| {
        let mut v = vec![Act::RecordLine(lines.to_path_buf())];
        v.extend(acts);
        v
    };
    let mut script = StdioScript::new()
        .at_start(Act::RecordPid(pids.to_path_buf()))
        .at_start(Act::FirstTimeElse(
            dir.join("started"),
            Box::new(Act::Sleep(0)),
            Box::new(Act::Sleep(500)),
        ))
        .on("crash", vec![Act::Exit(1)])
        .on(
            "initialize",
            record(vec![Act::Result(mcpulse_testkit::mcp::initialize_result(
                mcpulse_testkit::mcp::LEGACY,
            ))]),
        )
        .on("notifications/initialized", record(vec![]))
        .on("ping", vec![Act::Result(json!({}))]);
    script = script.on(
        "tools/list",
        record(vec![Act::Result(json!({"tools": []}))]),
    );
    script.write(dir, "s.sh")
}

/// Sends three `tools/list` (ids 3, 4, 5) while the server restarts, with the queue bounded by
/// `bound`: the first two must be served, the third refused as over the bound. Returns the
/// lines the restarted server got: the replayed handshake first, then what was queued.
async fn two_fit_and_the_third_overflows(
    label: &str,
    bound: impl FnOnce(&mut Settings),
) -> Vec<Value> {
    let dir = TempDir::new(label);
    let pids = dir.join("pids");
    let lines = dir.join("lines");
    let mut s = settings(&queue_server(&dir, &pids, &lines));
    bound(&mut s);
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "crash"}))
        .await;
    assert_eq!(error_code(&c.recv().await), codes::SERVER_RESTARTED);
    for id in 3..6 {
        c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
            .await;
    }
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.push(c.recv().await);
    }
    replies.sort_by_key(|r| r["id"].as_i64());
    assert!(replies[0]["result"].is_object(), "{replies:?}");
    assert!(replies[1]["result"].is_object(), "{replies:?}");
    assert_eq!(error_code(&replies[2]), codes::QUEUE_FULL, "{replies:?}");
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
    let all: Vec<Value> = std::fs::read_to_string(&lines)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let second = all
        .iter()
        .rposition(|v| v["method"] == "initialize")
        .unwrap();
    all[second..].to_vec()
}

#[tokio::test]
async fn messages_during_a_restart_are_queued_up_to_the_count_behind_the_replay() {
    let got = two_fit_and_the_third_overflows("queue", |s| s.queue_max_messages = 2).await;
    // The new server got the client's initialize (under our id), then its initialized, then the
    // queued requests in order: nothing overtook the replay.
    let methods: Vec<&str> = got.iter().map(|v| v["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list"
        ],
        "{got:?}"
    );
    assert!(got[0]["id"].as_str().unwrap().starts_with("mcpulse-"));
    assert_eq!(got[0]["params"]["clientInfo"]["name"], "t");
    assert_eq!(
        (got[2]["id"].as_i64(), got[3]["id"].as_i64()),
        (Some(3), Some(4))
    );
}

#[tokio::test]
async fn messages_during_a_restart_are_queued_up_to_the_bytes() {
    // Each request is 47 bytes with its newline: two fit in 100, not three.
    two_fit_and_the_third_overflows("queue-bytes", |s| s.queue_max_bytes = 100).await;
}

#[tokio::test]
async fn a_modern_client_gets_server_discover_heartbeats_not_ping() {
    let dir = TempDir::new("modern");
    let pids = dir.join("pids");
    let pings = dir.join("pings");
    let discover = json!({"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {}, "ttlMs": 0, "cacheScope": "public"});
    // A 2026-07-28 server: no ping (recorded if it ever comes, and never answered).
    let script = StdioScript::new()
        .at_start(Act::RecordPid(pids.clone()))
        .on("ping", vec![Act::RecordLine(pings.clone())])
        .on("server/discover", vec![Act::Result(discover)])
        .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
    let reply = c
        .request(1, "server/discover", json!({"_meta": meta}))
        .await;
    assert_eq!(reply["result"]["supportedVersions"][0], "2026-07-28");
    c.quiet(Duration::from_millis(600)).await;
    assert!(!pings.exists(), "pinged a 2026-07-28 server");
    assert!(
        c.seen
            .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Ok))
            >= 3,
        "{:?}",
        c.seen.all()
    );
    assert_eq!(c.seen.count(|s| matches!(s, Seen::Restart(_))), 0);
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_client_reply_meant_for_a_replaced_child_is_dropped() {
    let dir = TempDir::new("stale");
    let pids = dir.join("pids");
    let other = dir.join("other");
    let script = server(
        &pids,
        vec![
            (
                "ask",
                vec![Act::Stdout(
                    r#"{"jsonrpc":"2.0","id":900,"method":"roots/list"}"#.into(),
                )],
            ),
            ("crash", vec![Act::Exit(1)]),
        ],
    )
    .otherwise(vec![Act::RecordLine(other.clone())])
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let asked = c.recv().await;
    assert_eq!(asked["method"], "roots/list", "{asked}");
    // Answered while the first child is alive: it gets the reply.
    c.send(json!({"jsonrpc": "2.0", "id": 900, "result": {"roots": [{"uri": "file:///first"}]}}))
        .await;
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    assert_eq!(c.recv().await["method"], "roots/list");
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    // Answered after the restart: meant for the dead child; the new one never sees it.
    c.send(json!({"jsonrpc": "2.0", "id": 900, "result": {"roots": [{"uri": "file:///stale"}]}}))
        .await;
    let ok = c.request(3, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let seen = std::fs::read_to_string(&other).unwrap_or_default();
    assert!(seen.contains("file:///first"), "{seen}");
    assert!(!seen.contains("file:///stale"), "{seen}");
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_cancelled_call_the_server_still_works_on_keeps_it_busy_not_hung() {
    let dir = TempDir::new("busy-cancel");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![(
            "tools/call",
            vec![Act::Sleep(1200), Act::Result(json!({"content": []}))],
        )],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.heartbeat.busy_grace = Duration::from_secs(5);
    s.heartbeat_interval = Duration::from_millis(200);
    s.heartbeat_timeout = Duration::from_millis(150);
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow"}}))
        .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The user gives up; the single-threaded server is still in the call for a second.
    c.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the user gave up"}}),
    )
    .await;
    c.quiet(Duration::from_millis(1500)).await;
    let seen = c.seen.all();
    assert!(
        !seen.iter().any(|s| matches!(s, Seen::Restart(_))),
        "restarted a busy server: {seen:?}"
    );
    assert_eq!(
        c.seen
            .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Failed)),
        0,
        "{seen:?}"
    );
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_request_cancelled_while_queued_for_a_restart_never_reaches_a_server() {
    let dir = TempDir::new("queued-cancel");
    let pids = dir.join("pids");
    let lists = dir.join("lists");
    let script = server(
        &pids,
        vec![
            ("crash", vec![Act::Exit(1)]),
            (
                "tools/list",
                vec![
                    Act::RecordLine(lists.clone()),
                    Act::Result(json!({"tools": []})),
                ],
            ),
        ],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    // A restart slow enough to queue behind.
    s.restart.backoff = Backoff {
        initial: Duration::from_millis(400),
        max: Duration::from_millis(400),
    };
    let mut c = Client::start(s);
    c.initialize().await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    // Queued while the server restarts, then cancelled by the client before it is sent.
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        .await;
    c.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "never mind"}}),
    )
    .await;
    // No answer comes for it, from the restarted server or the supervisor.
    c.quiet(Duration::from_millis(1500)).await;
    let ok = c.request(6, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let lists = std::fs::read_to_string(&lists).unwrap_or_default();
    assert!(lists.contains("\"id\":6"), "{lists}");
    assert!(
        !lists.contains("\"id\":5"),
        "the cancelled request was sent: {lists}"
    );
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_float_id_echoed_as_an_integer_still_finds_its_request() {
    let dir = TempDir::new("float-id");
    let pids = dir.join("pids");
    // A JavaScript server parses `1.0` and echoes `1`.
    let script = server(
        &pids,
        vec![(
            "whole",
            vec![Act::Stdout(
                r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#.into(),
            )],
        )],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    c.send_raw(r#"{"jsonrpc":"2.0","id":1.0,"method":"whole"}"#)
        .await;
    let reply = c.recv().await;
    assert_eq!(reply["result"]["ok"], true, "{reply}");
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn the_relay_goes_on_while_a_hung_server_is_being_stopped() {
    let dir = TempDir::new("slow-stop");
    let pids = dir.join("pids");
    // `hang` stops reading and ignores SIGTERM: its stop takes 2 × stop_grace and a SIGKILL.
    let script = server(&pids, vec![("hang", vec![Act::Hang])]).write(&dir, "s.sh");
    let mut s = settings(&script);
    s.stop_grace = Duration::from_millis(1500);
    s.timeouts = Timeouts {
        request: Some(Duration::from_millis(300)),
        tools: Vec::new(),
    };
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "method": "hang"})).await;
    // Heartbeats fail; the restart begins, and the hung server's stop takes about 3 s.
    let until = std::time::Instant::now() + WAIT;
    while !c.seen.all().iter().any(|s| matches!(s, Seen::Restart(_))) {
        assert!(std::time::Instant::now() < until, "{:?}", c.seen.all());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A request meanwhile waits in the queue, and its 300 ms deadline is kept: the loop does
    // not wait out the old server's stop (it did: the answer came after the stop, ~3 s).
    let asked = std::time::Instant::now();
    let reply = c.request(9, "tools/list", json!({})).await;
    assert_eq!(error_code(&reply), codes::REQUEST_TIMEOUT, "{reply}");
    assert!(
        asked.elapsed() < Duration::from_millis(1500),
        "{:?}",
        asked.elapsed()
    );
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_restarted_servers_request_reusing_an_unanswered_id_is_shown_a_new_one() {
    let dir = TempDir::new("reused-id");
    let pids = dir.join("pids");
    let other = dir.join("other");
    let script = server(
        &pids,
        vec![
            (
                "ask",
                vec![Act::Stdout(
                    r#"{"jsonrpc":"2.0","id":0,"method":"roots/list"}"#.into(),
                )],
            ),
            ("crash", vec![Act::Exit(1)]),
        ],
    )
    .otherwise(vec![Act::RecordLine(other.clone())])
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    // The first server asks (id 0) and dies before the client answers.
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let first = c.recv().await;
    assert_eq!(first["id"], 0, "{first}");
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    // The restarted server numbers afresh: its id 0 is shown to the client as another id.
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let second = c.recv().await;
    assert_eq!(second["method"], "roots/list", "{second}");
    assert_ne!(second["id"], 0, "{second}");
    // The late answer to the first goes nowhere; the answer to the second reaches the new
    // server under its own id.
    c.send(json!({"jsonrpc": "2.0", "id": 0, "result": {"roots": [{"uri": "file:///stale"}]}}))
        .await;
    c.send(json!({"jsonrpc": "2.0", "id": second["id"], "result": {"roots": [{"uri": "file:///second"}]}}))
        .await;
    let ok = c.request(3, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let seen = std::fs::read_to_string(&other).unwrap_or_default();
    let replies: Vec<serde_json::Value> = seen
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v.get("result").is_some())
        .collect();
    assert_eq!(replies.len(), 1, "{seen}");
    assert_eq!(replies[0]["id"], 0, "{seen}");
    assert_eq!(replies[0]["result"]["roots"][0]["uri"], "file:///second");
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn replies_written_just_before_exiting_still_reach_the_client() {
    let dir = TempDir::new("lastwords");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![("bye", vec![Act::Result(json!({"bye": true})), Act::Exit(0)])],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    // Several rounds: the exit races the last line on another pipe every time.
    for (round, id) in (2..6).enumerate() {
        let reply = c.request(id, "bye", json!({})).await;
        assert_eq!(reply["result"]["bye"], true, "{reply}");
        // Wait for the restart before the next round (a request sent to the dying child
        // would rightly get -32080).
        let until = std::time::Instant::now() + WAIT;
        while c.seen.count(|s| matches!(s, Seen::Restart(_))) <= round {
            assert!(std::time::Instant::now() < until);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn replies_are_matched_by_id_value_and_mistyped_requests_are_still_tracked() {
    let dir = TempDir::new("ids");
    let pids = dir.join("pids");
    // A server that re-encodes the ids it echoes, as Python's json does.
    let script = server(
        &pids,
        vec![
            (
                "x/cafe",
                vec![Act::Stdout(
                    r#"{"jsonrpc":"2.0","id":"caf\u00e9","result":{"n":1}}"#.into(),
                )],
            ),
            (
                "x/slash",
                vec![Act::Stdout(
                    r#"{"jsonrpc":"2.0","id":"a/b","result":{"n":2}}"#.into(),
                )],
            ),
        ],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": "café", "method": "x/cafe"}))
        .await;
    let reply = c.recv().await;
    assert_eq!(reply["id"], "café", "{reply}");
    assert_eq!(reply["result"]["n"], 1);
    c.input
        .as_mut()
        .unwrap()
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"a\\/b\",\"method\":\"x/slash\"}\n")
        .await
        .unwrap();
    let reply = c.recv().await;
    assert_eq!(reply["id"], "a/b", "{reply}");
    // A tool name that is not a string: the envelope is wrong, the request is still tracked.
    let reply = c
        .request(7, "tools/call", json!({"name": 7, "arguments": {}}))
        .await;
    assert!(reply["result"].is_object(), "{reply}");
    // An id over 1 KiB is not tracked, so not forwarded: answered at once.
    let long = "i".repeat(2000);
    c.send(json!({"jsonrpc": "2.0", "id": long, "method": "tools/list"}))
        .await;
    let reply = c.recv().await;
    assert_eq!(error_code(&reply), codes::TOO_MANY_REQUESTS, "{reply}");
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_too_long_reply_fails_its_own_request_found_by_its_top_level_id() {
    let dir = TempDir::new("toolong");
    let pids = dir.join("pids");
    // The TypeScript SDK's key order (id last), and an "id":5 nested in the result first.
    let big = format!(
        r#"{{"result":{{"id":5,"text":"{}"}},"jsonrpc":"2.0","id":7}}"#,
        "x".repeat(8000)
    );
    let script = server(&pids, vec![("x/big", vec![Act::Stdout(big)])]).write(&dir, "s.sh");
    let mut s = settings(&script);
    s.max_message_size = 2000;
    let mut c = Client::start(s);
    c.initialize().await;
    // Request 5 stays in flight (no rule answers it); 7 gets the too-long reply.
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "x/none"}))
        .await;
    c.send(json!({"jsonrpc": "2.0", "id": 7, "method": "x/big"}))
        .await;
    let reply = c.recv().await;
    assert_eq!(reply["id"], 7, "{reply}");
    assert_eq!(error_code(&reply), codes::MESSAGE_TOO_LARGE);
    c.quiet(Duration::from_millis(200)).await;
    let (_, rest) = c.close().await;
    // Request 5 was still in flight: answered at the stop, not as too large.
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["id"], 5);
    assert_eq!(error_code(&rest[0]), codes::SERVER_RESTARTED);
    assert_all_gone(&[&pids]);
}

/// A request of the server's (sampling) over --max-message-size never reaches the client: the
/// server is answered with an error at once, instead of waiting out its own timeout.
#[tokio::test]
async fn a_too_long_request_of_the_servers_is_answered_to_the_server() {
    let dir = TempDir::new("toolong-request");
    let pids = dir.join("pids");
    let replies = dir.join("replies");
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{{"text":"{}"}}}}"#,
        "x".repeat(8000)
    );
    // A long line with an id and no method (a log line, a broken reply) is no request: the
    // server is sent nothing for it.
    let noise = format!(r#"{{"id":"s0","msg":"{}"}}"#, "y".repeat(8000));
    let script = server(
        &pids,
        vec![(
            "x/ask",
            vec![Act::Stdout(noise), Act::Stdout(big), Act::Result(json!({}))],
        )],
    )
    .otherwise(vec![Act::RecordLine(replies.clone())])
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.max_message_size = 2000;
    let mut c = Client::start(s);
    c.initialize().await;
    let reply = c.request(3, "x/ask", json!({})).await;
    assert!(reply["result"].is_object(), "{reply}");
    let t0 = std::time::Instant::now();
    let seen = loop {
        let seen = std::fs::read_to_string(&replies).unwrap_or_default();
        if seen.contains(r#""id":"s1""#) || t0.elapsed() > Duration::from_secs(5) {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let line: serde_json::Value = serde_json::from_str(
        seen.lines()
            .find(|l| l.contains(r#""id":"s1""#))
            .unwrap_or("null"),
    )
    .unwrap();
    assert_eq!(line["id"], "s1", "{seen}");
    assert_eq!(error_code(&line), codes::MESSAGE_TOO_LARGE, "{seen}");
    assert!(!seen.contains(r#""id":"s0""#), "{seen}");
    let (_, rest) = c.close().await;
    assert!(rest.is_empty(), "the client saw nothing of it: {rest:?}");
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn the_request_lost_in_the_crash_that_spends_the_budget_is_not_promised_a_restart() {
    let dir = TempDir::new("lastcrash");
    let pids = dir.join("pids");
    let script = server(&pids, vec![("crash", vec![Act::Exit(1)])]).write(&dir, "s.sh");
    let mut s = settings(&script);
    s.restart.max_restarts = 0; // the first crash spends the budget
    let mut c = Client::start(s);
    c.initialize().await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED, "{lost}");
    let message = lost["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("it will not be restarted: its restart budget is spent"),
        "{message}"
    );
    assert!(!message.contains("being restarted"), "{message}");
    let (outcome, _) = c.close().await;
    assert!(outcome.fatal.is_some());
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_client_that_writes_without_reading_is_not_read_past_the_bound() {
    let dir = TempDir::new("noread");
    let pids = dir.join("pids");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(pids.clone()))
        .at_start(Act::Exit(1))
        .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.restart.max_restarts = 0; // FATAL at the first exit: every request answered by us
    s.queue_max_bytes = 16 << 10;
    s.max_message_size = 16 << 10;
    let (mut input, sup_in) = tokio::io::duplex(16 << 10);
    let (sup_out, output) = tokio::io::duplex(16 << 10);
    let seen = Arc::new(Recorder::default());
    let task = tokio::spawn(run(s, sup_in, sup_out, seen.clone()));
    let until = std::time::Instant::now() + WAIT;
    while !seen.all().contains(&Seen::State(ChildState::Fatal)) {
        assert!(std::time::Instant::now() < until, "{:?}", seen.all());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Each request (~60 bytes) gets an error of ~200: without a bound, 4 MiB of requests
    // would all be read and answered into memory.
    let mut written = 0usize;
    let mut blocked = false;
    while written < 4 << 20 {
        let line = format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": written, "method": "tools/list"})
        );
        match tokio::time::timeout(Duration::from_millis(300), input.write_all(line.as_bytes()))
            .await
        {
            Ok(r) => r.unwrap(),
            Err(_) => {
                blocked = true;
                break;
            }
        }
        written += line.len();
    }
    assert!(
        blocked,
        "all {written} bytes were read without the client reading a byte"
    );
    // Pipes (16 KiB each way), the channel (64 lines) and the backlog bound (16 KiB of answers).
    assert!(written < 256 << 10, "{written} bytes read before stopping");
    drop(input);
    drop(output);
    let outcome = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    assert!(outcome.fatal.is_some());
    assert_all_gone(&[&pids]);
}

/// Whether `pid` is a zombie (exited, not reaped).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("Z")
    })
}

/// Settings that run `script` after two short-lived orphans (their subshell exits at once: they
/// are reparented to us), which record their pids in `grand` and live 0.2 s and `second` s.
fn with_orphans(script: &Path, grand: &Path, second: &str) -> Settings {
    let mut s = settings(script);
    s.program = Program {
        program: "sh".into(),
        args: vec![
            "-c".into(),
            format!(
                "(sleep 0.2 & echo $! >> '{g}'); (sleep {second} & echo $! >> '{g}'); exec sh '{s}'",
                g = grand.display(),
                s = script.display()
            ),
        ],
    };
    s
}

/// Waits until every one of `orphans` has exited and been reaped (neither running nor a
/// zombie), failing at `until`.
async fn reaped(orphans: &[u32], until: std::time::Instant) {
    loop {
        let zombies: Vec<u32> = orphans.iter().copied().filter(|p| is_zombie(*p)).collect();
        let running: Vec<u32> = orphans
            .iter()
            .copied()
            .filter(|p| mcpulse_testkit::stdio::is_running(*p))
            .collect();
        if zombies.is_empty() && running.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "zombies {zombies:?}, running {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn orphans_that_die_mid_session_are_reaped_not_left_zombies() {
    let dir = TempDir::new("zombies");
    let pids = dir.join("pids");
    let grand = dir.join("grand");
    let script = server(&pids, vec![]).write(&dir, "s.sh");
    let s = with_orphans(&script, &grand, "0.2");
    let _reap = Reap(vec![pids.clone(), grand.clone()]);
    let mut c = Client::start(s);
    c.initialize().await;
    wait_for_file(&grand).await;
    let orphans = read_pids(&grand);
    assert_eq!(orphans.len(), 2);
    // They exit after 200 ms; give the reaper a bounded while.
    reaped(&orphans, std::time::Instant::now() + Duration::from_secs(3)).await;
    // The session is unharmed: the server still answers.
    c.request(2, "tools/list", json!({})).await;
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_timed_out_request_never_answered_does_not_spoil_the_busy_grace_for_good() {
    let dir = TempDir::new("expired-grace");
    let pids = dir.join("pids");
    // `stuck` is never answered (as a TypeScript SDK server does not answer a cancelled
    // request); `slow` blocks the single-threaded server 350 ms, within the 400 ms grace.
    let script = server(
        &pids,
        vec![
            (r#"tools/call","params":{"name":"stuck"#, vec![]),
            (
                "tools/call",
                vec![
                    Act::Sleep(350),
                    Act::Result(json!({"content": [{"type": "text", "text": "slow"}]})),
                ],
            ),
        ],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.heartbeat.busy_grace = Duration::from_millis(400);
    // Roomier than 80 ms (no failure is allowed), and still a miss inside the 350 ms call.
    s.heartbeat_interval = Duration::from_millis(150);
    s.heartbeat_timeout = Duration::from_millis(120);
    s.timeouts = Timeouts {
        request: None,
        tools: vec![("stuck".into(), Duration::from_millis(100))],
    };
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "stuck"}}))
        .await;
    let reply = c.recv().await;
    assert_eq!(error_code(&reply), codes::REQUEST_TIMEOUT, "{reply}");
    // The unanswered request is now older than the grace.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = c.request(3, "tools/call", json!({"name": "slow"})).await;
    assert_eq!(reply["result"]["content"][0]["text"], "slow", "{reply}");
    let seen = c.seen.all();
    assert!(
        seen.contains(&Seen::Heartbeat(HeartbeatOutcome::Busy)),
        "{seen:?}"
    );
    assert!(
        !seen.contains(&Seen::Heartbeat(HeartbeatOutcome::Failed)),
        "{seen:?}"
    );
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_timed_out_initialize_is_not_cancelled_and_its_late_reply_still_sets_up_the_replay() {
    let dir = TempDir::new("init-timeout");
    let pids = dir.join("pids");
    let inits = dir.join("inits");
    let cancels = dir.join("cancels");
    let script = server(
        &pids,
        vec![
            (
                "initialize",
                vec![
                    Act::RecordLine(inits.clone()),
                    Act::Sleep(300),
                    Act::Result(mcpulse_testkit::mcp::initialize_result(
                        mcpulse_testkit::mcp::LEGACY,
                    )),
                ],
            ),
            (
                "notifications/cancelled",
                vec![Act::RecordLine(cancels.clone())],
            ),
            ("tools/call", vec![Act::Exit(1)]),
        ],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.timeouts = Timeouts {
        request: Some(Duration::from_millis(100)),
        tools: vec![],
    };
    let mut c = Client::start(s);
    c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}))
        .await;
    let reply = c.recv().await;
    assert_eq!(error_code(&reply), codes::REQUEST_TIMEOUT, "{reply}");
    // The late reply comes (and is dropped) 200 ms later.
    c.quiet(Duration::from_millis(400)).await;
    assert!(!cancels.exists(), "the initialize was cancelled");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    // The server crashes on this call; its restart must replay the handshake.
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x"}}))
        .await;
    let reply = c.recv().await;
    assert_eq!(error_code(&reply), codes::SERVER_RESTARTED, "{reply}");
    let until = std::time::Instant::now() + WAIT;
    while std::fs::read_to_string(&inits)
        .unwrap_or_default()
        .lines()
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < until,
            "the restarted server never got the replayed initialize"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(!cancels.exists(), "the initialize was cancelled");
    assert_all_gone(&[&pids]);
}

/// SIGSTOPs a process (libc, not kill(1): a `kill` child of this test process could be reaped
/// by a supervisor's orphan reaper before `Command::status` waits for it).
fn sigstop(pid: u32) {
    // SAFETY: kill(2) on one process id; no memory effects.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGSTOP) };
    assert_eq!(rc, 0);
}

/// A slow `tools/call` in flight, then the server SIGSTOPped: three failed heartbeats and a
/// restart, not 30 s of "busy". `wrapped`: the leader is a wrapper shell that waits (as `npx`,
/// `uv run`, `sh -c` are) and the server below it is what freezes.
async fn a_frozen_server_is_restarted_not_busy(label: &str, wrapped: bool) {
    let dir = TempDir::new(label);
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![(
            "tools/call",
            vec![Act::Sleep(3000), Act::Result(json!({"content": []}))],
        )],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.heartbeat.busy_grace = Duration::from_secs(30);
    if wrapped {
        s.program = Program {
            program: "sh".into(),
            args: vec!["-c".into(), format!("sh '{}'; exit $?", script.display())],
        };
    }
    let _reap = Reap(vec![pids.clone()]);
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow"}}))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    sigstop(read_pids(&pids)[0]);
    let lost = c.recv().await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED, "{lost}");
    assert!(
        lost["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped answering"),
        "{lost}"
    );
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_frozen_child_is_not_busy_even_with_a_request_in_flight() {
    a_frozen_server_is_restarted_not_busy("sigstop", false).await;
}

#[tokio::test]
async fn a_frozen_server_under_a_wrapper_is_not_busy() {
    a_frozen_server_is_restarted_not_busy("sigstop-wrapped", true).await;
}

#[tokio::test]
async fn changed_capabilities_after_a_restart_are_told_to_the_client() {
    let dir = TempDir::new("caps");
    let pids = dir.join("pids");
    let init = |caps: Value| {
        Act::Result(
            json!({"protocolVersion": "2025-06-18", "capabilities": caps, "serverInfo": {"name": "s", "version": "1"}}),
        )
    };
    let script = StdioScript::new()
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "initialize",
            vec![Act::FirstTimeElse(
                dir.join("first"),
                Box::new(init(json!({"tools": {}, "resources": {"subscribe": true}}))),
                Box::new(init(json!({"tools": {}}))),
            )],
        )
        .on("ping", vec![Act::Result(json!({}))])
        .on("tools/list", vec![Act::Result(json!({"tools": []}))])
        .on("crash", vec![Act::Exit(1)])
        .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    let next = c.request(3, "tools/list", json!({})).await;
    assert_eq!(error_code(&next), codes::SESSION_CHANGED, "{next}");
    assert!(
        next["error"]["message"]
            .as_str()
            .unwrap()
            .contains("different capabilities"),
        "{next}"
    );
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_crash_during_initialize_answers_it_and_the_next_initialize_goes_through() {
    let dir = TempDir::new("crash-init");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![(
            "initialize",
            vec![
                Act::ExitOnce(dir.join("crashed")),
                Act::Result(mcpulse_testkit::mcp::initialize_result(
                    mcpulse_testkit::mcp::LEGACY,
                )),
            ],
        )],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    let lost = c.request(1, "initialize", init.clone()).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED, "{lost}");
    // Nothing was negotiated: no replay; the client's own retry reaches the new server.
    let again = c.request(2, "initialize", init).await;
    assert!(again["result"]["protocolVersion"].is_string(), "{again}");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    c.request(3, "tools/list", json!({})).await;
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_eq!(read_pids(&pids).len(), 2);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn no_heartbeat_between_the_initialize_reply_and_initialized() {
    let dir = TempDir::new("nobeat-midshake");
    let pids = dir.join("pids");
    let pings = dir.join("pings");
    let script =
        server(&pids, vec![("ping", vec![Act::RecordLine(pings.clone())])]).write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    )
    .await;
    // Five heartbeat intervals without the client's `initialized`: no ping.
    c.quiet(Duration::from_millis(500)).await;
    assert!(!pings.exists(), "pinged before notifications/initialized");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    wait_for_file(&pings).await;
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

#[tokio::test]
async fn a_stop_closes_stdin_then_sigterms_then_sigkills_the_group() {
    let dir = TempDir::new("stop-order");
    let events = dir.join("events");
    let pids = dir.join("pids");
    // Reads until EOF, then ignores SIGTERM (recording it): only SIGKILL ends it.
    let script = format!(
        "echo $$ >> '{p}'\ntrap 'echo term >> \"{e}\"' TERM\nwhile IFS= read -r line; do :; done\necho eof >> '{e}'\nwhile :; do sleep 0.05; done\n",
        p = pids.display(),
        e = events.display()
    );
    let path = dir.join("s.sh");
    std::fs::write(&path, script).unwrap();
    let mut s = settings(&path);
    s.stop_grace = Duration::from_millis(300);
    let _reap = Reap(vec![pids.clone()]);
    let c = Client::start(s);
    wait_for_file(&pids).await;
    let at = std::time::Instant::now();
    let (outcome, _) = c.close().await;
    let took = at.elapsed();
    assert_eq!(outcome.fatal, None);
    let got = std::fs::read_to_string(&events).unwrap();
    assert_eq!(got.lines().collect::<Vec<_>>(), ["eof", "term"], "{got}");
    // A grace after the EOF, a grace after the SIGTERM: then SIGKILL.
    assert!(took >= Duration::from_millis(550), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_all_gone(&[&pids]);
}

/// Many sessions in one process (the gateway runs one per client session), each with its own
/// reaper: the reapers share one scan per SIGCHLD, and none of the orphans that die mid-session
/// is left a zombie (a wake-up that arrives while another reaper scans is not lost).
#[tokio::test]
async fn orphans_of_many_sessions_in_one_process_are_all_reaped() {
    let dir = TempDir::new("zombies-many");
    let grand = dir.join("grand");
    let mut clients = Vec::new();
    let mut files = vec![grand.clone()];
    for i in 0..4 {
        let pids = dir.join(&format!("pids{i}"));
        let script = server(&pids, vec![]).write(&dir, &format!("s{i}.sh"));
        let s = with_orphans(&script, &grand, "0.3");
        files.push(pids);
        clients.push(Client::start(s));
    }
    let _reap = Reap(files.clone());
    for c in &mut clients {
        c.initialize().await;
    }
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while read_pids(&grand).len() < 8 {
        assert!(std::time::Instant::now() < until, "{:?}", read_pids(&grand));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reaped(&read_pids(&grand), until).await;
    for mut c in clients {
        c.request(2, "tools/list", json!({})).await;
        let (outcome, _) = c.close().await;
        assert_eq!(outcome.fatal, None);
    }
    let files: Vec<&std::path::Path> = files[1..].iter().map(|p| p.as_path()).collect();
    assert_all_gone(&files);
}

/// JSON-RPC allows a null result (a Go server's `nil`, a Rust one's `()`): such a reply is a
/// reply. It reaches the client, and a `ping` answered with it is a heartbeat answered (it was
/// taken for junk: every heartbeat missed, the server restarted every few intervals).
#[tokio::test]
async fn a_null_result_is_a_reply_to_the_client_and_to_the_heartbeat() {
    let dir = TempDir::new("null-result");
    let pids = dir.join("pids");
    let script = server(
        &pids,
        vec![
            ("ping", vec![Act::Result(Value::Null)]),
            ("x/nothing", vec![Act::Result(Value::Null)]),
        ],
    )
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    let reply = c.request(2, "x/nothing", json!({})).await;
    assert!(reply["result"].is_null(), "{reply}");
    assert!(reply.get("result").is_some(), "{reply}");
    // Several heartbeats go by, each answered with a null result: none missed, no restart.
    let until = std::time::Instant::now() + WAIT;
    while c
        .seen
        .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Ok))
        < 4
    {
        assert!(std::time::Instant::now() < until, "{:?}", c.seen.all());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = c.seen.all();
    assert_eq!(
        c.seen
            .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Failed)),
        0,
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|s| matches!(s, Seen::Restart(_))),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|s| matches!(s, Seen::Junk(_))), "{seen:?}");
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(read_pids(&pids).len(), 1, "restarted");
    assert_all_gone(&[&pids]);
}

/// A client's reply with a null result to a server's request is routed as a reply: dropped when
/// meant for a server since replaced, and given back the id its server used when the client was
/// shown another (it went through raw, as if it were no reply).
#[tokio::test]
async fn a_client_reply_with_a_null_result_is_routed_as_a_reply() {
    let dir = TempDir::new("null-client-reply");
    let pids = dir.join("pids");
    let other = dir.join("other");
    let script = server(
        &pids,
        vec![
            (
                "ask",
                vec![Act::Stdout(
                    r#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create"}"#.into(),
                )],
            ),
            ("crash", vec![Act::Exit(1)]),
        ],
    )
    .otherwise(vec![Act::RecordLine(other.clone())])
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    assert_eq!(c.recv().await["id"], 0);
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let second = c.recv().await;
    assert_ne!(second["id"], 0, "{second}");
    // The stale answer (for the first server) and the answer to the second, both null.
    c.send_raw(r#"{"jsonrpc":"2.0","id":0,"result":null}"#)
        .await;
    c.send(json!({"jsonrpc": "2.0", "id": second["id"], "result": null}))
        .await;
    let ok = c.request(3, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let seen = std::fs::read_to_string(&other).unwrap_or_default();
    let replies: Vec<Value> = seen
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v.get("result").is_some())
        .collect();
    assert_eq!(replies.len(), 1, "{seen}");
    assert_eq!(replies[0]["id"], 0, "{seen}");
    assert!(replies[0]["result"].is_null(), "{seen}");
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
}

/// A server that floods its stdout (`yes`, far faster than the relay) while a client reads as
/// fast as the pipe goes: the loop must still read the client, fire its timers and obey a stop.
/// It handled the server's messages first in every turn, and once the turn's budget of work
/// (tokio's 128 units a task poll) was spent on them, the client, the timer and the stop all
/// looked not ready: none of them ever ran while the flood lasted.
#[tokio::test]
async fn a_flooding_server_does_not_starve_the_clients_input_the_timers_or_a_stop() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::AsyncReadExt;
    let dir = TempDir::new("flood");
    let pids = dir.join("pids");
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"flood"}}"#;
    let script =
        server(&pids, vec![("tools/call", vec![Act::Flood(note.into())])]).write(&dir, "s.sh");
    let _reap = Reap(vec![pids.clone()]);
    let mut s = settings(&script);
    // Heartbeats out of the way: the flooding server reads nothing more, so answers none.
    s.heartbeat_interval = Duration::from_secs(600);
    s.timeouts = Timeouts {
        request: Some(Duration::from_millis(300)),
        tools: Vec::new(),
    };
    let (mut input, sup_in) = tokio::io::duplex(1 << 20);
    let (sup_out, mut output) = tokio::io::duplex(1 << 20);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run_until(
        s,
        sup_in,
        sup_out,
        Arc::new(Recorder::default()),
        async {
            let _ = stopped.await;
        },
    ));
    // The client's reader, a megabyte a read: it keeps the relay's backlog towards the client
    // near empty, so that the relay never stops reading the server for it.
    let flooded = Arc::new(AtomicU64::new(0));
    let (found, mut answers) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let counter = flooded.clone();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 20];
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let n = match output.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            let mut start = 0;
            while let Some(i) = pending[start..].iter().position(|b| *b == b'\n') {
                let line = &pending[start..start + i];
                start += i + 1;
                if line == note.as_bytes() {
                    counter.fetch_add(1, Ordering::Relaxed);
                } else {
                    let _ = found.send(serde_json::from_slice(line).unwrap());
                }
            }
            pending.drain(..start);
        }
    });
    let mut answer = async |what: &str| {
        tokio::time::timeout(Duration::from_secs(5), answers.recv())
            .await
            .unwrap_or_else(|_| panic!("no answer to {what} within 5 s"))
            .unwrap()
    };
    let send = async |input: &mut DuplexStream, v: Value| {
        input.write_all(format!("{v}\n").as_bytes()).await.unwrap();
    };
    send(
        &mut input,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
    )
    .await;
    assert_eq!(answer("initialize").await["id"], 1);
    send(
        &mut input,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let call = std::time::Instant::now();
    send(
        &mut input,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "flood"}}),
    )
    .await;
    let until = std::time::Instant::now() + WAIT;
    while flooded.load(Ordering::Relaxed) < 10_000 {
        assert!(std::time::Instant::now() < until, "no flood");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The client's next request, during the flood: read, forwarded and timed.
    let asked = std::time::Instant::now();
    send(
        &mut input,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    let mut got = vec![answer("the flood").await, answer("the flood").await];
    got.sort_by_key(|v| v["id"].as_i64());
    assert_eq!(got[0]["id"], 2, "{got:?}");
    assert_eq!(error_code(&got[0]), codes::REQUEST_TIMEOUT, "{got:?}");
    assert_eq!(got[1]["id"], 3, "{got:?}");
    assert_eq!(error_code(&got[1]), codes::REQUEST_TIMEOUT, "{got:?}");
    // 300 ms deadlines, on a loaded machine: answered well before the 5 s wait ran out.
    assert!(
        call.elapsed() < Duration::from_secs(4),
        "{:?}",
        call.elapsed()
    );
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "{:?}",
        asked.elapsed()
    );
    let before = flooded.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        flooded.load(Ordering::Relaxed) > before,
        "the flood had stopped"
    );
    // A stop (a signal, in `mcpulse supervise`) during the flood ends the supervisor.
    stop.send(()).unwrap();
    let outcome = tokio::time::timeout(WAIT, task)
        .await
        .expect("the supervisor did not stop within 10 s")
        .unwrap();
    assert_eq!(outcome.fatal, None);
    drop(input);
    reader.abort();
    assert_all_gone(&[&pids]);
}

/// What a program that is not found is said to be.
const NOT_FOUND: &str =
    "not found (the program, or the interpreter its first line names; check the command and PATH)";

/// A command that is not there (or not executable) is said at once: the client's initialize is
/// answered with what to fix, not after the whole restart budget (~31 s by default) of
/// retrying a program that cannot run.
#[tokio::test]
async fn a_program_that_cannot_run_is_fatal_at_once_with_what_to_fix() {
    let dir = TempDir::new("no-program");
    let not_executable = dir.join("server.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let cases = [
        ("mcpulse-test-no-such-server".to_owned(), NOT_FOUND),
        (
            dir.join("missing/server").to_string_lossy().into_owned(),
            NOT_FOUND,
        ),
        (
            not_executable.to_string_lossy().into_owned(),
            "permission denied (check that it is a file you may execute)",
        ),
    ];
    for (program, what) in cases {
        let mut s = Settings::new(Program {
            program: program.clone(),
            args: Vec::new(),
        });
        // The CLI's own restart policy: 1 s → 60 s backoff, 5 restarts.
        s.restart = RestartPolicy::default();
        let mut c = Client::start(s);
        let asked = std::time::Instant::now();
        let reply = c
            .request(1, "initialize", json!({"protocolVersion": "2025-06-18"}))
            .await;
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{program}: answered after {:?}",
            asked.elapsed()
        );
        assert_eq!(error_code(&reply), codes::SUPERVISOR_GAVE_UP, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains("could not be started"), "{message}");
        assert!(message.contains(&program), "{message}");
        assert!(message.contains(what), "{message}");
        let seen = c.seen.all();
        assert!(seen.contains(&Seen::State(ChildState::Fatal)), "{seen:?}");
        assert!(
            !seen.iter().any(|s| matches!(s, Seen::Restart(_))),
            "retried: {seen:?}"
        );
        // Every later request too, at once.
        let again = c.request(2, "tools/list", json!({})).await;
        assert_eq!(error_code(&again), codes::SUPERVISOR_GAVE_UP, "{again}");
        let (outcome, _) = c.close().await;
        assert!(outcome.fatal.is_some_and(|f| f.contains(what)));
    }
}

/// A script whose `#!` line names an interpreter that is not there (`#!/usr/bin/python3` in a
/// slim image): `execve` fails with ENOENT as for a missing program, though the script is
/// there and executable. The error said "command not found", sending its reader to look for a
/// script that was right there; it says which two things may be missing.
#[tokio::test]
async fn a_script_whose_interpreter_is_missing_is_not_called_a_missing_command() {
    let dir = TempDir::new("no-interpreter");
    let script = dir.join("server.py");
    std::fs::write(
        &script,
        "#!/nonexistent/mcpulse-test-python3\nprint('never')\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let program = script.to_string_lossy().into_owned();
    let mut s = Settings::new(Program {
        program: program.clone(),
        args: Vec::new(),
    });
    s.restart = RestartPolicy::default();
    let mut c = Client::start(s);
    let asked = std::time::Instant::now();
    let reply = c
        .request(1, "initialize", json!({"protocolVersion": "2025-06-18"}))
        .await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(error_code(&reply), codes::SUPERVISOR_GAVE_UP, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("could not be started: {program}: {NOT_FOUND}")),
        "{message}"
    );
    assert!(!message.contains("command not found"), "{message}");
    assert!(c.seen.all().contains(&Seen::FatalReason(format!(
        "the server could not be started: {program}: {NOT_FOUND}"
    ))));
    let (outcome, _) = c.close().await;
    assert!(outcome.fatal.is_some_and(|f| f.contains(NOT_FOUND)));
}

/// Once a server has run, a failed start is a restart like any other (its program may be
/// being reinstalled): backoff and the restart budget, not FATAL at once.
#[tokio::test]
async fn a_program_gone_after_a_first_start_is_retried_by_the_restart_policy() {
    let dir = TempDir::new("program-gone");
    let pids = dir.join("pids");
    let script = server(&pids, vec![("crash", vec![Act::Exit(1)])]).write(&dir, "s.sh");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let link = dir.join("server");
    std::os::unix::fs::symlink(&script, &link).unwrap();
    let mut s = settings(&script);
    s.program = Program {
        program: link.to_string_lossy().into_owned(),
        args: Vec::new(),
    };
    s.restart.backoff = Backoff {
        initial: Duration::from_millis(300),
        max: Duration::from_millis(300),
    };
    let mut c = Client::start(s);
    c.initialize().await;
    std::fs::remove_file(&link).unwrap();
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED, "{lost}");
    let until = std::time::Instant::now() + WAIT;
    while !c.seen.all().contains(&Seen::Restart("spawn_failed")) {
        assert!(std::time::Instant::now() < until, "{:?}", c.seen.all());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!c.seen.all().contains(&Seen::State(ChildState::Fatal)));
    // Back: the next restart starts it, and the session goes on.
    std::os::unix::fs::symlink(&script, &link).unwrap();
    let ok = c.request(3, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_eq!(read_pids(&pids).len(), 2);
    assert_all_gone(&[&pids]);
}

/// A client's reply to a request of the server's (sampling, elicitation) over
/// --max-message-size is dropped, and the server is told at once with -32084 under its own id,
/// rather than waiting out its own timeout (it was told nothing).
#[tokio::test]
async fn a_too_long_client_reply_to_a_server_request_is_answered_to_the_server() {
    let dir = TempDir::new("toolong-client-reply");
    let pids = dir.join("pids");
    let replies = dir.join("replies");
    let script = server(
        &pids,
        vec![(
            "ask",
            vec![Act::Stdout(
                r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#
                    .into(),
            )],
        )],
    )
    .otherwise(vec![Act::RecordLine(replies.clone())])
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.max_message_size = 2000;
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let asked = c.recv().await;
    assert_eq!(asked["id"], "s1", "{asked}");
    // The SDKs' key order: the id after a long result.
    let long = format!(
        r#"{{"jsonrpc":"2.0","result":{{"role":"assistant","content":{{"type":"text","text":"{}"}}}},"id":"s1"}}"#,
        "x".repeat(8000)
    );
    c.send_raw(&long).await;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let seen = loop {
        let seen = std::fs::read_to_string(&replies).unwrap_or_default();
        if seen.contains(r#""id":"s1""#) || std::time::Instant::now() > until {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let line: Value = serde_json::from_str(
        seen.lines()
            .find(|l| l.contains(r#""id":"s1""#))
            .unwrap_or_else(|| panic!("the server was told nothing: {seen:?}")),
    )
    .unwrap();
    assert_eq!(error_code(&line), codes::MESSAGE_TOO_LARGE, "{line}");
    assert!(
        line["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the client's reply is longer than --max-message-size"),
        "{line}"
    );
    let (_, rest) = c.close().await;
    assert!(rest.is_empty(), "{rest:?}");
    assert_all_gone(&[&pids]);
}

/// The same when the client was shown another id (a restarted server reused one an earlier
/// server's request still holds): the server is told under its own id.
#[tokio::test]
async fn a_too_long_client_reply_under_a_shown_id_is_answered_under_the_servers_id() {
    let dir = TempDir::new("toolong-client-reply-renamed");
    let pids = dir.join("pids");
    let replies = dir.join("replies");
    let script = server(
        &pids,
        vec![
            (
                "ask",
                vec![Act::Stdout(
                    r#"{"jsonrpc":"2.0","id":0,"method":"roots/list"}"#.into(),
                )],
            ),
            ("crash", vec![Act::Exit(1)]),
        ],
    )
    .otherwise(vec![Act::RecordLine(replies.clone())])
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.max_message_size = 2000;
    let mut c = Client::start(s);
    c.initialize().await;
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    assert_eq!(c.recv().await["id"], 0);
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let second = c.recv().await;
    let shown = second["id"].as_str().unwrap().to_owned();
    let long = format!(
        r#"{{"jsonrpc":"2.0","result":{{"roots":[{{"uri":"file:///{}"}}]}},"id":"{shown}"}}"#,
        "x".repeat(8000)
    );
    c.send_raw(&long).await;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let seen = loop {
        let seen = std::fs::read_to_string(&replies).unwrap_or_default();
        if seen.contains("\"error\"") || std::time::Instant::now() > until {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let errors: Vec<Value> = seen
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v.get("error").is_some())
        .collect();
    assert_eq!(errors.len(), 1, "{seen}");
    assert_eq!(errors[0]["id"], 0, "{seen}");
    assert_eq!(error_code(&errors[0]), codes::MESSAGE_TOO_LARGE, "{seen}");
    let (_, _) = c.close().await;
    assert_all_gone(&[&pids]);
}

/// A client whose `notifications/initialized` comes while the server restarts (it crashed
/// between the `initialize` reply and the notification): the restarted server gets it once,
/// from the replay. It was also queued, and the queue's flush sent it a second time.
#[tokio::test]
async fn initialized_sent_during_a_restart_reaches_the_new_server_once() {
    let dir = TempDir::new("initialized-once");
    let pids = dir.join("pids");
    let lines = dir.join("lines");
    // Restarted servers take 500 ms to start: the notification comes while it restarts.
    let mut c = Client::start(settings(&queue_server(&dir, &pids, &lines)));
    c.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    )
    .await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED, "{lost}");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let ok = c.request(3, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
    let all: Vec<Value> = std::fs::read_to_string(&lines)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let second = all
        .iter()
        .rposition(|v| v["method"] == "initialize")
        .unwrap();
    let methods: Vec<&str> = all[second..]
        .iter()
        .map(|v| v["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["initialize", "notifications/initialized", "tools/list"],
        "{all:?}"
    );
    assert_eq!(read_pids(&pids).len(), 2);
}

/// The stderr tail quoted in a crash's error is cut to 600 bytes after its secrets are hidden,
/// not before: a secret across the cut is hidden whole (its end showed, unhidden).
#[tokio::test]
async fn a_secret_across_the_cut_of_the_stderr_tail_is_hidden_whole() {
    let dir = TempDir::new("tail-secret");
    let pids = dir.join("pids");
    let secret = "s3cr3tT0k3nValue-0123456789";
    // The tail's last 600 bytes start 9 bytes before the secret's end.
    let line = format!("{}{secret}{}", "x".repeat(100), "y".repeat(590));
    let script = server(
        &pids,
        vec![("crash", vec![Act::Stderr(line), Act::Exit(3)])],
    )
    .write(&dir, "s.sh");
    let mut s = settings(&script);
    s.secrets.add(secret);
    let mut c = Client::start(s);
    c.initialize().await;
    let lost = c.request(2, "crash", json!({})).await;
    assert_eq!(error_code(&lost), codes::SERVER_RESTARTED);
    let message = lost["error"]["message"].as_str().unwrap();
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(
        message.contains(&format!("<redacted>{}", "y".repeat(100))),
        "{message}"
    );
    assert!(!message.contains(&secret[secret.len() - 9..]), "{message}");
    assert!(!message.contains("xxx"), "{message}");
    let (outcome, _) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert_all_gone(&[&pids]);
}

/// A client's JSON-RPC batch (2025-03-26; removed in 2025-06-18) is not forwarded: its requests
/// were not tracked and the server's array answer was dropped as junk, so they were never
/// answered. Each request in it is answered at once with -32600, in one array; the server sees
/// none of them (its notification goes on alone), and the session goes on.
#[tokio::test]
async fn a_client_batch_is_answered_with_an_error_per_request_and_not_forwarded() {
    let dir = TempDir::new("batch");
    let pids = dir.join("pids");
    let lines = dir.join("lines");
    let record = |acts: Vec<Act>| {
        let mut v = vec![Act::RecordLine(lines.clone())];
        v.extend(acts);
        v
    };
    let script = server(
        &pids,
        vec![
            (
                "tools/list",
                record(vec![Act::Result(json!({"tools": []}))]),
            ),
            ("notifications/x", record(vec![])),
        ],
    )
    .otherwise(vec![Act::RecordLine(lines.clone())])
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    c.send(json!([
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/x"},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/list", "params": {}},
    ]))
    .await;
    let answer = c.recv().await;
    let answers = answer.as_array().unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(answers.len(), 2, "{answer}");
    assert_eq!(answers[0]["id"], 7, "{answer}");
    assert_eq!(answers[1]["id"], "b", "{answer}");
    for a in answers {
        assert_eq!(error_code(a), codes::INVALID_REQUEST, "{answer}");
        assert!(
            a["error"]["message"]
                .as_str()
                .unwrap()
                .contains("mcpulse supervise: batches are not supported;"),
            "{answer}"
        );
    }
    // An empty batch: one error, id null.
    c.send_raw("[]").await;
    let empty = c.recv().await;
    assert_eq!(error_code(&empty), codes::INVALID_REQUEST, "{empty}");
    assert!(empty["id"].is_null(), "{empty}");
    let ok = c.request(8, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    let got = std::fs::read_to_string(&lines).unwrap_or_default();
    assert!(!got.contains('['), "the server got the batch: {got}");
    let got: Vec<&str> = got
        .lines()
        .filter(|l| !l.contains("notifications/initialized"))
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].contains("notifications/x"), "{got:?}");
    assert!(got[1].contains("\"id\":8"), "{got:?}");
    assert_all_gone(&[&pids]);
}

/// A 2025-03-26 client may batch what is not a request: its replies to the server's requests,
/// its `notifications/initialized`, a `notifications/cancelled`. Each goes on as if it came on
/// a line of its own (they were dropped: the server waited out its own timeout for the reply,
/// the handshake never completed, the cancelled request stayed in flight); the batch's
/// requests and its items that are no message (`1`, `{"foo":"boo"}`) are answered -32600, the
/// latter with a null id, as JSON-RPC answers a batch; a batch with nothing to answer gets no
/// answer.
#[tokio::test]
async fn a_client_batchs_replies_and_notifications_go_on_as_if_sent_alone() {
    let dir = TempDir::new("batch-passed");
    let pids = dir.join("pids");
    let lines = dir.join("lines");
    let script = server(
        &pids,
        vec![(
            "ask",
            vec![Act::Stdout(
                r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#
                    .into(),
            )],
        )],
    )
    .otherwise(vec![Act::RecordLine(lines.clone())])
    .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    // The initialize alone: its notifications/initialized comes in a batch.
    let init = c
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-03-26", "capabilities": {"sampling": {}}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    assert!(init["result"].is_object(), "{init}");
    c.send(json!({"jsonrpc": "2.0", "method": "ask"})).await;
    let asked = c.recv().await;
    assert_eq!(asked["id"], "s1", "{asked}");
    // A request the server never answers (no rule), cancelled in a batch below.
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "slow", "params": {}}))
        .await;
    c.send(json!([
        {"jsonrpc": "2.0", "id": "s1", "result": {"role": "assistant", "content": {"type": "text", "text": "ok"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]))
    .await;
    // Nothing to answer: no answer.
    c.quiet(Duration::from_millis(300)).await;
    // The handshake is complete: the heartbeats begin.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while c
        .seen
        .count(|s| *s == Seen::Heartbeat(HeartbeatOutcome::Ok))
        == 0
    {
        assert!(
            std::time::Instant::now() < until,
            "no heartbeat: the handshake never completed: {:?}",
            c.seen.all()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.send(json!([
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
        1,
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "no longer needed"}},
    ]))
    .await;
    let answer = c.recv().await;
    let answers = answer.as_array().unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(answers.len(), 3, "{answer}");
    assert_eq!(answers[0]["id"], 7, "{answer}");
    assert!(
        answers[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("batches are not supported"),
        "{answer}"
    );
    for a in answers {
        assert_eq!(error_code(a), codes::INVALID_REQUEST, "{answer}");
    }
    for a in &answers[1..] {
        assert!(a["id"].is_null(), "{answer}");
        assert!(
            a["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a JSON-RPC request, notification or reply"),
            "{answer}"
        );
    }
    let ok = c.request(8, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    // The cancelled request is not waited for: nothing is left to answer at the close.
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    // The server got each, alone, in order (what it answers by rule is not recorded).
    let got: Vec<Value> = std::fs::read_to_string(&lines)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0]["method"], "slow", "{got:?}");
    assert_eq!(got[1]["id"], "s1", "{got:?}");
    assert_eq!(got[1]["result"]["content"]["text"], "ok", "{got:?}");
    assert_eq!(got[2]["method"], "notifications/initialized", "{got:?}");
    assert_eq!(got[3]["method"], "notifications/cancelled", "{got:?}");
    assert_eq!(got[3]["params"]["requestId"], 5, "{got:?}");
    assert_all_gone(&[&pids]);
}

/// A batch's answer is one error an item it does not pass on, ~150 bytes even for an item as
/// short as `1`: a batch of more than 10,000 messages is refused whole (one -32600, id null)
/// rather than answered with up to 75 times its own size; none of it reaches the server. One
/// of 10,000 is still taken apart.
#[tokio::test]
async fn a_batch_of_more_than_10000_messages_is_refused_whole() {
    let dir = TempDir::new("batch-huge");
    let pids = dir.join("pids");
    let lines = dir.join("lines");
    let script = server(&pids, vec![])
        .otherwise(vec![Act::RecordLine(lines.clone())])
        .write(&dir, "s.sh");
    let mut c = Client::start(settings(&script));
    c.initialize().await;
    let note = r#"{"jsonrpc":"2.0","method":"notifications/x"}"#;
    let items = |n: usize| {
        let mut v = vec!["1"; n - 1];
        v.push(note);
        format!("[{}]", v.join(","))
    };
    c.send_raw(&items(10_001)).await;
    let refused = c.recv().await;
    assert_eq!(error_code(&refused), codes::INVALID_REQUEST, "{refused}");
    assert!(refused["id"].is_null(), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a batch of more than 10000 messages; none of it was forwarded"),
        "{refused}"
    );
    c.send_raw(&items(10_000)).await;
    let answers = c.recv().await;
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 9_999);
    assert!(answers.iter().all(|a| a["id"].is_null()));
    let ok = c.request(2, "tools/list", json!({})).await;
    assert!(ok["result"].is_object(), "{ok}");
    let (outcome, rest) = c.close().await;
    assert_eq!(outcome.fatal, None);
    assert!(rest.is_empty(), "{rest:?}");
    // Only the second batch's notification reached the server.
    let got = std::fs::read_to_string(&lines).unwrap_or_default();
    assert_eq!(got.matches("notifications/x").count(), 1, "{got}");
    assert_all_gone(&[&pids]);
}
