//! The demo shows what it promises: run the real monitor over the demo fleet (its own config,
//! with the fleet's timers and the check interval scaled down) and collect the alerts its
//! webhook receives. Every alert kind the demo lists arrives: down, degraded, recovered, drift,
//! auth, protocol, grade and flapping. At the demo's own timings (checks every 5 s, the timers
//! of `FleetOptions::new`) the same sequence takes under two minutes, as its banner says; here
//! everything runs five times faster (checks every second), so it takes under half a minute.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mcpulse_demo::{FleetOptions, demo_config, start_fleet_with};
use mcpulse_monitor::daemon::{self, Options};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Seen = Arc<Mutex<Vec<Value>>>;

async fn receive(State(seen): State<Seen>, body: String) -> &'static str {
    if let Ok(v) = serde_json::from_str::<Value>(&body) {
        seen.lock().unwrap().push(v);
    }
    "ok"
}

/// Every alert kind the monitor has: the demo lists them all.
const ALL_KINDS: &[&str] = mcpulse_monitor::config::ALERT_KINDS;
#[tokio::test]
async fn every_alert_kind_the_demo_lists_arrives() {
    // The demo's defaults, five times faster (the monitor checks at most once a second).
    let defaults = FleetOptions::new(Vec::new());
    let scale = |d: Duration| d / 5;
    let options = FleetOptions {
        stdio_command: Vec::new(),
        slow_delay: scale(defaults.slow_delay),
        flaky_up: scale(defaults.flaky_up),
        flaky_down: scale(defaults.flaky_down),
        drift_every: scale(defaults.drift_every),
        shift_every: scale(defaults.shift_every),
        check_every: scale(defaults.check_every),
    };
    let fleet = start_fleet_with(options).await.unwrap();

    let seen: Seen = Arc::default();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_addr = hook.local_addr().unwrap();
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(seen.clone());
    let receiver = tokio::spawn(async move {
        let _ = axum::serve(hook, app).await;
    });

    let dir = std::env::temp_dir().join(format!("mcpulse-demo-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mcpulse.toml");
    let listen = "127.0.0.1:0".parse().unwrap();
    let hook_url = format!("http://{hook_addr}/hook");
    std::fs::write(&config, demo_config(&fleet, &dir, listen, Some(&hook_url))).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let monitor = tokio::spawn(daemon::run(
        config,
        Options {
            listen: Some(listen),
            ..Options::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));

    // Two minutes at the demo's pace is 24 s here; allow for a loaded machine.
    let kinds = |seen: &Seen| -> BTreeSet<String> {
        seen.lock()
            .unwrap()
            .iter()
            .filter_map(|a| a["kind"].as_str().map(str::to_owned))
            .collect()
    };
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(60)
        && !ALL_KINDS.iter().all(|k| kinds(&seen).contains(*k))
    {
        assert!(
            !monitor.is_finished(),
            "the monitor stopped: {:?}",
            monitor.await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), monitor).await;
    receiver.abort();
    fleet.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    let got = kinds(&seen);
    let missing: Vec<&str> = ALL_KINDS
        .iter()
        .copied()
        .filter(|k| !got.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "after {:?}, no {missing:?} alert; got {got:?}:\n{:#?}",
        started.elapsed(),
        seen.lock().unwrap()
    );
    // Each of the shifting server's signal alerts names it.
    let by = |kind: &str| -> Vec<String> {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|a| a["kind"] == kind)
            .filter_map(|a| a["target"].as_str().map(str::to_owned))
            .collect()
    };
    for kind in ["protocol", "grade"] {
        assert!(
            by(kind).iter().any(|t| t == "shifting"),
            "{kind}: {:?}",
            by(kind)
        );
    }
    // A drift alert says what changed: the first classified changes, code and path.
    let drifts: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "drift" && a["target"] == "drifting")
        .filter_map(|a| a["summary"].as_str().map(str::to_owned))
        .collect();
    assert!(
        drifts.iter().any(|s| s
            .contains("drift in its contract: description-changed tools[lookup].description")
            || s.contains("required-parameter-added tools[lookup]")),
        "{drifts:#?}"
    );
    // Both classes of drift the demo promises: risky (a reworded description), then breaking.
    for class in ["risky", "breaking"] {
        assert!(
            drifts
                .iter()
                .any(|s| s.contains(&format!("{class} drift in its contract"))),
            "{class}: {drifts:#?}"
        );
    }
    eprintln!("every alert kind within {:?}", started.elapsed());
}
