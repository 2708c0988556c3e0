//! The gateway's config parser never panics, whatever the file says, and an error's
//! line:column lies inside the text (or names the whole file, line 0).
//!
//! Two generators. Random TOML-ish files from the gateway's own sections and keys with any
//! values (syntax errors, type confusion, control characters, `${VAR}`s). And a valid config
//! with random lines added to one of its tables, each a key of that table with a value of the
//! key's type most of the time (durations, sizes, counts and rates, right and wrong, edge
//! values included; inline tables with their own keys), so that the parse gets past the TOML
//! and the types into every table's own checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_gateway::config::{self, ConfigError};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// One variable set, one empty, one with a line break; any other is unset.
fn env(k: &str) -> Option<String> {
    match k {
        "TOKEN" => Some("t0k".into()),
        "EMPTY" => Some(String::new()),
        "CRLF" => Some("a\r\nX-Injected: 1".into()),
        _ => None,
    }
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ._*?/-]{0,12}",
        "\\PC{0,12}",
        ".{0,12}",
        Just(String::new()),
        Just("\u{1b}[2J".into()),
        Just("a\r\nb".into()),
        Just("\u{202e}x".into()),
        Just("${TOKEN}".into()),
        Just("${EMPTY}".into()),
        Just("${CRLF}".into()),
        Just("${UNSET}".into()),
        Just("${".into()),
        Just("http://127.0.0.1:1/mcp".into()),
        Just("https://u:p@x/mcp".into()),
        Just("127.0.0.1:0".into()),
        Just("[::1]:0".into()),
        Just("query_*".into()),
    ]
}

/// A TOML string literal of `s` (escaped, so the value really holds the control characters).
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value's type in the config.
#[derive(Debug, Clone, Copy)]
enum Ty {
    Duration,
    Size,
    Int,
    Rate,
    Bool,
    Text,
    Addr,
    Texts,
    Ints,
    /// An inline table with these keys.
    Table(&'static [(&'static str, Ty)]),
}

const DURATIONS: &[&str] = &[
    "0s",
    "1ms",
    "999ms",
    "1s",
    "1.5s",
    "30s",
    "2m",
    "25h",
    "86400s",
    "10000000000000d",
    "-1s",
    "ten",
    "",
    "5",
    "1 s",
];
const SIZES: &[&str] = &[
    "1KiB",
    "1023",
    "1024",
    "16MiB",
    "1GiB",
    "99999999999GiB",
    "x",
    "",
    "-1",
];
const INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    10,
    1024,
    1025,
    10_000,
    100_001,
    4_294_967_296,
    i64::MAX,
    i64::MIN,
];
const RATES: &[&str] = &["0.0", "0.2", "0.5", "1.0", "1.5", "-0.1", "nan", "inf", "1"];
const FAILURES: &[&str] = &["timeout", "transport", "tool_error", "jsonrpc_error", "x"];

/// A value of type `ty`, mostly; now and then one of any type (a type error).
fn value(ty: Ty) -> BoxedStrategy<String> {
    let typed: BoxedStrategy<String> = match ty {
        Ty::Duration => prop::sample::select(DURATIONS).prop_map(toml_str).boxed(),
        Ty::Size => prop::sample::select(SIZES).prop_map(toml_str).boxed(),
        Ty::Int => prop_oneof![
            4 => prop::sample::select(INTS).prop_map(|n| n.to_string()),
            1 => any::<i64>().prop_map(|n| n.to_string()),
        ]
        .boxed(),
        Ty::Rate => prop::sample::select(RATES).prop_map(str::to_owned).boxed(),
        Ty::Bool => any::<bool>().prop_map(|b| b.to_string()).boxed(),
        Ty::Text => arb_text().prop_map(|s| toml_str(&s)).boxed(),
        Ty::Addr => prop_oneof![
            Just("127.0.0.1:0".to_owned()),
            Just("[::1]:0".to_owned()),
            Just("0.0.0.0:0".to_owned()),
            Just("localhost:80".to_owned()),
            arb_text(),
        ]
        .prop_map(|s| toml_str(&s))
        .boxed(),
        Ty::Texts => prop::collection::vec(
            prop_oneof![
                prop::sample::select(FAILURES).prop_map(str::to_owned),
                arb_text()
            ],
            0..3,
        )
        .prop_map(|v| {
            format!(
                "[{}]",
                v.iter().map(|s| toml_str(s)).collect::<Vec<_>>().join(", ")
            )
        })
        .boxed(),
        Ty::Ints => prop::collection::vec(prop::sample::select(INTS), 0..3)
            .prop_map(|v| {
                format!(
                    "[{}]",
                    v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
                )
            })
            .boxed(),
        Ty::Table(keys) => prop::collection::vec(
            prop::sample::select(keys).prop_flat_map(|(k, t)| (Just(k), value(t))),
            0..5,
        )
        .prop_map(|kv| {
            // One value a key: a repeated key is a TOML error, which ends the parse early.
            let kv: BTreeMap<_, _> = kv.into_iter().collect();
            format!(
                "{{ {} }}",
                kv.iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .boxed(),
    };
    prop_oneof![9 => typed, 1 => any_value()].boxed()
}

/// A value of any type, or none that TOML knows.
fn any_value() -> BoxedStrategy<String> {
    prop_oneof![
        arb_text().prop_map(|s| toml_str(&s)),
        any::<i64>().prop_map(|n| n.to_string()),
        prop::sample::select(RATES).prop_map(str::to_owned),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("{ x = 1 }".to_owned()),
        "\\PC{0,10}",
    ]
    .boxed()
}

const RETRY: &[(&str, Ty)] = &[
    ("max_attempts", Ty::Int),
    ("backoff_initial", Ty::Duration),
    ("backoff_max", Ty::Duration),
    ("on", Ty::Texts),
    ("deadline", Ty::Duration),
];
const BREAKER: &[(&str, Ty)] = &[
    ("window_calls", Ty::Int),
    ("window_time", Ty::Duration),
    ("minimum_calls", Ty::Int),
    ("failure_rate", Ty::Rate),
    ("slow_call_rate", Ty::Rate),
    ("slow_call_duration", Ty::Duration),
    ("wait_in_open", Ty::Duration),
    ("half_open_trials", Ty::Int),
    ("count", Ty::Texts),
];
const LIMITS: &[(&str, Ty)] = &[("error_rate", Ty::Rate), ("p95", Ty::Duration)];

/// A valid config, table by table (header and required lines), with the keys that belong in
/// each and their types.
const TABLES: &[(&str, &[(&str, Ty)])] = &[
    (
        "listen = \"127.0.0.1:0\"",
        &[
            ("health_listen", Ty::Addr),
            ("max_sessions", Ty::Int),
            ("session_idle_timeout", Ty::Duration),
            ("stateless_pool", Ty::Int),
            ("allowed_origins", Ty::Texts),
            ("allowed_hosts", Ty::Texts),
            ("max_body", Ty::Size),
            ("min_tools", Ty::Int),
            ("readiness_interval", Ty::Duration),
            ("readiness_timeout", Ty::Duration),
            ("health_tool", Ty::Text),
            ("threads", Ty::Int),
            ("keepalive", Ty::Duration),
            ("max_connections", Ty::Int),
            ("tool_timeout", Ty::Duration),
        ],
    ),
    (
        "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"",
        &[
            ("connect_timeout", Ty::Duration),
            ("reply_timeout", Ty::Duration),
            ("max_message_size", Ty::Size),
            ("heartbeat_interval", Ty::Duration),
            ("heartbeat_timeout", Ty::Duration),
            ("failures", Ty::Int),
            ("backoff_initial", Ty::Duration),
            ("backoff_max", Ty::Duration),
            ("max_restarts", Ty::Int),
            ("restart_window", Ty::Duration),
            ("request_timeout", Ty::Duration),
            ("stop_grace", Ty::Duration),
        ],
    ),
    (
        "[[checks]]\nname = \"db\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:1\"",
        &[
            ("interval", Ty::Duration),
            ("timeout", Ty::Duration),
            ("degraded_latency", Ty::Duration),
            ("critical", Ty::Bool),
            ("failure_threshold", Ty::Int),
            ("success_threshold", Ty::Int),
            ("tools", Ty::Texts),
            ("expect_status", Ty::Ints),
            ("env", Ty::Texts),
        ],
    ),
    (
        "[[checks]]\nname = \"api\"\nkind = \"http\"\nurl = \"http://127.0.0.1:1/health\"",
        &[
            ("expect_status", Ty::Ints),
            ("timeout", Ty::Duration),
            ("degraded_latency", Ty::Duration),
            ("name", Ty::Text),
        ],
    ),
    (
        "[[tools]]\nname = \"read_*\"",
        &[
            ("timeout", Ty::Duration),
            ("progress_extends", Ty::Bool),
            ("max_timeout", Ty::Duration),
            ("max_concurrent", Ty::Int),
            ("queue", Ty::Int),
            ("queue_timeout", Ty::Duration),
            ("breaker", Ty::Table(BREAKER)),
            ("retry", Ty::Table(RETRY)),
        ],
    ),
    (
        "[concurrency]",
        &[
            ("max_concurrent", Ty::Int),
            ("queue", Ty::Int),
            ("queue_timeout", Ty::Duration),
        ],
    ),
    (
        "[retry_budget]",
        &[
            ("window", Ty::Duration),
            ("min_per_second", Ty::Int),
            ("ratio", Ty::Rate),
        ],
    ),
    (
        "[thresholds]",
        &[
            ("window", Ty::Duration),
            ("minimum_calls", Ty::Int),
            ("on_unhealthy", Ty::Text),
            ("degraded", Ty::Table(LIMITS)),
            ("unhealthy", Ty::Table(LIMITS)),
        ],
    ),
];

/// The valid config with `lines` (key, value) added to table `at`.
fn with_lines(at: usize, lines: &BTreeMap<&str, String>) -> String {
    let mut out = Vec::new();
    for (i, (head, _)) in TABLES.iter().enumerate() {
        out.push((*head).to_owned());
        if i == at {
            for (k, v) in lines {
                out.push(format!("{k} = {v}"));
            }
        }
    }
    out.join("\n")
}

/// A table's index and one to three random lines for it (one value a key).
fn arb_table_lines() -> impl Strategy<Value = (usize, BTreeMap<&'static str, String>)> {
    (0..TABLES.len()).prop_flat_map(|at| {
        let keys = TABLES[at].1;
        let line = prop::sample::select(keys).prop_flat_map(|(k, t)| (Just(k), value(t)));
        (
            Just(at),
            prop::collection::vec(line, 1..4).prop_map(|v| v.into_iter().collect()),
        )
    })
}

const SECTIONS: &[&str] = &[
    "[upstream]",
    "[[checks]]",
    "[[tools]]",
    "[concurrency]",
    "[retry_budget]",
    "[thresholds]",
    "[[thresholds.tools]]",
    "[thresholds.degraded]",
    "[other]",
];

/// Any line: a section, any key of any table with any value, or garbage.
fn arb_line() -> impl Strategy<Value = String> {
    let key = prop::sample::select(TABLES)
        .prop_flat_map(|(_, keys)| prop::sample::select(keys).prop_map(|(k, _)| k));
    prop_oneof![
        3 => prop::sample::select(SECTIONS).prop_map(str::to_owned),
        8 => (key, any_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "\\PC{0,20}",
        1 => ".{0,20}",
    ]
}

/// Asserts that `e` names the whole file (line 0) or a place inside `text`: a line that
/// exists, a column at most one past that line's last character.
fn assert_inside(text: &str, e: &ConfigError) {
    if e.line == 0 {
        return;
    }
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(
        (1..=lines.len()).contains(&e.line),
        "line {} outside 1..={}: {e}\n{text}",
        e.line,
        lines.len()
    );
    let width = lines[e.line - 1].chars().count();
    assert!(
        (1..=width + 1).contains(&e.column),
        "column {} outside 1..={}: {e}\n{text}",
        e.column,
        width + 1
    );
}

#[test]
fn the_valid_base_parses() {
    let text = with_lines(0, &BTreeMap::new());
    config::parse(&text, "gateway.toml", &env).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn random_files_never_panic_and_errors_point_inside(
        lines in prop::collection::vec(arb_line(), 0..14)
    ) {
        let text = lines.join("\n");
        if let Err(e) = config::parse(&text, "gateway.toml", &env) {
            assert_inside(&text, &e);
            prop_assert!(!e.message.is_empty(), "an empty message for\n{text}");
        }
    }

    #[test]
    fn typed_random_lines_in_a_valid_file_never_panic((at, lines) in arb_table_lines()) {
        let text = with_lines(at, &lines);
        if let Err(e) = config::parse(&text, "gateway.toml", &env) {
            assert_inside(&text, &e);
            prop_assert!(!e.message.is_empty(), "an empty message for\n{text}");
        }
    }
}
