//! `--wrap` / `--unwrap` (being written: #17 adoption).

use crate::cli::SuperviseArgs;
use anyhow::Result;

pub fn run(_args: &SuperviseArgs) -> Result<u8> {
    anyhow::bail!("mcpulse supervise --wrap is not built yet")
}
