//! Reading a server's HTTP health endpoint (`--health-url`, a monitor target's `health_url`):
//! one `GET`, recorded as a [`HealthFetch`] for the judge. It never decides anything: a 503, an
//! HTML page or a hang are all just what came back.
//!
//! The endpoint is treated as hostile: the body is read up to [`HEALTH_BODY_CAP`] bytes and no
//! further, the whole fetch is bounded by [`HEALTH_TIMEOUT`] (or the probe's deadline, if
//! sooner), redirects are followed only within the URL's origin, and the user's credentials
//! (meant for the MCP endpoint) are not sent.

use crate::plan::Plan;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{BodyEnd, HttpClient, Outgoing, read_body};
use mcpulse_wire::redact;
use mcpulse_wire::transcript::{
    HEALTH_BODY_CAP, HealthFetch, TargetKind, TargetRecord, Transcript,
};
use std::time::Duration;
use tokio::time::Instant;

/// The paths `--health-url auto` reads on the MCP endpoint's origin, in the order the judge
/// prefers them among equally bad answers: readiness (`/readyz`, whether the server can serve,
/// dependencies included) first, then the plain `/health`, then liveness (`/healthz`, often only
/// "the process runs"). The judge takes the worst of those that answered.
pub const DISCOVERY_PATHS: [&str; 3] = ["/readyz", "/health", "/healthz"];

/// The discovery URLs for an MCP endpoint: each of [`DISCOVERY_PATHS`] on its origin (scheme
/// and authority; the endpoint's path and query are dropped). None for a URL without both.
pub fn discovery_urls(uri: &http::Uri) -> Vec<String> {
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Vec::new();
    };
    // Userinfo (`user:pass@`) is not carried to the health paths: credentials were meant
    // for the MCP endpoint, and the health endpoint is read without them.
    let host = authority
        .as_str()
        .rsplit_once('@')
        .map_or(authority.as_str(), |(_, h)| h);
    DISCOVERY_PATHS
        .iter()
        .map(|p| format!("{scheme}://{host}{p}"))
        .collect()
}

/// Discovery: one `GET` of each [`discovery_urls`] path at once (at most one request per path
/// per probe), each recorded as discovered. Which one counts is the judge's to say.
pub(crate) async fn discover(
    mcp_url: &http::Uri,
    clock: Clock,
    roots: &[mcpulse_transport::http::CertificateDer<'static>],
    deadline: Instant,
) -> Vec<HealthFetch> {
    let urls = discovery_urls(mcp_url);
    let one = |i: usize| {
        let url = urls.get(i).cloned();
        let roots = roots.to_vec();
        async move {
            let url = url?;
            let mut f = fetch(&url, clock, roots, deadline).await;
            f.discovered = true;
            Some(f)
        }
    };
    let (a, b, c) = tokio::join!(one(0), one(1), one(2));
    [a, b, c].into_iter().flatten().collect()
}

/// The longest a health endpoint is given, within the probe's own deadline.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET url`, recorded. `roots` are the plan's extra trusted roots.
pub(crate) async fn fetch(
    url: &str,
    clock: Clock,
    roots: Vec<mcpulse_transport::http::CertificateDer<'static>>,
    deadline: Instant,
) -> HealthFetch {
    let deadline = deadline.min(Instant::now() + HEALTH_TIMEOUT);
    let at = clock.at();
    let mut rec = HealthFetch {
        url: redact::url(url),
        at_ms: at,
        elapsed_ms: None,
        status: None,
        content_type: None,
        body: None,
        truncated: false,
        redirects: Vec::new(),
        error: None,
        discovered: false,
    };
    let uri: http::Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            rec.error = Some(format!("invalid URL: {e}"));
            return rec;
        }
    };
    let mut client = HttpClient::new(clock).with_roots(roots);
    client.same_origin_only = true;
    let out = Outgoing {
        method: http::Method::GET,
        uri,
        headers: vec![(
            "accept".into(),
            "application/health+json, application/json;q=0.9, text/plain;q=0.5".into(),
        )],
        user_headers: &[],
        body: None,
    };
    match client.send(&out, false, deadline, &mut rec.redirects).await {
        Err(e) => rec.error = Some(urls_redacted(&e.to_string())),
        Ok(mut resp) => {
            rec.status = Some(resp.status().as_u16());
            rec.content_type = resp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let (bytes, end) = read_body(resp.body_mut(), HEALTH_BODY_CAP, deadline).await;
            match end {
                BodyEnd::Complete => {}
                BodyEnd::TooLarge => rec.truncated = true,
                BodyEnd::Timeout => {
                    rec.truncated = true;
                    rec.error = Some("timed out reading the body".into());
                }
                BodyEnd::Error(e) => {
                    rec.truncated = true;
                    rec.error = Some(format!("reading the body failed: {e}"));
                }
            }
            rec.body = Some(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    rec.elapsed_ms = Some(clock.at() - at);
    rec
}

/// A probe of a health endpoint alone (no MCP target): the transcript holds the one read, and
/// its target is the endpoint (kind `health`), so the judge decides from it alone. `plan`
/// gives the deadline (`timeout`, within [`HEALTH_TIMEOUT`]), the extra roots and the secrets.
pub async fn probe_health(url: &str, plan: &Plan) -> Transcript {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let clock = Clock::start();
    let deadline = Instant::now() + plan.timeout;
    let host = url.parse::<http::Uri>().ok().and_then(|u| {
        u.host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
    });
    let target = TargetRecord {
        display: redact::target_url(url, &plan.secrets),
        kind: TargetKind::Health,
        host,
    };
    let started_unix_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
    let mut tr = Transcript::new(target, plan.record(), started_unix_ms);
    tr.started_unix_us = u64::try_from(since_epoch.as_micros()).ok();
    let roots = plan
        .extra_roots
        .iter()
        .map(|d| mcpulse_transport::http::CertificateDer::from(d.clone()))
        .collect();
    let fetch = fetch(url, clock, roots, deadline).await;
    tr.total_ms = fetch.at_ms + fetch.elapsed_ms.unwrap_or(0.0);
    tr.health.push(fetch);
    tr.hide(&plan.secrets);
    tr
}

/// `text` with every `http://` or `https://` URL in it shown as [`redact::url`] shows a URL:
/// a fetch error may quote where a redirect pointed (off the origin, with credentials or a
/// token in its query), and the error reaches the transcript, findings and alerts.
fn urls_redacted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = ["http://", "https://"]
        .iter()
        .filter_map(|p| rest.find(p))
        .min()
    {
        out.push_str(&rest[..i]);
        let end = rest[i..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')'))
            .map_or(rest.len(), |n| i + n);
        out.push_str(&redact::url(&rest[i..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_in_a_fetch_error_is_redacted() {
        let e = "redirect to https://user:pw@evil.example/x?token=s3cret#f is off the origin of http://h/readyz";
        let shown = super::urls_redacted(e);
        assert!(
            !shown.contains("pw@") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(shown.starts_with("redirect to https://"), "{shown}");
        assert!(
            shown.ends_with("is off the origin of http://h/readyz"),
            "{shown}"
        );
    }
}
