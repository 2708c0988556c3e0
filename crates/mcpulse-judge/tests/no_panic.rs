//! Judging never panics, whatever the server sent: random steps, statuses, headers, replies
//! (JSON or not, of any shape), reply indexes out of range, random tool lists and schemas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::contract::{self, Parts};
use mcpulse_judge::{Policy, drift, judge};
use mcpulse_wire::transcript::*;
use mcpulse_wire::version::{Era, EraMode};
use proptest::prelude::*;
use serde_json::{Value, json};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("#/$defs/a"),
            Just("#/properties/x"),
            Just("#"),
            Just("#/"),
            Just("https://x")
        ]
        .prop_map(|r| json!({"$ref": r})),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("type".to_owned()),
                    Just("properties".to_owned()),
                    Just("required".to_owned()),
                    Just("enum".to_owned()),
                    Just("$defs".to_owned()),
                    Just("name".to_owned()),
                    Just("tools".to_owned()),
                    Just("nextCursor".to_owned()),
                    Just("supportedVersions".to_owned()),
                    Just("protocolVersion".to_owned()),
                    Just("capabilities".to_owned()),
                    Just("annotations".to_owned()),
                    Just("inputSchema".to_owned()),
                    Just("outputSchema".to_owned()),
                    Just("description".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Discover),
        Just(Step::Initialize),
        Just(Step::Initialized),
        Just(Step::ToolsList),
        Just(Step::PromptsList),
        Just(Step::ResourcesList),
        Just(Step::ResourceTemplatesList),
        Just(Step::SseOpen),
        Just(Step::SessionDelete),
        Just(Step::DualEraCheck),
        Just(Step::ResourceMetadata),
        Just(Step::AuthServerMetadata),
        Just(Step::OriginCheck),
        Just(Step::HostCheck),
        Just(Step::MalformedRequest),
        Just(Step::ToolsCall),
        Just(Step::Cancelled),
    ]
}

fn arb_frame() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        arb_json().prop_map(|v| v.to_string()),
        (
            arb_json(),
            prop_oneof![
                Just(json!(1)),
                Just(json!("1")),
                Just(Value::Null),
                Just(json!(2))
            ]
        )
            .prop_map(|(r, id)| json!({"jsonrpc":"2.0","id":id,"result":r}).to_string()),
        (any::<i64>(), "\\PC{0,10}").prop_map(|(c, m)| {
            json!({"jsonrpc":"2.0","id":1,"error":{"code":c,"message":m}}).to_string()
        }),
        // A tool `t` with a random outputSchema, and a result with random structuredContent
        // (a health document's shape too): compiled and validated, never a panic.
        arb_json().prop_map(|schema| {
            json!({"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","outputSchema":schema,
                "annotations":{"readOnlyHint":true}}]}})
            .to_string()
        }),
        (arb_json(), prop::option::of(any::<bool>())).prop_map(|(content, is_error)| {
            json!({"jsonrpc":"2.0","id":1,"result":{"structuredContent":content,"isError":is_error,
                "content":[{"type":"text","text":content.to_string()}]}})
            .to_string()
        }),
        // Valid JSON that cannot be used: nesting around the limit, numbers out of range.
        (0usize..300, prop_oneof![Just("1e999999"), Just("-1e400"), Just("0")]).prop_map(
            |(depth, n)| {
                format!(
                    r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"name":"t","inputSchema":{}{n}{}}}]}}}}"#,
                    "[".repeat(depth),
                    "]".repeat(depth)
                )
            }
        ),
    ]
}

fn arb_exchange() -> impl Strategy<Value = Exchange> {
    (
        arb_step(),
        prop_oneof![
            Just(TransportKind::StreamableHttp),
            Just(TransportKind::Sse),
            Just(TransportKind::Stdio)
        ],
        prop::option::of(prop_oneof![Just(Era::Modern), Just(Era::Legacy)]),
        prop::option::of(100u16..600),
        prop::collection::vec(("[a-zA-Z-]{1,20}", "\\PC{0,40}"), 0..4),
        prop::collection::vec(arb_frame(), 0..3),
        prop::option::of("\\PC{0,60}"),
        (0usize..5, 0u8..9),
        (0.0f64..1e7, 0.0f64..1e7),
    )
        .prop_map(
            |(step, transport, era, status, headers, frames, body, (idx, kind), (at, elapsed))| {
                Exchange {
                    step,
                    transport,
                    era,
                    page: Some(1),
                    at_ms: at,
                    id: Some(1),
                    request: Request {
                        method: "POST".into(),
                        url: Some("http://127.0.0.1:1/mcp".into()),
                        headers: vec![("origin".into(), "http://evil.example".into())],
                        body: Some("{}".into()),
                    },
                    redirects: Vec::new(),
                    response: status.map(|s| HttpResponse {
                        status: s,
                        headers,
                        ttfb_ms: 1.0,
                    }),
                    frames: frames
                        .into_iter()
                        .map(|raw| Frame {
                            at_ms: 1.0,
                            raw,
                            sse_event: None,
                        })
                        .collect(),
                    body,
                    body_bytes: 10,
                    outcome: match kind {
                        0..=2 => Outcome::Reply { frame: idx },
                        3 => Outcome::NoReply,
                        4 => Outcome::Timeout,
                        5 => Outcome::Closed,
                        6 => Outcome::TooLarge { limit: 1 },
                        7 => Outcome::Endpoint { url: "/m".into() },
                        _ => Outcome::TransportError {
                            cause: ErrorKind::Body,
                            message: "reset".into(),
                        },
                    },
                    elapsed_ms: elapsed,
                }
            },
        )
}

fn arb_call() -> impl Strategy<Value = mcpulse_wire::call::CallRecord> {
    use mcpulse_wire::call::{CallPurpose, CallRecord, CallSpec, Refusal};
    (
        any::<bool>(),
        prop::option::of(0usize..12),
        prop::option::of(prop_oneof![Just(Refusal::NotListed), Just(Refusal::NoTime)]),
        (any::<bool>(), any::<bool>(), 0u64..10_000),
        prop::collection::vec(
            prop_oneof![
                Just("/structuredContent/status == \"ok\""),
                Just("/structuredContent exists"),
                Just("/content/0/text contains \"x\""),
                Just("/structuredContent/n < 3"),
            ],
            0..3,
        ),
    )
        .prop_map(
            |(health, exchange, refused, (critical, cancelled, budget_ms), expect)| CallRecord {
                deadline_ms: None,
                purpose: if health {
                    CallPurpose::HealthTool
                } else {
                    CallPurpose::Synthetic
                },
                spec: CallSpec {
                    expect: expect.into_iter().map(|e| e.parse().unwrap()).collect(),
                    budget_ms,
                    critical,
                    ..CallSpec::new("t")
                },
                exchange,
                refused,
                cancelled,
            },
        )
}

fn arb_transcript() -> impl Strategy<Value = Transcript> {
    (
        prop::bool::ANY,
        (
            prop::collection::vec(arb_exchange(), 0..10),
            prop::collection::vec(arb_call(), 0..3),
        ),
        prop::collection::vec(("\\PC{0,30}", prop::option::of(any::<i64>())), 0..3),
        prop::collection::vec("\\PC{0,30}", 0..3),
        prop::option::of(any::<i64>()),
    )
        .prop_map(|(http, (exchanges, calls), conns, stderr, exit)| {
            let target = if http {
                TargetRecord {
                    display: "http://mcp.example.com/mcp".into(),
                    kind: TargetKind::Http,
                    host: Some("mcp.example.com".into()),
                }
            } else {
                TargetRecord {
                    display: "server --stdio".into(),
                    kind: TargetKind::Stdio,
                    host: None,
                }
            };
            let mut t = Transcript::new(
                target,
                PlanRecord {
                    era: EraMode::Auto,
                    security: true,
                    credentials: false,
                    timeout_ms: 10_000,
                    max_response_bytes: 1 << 20,
                },
                1_796_000_000_000,
            );
            t.exchanges = exchanges;
            t.calls = calls;
            t.connections = conns
                .into_iter()
                .map(|(authority, not_after)| Connection {
                    at_ms: 0.0,
                    authority,
                    addr: None,
                    tls: true,
                    dns_ms: None,
                    connect_ms: None,
                    tls_ms: None,
                    cert_not_before: None,
                    cert_not_after: not_after,
                    error: None,
                })
                .collect();
            if !http {
                t.processes.push(Process {
                    program: "server".into(),
                    stderr: stderr
                        .into_iter()
                        .map(|line| TimedLine { at_ms: 0.0, line })
                        .collect(),
                    exit: exit.map(|c| Exit {
                        at_ms: 1.0,
                        code: Some(c as i32),
                        signal: None,
                        by_probe: false,
                    }),
                    ..Process::default()
                });
            }
            t.total_ms = 5.0;
            t
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn judging_random_transcripts(tr in arb_transcript()) {
        let r = judge(&tr, &Policy::default());
        // The verdict is always one of the three, and findings explain anything but healthy.
        prop_assert!(r.status == mcpulse_judge::Status::Healthy || !r.findings.is_empty());
        let _ = contract::from_transcript(&tr);
        let _ = serde_json::to_string(&r).unwrap();
    }

    #[test]
    fn diffing_random_contracts(a in prop::collection::vec(arb_json(), 0..4), b in prop::collection::vec(arb_json(), 0..4)) {
        let tools = |v: Vec<Value>| v.into_iter().enumerate().map(|(i, s)| json!({"name": format!("t{}", i % 2), "inputSchema": s, "outputSchema": s, "annotations": s})).collect::<Vec<_>>();
        let mk = |tools: Vec<Value>| contract::build(Parts { target: "x".into(), tools, ..Parts::default() });
        let (ca, cb) = (mk(tools(a)), mk(tools(b)));
        let d = drift::diff(&ca, &cb);
        // Equal digests are equal contracts: no change to report.
        prop_assert!(ca.digest != cb.digest || d.changes.is_empty());
        let _ = ca.to_lock();
    }
}
