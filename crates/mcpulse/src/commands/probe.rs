//! `mcpulse probe`: one server, one shot.

use crate::cli::{ColorArg, EraArg, ProbeArgs, TransportArg};
use crate::printer;
use crate::settings;
use anyhow::{Context, Result, bail};
use mcpulse_judge::{Policy, judge};
use mcpulse_probe::{Plan, Target, TransportMode};
use mcpulse_wire::version::EraMode;

pub fn run(args: ProbeArgs) -> Result<u8> {
    let target = match (&args.url, args.command.is_empty()) {
        (Some(url), true) => Target::http(url)?,
        (None, false) => Target::stdio(&args.command)?,
        (Some(_), false) => bail!("give either a URL or a command after `--`, not both"),
        (None, true) => bail!(
            "nothing to probe: give a URL (mcpulse probe https://host/mcp) or a command (mcpulse probe -- npx -y some-mcp-server)"
        ),
    };
    if matches!(target, Target::Stdio { .. })
        && (!args.headers.is_empty() || args.bearer_env.is_some())
    {
        bail!(
            "--header and --bearer-env apply to HTTP servers; a stdio server takes credentials from its environment"
        );
    }
    if matches!(target, Target::Stdio { .. }) && args.transport != TransportArg::Auto {
        bail!("--transport applies to HTTP servers");
    }
    let timeout = settings::duration(&args.timeout, "--timeout")?;
    let budget = settings::duration(&args.latency_budget, "--latency-budget")?;
    let env = |k: &str| std::env::var(k).ok();
    let plan = Plan {
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
        max_response_bytes: settings::size(&args.max_response_size, "--max-response-size")?,
        max_pages: args.max_pages.max(1),
        headers: settings::headers(&args.headers, args.bearer_env.as_deref(), &env)?,
        ..Plan::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let transcript = runtime.block_on(mcpulse_probe::probe(&target, &plan));
    // Background tasks (a connection, a stream reader) must not keep the process alive.
    runtime.shutdown_background();
    if let Some(path) = &args.transcript {
        let text =
            serde_json::to_string_pretty(&transcript).context("serialising the transcript")?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the transcript to {}", path.display()))?;
    }
    let report = judge(
        &transcript,
        &Policy {
            latency_budget_ms: budget.as_secs_f64() * 1000.0,
        },
    );
    if args.json {
        printer::json::print(&report)?;
    } else {
        let color = match args.color {
            ColorArg::Auto => anstream::ColorChoice::Auto,
            ColorArg::Always => anstream::ColorChoice::Always,
            ColorArg::Never => anstream::ColorChoice::Never,
        };
        printer::human::print(&report, color)?;
    }
    Ok(report.status.exit_code())
}
