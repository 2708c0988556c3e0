//! An HTTP upstream: relay `/mcp` requests to a Streamable HTTP server, streaming. To be built.
//!
//! The interface the front door ([`super`]) uses: [`HttpUpstream::new`] once, then
//! [`HttpUpstream::handle`] for each request that passed the door's validation.

use crate::state::Shared;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// What the HTTP upstream is told (the config fills it in; more fields may be added with
/// defaults).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// The upstream's MCP endpoint.
    pub url: String,
    /// Connecting to the upstream (a refused or timed-out connect answers fast).
    pub connect_timeout: Duration,
    /// The longest request or response message relayed.
    pub max_message_size: usize,
}

/// The relay to one upstream, shared by every request.
#[derive(Debug)]
pub struct HttpUpstream {
    settings: HttpSettings,
    shared: Arc<Shared>,
}

impl HttpUpstream {
    pub fn new(settings: HttpSettings, shared: Arc<Shared>) -> HttpUpstream {
        HttpUpstream { settings, shared }
    }

    /// Relays one client request (already through the door) and streams the answer back.
    pub async fn handle(&self, _req: Request) -> Response {
        let _ = (&self.settings, &self.shared);
        (http::StatusCode::NOT_IMPLEMENTED, "not built yet").into_response()
    }
}
