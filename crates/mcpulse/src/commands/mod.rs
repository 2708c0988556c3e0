//! One module per command; each takes resolved settings and returns an exit code.

mod completions;
mod demo;
mod diff;
mod gateway;
mod history;
mod monitor;
mod probe;
mod snapshot;
mod supervise;

use crate::cli::{Cli, Command, DocKind};
use anyhow::Result;

pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Probe(args) => probe::run(*args),
        Command::Snapshot(args) => snapshot::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Monitor(args) => monitor::run(args),
        Command::CheckConfig(args) => monitor::check(args),
        Command::Demo(args) => demo::run(args),
        Command::Supervise(args) => supervise::run(*args),
        Command::Gateway(args) => gateway::run(*args),
        Command::History(crate::cli::HistoryCommand::Export(args)) => history::export(args),
        Command::SuperviseWatchdog { lineage_prefix } => supervise::watchdog(&lineage_prefix),
        Command::DemoServer {
            which: crate::cli::DemoServerKind::Stdio,
        } => demo::serve_stdio(),
        Command::Completions { shell } => completions::completions(shell),
        Command::Man { out_dir } => completions::man(out_dir.as_deref()),
        Command::Docs { which } => {
            match which {
                DocKind::Findings => print!("{}", mcpulse_judge::rules::findings_doc()),
                DocKind::Drift => print!("{}", mcpulse_judge::drift::drift_doc()),
                DocKind::Checks => print!("{}", mcpulse_judge::security::checks_doc()),
            }
            Ok(0)
        }
    }
}
