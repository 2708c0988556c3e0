//! The relay (being written: #17 core). It builds the settings, starts logging and the
//! endpoints through [`super::visibility`], and runs `mcpulse_relay::supervise`.

use crate::cli::SuperviseArgs;
use anyhow::Result;

pub fn run(args: SuperviseArgs) -> Result<u8> {
    super::visibility::init_logging(&args)?;
    anyhow::bail!("mcpulse supervise is not built yet")
}
