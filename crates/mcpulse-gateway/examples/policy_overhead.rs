//! The call pipeline's own cost per `tools/call` (crate::policy): `admit` then `finish`,
//! in process, with every policy on (a gateway-wide limit, a `[[tools]]` entry with a limit,
//! a breaker and a retry, a dependency with a breaker) against all off (no limit, no entry).
//! The rest of a call's path through the gateway is the same either way, so this is what the
//! policies add. Run: `cargo run --release -p mcpulse-gateway --example policy_overhead`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use mcpulse_gateway::policy::Policies;
use mcpulse_gateway::policy::config::{DependencyRule, Settings, ToolRule};
use mcpulse_gateway::state::Shared;
use mcpulse_policy::breaker::{BreakerPolicy, Outcome};
use mcpulse_policy::limit::LimitPolicy;
use mcpulse_policy::retry::RetryPolicy;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CALLS: usize = 200_000;

fn all_on() -> Settings {
    let limit = LimitPolicy {
        max_concurrent: 64,
        queue: 128,
        queue_timeout: Duration::from_secs(10),
    };
    Settings {
        concurrency: Some(limit),
        tools: vec![
            ToolRule {
                pattern: "other_*".into(),
                timeout: None,
                progress_extends: false,
                max_timeout: None,
                limit: None,
                breaker: None,
                retry: None,
            },
            ToolRule {
                pattern: "search_*".into(),
                timeout: Some(Duration::from_secs(10)),
                progress_extends: true,
                max_timeout: Some(Duration::from_secs(60)),
                limit: Some(limit),
                breaker: Some(BreakerPolicy::default()),
                retry: Some(RetryPolicy::default()),
            },
        ],
        dependencies: vec![DependencyRule {
            check: "db".into(),
            tools: vec!["search_*".into()],
            breaker: Some(BreakerPolicy::default()),
        }],
        ..Settings::default()
    }
}

fn all_off() -> Settings {
    Settings {
        concurrency: None,
        ..Settings::default()
    }
}

async fn run(label: &str, settings: Settings) -> Duration {
    let shared = Shared::default();
    let policies = Arc::new(Policies::new(settings, &shared.metrics));
    let mut took = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        let permit = policies.admit("search_web", &shared).await.unwrap();
        let timer = mcpulse_gateway::policy::Timer::start(policies.settings(), "search_web");
        std::hint::black_box(&timer);
        permit.finish(Outcome::Success, &shared.metrics);
        took.push(started.elapsed());
    }
    took.sort();
    let q = |p: f64| took[((took.len() as f64 * p) as usize).min(took.len() - 1)];
    println!(
        "{label:8} p50 {:>6} ns  p99 {:>6} ns  ({CALLS} calls)",
        q(0.5).as_nanos(),
        q(0.99).as_nanos()
    );
    q(0.5)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm-up, then off and on interleaved, three rounds.
        run("warm-up", all_on()).await;
        for _ in 0..3 {
            let off = run("all off", all_off()).await;
            let on = run("all on", all_on()).await;
            println!(
                "added   p50 {} ns",
                on.as_nanos() as i128 - off.as_nanos() as i128
            );
        }
    });
}
