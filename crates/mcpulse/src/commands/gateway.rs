//! `mcpulse gateway`: resolve the settings and run the gateway (crates/mcpulse-gateway).

use crate::cli::GatewayArgs;
use anyhow::{Result, bail};

pub fn run(_args: GatewayArgs) -> Result<u8> {
    bail!("mcpulse gateway is not built yet (issue #19)")
}
