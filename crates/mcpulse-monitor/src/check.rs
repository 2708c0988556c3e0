//! One finished check, as the store keeps it and the API shows it.

use crate::alert::{Alert, Incidents};
use crate::state::{Event, Health, Observation, TargetState};
use serde::{Deserialize, Serialize};

/// Everything one check produced, written to the store in one transaction: the result row,
/// the target's new state and open incidents, the transitions, and the alerts to deliver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub target: String,
    pub at_ms: i64,
    /// The raw verdict of this check (not the confirmed state).
    pub status: Health,
    pub duration_ms: f64,
    /// `timings_ms` of the report.
    pub timings: serde_json::Value,
    /// `findings` of the report (code, severity, message).
    pub findings: serde_json::Value,
    pub grade: Option<String>,
    pub observation: Observation,
    /// The state after this check.
    pub state: TargetState,
    pub incidents: Incidents,
    pub events: Vec<Event>,
    pub alerts: Vec<Alert>,
    /// The contract (a baseline file's JSON), when one was taken and it is new for the target.
    pub contract: Option<String>,
    /// The synthetic calls made (not the refused ones), for the per-tool figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallSample>,
}

/// One synthetic call of a check: the tool (inert), whether it passed, how long it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSample {
    pub tool: String,
    pub ok: bool,
    /// From the request to the reply, or to giving up at the budget.
    pub ms: Option<f64>,
}

/// One tool's call figures over the standard windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStats {
    pub tool: String,
    pub windows: Vec<CallStats>,
}

/// A tool's calls over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallStats {
    pub window: String,
    pub calls: u64,
    /// Calls that failed (an error, `isError`, a broken expectation or schema, past the budget).
    pub errors: u64,
    pub error_ratio: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// One row of a target's history, as the API pages it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRow {
    pub id: i64,
    pub at_ms: i64,
    pub status: Health,
    pub duration_ms: f64,
    pub timings: serde_json::Value,
    pub findings: serde_json::Value,
    pub grade: Option<String>,
    /// The check's synthetic calls (`[[targets.call]]`), each tool's result and latency, in
    /// the order made; absent without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallSample>,
}

/// Uptime and latency over a window, computed from the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub window: String,
    pub checks: u64,
    /// Share of checks that were healthy (degraded counts as up for uptime, as it answered).
    pub uptime: Option<f64>,
    pub healthy_ratio: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A target removed from the config (a reload), as the store records it: its open incidents
/// are resolved (`alerts`, queued for the sinks in `sinks`), an `Event::Removed` goes into its
/// history, and its stored incidents are cleared so that adding it back later does not resume
/// incidents the sinks were told are closed. Its stored state (status, thresholds) is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    pub target: String,
    pub at_ms: i64,
    pub event: Event,
    pub alerts: Vec<Alert>,
    /// The sinks the resolves are for: those that took the incidents.
    pub sinks: Vec<crate::sink::SinkId>,
}

/// The phases of a check's stored `timings` that the status page's latency chart draws, read
/// without building a JSON tree per check (a 30-day chart reads 43,200 of them). Lenient: a
/// phase missing, `null` or not a number is `None`; other keys are skipped.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PhaseTimings {
    #[serde(deserialize_with = "lenient_ms")]
    pub total: Option<f64>,
    #[serde(deserialize_with = "lenient_ms")]
    pub connect: Option<f64>,
    #[serde(deserialize_with = "lenient_ms")]
    pub startup: Option<f64>,
    #[serde(deserialize_with = "lenient_ms")]
    pub handshake: Option<f64>,
    #[serde(deserialize_with = "lenient_ms")]
    pub tools_list: Option<f64>,
    #[serde(deserialize_with = "lenient_ms")]
    pub calls: Option<f64>,
}

impl PhaseTimings {
    /// The phases in the chart's order (`api::page::chart::PHASES`).
    pub fn phases(&self) -> [Option<f64>; 6] {
        [
            self.total,
            self.connect,
            self.startup,
            self.handshake,
            self.tools_list,
            self.calls,
        ]
    }
}

/// A number, or `None` for anything else (`null`, a string, an object), as the JSON tree
/// read it before.
fn lenient_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Ms {
        N(f64),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Ms::deserialize(d)? {
        Ms::N(v) => Some(v),
        Ms::Other(_) => None,
    })
}
