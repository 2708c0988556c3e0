//! `--wrap` / `--unwrap`: rewrite a client config so that its stdio servers run under
//! `mcpulse supervise` (the rewrite is `mcpulse_relay::wrap`; here are the CLI's choices: which
//! mcpulse the servers run, what is printed where).
//!
//! The diff (`--dry-run`) goes to stdout, so it can be piped or saved; the summary of what
//! happened to each server goes to stderr. Names come from the file and are printed inert.

use crate::cli::SuperviseArgs;
use anyhow::{Context, Result};
use mcpulse_relay::wrap::{self, Direction, Outcome};
use mcpulse_wire::text;

pub fn run(args: &SuperviseArgs) -> Result<u8> {
    let (direction, path) = match (&args.wrap, &args.unwrap) {
        (Some(p), _) => (Direction::Wrap, p),
        (None, Some(p)) => (Direction::Unwrap, p),
        (None, None) => anyhow::bail!("give --wrap FILE or --unwrap FILE"),
    };
    // The absolute path of this very binary: a client starts servers without the user's shell,
    // and often without its PATH.
    let exe = std::env::current_exe().context("cannot find the path of this mcpulse binary")?;
    let exe = exe.to_str().with_context(|| {
        format!(
            "the path of this mcpulse binary is not UTF-8 ({}); a client config needs it as a string",
            exe.display()
        )
    })?;
    let (real, plan) = wrap::read_and_plan(path, direction, exe)?;
    for c in &plan.changes {
        let what = match c.outcome {
            Outcome::Wrapped if args.dry_run => "would wrap".to_owned(),
            Outcome::Unwrapped if args.dry_run => "would unwrap".to_owned(),
            Outcome::Wrapped => "wrapped".to_owned(),
            Outcome::Unwrapped => "unwrapped".to_owned(),
            Outcome::Unchanged(why) => format!("left alone ({why}):"),
        };
        anstream::eprintln!(
            "{what} {} in {}",
            text::quoted(&c.server, text::FIELD_CHARS),
            text::field(&c.table)
        );
    }
    if plan.changes.is_empty() {
        anstream::eprintln!(
            "{}: its server list is empty",
            text::field(&path.display().to_string())
        );
    }
    if !plan.is_change() {
        anstream::eprintln!(
            "{}: nothing to change",
            text::field(&path.display().to_string())
        );
        return Ok(0);
    }
    if args.dry_run {
        print!("{}", wrap::diff(&plan, &path.display().to_string()));
        anstream::eprintln!("dry run: nothing written");
        return Ok(0);
    }
    if let Some(backup) = wrap::apply(&real, &plan)? {
        anstream::eprintln!(
            "{} rewritten; the original is in {} (restart the client to use it)",
            text::field(&path.display().to_string()),
            text::field(&backup.display().to_string())
        );
    }
    Ok(0)
}
