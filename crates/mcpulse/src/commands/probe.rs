//! `mcpulse probe`: one server, one shot; with `--baseline`, a drift check too.

use crate::cli::{ColorArg, FormatArg, ProbeArgs};
use crate::printer;
use crate::settings;
use anyhow::{Context, Result, bail};
use mcpulse_judge::contract::{Contract, Mismatch};
use mcpulse_judge::{Policy, drift, judge};
use mcpulse_wire::text;

pub fn run(args: ProbeArgs) -> Result<u8> {
    if let (None, true, Some(url)) = (
        &args.target.url,
        args.target.command.is_empty(),
        &args.health_url,
    ) {
        if url == "auto" {
            bail!(
                "--health-url auto discovers the endpoint on an MCP URL's origin: give the MCP URL too"
            );
        }
        if !args.call_groups.is_empty() {
            bail!(
                "--call needs an MCP target (a URL or a command after `--`), not only --health-url"
            );
        }
        return health_only(&args, url);
    }
    let calls = settings::calls(&args.call_groups)?;
    let health_tool = settings::health_tool(&args.health_tool)?;
    let (target, mut plan) = settings::target_and_plan(&args.target)?;
    plan.calls = calls;
    plan.health_tool = health_tool;
    plan.allow_side_effects = args.allow_side_effects;
    match args.health_url.as_deref() {
        None => {}
        Some("auto") if matches!(target, mcpulse_probe::Target::Http { .. }) => {
            plan.health_discovery = true;
        }
        Some("auto") => bail!(
            "--health-url auto reads /healthz, /readyz and /health on an HTTP target's origin; a stdio server has none: give the endpoint's URL"
        ),
        Some(url) => {
            // Checked as a probe URL is (http or https, a host): a usage error, not a finding.
            mcpulse_probe::Target::http(url).map_err(|e| anyhow::anyhow!("--health-url: {e}"))?;
            plan.health_url = Some(url.to_owned());
        }
    }
    let budget = settings::duration(&args.latency_budget, "--latency-budget")?;
    // Read the baseline before probing: a bad file is a usage error, not a probe result.
    let baseline = match &args.baseline {
        Some(path) => Some(read_baseline(path, args.force)?),
        None => None,
    };
    // Open the transcript file before probing: an unwritable path is a usage error found at
    // once, not after the probe has run and its evidence is lost. (Not truncated yet: a probe
    // that cannot start leaves an earlier transcript there as it was.)
    let transcript_file = match &args.transcript {
        Some(path) => Some(open_transcript(path)?),
        None => None,
    };
    // The verdict is printed before the last stdio server is ended (up to twice the shutdown
    // grace, for a server that ignores the end of its stdin): it does not depend on how the
    // server exits. The transcript, written afterwards, records the exit too.
    let (mut transcript, unfinished) = settings::start_probe(&target, &plan)?;
    let judged = unfinished.snapshot(&transcript);
    let verdict = report_and_print(&args, &judged, budget, baseline.as_ref(), &plan.secrets);
    unfinished.finish(&mut transcript);
    if let (Some(path), Some(file)) = (&args.transcript, transcript_file) {
        transcript.hide_received(&plan.secrets);
        write_transcript(path, file, &transcript)?;
    }
    verdict
}

/// `--health-url` without an MCP target: one read of the endpoint, judged alone.
fn health_only(args: &ProbeArgs, url: &str) -> Result<u8> {
    use mcpulse_probe::{Caller, PlanSpec, Target};
    let target = Target::http(url).map_err(|e| anyhow::anyhow!("--health-url: {e}"))?;
    if args.baseline.is_some() {
        bail!(
            "--baseline needs an MCP target (a URL or a command after `--`), not only --health-url"
        );
    }
    let budget = settings::duration(&args.latency_budget, "--latency-budget")?;
    let timeout = match &args.target.timeout {
        Some(t) => settings::duration(t, "--timeout")?,
        None => mcpulse_probe::HEALTH_TIMEOUT,
    };
    let plan = PlanSpec {
        timeout: Some(timeout),
        ..PlanSpec::new(Caller::Cli {
            stdio_dual_era: false,
        })
    }
    .plan(&target);
    let transcript_file = match &args.transcript {
        Some(path) => Some(open_transcript(path)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut transcript = runtime.block_on(mcpulse_probe::probe_health(url, &plan));
    runtime.shutdown_background();
    let verdict = report_and_print(args, &transcript, budget, None, &plan.secrets);
    if let (Some(path), Some(file)) = (&args.transcript, transcript_file) {
        transcript.hide_received(&plan.secrets);
        write_transcript(path, file, &transcript)?;
    }
    verdict
}

/// Writes the transcript (pretty JSON) into the file `--transcript` opened.
fn write_transcript(
    path: &std::path::Path,
    mut file: std::fs::File,
    transcript: &mcpulse_probe::Transcript,
) -> Result<()> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(transcript).context("serialising the transcript")?;
    // Only a regular file is truncated: `/dev/stdout` or a pipe cannot be, nor need to be.
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    (if regular { file.set_len(0) } else { Ok(()) })
        .and_then(|()| file.write_all((text + "\n").as_bytes()))
        .with_context(|| format!("writing the transcript to {}", path.display()))
}

/// Opens (creating, not truncating) the `--transcript` file for writing.
fn open_transcript(path: &std::path::Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| {
            format!(
                "--transcript {}: the file cannot be written, so nothing was probed; choose a path in a directory that exists and that you can write to",
                path.display()
            )
        })
}

/// Judges the transcript (and the drift from a baseline), prints the report, and returns the
/// exit code.
fn report_and_print(
    args: &ProbeArgs,
    transcript: &mcpulse_probe::Transcript,
    budget: std::time::Duration,
    baseline: Option<&(Contract, Vec<Mismatch>)>,
    secrets: &mcpulse_wire::redact::Secrets,
) -> Result<u8> {
    let mut report = judge(
        transcript,
        &Policy {
            latency_budget_ms: budget.as_secs_f64() * 1000.0,
            expect_auth: args.expect_auth,
        },
    );
    // A server may echo a header value or a hidden argument back (an error message, stderr).
    report.hide(secrets);
    let mut code = report.status.exit_code();
    let current = baseline.and(report.contract.take());
    if baseline.is_some() && current.is_none() {
        // No drift check is not "no drift": the gate must not pass silently.
        anstream::eprintln!(
            "mcpulse: no drift check: the server's full contract could not be taken (an advertised list failed or the probe ran short; see the findings)"
        );
        code = code.max(1);
    }
    if let (Some((base, mismatches)), Some(path), Some(current)) =
        (baseline, &args.baseline, current)
    {
        if base.target != current.target && !args.accept {
            bail!(
                "the baseline {} is for {:?}, not {:?}: take one for this target with `mcpulse snapshot`, or re-baseline with --accept",
                path.display(),
                base.target,
                current.target
            );
        }
        let mut d = drift::diff(base, &current);
        d.baseline_mismatches = mismatches.clone();
        if args.accept {
            write_atomic(path, &current.to_lock())?;
        } else {
            code = code.max(d.exit_code());
        }
        report.drift = Some(d);
    }
    let format = if args.json {
        FormatArg::Json
    } else {
        args.format
    };
    match format {
        FormatArg::Json => printer::json::print(&report)?,
        FormatArg::Sarif => printer::json::print(&printer::sarif::log(&report))?,
        FormatArg::Human => printer::human::print(&report, color_choice(args.color))?,
    }
    Ok(code)
}

pub fn color_choice(c: ColorArg) -> anstream::ColorChoice {
    match c {
        ColorArg::Auto => anstream::ColorChoice::Auto,
        ColorArg::Always => anstream::ColorChoice::Always,
        ColorArg::Never => anstream::ColorChoice::Never,
    }
}

/// Reads a baseline file and computes its digests again from its content.
///
/// A stored digest (or key) its content does not give means the file was edited by hand or by
/// a tool: it is refused with the list of mismatches, unless `force`, when the digests computed
/// from the content are used and the mismatches returned to be reported.
pub fn read_baseline(path: &std::path::Path, force: bool) -> Result<(Contract, Vec<Mismatch>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the baseline {}", path.display()))?;
    let stored =
        Contract::from_lock(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let (contract, mismatches) = stored.resealed();
    if !mismatches.is_empty() && !force {
        /// Enough to see what was edited; the rest are counted.
        const SHOWN: usize = 10;
        let mut lines = String::new();
        for m in mismatches.iter().take(SHOWN) {
            // The file's own text (a hand-edited digest may hold anything): inert.
            lines.push_str(&format!(
                "\n  {}: stored {}, computed {}",
                text::field(&m.what),
                text::field(&m.stored),
                m.computed
            ));
        }
        if mismatches.len() > SHOWN {
            lines.push_str(&format!("\n  … and {} more", mismatches.len() - SHOWN));
        }
        bail!(
            "{}: the baseline's digests do not match its content (edited by hand or by a tool?):{lines}\ntake it again with `mcpulse snapshot`, or pass --force to compare its content as it stands",
            path.display()
        );
    }
    Ok((contract, mismatches))
}

/// Writes a file by renaming a temporary one over it: a crash never leaves half a baseline.
pub fn write_atomic(path: &std::path::Path, text: &str) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "baseline".into());
    let tmp = dir.join(format!(".{name}.mcpulse-tmp"));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}
