//! Synthetic tool calls (`mcpulse probe --call`) and health tools (`--health-tool`): what to
//! call ([`CallSpec`]), what the result must satisfy ([`Expectation`], Gatus-style conditions
//! on a JSON pointer), and how a call is recorded in a transcript ([`CallRecord`]).
//!
//! It lives in the wire crate because three crates share it and none owns the others: the CLI
//! (and later the monitor's config) parses it once, the probe sends it, the judge reads it back
//! from the transcript. It neither sends nor judges.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// How long a synthetic call may take when its caller gives no budget. Past it the call is
/// given up (and cancelled): a dependency check that takes longer than this is failing anyway,
/// and waiting on would hold the whole probe.
pub const DEFAULT_CALL_BUDGET_MS: u64 = 5_000;

/// The tool names `--health-tool auto` calls (exactly these, no required arguments).
pub const HEALTH_TOOL_NAMES: &[&str] = &["health_check", "health", "healthcheck"];

/// One synthetic `tools/call`: the tool, its arguments and what its result must satisfy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSpec {
    pub tool: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Conditions on the result, each as the user wrote it (`/structuredContent/status == "ok"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<Expectation>,
    /// The latency budget: the call is given up (and cancelled) past it.
    pub budget_ms: u64,
    /// A failing critical call makes the server down, not degraded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub critical: bool,
}

impl CallSpec {
    /// A call of `tool` with no arguments, no expectations, the default budget, not critical.
    pub fn new(tool: impl Into<String>) -> CallSpec {
        CallSpec {
            tool: tool.into(),
            arguments: Map::new(),
            expect: Vec::new(),
            budget_ms: DEFAULT_CALL_BUDGET_MS,
            critical: false,
        }
    }
}

/// Which health tool to call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HealthToolMode {
    /// A listed tool named exactly one of [`HEALTH_TOOL_NAMES`], taking no required arguments
    /// and not annotated destructive.
    #[default]
    Auto,
    /// This tool (it must be listed, take no required arguments, and not be annotated
    /// destructive unless side effects are allowed).
    Named(String),
    Off,
}

/// Why a call was not sent. Recorded, then reported as a finding: a check that was asked for
/// and not made must not look like a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    /// The tool is not in `tools/list` (or the list could not be read), so its annotations
    /// cannot be checked.
    NotListed,
    /// Annotated `destructiveHint: true`, and side effects were not allowed.
    Destructive,
    /// Not annotated `readOnlyHint: true`, and side effects were not allowed.
    NotReadOnly,
    /// A health tool with required arguments (a health tool is called with none).
    RequiredArguments,
    /// The probe's deadline came before the call could be sent.
    NoTime,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotListed => "it is not in tools/list",
            Refusal::Destructive => {
                "it is annotated destructive (destructiveHint: true, or readOnlyHint: false without destructiveHint: false; pass --allow-side-effects to call it anyway)"
            }
            Refusal::NotReadOnly => {
                "it is not annotated readOnlyHint: true (pass --allow-side-effects to call it anyway)"
            }
            Refusal::RequiredArguments => "it has required arguments",
            Refusal::NoTime => "the probe's deadline came first",
        }
    }
}

/// Whether a listed tool (its `tools/list` entry) may be called: not destructive and marked
/// read-only, unless `allow_side_effects`. A health check must not mutate anything by accident.
pub fn admit(tool: Option<&Value>, allow_side_effects: bool) -> Result<(), Refusal> {
    let Some(tool) = tool else {
        return Err(Refusal::NotListed);
    };
    if allow_side_effects {
        return Ok(());
    }
    let hint = |k: &str| {
        tool.pointer(&format!("/annotations/{k}"))
            .and_then(Value::as_bool)
    };
    if is_destructive(tool) {
        return Err(Refusal::Destructive);
    }
    if hint("readOnlyHint") != Some(true) {
        return Err(Refusal::NotReadOnly);
    }
    Ok(())
}

/// Whether the health tool `name`, as listed (`tool`; `None`: not listed), may be called: it
/// must be listed, take no required arguments and not be destructive unless side effects are
/// allowed. A name that is one of [`HEALTH_TOOL_NAMES`] says it is a health check, so
/// `readOnlyHint` is not required of it; any other name (`purge_cache`) must be annotated
/// read-only, as any call must ([`admit`]). The probe and the gateway's `tool` checks both ask.
pub fn admit_health_tool(
    name: &str,
    tool: Option<&Value>,
    allow_side_effects: bool,
) -> Result<(), Refusal> {
    match tool {
        None => Err(Refusal::NotListed),
        Some(t) if has_required_arguments(t) => Err(Refusal::RequiredArguments),
        Some(t) if is_destructive(t) && !allow_side_effects => Err(Refusal::Destructive),
        Some(t) if !HEALTH_TOOL_NAMES.contains(&name) => admit(Some(t), allow_side_effects),
        Some(_) => Ok(()),
    }
}

/// Whether a listed tool may be destructive: annotated `destructiveHint: true`, or
/// `readOnlyHint: false` without `destructiveHint: false` (MCP's default for a tool that is
/// not read-only is `destructiveHint: true`). A tool with no annotations at all is not taken
/// as destructive here: [`admit`] refuses it anyway unless it is read-only, and a health tool
/// named exactly one of [`HEALTH_TOOL_NAMES`] is trusted by its name.
pub fn is_destructive(tool: &Value) -> bool {
    let hint = |k: &str| {
        tool.pointer(&format!("/annotations/{k}"))
            .and_then(Value::as_bool)
    };
    match hint("destructiveHint") {
        Some(d) => d,
        None => hint("readOnlyHint") == Some(false),
    }
}

/// Whether a listed tool declares required arguments.
pub fn has_required_arguments(tool: &Value) -> bool {
    tool.pointer("/inputSchema/required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
}

/// What a call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallPurpose {
    /// `--call`: a synthetic transaction.
    Synthetic,
    /// `--health-tool`: the server's own health tool, whose result is a health document.
    HealthTool,
}

/// One call as the probe made it (or refused it): the spec, and where its exchange is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub purpose: CallPurpose,
    #[serde(flatten)]
    pub spec: CallSpec,
    /// The index in `exchanges` of the `tools/call`, when it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<usize>,
    /// Why it was not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// It timed out and `notifications/cancelled` was sent (stdio, legacy HTTP+SSE); over
    /// Streamable HTTP the response stream was closed instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// The time the call was given, in milliseconds, when the probe's deadline came before its
    /// budget: a timeout then says which bound fired (absent: the budget was the bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// A comparison of an [`Expectation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// The pointer resolves (no value).
    Exists,
    /// A string contains the (string) value, or an array has an element equal to it.
    Contains,
}

impl Op {
    const ALL: &[(&str, Op)] = &[
        ("==", Op::Eq),
        ("!=", Op::Ne),
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("<", Op::Lt),
        (">", Op::Gt),
        ("exists", Op::Exists),
        ("contains", Op::Contains),
    ];

    pub fn as_str(self) -> &'static str {
        Op::ALL
            .iter()
            .find(|(_, o)| *o == self)
            .map_or("?", |(s, _)| s)
    }
}

/// A condition on a call's result, `PATH OP VALUE`: PATH a JSON pointer into the `tools/call`
/// result (`/structuredContent/status`, `/content/0/text`, `/isError`), OP one of `==`, `!=`,
/// `<`, `<=`, `>`, `>=`, `contains`, or `exists` (no VALUE), VALUE JSON (`"ok"`, `3`, `true`).
/// Parsed once, where it is given; kept in transcripts as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub pointer: String,
    pub op: Op,
    pub value: Option<Value>,
}

/// Why an expectation was not accepted. Each message says what to write.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExpectError {
    #[error("{0:?}: write PATH OP VALUE, e.g. '/structuredContent/status == \"ok\"'")]
    Shape(String),
    #[error(
        "{0:?}: the path must be a JSON pointer starting with / (e.g. /structuredContent/status)"
    )]
    Pointer(String),
    #[error("{input:?}: unknown operator {op:?}; use ==, !=, <, <=, >, >=, contains or exists")]
    Op { input: String, op: String },
    #[error("{0:?}: the value must be JSON (quote strings: \"ok\")")]
    Value(String),
    #[error("{0:?}: exists takes no value")]
    ExistsValue(String),
    #[error("{0:?}: <, <=, > and >= compare numbers")]
    NotANumber(String),
}

impl FromStr for Expectation {
    type Err = ExpectError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        let (pointer, rest) = s
            .split_once(char::is_whitespace)
            .ok_or_else(|| ExpectError::Shape(input.to_owned()))?;
        if !pointer.starts_with('/') {
            return Err(ExpectError::Pointer(input.to_owned()));
        }
        let rest = rest.trim_start();
        let (op_text, value_text) = rest
            .split_once(char::is_whitespace)
            .map_or((rest, ""), |(o, v)| (o, v.trim()));
        let op = Op::ALL
            .iter()
            .find(|(s, _)| *s == op_text)
            .map(|(_, o)| *o)
            .ok_or_else(|| ExpectError::Op {
                input: input.to_owned(),
                op: op_text.to_owned(),
            })?;
        let value = match (op, value_text.is_empty()) {
            (Op::Exists, true) => None,
            (Op::Exists, false) => return Err(ExpectError::ExistsValue(input.to_owned())),
            (_, true) => return Err(ExpectError::Shape(input.to_owned())),
            (_, false) => Some(
                serde_json::from_str::<Value>(value_text)
                    .map_err(|_| ExpectError::Value(input.to_owned()))?,
            ),
        };
        if matches!(op, Op::Lt | Op::Le | Op::Gt | Op::Ge)
            && !value.as_ref().is_some_and(Value::is_number)
        {
            return Err(ExpectError::NotANumber(input.to_owned()));
        }
        Ok(Expectation {
            pointer: pointer.to_owned(),
            op,
            value,
        })
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.pointer, self.op.as_str())?;
        match &self.value {
            Some(v) => write!(f, " {v}"),
            None => Ok(()),
        }
    }
}

impl Serialize for Expectation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Expectation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Expectation {
    /// Checks the condition on `result`; on failure, what was found there (compact JSON, as
    /// the server sent it: the caller makes it inert and cuts it).
    pub fn check(&self, result: &Value) -> Result<(), String> {
        let found = result.pointer(&self.pointer);
        let Some(found) = found else {
            return Err("nothing at that path".to_owned());
        };
        let ok = match (self.op, &self.value) {
            (Op::Exists, _) => true,
            (_, None) => false,
            (Op::Eq, Some(v)) => same(found, v),
            (Op::Ne, Some(v)) => !same(found, v),
            (Op::Contains, Some(v)) => match (found, v) {
                (Value::String(s), Value::String(sub)) => s.contains(sub.as_str()),
                (Value::Array(a), v) => a.iter().any(|x| same(x, v)),
                _ => false,
            },
            (op, Some(v)) => match (found.as_f64(), v.as_f64()) {
                (Some(a), Some(b)) => match op {
                    Op::Lt => a < b,
                    Op::Le => a <= b,
                    Op::Gt => a > b,
                    _ => a >= b,
                },
                _ => false,
            },
        };
        if ok {
            Ok(())
        } else {
            Err(format!("found {found}"))
        }
    }
}

/// JSON equality, with numbers compared by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn expectations_parse_and_print_as_written() {
        for s in [
            r#"/structuredContent/status == "ok""#,
            "/content/0/text != \"x y\"",
            "/structuredContent/latency_ms < 250",
            "/structuredContent/count >= 1",
            "/structuredContent/db exists",
            r#"/content/0/text contains "pong""#,
        ] {
            let e: Expectation = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
    }

    #[test]
    fn bad_expectations_say_what_to_write() {
        let err = |s: &str| s.parse::<Expectation>().unwrap_err();
        assert!(matches!(err("/status"), ExpectError::Shape(_)));
        assert!(matches!(err("status == 1"), ExpectError::Pointer(_)));
        assert!(matches!(err("/status ~= 1"), ExpectError::Op { .. }));
        assert!(matches!(err("/status == ok"), ExpectError::Value(_)));
        assert!(matches!(
            err("/status exists 1"),
            ExpectError::ExistsValue(_)
        ));
        assert!(matches!(err("/n < \"a\""), ExpectError::NotANumber(_)));
        assert!(matches!(err("/status =="), ExpectError::Shape(_)));
        assert_eq!(
            err("/status == ok").to_string(),
            r#""/status == ok": the value must be JSON (quote strings: "ok")"#
        );
    }

    #[test]
    fn expectations_check_a_result() {
        let r = json!({"structuredContent": {"status": "ok", "n": 3, "tags": ["a"]},
                       "content": [{"type": "text", "text": "pong!"}]});
        let ok = |s: &str| s.parse::<Expectation>().unwrap().check(&r);
        assert!(ok(r#"/structuredContent/status == "ok""#).is_ok());
        assert_eq!(
            ok(r#"/structuredContent/status == "down""#),
            Err("found \"ok\"".into())
        );
        assert!(ok("/structuredContent/n == 3.0").is_ok());
        assert!(ok("/structuredContent/n < 4").is_ok());
        assert!(ok("/structuredContent/n > 4").is_err());
        assert!(ok(r#"/structuredContent/status < 4"#).is_err());
        assert!(ok(r#"/content/0/text contains "pong""#).is_ok());
        assert!(ok(r#"/structuredContent/tags contains "a""#).is_ok());
        assert!(ok("/structuredContent/n exists").is_ok());
        assert_eq!(
            ok("/structuredContent/missing exists"),
            Err("nothing at that path".into())
        );
        assert!(ok(r#"/structuredContent/missing != "x""#).is_err());
    }

    #[test]
    fn side_effects_are_refused_unless_allowed() {
        let ro = json!({"name": "t", "annotations": {"readOnlyHint": true}});
        let plain = json!({"name": "t"});
        let destructive =
            json!({"name": "t", "annotations": {"readOnlyHint": true, "destructiveHint": true}});
        assert_eq!(admit(Some(&ro), false), Ok(()));
        assert_eq!(admit(Some(&plain), false), Err(Refusal::NotReadOnly));
        assert_eq!(admit(Some(&destructive), false), Err(Refusal::Destructive));
        assert_eq!(admit(Some(&destructive), true), Ok(()));
        assert_eq!(admit(None, true), Err(Refusal::NotListed));
    }

    #[test]
    fn a_record_round_trips() {
        let rec = CallRecord {
            deadline_ms: None,
            purpose: CallPurpose::Synthetic,
            spec: CallSpec {
                expect: vec![r#"/structuredContent/status == "ok""#.parse().unwrap()],
                critical: true,
                ..CallSpec::new("db_ping")
            },
            exchange: Some(4),
            refused: None,
            cancelled: false,
        };
        let text = serde_json::to_string(&rec).unwrap();
        assert_eq!(serde_json::from_str::<CallRecord>(&text).unwrap(), rec);
    }

    #[test]
    fn a_tool_not_read_only_is_destructive_by_default() {
        let d = |v: Value| is_destructive(&json!({"name": "health", "annotations": v}));
        assert!(
            d(json!({"readOnlyHint": false})),
            "MCP's default when not read-only"
        );
        assert!(d(json!({"destructiveHint": true})));
        assert!(!d(json!({"readOnlyHint": false, "destructiveHint": false})));
        assert!(!d(json!({"readOnlyHint": true})));
        assert!(!d(json!({})));
        assert!(!is_destructive(&json!({"name": "health"})));
    }
}
