//! `--json`: one report object on stdout (`mcpulse.report/v1`, see docs/report.md).

use anyhow::Result;
use mcpulse_judge::Report;
use std::io::Write;

pub fn print(report: &Report) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, report)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}
