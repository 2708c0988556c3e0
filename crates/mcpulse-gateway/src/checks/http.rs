//! `kind = "http"`: one `GET url` with mcpulse-transport's client, as the probe reads a health
//! endpoint (`mcpulse_probe` `health.rs`): redirects are followed within the URL's origin only
//! (a redirect elsewhere fails the check: what another host says is not this dependency, and
//! the request must not be steered), the body is read up to [`BODY_CAP`] bytes and dropped
//! (reading it times the whole answer; a huge body is cut, not buffered), and everything is
//! bounded by the check's deadline. Passes when the status is one of `expect_status`, or any
//! 2xx when none is given.

use super::{failed, passed};
use mcpulse_policy::check::Raw;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{BodyEnd, HttpClient, Outgoing, read_body};
use mcpulse_wire::redact;
use tokio::time::Instant;

/// The most of a body read: enough for any health document; the rest is not waited for.
pub const BODY_CAP: usize = 64 * 1024;

/// A check's client, kept from run to run: its TLS configuration (the system's roots, read
/// from disk: blocking work) is built by the first HTTPS run and shared by the later ones,
/// instead of being loaded again on a runtime worker every interval. Each run still dials a
/// connection of its own (a fork keeps no connection), so that every run measures the
/// dependency afresh.
pub(crate) struct Client(HttpClient);

impl Default for Client {
    fn default() -> Client {
        let mut client = HttpClient::new(Clock::start());
        client.same_origin_only = true;
        Client(client)
    }
}

pub(super) async fn run(
    url: &http::Uri,
    expect: &[u16],
    deadline: Instant,
    kept: &mut Client,
) -> Raw {
    let start = Instant::now();
    let mut client = kept.0.fork();
    let out = Outgoing {
        method: http::Method::GET,
        uri: url.clone(),
        headers: vec![(
            "accept".into(),
            "application/health+json, application/json;q=0.9, */*;q=0.5".into(),
        )],
        user_headers: &[],
        body: None,
    };
    let mut redirects = Vec::new();
    let sent = client.send(&out, false, deadline, &mut redirects).await;
    // The TLS configuration, if this run built it, is kept for the next runs.
    kept.0 = client.fork();
    let mut resp = match sent {
        Ok(r) => r,
        // The transport's errors carry URLs redacted already.
        Err(e) => return failed(Some(start.elapsed()), &format!("GET failed: {e}")),
    };
    let status = resp.status().as_u16();
    let (_, end) = read_body(resp.body_mut(), BODY_CAP, deadline).await;
    let took = start.elapsed();
    if let BodyEnd::Timeout = end {
        return failed(
            Some(took),
            &format!("status {status}, then timed out reading the body"),
        );
    }
    let ok = if expect.is_empty() {
        (200..300).contains(&status)
    } else {
        expect.contains(&status)
    };
    let reason = resp.status().canonical_reason().unwrap_or("");
    let what = format!("status {status} {reason}").trim_end().to_owned();
    if ok {
        passed(took, &what)
    } else {
        let wanted = if expect.is_empty() {
            "2xx".to_owned()
        } else {
            expect
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        failed(
            Some(took),
            &format!(
                "{what} from {} (expected {wanted})",
                redact::url(&url.to_string())
            ),
        )
    }
}
