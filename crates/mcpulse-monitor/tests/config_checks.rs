//! What the config file is checked for beyond its syntax:
//! - alert sinks: every sink URL is `${VAR}`-expanded and checked when the config is read (a
//!   sink that cannot be posted to is a config error, not an alert set aside at delivery), and
//!   what came from the environment stays hidden in delivery errors;
//! - flap windows: the default fits the interval and thresholds, and a window set too short to
//!   ever see flapping is warned about.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_monitor::alert::{Action, Alert, Kind};
use mcpulse_monitor::config::{self, Config, ConfigError, SinkKind};
use mcpulse_monitor::sink::{Deliver, Sinks, sink_ids};
use mcpulse_testkit::{FakeHttp, Reply};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

const BASE: &str = "[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n[[alerts]]\n";

fn env(k: &str) -> Option<String> {
    match k {
        "NO_SCHEME" => Some("hooks.example/services/T0K3N-abcdef".to_owned()),
        "PD_KEY" => Some(String::new()),
        "AM" => Some("http://am.example:9093".to_owned()),
        _ => None,
    }
}

fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    config::parse(text, "mcpulse.toml", Path::new("/etc/mcpulse"), env)
}

/// One case per way a sink's URL or routing key is refused, each at the value. Before, only
/// Slack's URL was expanded and none was checked: `check-config` said ok while every alert of
/// such a sink was set aside at delivery as undeliverable.
#[test]
fn sink_urls_and_routing_keys_are_checked_when_the_config_is_read() {
    // (the alert's lines, where the error is, what it says)
    let cases: &[(&str, (usize, usize), &str)] = &[
        (
            "kind = \"webhook\"\nurl = \"${TEAMS_WEBHOOK}\"\n",
            (6, 7),
            "alert \"webhook\": url: the environment variable TEAMS_WEBHOOK is not set",
        ),
        (
            "kind = \"alertmanager\"\nurl = \"alertmanager:9093\"\n",
            (6, 7),
            "alert \"alertmanager\": url \"alertmanager:9093\" must start with http:// or https://",
        ),
        (
            "kind = \"pagerduty\"\nrouting_key = \"${PD_KEY}\"\n",
            (6, 15),
            "alert \"pagerduty\": routing_key: \"${PD_KEY}\" is empty (its environment variable is set, but empty), so PagerDuty would refuse every event: set the variable",
        ),
        (
            "kind = \"pagerduty\"\nrouting_key = \" \"\n",
            (6, 15),
            "alert \"pagerduty\": routing_key: is empty: write routing_key = \"${PAGERDUTY_KEY}\"",
        ),
        (
            "kind = \"pagerduty\"\nrouting_key = \"k\"\nurl = \"ftp://events.example/v2/enqueue\"\n",
            (7, 7),
            "alert \"pagerduty\": url \"ftp://events.example/<redacted>\" must start with http:// or https://",
        ),
        (
            "kind = \"slack\"\nurl = \"https://user:pw@hooks.example/x\"\n",
            (6, 7),
            "has credentials in the URL",
        ),
        (
            "kind = \"webhook\"\nurl = \"https://\"\n",
            (6, 7),
            "alert \"webhook\": \"https://\" is not a valid URL",
        ),
        // Written in the file: its path (Slack's token, a webhook's capability) is hidden in
        // the error, which SIGHUP logs and check-config prints.
        (
            "kind = \"slack\"\nurl = \"hooks.slack.example/services/T0/B0/T0K3N-abcdef\"\n",
            (6, 7),
            "alert \"slack\": url \"hooks.slack.example/<redacted>\" must start with http:// or https://",
        ),
        (
            "kind = \"webhook\"\nurl = \"https://ops@hooks.example/T0K3N-abcdef?x=1\"\n",
            (6, 7),
            "\"https://<redacted>@hooks.example/<redacted>\" has credentials in the URL",
        ),
        (
            "kind = \"slack\"\nurl = \"https://hooks.example/services/T0K3N abc\"\n",
            (6, 7),
            "alert \"slack\": \"https://hooks.example/<redacted>\" is not a valid URL",
        ),
        // From the environment: named by its variable, its value hidden.
        (
            "kind = \"slack\"\nurl = \"${NO_SCHEME}\"\n",
            (6, 7),
            "alert \"slack\": url \"${NO_SCHEME}\" comes from the environment, and its value is not a URL the monitor can post to: url \"<redacted>\" must start with http:// or https://; set the variable",
        ),
    ];
    for (alert, at, message) in cases {
        let text = format!("{BASE}{alert}");
        let e = parse(&text, &env)
            .err()
            .unwrap_or_else(|| panic!("accepted:\n{text}"));
        assert_eq!((e.line, e.column), *at, "{text}\n{e}");
        assert!(e.message.contains(message), "{text}\n{e}");
        assert!(!e.message.contains("T0K3N"), "{e}");
    }
    // Expanded wherever the URL is, and PagerDuty's default URL when none is given.
    let c = parse(
        &format!(
            "{BASE}kind = \"alertmanager\"\nurl = \"${{AM}}\"\n[[alerts]]\nkind = \"pagerduty\"\nrouting_key = \"R0UT1NG\"\n"
        ),
        &env,
    )
    .unwrap();
    assert!(
        matches!(&c.alerts[0].kind, SinkKind::Alertmanager { url, .. } if url == "http://am.example:9093"),
        "{:?}",
        c.alerts[0]
    );
    assert!(
        matches!(&c.alerts[1].kind, SinkKind::PagerDuty { url, .. } if url == "https://events.pagerduty.com/v2/enqueue"),
        "{:?}",
        c.alerts[1]
    );
}

/// `url = "${TEAMS_WEBHOOK}"` is posted to (it was kept as the literal text, which is not a
/// URL), and the URL, a credential, stays out of the delivery error even when the receiver
/// quotes it back.
#[tokio::test]
async fn a_webhook_url_from_the_environment_is_expanded_and_hidden_in_errors() {
    let fake = FakeHttp::start(|r| {
        Reply::bytes(
            404,
            "text/plain",
            format!("no hook at {}", r.url_for(r.path())),
        )
    })
    .await;
    let path = "/webhookb2/T0K3N-4f1c2e/IncomingWebhook/9a07";
    let url = fake.url(path);
    let env = move |k: &str| (k == "TEAMS_WEBHOOK").then(|| url.clone());
    let c = parse(
        &format!("{BASE}kind = \"webhook\"\nurl = \"${{TEAMS_WEBHOOK}}\"\n"),
        &env,
    )
    .unwrap();
    let ids = sink_ids(&c.alerts);
    let sinks = Sinks(Arc::new(RwLock::new(c.alerts)));
    let alert = Alert {
        dedup_key: "mcpulse-k".into(),
        action: Action::Trigger,
        kind: Kind::Down,
        target: "a".into(),
        severity: "critical".into(),
        summary: "a is down: connect-failed".into(),
        at_ms: 1_795_000_000_000,
        started_ms: 1_795_000_000_000,
        labels: Default::default(),
        removed: false,
    };
    let e = sinks
        .deliver(&ids[0], &alert, Duration::from_secs(10))
        .await
        .unwrap_err();
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "posted to the expanded URL: {e}");
    assert_eq!(requests[0].path(), path);
    let shown = e.to_string();
    assert!(shown.starts_with("the sink answered HTTP 404"), "{shown}");
    assert!(!shown.contains("T0K3N"), "{shown}");
    assert!(!shown.contains(&fake.url(path)), "{shown}");
    assert!(!sinks.describe(&ids[0]).contains("T0K3N"));
}

/// The default flap window is the last 21 checks (or more when the thresholds need it), and a
/// window too short to hold `flap_threshold + 1` transitions at the fastest is a warning
/// (check-config prints it, the daemon logs it), once for the targets that share it.
#[test]
fn flap_windows_fit_the_thresholds_or_are_warned_about() {
    let targets = "[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/a\"\n[[targets]]\nname = \"b\"\nurl = \"http://127.0.0.1:1/b\"\n";
    let c = parse(targets, &env).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.targets[0].flap_window, Duration::from_secs(21 * 60));
    // Thresholds that need more than 21 checks: 2 × (10 + 2) + 1 = 25.
    let c = parse(
        &format!("[defaults]\nfailure_threshold = 10\n{targets}"),
        &env,
    )
    .unwrap();
    assert_eq!(c.targets[0].flap_window, Duration::from_secs(25 * 60));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // The old default, written out: too short for the default thresholds (11 minutes needed).
    let c = parse(
        &format!("[defaults]\nflap_window = \"10m\"\n{targets}"),
        &env,
    )
    .unwrap();
    assert_eq!(
        c.warnings,
        [
            "targets \"a\", \"b\": flap_window 10m cannot hold the 5 transitions (more than flap_threshold 4) of a server flapping as fast as failure_threshold 3 and success_threshold 2 allow at interval 1m, so that flapping is never detected: set flap_window to at least 11m, or remove it (the default is 21 checks, more when the thresholds need it)"
        ]
    );
    assert_eq!(
        c.targets[0].flap_window,
        Duration::from_secs(600),
        "kept as written"
    );
    // Enough, and a target of its own that is not.
    let c = parse(
        &format!("[defaults]\nflap_window = \"11m\"\n{targets}interval = \"90s\"\n"),
        &env,
    )
    .unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].starts_with("target \"b\": flap_window 11m cannot hold")
            && c.warnings[0].contains("at interval 90s")
            && c.warnings[0].contains("set flap_window to at least 990s"),
        "{:?}",
        c.warnings
    );
}
