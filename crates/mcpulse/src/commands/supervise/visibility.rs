//! What `mcpulse supervise` shows of itself: logs (stderr or `--log-file`, text or
//! `--log-json`) and, with `--listen`, `/livez` `/readyz` `/metrics`
//! ([`mcpulse_relay::endpoints`]).
//!
//! Nothing here writes to stdout: it is the client's MCP stream, and one stray byte breaks it.

use crate::cli::SuperviseArgs;
use anyhow::Result;
use mcpulse_relay::endpoints::{self, Endpoints, Listening};
use mcpulse_relay::status::{Logs, Observer};
use std::sync::Arc;

/// What [`start`] keeps running: the observer to hand the supervisor (it logs, and feeds the
/// endpoints), and the endpoints' server while `--listen` serves; dropping it stops them.
pub struct Visibility {
    pub observer: Arc<dyn Observer>,
    #[allow(dead_code)] // held, not read: the endpoints' state lives as long as this
    pub endpoints: Endpoints,
    #[allow(dead_code)] // held, not read: dropping it stops the server
    pub listening: Option<Listening>,
}

/// Sets up logging: stderr, or `--log-file` (appended to, created if missing); text with every
/// field inert ([`crate::log::InertFields`]) or, with `--log-json`, one JSON object a line
/// ([`crate::log::InertJson`]). Never stdout.
pub fn init_logging(args: &SuperviseArgs) -> Result<()> {
    args.log.init()?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        // The argv rule hides credentials (`--api-key …`, `postgresql://user:pass@…`): a log
        // file is read by more people than the client's config.
        command = %mcpulse_wire::redact::command_line(
            &args.command,
            &mcpulse_wire::redact::argv_secrets(&args.command)
        ),
        "mcpulse supervise started"
    );
    Ok(())
}

/// Binds `--listen` (if given; a port in use is an error here, before any child starts) and
/// starts serving; call inside the supervisor's runtime.
pub async fn start(args: &SuperviseArgs) -> Result<Visibility> {
    let endpoints = Endpoints::new(env!("CARGO_PKG_VERSION"));
    let listening = match args.listen {
        Some(addr) => {
            let l = endpoints::serve(addr, endpoints.clone()).await?;
            tracing::info!(addr = %l.addr, "serving /livez /readyz /metrics");
            Some(l)
        }
        None => None,
    };
    Ok(Visibility {
        observer: Arc::new(Logs::new(endpoints.clone())),
        endpoints,
        listening,
    })
}
