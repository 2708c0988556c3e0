//! `mcpulse monitor` and `mcpulse check-config`.

use crate::cli::{CheckConfigArgs, MonitorArgs};
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
            // Imported servers left out: the config is valid, but they will not be monitored.
            for w in &cfg.warnings {
                anstream::eprintln!("warning: {w}");
            }
            let stdio = cfg
                .targets
                .iter()
                .filter(|t| {
                    matches!(
                        t.endpoint,
                        mcpulse_monitor::config::Endpoint::Command { .. }
                    )
                })
                .count();
            println!(
                "{}: ok: {} targets ({} http, {} stdio), {} alert sinks, {} modules; history in {}; API on {}",
                args.config.display(),
                cfg.targets.len(),
                cfg.targets.len() - stdio,
                stdio,
                cfg.alerts.len(),
                cfg.modules.len(),
                cfg.storage.path.display(),
                cfg.server.listen
            );
            Ok(0)
        }
        Err(e) => {
            anstream::eprintln!("{e}");
            Ok(1)
        }
    }
}

/// Structured logs on stderr: transitions at info, each check at debug, frames at trace.
pub fn init_logging(level: &str) -> Result<()> {
    let level: tracing::Level = level.parse().map_err(|_| {
        anyhow::anyhow!("--log-level {level:?}: use error, warn, info, debug or trace")
    })?;
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
    Ok(())
}
