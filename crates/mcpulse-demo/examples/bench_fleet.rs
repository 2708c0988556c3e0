//! The demo's HTTP servers, for benchmarks (`bench/monitor/run.sh`): starts the fleet on
//! loopback (no stdio server), prints one `name url` line per HTTP server on stdout, then serves
//! until stdin closes or SIGTERM/SIGINT arrives.
//!
//! ```text
//! cargo run --release -p mcpulse-demo --example bench_fleet
//! ```
//!
//! Every server runs on one thread (a current-thread runtime), so that `taskset -c K` pins the
//! whole fleet to one core and its capacity is that core's. Only `healthy-modern`,
//! `healthy-legacy` and `legacy-sse` are meant to be probed; the others (slow, flaky,
//! drifting, auth-gated) sit idle.

use std::io::Write as _;

fn main() {
    if let Some(a) = std::env::args().nth(1) {
        fail(&format!("unknown argument {a:?}"));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => fail(&format!("starting the runtime: {e}")),
    };
    runtime.block_on(async {
        let fleet = match mcpulse_demo::start_fleet(Vec::new()).await {
            Ok(f) => f,
            Err(e) => fail(&e.to_string()),
        };
        {
            let mut out = std::io::stdout().lock();
            for s in fleet.servers() {
                if let Some(url) = &s.url {
                    let _ = writeln!(out, "{} {url}", s.name);
                }
            }
            let _ = writeln!(out, "ready");
            let _ = out.flush();
        }
        // Until stdin closes (the script exits) or a signal.
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        });
        tokio::select! {
            _ = stdin_closed => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate() => {}
        }
        fleet.shutdown().await;
    });
}

async fn terminate() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

fn fail(message: &str) -> ! {
    eprintln!("bench_fleet: {message}");
    std::process::exit(2)
}
