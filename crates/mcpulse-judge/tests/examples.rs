//! Every rule of the registry has an example whose output is a snapshot (ruff's fixture model):
//! - health and security rules: a transcript under `transcripts/` (recorded from a real server,
//!   or written by hand and named after the rule it shows), judged and snapshotted by
//!   `transcripts.rs`;
//! - drift rules: a pair of contracts in `contracts/drift-examples.json` (a shared baseline and
//!   one edited copy per example), diffed and snapshotted here.
//!
//! [`every_rule_has_an_example`] fails when a rule has none, naming it, unless it is listed in
//! [`WITHOUT_EXAMPLE`]; and it fails when a listed rule has gained one, so the list only shrinks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::contract::{self, Contract, Parts};
use mcpulse_judge::rules::AnyRule;
use mcpulse_judge::{Policy, Transcript, judge};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// Rules without an example here, each with the reason and where it is tested instead.
const WITHOUT_EXAMPLE: &[&str] = &[
    // Needs more than 10,000 items in one list: a fixture and its snapshot (every tool is in
    // the report) would weigh megabytes. Covered end to end by crates/mcpulse/tests/memory.rs.
    "list-truncated",
];

fn dir(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

/// The codes the transcript fixtures produce, health and security.
fn transcript_codes() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    for entry in std::fs::read_dir(dir("transcripts")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let tr: Transcript = serde_json::from_str(&text).unwrap();
        let report = judge(&tr, &Policy::default());
        codes.extend(report.findings.iter().map(|f| f.code.code().to_owned()));
        codes.extend(
            report
                .security
                .findings
                .iter()
                .map(|f| f.code.code().to_owned()),
        );
    }
    codes
}

fn contract(target: &str, v: &Value) -> Contract {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let list = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    contract::build(Parts {
        target: target.into(),
        era: s("era"),
        protocol_version: s("protocol_version"),
        supported_versions: list("supported_versions")
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        capabilities: v.get("capabilities").cloned().unwrap_or(Value::Null),
        instructions: s("instructions"),
        server_info: v.get("server_info").cloned().unwrap_or(Value::Null),
        tools: list("tools"),
        prompts: list("prompts"),
        resources: list("resources"),
        resource_templates: list("resource_templates"),
    })
}

/// Each drift example, diffed: its rule, and the changes it produced.
fn drift_examples() -> Vec<(String, mcpulse_judge::drift::Drift)> {
    let text = std::fs::read_to_string(dir("contracts").join("drift-examples.json")).unwrap();
    let file: Value = serde_json::from_str(&text).unwrap();
    let base = &file["base"];
    file["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let old = contract("http://127.0.0.1:1/mcp", e.get("old").unwrap_or(base));
            let new = contract("http://127.0.0.1:1/mcp", &e["new"]);
            (
                e["rule"].as_str().unwrap().to_owned(),
                mcpulse_judge::drift::diff(&old, &new),
            )
        })
        .collect()
}

#[test]
fn drift_examples_produce_their_rule() {
    for (rule, drift) in drift_examples() {
        assert!(
            drift.changes.iter().any(|c| c.code == rule.as_str()),
            "the example for {rule} did not produce it: {:?}",
            drift.changes
        );
        let changes: Vec<Value> = drift
            .changes
            .iter()
            .map(|c| serde_json::json!({"code": c.code, "class": c.class, "path": c.path, "message": c.message}))
            .collect();
        insta::with_settings!({ snapshot_suffix => rule.clone(), prepend_module_to_snapshot => false }, {
            insta::assert_json_snapshot!("drift", changes);
        });
    }
}

#[test]
fn every_rule_has_an_example() {
    let mut seen = transcript_codes();
    seen.extend(drift_examples().into_iter().map(|(rule, _)| rule));
    let missing: Vec<&str> = AnyRule::all()
        .map(AnyRule::code)
        .filter(|c| !seen.contains(*c) && !WITHOUT_EXAMPLE.contains(c))
        .collect();
    assert!(
        missing.is_empty(),
        "these rules have no example (a transcript under tests/transcripts, or a contract pair in tests/contracts/drift-examples.json): {missing:?}"
    );
    let gained: Vec<&&str> = WITHOUT_EXAMPLE
        .iter()
        .filter(|c| seen.contains(**c))
        .collect();
    assert!(
        gained.is_empty(),
        "these rules now have an example: take them off WITHOUT_EXAMPLE: {gained:?}"
    );
    for c in WITHOUT_EXAMPLE {
        assert!(
            AnyRule::all().any(|r| r.code() == *c),
            "{c} in WITHOUT_EXAMPLE is not a rule"
        );
    }
}
