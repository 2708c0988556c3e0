//! Turning command-line strings into validated settings: durations, sizes, headers with
//! `${VAR}` taken from the environment. Every error says what to write instead.

use anyhow::{Context, Result, bail};
use mcpulse_wire::units;
use std::time::Duration;

/// A timeout: the forms of [`mcpulse_wire::units::duration`] (`10s`, `500ms`, `2m`, `1h`, or a
/// bare number of seconds), at most a day.
pub fn duration(s: &str, what: &str) -> Result<Duration> {
    // One message, as before: "timeout \"ten\" is not a duration: …".
    let d = units::duration(s).map_err(|e| anyhow::anyhow!("{what} {e}"))?;
    if d > Duration::from_secs(86_400) {
        bail!("{what} {s:?} is more than a day");
    }
    Ok(d)
}

/// A size cap: the forms of [`mcpulse_wire::units::size`] (`8MiB`, `512KiB`, `1MB`, `4096`), at
/// least 1KiB.
pub fn size(s: &str, what: &str) -> Result<usize> {
    let bytes = units::size(s).map_err(|e| anyhow::anyhow!("{what} {e}"))?;
    if bytes < 1024 {
        bail!("{what} {s:?} is too small: allow at least 1KiB");
    }
    Ok(bytes)
}

/// Parses `Name: value` headers, expanding `${VAR}` from `env`.
pub fn headers(
    raw: &[String],
    bearer_env: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for h in raw {
        let Some((name, value)) = h.split_once(':') else {
            bail!(
                "header {:?} has no colon: write it as 'Name: value'",
                redact_header(h)
            );
        };
        let name = name.trim();
        if !mcpulse_wire::env::is_header_name(name) {
            bail!("header name {name:?} is not a valid HTTP header name");
        }
        let value = mcpulse_wire::env::expand(value.trim(), env)
            .map_err(|m| anyhow::anyhow!("in the value of header {name:?}: {m}"))?;
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            bail!("the value of header {name:?} contains a line break or NUL");
        }
        out.push((name.to_owned(), value));
    }
    if let Some(var) = bearer_env {
        let token = env(var).with_context(|| {
            format!("--bearer-env {var}: the environment variable {var} is not set")
        })?;
        let token = token.trim();
        if token.is_empty() {
            bail!("--bearer-env {var}: the environment variable {var} is empty");
        }
        out.push(("Authorization".to_owned(), format!("Bearer {token}")));
    }
    Ok(out)
}

fn redact_header(h: &str) -> String {
    if h.len() > 12 {
        format!(
            "{}…",
            &h[..h.char_indices().nth(12).map(|(i, _)| i).unwrap_or(h.len())]
        )
    } else {
        h.to_owned()
    }
}

/// The `--call` groups as call specs: arguments a JSON object, each expectation and budget
/// parsed once, here, so that a typo is a usage error before anything is sent.
pub fn calls(groups: &[crate::cli::CallGroup]) -> Result<Vec<mcpulse_wire::call::CallSpec>> {
    use mcpulse_wire::call::{CallSpec, Expectation};
    groups
        .iter()
        .map(|g| {
            let arguments = match &g.args {
                None => serde_json::Map::new(),
                Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(serde_json::Value::Object(m)) => m,
                    Ok(_) => bail!("--args for --call {}: must be a JSON object, e.g. '{{\"message\":\"hi\"}}'", g.tool),
                    Err(e) => bail!("--args for --call {}: not JSON: {e}", g.tool),
                },
            };
            let expect = g
                .expect
                .iter()
                .map(|e| {
                    e.parse::<Expectation>()
                        .map_err(|err| anyhow::anyhow!("--expect for --call {}: {err}", g.tool))
                })
                .collect::<Result<Vec<_>>>()?;
            let budget_ms = match &g.budget {
                None => mcpulse_wire::call::DEFAULT_CALL_BUDGET_MS,
                Some(b) => {
                    let d = duration(b, "--budget")?;
                    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
                }
            };
            Ok(CallSpec {
                arguments,
                expect,
                budget_ms,
                critical: g.critical,
                ..CallSpec::new(g.tool.clone())
            })
        })
        .collect()
}

/// `--health-tool auto|NAME|off`.
pub fn health_tool(value: &str) -> Result<mcpulse_wire::call::HealthToolMode> {
    use mcpulse_wire::call::HealthToolMode;
    Ok(match value {
        "auto" => HealthToolMode::Auto,
        "off" => HealthToolMode::Off,
        "" => bail!("--health-tool: give auto, off or a tool's name"),
        name => HealthToolMode::Named(name.to_owned()),
    })
}

/// Resolves the shared target arguments into a target and a plan.
pub fn target_and_plan(
    args: &crate::cli::TargetArgs,
) -> Result<(mcpulse_probe::Target, mcpulse_probe::Plan)> {
    use crate::cli::{EraArg, TransportArg};
    use mcpulse_probe::{Caller, PlanSpec, Target, TransportMode};
    use mcpulse_wire::version::EraMode;
    let target = match (&args.url, args.command.is_empty()) {
        (Some(url), true) => Target::http(url)?,
        (None, false) => Target::stdio(&args.command)?,
        (Some(_), false) => bail!("give either a URL or a command after `--`, not both"),
        (None, true) => bail!(
            "nothing to probe: give a URL (mcpulse probe https://host/mcp) or a command (mcpulse probe -- npx -y some-mcp-server)"
        ),
    };
    let stdio = matches!(target, Target::Stdio { .. });
    if stdio && (!args.headers.is_empty() || args.bearer_env.is_some()) {
        bail!(
            "--header and --bearer-env apply to HTTP servers; a stdio server takes credentials from its environment"
        );
    }
    if stdio && args.transport != TransportArg::Auto {
        bail!("--transport applies to HTTP servers");
    }
    let env = |k: &str| std::env::var(k).ok();
    // Unset, the timeout is the probe's default for the target's kind (60 s for a command).
    let timeout = match &args.timeout {
        Some(t) => Some(duration(t, "--timeout")?),
        None => None,
    };
    let plan = PlanSpec {
        era: match args.era {
            EraArg::Auto => EraMode::Auto,
            EraArg::Modern => EraMode::Modern,
            EraArg::Legacy => EraMode::Legacy,
        },
        transport: match args.transport {
            TransportArg::Auto => TransportMode::Auto,
            TransportArg::StreamableHttp => TransportMode::StreamableHttp,
            TransportArg::Sse => TransportMode::Sse,
        },
        timeout,
        max_response_bytes: size(&args.max_response_size, "--max-response-size")?,
        max_pages: args.max_pages.max(1),
        headers: headers(&args.headers, args.bearer_env.as_deref(), &env)?,
        security: !args.no_security,
        extra_roots: match &args.ca_file {
            None => Vec::new(),
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("reading --ca-file {}", path.display()))?;
                mcpulse_transport::http::read_pem_certs(&pem)
                    .map_err(|e| anyhow::anyhow!("--ca-file {}: {e}", path.display()))?
            }
        },
        ..PlanSpec::new(Caller::Cli {
            stdio_dual_era: args.dual_era,
        })
    }
    .plan(&target);
    Ok((target, plan))
}

/// Runs one probe on a single-threaded runtime (a probe is sequential; one thread starts
/// faster and uses less memory).
pub fn run_probe(
    target: &mcpulse_probe::Target,
    plan: &mcpulse_probe::Plan,
) -> Result<mcpulse_probe::Transcript> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let transcript = runtime.block_on(mcpulse_probe::probe(target, plan));
    // Background tasks (a kept-alive connection, a stream reader) must not keep us waiting.
    runtime.shutdown_background();
    Ok(transcript)
}

/// Runs one probe's protocol steps on a single-threaded runtime, like [`run_probe`], but leaves
/// its last stdio server running: the verdict can be printed before [`Unfinished::finish`] ends
/// the server, which can take up to twice the shutdown grace (a server that ignores the end of
/// its stdin is sent SIGTERM only after it). Dropped unfinished, the server is killed.
pub fn start_probe(
    target: &mcpulse_probe::Target,
    plan: &mcpulse_probe::Plan,
) -> Result<(mcpulse_probe::Transcript, Unfinished)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (transcript, live) = runtime.block_on(mcpulse_probe::probe_live(target, plan));
    Ok((transcript, Unfinished { runtime, live }))
}

/// A probe whose last stdio server still runs: see [`start_probe`].
pub struct Unfinished {
    runtime: tokio::runtime::Runtime,
    live: mcpulse_probe::Live,
}

impl Unfinished {
    /// The transcript to judge now: the running server's stderr and stdout so far included.
    pub fn snapshot(&self, transcript: &mcpulse_probe::Transcript) -> mcpulse_probe::Transcript {
        self.live.snapshot(transcript)
    }

    /// Ends the server and records its process in `transcript`.
    pub fn finish(self, transcript: &mut mcpulse_probe::Transcript) {
        let Unfinished { runtime, live } = self;
        runtime.block_on(live.finish(transcript));
        // Background tasks (a kept-alive connection, a stream reader) must not keep us waiting.
        runtime.shutdown_background();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(" ".into()),
            _ => None,
        }
    }

    #[test]
    fn durations() {
        assert_eq!(duration("10s", "t").unwrap(), Duration::from_secs(10));
        assert_eq!(duration("250ms", "t").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("2", "t").unwrap(), Duration::from_secs(2));
        assert_eq!(duration("1.5m", "t").unwrap(), Duration::from_secs(90));
        assert!(duration("0s", "t").is_err());
        assert!(duration("soon", "t").is_err());
        assert!(duration("5 fortnights", "t").is_err());
        assert!(duration("-1s", "t").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(size("8MiB", "s").unwrap(), 8 << 20);
        assert_eq!(size("4096", "s").unwrap(), 4096);
        assert!(size("12", "s").is_err());
        assert!(size("99999999999999999999GiB", "s").is_err());
        assert!(size("lots", "s").is_err());
    }

    #[test]
    fn header_expansion() {
        let h = headers(
            &[
                "Authorization: Bearer ${TOKEN}".into(),
                "X-Cost: $$5".into(),
            ],
            None,
            &env,
        )
        .unwrap();
        assert_eq!(h[0], ("Authorization".into(), "Bearer s3cret".into()));
        assert_eq!(h[1].1, "$5");
        assert!(headers(&["NoColon".into()], None, &env).is_err());
        assert!(headers(&["X: ${MISSING}".into()], None, &env).is_err());
        assert!(headers(&["X: ${TOKEN".into()], None, &env).is_err());
        assert!(headers(&["Bad Name: v".into()], None, &env).is_err());
        let b = headers(&[], Some("TOKEN"), &env).unwrap();
        assert_eq!(b[0].1, "Bearer s3cret");
        assert!(headers(&[], Some("EMPTY"), &env).is_err());
        assert!(headers(&[], Some("NOPE"), &env).is_err());
    }
}
