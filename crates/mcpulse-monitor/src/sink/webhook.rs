//! The generic webhook: the alert as a documented JSON object, optionally HMAC-signed.
//!
//! ## The body (`schema: "mcpulse.alert/v1"`)
//!
//! ```json
//! {
//!   "schema": "mcpulse.alert/v1",
//!   "dedup_key": "mcpulse-3f1c…",      // same for the trigger, reminders and resolve of one incident
//!   "delivery_id": "mcpulse-d-9a07…",  // this alert: the same on every retry and after a restart
//!   "action": "trigger",               // trigger | resolve | remind | notify
//!   "kind": "down",                    // down | degraded | recovered | drift | auth | protocol | grade | flapping
//!   "target": "search",
//!   "severity": "critical",            // critical | warning | info
//!   "summary": "search is down: connect-failed",
//!   "at": "2026-11-18T11:06:40.000Z",  // when this alert was raised (RFC 3339, UTC)
//!   "started_at": "2026-11-18T11:06:40.000Z", // when the incident opened
//!   "labels": { "team": "search" }     // the target's labels from the config
//! }
//! ```
//!
//! Fields are only ever added within `v1`; a change of meaning gets `v2`. Delivery is at least
//! once: fold repeats on `delivery_id` ([`Alert::delivery_id`], a digest of `dedup_key`,
//! `action`, `kind` and `at`).
//!
//! The same body is what a [`super::command`] sink reads on stdin.
//!
//! ## Headers
//!
//! `Content-Type: application/json`, `Idempotency-Key: <delivery_id>`, then the config's
//! `headers` (sent as given; they may carry credentials and are never logged). With a
//! `secret`:
//!
//! - `X-Mcpulse-Timestamp: <unix seconds when sent>`
//! - `X-Mcpulse-Signature: sha256=<lowercase hex HMAC-SHA256(secret, timestamp + "." + body)>`
//!
//! The timestamp is inside the signed text (as Stripe and Slack sign theirs) so that a captured
//! request cannot be replayed later with a fresh timestamp; signing the body alone would leave
//! the timestamp header meaningless.
//!
//! ## Verifying a delivery (receiver side)
//!
//! 1. Take the raw body bytes *before* parsing them, and the `X-Mcpulse-Timestamp` value `t`.
//! 2. Compute `HMAC-SHA256(secret, t + "." + body)` and hex-encode it (lowercase).
//! 3. Compare it with the part of `X-Mcpulse-Signature` after `sha256=`, in constant time.
//! 4. Reject a `t` more than 5 minutes from your clock (a replay), and fold repeats on
//!    `delivery_id` (a retry after a lost 2xx, or a resend after a crash).
//!
//! In Python: `hmac.compare_digest(sig, "sha256=" + hmac.new(secret, f"{t}.".encode() + body,
//! hashlib.sha256).hexdigest())`. In Rust: [`verify`].

use super::{DeliveryError, HttpPost, rfc3339, to_json};
use crate::alert::{Action, Alert, Kind};
use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use sha2::Sha256;
use std::collections::BTreeMap;
use std::fmt::Write;

pub const SCHEMA: &str = "mcpulse.alert/v1";
pub const SIGNATURE_HEADER: &str = "X-Mcpulse-Signature";
pub const TIMESTAMP_HEADER: &str = "X-Mcpulse-Timestamp";
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

#[derive(Serialize)]
struct Payload<'a> {
    schema: &'static str,
    dedup_key: &'a str,
    delivery_id: String,
    action: Action,
    kind: Kind,
    target: &'a str,
    severity: &'a str,
    summary: &'a str,
    at: String,
    started_at: String,
    labels: &'a BTreeMap<String, String>,
}

/// The JSON body for an alert.
pub fn body(alert: &Alert) -> Result<String, DeliveryError> {
    to_json(&Payload {
        schema: SCHEMA,
        dedup_key: &alert.dedup_key,
        delivery_id: alert.delivery_id(),
        action: alert.action,
        kind: alert.kind,
        target: &alert.target,
        severity: &alert.severity,
        summary: &alert.summary,
        at: rfc3339(alert.at_ms),
        started_at: rfc3339(alert.started_ms),
        labels: &alert.labels,
    })
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> Option<Hmac<Sha256>> {
    // HMAC takes keys of any length; the error case is unreachable, but not a panic.
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).ok()?;
    m.update(timestamp.as_bytes());
    m.update(b".");
    m.update(body);
    Some(m)
}

/// `sha256=<hex>` for a body sent at `timestamp` (unix seconds, as text).
pub fn signature(secret: &str, timestamp: &str, body: &str) -> Option<String> {
    let tag = mac(secret.as_bytes(), timestamp, body.as_bytes())?
        .finalize()
        .into_bytes();
    let mut out = String::from("sha256=");
    for b in tag.iter() {
        let _ = write!(out, "{b:02x}");
    }
    Some(out)
}

/// Checks an `X-Mcpulse-Signature` value, in constant time. (The timestamp's freshness is the
/// receiver's call.)
pub fn verify(secret: &[u8], timestamp: &str, body: &[u8], signature_header: &str) -> bool {
    let Some(hex) = signature_header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Some(tag) = unhex(hex) else {
        return false;
    };
    mac(secret, timestamp, body).is_some_and(|m| m.verify_slice(&tag).is_ok())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The POST for an alert, signed when there is a secret. `sent_ms` is the send time (the
/// signature's timestamp).
pub fn request(
    url: &str,
    secret: Option<&str>,
    headers: &[(String, String)],
    alert: &Alert,
    sent_ms: i64,
) -> Result<HttpPost, DeliveryError> {
    let body = body(alert)?;
    let user_sets = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut protocol = Vec::new();
    if !user_sets("content-type") {
        protocol.push(("Content-Type".to_owned(), "application/json".to_owned()));
    }
    // The delivery id again, where receivers that deduplicate by header look for it (the
    // IETF httpapi draft's name, as Stripe uses it).
    if !user_sets(IDEMPOTENCY_HEADER) {
        protocol.push((IDEMPOTENCY_HEADER.to_owned(), alert.delivery_id()));
    }
    if let Some(secret) = secret {
        let ts = sent_ms.div_euclid(1000).to_string();
        let sig = signature(secret, &ts, &body).ok_or_else(|| {
            DeliveryError::Invalid("the webhook secret cannot key HMAC-SHA256".into())
        })?;
        protocol.push((TIMESTAMP_HEADER.to_owned(), ts));
        protocol.push((SIGNATURE_HEADER.to_owned(), sig));
    }
    // The signature headers are ours: a config header of the same name is not sent.
    let secret_headers = headers
        .iter()
        .filter(|(k, _)| {
            secret.is_none()
                || !(k.eq_ignore_ascii_case(SIGNATURE_HEADER)
                    || k.eq_ignore_ascii_case(TIMESTAMP_HEADER))
        })
        .cloned()
        .collect();
    Ok(HttpPost {
        url: url.to_owned(),
        headers: protocol,
        secret_headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_and_reject() {
        let sig = signature("s3cret", "1800000000", "{}").unwrap();
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64, "{sig}");
        assert!(verify(b"s3cret", "1800000000", b"{}", &sig));
        assert!(!verify(b"other", "1800000000", b"{}", &sig));
        assert!(!verify(b"s3cret", "1800000001", b"{}", &sig));
        assert!(!verify(b"s3cret", "1800000000", b"{} ", &sig));
        assert!(!verify(b"s3cret", "1800000000", b"{}", "sha256=zz"));
        assert!(!verify(b"s3cret", "1800000000", b"{}", "sha1=00"));
        assert!(!verify(b"s3cret", "1800000000", b"{}", "sha256=é0"));
    }
}
