//! One module per command; each takes resolved settings and returns an exit code.

mod probe;

use crate::cli::{Cli, Command, DocKind};
use anyhow::Result;

pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Docs {
            which: DocKind::Findings,
        } => {
            print!("{}", mcpulse_judge::rules::findings_doc());
            Ok(0)
        }
    }
}
