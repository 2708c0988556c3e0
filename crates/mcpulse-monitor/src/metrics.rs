//! Prometheus exposition: the fleet on `/metrics`, and one probe on `/probe` (the
//! blackbox_exporter pattern). Both render a value (a [`Snapshot`], a [`ProbeSample`]) on
//! each scrape through `prometheus-client` collectors, in the Prometheus text format 0.0.4 or
//! in OpenMetrics 1.0 when the scrape's `Accept` prefers it ([`Format::negotiate`]).
//!
//! Naming follows the Prometheus conventions: base units in the name (`_seconds`), counters
//! end in `_total`, metadata is an `_info` metric with value 1, timestamps are
//! `_timestamp_seconds` (the time, not the age). Labels are bounded: `target` (the configured
//! name, one per monitored server) and small closed sets (`phase`, `status`, `severity`,
//! `grade`, `auth`, `era`), plus `digest` and `protocol_version` on info metrics, which change
//! rarely. Nothing request-, session- or argument-shaped ever becomes a label, and the
//! targets' own config labels stay out: relabel in the scrape config instead.
//!
//! Status-like values are state sets: one series per possible state, 1 for the current one
//! and 0 for the others, so `mcpulse_target_status{status="down"} == 1` selects exactly the
//! down targets and nothing goes stale when a state changes. They are exposed as gauges
//! (OpenMetrics' `stateset` type would need the label to be named after the metric, and the
//! 0.0.4 format has no such type). Phases that did not happen (no TLS on plain HTTP, no
//! DNS/connect/TLS on stdio) have no series rather than a misleading 0.
//!
//! The list of metrics, with types and labels, is in `docs/prometheus.md`.

use crate::fleet::{Snapshot, severity_counts};
use crate::state::Health;
use mcpulse_judge::report::{AuthPosture, Report, Timings};
use mcpulse_judge::{Finding, Status};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The exposition format of a scrape response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text (ends in `# EOF`; counters, info and units as OpenMetrics has them).
    OpenMetrics,
}

const OPENMETRICS: &str = "application/openmetrics-text";

impl Format {
    /// The format a scrape asks for: OpenMetrics when `Accept` ranks
    /// `application/openmetrics-text` at least as high as plain text (Prometheus does, by
    /// default); the 0.0.4 text format otherwise, and without an `Accept` header.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut om, mut text) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
                .filter(|q| q.is_finite())
                .unwrap_or(1.0)
                .clamp(0.0, 1.0);
            match media.as_str() {
                OPENMETRICS => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

fn encode(collector: impl Collector, format: Format) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut out = String::new();
    match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
    }
    Ok(out)
}

/// Renders the fleet for `/metrics`.
pub fn fleet(snapshot: Snapshot, format: Format) -> Result<String, std::fmt::Error> {
    encode(FleetCollector(snapshot), format)
}

/// One finished `/probe`: the report and how long it took against what budget.
#[derive(Debug, Clone)]
pub struct ProbeSample {
    pub report: Report,
    /// The whole probe, as the exporter measured it.
    pub duration_seconds: f64,
    /// The probe's effective timeout (module or target timeout, bounded by the scrape's).
    pub timeout_seconds: f64,
    /// Whether the security grade is meaningful here (the security checks ran).
    pub graded: bool,
}

/// Renders one probe for `/probe`, in the blackbox_exporter's style.
pub fn probe(sample: ProbeSample, format: Format) -> Result<String, std::fmt::Error> {
    encode(ProbeCollector(sample), format)
}

/// The states of [`Health`], in exposition order.
const HEALTH: [Health; 4] = [
    Health::Unknown,
    Health::Healthy,
    Health::Degraded,
    Health::Down,
];
/// The grades, best first.
const GRADES: [&str; 5] = ["A", "B", "C", "D", "F"];

/// The phases of a probe with their timings (milliseconds), those that happened only.
fn phases(t: &Timings) -> Vec<(&'static str, f64)> {
    [
        ("dns", t.dns),
        ("connect", t.connect),
        ("tls", t.tls),
        ("handshake", t.handshake),
        ("tools_list", t.tools_list),
    ]
    .into_iter()
    .filter_map(|(p, ms)| ms.map(|ms| (p, ms / 1000.0)))
    .collect()
}

/// The first 48 bits of a `sha256:<hex>` digest as a number: exact in a float, so
/// `changes(…_contract_hash[1h])` sees every contract change (the blackbox `ip_addr_hash`
/// idea).
pub fn digest_hash(digest: &str) -> Option<f64> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let head = hex.get(..12)?;
    u64::from_str_radix(head, 16).ok().map(|n| n as f64)
}

fn bool_value(b: bool) -> i64 {
    i64::from(b)
}

/// Writes gauge families. Each family's descriptor is written even with no samples, so the
/// metric list (HELP, TYPE) is the same whatever the fleet holds.
struct Out<'e, 'w> {
    enc: &'e mut DescriptorEncoder<'w>,
}

/// A value a gauge sample can carry.
trait Value: prometheus_client::encoding::EncodeGaugeValue {}
impl Value for i64 {}
impl Value for f64 {}

impl Out<'_, '_> {
    fn gauge<L: EncodeLabelSet, V: Value>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        rows: &[(L, V)],
    ) -> Result<(), std::fmt::Error> {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit, MetricType::Gauge)?;
        for (labels, v) in rows {
            m.encode_family(labels)?.encode_gauge(v)?;
        }
        Ok(())
    }

    fn single<V: Value>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        v: Option<V>,
    ) -> Result<(), std::fmt::Error> {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit, MetricType::Gauge)?;
        if let Some(v) = v {
            m.encode_gauge(&v)?;
        }
        Ok(())
    }

    fn counter(&mut self, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        m.encode_counter::<NoLabelSet, u64, u64>(&v, None)
    }

    /// An info metric (`<name>_info … 1`): `rows` pairs the family labels with the info labels.
    fn info<F: EncodeLabelSet, I: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        rows: &[(F, I)],
    ) -> Result<(), std::fmt::Error> {
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Info)?;
        for (family, info) in rows {
            m.encode_family(family)?.encode_info(info)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct FleetCollector(Snapshot);

type TargetLabel<'a> = [(&'static str, &'a str); 1];
type TargetAnd<'a> = [(&'static str, &'a str); 2];

fn t(name: &str) -> TargetLabel<'_> {
    [("target", name)]
}

impl Collector for FleetCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = &self.0;
        let mut out = Out { enc: &mut enc };
        let seconds = Unit::Seconds;

        let mut status: Vec<(TargetAnd<'_>, i64)> = Vec::new();
        for v in &snap.targets {
            for h in HEALTH {
                status.push((
                    [("target", &v.name), ("status", h.as_str())],
                    bool_value(v.status == h),
                ));
            }
        }
        out.gauge(
            "mcpulse_target_status",
            "The confirmed status of a target (after the failure and success thresholds), as a state set: 1 for the current status, 0 for the others.",
            None,
            &status,
        )?;
        let flapping: Vec<_> = snap
            .targets
            .iter()
            .map(|v| (t(&v.name), bool_value(v.flapping)))
            .collect();
        out.gauge(
            "mcpulse_target_flapping",
            "1 while a target is flapping (too many status changes within the flap window).",
            None,
            &flapping,
        )?;
        let transition: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| v.since_ms.map(|ms| (t(&v.name), ms as f64 / 1000.0)))
            .collect();
        out.gauge(
            "mcpulse_last_transition_timestamp",
            "When the confirmed status of a target last changed, in Unix seconds.",
            Some(&seconds),
            &transition,
        )?;
        let checked: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| {
                v.last
                    .as_ref()
                    .map(|l| (t(&v.name), l.at_ms as f64 / 1000.0))
            })
            .collect();
        out.gauge(
            "mcpulse_last_check_timestamp",
            "When a target was last checked, in Unix seconds.",
            Some(&seconds),
            &checked,
        )?;
        let success: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| {
                v.last
                    .as_ref()
                    .map(|l| (t(&v.name), bool_value(l.status != Health::Down)))
            })
            .collect();
        out.gauge(
            "mcpulse_probe_success",
            "1 if the last check of a target got an MCP answer (healthy or degraded), 0 if it was down.",
            None,
            &success,
        )?;
        let duration: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| {
                let l = v.last.as_ref()?;
                Some((t(&v.name), l.duration_ms? / 1000.0))
            })
            .collect();
        out.gauge(
            "mcpulse_probe_duration",
            "How long the last check of a target took, in seconds.",
            Some(&seconds),
            &duration,
        )?;
        let mut phase_rows: Vec<(TargetAnd<'_>, f64)> = Vec::new();
        for v in &snap.targets {
            if let Some(timings) = v.last.as_ref().and_then(|l| l.timings_ms.as_ref()) {
                for (p, s) in phases(timings) {
                    phase_rows.push(([("target", &v.name), ("phase", p)], s));
                }
            }
        }
        out.gauge(
            "mcpulse_probe_phase_duration",
            "How long each phase of the last check took, in seconds: dns, connect, tls, handshake (server/discover or initialize), tools_list (all pages).",
            Some(&seconds),
            &phase_rows,
        )?;
        let mut findings: Vec<(TargetAnd<'_>, i64)> = Vec::new();
        for v in &snap.targets {
            if let Some(l) = v.last.as_ref().filter(|l| l.timings_ms.is_some()) {
                for (sev, n) in severity_counts(&l.findings) {
                    findings.push(([("target", &v.name), ("severity", sev.as_str())], n as i64));
                }
            }
        }
        out.gauge(
            "mcpulse_probe_findings",
            "Findings of the last check of a target, by severity (critical makes it down, warning degraded).",
            None,
            &findings,
        )?;
        let tools: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| Some((t(&v.name), v.last.as_ref()?.tool_count? as i64)))
            .collect();
        out.gauge(
            "mcpulse_tools",
            "How many tools a target listed at its last check.",
            None,
            &tools,
        )?;
        // The version is the server's own text: a label value a person reads, made inert.
        let versions: Vec<std::borrow::Cow<'_, str>> = snap
            .targets
            .iter()
            .map(|v| {
                mcpulse_wire::text::field(
                    v.last
                        .as_ref()
                        .and_then(|l| l.protocol_version.as_deref())
                        .unwrap_or(""),
                )
            })
            .collect();
        let protocol: Vec<(TargetLabel<'_>, TargetAnd<'_>)> = snap
            .targets
            .iter()
            .zip(&versions)
            .filter_map(|(v, version)| {
                let l = v.last.as_ref()?;
                let era = l.era.as_deref()?;
                Some((
                    t(&v.name),
                    [("era", era), ("protocol_version", version.as_ref())],
                ))
            })
            .collect();
        out.info(
            "mcpulse_protocol",
            "The protocol era (modern or legacy) and version a target spoke at its last check.",
            &protocol,
        )?;
        let contract: Vec<(TargetLabel<'_>, TargetLabel<'_>)> = snap
            .targets
            .iter()
            .filter_map(|v| {
                let d = v.last.as_ref()?.contract_digest.as_deref()?;
                Some((t(&v.name), [("digest", d)]))
            })
            .collect();
        out.info(
            "mcpulse_contract",
            "The digest of a target's contract (tools, prompts, resources and server facts) at its last check.",
            &contract,
        )?;
        let contract_hash: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| {
                let d = v.last.as_ref()?.contract_digest.as_deref()?;
                Some((t(&v.name), digest_hash(d)?))
            })
            .collect();
        out.gauge(
            "mcpulse_contract_hash",
            "The first 48 bits of the contract digest as a number: changes() over it counts contract changes.",
            None,
            &contract_hash,
        )?;
        let score: Vec<_> = snap
            .targets
            .iter()
            .filter_map(|v| Some((t(&v.name), i64::from(v.last.as_ref()?.security_score?))))
            .collect();
        out.gauge(
            "mcpulse_security_score",
            "The security score of a target, 0 to 100 (targets with security checks on).",
            None,
            &score,
        )?;
        let mut grade_rows: Vec<(TargetAnd<'_>, i64)> = Vec::new();
        for v in &snap.targets {
            if let Some(g) = v.last.as_ref().and_then(|l| l.grade.as_deref()) {
                for grade in GRADES {
                    grade_rows.push((
                        [("target", &v.name), ("grade", grade)],
                        bool_value(g == grade),
                    ));
                }
            }
        }
        out.gauge(
            "mcpulse_security_grade",
            "The security grade of a target as a state set over A, B, C, D and F.",
            None,
            &grade_rows,
        )?;
        let incidents: Vec<_> = snap
            .targets
            .iter()
            .map(|v| (t(&v.name), v.incidents.len() as i64))
            .collect();
        out.gauge(
            "mcpulse_open_incidents",
            "Open alert incidents of a target (status, drift, flapping).",
            None,
            &incidents,
        )?;

        // The monitor itself.
        let m = &snap.monitor;
        out.info(
            "mcpulse_build",
            "The mcpulse version.",
            &[(NoLabels, [("version", env!("CARGO_PKG_VERSION"))])],
        )?;
        out.single(
            "mcpulse_targets",
            "Targets in the running configuration.",
            None,
            Some(snap.targets.len() as i64),
        )?;
        out.counter(
            "mcpulse_checks",
            "Checks the scheduler completed since the monitor started.",
            m.checks,
        )?;
        out.counter(
            "mcpulse_store_write_errors",
            "Failed writes to the history store since the monitor started.",
            m.store_write_errors,
        )?;
        tool_calls(&mut out, &snap.targets)?;
        let mut deliveries = out.enc.encode_descriptor(
            "mcpulse_alert_deliveries",
            "Alert delivery attempts since the monitor started, by sink (its identity: kind and a digest of the destination) and outcome (delivered; failed, to be retried; dropped, given up).",
            None,
            MetricType::Counter,
        )?;
        for ((sink, outcome), n) in &m.deliveries {
            deliveries
                .encode_family(&[("sink", sink.as_str()), ("outcome", outcome)])?
                .encode_counter::<NoLabelSet, u64, u64>(n, None)?;
        }
        out.single(
            "mcpulse_store_last_write_timestamp",
            "When the history store last took a write, in Unix seconds.",
            Some(&seconds),
            m.store_last_ok_ms.map(|ms| ms as f64 / 1000.0),
        )?;
        out.single(
            "mcpulse_config_last_reload_timestamp",
            "When the running configuration was loaded, in Unix seconds.",
            Some(&seconds),
            m.config_loaded_ms.map(|ms| ms as f64 / 1000.0),
        )?;
        out.counter(
            "mcpulse_api_probes",
            "Probes run for /probe requests since the monitor started.",
            m.probes,
        )?;
        out.single(
            "mcpulse_api_probes_in_flight",
            "Probes for /probe requests running now.",
            None,
            Some(i64::try_from(m.probes_in_flight).unwrap_or(i64::MAX)),
        )?;
        Ok(())
    }
}

/// The synthetic calls' series, by `target` and `tool` (at most
/// [`crate::fleet::MAX_TOOL_SERIES`] tools a target, names made inert by the judge):
/// `mcpulse_tool_calls_total`, `mcpulse_tool_call_errors_total`, and the latency histogram
/// `mcpulse_tool_call_duration_seconds` (`histogram_quantile` gives its percentiles; the API
/// gives the history's nearest-rank ones).
fn tool_calls(out: &mut Out<'_, '_>, targets: &[crate::fleet::TargetView]) -> std::fmt::Result {
    let rows: Vec<(TargetAnd<'_>, &crate::fleet::ToolCalls)> = targets
        .iter()
        .flat_map(|v| {
            v.tools
                .iter()
                .map(move |(tool, c)| ([("target", v.name.as_str()), ("tool", tool.as_str())], c))
        })
        .collect();
    for (name, help, pick) in [
        (
            "mcpulse_tool_calls",
            "Synthetic tool calls made by the checks of a target since the monitor started, by tool.",
            (|c: &crate::fleet::ToolCalls| c.calls) as fn(&crate::fleet::ToolCalls) -> u64,
        ),
        (
            "mcpulse_tool_call_errors",
            "Synthetic tool calls that failed (an error, isError, a broken expectation or output schema, past the budget), by tool.",
            |c: &crate::fleet::ToolCalls| c.errors,
        ),
    ] {
        let mut m = out
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, c) in &rows {
            m.encode_family(labels)?
                .encode_counter::<NoLabelSet, u64, u64>(&pick(c), None)?;
        }
    }
    let mut m = out.enc.encode_descriptor(
        "mcpulse_tool_call_duration",
        "How long a target's synthetic tool calls took, from the request to the reply (or to giving up at the budget), by tool.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for (labels, c) in &rows {
        let buckets: Vec<(f64, u64)> = crate::fleet::TOOL_CALL_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(c.buckets.iter().copied())
            .collect();
        m.encode_family(labels)?
            .encode_histogram::<NoLabelSet>(c.sum, c.count, &buckets, None)?;
    }
    Ok(())
}

/// An empty label set for a family whose only labels are the info labels.
struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(
        &self,
        _: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}

#[derive(Debug)]
struct ProbeCollector(ProbeSample);

impl Collector for ProbeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let r = &s.report;
        let mut out = Out { enc: &mut enc };
        let seconds = Unit::Seconds;
        out.single(
            "probe_success",
            "1 if the server answered MCP (healthy or degraded), 0 if it is down.",
            None,
            Some(bool_value(r.status != Status::Down)),
        )?;
        out.single(
            "probe_duration",
            "How long the probe took, in seconds.",
            Some(&seconds),
            Some(s.duration_seconds),
        )?;
        out.single(
            "probe_timeout",
            "The probe's timeout, in seconds (module or target timeout, bounded by the scrape timeout).",
            Some(&seconds),
            Some(s.timeout_seconds),
        )?;
        let phase_rows: Vec<([(&str, &str); 1], f64)> = phases(&r.timings_ms)
            .into_iter()
            .map(|(p, v)| ([("phase", p)], v))
            .collect();
        out.gauge(
            "probe_mcp_phase_duration",
            "How long each phase took, in seconds: dns, connect, tls, handshake (server/discover or initialize), tools_list (all pages).",
            Some(&seconds),
            &phase_rows,
        )?;
        let status_rows: Vec<([(&str, &str); 1], i64)> =
            [Status::Healthy, Status::Degraded, Status::Down]
                .into_iter()
                .map(|st| ([("status", st.as_str())], bool_value(r.status == st)))
                .collect();
        out.gauge(
            "probe_mcp_status",
            "The verdict as a state set over healthy, degraded and down.",
            None,
            &status_rows,
        )?;
        let findings: &[Finding] = &r.findings;
        let finding_rows: Vec<([(&str, &str); 1], i64)> = severity_counts(findings)
            .into_iter()
            .map(|(sev, n)| ([("severity", sev.as_str())], n as i64))
            .collect();
        out.gauge(
            "probe_mcp_findings",
            "Findings by severity (critical makes the server down, warning degraded).",
            None,
            &finding_rows,
        )?;
        out.single(
            "probe_mcp_tools",
            "How many tools the server listed.",
            None,
            r.tool_count.map(|n| n as i64),
        )?;
        let version = mcpulse_wire::text::field(r.protocol_version.as_deref().unwrap_or(""));
        let era_rows: Vec<(NoLabels, [(&str, &str); 2])> = r
            .era
            .map(|e| {
                (
                    NoLabels,
                    [("era", e.as_str()), ("protocol_version", version.as_ref())],
                )
            })
            .into_iter()
            .collect();
        out.info(
            "probe_mcp_era",
            "The protocol era (modern or legacy) and version the server spoke.",
            &era_rows,
        )?;
        let up = r.status != Status::Down;
        let auth_rows: Vec<([(&str, &str); 1], i64)> = if up {
            [
                AuthPosture::None,
                AuthPosture::Required,
                AuthPosture::Forbidden,
            ]
            .into_iter()
            .map(|a| ([("auth", a.as_str())], bool_value(r.auth == a)))
            .collect()
        } else {
            Vec::new()
        };
        out.gauge(
            "probe_mcp_auth",
            "The authentication posture as a state set: none (open), required (401), forbidden (403).",
            None,
            &auth_rows,
        )?;
        let digest = r.digests.as_ref().map(|d| d.contract.as_str());
        let contract_rows: Vec<(NoLabels, [(&str, &str); 1])> = digest
            .map(|d| (NoLabels, [("digest", d)]))
            .into_iter()
            .collect();
        out.info(
            "probe_mcp_contract",
            "The digest of the server's contract (tools, prompts, resources and server facts).",
            &contract_rows,
        )?;
        out.single(
            "probe_mcp_contract_hash",
            "The first 48 bits of the contract digest as a number: changes() over it counts contract changes.",
            None,
            digest.and_then(digest_hash),
        )?;
        let graded = s.graded && up && !r.grade.is_empty();
        out.single(
            "probe_mcp_security_score",
            "The security score, 0 to 100 (when the security checks ran).",
            None,
            graded.then_some(i64::from(r.security.score)),
        )?;
        let grade_rows: Vec<([(&str, &str); 1], i64)> = if graded {
            GRADES
                .into_iter()
                .map(|g| ([("grade", g)], bool_value(r.grade == g)))
                .collect()
        } else {
            Vec::new()
        };
        out.gauge(
            "probe_mcp_security_grade",
            "The security grade as a state set over A, B, C, D and F (when the security checks ran).",
            None,
            &grade_rows,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        // Prometheus 3's default Accept.
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some(
                "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"
            )),
            Format::Prometheus
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Prometheus
        );
    }

    #[test]
    fn digest_hashes() {
        assert_eq!(digest_hash("sha256:000000000001ffff"), Some(1.0));
        assert_eq!(
            digest_hash("sha256:ffffffffffff"),
            Some(281_474_976_710_655.0)
        );
        assert_eq!(digest_hash("sha256:xyz"), None);
    }
}
