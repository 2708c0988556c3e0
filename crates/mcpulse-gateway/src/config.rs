//! The gateway's settings: `--config gateway.toml` or flags for the simple case, resolved into
//! one validated [`Gateway`]. To be built (issue #19): same conventions and error reporting as
//! the monitor's config (file:line:column, durations and sizes in mcpulse_wire::units).

use crate::checks::CheckSpec;

/// Everything the gateway is told, resolved and validated.
#[derive(Debug, Clone, Default)]
pub struct Gateway {
    pub checks: Vec<CheckSpec>,
}
