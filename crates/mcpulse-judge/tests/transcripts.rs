//! Judgement of recorded transcripts, snapshotted: every transcript under `transcripts/` is a
//! fixture (recorded from real servers with `mcpulse probe --transcript`, or written by hand
//! for failure classes), and its report is a snapshot under `snapshots/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::{Policy, Transcript, judge};
use std::path::Path;

#[test]
fn every_transcript_fixture() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(paths.len() >= 6, "fixtures missing in {}", dir.display());
    for path in paths {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let tr: Transcript = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let report = judge(&tr, &Policy::default());
        insta::with_settings!({ snapshot_suffix => name.clone(), prepend_module_to_snapshot => false }, {
            insta::assert_json_snapshot!("report", report);
        });
    }
}

#[test]
fn judging_is_pure() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts");
    let text = std::fs::read_to_string(dir.join("everything-stdio.json")).unwrap();
    let tr: Transcript = serde_json::from_str(&text).unwrap();
    assert_eq!(
        judge(&tr, &Policy::default()),
        judge(&tr, &Policy::default())
    );
    // A tighter budget turns the same evidence degraded.
    let strict = judge(
        &tr,
        &Policy {
            latency_budget_ms: 1.0,
            ..Policy::default()
        },
    );
    assert!(
        strict.findings.iter().any(|f| f.code == "slow-handshake"),
        "{strict:?}"
    );
}
