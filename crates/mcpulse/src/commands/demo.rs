//! `mcpulse demo`: a built-in fleet of small MCP servers on loopback, and the monitor over
//! them, so a newcomer sees every state and every alert kind within two minutes.

use crate::cli::DemoArgs;
use anyhow::{Context, Result};
use mcpulse_monitor::daemon::{self, Options};

pub fn run(args: DemoArgs) -> Result<u8> {
    super::monitor::init_logging(&args.log_level)?;
    // Before anything is started or printed: a busy port is the most common way a demo fails,
    // and the flag to change it is `--listen` (the monitor's own error would name its config
    // key). The port is released again at once; the monitor binds it a moment later.
    if !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "the demo's API has no token, so it listens on loopback only: use --listen 127.0.0.1:PORT (for a monitor reachable from elsewhere, run `mcpulse monitor` with a [server] token)"
        );
    }
    std::net::TcpListener::bind(args.listen).map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {} for the demo's API: {e}; choose another address with --listen (e.g. --listen 127.0.0.1:9478)",
            args.listen
        )
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let fleet = mcpulse_demo::start_fleet(mcpulse_demo::stdio_command()?).await.context("starting the demo servers")?;
        let dir = std::env::temp_dir().join(format!("mcpulse-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("mcpulse.toml");
        std::fs::write(&config, mcpulse_demo::demo_config(&fleet, &dir, args.listen, args.webhook.as_deref()))
            .with_context(|| format!("writing {}", config.display()))?;
        println!("mcpulse demo: a fleet of demo MCP servers on loopback, and the monitor over them\n");
        println!("{}", fleet.listing());
        println!("config   {}", config.display());
        println!("status   http://{}/   (the status page; /targets/flaky for one target)", args.listen);
        println!("fleet    http://{}/api/v1/fleet", args.listen);
        println!("target   http://{}/api/v1/targets/flaky   (and /history)", args.listen);
        println!("metrics  http://{}/metrics", args.listen);
        println!("probe    http://{}/probe?target=healthy-modern", args.listen);
        println!(
            "\nWatch the log below: within two minutes every state and every alert kind shows. flaky goes down,\nrecovers and then flaps; slow is degraded; auth-gated is gated; drifting drifts (risky, then breaking);\nshifting changes its protocol revision, its security grade and its auth in turn.\nProbe one by hand: mcpulse probe -H 'Authorization: Bearer {}' {}\nCtrl-C stops everything.\n",
            mcpulse_demo::DEMO_TOKEN,
            fleet.url(mcpulse_demo::Kind::AuthGated).unwrap_or_default()
        );
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let result = daemon::run(config, Options { listen: Some(args.listen), ..Options::default() }, ctrl_c).await;
        fleet.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
        result.map_err(anyhow::Error::from)
    })?;
    Ok(0)
}

/// `mcpulse demo-server stdio`: the demo's stdio server. Nothing may be written to stdout
/// but protocol messages.
pub fn serve_stdio() -> Result<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime
        .block_on(mcpulse_demo::serve_stdio())
        .context("serving stdio")?;
    Ok(0)
}
