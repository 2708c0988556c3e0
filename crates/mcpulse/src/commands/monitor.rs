//! `mcpulse monitor` and `mcpulse check-config`.

use crate::cli::{CheckConfigArgs, MonitorArgs};
use crate::printer::count;
use anyhow::{Context, Result};
use mcpulse_monitor::daemon::{self, Options};

pub fn run(args: MonitorArgs) -> Result<u8> {
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
    runtime.block_on(daemon::run(
        args.config.clone(),
        opts,
        std::future::pending(),
    ))?;
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
