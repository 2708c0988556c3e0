//! Printers: the same report for people (`human`), machines (`json`) and code-scanning
//! dashboards (`sarif`).

pub mod human;
pub mod json;
pub mod sarif;

/// Writes `text` to stdout (with `color`) and flushes. A closed pipe (`mcpulse diff a b | head`)
/// is the reader's choice: the rest is dropped and the command goes on, so that its exit code
/// is still the verdict (under `set -o pipefail` a gate must not pass because `head` stopped
/// reading) and what it does after printing (`--accept` rewriting the baseline) still happens.
pub fn write_stdout(text: &[u8], color: anstream::ColorChoice) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = anstream::AutoStream::new(std::io::stdout().lock(), color);
    closed_pipe_ok(out.write_all(text).and_then(|()| out.flush()))
}

/// [`write_stdout`] without colour handling (JSON: nothing to strip).
pub fn write_stdout_raw(text: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    closed_pipe_ok(out.write_all(text).and_then(|()| out.flush()))
}

fn closed_pipe_ok(r: std::io::Result<()>) -> anyhow::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// `1 tool`, `2 tools`, `0 prompts`: a count and its noun, singular for one.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
