//! The dependency checks against real things: loopback TCP listeners, a loopback HTTP server
//! that misbehaves on cue (mcpulse-testkit's), real commands (killed, with their children),
//! and a Streamable HTTP MCP server with a health tool. Then the runner on its schedule.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_gateway::checks::{Check, CheckSpec, Context, run_once};
use mcpulse_gateway::health;
use mcpulse_gateway::state::Shared;
use mcpulse_policy::health::CheckStatus;
use mcpulse_testkit::stdio::{TempDir, read_pids, still_running_after};
use mcpulse_testkit::{FakeHttp, Piece, Reply, tools};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn check(toml: &str) -> Check {
    toml::from_str::<CheckSpec>(toml)
        .unwrap()
        .resolve()
        .unwrap()
}

fn http_check(url: &str, extra: &str) -> Check {
    check(&format!(
        "name = \"api\"\nkind = \"http\"\nurl = \"{url}\"\ntimeout = \"1s\"\n{extra}"
    ))
}

async fn run(c: &Check) -> (CheckStatus, String, Option<Duration>) {
    let raw = run_once(c, &Context::default()).await;
    let level = c.thresholds.level(&raw);
    (level, raw.output.unwrap_or_default(), raw.latency)
}

#[tokio::test]
async fn tcp_passes_on_a_listener_and_fails_once_it_closes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let c = check(&format!(
        "name = \"db\"\nkind = \"tcp\"\ntarget = \"{addr}\"\ntimeout = \"1s\""
    ));
    let (status, out, latency) = run(&c).await;
    assert_eq!((status, out.as_str()), (CheckStatus::Pass, "connected"));
    assert!(latency.unwrap() < Duration::from_secs(1));
    drop(listener);
    let (status, out, _) = run(&c).await;
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        out.contains(&format!("connect to 127.0.0.1:{}", addr.port())),
        "{out}"
    );
}

/// A server with one route per behaviour.
async fn misbehaving() -> FakeHttp {
    FakeHttp::start(|req| match req.path() {
        "/ok" => Reply::bytes(200, "application/json", r#"{"status":"pass"}"#),
        "/down" => Reply::bytes(503, "application/json", r#"{"status":"fail"}"#),
        "/teapot" => Reply::status(418),
        "/hang" => Reply::silence(),
        "/slowish" => Reply::chunked(
            200,
            "text/plain",
            vec![
                Piece::Pause(Duration::from_millis(300)),
                Piece::Data(b"ok".to_vec()),
            ],
        ),
        // A body that never ends, as fast as the socket takes it.
        "/huge" => Reply::chunked(
            200,
            "text/plain",
            vec![Piece::Repeat {
                data: vec![b'x'; 64 * 1024],
                every: Duration::ZERO,
            }],
        ),
        "/hostile" => Reply::bytes(500, "text/plain", "\u{1b}[2J\u{1b}]0;pwned\u{7}boom"),
        "/here" => Reply::status(302).header("location", "/ok"),
        "/away" => Reply::status(302).header("location", "http://127.0.0.2:9/ok"),
        _ => Reply::status(404),
    })
    .await
}

#[tokio::test]
async fn http_status_latency_bodies_and_redirects() {
    let s = misbehaving().await;
    let (st, out, _) = run(&http_check(&s.url("/ok"), "")).await;
    assert_eq!((st, out.as_str()), (CheckStatus::Pass, "status 200 OK"));

    let (st, out, _) = run(&http_check(&s.url("/down"), "")).await;
    assert_eq!(st, CheckStatus::Fail);
    assert!(
        out.starts_with("status 503 Service Unavailable from http://127.0.0.1:"),
        "{out}"
    );
    assert!(out.ends_with("(expected 2xx)"), "{out}");

    // Expectations replace the 2xx default.
    let (st, _, _) = run(&http_check(&s.url("/teapot"), "expect_status = [418]")).await;
    assert_eq!(st, CheckStatus::Pass);
    let (st, out, _) = run(&http_check(&s.url("/ok"), "expect_status = [204, 418]")).await;
    assert_eq!(st, CheckStatus::Fail);
    assert!(out.contains("(expected 204, 418)"), "{out}");

    // No answer: given up at the timeout, not later.
    let t0 = Instant::now();
    let (st, out, _) = run(&http_check(&s.url("/hang"), "")).await;
    assert_eq!(st, CheckStatus::Fail);
    assert!(out.contains("timed out"), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());

    // Slow but answering: degraded past degraded_latency (the body is part of the answer).
    let c = http_check(&s.url("/slowish"), "degraded_latency = \"100ms\"");
    let (st, _, latency) = run(&c).await;
    assert_eq!(st, CheckStatus::Warn);
    assert!(latency.unwrap() >= Duration::from_millis(300));

    // A body without end: cut at the cap, the status decides, at once.
    let t0 = Instant::now();
    let (st, _, _) = run(&http_check(&s.url("/huge"), "")).await;
    assert_eq!(st, CheckStatus::Pass);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());

    // Nothing the server wrote reaches the output.
    let (st, out, _) = run(&http_check(&s.url("/hostile"), "")).await;
    assert_eq!(st, CheckStatus::Fail);
    assert!(!out.contains('\u{1b}') && !out.contains("pwned"), "{out}");

    // Redirects: followed within the origin, refused off it.
    let (st, _, _) = run(&http_check(&s.url("/here"), "")).await;
    assert_eq!(st, CheckStatus::Pass);
    let (st, out, _) = run(&http_check(&s.url("/away"), "")).await;
    assert_eq!(st, CheckStatus::Fail);
    assert!(out.contains("127.0.0.2"), "{out}");
    let paths: Vec<String> = s.requests().iter().map(|r| r.path().to_owned()).collect();
    assert_eq!(paths.iter().filter(|p| *p == "/ok").count(), 3, "{paths:?}");
}

fn command_check(argv: &[&str], timeout: &str) -> Check {
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    check(&format!(
        "name = \"script\"\nkind = \"command\"\ncommand = [{}]\ntimeout = \"{timeout}\"",
        argv.join(", ")
    ))
}

#[tokio::test]
async fn command_exit_status_output_and_a_clean_environment() {
    let (st, out, _) = run(&command_check(&["sh", "-c", "echo all good"], "2s")).await;
    assert_eq!((st, out.as_str()), (CheckStatus::Pass, "all good"));

    let (st, out, _) = run(&command_check(
        &["sh", "-c", "echo 'disk full' >&2; exit 3"],
        "2s",
    ))
    .await;
    assert_eq!(st, CheckStatus::Fail);
    assert_eq!(out, "sh exited with status 3: disk full");

    let (st, out, _) = run(&command_check(&["/nonexistent/checker"], "2s")).await;
    assert_eq!(st, CheckStatus::Fail);
    assert_eq!(
        out,
        "/nonexistent/checker: not found (the program, or the interpreter its first line names)"
    );

    // Hostile output is inert; a flood is bounded (and does not block the command).
    let (st, out, _) = run(&command_check(
        &[
            "sh",
            "-c",
            "printf '\\033[31mred\\033[0m\\n'; head -c 10000000 /dev/zero; exit 1",
        ],
        "5s",
    ))
    .await;
    assert_eq!(st, CheckStatus::Fail);
    assert!(!out.contains('\u{1b}'), "{out}");
    assert!(out.contains("red"), "{out}");

    // The gateway's environment is not the command's, but for what `env` names (cargo sets
    // CARGO_MANIFEST_DIR for the tests it runs: a variable of ours).
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let argv = "command = [\"sh\", \"-c\", \"echo ${HOME:+home}-${CARGO_MANIFEST_DIR:-unset}\"]";
    let (_, out, _) = run(&check(&format!(
        "name = \"env\"\nkind = \"command\"\n{argv}"
    )))
    .await;
    assert_eq!(out, "home-unset");
    let (_, out, _) = run(&check(&format!(
        "name = \"env\"\nkind = \"command\"\n{argv}\nenv = [\"CARGO_MANIFEST_DIR\"]"
    )))
    .await;
    // Passed (not "unset"), and hidden: a value the command was given may be a credential.
    assert_eq!(out, "home-<redacted>");
    // So is what the command line holds as secret, when the command echoes it.
    let (_, out, _) = run(&command_check(
        &[
            "sh",
            "-c",
            "echo \"login failed for $1\"",
            "sh",
            "--password=hunter22",
        ],
        "2s",
    ))
    .await;
    assert_eq!(out, "login failed for --password=<redacted>");
}

#[tokio::test]
async fn a_hanging_command_is_killed_with_its_children_at_the_timeout() {
    let dir = TempDir::new("gateway-check-hang");
    let pids = dir.join("pids");
    let script = format!(
        "sleep 60 & echo $! > {p}; echo $$ >> {p}; wait",
        p = pids.display()
    );
    let t0 = Instant::now();
    let (st, out, _) = run(&command_check(&["sh", "-c", &script], "500ms")).await;
    let took = t0.elapsed();
    assert_eq!(st, CheckStatus::Fail);
    assert!(
        out.contains("still running after") && out.ends_with("killed"),
        "{out}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    let pids = read_pids(&pids);
    assert_eq!(pids.len(), 2, "the shell and its sleep: {pids:?}");
    let left = still_running_after(&pids, Duration::from_secs(2));
    mcpulse_testkit::stdio::kill(&left);
    assert!(left.is_empty(), "orphans left: {left:?}");
}

/// A command that exits leaving a child behind (`sleep 30 &`): the check passes on the exit
/// status, at once, and the child left in its group is killed: no orphan piles up run after run.
#[tokio::test]
async fn a_command_that_leaves_a_child_behind_leaves_no_orphan() {
    let t0 = Instant::now();
    let (st, out, _) = run(&command_check(&["sh", "-c", "sleep 30 & echo $!"], "5s")).await;
    assert_eq!(st, CheckStatus::Pass, "{out}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let sleep: u32 = out.parse().unwrap();
    let left = still_running_after(&[sleep], Duration::from_secs(2));
    mcpulse_testkit::stdio::kill(&left);
    assert!(left.is_empty(), "orphan left: {left:?}");
}

#[tokio::test]
async fn the_upstreams_health_tool_is_folded_in() {
    for (said, want) in [
        ("ok", CheckStatus::Pass),
        ("degraded", CheckStatus::Warn),
        ("down", CheckStatus::Fail),
    ] {
        let server = FakeHttp::start_script(tools::http_server(tools::catalogue(said))).await;
        let ctx = Context {
            mcp: Some(mcpulse_probe::Target::http(&server.url("/mcp")).unwrap()),
            ..Context::default()
        };
        let c = check("name = \"self\"\nkind = \"tool\"\ntool = \"health_check\"");
        let raw = run_once(&c, &ctx).await;
        let out = raw.output.clone().unwrap_or_default();
        assert_eq!(raw.status, want, "{said}: {out}");
        assert!(raw.latency.is_some());
        if want != CheckStatus::Pass {
            assert!(
                out.contains("orders-db"),
                "{said}: the component is named: {out}"
            );
        }
        // The probe identifies itself, so the serving side can keep it out of its metrics.
        assert!(server.requests().iter().all(|r| {
            r.header(mcpulse_gateway::checks::PROBE_HEADER)
                == Some(mcpulse_gateway::checks::probe_token())
        }));
    }
    // A tool the server does not list is a failure that says so.
    let server = FakeHttp::start_script(tools::http_server(tools::catalogue("ok"))).await;
    let ctx = Context {
        mcp: Some(mcpulse_probe::Target::http(&server.url("/mcp")).unwrap()),
        ..Context::default()
    };
    let c = check("name = \"self\"\nkind = \"tool\"\ntool = \"no_such_tool\"");
    let raw = run_once(&c, &ctx).await;
    assert_eq!(raw.status, CheckStatus::Fail);
    let out = raw.output.unwrap();
    assert!(
        out.contains("no_such_tool was not called: it is not in tools/list"),
        "{out}"
    );
    // The gateway's own health tool would report on itself.
    let own = Context {
        own_tool: Some("no_such_tool".into()),
        ..ctx.clone()
    };
    let raw = run_once(&c, &own).await;
    assert!(raw.output.unwrap().contains("gateway's own health tool"));
    // Nothing to call it on.
    let raw = run_once(&c, &Context::default()).await;
    assert_eq!(raw.status, CheckStatus::Fail);
}

/// The runner, on its schedule: a check of a listener that goes away turns fail after
/// failure_threshold runs, not before, and recovers after success_threshold.
#[tokio::test]
async fn the_runner_caches_results_with_their_thresholds() {
    // Held while the listener is gone too: no other test is handed the port meanwhile.
    let port = mcpulse_testkit::port::KeptPort::new();
    let listener = port.listen();
    let addr = port.addr();
    let c = check(&format!(
        "name = \"db\"\nkind = \"tcp\"\ntarget = \"{addr}\"\ninterval = \"1s\"\ntimeout = \"500ms\"\nfailure_threshold = 2\nsuccess_threshold = 2"
    ));
    let shared = Arc::new(Shared::default());
    let tasks = mcpulse_gateway::checks::spawn(vec![c], Context::default(), Arc::clone(&shared));
    assert_eq!(
        shared.health.confirmed("db"),
        None,
        "registered, not run yet"
    );
    // Waits until the check has had `n` results; returns its confirmed status then.
    let after_runs = |n: u64| {
        let shared = Arc::clone(&shared);
        async move {
            let t0 = Instant::now();
            while shared.health.runs("db") < n {
                assert!(t0.elapsed() < Duration::from_secs(3), "no run {n}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            shared.health.confirmed("db").unwrap()
        }
    };
    // The first run comes within the jitter (at most a tenth of the interval).
    let t0 = Instant::now();
    assert_eq!(after_runs(1).await, CheckStatus::Pass);
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    drop(listener);
    // One failure flips nothing; the second in a row does.
    assert_eq!(after_runs(2).await, CheckStatus::Pass);
    assert_eq!(after_runs(3).await, CheckStatus::Fail);
    let listener = port.listen();
    // Recovery takes two successes in a row too.
    assert_eq!(after_runs(4).await, CheckStatus::Fail);
    assert_eq!(after_runs(5).await, CheckStatus::Pass);
    let readyz = health::readiness(&shared);
    let db = readyz.checks.iter().find(|c| c.name == "db").unwrap();
    assert_eq!(db.status, CheckStatus::Pass);
    drop(tasks);
    drop(listener);
}
