//! The config parser and the client-config importer never panic, whatever the file says, and a
//! config error's line:column lies inside the text and, for a value known to be wrong, points
//! at that value. Random TOML-ish lines (sections, known keys with random values, garbage) and
//! random client configs in the Claude Desktop / Cursor / Claude Code (`mcpServers`) and VS Code
//! (`servers`, comments, trailing commas) shapes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_monitor::config::import;
use mcpulse_monitor::config::{
    self, Defaults, Endpoint, check_header_name, check_header_value, check_name,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;

/// The environment the configs are read with: one variable set, one set but empty, one with a
/// line break; any other is unset.
fn env(k: &str) -> Option<String> {
    match k {
        "TOKEN" => Some("t0k".into()),
        "EMPTY" => Some(String::new()),
        "CRLF" => Some("a\r\nX-Injected: 1".into()),
        _ => None,
    }
}

/// Random text, control characters, escape sequences and bidi overrides included.
fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ._-]{0,12}",
        "\\PC{0,12}",
        ".{0,12}",
        Just(String::new()),
        Just(" ".into()),
        Just("\u{1b}[2J".into()),
        Just("a\r\nb".into()),
        Just("\u{202e}x".into()),
        Just("${TOKEN}".into()),
        Just("${EMPTY}".into()),
        Just("${CRLF}".into()),
        Just("${UNSET}".into()),
        Just("${".into()),
        Just("~/x.json".into()),
        Just("https://u:p@x/mcp".into()),
        Just("https://x.example/mcp".into()),
        Just("0.0.0.0:9477".into()),
        Just("127.0.0.1:0".into()),
        Just("10000000000000d".into()),
        Just("0s".into()),
        Just("30s".into()),
        Just("500ms".into()),
        Just("2026-12-01T02:00:00Z".into()),
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

fn arb_value() -> impl Strategy<Value = String> {
    prop_oneof![
        arb_text().prop_map(|s| toml_str(&s)),
        any::<i64>().prop_map(|n| n.to_string()),
        prop_oneof![Just(0i64), Just(1), Just(-1), Just(4_294_967_296)].prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::collection::vec(arb_text(), 0..3).prop_map(|v| format!(
            "[{}]",
            v.iter().map(|s| toml_str(s)).collect::<Vec<_>>().join(", ")
        )),
        (arb_text(), arb_text()).prop_map(|(k, v)| format!(
            "{{ {} = {} }}",
            toml_str(&k),
            toml_str(&v)
        )),
        "\\PC{0,10}",
    ]
}

const KEYS: &[&str] = &[
    "name",
    "url",
    "command",
    "env",
    "headers",
    "labels",
    "interval",
    "timeout",
    "failure_threshold",
    "success_threshold",
    "latency_budget",
    "flap_window",
    "flap_threshold",
    "reminder",
    "era",
    "security",
    "listen",
    "token",
    "allow_url_probes",
    "allow_unauthenticated",
    "path",
    "retention",
    "kind",
    "secret",
    "routing_key",
    "targets",
    "on",
    "resend",
    "start",
    "end",
    "import",
];

const SECTIONS: &[&str] = &[
    "[server]",
    "[storage]",
    "[defaults]",
    "[[targets]]",
    "[[alerts]]",
    "[modules.m]",
    "[[maintenance]]",
];

fn arb_line() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(SECTIONS).prop_map(str::to_owned),
        8 => (prop::sample::select(KEYS), arb_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "\\PC{0,20}",
        1 => ".{0,20}",
    ]
}

/// Asserts that `e` is located inside `text`: a line that exists, a column at most one past
/// that line's last character.
fn assert_inside(text: &str, e: &config::ConfigError) {
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

/// A valid config of `n` targets, its text as lines.
fn valid_lines(n: usize) -> Vec<String> {
    let mut lines = vec![
        "[defaults]".to_owned(),
        "interval = \"60s\"".to_owned(),
        "timeout = \"10s\"".to_owned(),
    ];
    for i in 0..n {
        lines.push("[[targets]]".into());
        lines.push(format!("name = \"t{i}\""));
        lines.push(format!("url = \"https://mcp{i}.example.com/mcp\""));
    }
    lines
}

/// A wrong value, the line it is written as, the column its value starts at, and what the error
/// says.
const FAULTS: &[(&str, usize, &str)] = &[
    (
        "failure_threshold = 0",
        21,
        "failure_threshold must be at least 1",
    ),
    (
        "flap_threshold = 0",
        18,
        "flap_threshold must be at least 1",
    ),
    ("interval = \"10000000000000d\"", 12, "is too large"),
    ("timeout = \"ten\"", 11, "is not a duration"),
    ("interval = \"5s\"", 12, "must be below the interval"),
    ("reminder = \"0s\"", 12, "must be more than zero"),
    ("era = \"future\"", 7, "use auto, modern or legacy"),
    (
        "headers = { \"A B\" = \"v\" }",
        13,
        "not a valid HTTP header name",
    ),
    ("headers = { A = \"${CRLF}\" }", 17, "line break"),
    ("headers = { A = \"${UNSET}\" }", 17, "UNSET is not set"),
    ("env = { K = \"v\" }", 13, "env applies to command targets"),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_configs_never_panic_and_errors_lie_inside_the_text(
        lines in prop::collection::vec(arb_line(), 0..24),
        trailing_newline in any::<bool>(),
    ) {
        let mut text = lines.join("\n");
        if trailing_newline {
            text.push('\n');
        }
        if let Err(e) = config::parse(&text, "p.toml", Path::new("/nonexistent"), &env) {
            assert_inside(&text, &e);
            assert_eq!(e.file, "p.toml");
        }
    }

    #[test]
    fn a_wrong_value_is_reported_at_its_line_and_column(
        n in 1usize..20,
        pick in any::<prop::sample::Index>(),
        fault in prop::sample::select(FAULTS),
        name_fault in prop::sample::select(&[
            "\"\"", "\" \"", "\"a\\u001B[2J\"", "\"a\\nb\"", "\"\\u202Eab\"", "\"t0\"",
        ][..]),
        on_name in any::<bool>(),
    ) {
        let mut lines = valid_lines(n);
        let target = pick.index(n);
        // Target `i`'s lines: [[targets]] at 3 + 3i, then name, then url.
        let name_line = 3 + 3 * target + 1;
        let (line, column, message) = if on_name && !(target == 0 && name_fault == "\"t0\"") {
            lines[name_line] = format!("name = {name_fault}");
            let message = if name_fault == "\"t0\"" { "the name is used twice" } else { "target" };
            (name_line, 8, message)
        } else {
            let (text, column, message) = fault;
            lines.insert(name_line + 2, text.to_owned());
            (name_line + 2, column, message)
        };
        let text = lines.join("\n");
        let e = config::parse(&text, "p.toml", Path::new("/nonexistent"), &env)
            .expect_err(&text);
        assert_inside(&text, &e);
        assert_eq!((e.line, e.column), (line + 1, column), "{e}\n{text}");
        assert!(e.message.contains(message), "{e}\n{text}");
    }

    #[test]
    fn random_client_configs_never_panic_and_keep_only_valid_servers(
        servers in prop::collection::btree_map(arb_text(), arb_server(), 0..6),
        key in prop::sample::select(&["mcpServers", "servers", "other"][..]),
        jsonc in any::<bool>(),
    ) {
        let mut text = serde_json::to_string_pretty(&json!({ key: servers })).unwrap();
        if jsonc {
            // As VS Code writes it: a comment after each comma and a trailing comma.
            text = text.replace(",\n", ", // note\n").replacen("\n}", ",\n}", 1);
        }
        match import::parse(&text, "x.json", &Defaults::default(), &env) {
            Err(e) => assert!(e.to_string().starts_with("import x.json: "), "{e}"),
            Ok(imported) => {
                for t in &imported.targets {
                    check_name(&t.name).unwrap();
                    for (k, v) in &t.headers {
                        check_header_name(k).unwrap();
                        check_header_value(k, v).unwrap();
                    }
                    if let Endpoint::Url(u) = &t.endpoint {
                        config::check_url(u).unwrap();
                    }
                }
                for w in &imported.skipped {
                    assert!(w.starts_with("import x.json: server "), "{w}");
                }
            }
        }
    }

    #[test]
    fn any_text_as_a_client_config_never_panics(text in ".{0,200}") {
        let _ = import::strip_jsonc(&text);
        if let Err(e) = import::parse(&text, "x.json", &Defaults::default(), &env) {
            assert!(e.to_string().starts_with("import x.json: "), "{e}");
        }
    }
}

fn arb_server() -> impl Strategy<Value = Value> {
    let strings = || prop::collection::btree_map(arb_text(), arb_text(), 0..3);
    (
        prop::option::of(arb_text()),
        prop::option::of(arb_text()),
        prop::collection::vec(arb_text(), 0..3),
        strings(),
        strings(),
        prop::option::of(any::<bool>()),
        any::<u8>(),
    )
        .prop_map(|(url, command, args, env, headers, disabled, odd)| {
            let mut s = serde_json::Map::new();
            if let Some(u) = url {
                s.insert("url".into(), json!(u));
            }
            if let Some(c) = command {
                s.insert("command".into(), json!(c));
            }
            s.insert("args".into(), json!(args));
            s.insert("env".into(), json!(env));
            s.insert("headers".into(), json!(headers));
            if let Some(d) = disabled {
                s.insert("disabled".into(), json!(d));
            }
            // Now and then a field of the wrong type.
            match odd % 8 {
                0 => {
                    s.insert("headers".into(), json!(["x"]));
                }
                1 => {
                    s.insert("args".into(), json!([1, null]));
                }
                2 => {
                    s.insert("env".into(), json!({"K": 5}));
                }
                3 => return json!("not an object"),
                _ => {}
            }
            Value::Object(s)
        })
}
