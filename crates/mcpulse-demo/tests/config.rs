//! The generated monitor config loads with the monitor's own parser, names every server, and
//! gives `slow` a timeout its handshake fits in.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_demo::{FleetOptions, Kind, demo_config, start_fleet_with};
use mcpulse_monitor::config::{Endpoint, SinkKind, parse};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

#[tokio::test]
async fn the_demo_config_is_valid_and_complete() {
    let stdio = vec![
        "/opt/my tools/mcpulse".to_owned(),
        "demo-server".to_owned(),
        "stdio".to_owned(),
    ];
    let fleet = start_fleet_with(FleetOptions::new(stdio.clone()))
        .await
        .expect("starts");
    let dir = Path::new("/tmp/mcpulse demo \"x\"");
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let text = demo_config(&fleet, dir, listen, Some("http://127.0.0.1:9/hook"));
    let env = |_: &str| None;
    let cfg = parse(&text, "demo.toml", dir, &env).unwrap_or_else(|e| panic!("{e}\n{text}"));

    assert_eq!(cfg.server.listen, listen);
    assert_eq!(cfg.storage.path, dir.join("mcpulse-demo.db"));
    assert_eq!(cfg.defaults.interval, Duration::from_secs(5));
    assert_eq!(cfg.defaults.timeout, Duration::from_secs(3));
    assert_eq!(cfg.defaults.failure_threshold, 2);
    assert_eq!(cfg.defaults.success_threshold, 2);
    assert_eq!(cfg.defaults.latency_budget, Duration::from_secs(3));

    let names: Vec<&str> = cfg.targets.iter().map(|t| t.name.as_str()).collect();
    let expected: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(names, expected);
    for server in fleet.servers() {
        let t = cfg
            .targets
            .iter()
            .find(|t| t.name == server.name)
            .expect("a target per server");
        match (&t.endpoint, &server.url) {
            (Endpoint::Url(u), Some(url)) => assert_eq!(u, url),
            (Endpoint::Command { argv, env }, None) => {
                assert_eq!(argv, &stdio);
                assert!(env.is_empty());
            }
            other => panic!("{}: {other:?}", server.name),
        }
        assert_eq!(t.labels.get("kind").map(String::as_str), Some(server.name));
    }
    let slow = cfg.targets.iter().find(|t| t.name == "slow").expect("slow");
    assert!(slow.timeout > fleet.options().slow_delay + Duration::from_secs(1));
    assert!(slow.latency_budget < fleet.options().slow_delay);
    assert!(slow.interval > slow.timeout);

    assert_eq!(cfg.alerts.len(), 1);
    assert!(
        matches!(&cfg.alerts[0].kind, SinkKind::Webhook { url, .. } if url == "http://127.0.0.1:9/hook")
    );

    // Without a webhook there is no alert sink.
    let text = demo_config(&fleet, dir, listen, None);
    let cfg = parse(&text, "demo.toml", dir, &env).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(cfg.alerts.is_empty());
}
