//! `mcpulse monitor` and `mcpulse check-config`.

use crate::cli::{AcceptArgs, CheckConfigArgs, MonitorAction, MonitorArgs};
use crate::printer::count;
use anyhow::{Context, Result};
use mcpulse_monitor::daemon::{self, Options};

pub fn run(args: MonitorArgs) -> Result<u8> {
    let config = match (args.action, &args.config) {
        (Some(MonitorAction::Accept(a)), _) => return accept(a),
        (None, Some(c)) => c.clone(),
        (None, None) => anyhow::bail!("mcpulse monitor needs --config FILE"),
    };
    init_logging(&args.log_level)?;
    let opts = Options {
        imports: args.import.clone(),
        listen: args.listen,
        concurrency: args.concurrency,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(daemon::run(config, opts, std::future::pending()))?;
    Ok(0)
}

pub fn check(args: CheckConfigArgs) -> Result<u8> {
    let opts = Options {
        imports: args.import.clone(),
        ..Options::default()
    };
    match daemon::load(&args.config, &opts) {
        Ok(cfg) => {
            // Valid, but not working as meant: imported servers left out (not monitored), flap
            // windows too short to see flapping.
            for w in &cfg.warnings {
                anstream::eprintln!("warning: {w}");
            }
            use mcpulse_monitor::config::Endpoint;
            let of =
                |f: fn(&Endpoint) -> bool| cfg.targets.iter().filter(|t| f(&t.endpoint)).count();
            let stdio = of(|e| matches!(e, Endpoint::Command { .. }));
            let health = of(|e| matches!(e, Endpoint::Health(_)));
            println!(
                "{}: ok: {} ({} http, {} stdio{}), {}, {}; history in {}; API on {}",
                args.config.display(),
                count(cfg.targets.len(), "target"),
                cfg.targets.len() - stdio - health,
                stdio,
                // Said only when there are some: the line stays as it was for other fleets.
                if health > 0 {
                    format!(", {health} health")
                } else {
                    String::new()
                },
                count(cfg.alerts.len(), "alert sink"),
                count(cfg.modules.len(), "module"),
                cfg.storage.path.display(),
                cfg.server.listen
            );
            Ok(0)
        }
        Err(e) => {
            // The error can quote the file (an imported target's name): inert, line by line.
            anstream::eprintln!("{}", mcpulse_wire::text::lines(&e.to_string()));
            Ok(1)
        }
    }
}

/// `mcpulse monitor accept TARGET`: asks the running monitor (its API, from the config) to make
/// the target's current contract its baseline, and waits for the check that does.
///
/// The config gives only the API's address and token: the target is looked up by the API,
/// which knows the running fleet (servers added with `monitor --import` too; an unknown name
/// is its 404).
fn accept(args: AcceptArgs) -> Result<u8> {
    use mcpulse_monitor::accept::{AcceptError, Api, Outcome};
    let env = |k: &str| std::env::var(k).ok();
    let cfg = match mcpulse_monitor::config::load(&args.config, &env) {
        Ok(c) => c,
        Err(e) => {
            anstream::eprintln!("{}", mcpulse_wire::text::lines(&e.to_string()));
            return Ok(crate::EXIT_COULD_NOT_RUN);
        }
    };
    let wait = match &args.wait {
        Some(w) => Some(
            mcpulse_monitor::config::duration(w)
                .with_context(|| format!("--wait {w:?}: write e.g. 30s or 2m"))?,
        ),
        None => None,
    };
    let api = Api::of(&cfg, args.url.as_deref());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let name = mcpulse_wire::text::field(&args.target).into_owned();
    match runtime.block_on(api.accept(&args.target, wait)) {
        Ok(Outcome::Accepted { drift_before }) => {
            match drift_before {
                Some(d) => println!(
                    "{name}: its current contract is the baseline now; the {} drift is accepted and its incident resolved",
                    mcpulse_wire::text::field(&d)
                ),
                None => println!("{name}: its current contract is the baseline now"),
            }
            Ok(0)
        }
        Ok(Outcome::Pending { waited }) => {
            println!(
                "{name}: asked; no check reached the server within {}: the next one that does takes its contract as the baseline (the target's view shows accept_pending until then)",
                mcpulse_wire::units::human_duration(waited.as_millis())
            );
            Ok(2)
        }
        Err(
            e @ (AcceptError::Refused { .. }
            | AcceptError::Unreachable { .. }
            | AcceptError::Timeout { .. }
            | AcceptError::Invalid(_)
            | AcceptError::Lost),
        ) => {
            anstream::eprintln!("{name}: {}", mcpulse_wire::text::lines(&e.to_string()));
            Ok(1)
        }
    }
}

/// Structured logs on stderr: transitions at info, each check at debug, frames at trace. Every
/// field is made inert and quoted by one rule ([`crate::log::InertFields`]): servers and
/// imported configs choose some of the text.
pub fn init_logging(level: &str) -> Result<()> {
    let level = crate::log::level(level)?;
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .fmt_fields(crate::log::InertFields)
        .try_init();
    Ok(())
}
