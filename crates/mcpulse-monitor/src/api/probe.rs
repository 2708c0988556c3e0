//! `/probe?target=&module=`: one probe now, answered as metrics (blackbox_exporter style).
//!
//! This module owns the request's side: its parameters, which targets it may name (never a
//! command, a URL only when allowed), the scrape-timeout budget, the concurrency and memory
//! bounds, and the answer (metrics, or `debug=true` text). Probing and judging are the probe
//! service's ([`crate::probe`]), the same as the scheduler's.

use super::metrics::{accepted_format, exposition};
use super::{ApiState, SCRAPE_TIMEOUT_OFFSET, text_error};
use crate::config::{Config, Endpoint, ModuleConfig, TargetConfig};
use crate::metrics::{self, Format, ProbeSample};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcpulse_wire::redact;
use std::time::{Duration, Instant};

/// What `/probe` resolved its `target` to.
enum ProbeTarget {
    /// A configured target, probed with its own settings.
    Configured(Box<TargetConfig>),
    /// A URL outside the config, probed with the module's settings.
    Url(String),
}

/// Why a `/probe` request is refused, with the status it gets.
struct Refusal(StatusCode, String);

fn bad(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, message.into())
}

/// `/probe`'s parameters, validated.
struct ProbeParams {
    target: String,
    module: Option<String>,
    debug: bool,
}

fn probe_params(pairs: Vec<(String, String)>) -> Result<ProbeParams, Refusal> {
    let mut target = None;
    let mut module = None;
    let mut debug = false;
    for (k, v) in pairs {
        match k.as_str() {
            "target" if target.is_some() => return Err(bad("give the target parameter once")),
            "target" => target = Some(v),
            "module" if module.is_some() => return Err(bad("give the module parameter once")),
            "module" => module = Some(v),
            "debug" => debug = v == "true" || v == "1",
            // Other parameters (blackbox's `hostname`, a relabeled `__param_*`) are ignored.
            _ => {}
        }
    }
    let target = target.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
        bad("target parameter is missing: /probe?target=<configured name or URL>&module=<module>")
    })?;
    Ok(ProbeParams {
        target,
        module,
        debug,
    })
}

/// Resolves `target` against the config: a name, a configured URL, or (only if allowed) any
/// http(s) URL. Never a command.
fn resolve(cfg: &Config, target: &str) -> Result<ProbeTarget, Refusal> {
    if let Some(t) = cfg.targets.iter().find(|t| t.name == target) {
        return Ok(ProbeTarget::Configured(Box::new(t.clone())));
    }
    if !target.contains("://") {
        return Err(bad(format!(
            "no target named {target:?} in the config: give a configured target's name or an http(s):// URL"
        )));
    }
    if let Some(t) = cfg
        .targets
        .iter()
        .find(|t| matches!(&t.endpoint, Endpoint::Url(u) if u == target))
    {
        return Ok(ProbeTarget::Configured(Box::new(t.clone())));
    }
    let lower = target.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(bad(format!(
            "{:?} is not an http:// or https:// URL; only configured targets (by name) can be other kinds",
            redact::url(target)
        )));
    }
    if !cfg.server.allow_url_probes {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "probing URLs outside the config is disabled: {:?} is not a configured target. Add it as a target, or set allow_url_probes = true in [server]",
                redact::url(target)
            ),
        ));
    }
    Ok(ProbeTarget::Url(target.to_owned()))
}

/// The probe's timeout: the configured one, bounded by Prometheus' scrape timeout less the
/// offset (blackbox_exporter's rule). Half the scrape timeout at least, so a short scrape
/// timeout still leaves the probe something.
fn probe_timeout(configured: Duration, headers: &HeaderMap) -> Result<Duration, Refusal> {
    let Some(v) = headers.get("x-prometheus-scrape-timeout-seconds") else {
        return Ok(configured);
    };
    let secs = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| {
            bad(format!(
                "X-Prometheus-Scrape-Timeout-Seconds {:?} is not a positive number of seconds",
                String::from_utf8_lossy(v.as_bytes())
            ))
        })?;
    let scrape = Duration::from_secs_f64(secs.min(86_400.0));
    let budget = scrape.saturating_sub(SCRAPE_TIMEOUT_OFFSET).max(scrape / 2);
    Ok(configured.min(budget))
}

pub(super) async fn probe_handler(
    State(s): State<ApiState>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    match run_probe(&s, &headers, q).await {
        Ok(r) => r,
        Err(Refusal(status, message)) => text_error(status, message),
    }
}

async fn run_probe(
    s: &ApiState,
    headers: &HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, Refusal> {
    let Query(pairs) = q.map_err(|e| bad(format!("the query string is malformed: {e}")))?;
    let params = probe_params(pairs)?;
    let module_name = params.module.clone().unwrap_or_else(|| "default".into());
    let (resolved, module) =
        s.with_config(|cfg| -> Result<(ProbeTarget, ModuleConfig), Refusal> {
            let module = cfg.modules.get(&module_name).cloned().ok_or_else(|| {
                let known: Vec<&str> = cfg.modules.keys().map(String::as_str).collect();
                bad(format!(
                    "unknown module {module_name:?}: the config defines {}",
                    known.join(", ")
                ))
            })?;
            Ok((resolve(cfg, &params.target)?, module))
        })?;

    // A configured target is probed exactly as the scheduler probes it; a URL with the module.
    let (target, mut plan, latency_budget, graded, shown) = match &resolved {
        ProbeTarget::Configured(t) => {
            let (target, plan) = crate::probe::target_and_plan(t).map_err(|e| {
                Refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("target {:?} cannot be probed: {e}", t.name),
                )
            })?;
            (target, plan, t.latency_budget, t.security, t.name.clone())
        }
        ProbeTarget::Url(u) => {
            let (target, plan) =
                crate::probe::url_target_and_plan(u, &module).map_err(|e| bad(e.to_string()))?;
            (
                target,
                plan,
                module.latency_budget,
                module.security,
                redact::url(u),
            )
        }
    };
    let timeout = probe_timeout(plan.timeout, headers)?;
    let started = Instant::now();

    // Wait for a slot, but not past the budget: Prometheus would give up anyway, and a 503
    // (the scrape fails, `up` is 0) says "the prober is saturated" rather than "the target is
    // down".
    // A slot, then the probe's memory (see `crate::memory`), both within the budget.
    let slot = async {
        let count = s.probes.clone().acquire_owned().await?;
        let memory = s.memory.acquire(plan.max_response_bytes).await?;
        Ok::<_, tokio::sync::AcquireError>((count, memory))
    };
    let permit = match tokio::time::timeout(timeout, slot).await {
        Ok(Ok(p)) => p,
        _ => {
            return Err(Refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "too many probes in flight (the limit is {} probes or {} MiB of their memory); add monitor instances or lower the scrape rate",
                    s.probe_limit,
                    s.memory.total() >> 20
                ),
            ));
        }
    };
    let remaining = timeout.saturating_sub(started.elapsed());
    if remaining < Duration::from_millis(10) {
        return Err(Refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the scrape timeout ran out while waiting for a probe slot".into(),
        ));
    }
    plan.timeout = remaining;

    let crate::probe::Probed { report, duration } =
        crate::probe::once(&s.fleet, &target, &plan, latency_budget).await;
    drop(permit);
    tracing::debug!(target = %shown, module = %module_name, status = report.status.as_str(), ms = duration.as_secs_f64() * 1000.0, "probe request");

    let format = if params.debug {
        Format::Prometheus
    } else {
        accepted_format(headers)
    };
    let sample = ProbeSample {
        report,
        duration_seconds: duration.as_secs_f64(),
        timeout_seconds: timeout.as_secs_f64(),
        graded,
    };
    if params.debug {
        let text = debug_text(&shown, &module_name, &sample);
        return Ok(match text {
            Ok(t) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                t,
            )
                .into_response(),
            Err(_) => text_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed",
            ),
        });
    }
    Ok(exposition(format, metrics::probe(sample, format)))
}

/// `debug=true`: what the probe saw, then the metrics it would have returned (as
/// blackbox_exporter's debug output).
///
/// Read by people (curl in a terminal): the target, the protocol version and the findings are
/// made inert ([`mcpulse_wire::text`]), as in the CLI's summary.
fn debug_text(shown: &str, module: &str, sample: &ProbeSample) -> Result<String, std::fmt::Error> {
    use mcpulse_wire::text;
    let r = &sample.report;
    let mut t = format!(
        "Probe of {} with module {module:?}, timeout {:.3}s, took {:.3}s\n",
        text::message(shown),
        sample.timeout_seconds,
        sample.duration_seconds
    );
    t.push_str(&format!("Status: {}\n", r.status.as_str()));
    if let Some(era) = r.era {
        t.push_str(&format!(
            "Protocol: {} {}\n",
            era.as_str(),
            text::field(r.protocol_version.as_deref().unwrap_or("?"))
        ));
    }
    let tm = &r.timings_ms;
    t.push_str("Timings (ms):");
    for (name, v) in [
        ("dns", tm.dns),
        ("connect", tm.connect),
        ("tls", tm.tls),
        ("handshake", tm.handshake),
        ("tools_list", tm.tools_list),
        ("total", Some(tm.total)),
    ] {
        if let Some(v) = v {
            t.push_str(&format!(" {name}={v:.1}"));
        }
    }
    t.push('\n');
    t.push_str("Findings:\n");
    if r.findings.is_empty() {
        t.push_str("  (none)\n");
    }
    for f in &r.findings {
        t.push_str(&format!(
            "  {} {}: {}\n",
            f.severity.as_str(),
            f.code,
            text::message(&f.message)
        ));
    }
    t.push_str("\nMetrics that would have been returned:\n");
    t.push_str(&metrics::probe(sample.clone(), Format::Prometheus)?);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn scrape_timeouts() {
        let ten = Duration::from_secs(10);
        let mut h = HeaderMap::new();
        assert_eq!(probe_timeout(ten, &h).ok(), Some(ten));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("5"),
        );
        assert_eq!(
            probe_timeout(ten, &h).ok(),
            Some(Duration::from_millis(4500))
        );
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("0.6"),
        );
        assert_eq!(
            probe_timeout(ten, &h).ok(),
            Some(Duration::from_millis(300))
        );
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("60"),
        );
        assert_eq!(probe_timeout(ten, &h).ok(), Some(ten));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("soon"),
        );
        assert!(probe_timeout(ten, &h).is_err());
    }
}
