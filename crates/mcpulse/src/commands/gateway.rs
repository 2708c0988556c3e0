//! `mcpulse gateway`: resolve the settings (flags or `--config`), start the gateway
//! (crates/mcpulse-gateway) and run it until SIGTERM or SIGINT, which stop every child
//! through the graceful sequence before the process exits.
//!
//! The runtime has `threads` threads (default 1). With one, it is tokio's single-threaded
//! runtime on the main thread: a relayed request and its upstream exchange never change
//! threads, which is most of a relay's cost per request (docs/benchmarks-gateway.md). With
//! more, a work-stealing pool. Either way each stdio child is spawned by its session's task on
//! a runtime thread (the main thread, or a worker), which lives as long as the runtime, so the
//! children's parent-death signal (per thread) fires only when the gateway goes. Nothing is
//! spawned from the blocking pool, whose threads come and go.

use crate::cli::GatewayArgs;
use anyhow::{Context, Result};
use mcpulse_gateway::config::{self, Flags, Gateway, Upstream};
use mcpulse_gateway::state::Shared;
use std::sync::Arc;

pub fn run(args: GatewayArgs) -> Result<u8> {
    let gateway = resolve(&args)?;
    args.log.init()?;
    if matches!(gateway.upstream, Upstream::Stdio(_)) {
        // Before any child, from the main thread: if the gateway is SIGKILLed, the watchdog
        // kills what the children left (their parent-death signal reaches them alone).
        super::supervise::start_watchdog();
    }
    let runtime = match gateway.threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
    .context("starting the runtime")?;
    let code = runtime.block_on(serve(gateway));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

/// The flags or the file, validated (errors carry `file:line:column` or the flag).
fn resolve(args: &GatewayArgs) -> Result<Gateway> {
    let env = |k: &str| std::env::var(k).ok();
    let gateway = match &args.config {
        Some(path) => config::load(path, &env, args.listen)?,
        None => config::from_flags(
            &Flags {
                listen: args.listen,
                health_listen: args.health_listen,
                upstream: args.upstream.clone(),
                command: args.command.clone(),
                max_sessions: args.max_sessions,
                session_idle_timeout: args.session_idle_timeout.clone(),
                allowed_origins: args.allowed_origin.clone(),
                allowed_hosts: args.allowed_host.clone(),
                min_tools: args.min_tools,
                health_tool: args.health_tool.clone(),
                threads: args.threads,
            },
            &env,
        )?,
    };
    Ok(gateway)
}

async fn serve(gateway: Gateway) -> Result<u8> {
    // The handlers go in before any child starts, so no early signal is missed (the default
    // action would kill the gateway and leave the children to their parent-death signal alone,
    // and their own children orphaned).
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let upstream = match &gateway.upstream {
        Upstream::Stdio(s) => {
            let argv: Vec<String> = std::iter::once(s.program.program.clone())
                .chain(s.program.args.iter().cloned())
                .collect();
            let mut secrets = mcpulse_wire::redact::argv_secrets(&argv);
            secrets.extend(&gateway.secrets);
            mcpulse_wire::redact::command_line(&argv, &secrets)
        }
        Upstream::Http(h) => mcpulse_wire::redact::target_url(&h.url, &gateway.secrets),
    };
    let shared = Arc::new(Shared::default());
    let running = mcpulse_gateway::serve::start(&gateway, shared).await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        listen = %running.addr,
        health = %running.health_addr.unwrap_or(running.addr),
        upstream = %upstream,
        max_sessions = gateway.max_sessions,
        threads = gateway.threads,
        "mcpulse gateway started"
    );
    // One plain line, whatever the log settings: scripts and tests that bind port 0 read it.
    eprintln!("mcpulse gateway: listening on http://{}/mcp", running.addr);
    if let Some(h) = running.health_addr {
        eprintln!("mcpulse gateway: health on http://{h}/readyz");
    }
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!(
        signal = name,
        "mcpulse gateway: signalled; stopping every child"
    );
    running.shutdown().await;
    tracing::info!("mcpulse gateway stopped");
    Ok(0)
}
