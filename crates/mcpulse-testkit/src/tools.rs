//! Servers whose tools stand for their dependencies (issue #18): one catalogue of tools, each
//! with a scripted answer, served over stdio ([`stdio_server`]) and over Streamable HTTP
//! ([`http_server`], 2026-07-28), so a test of `--call` and `--health-tool` says the same on
//! both transports.
//!
//! The catalogue ([`catalogue`]): `health_check` reporting the status it is given, with an
//! `orders-db` component; `ping_db` (read-only, healthy, `structuredContent`); `orders_lookup`
//! (read-only, its dependency down: `isError: true`); `weather` (read-only, an `outputSchema`
//! its result breaks); `slow_report` (read-only, never answers); `drop_table` (annotated
//! destructive, answers, and must never be called without `--allow-side-effects`);
//! `long_report` (read-only, progress notifications before its result); `bad_schema` (read-only, an `outputSchema` that is not a valid JSON Schema);
//! `annotated_nothing` (no annotations).

use crate::http::{Piece, Reply, Request, Script};
use crate::mcp::{self, MODERN};
use crate::stdio::{Act, StdioScript};
use serde_json::{Value, json};
use std::sync::Arc;

/// How a scripted tool answers a `tools/call`.
#[derive(Debug, Clone)]
pub enum Answer {
    /// This `tools/call` result.
    Result(Value),
    /// Two `notifications/progress` (over HTTP, as an SSE response), then this result.
    AfterProgress(Value),
    /// Nothing, ever (the request is read and ignored).
    Silent,
    /// Over HTTP, a `text/event-stream` response begun at once and held open, an SSE comment
    /// every [`HELD_OPEN_EVERY`] and never a result, as a server working on a long call keeps
    /// its stream alive: the comments are what let the server find out (a write that fails)
    /// that the client closed the stream, which [`crate::FakeHttp::abandoned`] records. Over
    /// stdio, as [`Answer::Silent`].
    HeldOpen,
}

/// How often an [`Answer::HeldOpen`] stream writes its comment: the server finds a closed
/// stream at most about two of these after the client closed it.
pub const HELD_OPEN_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// One tool of a catalogue: its `tools/list` entry and its answer.
#[derive(Debug, Clone)]
pub struct ScriptedTool {
    pub tool: Value,
    pub answer: Answer,
}

/// The line a stdio [`stdio_server`] writes to stderr on `notifications/cancelled`.
pub const CANCEL_SEEN: &str = "received notifications/cancelled";

fn read_only() -> Value {
    json!({ "readOnlyHint": true })
}

fn tool(name: &str, annotations: Value) -> Value {
    json!({
        "name": name,
        "description": format!("the {name} tool"),
        "inputSchema": { "type": "object", "properties": {} },
        "annotations": annotations,
    })
}

/// A `tools/call` result: one text content, and `structuredContent` when given.
pub fn result(text: &str, structured: Option<Value>, is_error: bool) -> Value {
    let mut r = json!({ "content": [{ "type": "text", "text": text }] });
    if let Some(s) = structured {
        r["structuredContent"] = s;
    }
    if is_error {
        r["isError"] = json!(true);
    }
    r
}

/// The catalogue, its `health_check` reporting `health` (`ok`, `degraded`, `down`...) with
/// the `orders-db` component at the same status.
pub fn catalogue(health: &str) -> Vec<ScriptedTool> {
    let doc = json!({ "status": health, "checks": { "orders-db": { "status": health, "latency_ms": 12 } } });
    let mut weather = tool("weather", read_only());
    weather["outputSchema"] = json!({
        "type": "object",
        "properties": { "temperature": { "type": "number" } },
        "required": ["temperature"],
    });
    let mut bad_schema = tool("bad_schema", read_only());
    bad_schema["outputSchema"] = json!({ "type": "object", "properties": { "n": { "type": 12 } } });
    vec![
        ScriptedTool {
            tool: tool("health_check", read_only()),
            answer: Answer::Result(result(&doc.to_string(), Some(doc.clone()), false)),
        },
        ScriptedTool {
            tool: tool("ping_db", read_only()),
            answer: Answer::Result(result(
                "pong",
                Some(json!({ "status": "ok", "latency_ms": 3 })),
                false,
            )),
        },
        ScriptedTool {
            tool: tool("orders_lookup", read_only()),
            answer: Answer::Result(result(
                "orders-db unreachable: connection refused",
                None,
                true,
            )),
        },
        ScriptedTool {
            tool: weather,
            answer: Answer::Result(result(
                "warm",
                Some(json!({ "temperature": "warm" })),
                false,
            )),
        },
        ScriptedTool {
            tool: tool("long_report", read_only()),
            answer: Answer::AfterProgress(result("report ready", None, false)),
        },
        ScriptedTool {
            tool: tool("slow_report", read_only()),
            answer: Answer::Silent,
        },
        ScriptedTool {
            tool: tool("drop_table", json!({ "destructiveHint": true })),
            answer: Answer::Result(result("dropped", None, false)),
        },
        ScriptedTool {
            tool: bad_schema,
            answer: Answer::Result(result("{}", Some(json!({})), false)),
        },
        ScriptedTool {
            tool: tool("annotated_nothing", json!({})),
            answer: Answer::Result(result("done", None, false)),
        },
    ]
}

/// A legacy stdio server with these tools: each `tools/call` answered by its tool's name, and
/// [`CANCEL_SEEN`] written to stderr on `notifications/cancelled`.
pub fn stdio_server(tools: &[ScriptedTool]) -> StdioScript {
    stdio_server_with(tools, None)
}

/// [`stdio_server`], which also appends each `tools/call` and `notifications/cancelled` it
/// reads (the whole line) to `log`: what the server received, to compare the cancellation's
/// `requestId` with the call's `id`.
pub fn stdio_server_recording(tools: &[ScriptedTool], log: &std::path::Path) -> StdioScript {
    stdio_server_with(tools, Some(log))
}

fn stdio_server_with(tools: &[ScriptedTool], log: Option<&std::path::Path>) -> StdioScript {
    let record = |mut acts: Vec<Act>| {
        if let Some(l) = log {
            acts.insert(0, Act::RecordLine(l.to_path_buf()));
        }
        acts
    };
    let list: Vec<Value> = tools.iter().map(|t| t.tool.clone()).collect();
    let mut s = StdioScript::new()
        // A legacy server that says so at once: the probe's auto mode goes straight on.
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(list, None, false))],
        )
        .on(
            "notifications/cancelled",
            record(vec![Act::Stderr(CANCEL_SEEN.into())]),
        );
    for t in tools {
        let name = t.tool["name"].as_str().unwrap_or_default();
        let acts = match &t.answer {
            Answer::Result(r) => vec![Act::Result(r.clone())],
            Answer::AfterProgress(r) => vec![
                Act::Stdout(mcp::progress(1, 50).to_string()),
                Act::Stdout(mcp::progress(1, 100).to_string()),
                Act::Result(r.clone()),
            ],
            Answer::Silent | Answer::HeldOpen => Vec::new(),
        };
        s = s.on_tool(name, record(acts));
    }
    s
}

/// A 2026-07-28 server (stateless, Streamable HTTP) with these tools. Strict where the spec is:
/// a `tools/call` without `Mcp-Name` equal to the tool's name gets 400 `-32020`.
pub fn http_server(tools: Vec<ScriptedTool>) -> Script {
    Arc::new(move |req: &Request| {
        if req.method != "POST" {
            return Reply::status(405).header("allow", "POST");
        }
        let id = req.rpc_id().unwrap_or(Value::Null);
        let method = req.rpc_method().unwrap_or_default();
        if req.header("mcp-protocol-version") != Some(MODERN)
            || req.header("mcp-method") != Some(method.as_str())
        {
            return Reply::json(400, &mcp::error(&id, -32020, "header mismatch"));
        }
        match method.as_str() {
            "server/discover" => Reply::json(200, &mcp::result(&id, mcp::discover_result())),
            "tools/list" => {
                let list = tools.iter().map(|t| t.tool.clone()).collect();
                Reply::json(
                    200,
                    &mcp::result(&id, mcp::tools_list_result(list, None, true)),
                )
            }
            "tools/call" => {
                let body = req.json().unwrap_or(Value::Null);
                let name = body
                    .pointer("/params/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if req.header("mcp-name") != Some(name) {
                    return Reply::json(400, &mcp::error(&id, -32020, "Mcp-Name mismatch"));
                }
                match tools.iter().find(|t| t.tool["name"] == name) {
                    Some(ScriptedTool {
                        answer: Answer::Result(r),
                        ..
                    }) => Reply::json(200, &mcp::result(&id, mcp::modern(r.clone()))),
                    Some(ScriptedTool {
                        answer: Answer::AfterProgress(r),
                        ..
                    }) => Reply::sse(vec![
                        mcp::sse_event(None, None, &mcp::progress(1, 50).to_string()),
                        mcp::sse_event(None, None, &mcp::progress(1, 100).to_string()),
                        mcp::sse_event(
                            None,
                            None,
                            &mcp::result(&id, mcp::modern(r.clone())).to_string(),
                        ),
                    ]),
                    Some(ScriptedTool {
                        answer: Answer::HeldOpen,
                        ..
                    }) => Reply::chunked(
                        200,
                        "text/event-stream",
                        vec![Piece::Repeat {
                            data: b": working\n\n".to_vec(),
                            every: HELD_OPEN_EVERY,
                        }],
                    ),
                    Some(_) => Reply::silence(),
                    None => Reply::json(200, &mcp::error(&id, -32602, "Unknown tool")),
                }
            }
            _ => Reply::json(404, &mcp::error(&id, -32601, "Method not found")),
        }
    })
}
