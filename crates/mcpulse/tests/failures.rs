//! Failure classes, end to end: the real `mcpulse` binary against scripted fake servers on
//! loopback sockets (`mcpulse-testkit`) and scripted stdio servers (`sh` scripts), asserting on
//! the JSON report and the exit code (0 healthy, 1 degraded, 2 down, 3 could not run).
//!
//! Every test is bounded: hang-like servers get a short `--timeout`, and each run must finish
//! within its timeout plus a margin (`SLACK`). Nothing sleeps to synchronise: the fakes record
//! each request before answering it, so once mcpulse has exited, every request it sent is in
//! the log.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::http::Script;
use mcpulse_testkit::mcp;
use mcpulse_testkit::run::{self, Run};
use mcpulse_testkit::scenario::{self, Framing};
use mcpulse_testkit::stdio::{read_pids, still_running_after};
use mcpulse_testkit::{
    Act, Body, FakeHttp, Piece, RawListener, Reply, Request, StdioScript, TempDir,
};
use serde_json::{Value, json};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
/// How much longer than its `--timeout` a run may take (start-up, stdio shutdown grace, a
/// loaded CI machine).
const SLACK: Duration = Duration::from_secs(3);
/// The `--timeout` for runs against servers that answer: never reached.
const TIMEOUT: &str = "5s";

/// What these tests read from a run of `mcpulse probe --json`.
trait ProbeRun {
    /// The `--json` report.
    fn report(&self) -> Value;
    fn codes(&self) -> Vec<String>;
    /// Asserts the status, the exit code that goes with it, and that each code was found.
    fn expect(&self, status: &str, codes: &[&str]);
}

impl ProbeRun for Run {
    fn report(&self) -> Value {
        self.json()
    }

    fn codes(&self) -> Vec<String> {
        run::codes(&self.report()["findings"])
    }

    fn expect(&self, status: &str, codes: &[&str]) {
        let report = self.report();
        let exit = match status {
            "healthy" => 0,
            "degraded" => 1,
            "down" => 2,
            other => panic!("no such status {other}"),
        };
        let context = format!(
            "report:\n{}\nstderr:\n{}",
            serde_json::to_string_pretty(&report).unwrap(),
            self.stderr
        );
        assert_eq!(report["schema"], "mcpulse.report/v1", "{context}");
        assert_eq!(report["status"], status, "{context}");
        assert_eq!(self.code, Some(exit), "exit code; {context}");
        let found = self.codes();
        for code in codes {
            assert!(
                found.iter().any(|c| c == code),
                "finding {code} missing; {context}"
            );
        }
    }
}

/// Runs mcpulse with `args` (and extra environment), and fails the test if it does not finish
/// within `bound`.
async fn run_with(args: &[&str], env: &[(&str, &str)], bound: Duration) -> Run {
    run::run(BIN, args, env, bound).await
}

/// `mcpulse probe --json --no-security --timeout <timeout> <extra...> <url>`, bounded by
/// timeout + slack. These tests pin the health probe's exact requests; the security checks'
/// extra requests have tests of their own (tests/security.rs).
async fn probe_url(url: &str, timeout: &str, extra: &[&str]) -> Run {
    let mut args = vec!["probe", "--json", "--no-security", "--timeout", timeout];
    args.extend_from_slice(extra);
    args.push(url);
    run_with(&args, &[], parse_secs(timeout) + SLACK).await
}

/// `mcpulse probe --json --timeout <timeout> -- sh <script>`.
async fn probe_script(script: &std::path::Path, timeout: &str) -> Run {
    probe_script_with(script, timeout, &[]).await
}

/// [`probe_script`] with more flags.
async fn probe_script_with(script: &std::path::Path, timeout: &str, extra: &[&str]) -> Run {
    let path = script.to_str().unwrap();
    let mut args = vec!["probe", "--json", "--timeout", timeout];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", path]);
    run_with(&args, &[], parse_secs(timeout) + SLACK).await
}

/// A legacy probe of a stdio script with a 64 KiB response cap (and more flags).
async fn probe_legacy_capped(script: &std::path::Path, extra: &[&str]) -> Run {
    let mut args = vec!["--era", "legacy", "--max-response-size", "64KiB"];
    args.extend_from_slice(extra);
    probe_script_with(script, TIMEOUT, &args).await
}

/// A legacy `initialize` result that advertises prompts.
fn legacy_init_with_prompts() -> Value {
    let mut init = mcp::initialize_result(mcp::LEGACY);
    init["capabilities"]["prompts"] = json!({});
    init
}

/// Up, with a list that failed at the 64 KiB response cap (not at the deadline): degraded,
/// and the first finding says so.
fn assert_list_cut_at_64k(run: &Run) {
    run.expect("degraded", &["tools-list-failed"]);
    let message = first_message(run);
    assert!(message.contains("over the 65536-byte cap"), "{message}");
    assert!(!run.codes().contains(&"timeout".to_owned()));
}

fn parse_secs(t: &str) -> Duration {
    Duration::from_secs(t.trim_end_matches('s').parse().unwrap())
}

async fn serve(script: Script) -> FakeHttp {
    FakeHttp::start_script(script).await
}

/// The requests with this JSON-RPC method.
fn with_method(reqs: &[Request], method: &str) -> Vec<Request> {
    reqs.iter()
        .filter(|r| r.rpc_method().as_deref() == Some(method))
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Healthy servers, each era and transport.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn modern_server_is_healthy_and_gets_modern_headers() {
    let server = serve(scenario::modern(false, vec![None])).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("healthy", &[]);
    let r = run.report();
    assert_eq!(r["transport"], "streamable-http");
    assert_eq!(r["era"], "modern");
    assert_eq!(r["protocol_version"], mcp::MODERN);
    assert_eq!(r["supported_versions"], json!([mcp::MODERN]));
    assert_eq!(
        r["dual_era"], false,
        "a modern-only server refuses the legacy initialize"
    );
    assert_eq!(r["auth"], "none");
    assert_eq!(r["server"]["name"], "fake-mcp");
    assert_eq!(r["tool_count"], 1);
    assert_eq!(r["tools"][0]["name"], "tool_0");
    assert_eq!(
        run.codes(),
        Vec::<String>::new(),
        "a complete modern server earns no finding"
    );

    let reqs = server.requests();
    assert_eq!(
        server.methods(),
        ["server/discover", "tools/list", "initialize"]
    );
    let discover = &reqs[0];
    assert_eq!(discover.method, "POST");
    assert_eq!(discover.path(), "/mcp");
    assert_eq!(discover.header("mcp-protocol-version"), Some(mcp::MODERN));
    assert_eq!(discover.header("mcp-method"), Some("server/discover"));
    assert_eq!(discover.header("content-type"), Some("application/json"));
    let accept = discover.header("accept").unwrap();
    assert!(
        accept.contains("application/json") && accept.contains("text/event-stream"),
        "{accept}"
    );
    assert_eq!(discover.rpc_id(), Some(json!(1)));
    let meta = discover.json().unwrap()["params"]["_meta"].clone();
    assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], mcp::MODERN);
    assert_eq!(
        meta["io.modelcontextprotocol/clientCapabilities"],
        json!({})
    );
    assert_eq!(reqs[1].header("mcp-method"), Some("tools/list"));
    assert_eq!(reqs[1].header("mcp-protocol-version"), Some(mcp::MODERN));
    // The dual-era check is a plain legacy initialize: no modern headers, no session yet.
    assert_eq!(reqs[2].header("mcp-protocol-version"), None);
    assert_eq!(reqs[2].header("mcp-method"), None);
    assert_eq!(reqs[2].header("mcp-session-id"), None);
    assert!(
        reqs.iter().all(|r| r.connection == reqs[0].connection),
        "the POSTs share one kept-alive connection"
    );
}

#[tokio::test]
async fn dual_era_server_is_found_and_its_session_deleted() {
    let server = serve(scenario::modern(true, vec![None])).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("healthy", &["dual-era"]);
    let r = run.report();
    assert_eq!(r["era"], "modern");
    assert_eq!(r["dual_era"], true);
    assert_eq!(r["supported_versions"], json!([mcp::MODERN, mcp::LEGACY]));

    assert_eq!(
        server.methods(),
        ["server/discover", "tools/list", "initialize", "DELETE"]
    );
    let delete = server.requests().pop().unwrap();
    assert_eq!(
        delete.header("mcp-session-id"),
        Some(scenario::DUAL_ERA_SESSION)
    );
    assert_eq!(delete.header("mcp-protocol-version"), Some(mcp::LEGACY));
}

async fn legacy_streamable(framing: Framing) {
    let server = serve(scenario::legacy_streamable(framing)).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("healthy", &["legacy-only"]);
    assert_eq!(run.codes(), ["legacy-only"]);
    let r = run.report();
    assert_eq!(r["transport"], "streamable-http");
    assert_eq!(r["era"], "legacy");
    assert_eq!(r["protocol_version"], mcp::LEGACY);
    assert_eq!(r["dual_era"], false);
    assert_eq!(r["server"]["name"], "fake-mcp");
    assert_eq!(r["tool_count"], 2);
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "add"]);

    // discover (refused before initialize) → initialize → initialized → tools/list → DELETE.
    assert_eq!(
        server.methods(),
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "DELETE"
        ]
    );
    let reqs = server.requests();
    assert_eq!(
        reqs[1].header("mcp-session-id"),
        None,
        "initialize opens the session"
    );
    assert_eq!(
        reqs[1].header("mcp-method"),
        None,
        "no modern header on a legacy request"
    );
    for r in &reqs[2..] {
        assert_eq!(
            r.header("mcp-session-id"),
            Some(scenario::LEGACY_SESSION),
            "{} {}",
            r.method,
            r.target
        );
        assert_eq!(
            r.header("mcp-protocol-version"),
            Some(mcp::LEGACY),
            "{} {}",
            r.method,
            r.target
        );
    }
    assert_eq!(reqs[4].method, "DELETE");
    assert_eq!(reqs[4].path(), "/mcp");
}

#[tokio::test]
async fn legacy_streamable_http_with_json_replies_is_healthy() {
    legacy_streamable(Framing::Json).await;
}

#[tokio::test]
async fn legacy_streamable_http_with_sse_replies_is_healthy() {
    // Each reply is an event stream: an empty priming event, a progress notification, the reply.
    legacy_streamable(Framing::Sse).await;
}

#[tokio::test]
async fn legacy_http_sse_transport_is_healthy_but_deprecated() {
    let server = serve(scenario::legacy_sse()).await;
    let run = probe_url(&server.url("/sse"), TIMEOUT, &[]).await;
    run.expect("healthy", &["deprecated-transport", "legacy-only"]);
    let r = run.report();
    assert_eq!(r["transport"], "sse");
    assert_eq!(r["era"], "legacy");
    assert_eq!(r["protocol_version"], "2024-11-05");
    assert_eq!(r["tool_count"], 1);
    assert_eq!(r["tools"][0]["name"], "legacy_echo");

    let reqs = server.requests();
    let seen: Vec<(String, String)> = reqs
        .iter()
        .map(|r| (r.method.clone(), r.target.clone()))
        .collect();
    let expected: Vec<(String, String)> = [
        ("POST", "/sse"),
        ("POST", "/sse"),
        ("GET", "/sse"),
        ("POST", scenario::SSE_ENDPOINT),
        ("POST", scenario::SSE_ENDPOINT),
        ("POST", scenario::SSE_ENDPOINT),
    ]
    .iter()
    .map(|(m, t)| ((*m).to_owned(), (*t).to_owned()))
    .collect();
    assert_eq!(seen, expected);
    assert_eq!(
        server.methods()[3..],
        ["initialize", "notifications/initialized", "tools/list"]
    );
    assert!(
        reqs[2]
            .header("accept")
            .unwrap()
            .contains("text/event-stream")
    );
}

/// How [`sse_holding_list_replies`] misbehaves, beyond holding and reordering the replies.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// Bytes added to each list's result (tools, prompts, resources, templates).
    padding: [usize; 4],
    /// resources/list has a second page, answered this long after it is asked for.
    slow_second_resources_page: Option<Duration>,
    /// tools/list gets no reply; the prompts reply is sent this many times more instead.
    repeat_prompts_instead_of_tools: usize,
    /// The padded replies are sent without their id: nothing in them says whose they are.
    padded_without_id: bool,
}

/// A legacy HTTP+SSE server that holds every list's first-page reply until the first pages of
/// all four lists (tools, prompts, resources, templates) have been POSTed — a probe that
/// waited for one reply before sending the next request would time out —, then answers them
/// in reverse order (templates first, tools last) with a notification between.
fn sse_holding_list_replies(cfg: Held) -> Script {
    use std::sync::Mutex;
    use tokio::sync::mpsc;
    struct State {
        stream: Option<mpsc::UnboundedSender<Vec<u8>>>,
        held: Vec<Value>,
    }
    let state = Mutex::new(State {
        stream: None,
        held: Vec::new(),
    });
    let message = |v: &Value| mcp::sse_event(Some("message"), None, &v.to_string()).into_bytes();
    std::sync::Arc::new(move |req: &Request| {
        let mut st = state.lock().unwrap();
        match (req.method.as_str(), req.path()) {
            ("GET", "/sse") => {
                let (tx, rx) = mpsc::unbounded_channel();
                st.stream = Some(tx);
                let endpoint = mcp::sse_event(Some("endpoint"), None, scenario::SSE_ENDPOINT);
                Reply::chunked(
                    200,
                    "text/event-stream",
                    vec![Piece::Data(endpoint.into_bytes()), Piece::Channel(rx)],
                )
            }
            ("POST", "/message") => {
                let id = req.rpc_id().unwrap_or(Value::Null);
                let Some(tx) = st.stream.clone() else {
                    return Reply::bytes(400, "text/plain", "no stream");
                };
                let cursor = req
                    .json()
                    .and_then(|b| b["params"]["cursor"].as_str().map(str::to_owned));
                let result = match (req.rpc_method().as_deref(), cursor.as_deref()) {
                    (Some("initialize"), _) => {
                        let mut r = mcp::initialize_result("2024-11-05");
                        r["capabilities"]["prompts"] = json!({});
                        r["capabilities"]["resources"] = json!({});
                        let _ = tx.send(message(&mcp::result(&id, r)));
                        None
                    }
                    (Some("resources/list"), Some("r2")) => {
                        // The second page, later, from the side.
                        let page =
                            mcp::result(&id, json!({"resources": [{"uri": "x://3", "name": "3"}]}));
                        let wait = cfg.slow_second_resources_page.unwrap_or_default();
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            std::thread::sleep(wait);
                            let _ = tx.send(message(&page));
                        });
                        None
                    }
                    (Some("tools/list"), _) => Some((
                        0,
                        mcp::tools_list_result(mcp::tools(&["a", "b", "c"]), None, false),
                    )),
                    (Some("prompts/list"), _) => Some((1, json!({"prompts": [{"name": "p"}]}))),
                    (Some("resources/list"), _) => {
                        let mut r = json!({"resources": [{"uri": "x://1", "name": "1"}, {"uri": "x://2", "name": "2"}]});
                        if cfg.slow_second_resources_page.is_some() {
                            r["nextCursor"] = json!("r2");
                        }
                        Some((2, r))
                    }
                    (Some("resources/templates/list"), _) => {
                        Some((3, json!({"resourceTemplates": []})))
                    }
                    _ => None,
                };
                if let Some((k, r)) = result {
                    let mut reply = mcp::result(&id, r);
                    if cfg.padding[k] > 0 {
                        reply["result"]["padding"] = json!("p".repeat(cfg.padding[k]));
                        if cfg.padded_without_id
                            && let Some(m) = reply.as_object_mut()
                        {
                            m.remove("id");
                        }
                    }
                    st.held.push(reply);
                    if st.held.len() == 4 {
                        let held = std::mem::take(&mut st.held);
                        for (i, r) in held.iter().enumerate().rev() {
                            if i == 0 && cfg.repeat_prompts_instead_of_tools > 0 {
                                for _ in 0..cfg.repeat_prompts_instead_of_tools {
                                    let _ = tx.send(message(&held[1]));
                                }
                                continue;
                            }
                            let _ = tx.send(message(r));
                            if i == 2 {
                                let note = mcp::notification(
                                    "notifications/message",
                                    json!({"level": "info", "data": "between"}),
                                );
                                let _ = tx.send(message(&note));
                            }
                        }
                    }
                }
                Reply::accepted()
            }
            _ => Reply::bytes(405, "text/plain", "Method Not Allowed"),
        }
    })
}

/// A legacy HTTP+SSE probe with a 64 KiB response cap.
const SSE_CAPPED: &[&str] = &[
    "--transport",
    "sse",
    "--era",
    "legacy",
    "--max-response-size",
    "64KiB",
];

/// A probe (legacy era, cap 64 KiB) of [`sse_holding_list_replies`] with `cfg`.
async fn probe_held_sse(cfg: Held, timeout: &str) -> Run {
    let server = serve(sse_holding_list_replies(cfg)).await;
    probe_url(&server.url("/sse"), timeout, SSE_CAPPED).await
}

/// Over HTTP+SSE the first pages of every list are POSTed before any reply is awaited, and
/// each reply is matched to its request by id, whatever the order they come in.
#[tokio::test]
async fn sse_pipelines_the_first_pages_and_matches_replies_by_id() {
    let server = serve(sse_holding_list_replies(Held::default())).await;
    let run = probe_url(
        &server.url("/sse"),
        "3s",
        &["--transport", "sse", "--era", "legacy"],
    )
    .await;
    run.expect("healthy", &["deprecated-transport"]);
    let r = run.report();
    assert_eq!(r["tool_count"], 3);
    assert_eq!(r["prompt_count"], 1);
    assert_eq!(r["resource_count"], 2);
    assert_eq!(r["resource_template_count"], 0);
    assert_eq!(
        server.methods(),
        [
            "GET",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list"
        ]
    );
}

/// Some HTTP+SSE servers answer in the POST's own body. In a pipeline such an exchange keeps
/// the time of its POST: tools/list is answered at once, and is not charged with the second
/// the server then takes over the prompts/list POST sent after it.
#[tokio::test]
async fn sse_replies_in_the_post_body_keep_their_own_time_in_a_pipeline() {
    let server = serve(std::sync::Arc::new(|req: &Request| {
        match (req.method.as_str(), req.path()) {
            ("GET", "/sse") => {
                let endpoint = mcp::sse_event(Some("endpoint"), None, scenario::SSE_ENDPOINT);
                Reply::chunked(
                    200,
                    "text/event-stream",
                    vec![Piece::Data(endpoint.into_bytes()), Piece::Pending],
                )
            }
            ("POST", "/message") => {
                let id = req.rpc_id().unwrap_or(Value::Null);
                let (result, pause) = match req.rpc_method().as_deref() {
                    Some("initialize") => {
                        let mut r = mcp::initialize_result("2024-11-05");
                        r["capabilities"]["prompts"] = json!({});
                        (r, 0)
                    }
                    Some("tools/list") => {
                        (mcp::tools_list_result(mcp::tools(&["a"]), None, false), 0)
                    }
                    Some("prompts/list") => (json!({"prompts": []}), 1000),
                    _ => return Reply::accepted(),
                };
                let body = mcp::result(&id, result).to_string().into_bytes();
                Reply::chunked(
                    200,
                    "application/json",
                    vec![
                        Piece::Pause(Duration::from_millis(pause)),
                        Piece::Data(body),
                    ],
                )
            }
            _ => Reply::bytes(405, "text/plain", "Method Not Allowed"),
        }
    }))
    .await;
    let run = probe_url(
        &server.url("/sse"),
        TIMEOUT,
        &["--transport", "sse", "--era", "legacy"],
    )
    .await;
    run.expect("healthy", &["deprecated-transport"]);
    let r = run.report();
    assert_eq!(r["tool_count"], 1);
    assert_eq!(r["prompt_count"], 0);
    let tools_ms = r["timings_ms"]["tools_list"].as_f64().unwrap();
    assert!(tools_ms < 500.0, "tools/list took {tools_ms} ms");
}

/// Replies kept for the other requests of a pipeline do not count against the cap of the one
/// being awaited: tools/list's reply comes last, after 40 KiB and 30 KiB replies to the others
/// (each within the 64 KiB cap, together over it), and every list is whole.
#[tokio::test]
async fn replies_kept_for_other_requests_do_not_count_against_the_cap() {
    let run = probe_held_sse(
        Held {
            padding: [0, 30 * 1024, 40 * 1024, 0],
            ..Held::default()
        },
        "3s",
    )
    .await;
    run.expect("healthy", &["deprecated-transport"]);
    let r = run.report();
    assert_eq!(r["tool_count"], 3);
    assert_eq!(r["prompt_count"], 1);
    assert_eq!(r["resource_count"], 2);
}

/// A reply over the cap is dropped, but its id still says whose it was, wherever it stands in
/// the reply: here the prompts reply (100 KiB, cap 64 KiB) arrives while tools/list is awaited,
/// tools/list gets its own reply after it, and prompts/list ends at the cap, at once.
#[tokio::test]
async fn a_reply_over_the_cap_in_a_pipeline_ends_the_request_it_answers() {
    let run = probe_held_sse(
        Held {
            padding: [0, 100 * 1024, 0, 0],
            ..Held::default()
        },
        "5s",
    )
    .await;
    run.expect("degraded", &["prompts-list-failed"]);
    let codes = run.codes();
    assert!(
        !codes.contains(&"tools-list-failed".to_owned()),
        "{codes:?}"
    );
    let prompts = finding_message(&run, "prompts-list-failed");
    assert!(prompts.contains("over the 65536-byte cap"), "{prompts}");
    assert!(!prompts.contains("cannot be told"), "{prompts}");
    let r = run.report();
    assert_eq!(r["tool_count"], 3);
    assert_eq!(r["resource_count"], 2);
    assert_eq!(r["resource_template_count"], 0);
}

/// The message of the first finding (the one that decided the status).
fn first_message(run: &Run) -> String {
    run.report()["findings"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The message of the first finding with this code.
fn finding_message(run: &Run, code: &str) -> String {
    run::finding_message(&run.report(), code)
}

/// A reply over the cap that does not say whose it is (no id) cannot be told apart while
/// several requests are in flight. Each request it may have answered still gets its reply if
/// one turns up within a second, and one that does not ends with the explanation, not at the
/// probe's deadline. Here the prompts reply (100 KiB, cap 64 KiB, no id) arrives while
/// tools/list is awaited: tools/list still gets its own reply after it, the replies kept for
/// resources and templates count, and prompts/list fails.
#[tokio::test]
async fn an_unattributable_reply_over_the_cap_does_not_hold_the_probe_to_its_deadline() {
    let run = probe_held_sse(
        Held {
            padding: [0, 100 * 1024, 0, 0],
            padded_without_id: true,
            ..Held::default()
        },
        "5s",
    )
    .await;
    assert!(
        run.elapsed < Duration::from_secs(4),
        "waited for the deadline: {:?}",
        run.elapsed
    );
    run.expect("degraded", &["prompts-list-failed"]);
    let codes = run.codes();
    assert!(
        !codes.contains(&"tools-list-failed".to_owned()),
        "{codes:?}"
    );
    assert!(!codes.contains(&"timeout".to_owned()), "{codes:?}");
    let r = run.report();
    let prompts = finding_message(&run, "prompts-list-failed");
    assert!(prompts.contains("cannot be told"), "{prompts}");
    assert_eq!(r["tool_count"], 3);
    assert_eq!(r["resource_count"], 2);
    assert_eq!(r["resource_template_count"], 0);
}

/// After an over-cap reply that cannot be told apart, the requests it may have answered are
/// settled one by one; a later request (the second page of resources, 1.5 s in coming) waits
/// for its reply as usual, not a second.
#[tokio::test]
async fn a_later_page_waits_as_usual_after_an_unattributed_over_cap_reply() {
    let run = probe_held_sse(
        Held {
            padding: [0, 100 * 1024, 0, 0],
            padded_without_id: true,
            slow_second_resources_page: Some(Duration::from_millis(1500)),
            ..Held::default()
        },
        "5s",
    )
    .await;
    run.expect("degraded", &["prompts-list-failed"]);
    assert!(!run.codes().contains(&"resources-list-failed".to_owned()));
    assert_eq!(run.report()["resource_count"], 3, "both pages");
}

/// Replies kept for other requests are exempt from the awaited exchange's cap only once each:
/// a server that repeats the prompts reply again and again instead of answering tools/list
/// ends tools/list at the cap, not at the deadline.
#[tokio::test]
async fn a_repeated_reply_to_another_request_counts_against_the_cap() {
    let run = probe_held_sse(
        Held {
            padding: [0, 1024, 0, 0],
            repeat_prompts_instead_of_tools: 100,
            ..Held::default()
        },
        "5s",
    )
    .await;
    assert_list_cut_at_64k(&run);
    assert_eq!(run.report()["prompt_count"], 1);
}

#[tokio::test]
async fn repeated_cursor_is_reported_and_not_followed() {
    let server = serve(scenario::modern(false, vec![Some("c1"), Some("c1")])).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("degraded", &["cursor-repeated"]);
    assert_eq!(run.report()["tool_count"], 2);
    let lists = with_method(&server.requests(), "tools/list");
    assert_eq!(lists.len(), 2, "mcpulse stops at the repeated cursor");
    assert_eq!(lists[0].json().unwrap()["params"].get("cursor"), None);
    assert_eq!(lists[1].json().unwrap()["params"]["cursor"], "c1");
}

/// A list's pages together stay within the response cap: a server that hands out page after
/// page of 40 KiB (cap 64 KiB) is not followed past the page that crossed it, and the list is
/// reported cut (no contract is taken from it).
#[tokio::test]
async fn pages_are_not_followed_past_the_response_cap() {
    let calls = std::sync::Mutex::new(0usize);
    let server = FakeHttp::start(move |req: &Request| {
        let id = req.rpc_id().unwrap_or(Value::Null);
        match req.rpc_method().as_deref() {
            Some("server/discover") => Reply::json(200, &mcp::result(&id, mcp::discover_result())),
            Some("tools/list") => {
                let k = {
                    let mut n = calls.lock().unwrap();
                    *n += 1;
                    *n
                };
                let tool = json!({
                    "name": format!("tool_{k}"),
                    "description": "y".repeat(40 * 1024),
                    "inputSchema": {"type": "object"},
                });
                let cursor = format!("c{k}");
                let page = mcp::tools_list_result(vec![tool], Some(&cursor), true);
                Reply::json(200, &mcp::result(&id, page))
            }
            _ => Reply::json(400, &mcp::error(&id, -32022, "modern only")),
        }
    })
    .await;
    let run = probe_url(
        &server.url("/mcp"),
        TIMEOUT,
        &["--era", "modern", "--max-response-size", "64KiB"],
    )
    .await;
    run.expect("degraded", &["tools-list-failed"]);
    let message = first_message(&run);
    assert!(
        message.contains("passed the 65536-byte cap") && message.contains("first 2 pages"),
        "{message}"
    );
    assert_eq!(with_method(&server.requests(), "tools/list").len(), 2);
    assert_eq!(
        run.report()["digests"],
        Value::Null,
        "no contract from a cut list"
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP servers that are down, wrong, or gated.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn server_that_never_answers_times_out() {
    let server = FakeHttp::start(|_| Reply::silence()).await;
    let run = probe_url(&server.url("/mcp"), "1s", &[]).await;
    run.expect("down", &["timeout"]);
    assert!(
        run.elapsed >= Duration::from_millis(900),
        "gave up early: {:?}",
        run.elapsed
    );
    // A timeout is not evidence of an era: no legacy fallback.
    assert_eq!(server.methods(), ["server/discover"]);
}

#[tokio::test]
async fn body_dripping_one_byte_a_second_times_out() {
    let server = FakeHttp::start(|req| {
        let reply = mcp::result(&req.rpc_id().unwrap_or(Value::Null), mcp::discover_result());
        Reply::json(200, &reply).with_body(Body::Drip {
            bytes: reply.to_string().into_bytes(),
            every: Duration::from_secs(1),
        })
    })
    .await;
    let run = probe_url(&server.url("/mcp"), "2s", &[]).await;
    run.expect("down", &["timeout"]);
    assert_eq!(server.methods(), ["server/discover"]);
}

#[tokio::test]
async fn event_stream_that_never_ends_times_out() {
    let server = FakeHttp::start(|_| {
        Reply::chunked(
            200,
            "text/event-stream",
            vec![Piece::Repeat {
                data: b": keep-alive\n\n".to_vec(),
                every: Duration::from_millis(100),
            }],
        )
    })
    .await;
    let run = probe_url(&server.url("/mcp"), "1s", &[]).await;
    run.expect("down", &["timeout"]);
    assert_eq!(server.methods(), ["server/discover"]);
}

#[tokio::test]
async fn html_page_with_status_200_is_not_json_rpc() {
    let server = FakeHttp::start(|_| {
        Reply::html(
            200,
            "<!DOCTYPE html><html><body><h1>Sign in</h1></body></html>",
        )
    })
    .await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("down", &["not-json-rpc"]);
    // The verdict's details (the only finding, its message): mcpulse-judge tests/recorded.rs.
    // A 2xx without a JSON-RPC reply is a legacy candidate: initialize is tried too.
    assert_eq!(server.methods(), ["server/discover", "initialize"]);
}

#[tokio::test]
async fn status_503_is_a_server_error_and_stops_the_probe() {
    let server = FakeHttp::start(|_| Reply::bytes(503, "text/plain", "upstream unavailable")).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("down", &["server-error"]);
    // The verdict (no era from a 5xx): mcpulse-judge tests/recorded.rs.
    assert_eq!(
        server.methods(),
        ["server/discover"],
        "a 5xx is not evidence of an era: no fallback"
    );
}

#[tokio::test]
async fn a_redirect_to_gopher_is_refused_and_named() {
    // A listener on the port the redirect names: it must never see a connection.
    let gopher = RawListener::start("127.0.0.1", "").await;
    let location = format!("gopher://{}/x", gopher.addr());
    let to = location.clone();
    let server = FakeHttp::start(move |_| Reply::status(307).header("location", &to)).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("down", &["http-failed"]);
    let message = finding_message(&run, "http-failed");
    assert!(
        message.contains(&format!("redirect to {location} refused"))
            && message.contains("only http and https are followed"),
        "{message}"
    );
    assert_eq!(
        gopher.connections(),
        0,
        "the redirect's target was contacted"
    );
}

#[tokio::test]
async fn status_401_with_resource_metadata_is_up_but_gated() {
    let server = serve(scenario::unauthorized(true)).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("degraded", &["auth-required"]);
    // The verdict's details (auth, auth_detail, the message naming the authorization server):
    // mcpulse-judge tests/recorded.rs. Here: the metadata document is fetched, once.
    let reqs = server.requests();
    assert_eq!(server.methods(), ["server/discover", "GET"]);
    assert_eq!(reqs[1].path(), scenario::RESOURCE_METADATA_PATH);
}

/// `snapshot` of a gated server writes nothing and exits 1 (up, but its contract could not be
/// taken), not 2, which its help keeps for a server that is down.
#[tokio::test]
async fn snapshot_of_a_gated_server_exits_1_not_down() {
    let server = serve(scenario::unauthorized(false)).await;
    let dir = TempDir::new("snapshot-gated");
    let lock = dir.join("gated.lock");
    let url = server.url("/mcp");
    let run = run_with(
        &[
            "snapshot",
            "--timeout",
            "3s",
            "-o",
            lock.to_str().unwrap(),
            &url,
        ],
        &[],
        Duration::from_secs(3) + SLACK,
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("(degraded)") && run.stderr.contains("auth-required"),
        "{}",
        run.stderr
    );
    assert!(!lock.exists());
}

#[tokio::test]
async fn status_401_without_a_challenge_is_up_but_gated() {
    let server = serve(scenario::unauthorized(false)).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("degraded", &["auth-required"]);
    // The verdict's details: mcpulse-judge tests/recorded.rs.
    assert_eq!(
        server.methods(),
        ["server/discover"],
        "nothing to fetch without a challenge"
    );
}

#[tokio::test]
async fn nothing_at_the_url_ends_with_no_sse_endpoint() {
    // POST 404 (a legacy candidate), initialize 404 (maybe HTTP+SSE), GET 405: nothing there.
    let server = FakeHttp::start(|req| match req.method.as_str() {
        "GET" => Reply::status(405).header("allow", "POST"),
        _ => Reply::bytes(404, "text/plain", "Not Found"),
    })
    .await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("down", &["sse-no-endpoint"]);
    assert_eq!(server.methods(), ["server/discover", "initialize", "GET"]);
}

#[tokio::test]
async fn reply_with_the_wrong_id_is_reported() {
    let server = FakeHttp::start(|req| {
        let result = match req.rpc_method().as_deref() {
            Some("initialize") => mcp::initialize_result(mcp::LEGACY),
            _ => mcp::discover_result(),
        };
        Reply::json(200, &mcp::result(&json!(999), result))
    })
    .await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("down", &["wrong-reply-id"]);
    // The message naming the id: mcpulse-judge tests/recorded.rs.
}

#[tokio::test]
async fn oversize_body_is_cut_at_the_cap() {
    // 256 KiB of a JSON reply that never gets to its end, streamed in 8 KiB chunks; cap 64 KiB.
    let server = FakeHttp::start(|_| {
        let mut pieces = vec![Piece::Data(
            br#"{"jsonrpc":"2.0","id":1,"result":{"padding":""#.to_vec(),
        )];
        pieces.extend((0..32).map(|_| Piece::Data(vec![b'x'; 8 * 1024])));
        pieces.push(Piece::Data(br#""}}"#.to_vec()));
        Reply::chunked(200, "application/json", pieces)
    })
    .await;
    let run = probe_url(
        &server.url("/mcp"),
        TIMEOUT,
        &["--max-response-size", "64KiB"],
    )
    .await;
    run.expect("down", &["response-too-large"]);
    let message = first_message(&run);
    assert!(message.contains("65536"), "{message}");
    assert_eq!(server.methods(), ["server/discover"]);
}

/// The legacy SSE stream never ends, so what one exchange takes in from it is capped: a server
/// that answers `tools/list` with notifications and never the reply (256 KiB of them here, cap
/// 64 KiB) ends that exchange at the cap, not at the deadline.
#[tokio::test]
async fn notifications_flooding_the_sse_stream_are_cut_at_the_cap() {
    use std::sync::Mutex;
    use tokio::sync::mpsc;
    let stream: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>> = Mutex::new(None);
    let server = serve(std::sync::Arc::new(move |req: &Request| {
        let mut tx = stream.lock().unwrap();
        match (req.method.as_str(), req.path()) {
            ("GET", "/sse") => {
                let (sender, rx) = mpsc::unbounded_channel();
                *tx = Some(sender);
                let endpoint = mcp::sse_event(Some("endpoint"), None, scenario::SSE_ENDPOINT);
                Reply::chunked(
                    200,
                    "text/event-stream",
                    vec![Piece::Data(endpoint.into_bytes()), Piece::Channel(rx)],
                )
            }
            ("POST", "/message") => {
                let id = req.rpc_id().unwrap_or(Value::Null);
                let events: Vec<String> = match req.rpc_method().as_deref() {
                    Some("initialize") => {
                        vec![mcp::result(&id, mcp::initialize_result("2024-11-05")).to_string()]
                    }
                    Some("tools/list") => {
                        let log = mcp::notification(
                            "notifications/message",
                            json!({"level": "info", "data": "x".repeat(1024)}),
                        )
                        .to_string();
                        vec![log; 256]
                    }
                    _ => Vec::new(),
                };
                if let Some(tx) = tx.as_ref() {
                    for e in events {
                        let _ = tx.send(mcp::sse_event(Some("message"), None, &e).into_bytes());
                    }
                }
                Reply::accepted()
            }
            _ => Reply::bytes(405, "text/plain", "Method Not Allowed"),
        }
    }))
    .await;
    let run = probe_url(&server.url("/sse"), TIMEOUT, SSE_CAPPED).await;
    // Up, with a list that failed: degraded, and the message says why.
    assert_list_cut_at_64k(&run);
}

#[tokio::test]
async fn server_hanging_up_after_every_reply_is_still_healthy() {
    // A short idle timeout: each connection is closed, unannounced, after one reply. mcpulse
    // finds its kept-alive connection dead and must retry on a fresh one.
    let legacy = scenario::legacy_streamable(Framing::Json);
    let server = FakeHttp::start(move |req| legacy(req).hanging_up()).await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("healthy", &["legacy-only"]);
    assert_eq!(
        server.methods(),
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "DELETE"
        ]
    );
    let connections: Vec<usize> = server.requests().iter().map(|r| r.connection).collect();
    assert_eq!(connections, [0, 1, 2, 3, 4], "one connection per request");
}

#[tokio::test]
async fn body_cut_short_is_an_http_failure() {
    // Content-Length promises more than is sent before the connection closes.
    let server = FakeHttp::start(|req| {
        let reply = mcp::result(&req.rpc_id().unwrap_or(Value::Null), mcp::discover_result());
        Reply::json(200, &reply)
            .header("content-length", "100000")
            .hanging_up()
    })
    .await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("down", &["http-failed"]);
    assert_eq!(
        server.methods(),
        ["server/discover"],
        "a broken response is not evidence of an era"
    );
}

#[tokio::test]
async fn status_403_is_up_but_forbidden() {
    let server = FakeHttp::start(|_| {
        Reply::json(
            403,
            &mcp::error(&Value::Null, -32000, "Forbidden: Origin not allowed"),
        )
    })
    .await;
    let run = probe_url(&server.url("/mcp"), TIMEOUT, &[]).await;
    run.expect("degraded", &["forbidden"]);
    // The verdict's details: mcpulse-judge tests/recorded.rs.
    assert_eq!(server.methods(), ["server/discover"]);
}

#[tokio::test]
async fn sse_stream_that_ends_before_the_endpoint_event() {
    let server = FakeHttp::start(|req| match req.method.as_str() {
        "GET" => Reply::sse(vec![
            ": hello\n\n".to_owned(),
            mcp::sse_event(Some("ping"), None, "{}"),
        ]),
        _ => Reply::status(405).header("allow", "GET"),
    })
    .await;
    let run = probe_url(&server.url("/sse"), TIMEOUT, &[]).await;
    run.expect("down", &["sse-no-endpoint"]);
    assert_eq!(run.report()["transport"], "sse");
    assert_eq!(server.methods(), ["server/discover", "initialize", "GET"]);
}

// ---------------------------------------------------------------------------------------------
// stdio servers.
// ---------------------------------------------------------------------------------------------

/// A legacy stdio server: `initialize` and `tools/list` answered, anything else ignored.
fn legacy_stdio() -> StdioScript {
    StdioScript::legacy()
}

/// A modern stdio server: `server/discover` and `tools/list` (these tools) answered. Rules
/// added later for the same methods never run (the first match answers).
fn modern_stdio(tools: &[&str]) -> StdioScript {
    StdioScript::new()
        .on("server/discover", vec![Act::Result(mcp::discover_result())])
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                mcp::tools(tools),
                None,
                true,
            ))],
        )
}

/// `n` processes wrote their pid to `file`, and none of them runs any more.
fn assert_processes_ended(file: &std::path::Path, n: usize) {
    let pids = read_pids(file);
    assert_eq!(pids.len(), n, "{pids:?}");
    assert_no_survivors(&pids);
}

fn assert_no_survivors(pids: &[u32]) {
    let alive = still_running_after(pids, Duration::from_secs(2));
    mcpulse_testkit::stdio::kill(&alive);
    assert!(
        alive.is_empty(),
        "processes left running after mcpulse exited: {alive:?} (of {pids:?})"
    );
}

/// Over stdio too, what one exchange takes in is capped: a server that answers `tools/list`
/// with 256 notifications of 1 KiB and never the reply (cap 64 KiB) ends that exchange at the
/// cap, not at the deadline.
#[tokio::test]
async fn notifications_flooding_stdout_are_cut_at_the_cap() {
    let dir = TempDir::new("flood");
    let log = mcp::notification(
        "notifications/message",
        json!({"level": "info", "data": "x".repeat(1024)}),
    )
    .to_string();
    let script = StdioScript::new()
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .on(
            "tools/list",
            vec![Act::Repeat(Box::new(Act::Stdout(log)), 256)],
        )
        .write(&dir, "server.sh");
    let run = probe_legacy_capped(&script, &[]).await;
    assert_list_cut_at_64k(&run);
}

/// Over stdio too, a reply kept for another request of the pipeline is exempt from the awaited
/// exchange's cap once: a server that answers prompts/list a hundred times (1 KiB each) and
/// tools/list never ends tools/list at the 64 KiB cap, not at the deadline.
#[tokio::test]
async fn a_repeated_reply_on_stdout_counts_against_the_cap() {
    let dir = TempDir::new("repeat");
    let init = legacy_init_with_prompts();
    let prompts = json!({"prompts": [{"name": "p", "description": "d".repeat(1024)}]});
    let script = StdioScript::new()
        .on("initialize", vec![Act::Result(init)])
        .on(
            "prompts/list",
            vec![Act::Repeat(Box::new(Act::Result(prompts)), 100)],
        )
        .write(&dir, "server.sh");
    let run = probe_legacy_capped(&script, &[]).await;
    assert_list_cut_at_64k(&run);
    assert_eq!(run.report()["prompt_count"], 1);
}

/// A reply line over the cap is dropped, but its id still says whose it was: the exchange
/// awaiting it ends at the cap, not at the deadline, and the line is not stdout noise.
#[tokio::test]
async fn a_reply_line_over_the_cap_ends_its_exchange() {
    let dir = TempDir::new("big-reply");
    let tools = mcp::tools_list_result(
        vec![
            json!({"name": "a", "description": "d".repeat(100 * 1024), "inputSchema": {"type": "object"}}),
        ],
        None,
        false,
    );
    let script = StdioScript::new()
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .on("tools/list", vec![Act::Result(tools)])
        .write(&dir, "server.sh");
    let run = probe_legacy_capped(&script, &[]).await;
    assert_list_cut_at_64k(&run);
    assert!(
        !run.codes().contains(&"stdout-pollution".to_owned()),
        "{:?}",
        run.codes()
    );
}

/// Over stdio too, a reply over the cap to another request of the pipeline (prompts/list,
/// answered before tools/list) is put aside for it: tools/list gets its own reply, and
/// prompts/list ends at the cap when it is collected.
#[tokio::test]
async fn a_reply_line_over_the_cap_to_another_request_ends_that_one() {
    let dir = TempDir::new("big-other-reply");
    let init = legacy_init_with_prompts();
    let prompts = json!({"prompts": [{"name": "p", "description": "d".repeat(100 * 1024)}]});
    let tools = mcp::tools_list_result(mcp::tools(&["a", "b"]), None, false);
    let script = StdioScript::new()
        .on("initialize", vec![Act::Result(init)])
        .on(
            "prompts/list",
            vec![Act::Result(prompts), Act::ResultToPrevious(tools)],
        )
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let run = probe_legacy_capped(&script, &["--transcript", transcript.to_str().unwrap()]).await;
    run.expect("degraded", &["prompts-list-failed"]);
    let prompts = finding_message(&run, "prompts-list-failed");
    assert!(prompts.contains("over the 65536-byte cap"), "{prompts}");
    assert_eq!(run.report()["tool_count"], 2);
    assert!(!run.codes().contains(&"timeout".to_owned()));
    // Timed to its arrival (before the tools reply), not to when it was collected (after).
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    let end = |step: &str| {
        let e = tr["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["step"] == step)
            .unwrap();
        e["at_ms"].as_f64().unwrap() + e["elapsed_ms"].as_f64().unwrap()
    };
    // The transcript keeps microseconds: two ends in the same one may sum to a hair apart.
    assert!(
        end("prompts/list") <= end("tools/list") + 0.0005,
        "prompts/list {} ms, tools/list {} ms",
        end("prompts/list"),
        end("tools/list")
    );
}

#[tokio::test]
async fn an_unwritable_transcript_path_fails_before_probing() {
    // A server that would hold the probe to its whole --timeout: before the fix, mcpulse probed
    // it for 5 s and only then failed to write the transcript.
    let server = FakeHttp::start(|_| Reply::silence()).await;
    let dir = TempDir::new("transcript-path");
    for path in [dir.join("no-such-dir/transcript.json"), dir.join("")] {
        let run = probe_url(
            &server.url("/mcp"),
            TIMEOUT,
            &["--transcript", path.to_str().unwrap()],
        )
        .await;
        assert_eq!(run.code, Some(3), "{}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("--transcript {}", path.display()))
                && run.stderr.contains("nothing was probed"),
            "{}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        assert!(run.elapsed < Duration::from_secs(2), "{:?}", run.elapsed);
    }
    assert!(server.requests().is_empty(), "the server was not contacted");
}

#[tokio::test]
async fn stdio_server_that_exits_before_initialize_is_probed_in_a_fresh_process() {
    // Like rmcp servers: any request before `initialize` makes it exit. The process dies on
    // server/discover; the legacy handshake runs in a fresh process, sent nothing else.
    let dir = TempDir::new("respawn");
    let pids = dir.join("pids");
    let script = legacy_stdio()
        .at_start(Act::RecordPid(pids.clone()))
        .at_start(Act::SpawnGrandchild(pids.clone()))
        .on(
            "server/discover",
            vec![
                Act::Stderr("error: expected initialize, got server/discover".into()),
                Act::Exit(1),
            ],
        )
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let path = script.to_str().unwrap();
    let args = [
        "probe",
        "--json",
        "--timeout",
        TIMEOUT,
        "--transcript",
        transcript.to_str().unwrap(),
        "--",
        "sh",
        path,
    ];
    let run = run_with(&args, &[], parse_secs(TIMEOUT) + SLACK).await;
    run.expect("healthy", &["legacy-only", "stderr-output"]);
    let r = run.report();
    assert_eq!(r["transport"], "stdio");
    assert_eq!(r["era"], "legacy");
    assert_eq!(r["protocol_version"], mcp::LEGACY);
    assert_eq!(r["tool_count"], 1);
    assert_eq!(
        r["stderr"],
        json!(["error: expected initialize, got server/discover"])
    );

    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    let purposes: Vec<&str> = tr["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["purpose"].as_str().unwrap())
        .collect();
    assert_eq!(purposes, ["probe", "legacy fallback"]);
    assert_eq!(tr["processes"][0]["exit"]["code"], 1);
    assert_eq!(tr["processes"][0]["exit"]["by_probe"], false);

    let pids = read_pids(&pids);
    assert_eq!(
        pids.len(),
        4,
        "two scripts, each with a grandchild: {pids:?}"
    );
    assert_no_survivors(&pids);
}

/// The purpose of each process of a transcript, in order.
fn purposes(transcript: &std::path::Path) -> Vec<String> {
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(transcript).unwrap()).unwrap();
    tr["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["purpose"].as_str().unwrap().to_owned())
        .collect()
}

async fn probe_script_with_transcript(
    script: &std::path::Path,
    transcript: &std::path::Path,
) -> Run {
    probe_script_args_with_transcript(script, &[], transcript).await
}

/// `mcpulse probe --json --timeout 5s --transcript <transcript> -- sh <script> <server_args...>`.
async fn probe_script_args_with_transcript(
    script: &std::path::Path,
    server_args: &[&str],
    transcript: &std::path::Path,
) -> Run {
    let mut args = vec![
        "probe",
        "--json",
        "--timeout",
        TIMEOUT,
        "--transcript",
        transcript.to_str().unwrap(),
        "--",
        "sh",
        script.to_str().unwrap(),
    ];
    args.extend_from_slice(server_args);
    run_with(&args, &[], parse_secs(TIMEOUT) + SLACK).await
}

#[tokio::test]
async fn stdio_legacy_server_is_probed_in_one_process() {
    // A legacy server answers server/discover with an error and stays up: the handshake goes
    // on in the same process, as a client's would. One start-up, not two.
    let dir = TempDir::new("one-process-legacy");
    let pids = dir.join("pids");
    let script = legacy_stdio()
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let run = probe_script_with_transcript(&script, &transcript).await;
    run.expect("healthy", &["legacy-only"]);
    let r = run.report();
    assert_eq!(r["era"], "legacy");
    assert_eq!(r["tool_count"], 1);
    assert_eq!(purposes(&transcript), ["probe"]);
    assert_processes_ended(&pids, 1);
}

/// A server that advertises resources but answers `-32601` to `resources/templates/list` is
/// missing an optional method: healthy, with an info finding (docs/probe.md, "The lists").
#[tokio::test]
async fn resources_without_templates_list_is_healthy_with_an_info_finding() {
    let dir = TempDir::new("no-templates");
    let pids = dir.join("pids");
    let resources = json!({"resources": [{"uri": "file:///readme.md", "name": "readme"}]});
    let script = StdioScript::legacy_advertising(json!({"tools": {}, "resources": {}}))
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .on("resources/list", vec![Act::Result(resources)])
        .on(
            "resources/templates/list",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let run = probe_script(&script, TIMEOUT).await;
    run.expect("healthy", &["optional-method-missing", "legacy-only"]);
    assert_eq!(
        finding_message(&run, "optional-method-missing"),
        "resources/templates/list is not implemented although the resources capability is advertised: error -32601 Method not found"
    );
    let r = run.report();
    assert_eq!(r["resource_count"], 1);
    assert_eq!(r["resource_template_count"], Value::Null);
    assert_processes_ended(&pids, 1);
}

#[tokio::test]
async fn stdio_legacy_server_that_exits_on_initialize_after_discover_gets_a_fresh_process() {
    // It answers server/discover with an error, then ends its session on the `initialize` that
    // follows in the same process (a server that allows nothing but one first request): the
    // handshake is made again in a fresh process, which is sent nothing else.
    let dir = TempDir::new("exits-on-initialize");
    let pids = dir.join("pids");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .on(
            "initialize",
            vec![
                Act::ExitOnce(dir.join("died")),
                Act::Result(mcp::initialize_result(mcp::LEGACY)),
            ],
        )
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                mcp::tools(&["echo"]),
                None,
                false,
            ))],
        )
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let run = probe_script_with_transcript(&script, &transcript).await;
    run.expect("healthy", &["legacy-only"]);
    let r = run.report();
    assert_eq!(r["era"], "legacy");
    assert_eq!(r["tool_count"], 1);
    assert_eq!(purposes(&transcript), ["probe", "legacy fallback"]);
    assert_processes_ended(&pids, 2);
}

#[tokio::test]
async fn stdio_start_up_is_its_own_phase_not_the_handshake() {
    // An interpreter's or a package manager's start: 1.5 s before the server first writes
    // anything. The latency budget (1 s) judges the handshake from then on, so the server is
    // healthy; the start-up is reported apart.
    let dir = TempDir::new("slow-start");
    let script = legacy_stdio()
        .at_start(Act::Sleep(1500))
        .at_start(Act::Stderr("ready".into()))
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let run = probe_script_with(&script, TIMEOUT, &["--latency-budget", "1s"]).await;
    run.expect("healthy", &["legacy-only"]);
    let t = &run.report()["timings_ms"];
    let (startup, handshake) = (
        t["startup"].as_f64().unwrap(),
        t["handshake"].as_f64().unwrap(),
    );
    assert!(startup >= 1400.0, "{t}");
    assert!(handshake < 1000.0, "{t}");
    assert!(!run.codes().contains(&"slow-handshake".to_owned()));
    // Without a --timeout, a stdio probe gets the stdio default (room for a cold `npx`).
    let transcript = dir.join("transcript.json");
    let run = probe_script_flags_with_transcript(&script, &[], &transcript).await;
    run.expect("healthy", &["legacy-only"]);
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    assert_eq!(tr["plan"]["timeout_ms"], 60000, "{}", tr["plan"]);
}

/// `mcpulse probe --json <flags...> --transcript <transcript> -- sh <script>` (no `--timeout`
/// unless `flags` has one), bounded by the test's usual timeout and slack.
async fn probe_script_flags_with_transcript(
    script: &std::path::Path,
    flags: &[&str],
    transcript: &std::path::Path,
) -> Run {
    let mut args = vec!["probe", "--json"];
    args.extend_from_slice(flags);
    args.extend([
        "--transcript",
        transcript.to_str().unwrap(),
        "--",
        "sh",
        script.to_str().unwrap(),
    ]);
    run_with(&args, &[], parse_secs(TIMEOUT) + SLACK).await
}

#[tokio::test]
async fn stdio_modern_server_silent_while_it_starts_is_not_sent_a_legacy_handshake() {
    // Silent for 1.2 s, then it answers server/discover. With a 2 s budget, auto mode gives a
    // server that has written nothing three quarters of it (not half): it is still starting,
    // and a legacy `initialize` sent now would reach a modern server.
    let dir = TempDir::new("slow-modern-start");
    let script = modern_stdio(&["a"])
        .at_start(Act::Sleep(1200))
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let flags = ["--timeout", "2s", "--latency-budget", "1s"];
    let run = probe_script_flags_with_transcript(&script, &flags, &transcript).await;
    run.expect("healthy", &[]);
    assert_eq!(run.report()["era"], "modern");
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    let steps: Vec<&str> = tr["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["step"].as_str().unwrap())
        .collect();
    assert!(!steps.contains(&"initialize"), "{steps:?}");
    // Its reply was its first output: all of the wait is start-up, none of it handshake.
    assert!(run.report()["timings_ms"]["startup"].as_f64().unwrap() >= 1100.0);
}

#[tokio::test]
async fn stdio_server_silent_since_its_spawn_times_out_saying_it_may_be_starting() {
    let dir = TempDir::new("silent-start");
    let script = StdioScript::new()
        .at_start(Act::Hang)
        .write(&dir, "server.sh");
    let run = probe_script(&script, "1s").await;
    run.expect("down", &["timeout"]);
    let message = run.report()["findings"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("has written nothing yet")
            && message.contains("raise the timeout")
            && message.contains("--timeout; a monitor target's timeout"),
        "{message}"
    );
    assert_eq!(run.report()["timings_ms"]["startup"], Value::Null);
}

#[tokio::test]
async fn stdio_dual_era_check_is_opt_in_and_gets_a_process_of_its_own() {
    let dir = TempDir::new("dual-era-opt-in");
    let pids = dir.join("pids");
    let script = modern_stdio(&["a"])
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .write(&dir, "server.sh");
    // By default: one process, and the dual-era question not asked.
    let transcript = dir.join("transcript.json");
    let run = probe_script_with_transcript(&script, &transcript).await;
    run.expect("healthy", &[]);
    let r = run.report();
    assert_eq!(r["era"], "modern");
    assert_eq!(r["dual_era"], Value::Null, "not asked: not known");
    assert_eq!(purposes(&transcript), ["probe"]);
    assert_processes_ended(&pids, 1);
    // --dual-era: the check in a second process, started beside the first.
    let again = dir.join("transcript-dual.json");
    let run =
        probe_script_flags_with_transcript(&script, &["--dual-era", "--timeout", TIMEOUT], &again)
            .await;
    run.expect("healthy", &["dual-era"]);
    assert_eq!(run.report()["dual_era"], true);
    assert_eq!(purposes(&again), ["probe", "dual-era check"]);
    assert_processes_ended(&pids, 3);
}

#[tokio::test]
async fn stdio_dual_era_sibling_that_dies_gets_a_fresh_process_after_the_first() {
    // A server that cannot run twice at once: the dual-era sibling started beside the first
    // dies on its `initialize`; the check is made again once the first has ended.
    let dir = TempDir::new("sibling-dies-modern");
    let pids = dir.join("pids");
    let script = modern_stdio(&["a"])
        .at_start(Act::RecordPid(pids.clone()))
        .on(
            "initialize",
            vec![
                Act::ExitOnce(dir.join("died")),
                Act::Result(mcp::initialize_result(mcp::LEGACY)),
            ],
        )
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let run = probe_script_flags_with_transcript(
        &script,
        &["--dual-era", "--timeout", TIMEOUT],
        &transcript,
    )
    .await;
    run.expect("healthy", &["dual-era"]);
    let r = run.report();
    assert_eq!(r["era"], "modern");
    assert_eq!(r["dual_era"], true);
    assert_eq!(
        purposes(&transcript),
        ["dual-era check", "probe", "dual-era check"]
    );
    assert_processes_ended(&pids, 3);
}

#[tokio::test]
async fn stdio_modern_server_is_healthy_and_leaves_nothing_behind() {
    let dir = TempDir::new("modern");
    let pids = dir.join("pids");
    let script = modern_stdio(&["a", "b", "c"])
        .at_start(Act::RecordPid(pids.clone()))
        .at_start(Act::SpawnGrandchild(pids.clone()))
        .on(
            "initialize",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let run = probe_script(&script, TIMEOUT).await;
    run.expect("healthy", &[]);
    assert_eq!(run.codes(), Vec::<String>::new());
    let r = run.report();
    assert_eq!(r["transport"], "stdio");
    assert_eq!(r["era"], "modern");
    assert_eq!(
        r["dual_era"],
        Value::Null,
        "not asked over stdio by default"
    );
    assert_eq!(r["tool_count"], 3);
    assert_eq!(r["server"]["name"], "fake-mcp");
    // One process (the dual-era check is opt-in over stdio), and its grandchild.
    assert_processes_ended(&pids, 2);
}

#[tokio::test]
async fn stdio_leader_that_exits_while_a_grandchild_holds_stdout_costs_one_drain_not_one_per_list()
{
    // The server process exits after the handshake, but a child it started keeps its stdout
    // open, so no end-of-file comes. The four pipelined lists must not each wait out the
    // drain after the exit: the first does, the others end at once.
    let dir = TempDir::new("leader-exits");
    let pids = dir.join("pids");
    let mut init = mcp::initialize_result(mcp::LEGACY);
    init["capabilities"] = json!({"tools": {}, "prompts": {}, "resources": {}});
    let script = StdioScript::new()
        .on("initialize", vec![Act::Result(init)])
        .on(
            "notifications/initialized",
            vec![
                Act::Stdout(String::new()), // (a blank line: ignored)
                Act::Exit(0),
            ],
        )
        .write(&dir, "server.sh");
    // A grandchild that keeps the script's stdout open: started by a wrapper, not the script.
    let wrapper = dir.join("wrapper.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nsleep 100000 &\necho $! >> {}\nexec sh {}\n",
            pids.display(),
            script.display()
        ),
    )
    .unwrap();
    let transcript = dir.join("transcript.json");
    let args = [
        "probe",
        "--json",
        "--era",
        "legacy",
        "--timeout",
        TIMEOUT,
        "--transcript",
        transcript.to_str().unwrap(),
        "--",
        "sh",
        wrapper.to_str().unwrap(),
    ];
    let run = run_with(&args, &[], parse_secs(TIMEOUT) + SLACK).await;
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    let lists: Vec<&Value> = tr["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"].as_str().is_some_and(|s| s.ends_with("/list")))
        .collect();
    assert_eq!(lists.len(), 4, "{lists:?}");
    // Sent together, they end together: one drain (100 ms) in all, not one after another.
    let ends: Vec<f64> = lists
        .iter()
        .map(|e| e["at_ms"].as_f64().unwrap() + e["elapsed_ms"].as_f64().unwrap())
        .collect();
    let spread = ends.iter().cloned().fold(f64::MIN, f64::max)
        - ends.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        spread < 90.0,
        "the lists ended {spread} ms apart: each waited out a drain ({ends:?})"
    );
    run.expect("down", &["process-exited-after-handshake"]);
    assert_processes_ended(&pids, 1);
}

#[tokio::test]
async fn stdio_server_that_crashes_on_tools_list_is_down() {
    // The handshake works; tools/list kills it. A client would lose its session: down, with
    // the exit and the last stderr line, not merely a failed list.
    let dir = TempDir::new("crash-on-list");
    let script = StdioScript::new()
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .on(
            "tools/list",
            vec![
                Act::Stderr("panic: index out of range".into()),
                Act::Exit(3),
            ],
        )
        .write(&dir, "server.sh");
    let run = probe_script(&script, TIMEOUT).await;
    run.expect(
        "down",
        &["process-exited-after-handshake", "tools-list-failed"],
    );
    let exited = run.report()["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "process-exited-after-handshake")
        .cloned()
        .unwrap();
    let message = exited["message"].as_str().unwrap();
    assert!(
        message.contains("exited with code 3")
            && message.contains("during tools/list")
            && message.contains("panic: index out of range"),
        "{message}"
    );
}

#[tokio::test]
async fn stdio_stdout_pollution_is_a_warning() {
    let dir = TempDir::new("pollution");
    let script = legacy_stdio()
        .at_start(Act::Stdout("Server listening on stdio".into()))
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let run = probe_script(&script, TIMEOUT).await;
    run.expect("degraded", &["stdout-pollution", "legacy-only"]);
    // The verdict's details (a warning quoting the line, the legacy era, the tool):
    // mcpulse-judge tests/recorded.rs.
}

#[tokio::test]
async fn stdio_server_that_exits_at_once_is_down_with_its_stderr() {
    let dir = TempDir::new("exits");
    let script = StdioScript::new()
        .at_start(Act::Stderr("fatal: API_KEY is not set".into()))
        .at_start(Act::Exit(1))
        .write(&dir, "server.sh");
    let run = probe_script(&script, TIMEOUT).await;
    run.expect("down", &["process-exited"]);
    let r = run.report();
    assert_eq!(r["transport"], "stdio");
    assert!(
        r["stderr"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "fatal: API_KEY is not set"),
        "{r}"
    );
    // The verdict's details (process-exited is critical): mcpulse-judge tests/recorded.rs.
}

#[tokio::test]
async fn stdio_command_that_does_not_exist_fails_to_spawn() {
    let args = [
        "probe",
        "--json",
        "--timeout",
        TIMEOUT,
        "--",
        "/nonexistent/mcpulse-test-no-such-server",
    ];
    let run = run_with(&args, &[], parse_secs(TIMEOUT) + SLACK).await;
    run.expect("down", &["spawn-failed"]);
    assert_eq!(run.codes(), ["spawn-failed"]);
    assert_eq!(run.report()["transport"], "stdio");
}

#[tokio::test]
async fn stdio_server_that_hangs_times_out_and_is_killed_with_its_children() {
    // It never answers, ignores stdin EOF and SIGTERM: only SIGKILL to its group ends it.
    let dir = TempDir::new("hang");
    let pids = dir.join("pids");
    let script = StdioScript::new()
        .at_start(Act::SpawnGrandchild(pids.clone()))
        .at_start(Act::RecordPid(pids.clone()))
        .at_start(Act::Stderr("loading the index...".into()))
        .at_start(Act::Hang)
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let args = [
        "probe",
        "--json",
        "--timeout",
        "2s",
        "--transcript",
        transcript.to_str().unwrap(),
        "--",
        "sh",
        script.to_str().unwrap(),
    ];
    let run = run_with(&args, &[], parse_secs("2s") + SLACK).await;
    run.expect("down", &["timeout"]);
    assert_eq!(run.report()["transport"], "stdio");
    assert_eq!(run.report()["stderr"], json!(["loading the index..."]));
    assert!(
        run.elapsed >= Duration::from_millis(1900),
        "gave up early: {:?}",
        run.elapsed
    );
    // One process, silent on discover and then on initialize, with a grandchild; recorded with
    // its stderr and how the probe ended it. It spoke (on stderr), so the timeout does not say
    // it is still starting.
    let message = run.report()["findings"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("wrote to stderr") && message.contains("--timeout"),
        "{message}"
    );
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    let procs = tr["processes"].as_array().unwrap();
    assert_eq!(purposes(&transcript), ["probe"]);
    for p in procs {
        assert_eq!(p["stderr"][0]["line"], "loading the index...", "{p}");
        assert_eq!(p["exit"]["by_probe"], true, "{p}");
        assert_eq!(p["exit"]["signal"], 9, "only SIGKILL ends it: {p}");
    }
    assert_processes_ended(&pids, 2);
}

#[tokio::test]
async fn stdio_legacy_server_silent_on_discover_has_its_handshake_timed_from_its_start() {
    // It ignores server/discover and writes nothing (auto mode waits three quarters of the
    // budget for a silent server); the `initialize` that follows in the same process is
    // answered at once: the handshake time is that answer's, not the wait for discover, and
    // the wait is not taken for its start-up either (which cannot be told: it may have been up
    // all along), so no false `slow-startup`.
    let dir = TempDir::new("silent-discover");
    let script = legacy_stdio().write(&dir, "server.sh");
    let run = probe_script(&script, "2s").await;
    run.expect("healthy", &["legacy-only"]);
    let r = run.report();
    let handshake = r["timings_ms"]["handshake"].as_f64().unwrap();
    assert!(
        handshake < 500.0,
        "the handshake took {handshake} ms: the wait for discover was counted ({r})"
    );
    assert!(
        r["timings_ms"]["total"].as_f64().unwrap() >= 1400.0,
        "the probe did wait for discover (three quarters of 2 s): {r}"
    );
    assert_eq!(r["timings_ms"]["startup"], Value::Null, "{r}");
}

// ---------------------------------------------------------------------------------------------
// Usage errors and secrets.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn usage_errors_exit_3_without_a_report() {
    let url = "http://127.0.0.1:9/mcp";
    let cases: &[&[&str]] = &[
        &["probe", "--json"],
        &["probe", "--json", url, "--", "sh", "-c", "true"],
        &["probe", "--json", "--timeout", "soon", url],
        &["probe", "--json", "--timeout", "0s", url],
        &["probe", "--json", "-H", "NoColon", url],
        &[
            "probe",
            "--json",
            "-H",
            "X-Token: ${MCPULSE_TEST_UNSET_VARIABLE}",
            url,
        ],
        &[
            "probe",
            "--json",
            "--bearer-env",
            "MCPULSE_TEST_UNSET_VARIABLE",
            url,
        ],
        &["probe", "--json", "--era", "sideways", url],
        &["probe", "--json", "ftp://127.0.0.1/mcp"],
    ];
    for args in cases {
        let run = run_with(args, &[], Duration::from_secs(10)).await;
        assert_eq!(
            run.code,
            Some(3),
            "{args:?}: stdout {:?} stderr {:?}",
            run.stdout,
            run.stderr
        );
        assert_eq!(run.stdout, "", "{args:?}: no report on stdout");
        assert!(
            run.stderr.contains("error"),
            "{args:?}: stderr {:?}",
            run.stderr
        );
    }
}

/// Asserts a secret appears nowhere in what mcpulse wrote.
fn assert_hidden(secret: &str, run: &Run, transcript: Option<&std::path::Path>) {
    assert!(
        !run.stdout.contains(secret),
        "secret on stdout:\n{}",
        run.stdout
    );
    assert!(
        !run.stderr.contains(secret),
        "secret on stderr:\n{}",
        run.stderr
    );
    if let Some(path) = transcript {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(!text.contains(secret), "secret in the transcript:\n{text}");
        assert!(
            text.contains("<redacted>"),
            "the transcript should show where the secret was"
        );
    }
}

#[tokio::test]
async fn header_secrets_and_url_secrets_never_appear_in_output() {
    let token = format!("tok-{}-{}", std::process::id(), line!());
    let key = format!("key-{}-{}", std::process::id(), line!());
    let server = serve(scenario::legacy_streamable(Framing::Json)).await;
    let dir = TempDir::new("secrets");
    let transcript = dir.join("transcript.json");
    let url = server.url(&format!("/mcp?api_key={key}"));
    let env = [("SECRET_X", token.as_str())];
    let bound = parse_secs(TIMEOUT) + SLACK;
    let header = "Authorization: Bearer ${SECRET_X}";
    let json_args = [
        "probe",
        "--json",
        "--no-security",
        "--timeout",
        TIMEOUT,
        "-H",
        header,
        "--transcript",
        transcript.to_str().unwrap(),
        &url,
    ];
    let run = run_with(&json_args, &env, bound).await;
    run.expect("healthy", &[]);
    assert_hidden(&token, &run, Some(&transcript));
    assert_hidden(&key, &run, Some(&transcript));
    assert!(
        run.report()["target"]
            .as_str()
            .unwrap()
            .contains("api_key=<redacted>")
    );
    // The human summary too.
    let human_args = [
        "probe",
        "--no-security",
        "--timeout",
        TIMEOUT,
        "-H",
        header,
        &url,
    ];
    let human = run_with(&human_args, &env, bound).await;
    assert_eq!(human.code, Some(0), "{}{}", human.stdout, human.stderr);
    assert_hidden(&token, &human, None);
    assert_hidden(&key, &human, None);

    // ... and yet the server got them, on every request of both runs.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 10);
    let bearer = format!("Bearer {token}");
    for r in &reqs {
        assert_eq!(
            r.header("authorization"),
            Some(bearer.as_str()),
            "{} {}",
            r.method,
            r.target
        );
        assert!(r.target.contains(&key), "{}", r.target);
    }
}

/// Issue #14 (5): a stdio command's credentials, by flag (`--api-key S`, `-p S`) or by shape
/// (a positional `ghp_…`), appear in neither the report's `target` nor the transcript (its
/// `display` and the process record).
#[tokio::test]
async fn argv_secrets_never_appear_in_output() {
    let key = format!("key-{}-{}", std::process::id(), line!());
    let pass = format!("pass-{}-{}", std::process::id(), line!());
    let pat = format!("ghp_{}abcdefghijklmnopqrstuvwxyz", std::process::id());
    let dir = TempDir::new("argv-secrets");
    // The server echoes what it was given on stderr, as many do at start: what the argv rule
    // hides is hidden there too.
    let script = legacy_stdio()
        .at_start(Act::Stderr(format!("starting with key {key} and {pat}")))
        .write(&dir, "server.sh");
    let transcript = dir.join("transcript.json");
    let server_args = ["--api-key", &key, "-p", &pass, &pat];
    let run = probe_script_args_with_transcript(&script, &server_args, &transcript).await;
    run.expect("healthy", &[]);
    for secret in [&key, &pass, &pat] {
        assert_hidden(secret, &run, Some(&transcript));
    }
    let target = run.report()["target"].as_str().unwrap().to_owned();
    assert!(
        target.ends_with("server.sh --api-key <redacted> -p <redacted> <redacted>"),
        "{target}"
    );
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    assert_eq!(tr["target"]["display"], target);
}

/// A header value the user gave (`-H`, expanded from `${VAR}`) that the server echoes back in
/// an error is hidden in the report, as it is in the transcript.
#[tokio::test]
async fn a_header_value_the_server_echoes_is_hidden_in_the_report() {
    const TOKEN: &str = "tok-echoed-4f1c2b9a";
    let server = serve(scenario::hostile(
        "token tok-echoed-4f1c2b9a is revoked",
        mcp::LEGACY,
        true,
    ))
    .await;
    let url = server.url("/mcp");
    let args = [
        "probe",
        "--json",
        "--no-security",
        "--era",
        "legacy",
        "--timeout",
        TIMEOUT,
        "-H",
        "Authorization: Bearer ${MCPULSE_TEST_TOKEN}",
        &url,
    ];
    let run = run_with(
        &args,
        &[("MCPULSE_TEST_TOKEN", TOKEN)],
        parse_secs(TIMEOUT) + SLACK,
    )
    .await;
    run.expect("down", &["handshake-failed"]);
    assert!(!run.stdout.contains(TOKEN), "{}", run.stdout);
    assert!(
        finding_message(&run, "handshake-failed").contains("token <redacted> is revoked"),
        "{}",
        run.stdout
    );
}

/// A server that echoes the user's token as its name, its version and its tools' names: hidden
/// wherever it lands (the JSON report, the human report, the transcript file), not only in
/// the messages that quote it. A secret is a property of the value, not of the field.
#[tokio::test]
async fn a_token_the_server_echoes_as_its_name_and_tools_is_hidden_everywhere() {
    const TOKEN: &str = "tok-echoed-77d0e1c3";
    let server = serve(scenario::hostile("tok-echoed-77d0e1c3", mcp::LEGACY, false)).await;
    let url = server.url("/mcp");
    let dir = TempDir::new("echoed-everywhere");
    let transcript = dir.join("transcript.json");
    for json in [true, false] {
        let mut args = vec![
            "probe",
            "--era",
            "legacy",
            "--timeout",
            TIMEOUT,
            "--transcript",
            transcript.to_str().unwrap(),
            "-H",
            "Authorization: Bearer ${MCPULSE_TEST_TOKEN}",
        ];
        if json {
            args.push("--json");
        }
        args.push(&url);
        let run = run_with(
            &args,
            &[("MCPULSE_TEST_TOKEN", TOKEN), ("NO_COLOR", "1")],
            parse_secs(TIMEOUT) + SLACK,
        )
        .await;
        assert!(!run.stdout.contains(TOKEN), "{}", run.stdout);
        assert!(!run.stderr.contains(TOKEN), "{}", run.stderr);
        assert!(run.stdout.contains("<redacted>"), "{}", run.stdout);
        let written = std::fs::read_to_string(&transcript).unwrap();
        assert!(!written.contains(TOKEN), "{written}");
        assert!(written.contains("<redacted>"), "{written}");
    }
}

#[tokio::test]
async fn bearer_token_is_not_sent_to_the_metadata_document() {
    let token = format!("tok-{}-{}", std::process::id(), line!());
    let server = serve(scenario::unauthorized(true)).await;
    let url = server.url("/mcp");
    let args = [
        "probe",
        "--json",
        "--timeout",
        TIMEOUT,
        "--bearer-env",
        "MCPULSE_TEST_TOKEN",
        &url,
    ];
    let run = run_with(
        &args,
        &[("MCPULSE_TEST_TOKEN", &token)],
        parse_secs(TIMEOUT) + SLACK,
    )
    .await;
    run.expect("degraded", &["auth-required"]);
    assert_hidden(&token, &run, None);
    let reqs = server.requests();
    assert_eq!(server.methods(), ["server/discover", "GET"]);
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    assert_eq!(
        reqs[1].header("authorization"),
        None,
        "credentials go to the MCP endpoint only"
    );
}

/// A server stuck right after `initialize` (its event loop hangs on the `initialized`
/// notification) is not healthy: the notification gets a short deadline of its own, so
/// `tools/list` is still sent, and its silence is reported.
#[tokio::test]
async fn server_stuck_after_initialize_is_not_healthy() {
    let legacy = scenario::legacy_streamable(Framing::Json);
    let server = FakeHttp::start(move |req| match req.rpc_method().as_deref() {
        Some("notifications/initialized") | Some("tools/list") => Reply::silence(),
        _ => legacy(req),
    })
    .await;
    let run = probe_url(&server.url("/mcp"), "4s", &["--era", "legacy"]).await;
    run.expect("degraded", &["tools-list-failed"]);
    assert!(
        server.methods().iter().any(|m| m == "tools/list"),
        "tools/list must still be sent: {:?}",
        server.methods()
    );
}
