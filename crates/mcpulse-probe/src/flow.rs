//! The flow of a probe: [`probe`] and [`probe_live`] run one, [`Live`] holds the stdio servers
//! still running after it. See the crate docs for the rules the flow follows.
//!
//! One child module per transport flow, as the transports are parallel in
//! `mcpulse-transport`: [`streamable_http`] (which falls back to [`legacy_sse`]), [`stdio`].
//! What they share lives in [`session`] (the handshake steps and what their replies mean) and
//! [`inventory`] (the lists and their pages) and [`calls`] (the synthetic tool calls and the
//! health tool that follow the lists); the context they all write through is
//! `crate::context`. The security checks' requests are `crate::security`'s.

mod calls;
mod inventory;
mod legacy_sse;
mod session;
mod stdio;
mod streamable_http;

use crate::context::Ctx;
use crate::plan::Plan;
use crate::target::Target;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::HttpClient;
use mcpulse_transport::stdio::StdioChild;
use mcpulse_wire::redact::Secrets;
use mcpulse_wire::transcript::Transcript;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::{Instant, timeout_at};

/// Runs one probe. Never fails and never outlives `plan.timeout` by more than the stdio
/// shutdown grace: every failure of the server is recorded in the transcript.
pub async fn probe(target: &Target, plan: &Plan) -> Transcript {
    let (mut tr, live) = probe_live(target, plan).await;
    live.finish(&mut tr).await;
    tr
}

/// The stdio servers still running when a probe's protocol steps are done. Ending them (stdin
/// closed, then SIGTERM, then SIGKILL, each after `Plan::shutdown_grace`) can take longer than
/// the whole protocol, yet tells nothing the verdict needs: a caller can judge and print first,
/// then [`Live::finish`]. Dropped unfinished, the servers' process groups are killed.
pub struct Live {
    children: Vec<StdioChild>,
    grace: Duration,
    /// The plan's secrets, hidden in the records of the servers still running.
    secrets: Secrets,
}

impl Live {
    /// The transcript as it stands, with the live servers' records so far (no exit yet).
    pub fn snapshot(&self, tr: &Transcript) -> Transcript {
        let mut t = tr.clone();
        t.processes.extend(self.children.iter().map(|c| {
            let mut p = c.record();
            p.hide(&self.secrets);
            p
        }));
        t
    }

    /// Ends the live servers, gracefully and all at once (each may take up to three shutdown
    /// graces), and records their processes in `tr`, in order.
    pub async fn finish(self, tr: &mut Transcript) {
        let grace = self.grace;
        let mut set = tokio::task::JoinSet::new();
        for (i, child) in self.children.into_iter().enumerate() {
            set.spawn(async move { (i, child.shutdown(grace).await) });
        }
        let mut ended = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(done) = r {
                ended.push(done);
            }
        }
        ended.sort_by_key(|(i, _)| *i);
        let secrets = self.secrets;
        tr.processes.extend(ended.into_iter().map(|(_, mut p)| {
            p.hide(&secrets);
            p
        }));
    }
}

/// Runs one probe's protocol steps and leaves the last stdio server running: see [`Live`].
pub async fn probe_live(target: &Target, plan: &Plan) -> (Transcript, Live) {
    let mut live = Live {
        children: Vec::new(),
        grace: plan.shutdown_grace,
        secrets: plan.secrets.clone(),
    };
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let clock = Clock::start();
    let deadline = Instant::now() + plan.timeout;
    let started_unix_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
    let mut tr = Transcript::new(target.record(&plan.secrets), plan.record(), started_unix_ms);
    tr.started_unix_us = u64::try_from(since_epoch.as_micros()).ok();
    // The health endpoint is read beside the protocol steps, on a client of its own: its
    // answer does not wait for a slow handshake, nor delays one.
    let health = async {
        match (&plan.health_url, target) {
            (Some(url), _) => {
                let roots = plan.extra_roots.iter().map(|d| rustls_pki_der(d)).collect();
                vec![crate::health::fetch(url, clock, roots, deadline).await]
            }
            (None, Target::Http { url }) if plan.health_discovery => {
                let roots: Vec<_> = plan.extra_roots.iter().map(|d| rustls_pki_der(d)).collect();
                crate::health::discover(url, clock, &roots, deadline).await
            }
            (None, _) => Vec::new(),
        }
    };
    let protocol = async {
        let mut ctx = Ctx::new(plan, deadline, clock, &mut tr);
        // Every transport operation honours the deadline itself; this outer bound is a safety
        // net (a little later, so that a step can record its own timeout first).
        let net = deadline + Duration::from_millis(50);
        match target {
            Target::Http { url } => {
                let roots = plan.extra_roots.iter().map(|d| rustls_pki_der(d)).collect();
                let mut client = HttpClient::new(clock).with_roots(roots);
                let _ = timeout_at(net, async {
                    streamable_http::probe(&mut client, url, &mut ctx).await;
                    if plan.security {
                        crate::security::auth_metadata(&mut client, url, &mut ctx).await;
                    }
                })
                .await;
                let done = ctx.done_ms();
                tr.connections = client.connections;
                tr.total_ms = done;
            }
            Target::Stdio { program, args } => {
                let _ = timeout_at(
                    net,
                    stdio::probe(program, args, &mut ctx, &mut live.children),
                )
                .await;
                let done = ctx.done_ms();
                // The children left (the last server, or those the flow did not finish because
                // the safety net fired) are ended by `Live::finish`, their records kept.
                tr.total_ms = done;
            }
        }
    };
    // Both on the heap: a probe's state machine (every transport's flow, inlined) is tens of
    // kilobytes in a debug build, and a caller that awaits several probes in one future (a
    // test, a check that re-probes) would otherwise carry it on its own stack.
    let ((), health) = tokio::join!(Box::pin(protocol), Box::pin(health));
    for h in health {
        tr.total_ms = tr.total_ms.max(h.at_ms + h.elapsed_ms.unwrap_or(0.0));
        tr.health.push(h);
    }
    if Instant::now() + Duration::from_millis(1) >= deadline {
        tr.deadline_hit_ms = Some(tr.total_ms);
    }
    tr.hide(&plan.secrets);
    (tr, live)
}

fn rustls_pki_der(d: &[u8]) -> mcpulse_transport::http::CertificateDer<'static> {
    mcpulse_transport::http::CertificateDer::from(d.to_vec())
}
