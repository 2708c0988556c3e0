//! `--json`: one object on stdout (`mcpulse.report/v1` or `mcpulse.drift/v1`, see docs/).

use anyhow::Result;
use std::io::Write;

pub fn print<T: serde::Serialize>(report: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, report)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}
