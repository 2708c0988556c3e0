//! Progress notifications for long tools: when the client sent a `progressToken` with its
//! `tools/call`, [`Progress::report`] sends `notifications/progress` with it; without one it
//! does nothing (the spec: progress is only sent for a token the client gave). Progress must
//! increase: a report that does not is dropped rather than sent.
//!
//! ```no_run
//! use mcpulse_kit::progress::Progress;
//! use rmcp::{RoleServer, service::RequestContext};
//!
//! async fn long_tool(ctx: RequestContext<RoleServer>) {
//!     let mut progress = Progress::new(&ctx);
//!     for step in 1..=10u32 {
//!         // ... one tenth of the work ...
//!         progress.report(f64::from(step), Some(10.0), Some(format!("step {step} of 10"))).await;
//!     }
//! }
//! ```
//!
//! Over Streamable HTTP a tool that reports progress answers on an SSE stream; rmcp's
//! `StreamableHttpServerConfig::sse_keep_alive` (15 s by default, the same as mcpulse's
//! gateway) sends a comment on it while the tool is quiet, so proxies do not cut it.

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};

/// One call's progress reporter.
#[derive(Debug, Clone)]
pub struct Progress {
    target: Option<(ProgressToken, Peer<RoleServer>)>,
    last: Option<f64>,
}

impl Progress {
    /// For the call `ctx` belongs to (`None` inside when it carried no `progressToken`).
    pub fn new(ctx: &RequestContext<RoleServer>) -> Progress {
        Progress {
            target: ctx.meta.get_progress_token().map(|t| (t, ctx.peer.clone())),
            last: None,
        }
    }

    /// Whether the client asked for progress.
    pub fn wanted(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `progress` (of `total`, if known) with a message; a failure to send is ignored
    /// (the client may have gone: the tool's work goes on). Returns whether it was sent.
    pub async fn report(
        &mut self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> bool {
        let Some((token, peer)) = &self.target else {
            return false;
        };
        if !progress.is_finite() || self.last.is_some_and(|l| progress <= l) {
            return false;
        }
        self.last = Some(progress);
        let mut p = ProgressNotificationParam::new(token.clone(), progress);
        if let Some(t) = total {
            p = p.with_total(t);
        }
        if let Some(m) = message {
            p = p.with_message(m);
        }
        peer.notify_progress(p).await.is_ok()
    }
}
