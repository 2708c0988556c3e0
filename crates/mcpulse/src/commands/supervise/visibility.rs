//! Logs, `/livez` `/readyz` `/metrics` for the supervisor (being written: #17 visibility).

use crate::cli::SuperviseArgs;
use anyhow::Result;
use mcpulse_relay::status::Observer;
use std::sync::Arc;

#[allow(dead_code)] // used by the relay once it is built (#17)
/// What [`start`] keeps running: the observer to hand the supervisor, and the endpoints'
/// server task, if `--listen` was given.
pub struct Visibility {
    pub observer: Arc<dyn Observer>,
}

/// Sets up logging (stderr or `--log-file`; never stdout, which is the client's MCP stream).
pub fn init_logging(_args: &SuperviseArgs) -> Result<()> {
    Ok(())
}

#[allow(dead_code)] // used by the relay once it is built (#17)
/// Binds `--listen` (if given) and starts serving; call inside the supervisor's runtime.
pub async fn start(_args: &SuperviseArgs) -> Result<Visibility> {
    Ok(Visibility {
        observer: Arc::new(mcpulse_relay::status::Ignore),
    })
}
