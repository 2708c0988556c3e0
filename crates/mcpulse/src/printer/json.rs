//! `--json`: one object on stdout (`mcpulse.report/v1` or `mcpulse.drift/v1`, see docs/).

use anyhow::Result;

pub fn print<T: serde::Serialize>(report: &T) -> Result<()> {
    let mut text = serde_json::to_vec(report)?;
    text.push(b'\n');
    super::write_stdout_raw(&text)
}
