//! `mcpulse monitor accept <target>`: asks a running monitor, through its API, to make a
//! target's current contract its drift baseline (`POST /api/v1/targets/{name}/accept`), and
//! waits for the check that does it.
//!
//! After a planned change of a server's tools, the drift incident it raised would otherwise
//! never close: the baseline is the first contract the monitor saw, and nothing else replaces
//! it. The call needs the API token (`[server] token`), read from the same config file as the
//! monitor's (`${VAR}` expanded from this process's environment).
//!
//! This module does not change the baseline itself: the target's own check does, so that the
//! contract accepted is one the monitor fetched, never one sent in a request.

use crate::config::Config;
use http::{Method, Uri};
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{HttpClient, Outgoing, SendError, read_body};
use std::time::Duration;
use tokio::time::Instant;

/// How long one request to the API may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an API answer read.
const MAX_ANSWER: usize = 1 << 20;
/// How often the target's view is read while waiting.
const POLL: Duration = Duration::from_millis(200);

/// Where the monitor's API is, and its token.
#[derive(Clone)]
pub struct Api {
    /// `http://host:port`, no trailing slash.
    pub base: String,
    pub token: Option<String>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How an accept ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The target's check took its contract as the baseline.
    Accepted {
        /// The drift class there was before (`breaking`, `risky`), if any.
        drift_before: Option<String>,
    },
    /// Asked, but no check with a contract came within the wait (the server is down, or the
    /// interval is longer than the wait): the next one that reaches the server accepts it.
    Pending { waited: Duration },
}

/// Why an accept could not be asked for, each with what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error(
        "cannot reach the monitor's API at {base}: {detail}: is `mcpulse monitor` running with this config? (give --url if its API listens elsewhere, e.g. with --listen)"
    )]
    Unreachable { base: String, detail: String },
    #[error("the monitor's API at {base} did not answer within {timeout:?}")]
    Timeout { base: String, timeout: Duration },
    /// The API refused, with its own message (made inert).
    #[error("the monitor refused (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
    #[error("{0}")]
    Invalid(String),
    /// The request is no longer pending, yet no new baseline was stored: the monitor
    /// restarted (a pending accept is kept in memory only), or the target was removed.
    #[error(
        "the accept request is gone without a new baseline being stored (the monitor restarted, or the target was reloaded away): run the command again"
    )]
    Lost,
}

impl Api {
    /// The API of the monitor that runs `cfg`: its `[server] listen` (a wildcard address is
    /// reached on loopback) and token, unless `url` says where it is.
    pub fn of(cfg: &Config, url: Option<&str>) -> Api {
        let base = match url {
            Some(u) => u.trim_end_matches('/').to_owned(),
            None => {
                let mut addr = cfg.server.listen;
                if addr.ip().is_unspecified() {
                    addr.set_ip(match addr.ip() {
                        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                    });
                }
                format!("http://{addr}")
            }
        };
        Api {
            base,
            token: cfg.server.token.clone(),
        }
    }

    /// Asks for `target`'s next contract to become its baseline, then waits up to `wait` for
    /// the check that takes it (`None`: two of the target's intervals and its timeout, at
    /// least 5 s, as its view in the API gives them). Success is a fact the monitor shows only
    /// once the store has written the new baseline: the target view's `baseline` (digest and
    /// time) changed.
    ///
    /// The target is looked up by the API, not in a config file: the running monitor knows its
    /// fleet, servers added with `--import` included (an unknown name is its `404`).
    pub async fn accept(
        &self,
        target: &str,
        wait: Option<Duration>,
    ) -> Result<Outcome, AcceptError> {
        let path = format!("/api/v1/targets/{}", path_segment(target));
        let before = self.get_json(&path).await?;
        let wait = wait.unwrap_or_else(|| default_wait(&before));
        let drift_before = before
            .get("drift")
            .and_then(|d| d.as_str())
            .map(str::to_owned);
        let baseline_before = before.get("baseline").cloned();
        self.request(Method::POST, &format!("{path}/accept"))
            .await?;
        let until = Instant::now() + wait;
        loop {
            let view = self.get_json(&path).await?;
            let baseline = view.get("baseline").cloned();
            let pending = view
                .get("accept_pending")
                .and_then(serde_json::Value::as_bool)
                == Some(true);
            // Pending until the store has written the baseline the request asked for (a
            // baseline stored meanwhile by an earlier check does not answer it).
            if !pending {
                if baseline.is_some() && baseline != baseline_before {
                    return Ok(Outcome::Accepted { drift_before });
                }
                return Err(AcceptError::Lost);
            }
            if Instant::now() >= until {
                return Ok(Outcome::Pending { waited: wait });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn get_json(&self, path: &str) -> Result<serde_json::Value, AcceptError> {
        let body = self.request(Method::GET, path).await?;
        serde_json::from_slice(&body).map_err(|e| {
            AcceptError::Invalid(format!(
                "the monitor's API at {} answered {path} with something that is not JSON ({e}): is --url the monitor's API?",
                self.base
            ))
        })
    }

    /// One request; the body of a 2xx, or the API's error.
    async fn request(&self, method: Method, path: &str) -> Result<Vec<u8>, AcceptError> {
        let url = format!("{}{path}", self.base);
        let uri: Uri = url.parse().map_err(|_| {
            AcceptError::Invalid(format!(
                "{:?} is not a URL: give the monitor's API as http://host:port",
                self.base
            ))
        })?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(AcceptError::Invalid(format!(
                "{:?} must be http:// or https:// with a host: give the monitor's API as http://host:port",
                self.base
            )));
        }
        let auth: Vec<(String, String)> = self
            .token
            .iter()
            .map(|t| ("Authorization".to_owned(), format!("Bearer {t}")))
            .collect();
        let out = Outgoing {
            body: (method == Method::POST).then(String::new),
            method,
            uri,
            headers: vec![("Accept".to_owned(), "application/json".to_owned())],
            user_headers: &auth,
        };
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let mut client = HttpClient::new(Clock::start());
        let mut resp = match client.send(&out, false, deadline, &mut Vec::new()).await {
            Ok(r) => r,
            Err(SendError::Timeout) => {
                return Err(AcceptError::Timeout {
                    base: self.base.clone(),
                    timeout: REQUEST_TIMEOUT,
                });
            }
            Err(e) => {
                return Err(AcceptError::Unreachable {
                    base: self.base.clone(),
                    detail: e.to_string(),
                });
            }
        };
        let status = resp.status().as_u16();
        let (body, _) = read_body(resp.body_mut(), MAX_ANSWER, deadline).await;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        // The API's errors are `{"status": …, "error": "…"}`; anything else is quoted.
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_owned());
        let mut message = mcpulse_wire::text::message(&message).into_owned();
        if status == 401 && self.token.is_none() {
            message.push_str(
                " (the config has no [server] token to send: set token = \"${MCPULSE_API_TOKEN}\" there, as the monitor's)",
            );
        }
        Err(AcceptError::Refused { status, message })
    }
}

/// How long to wait for the check that takes an accept, from the target's view: two of its
/// intervals and its timeout, at least 5 s.
fn default_wait(view: &serde_json::Value) -> Duration {
    let ms = |k: &str| view.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let total = ms("interval_ms")
        .saturating_mul(2)
        .saturating_add(ms("timeout_ms"));
    Duration::from_millis(total).max(Duration::from_secs(5))
}

/// `name` as one path segment: unreserved characters as they are, every other byte
/// percent-encoded (a target name may hold spaces, `/` or `?`).
pub fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_are_one_path_segment() {
        assert_eq!(path_segment("search"), "search");
        assert_eq!(path_segment("a b/c?d"), "a%20b%2Fc%3Fd");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn the_default_wait_comes_from_the_targets_view() {
        let view = serde_json::json!({"interval_ms": 60_000, "timeout_ms": 10_000});
        assert_eq!(default_wait(&view), Duration::from_secs(130));
        let fast = serde_json::json!({"interval_ms": 1_000, "timeout_ms": 500});
        assert_eq!(default_wait(&fast), Duration::from_secs(5));
        assert_eq!(default_wait(&serde_json::json!({})), Duration::from_secs(5));
    }
}
