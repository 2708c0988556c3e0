//! Alert sinks: exact payloads, delivery against real loopback receivers, failure
//! classification, the command sink, the backoff policy, and the outbox loop under paused time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use hmac::{Hmac, KeyInit, Mac};
use mcpulse_monitor::alert::{self, Action, Alert, Context, Incidents, Kind};
use mcpulse_monitor::config::{AlertConfig, SinkKind};
use mcpulse_monitor::sink::{
    self, Deliver, DeliveryError, Outbox, OutboxOptions, SinkId, Timebase, alertmanager, command,
    pagerduty, slack, webhook,
};
use mcpulse_monitor::state::{Event, Health};
use mcpulse_testkit::{FakeHttp, Reply, TempDir};
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// 2026-11-18T11:06:40.000Z
const T0: i64 = 1_795_000_000_000;
const MIN: i64 = 60_000;

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("team".to_owned(), "search".to_owned())])
}

fn mk(action: Action, kind: Kind, severity: &str, summary: &str, family: &str) -> Alert {
    Alert {
        dedup_key: alert::dedup_key("search", family),
        action,
        kind,
        target: "search".into(),
        severity: severity.into(),
        summary: summary.into(),
        at_ms: T0,
        started_ms: T0,
        labels: labels(),
        removed: false,
    }
}

fn down() -> Alert {
    mk(
        Action::Trigger,
        Kind::Down,
        "critical",
        "search is down: connect-failed",
        "status",
    )
}

fn recovered() -> Alert {
    Alert {
        at_ms: T0 + 12 * MIN,
        ..mk(
            Action::Resolve,
            Kind::Recovered,
            "info",
            "search recovered (was down)",
            "status",
        )
    }
}

fn remind() -> Alert {
    Alert {
        at_ms: T0 + 125 * MIN,
        ..mk(
            Action::Remind,
            Kind::Down,
            "critical",
            "still open: search is down: connect-failed",
            "status",
        )
    }
}

fn grade() -> Alert {
    mk(
        Action::Notify,
        Kind::Grade,
        "info",
        "search: security grade changed from A to C",
        "grade",
    )
}

fn json_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

fn wall_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- payloads --------------------------------------------------------------------------------

#[test]
fn webhook_body_is_the_documented_object() {
    let body = webhook::body(&down()).unwrap();
    assert!(
        body.starts_with(r#"{"schema":"mcpulse.alert/v1","dedup_key":"mcpulse-"#),
        "{body}"
    );
    assert_eq!(
        json_of(&body),
        json!({
            "schema": "mcpulse.alert/v1",
            "dedup_key": alert::dedup_key("search", "status"),
            // Pinned: a receiver folds on it across an upgrade of the monitor too.
            "delivery_id": "mcpulse-d-388e8f6db8a99077692a45f4",
            "action": "trigger",
            "kind": "down",
            "target": "search",
            "severity": "critical",
            "summary": "search is down: connect-failed",
            "at": "2026-11-18T11:06:40.000Z",
            "started_at": "2026-11-18T11:06:40.000Z",
            "labels": {"team": "search"}
        })
    );
    let r = json_of(&webhook::body(&recovered()).unwrap());
    assert_eq!(r["action"], "resolve");
    assert_eq!(r["kind"], "recovered");
    assert_eq!(r["at"], "2026-11-18T11:18:40.000Z");
    assert_eq!(r["started_at"], "2026-11-18T11:06:40.000Z");
}

#[test]
fn webhook_request_headers_and_signature() {
    let custom = vec![("Authorization".to_owned(), "Bearer t0k".to_owned())];
    let sent = T0 + 1_500;
    let req = webhook::request("http://h/x", Some("s3cret"), &custom, &down(), sent).unwrap();
    let ts = (sent / 1000).to_string();
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(b"s3cret").unwrap();
    m.update(format!("{ts}.").as_bytes());
    m.update(req.body.as_bytes());
    let expected = format!("sha256={}", hex(&m.finalize().into_bytes()));
    assert_eq!(
        req.headers,
        vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Idempotency-Key".to_owned(), down().delivery_id()),
            ("X-Mcpulse-Timestamp".to_owned(), ts),
            ("X-Mcpulse-Signature".to_owned(), expected),
        ]
    );
    assert_eq!(req.secret_headers, custom);
    // Debug never shows a config header's value.
    assert!(!format!("{req:?}").contains("t0k"));
    // Without a secret: no signature headers.
    let plain = webhook::request("http://h/x", None, &[], &down(), sent).unwrap();
    assert_eq!(
        plain.headers,
        vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Idempotency-Key".to_owned(), down().delivery_id()),
        ]
    );
    // A config header of that name wins.
    let own = vec![("idempotency-key".to_owned(), "mine".to_owned())];
    let req = webhook::request("http://h/x", None, &own, &down(), sent).unwrap();
    assert_eq!(
        req.headers,
        vec![("Content-Type".to_owned(), "application/json".to_owned())]
    );
}

#[test]
fn slack_lines_read_at_3am() {
    assert_eq!(
        slack::line(&down()),
        ":red_circle: DOWN · search is down: connect-failed · since 2026-11-18 11:06 UTC"
    );
    assert_eq!(
        slack::line(&remind()),
        ":red_circle: STILL DOWN · still open: search is down: connect-failed · open for 2h 5m"
    );
    assert_eq!(
        slack::line(&recovered()),
        ":large_green_circle: RESOLVED · search recovered (was down) · after 12m"
    );
    assert_eq!(
        slack::line(&grade()),
        ":large_blue_circle: GRADE · search: security grade changed from A to C"
    );
    let degraded = mk(
        Action::Trigger,
        Kind::Degraded,
        "warning",
        "search is degraded",
        "status",
    );
    assert!(slack::line(&degraded).starts_with(":large_orange_circle: DEGRADED · "));
    // Server-sent text cannot inject mentions or links, nor break the line.
    let evil = mk(
        Action::Trigger,
        Kind::Down,
        "critical",
        "search is down: <!channel> & <http://x|click>\nsecond line",
        "status",
    );
    let line = slack::line(&evil);
    assert!(
        line.contains("&lt;!channel&gt; &amp; &lt;http://x|click&gt;\\nsecond line"),
        "{line}"
    );
    let req = slack::request("https://hooks.example/services/T/B/X", &down()).unwrap();
    assert_eq!(json_of(&req.body), json!({ "text": slack::line(&down()) }));
}

#[test]
fn pagerduty_events() {
    let key = alert::dedup_key("search", "status");
    let trigger = json_of(&pagerduty::body("R0UT1NG", &down()).unwrap().unwrap());
    assert_eq!(
        trigger,
        json!({
            "routing_key": "R0UT1NG",
            "event_action": "trigger",
            "dedup_key": key,
            "client": "mcpulse",
            "payload": {
                "summary": "search is down: connect-failed",
                "source": "search",
                "severity": "critical",
                "timestamp": "2026-11-18T11:06:40.000Z",
                "component": "mcp-server",
                "class": "down",
                "custom_details": {
                    "kind": "down",
                    "action": "trigger",
                    "started_at": "2026-11-18T11:06:40.000Z",
                    "labels": {"team": "search"}
                }
            }
        })
    );
    let resolve = json_of(&pagerduty::body("R0UT1NG", &recovered()).unwrap().unwrap());
    assert_eq!(
        resolve,
        json!({
            "routing_key": "R0UT1NG",
            "event_action": "resolve",
            "dedup_key": key,
            "client": "mcpulse"
        })
    );
    // A reminder re-triggers the same incident.
    let again = json_of(&pagerduty::body("R0UT1NG", &remind()).unwrap().unwrap());
    assert_eq!(again["event_action"], "trigger");
    assert_eq!(again["dedup_key"], trigger["dedup_key"]);
    // Notices never page.
    assert_eq!(pagerduty::body("R0UT1NG", &grade()).unwrap(), None);
    // Severity is mapped into PagerDuty's four; the summary fits its 1024 characters.
    let mut odd = down();
    odd.severity = "page-me".into();
    odd.summary = "x".repeat(5000);
    let odd = json_of(&pagerduty::body("R", &odd).unwrap().unwrap());
    assert_eq!(odd["payload"]["severity"], "error");
    assert_eq!(
        odd["payload"]["summary"].as_str().unwrap().chars().count(),
        1024
    );
}

#[test]
fn alertmanager_alerts() {
    let key = alert::dedup_key("search", "status");
    let labels = |name: &str, sev: &str| json!({"alertname": name, "target": "search", "severity": sev, "dedup_key": key, "team": "search"});
    let trigger = json_of(&alertmanager::body(&down()).unwrap());
    assert_eq!(
        trigger,
        json!([
            {
                "labels": labels("MCPServerDown", "critical"),
                "annotations": {"summary": "search is down: connect-failed"},
                "startsAt": "2026-11-18T11:06:40.000Z",
                "endsAt": "2026-11-19T11:06:40.000Z"
            },
            {
                // A degraded alert of the same incident, if one fired, ends now.
                "labels": labels("MCPServerDegraded", "warning"),
                "annotations": {"summary": "search is down: connect-failed"},
                "startsAt": "2026-11-18T11:06:40.000Z",
                "endsAt": "2026-11-18T11:06:40.000Z"
            }
        ])
    );
    let resolve = json_of(&alertmanager::body(&recovered()).unwrap());
    assert_eq!(
        resolve,
        json!([
            {
                "labels": labels("MCPServerDown", "critical"),
                "annotations": {"summary": "search recovered (was down)"},
                "startsAt": "2026-11-18T11:06:40.000Z",
                "endsAt": "2026-11-18T11:18:40.000Z"
            },
            {
                "labels": labels("MCPServerDegraded", "warning"),
                "annotations": {"summary": "search recovered (was down)"},
                "startsAt": "2026-11-18T11:06:40.000Z",
                "endsAt": "2026-11-18T11:18:40.000Z"
            }
        ])
    );
    // The resolve carries exactly the firing alert's labels: that is what closes it.
    assert_eq!(resolve[0]["labels"], trigger[0]["labels"]);
    let notice = json_of(&alertmanager::body(&grade()).unwrap());
    assert_eq!(
        notice,
        json!([{
            "labels": {"alertname": "MCPServerGrade", "target": "search", "severity": "info",
                       "dedup_key": alert::dedup_key("search", "grade"), "team": "search"},
            "annotations": {"summary": "search: security grade changed from A to C"},
            "startsAt": "2026-11-18T11:06:40.000Z",
            "endsAt": "2026-11-18T12:06:40.000Z"
        }])
    );
    // A config label cannot take over an identity label.
    let mut clash = down();
    clash.labels.insert("alertname".into(), "Mine".into());
    clash
        .labels
        .insert("app.kubernetes.io/name".into(), "s".into());
    let v = json_of(&alertmanager::body(&clash).unwrap());
    assert_eq!(v[0]["labels"]["alertname"], "MCPServerDown");
    assert_eq!(v[0]["labels"]["app_kubernetes_io_name"], "s");
}

#[test]
fn command_environment() {
    assert_eq!(
        command::env(&down()),
        vec![
            ("MCPULSE_ALERT_KIND", "down".to_owned()),
            ("MCPULSE_TARGET", "search".to_owned()),
            ("MCPULSE_ACTION", "trigger".to_owned()),
            (
                "MCPULSE_DEDUP_KEY",
                alert::dedup_key("search", "status").to_owned()
            ),
            ("MCPULSE_DELIVERY_ID", down().delivery_id()),
            ("MCPULSE_SEVERITY", "critical".to_owned()),
            (
                "MCPULSE_SUMMARY",
                "search is down: connect-failed".to_owned()
            ),
        ]
    );
}

#[test]
fn a_delivery_id_names_one_alert_of_an_incident() {
    let trigger = down();
    let id = trigger.delivery_id();
    assert!(
        id.starts_with("mcpulse-d-") && id.len() == "mcpulse-d-".len() + 24,
        "{id}"
    );
    // The same alert read back from the outbox (as JSON) is the same delivery.
    let stored: Alert = serde_json::from_str(&serde_json::to_string(&trigger).unwrap()).unwrap();
    assert_eq!(stored.delivery_id(), id);
    // The resolve and a reminder of the same incident (same dedup key) are other deliveries.
    let reminder = Alert {
        action: Action::Remind,
        at_ms: trigger.at_ms + 60 * MIN,
        ..trigger.clone()
    };
    let ids = [
        id.clone(),
        recovered().delivery_id(),
        reminder.delivery_id(),
    ];
    assert_eq!(recovered().dedup_key, trigger.dedup_key);
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    // The webhook body and the command's stdin carry it.
    let body = json_of(&webhook::body(&trigger).unwrap());
    assert_eq!(body["delivery_id"], id.as_str());
}

/// What a hostile server (an error message) or an imported config (a target name) can put in an
/// alert: terminal escapes (OSC title, clear screen, colour), a line forging a recovery, the
/// one-byte CSI, a bidi override and a zero-width space.
fn hostile() -> Alert {
    let mut a = down();
    a.target = "prod\x1b[2J\nFAKE".into();
    a.summary = "prod is down: initialize was rejected: -32000 \x1b]0;owned\x07\x1b[31mred\x1b[0m\n\
                 2026-12-01T00:00:00Z  INFO alert target=prod kind=recovered\u{9b}2J \u{202e}gnp.exe\u{200b}"
        .into();
    a
}

fn assert_inert(what: &str, s: &str) {
    assert!(
        !s.chars().any(mcpulse_wire::text::is_escaped),
        "{what} carries a raw control, bidi or invisible character: {s:?}"
    );
}

#[test]
fn hostile_text_reaches_slack_pagerduty_and_the_command_environment_inert() {
    let a = hostile();
    let line = slack::line(&a);
    assert_inert("the Slack line", &line);
    assert!(
        line.contains("-32000 \\x1b]0;owned\\x07\\x1b[31mred\\x1b[0m\\n2026-12-01T00:00:00Z  INFO"),
        "{line}"
    );
    assert!(
        line.contains("\\u{9b}2J \\u{202e}gnp.exe\\u{200b}"),
        "{line}"
    );

    let event = json_of(&pagerduty::body("R", &a).unwrap().unwrap());
    let summary = event["payload"]["summary"].as_str().unwrap();
    assert_inert("the PagerDuty summary", summary);
    assert!(summary.contains("\\x1b]0;owned\\x07"), "{summary}");
    assert_eq!(event["payload"]["source"], "prod\\x1b[2J\\nFAKE");
    // PagerDuty's limit holds after escaping, which lengthens the text.
    let mut long = hostile();
    long.summary = "\x1b".repeat(2000);
    let long = json_of(&pagerduty::body("R", &long).unwrap().unwrap());
    let summary = long["payload"]["summary"].as_str().unwrap();
    assert_eq!(
        summary.chars().count(),
        1021,
        "whole escapes and the marker"
    );
    assert!(summary.ends_with("\\x1b…"), "{summary}");

    for (k, v) in command::env(&a) {
        assert_inert(k, &v);
    }
    let env: BTreeMap<_, _> = command::env(&a).into_iter().collect();
    assert_eq!(env["MCPULSE_TARGET"], "prod\\x1b[2J\\nFAKE");
    // The webhook's JSON stays exact: JSON escapes control characters itself.
    assert_eq!(
        json_of(&webhook::body(&a).unwrap())["summary"],
        a.summary.as_str()
    );
}

// ---- filters and backoff -----------------------------------------------------------------------

fn cfg(kind: SinkKind, targets: &[&str], on: &[&str]) -> AlertConfig {
    AlertConfig {
        kind,
        targets: targets.iter().map(|s| s.to_string()).collect(),
        on: on.iter().map(|s| s.to_string()).collect(),
        secrets: Default::default(),
    }
}

#[test]
fn filters() {
    let slack = |t: &[&str], on: &[&str]| {
        cfg(
            SinkKind::Slack {
                url: "http://x".into(),
            },
            t,
            on,
        )
    };
    let pd = |on: &[&str]| {
        cfg(
            SinkKind::PagerDuty {
                routing_key: "k".into(),
                url: "http://x".into(),
            },
            &[],
            on,
        )
    };
    assert!(sink::matches(&slack(&[], &[]), &down()));
    assert!(sink::matches(&slack(&["search"], &["down"]), &down()));
    assert!(!sink::matches(&slack(&["files"], &[]), &down()));
    assert!(!sink::matches(&slack(&[], &["degraded"]), &down()));
    assert!(sink::matches(&slack(&[], &["grade"]), &grade()));
    // Chat sinks take `on` literally...
    assert!(!sink::matches(&slack(&[], &["down"]), &recovered()));
    assert!(sink::matches(&slack(&[], &["recovered"]), &recovered()));
    // ...incident sinks always get the resolve of what they opened.
    assert!(sink::matches(&pd(&["down"]), &recovered()));
    assert!(!sink::matches(&pd(&["drift"]), &recovered()));
    // PagerDuty takes no notices, whatever its filters.
    assert!(!sink::matches(&pd(&[]), &grade()));
    assert!(!sink::matches(&pd(&["grade"]), &grade()));
    let am = cfg(
        SinkKind::Alertmanager {
            url: "http://x".into(),
            resend: Duration::from_secs(60),
        },
        &[],
        &["grade"],
    );
    assert!(sink::matches(&am, &grade()));
}

#[test]
fn backoff_doubles_to_a_cap_with_deterministic_jitter() {
    let key = alert::dedup_key("search", "status");
    for attempts in 1..=30u32 {
        let ceiling = (1_000i64 << (attempts - 1).min(20)).min(300_000);
        let d = sink::next_attempt(attempts, T0, &key) - T0;
        assert!(
            (ceiling / 2..=ceiling).contains(&d),
            "attempt {attempts}: {d} outside [{}, {ceiling}]",
            ceiling / 2
        );
        assert_eq!(d, sink::next_attempt(attempts, T0, &key) - T0);
    }
    assert_eq!(
        sink::next_attempt(0, T0, &key),
        sink::next_attempt(1, T0, &key)
    );
    assert!(sink::next_attempt(u32::MAX, i64::MAX - 1, &key) == i64::MAX);
    // Different incidents spread out.
    let delays: std::collections::BTreeSet<i64> = (0..20)
        .map(|i| sink::next_attempt(6, T0, &alert::dedup_key(&format!("t{i}"), "status")))
        .collect();
    assert!(delays.len() >= 18, "{delays:?}");
}

// ---- delivery over loopback ---------------------------------------------------------------------

const TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn webhook_delivery_is_signed_and_verifies() {
    let fake = FakeHttp::start(|_| Reply::status(204)).await;
    let sink = SinkKind::Webhook {
        url: fake.url("/hooks/mcp"),
        secret: Some("s3cret".into()),
        headers: vec![("Authorization".into(), "Bearer t0k".into())],
    };
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    sink::deliver(&sink, &down(), TIMEOUT).await.unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!((r.method.as_str(), r.path()), ("POST", "/hooks/mcp"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("authorization"), Some("Bearer t0k"));
    assert_eq!(r.body, webhook::body(&down()).unwrap().into_bytes());
    let ts = r.header("x-mcpulse-timestamp").unwrap();
    let t: u64 = ts.parse().unwrap();
    assert!(t >= before && t <= before + 5, "{t} vs {before}");
    let sig = r.header("x-mcpulse-signature").unwrap();
    assert!(webhook::verify(b"s3cret", ts, &r.body, sig));
    assert!(!webhook::verify(b"wrong", ts, &r.body, sig));
    // And independently of our helper.
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(b"s3cret").unwrap();
    m.update(ts.as_bytes());
    m.update(b".");
    m.update(&r.body);
    assert_eq!(sig, format!("sha256={}", hex(&m.finalize().into_bytes())));
}

/// Alerts straight from the policy: a target goes down, then recovers.
fn policy_pair() -> (Alert, Alert) {
    let labels = labels();
    let mut incidents = Incidents::new();
    let cx = |now, status| Context {
        target: "search",
        labels: &labels,
        now_ms: now,
        silenced: false,
        flapping: false,
        status,
        drift: None,
        drift_changes: "",
        reminder_ms: None,
        components: &alert::NO_COMPONENTS,
        by_components: false,
        reason: "",
    };
    let went_down = [Event::Transition {
        from: Health::Healthy,
        to: Health::Down,
        at_ms: T0,
        quiet: false,
        reason: "connect-failed".into(),
    }];
    let mut a = alert::alerts(&went_down, &mut incidents, &cx(T0, Health::Down));
    let came_back = [Event::Transition {
        from: Health::Down,
        to: Health::Healthy,
        at_ms: T0 + 12 * MIN,
        quiet: false,
        reason: String::new(),
    }];
    a.extend(alert::alerts(
        &came_back,
        &mut incidents,
        &cx(T0 + 12 * MIN, Health::Healthy),
    ));
    assert_eq!(a.len(), 2, "{a:?}");
    let resolve = a.pop().unwrap();
    (a.pop().unwrap(), resolve)
}

#[tokio::test]
async fn pagerduty_trigger_and_resolve_share_the_dedup_key() {
    let fake = FakeHttp::start(|_| Reply::json(202, &json!({"status": "success"}))).await;
    let sink = SinkKind::PagerDuty {
        routing_key: "R0UT1NG".into(),
        url: fake.url("/v2/enqueue"),
    };
    let (trigger, resolve) = policy_pair();
    sink::deliver(&sink, &trigger, TIMEOUT).await.unwrap();
    sink::deliver(&sink, &resolve, TIMEOUT).await.unwrap();
    // A notice is accepted without a request.
    sink::deliver(&sink, &grade(), TIMEOUT).await.unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let events: Vec<Value> = reqs.iter().map(|r| r.json().unwrap()).collect();
    assert_eq!(events[0]["event_action"], "trigger");
    assert_eq!(events[1]["event_action"], "resolve");
    assert_eq!(events[0]["dedup_key"], events[1]["dedup_key"]);
    assert_eq!(
        events[0]["dedup_key"],
        json!(alert::dedup_key("search", "status"))
    );
    assert!(reqs.iter().all(|r| r.path() == "/v2/enqueue"));
}

#[tokio::test]
async fn alertmanager_resolve_ends_the_alert() {
    let fake = FakeHttp::start(|_| Reply::status(200)).await;
    let sink = SinkKind::Alertmanager {
        url: fake.url("/"),
        resend: Duration::from_secs(60),
    };
    let (trigger, resolve) = policy_pair();
    sink::deliver(&sink, &trigger, TIMEOUT).await.unwrap();
    sink::deliver(&sink, &resolve, TIMEOUT).await.unwrap();
    let reqs = fake.requests();
    assert!(reqs.iter().all(|r| r.path() == "/api/v2/alerts"));
    let firing = &reqs[0].json().unwrap()[0];
    let ended = &reqs[1].json().unwrap()[0];
    assert_eq!(firing["labels"], ended["labels"]);
    assert_eq!(firing["endsAt"], "2026-11-19T11:06:40.000Z");
    assert_eq!(ended["endsAt"], "2026-11-18T11:18:40.000Z");
}

#[tokio::test]
async fn alertmanager_resend_posts_every_open_incident_in_one_request() {
    let fake = FakeHttp::start(|_| Reply::status(200)).await;
    let url = fake.url("/");
    let (trigger, _) = policy_pair();
    let mut other = grade();
    other.action = Action::Remind;
    let open = vec![
        Alert {
            action: Action::Remind,
            ..trigger.clone()
        },
        other,
    ];
    let n = sink::alertmanager::resend(&url, TIMEOUT, || open.clone())
        .await
        .unwrap();
    assert_eq!(n, 2);
    // Nothing open: no request at all.
    let n = sink::alertmanager::resend(&url, TIMEOUT, Vec::new)
        .await
        .unwrap();
    assert_eq!(n, 0);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].path(), "/api/v2/alerts");
    let posted = reqs[0].json().unwrap();
    // The same postables as one delivery of each, in one array.
    let mut expected: Vec<Value> = Vec::new();
    for a in &open {
        let one: Value = serde_json::from_str(&sink::alertmanager::body(a).unwrap()).unwrap();
        expected.extend(one.as_array().unwrap().iter().cloned());
    }
    assert_eq!(posted, Value::Array(expected));
}

#[tokio::test]
async fn alertmanager_resend_waits_for_the_post_in_flight_and_lists_incidents_after_it() {
    // A resolve on its way to a slow Alertmanager holds the turn: the re-send lists the open
    // incidents only once that post is over, so it cannot list (and revive) the incident the
    // resolve is closing.
    let fake = FakeHttp::start(|_| Reply::silence()).await;
    let url = fake.url("/");
    let (_, resolve) = policy_pair();
    let sink = SinkKind::Alertmanager {
        url: url.clone(),
        resend: Duration::from_secs(60),
    };
    let delivered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = delivered.clone();
    let delivery = tokio::spawn(async move {
        let r = sink::deliver(&sink, &resolve, Duration::from_millis(300)).await;
        flag.store(true, Ordering::SeqCst);
        r
    });
    // The delivery has the turn once its request has arrived.
    while fake.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let listed_after = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = listed_after.clone();
    let n = sink::alertmanager::resend(&url, Duration::from_millis(300), || {
        seen.store(delivered.load(Ordering::SeqCst), Ordering::SeqCst);
        Vec::new()
    })
    .await
    .unwrap();
    assert_eq!(n, 0);
    assert!(
        listed_after.load(Ordering::SeqCst),
        "the re-send listed the incidents while a post was in flight"
    );
    assert!(
        delivery.await.unwrap().is_err(),
        "the silent receiver times out"
    );
}

#[tokio::test]
async fn slack_delivery() {
    let fake = FakeHttp::start(|_| Reply::bytes(200, "text/plain", "ok")).await;
    let sink = SinkKind::Slack {
        url: fake.url("/services/T0/B0/s3cr3tpath"),
    };
    sink::deliver(&sink, &down(), TIMEOUT).await.unwrap();
    assert_eq!(
        fake.requests()[0].json().unwrap(),
        json!({"text": slack::line(&down())})
    );
}

#[tokio::test]
async fn retryable_then_delivered() {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let fake = FakeHttp::start(move |_| match seen.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::bytes(500, "text/plain", "upstream down"),
        1 => Reply::status(503),
        2 => Reply::status(429).header("retry-after", "120"),
        3 => Reply::status(408).header("retry-after", "5"),
        _ => Reply::accepted(),
    })
    .await;
    let sink = SinkKind::Webhook {
        url: fake.url("/"),
        secret: None,
        headers: vec![],
    };
    let e = sink::deliver(&sink, &down(), TIMEOUT).await.unwrap_err();
    assert_eq!(
        e,
        DeliveryError::Status {
            status: 500,
            body: "upstream down".into(),
            retry_after_ms: None,
        }
    );
    assert_eq!(
        e.to_string(),
        "the sink answered HTTP 500: \"upstream down\""
    );
    assert!(!e.is_permanent());
    for (status, retry_after_ms) in [(503, None), (429, Some(120_000)), (408, None)] {
        let e = sink::deliver(&sink, &down(), TIMEOUT).await.unwrap_err();
        assert!(
            matches!(e, DeliveryError::Status { status: s, retry_after_ms: r, .. }
                if s == status && r == retry_after_ms),
            "{e:?}"
        );
        assert!(!e.is_permanent(), "{e}");
    }
    sink::deliver(&sink, &down(), TIMEOUT).await.unwrap();
    assert_eq!(fake.requests().len(), 5);
}

#[tokio::test]
async fn client_errors_are_permanent_and_never_show_the_url() {
    let fake = FakeHttp::start(|r| {
        if r.path().starts_with("/services") {
            Reply::bytes(404, "text/plain", "no_service")
        } else {
            Reply::json(400, &json!({"message": "Event object is invalid"}))
        }
    })
    .await;
    let pd = SinkKind::PagerDuty {
        routing_key: "bad".into(),
        url: fake.url("/v2/enqueue"),
    };
    let e = sink::deliver(&pd, &down(), TIMEOUT).await.unwrap_err();
    assert!(e.is_permanent());
    assert!(
        matches!(&e, DeliveryError::Status { status: 400, body, .. } if body.contains("invalid")),
        "{e}"
    );
    let slack = SinkKind::Slack {
        url: fake.url("/services/T0/B0/s3cr3tpath"),
    };
    let e = sink::deliver(&slack, &down(), TIMEOUT).await.unwrap_err();
    assert!(e.is_permanent());
    assert!(!e.to_string().contains("s3cr3tpath"), "{e}");
    for bad in ["not a url", "ftp://example.com/x", "http:///nohost"] {
        let sink = SinkKind::Slack { url: bad.into() };
        let e = sink::deliver(&sink, &down(), TIMEOUT).await.unwrap_err();
        assert!(
            matches!(e, DeliveryError::Invalid(_)) && e.is_permanent(),
            "{bad}: {e}"
        );
    }
}

#[tokio::test]
async fn a_hanging_receiver_times_out() {
    let fake = FakeHttp::start(|_| Reply::silence()).await;
    let sink = SinkKind::Alertmanager {
        url: fake.url(""),
        resend: Duration::from_secs(60),
    };
    let started = std::time::Instant::now();
    let e = sink::deliver(&sink, &down(), Duration::from_millis(300))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(e, DeliveryError::Timeout(Duration::from_millis(300)));
    assert_eq!(e.to_string(), "no answer within 300ms");
    assert!(!e.is_permanent());
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_closed_port_is_retryable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let sink = SinkKind::Webhook {
        url: format!("http://{addr}/"),
        secret: None,
        headers: vec![],
    };
    let e = sink::deliver(&sink, &down(), TIMEOUT).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Unreachable(_)), "{e}");
    assert!(!e.is_permanent());
}

// ---- the command sink --------------------------------------------------------------------------

fn argv(parts: &[&str]) -> SinkKind {
    SinkKind::Command {
        argv: parts.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
    }
}

#[tokio::test]
async fn command_gets_stdin_and_env_and_no_shell() {
    let dir = TempDir::new("sink-command");
    let stdin = dir.join("stdin.json");
    let env = dir.join("env.txt");
    let pwned = dir.join("pwned");
    // The test's own shell only copies stdin and the environment into files.
    let sink = argv(&[
        "sh",
        "-c",
        r#"cat > "$1"; env > "$2""#,
        "sh",
        stdin.to_str().unwrap(),
        env.to_str().unwrap(),
    ]);
    let mut a = down();
    a.summary = format!("search is down: $(touch {}); `id`", pwned.display());
    sink::deliver(&sink, &a, TIMEOUT).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&stdin).unwrap(),
        webhook::body(&a).unwrap()
    );
    let env = std::fs::read_to_string(&env).unwrap();
    for (k, v) in command::env(&a) {
        assert!(env.lines().any(|l| l == format!("{k}={v}")), "{k} in {env}");
    }
    assert!(!pwned.exists(), "the summary was run as shell");
}

/// Issue #14 (6): the command starts with a clean environment. Cargo runs this test with
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME` set, standing in for the monitor's own variables
/// (API tokens, webhook secrets): only the allowlisted one, the base and `MCPULSE_*` get through.
#[tokio::test]
async fn command_gets_a_clean_environment_and_its_allowlist() {
    let dir = TempDir::new("sink-command-env");
    let out = dir.join("env.txt");
    let (Some(_), Some(passed)) = (
        std::env::var_os("CARGO_MANIFEST_DIR"),
        std::env::var_os("CARGO_PKG_NAME"),
    ) else {
        panic!("cargo sets CARGO_MANIFEST_DIR and CARGO_PKG_NAME for tests");
    };
    let sink = SinkKind::Command {
        argv: ["sh", "-c", r#"env > "$1""#, "sh", out.to_str().unwrap()]
            .map(String::from)
            .to_vec(),
        env: vec![
            "CARGO_PKG_NAME".into(),
            "MCPULSE_TEST_UNSET_VARIABLE".into(),
        ],
    };
    sink::deliver(&sink, &down(), TIMEOUT).await.unwrap();
    let env = std::fs::read_to_string(&out).unwrap();
    let names: BTreeSet<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    assert!(!names.contains("CARGO_MANIFEST_DIR"), "{env}");
    assert!(
        env.lines()
            .any(|l| l == format!("CARGO_PKG_NAME={}", passed.to_string_lossy())),
        "{env}"
    );
    assert!(names.contains("MCPULSE_TARGET"), "{env}");
    if std::env::var_os("PATH").is_some() {
        assert!(names.contains("PATH"), "{env}");
    }
    assert!(!names.contains("MCPULSE_TEST_UNSET_VARIABLE"), "{env}");
    let allowed = |k: &str| {
        k.starts_with("MCPULSE_")
            || k.starts_with("LC_")
            || k == "CARGO_PKG_NAME"
            || mcpulse_transport::stdio::INHERITED_ENV.contains(&k)
            // What sh sets for itself.
            || ["PWD", "SHLVL", "_", "OLDPWD"].contains(&k)
    };
    let extra: Vec<&&str> = names.iter().filter(|k| !allowed(k)).collect();
    assert!(extra.is_empty(), "not allowlisted: {extra:?}");
}

#[tokio::test]
async fn a_hostile_summary_cannot_forge_an_environment_line() {
    let dir = TempDir::new("sink-command-hostile");
    let env = dir.join("env.txt");
    let sink = argv(&["sh", "-c", r#"env > "$1""#, "sh", env.to_str().unwrap()]);
    let mut a = hostile();
    a.summary = "down\nMCPULSE_ACTION=resolve\nLD_PRELOAD=/tmp/x.so\x1b[2J".into();
    sink::deliver(&sink, &a, TIMEOUT).await.unwrap();
    let env = std::fs::read_to_string(&env).unwrap();
    let lines: Vec<&str> = env
        .lines()
        .filter(|l| l.starts_with("MCPULSE_") || l.starts_with("LD_PRELOAD"))
        .collect();
    assert!(lines.contains(&"MCPULSE_ACTION=trigger"), "{env}");
    assert!(!lines.contains(&"MCPULSE_ACTION=resolve"), "{env}");
    assert!(!env.lines().any(|l| l.starts_with("LD_PRELOAD=")), "{env}");
    assert!(
        lines.contains(
            &"MCPULSE_SUMMARY=down\\nMCPULSE_ACTION=resolve\\nLD_PRELOAD=/tmp/x.so\\x1b[2J"
        ),
        "{env}"
    );
}

#[tokio::test]
async fn command_failures() {
    let e = sink::deliver(
        &argv(&["sh", "-c", "echo boom >&2; exit 3"]),
        &down(),
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), "sh exited with status 3: \"boom\"");
    assert!(!e.is_permanent());

    let e = sink::deliver(&argv(&["/nonexistent/mcpulse-alert"]), &down(), TIMEOUT)
        .await
        .unwrap_err();
    assert!(
        matches!(e, DeliveryError::Spawn { .. }) && e.is_permanent(),
        "{e}"
    );

    let e = sink::deliver(&argv(&[]), &down(), TIMEOUT)
        .await
        .unwrap_err();
    assert!(e.is_permanent(), "{e}");

    // A command that does not read its stdin is fine.
    sink::deliver(&argv(&["true"]), &down(), TIMEOUT)
        .await
        .unwrap();
}

#[tokio::test]
async fn command_time_limit_kills_the_whole_group() {
    let dir = TempDir::new("sink-command-timeout");
    let pidfile = dir.join("pid");
    let sink = argv(&[
        "sh",
        "-c",
        r#"sleep 30 & echo $! > "$1"; wait"#,
        "sh",
        pidfile.to_str().unwrap(),
    ]);
    let started = std::time::Instant::now();
    let e = sink::deliver(&sink, &down(), Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(e, DeliveryError::Timeout(Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    let gone = || {
        std::fs::read_to_string(&stat)
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    };
    for _ in 0..50 {
        if gone() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the command's child {} outlived the time limit", pid.trim());
}

// ---- the outbox loop ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Row {
    id: i64,
    sink: SinkId,
    alert: Alert,
    attempts: u32,
    next_ms: i64,
    delivered: Option<i64>,
    dead: bool,
    /// (when, error)
    errors: Vec<(i64, String)>,
}

/// An in-memory outbox keeping the [`Outbox`] contract.
#[derive(Clone, Default)]
struct Memory(Arc<Mutex<Vec<Row>>>);

/// The identity the scripted sinks go by: `s<index>`.
fn script_id(sink: usize) -> SinkId {
    SinkId::new(format!("s{sink}"))
}

impl Memory {
    /// A row for scripted sink number `sink`.
    fn add(&self, sink: usize, alert: Alert) -> i64 {
        self.add_for(script_id(sink), alert)
    }

    fn add_for(&self, sink: SinkId, alert: Alert) -> i64 {
        let mut rows = self.0.lock().unwrap();
        let id = rows.len() as i64 + 1;
        rows.push(Row {
            id,
            sink,
            next_ms: alert.at_ms,
            alert,
            attempts: 0,
            delivered: None,
            dead: false,
            errors: Vec::new(),
        });
        id
    }

    fn row(&self, id: i64) -> Row {
        self.0.lock().unwrap()[(id - 1) as usize].clone()
    }
}

impl Outbox for Memory {
    async fn due(&mut self, now_ms: i64, limit: usize) -> Vec<(i64, SinkId, Alert, u32)> {
        let rows = self.0.lock().unwrap();
        let mut heads = std::collections::HashSet::new();
        let mut out = Vec::new();
        for r in rows.iter().filter(|r| r.delivered.is_none() && !r.dead) {
            // Only the oldest pending row of each (sink, incident).
            if heads.insert((r.sink.clone(), r.alert.dedup_key.clone())) && r.next_ms <= now_ms {
                out.push((r.id, r.sink.clone(), r.alert.clone(), r.attempts));
            }
        }
        out.truncate(limit);
        out
    }
    async fn delivered(&mut self, id: i64, at_ms: i64) {
        self.0.lock().unwrap()[(id - 1) as usize].delivered = Some(at_ms);
    }
    async fn failed(&mut self, id: i64, error: &str, next_ms: i64, permanent: bool) {
        let mut rows = self.0.lock().unwrap();
        let r = &mut rows[(id - 1) as usize];
        r.attempts += 1;
        r.next_ms = next_ms;
        r.dead = permanent;
        r.errors.push((next_ms, error.to_owned()));
    }
}

#[derive(Debug, Clone, Copy)]
enum Behaviour {
    Ok,
    /// HTTP 500 for the first n calls, then ok.
    FailFirst(usize),
    /// HTTP 400.
    Reject,
    /// Never answers.
    Hang,
    /// Answers ok after this long.
    Slow(Duration),
    /// HTTP 429 asking to wait this many ms, for the first n calls, then ok.
    RateLimited(usize, i64),
}

#[derive(Debug, Clone)]
struct Call {
    sink: usize,
    id_key: String,
    action: Action,
    at_ms: i64,
}

/// A scripted [`Deliver`] that logs every attempt against the loop's clock.
struct Script {
    behaviour: Vec<Behaviour>,
    clock: Timebase,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Deliver for Script {
    fn deliver(
        &self,
        sink: &SinkId,
        alert: &Alert,
        _timeout: Duration,
    ) -> impl Future<Output = Result<(), DeliveryError>> + Send {
        let sink: usize = sink.as_str()[1..].parse().unwrap();
        let behaviour = self.behaviour[sink];
        let calls = self.calls.clone();
        let call = Call {
            sink,
            id_key: alert.dedup_key.clone(),
            action: alert.action,
            at_ms: self.clock.now_ms(),
        };
        async move {
            let before = {
                let mut c = calls.lock().unwrap();
                let n = c.iter().filter(|x| x.sink == sink).count();
                c.push(call);
                n
            };
            match behaviour {
                Behaviour::Ok => Ok(()),
                Behaviour::FailFirst(n) if before < n => Err(DeliveryError::Status {
                    status: 500,
                    body: String::new(),
                    retry_after_ms: None,
                }),
                Behaviour::RateLimited(n, wait) if before < n => Err(DeliveryError::Status {
                    status: 429,
                    body: String::new(),
                    retry_after_ms: Some(wait),
                }),
                Behaviour::RateLimited(..) => Ok(()),
                Behaviour::FailFirst(_) => Ok(()),
                Behaviour::Reject => Err(DeliveryError::Status {
                    status: 400,
                    body: "bad".into(),
                    retry_after_ms: None,
                }),
                Behaviour::Hang => std::future::pending().await,
                Behaviour::Slow(d) => {
                    tokio::time::sleep(d).await;
                    Ok(())
                }
            }
        }
    }
}

struct Running {
    clock: Timebase,
    calls: Arc<Mutex<Vec<Call>>>,
    wake: Arc<Notify>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Memory>,
}

fn start(memory: &Memory, behaviour: Vec<Behaviour>, poll: Duration) -> Running {
    start_counting(memory, behaviour, poll, None)
}

fn start_counting(
    memory: &Memory,
    behaviour: Vec<Behaviour>,
    poll: Duration,
    fleet: Option<mcpulse_monitor::fleet::Fleet>,
) -> Running {
    let clock = Timebase::starting_at(T0);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let wake = Arc::new(Notify::new());
    let (stop, stop_rx) = watch::channel(false);
    let opts = OutboxOptions {
        poll,
        batch: 16,
        timeout: Duration::from_secs(10),
        expire: Duration::from_secs(24 * 3600),
        clock,
        fleet,
    };
    let script = Script {
        behaviour,
        clock,
        calls: calls.clone(),
    };
    let task = tokio::spawn(sink::run_outbox_with(
        memory.clone(),
        script,
        wake.clone(),
        stop_rx,
        opts,
    ));
    Running {
        clock,
        calls,
        wake,
        stop,
        task,
    }
}

impl Running {
    async fn stop(self) -> Vec<Call> {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(1), self.task)
            .await
            .expect("the loop stops promptly")
            .unwrap();
        self.calls.lock().unwrap().clone()
    }
}

/// `mcpulse_alert_deliveries_total{sink,outcome}` on /metrics counts every attempt where the
/// outbox records it: five failures (retried) then one delivery; a rejected alert is dropped.
#[tokio::test(start_paused = true)]
async fn outbox_counts_deliveries_by_sink_and_outcome_for_metrics() {
    use mcpulse_monitor::metrics::{Format, fleet as render};
    let fleet = mcpulse_monitor::fleet::Fleet::new();
    let memory = Memory::default();
    memory.add(0, down());
    let run = start_counting(
        &memory,
        vec![Behaviour::FailFirst(5)],
        Duration::from_millis(100),
        Some(fleet.clone()),
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    run.stop().await;
    let text = render(fleet.snapshot(), Format::Prometheus).unwrap();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("mcpulse_alert_deliveries_total{"))
        .collect();
    let sink = script_id(0);
    assert_eq!(
        series,
        [
            format!("mcpulse_alert_deliveries_total{{sink=\"{sink}\",outcome=\"delivered\"}} 1"),
            format!("mcpulse_alert_deliveries_total{{sink=\"{sink}\",outcome=\"failed\"}} 5"),
        ],
        "{text}"
    );

    let fleet = mcpulse_monitor::fleet::Fleet::new();
    let memory = Memory::default();
    memory.add(0, down());
    let run = start_counting(
        &memory,
        vec![Behaviour::Reject],
        Duration::from_millis(100),
        Some(fleet.clone()),
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    run.stop().await;
    let got = &fleet.monitor().deliveries;
    assert_eq!(got.get(&(sink.to_string(), "dropped")), Some(&1), "{got:?}");
    assert_eq!(got.len(), 1, "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn outbox_backs_off_then_delivers() {
    let memory = Memory::default();
    let id = memory.add(0, down());
    let poll = Duration::from_millis(100);
    let run = start(&memory, vec![Behaviour::FailFirst(5)], poll);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let calls = run.stop().await;
    let times: Vec<i64> = calls.iter().map(|c| c.at_ms - T0).collect();
    assert_eq!(times.len(), 6, "{times:?}");
    assert_eq!(times[0], 0, "the first attempt is immediate");
    let key = down().dedup_key;
    for k in 1..times.len() {
        // Retry k comes at the first poll at or after next_attempt(k, failure time).
        let due = sink::next_attempt(k as u32, T0 + times[k - 1], &key) - T0;
        assert!(
            times[k] >= due && times[k] <= due + 100,
            "retry {k} at {} ms, due at {due} ms ({times:?})",
            times[k]
        );
        // 0.5–1 s, 1–2 s, 2–4 s, 4–8 s, 8–16 s.
        let gap = times[k] - times[k - 1];
        let ceiling = 1000i64 << (k - 1);
        assert!(
            gap >= ceiling / 2 && gap <= ceiling + 100,
            "gap {k}: {gap} ms ({times:?})"
        );
    }
    let row = memory.row(id);
    assert_eq!(row.attempts, 5);
    assert_eq!(row.delivered, Some(T0 + times[5]));
    assert!(
        row.errors
            .iter()
            .all(|(_, e)| e == "the sink answered HTTP 500")
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_sink_is_retried_no_sooner_than_it_asked() {
    let memory = Memory::default();
    let id = memory.add(0, down());
    let poll = Duration::from_millis(100);
    // A Slack webhook over its rate limit: 429 with Retry-After: 30, twice.
    let run = start(&memory, vec![Behaviour::RateLimited(2, 30_000)], poll);
    tokio::time::sleep(Duration::from_secs(120)).await;
    let calls = run.stop().await;
    let times: Vec<i64> = calls.iter().map(|c| c.at_ms - T0).collect();
    assert_eq!(times.len(), 3, "{times:?}");
    for k in 1..3 {
        // The backoff alone would retry after 0.5–2 s; the sink asked for 30 s.
        let gap = times[k] - times[k - 1];
        assert!(
            (30_000..=30_100).contains(&gap),
            "gap {k}: {gap} ms ({times:?})"
        );
    }
    assert_eq!(memory.row(id).delivered, Some(T0 + times[2]));
}

/// Retry-After is the sink's limit, not one alert's: the sink's other alerts wait as long, and
/// another sink's do not.
#[tokio::test(start_paused = true)]
async fn a_rate_limited_sink_holds_its_other_alerts_too() {
    let memory = Memory::default();
    let first = memory.add(0, down());
    let second = memory.add(0, grade());
    let elsewhere = memory.add(1, down());
    let run = start(
        &memory,
        vec![Behaviour::RateLimited(1, 30_000), Behaviour::Ok],
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(memory.row(elsewhere).delivered, Some(T0));
    assert_eq!(memory.row(second).delivered, None, "held with the sink");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = run.stop().await;
    let times: Vec<i64> = calls
        .iter()
        .filter(|c| c.sink == 0)
        .map(|c| c.at_ms - T0)
        .collect();
    assert_eq!(times.len(), 3, "{times:?}");
    assert_eq!(times[0], 0);
    assert!(times[1..].iter().all(|&t| t >= 30_000), "{times:?}");
    assert!(memory.row(first).delivered.is_some());
    assert!(memory.row(second).delivered.is_some());
}

/// A notice that waits out a sink's Retry-After (up to an hour) past its expiry is dropped when
/// its turn comes, not sent late; the alert that got the 429 is still sent after the wait.
#[tokio::test(start_paused = true)]
async fn an_alert_that_expires_while_its_sink_is_rate_limited_is_not_sent() {
    let memory = Memory::default();
    let first = memory.add(0, down());
    // 23.5 hours old when first looked at: under the day's expiry, over it an hour later.
    let old_notice = memory.add(
        0,
        Alert {
            at_ms: T0 - 23 * 60 * MIN - 30 * MIN,
            ..grade()
        },
    );
    let run = start(
        &memory,
        vec![Behaviour::RateLimited(1, 3_600_000)],
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(3600 + 60)).await;
    let calls = run.stop().await;
    let actions: Vec<(Action, i64)> = calls.iter().map(|c| (c.action, c.at_ms - T0)).collect();
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert!(
        actions.iter().all(|(a, _)| *a == Action::Trigger),
        "{actions:?}"
    );
    assert!(actions[1].1 >= 3_600_000, "{actions:?}");
    assert!(memory.row(first).delivered.is_some());
    let n = memory.row(old_notice);
    assert!(n.dead && n.delivered.is_none(), "{n:?}");
    assert!(
        n.errors[0]
            .1
            .starts_with("gave up after 0 attempts: the alert is 1d"),
        "{n:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_sink_does_not_delay_another() {
    let memory = Memory::default();
    let stuck = memory.add(0, down());
    let stuck_too = memory.add(0, grade());
    let fast = memory.add(1, down());
    let fast_too = memory.add(1, grade());
    let run = start(
        &memory,
        vec![Behaviour::Hang, Behaviour::Ok],
        Duration::from_secs(1),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Both of the healthy sink's alerts are through at once.
    assert_eq!(memory.row(fast).delivered, Some(T0));
    assert_eq!(memory.row(fast_too).delivered, Some(T0));
    assert_eq!(memory.row(stuck).delivered, None);
    tokio::time::sleep(Duration::from_secs(25)).await;
    // The hanging one gave up on each attempt after the 10 s time limit, in turn.
    let s = memory.row(stuck);
    assert_eq!(s.errors[0].1, "no answer within 10s");
    assert!(s.attempts >= 1 && s.delivered.is_none() && !s.dead);
    let first_try_of_second = run
        .calls
        .lock()
        .unwrap()
        .iter()
        .find(|c| c.sink == 0 && c.id_key == grade().dedup_key)
        .map(|c| c.at_ms - T0);
    assert_eq!(first_try_of_second, Some(10_000));
    let calls = run.stop().await;
    assert_eq!(calls.iter().filter(|c| c.sink == 1).count(), 2);
    assert!(memory.row(stuck_too).delivered.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_resolve_never_overtakes_its_trigger() {
    let memory = Memory::default();
    let (trigger, resolve) = policy_pair();
    let t = memory.add(0, trigger.clone());
    // The resolve is already due when the trigger is first tried.
    let r = memory.add(
        0,
        Alert {
            at_ms: T0,
            ..resolve
        },
    );
    let run = start(
        &memory,
        vec![Behaviour::FailFirst(2)],
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = run.stop().await;
    let actions: Vec<Action> = calls.iter().map(|c| c.action).collect();
    assert_eq!(
        actions,
        vec![
            Action::Trigger,
            Action::Trigger,
            Action::Trigger,
            Action::Resolve
        ]
    );
    let (t, r) = (memory.row(t), memory.row(r));
    assert!(r.delivered.unwrap() >= t.delivered.unwrap());
}

#[tokio::test(start_paused = true)]
async fn permanent_failures_are_not_retried_and_old_alerts_expire() {
    let memory = Memory::default();
    let rejected = memory.add(0, down());
    let stale_trigger = memory.add(
        1,
        Alert {
            at_ms: T0 - 25 * 60 * MIN,
            ..grade()
        },
    );
    let stale_resolve = memory.add(
        1,
        Alert {
            at_ms: T0 - 25 * 60 * MIN,
            ..recovered()
        },
    );
    let run = start(
        &memory,
        vec![Behaviour::Reject, Behaviour::Ok],
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(600)).await;
    let calls = run.stop().await;
    let r = memory.row(rejected);
    assert!(r.dead && r.attempts == 1, "{r:?}");
    assert_eq!(r.errors[0].1, "the sink answered HTTP 400: \"bad\"");
    assert_eq!(calls.iter().filter(|c| c.sink == 0).count(), 1);
    // A day-old notice is dropped unsent; a day-old resolve is still sent.
    let s = memory.row(stale_trigger);
    assert!(s.dead, "{s:?}");
    assert!(
        s.errors[0].1.starts_with("gave up after 0 attempts"),
        "{s:?}"
    );
    assert!(memory.row(stale_resolve).delivered.is_some());
    assert_eq!(calls.iter().filter(|c| c.sink == 1).count(), 1);
}

#[tokio::test(start_paused = true)]
async fn new_alerts_wake_the_loop_and_shutdown_leaves_in_flight_rows_pending() {
    let memory = Memory::default();
    let run = start(
        &memory,
        vec![Behaviour::Ok, Behaviour::Slow(Duration::from_secs(5))],
        Duration::from_secs(3600),
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    let quick = memory.add(0, down());
    let slow = memory.add(1, down());
    let woken_at = run.clock.now_ms();
    run.wake.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Delivered at once, not at the next hourly poll.
    assert_eq!(memory.row(quick).delivered, Some(woken_at));
    // The slow sink is mid-delivery: stopping aborts it, and the row stays pending for the
    // next start (at least once).
    let calls = run.stop().await;
    assert_eq!(calls.len(), 2);
    let s = memory.row(slow);
    assert_eq!((s.delivered, s.dead, s.attempts), (None, false, 0));
}

#[tokio::test(start_paused = true)]
async fn the_configured_sinks_apply_filters_and_know_their_indexes() {
    let memory = Memory::default();
    // `run_outbox` reads the system clock: alerts raised just now.
    let now = wall_now();
    let configured = vec![cfg(
        SinkKind::PagerDuty {
            routing_key: "k".into(),
            // Never contacted: a notice is not for PagerDuty.
            url: "http://127.0.0.1:9/".into(),
        },
        &[],
        &[],
    )];
    let filtered = memory.add_for(
        sink::sink_ids(&configured)[0].clone(),
        Alert {
            at_ms: now,
            started_ms: now,
            ..grade()
        },
    );
    let missing = memory.add_for(
        SinkId::new("webhook-0123456789abcdef"),
        Alert {
            at_ms: now,
            started_ms: now,
            ..down()
        },
    );
    let sinks = Arc::new(RwLock::new(configured));
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(sink::run_outbox(
        memory.clone(),
        sinks,
        Arc::new(Notify::new()),
        stop_rx,
        mcpulse_monitor::fleet::Fleet::new(),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .unwrap()
        .unwrap();
    assert!(memory.row(filtered).delivered.is_some());
    let m = memory.row(missing);
    assert!(m.dead, "{m:?}");
    assert_eq!(
        m.errors[0].1,
        "no sink webhook-0123456789abcdef in the configuration"
    );
}

/// The real loop, real sinks, real loopback sockets, real time (bounded to a few seconds).
#[tokio::test]
async fn outbox_over_loopback_retries_and_isolates_a_hanging_sink() {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let flaky = FakeHttp::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::status(500)
        } else {
            Reply::accepted()
        }
    })
    .await;
    let hanging = FakeHttp::start(|_| Reply::silence()).await;
    let hook = |url: String| {
        cfg(
            SinkKind::Webhook {
                url,
                secret: None,
                headers: vec![],
            },
            &[],
            &[],
        )
    };
    let configured = vec![hook(hanging.url("/")), hook(flaky.url("/"))];
    let ids = sink::sink_ids(&configured);
    let sinks = Arc::new(RwLock::new(configured));
    let memory = Memory::default();
    let now = wall_now();
    let a = Alert {
        at_ms: now,
        started_ms: now,
        ..down()
    };
    let stuck = memory.add_for(ids[0].clone(), a.clone());
    let retried = memory.add_for(ids[1].clone(), a);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(sink::run_outbox(
        memory.clone(),
        sinks,
        Arc::new(Notify::new()),
        stop_rx,
        mcpulse_monitor::fleet::Fleet::new(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    while memory.row(retried).delivered.is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = memory.row(retried);
    assert!(r.delivered.is_some(), "{r:?}");
    assert_eq!(r.attempts, 1);
    assert_eq!(r.errors[0].1, "the sink answered HTTP 500");
    assert_eq!(flaky.requests().len(), 2);
    // The hanging sink is still waiting on its first attempt (10 s limit), unharmed.
    assert_eq!(hanging.requests().len(), 1);
    let s = memory.row(stuck);
    assert_eq!((s.delivered, s.attempts), (None, 0));
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_sinks_credentials_are_hidden_in_its_delivery_errors() {
    // cargo sets CARGO_MANIFEST_DIR for the tests it runs: a variable of ours, passed on.
    let value = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let sink = SinkKind::Command {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "echo \"login failed with token $CARGO_MANIFEST_DIR\" >&2; exit 1".into(),
        ],
        env: vec!["CARGO_MANIFEST_DIR".into()],
    };
    let e = mcpulse_monitor::sink::delivery::deliver(&sink, &down(), Duration::from_secs(5))
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains(&value), "{e}");
    assert!(e.contains("login failed with token <redacted>"), "{e}");
    // A Slack URL is a credential: an error that quotes it shows none of it.
    let hook = FakeHttp::start(|_req: &mcpulse_testkit::http::Request| {
        Reply::json(
            404,
            &json!({"error": "no_service http://127.0.0.1/services/T000/B000/XXXXsecretXXXX"}),
        )
    })
    .await;
    let url = format!("{}/services/T000/B000/XXXXsecretXXXX", hook.url(""));
    let e = mcpulse_monitor::sink::delivery::deliver(
        &SinkKind::Slack { url },
        &down(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(!e.contains("XXXXsecretXXXX"), "{e}");
    assert!(e.contains("HTTP 404"), "{e}");
}

/// What a server chose — a dependency's name in its health document, an error message the
/// summary quotes — cannot ping a channel or dress a link in any sink a person reads through a
/// chat renderer: Slack, Alertmanager (whose usual Slack templates render annotations and labels
/// as unescaped mrkdwn) and PagerDuty. Neither `<!channel>` nor a bare `@channel` / `@here` /
/// `@everyone` survives in their payloads. The webhook (and the command sink's stdin) carry
/// the exact text, as documented: a program reads them, not a chat renderer.
#[test]
fn server_text_cannot_ping_a_channel_or_make_a_link_in_any_chat_sink() {
    let hostile = "<!channel> <https://evil.example|login> @channel @HERE @everyone & @all";
    let family = alert::component_family(hostile);
    let incident = alert::Incident {
        dedup_key: alert::dedup_key("search", &family),
        family,
        kind: Kind::Down,
        severity: "critical".into(),
        summary: String::new(),
        opened_ms: T0,
        notified_ms: T0,
    };
    let a = incident.alert(
        "search",
        &labels(),
        Action::Trigger,
        format!("{hostile} down behind search: health-failed: {hostile}"),
        T0,
    );
    assert_eq!(a.labels.get("component").map(String::as_str), Some(hostile));
    let surviving = |payload: &str| -> Vec<&'static str> {
        [
            "<!channel>",
            "<https://",
            "|login>",
            "@channel",
            "@HERE",
            "@everyone",
            "@all",
        ]
        .into_iter()
        .filter(|bad| payload.contains(bad))
        .collect()
    };
    // The decoded strings, not the JSON text.
    let strings = |v: &Value| -> String {
        fn walk(v: &Value, out: &mut String) {
            match v {
                Value::String(s) => {
                    out.push_str(s);
                    out.push('\n');
                }
                Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
                Value::Object(m) => m.iter().for_each(|(k, v)| {
                    out.push_str(k);
                    out.push('\n');
                    walk(v, out);
                }),
                _ => {}
            }
        }
        let mut out = String::new();
        walk(v, &mut out);
        out
    };
    let slack = strings(&json_of(
        &slack::request("https://hooks.example/services/T/B/X", &a)
            .unwrap()
            .body,
    ));
    // Alertmanager's and PagerDuty's labels are identity, sent raw (see the test below): what
    // people read is the annotations, and PagerDuty's summary.
    let am = strings(&json_of(&alertmanager::body(&a).unwrap())[0]["annotations"]);
    let pd =
        strings(&json_of(&pagerduty::body("R0UT1NG", &a).unwrap().unwrap())["payload"]["summary"]);
    for (sink, payload) in [("slack", &slack), ("alertmanager", &am), ("pagerduty", &pd)] {
        assert_eq!(surviving(payload), Vec::<&str>::new(), "{sink}: {payload}");
        // Still legible: the same words, with look-alikes or entities.
        assert!(payload.contains("channel"), "{sink}: {payload}");
        assert!(payload.contains("evil.example"), "{sink}: {payload}");
    }
    // Alertmanager: no markup character at all in the annotations (an entity would show as
    // `&lt;` in mail); the component label is the name as the server wrote it.
    let postables = json_of(&alertmanager::body(&a).unwrap());
    let component = postables[0]["annotations"]["component"].as_str().unwrap();
    let summary = postables[0]["annotations"]["summary"].as_str().unwrap();
    for text in [component, summary] {
        assert!(!text.contains(['<', '>', '&']), "{text}");
    }
    assert_eq!(postables[0]["labels"]["component"], hostile);
    // Other `@`s are left alone.
    let mail = mk(
        Action::Trigger,
        Kind::Down,
        "critical",
        "search is down: mail ops@example.com",
        "status",
    );
    assert!(slack::line(&mail).contains("ops@example.com"));
    // The webhook carries the exact text.
    let hook = json_of(&webhook::body(&a).unwrap());
    assert_eq!(hook["labels"]["component"], hostile);
    assert!(hook["summary"].as_str().unwrap().starts_with(hostile));
}

/// Review of 3d3d9c3: Alertmanager knows an alert by its label set, and PagerDuty an incident
/// by its dedup key. Making the `component` label chat-safe changed the label set of every
/// component alert whose name holds `<`, `&` or `@channel`: an incident open across the upgrade
/// was posted as a second alert (a second page) while the first stayed firing for 24 h. The
/// labels and keys are byte for byte those of the release before 3d3d9c3 (written out here as
/// its code produced them); chat-safe text is in the annotations only.
#[test]
fn alert_identity_is_unchanged_by_chat_safe_text() {
    let name = "<db> & @channel";
    let family = alert::component_family(name);
    let incident = alert::Incident {
        dedup_key: alert::dedup_key("search", &family),
        family,
        kind: Kind::Down,
        severity: "critical".into(),
        summary: String::new(),
        opened_ms: T0,
        notified_ms: T0,
    };
    let a = incident.alert(
        "search",
        &labels(),
        Action::Trigger,
        format!("{name} down behind search"),
        T0,
    );
    // The dedup key of the release before: sha256("search\0component:<db> & @channel").
    let key = "mcpulse-28602f70228f0301d7ecd1a8";
    assert_eq!(a.dedup_key, key);
    let postables = json_of(&alertmanager::body(&a).unwrap());
    let labels_of = |i: usize| serde_json::to_string(&postables[i]["labels"]).unwrap();
    assert_eq!(
        labels_of(0),
        format!(
            r#"{{"alertname":"MCPServerDown","component":"<db> & @channel","dedup_key":"{key}","severity":"critical","target":"search","team":"search"}}"#
        )
    );
    assert_eq!(
        labels_of(1),
        format!(
            r#"{{"alertname":"MCPServerDegraded","component":"<db> & @channel","dedup_key":"{key}","severity":"warning","target":"search","team":"search"}}"#
        )
    );
    // What people read is chat-safe.
    assert_eq!(
        postables[0]["annotations"]["component"],
        "\u{ff1c}db\u{ff1e} \u{ff06} \u{ff20}channel"
    );
    // PagerDuty: the same dedup key, and the labels in custom_details as they were.
    let pd = json_of(&pagerduty::body("R0UT1NG", &a).unwrap().unwrap());
    assert_eq!(pd["dedup_key"], key);
    assert_eq!(
        serde_json::to_string(&pd["payload"]["custom_details"]["labels"]).unwrap(),
        r#"{"component":"<db> & @channel","team":"search"}"#
    );
    // A target's own incident keeps its key too.
    assert_eq!(
        alert::dedup_key("search", "status"),
        "mcpulse-b999bdc81d8e5c5edc3459d8"
    );
}
