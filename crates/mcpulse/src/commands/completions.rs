//! `mcpulse completions SHELL` and `mcpulse man`: generated from the clap definition in
//! `cli.rs`, so a new flag reaches the shells and the man pages without anyone editing them.
//! Install lines are in docs/packaging.md.

use crate::cli::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;
use std::path::Path;

/// Writes the completion script for `shell` to stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<u8> {
    let mut cmd = visible();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "mcpulse", &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(0)
}

/// Writes the top-level man page to stdout, or with `out_dir` one page per visible command
/// (`mcpulse.1`, `mcpulse-probe.1`, ...), which is what a package installs under `man1/`.
pub fn man(out_dir: Option<&Path>) -> Result<u8> {
    // No `help` subcommand: it would be listed in mcpulse(1) without a page of its own.
    let cmd = Cli::command().disable_help_subcommand(true);
    match out_dir {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            std::io::stdout().lock().write_all(&out)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing the man pages into {}", dir.display()))?;
        }
    }
    Ok(0)
}

/// The command line without its hidden commands (`docs`, `demo-server`, the supervisor's
/// watchdog): clap_complete offers every subcommand, hidden or not, and those are internal.
/// clap cannot remove a subcommand, so the top level is rebuilt from the visible ones; it has
/// no arguments of its own besides --help and --version, which clap adds again.
fn visible() -> clap::Command {
    let full = Cli::command();
    clap::Command::new("mcpulse")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}
