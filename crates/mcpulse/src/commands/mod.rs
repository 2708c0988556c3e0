//! One module per command; each takes resolved settings and returns an exit code.

mod diff;
mod probe;
mod snapshot;

use crate::cli::{Cli, Command, DocKind};
use anyhow::Result;

pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Snapshot(args) => snapshot::run(args),
        Command::Diff(args) => diff::run(args),
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
