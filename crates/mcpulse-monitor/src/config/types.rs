//! The validated configuration: what the rest of the monitor sees of the file ([`Config`] and
//! its parts), with the defaults in one place ([`Defaults::default`]).
//!
//! This module does not read or check anything: [`super::parse`] builds these from the file
//! and [`super::import`] from MCP client configs.

use mcpulse_wire::call::{CallSpec, HealthToolMode};
use mcpulse_wire::redact::{self, Secrets};
use mcpulse_wire::version::EraMode;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub defaults: Defaults,
    pub targets: Vec<TargetConfig>,
    pub alerts: Vec<AlertConfig>,
    pub modules: BTreeMap<String, ModuleConfig>,
    pub maintenance: Vec<Maintenance>,
    /// What is valid but will not work as meant, one line each (`check-config` prints them,
    /// the daemon logs them): imported servers that were left out (naming the file, the server
    /// and why), and flap windows too short to ever see flapping
    /// ([`super::flap_window_warnings`]).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// A bearer token for the API (`/livez` and `/readyz` stay open). Every route but one only
    /// reads; `POST /api/v1/targets/{name}/accept` (a new drift baseline) needs it configured.
    pub token: Option<String>,
    /// Whether `/probe?target=<URL>` may probe URLs that are not configured targets.
    pub allow_url_probes: bool,
    /// Whether the API may listen beyond loopback without a token (something in front of it
    /// authenticates). Without it, such a config is refused: see [`ServerConfig::exposure`].
    pub allow_unauthenticated: bool,
}

impl ServerConfig {
    /// Refuses an API that anyone on the network could read (the fleet, its endpoints, its
    /// history): listening beyond loopback needs a token, or `allow_unauthenticated = true`.
    pub fn exposure(&self) -> Result<(), ExposureError> {
        if self.listen.ip().to_canonical().is_loopback()
            || self.token.is_some()
            || self.allow_unauthenticated
        {
            return Ok(());
        }
        Err(ExposureError {
            listen: self.listen,
        })
    }
}

/// An API that would listen beyond loopback with nothing guarding it; the message says the
/// three ways out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the API would listen on {listen} (beyond loopback) without a token, open to anyone who can reach it: \
     set token = \"${{MCPULSE_API_TOKEN}}\" in [server], listen on 127.0.0.1, \
     or set allow_unauthenticated = true if something in front of it authenticates"
)]
pub struct ExposureError {
    pub listen: SocketAddr,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StorageConfig {
    pub path: PathBuf,
    pub retention: Duration,
}

/// Per-target settings, with their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    pub interval: Duration,
    pub timeout: Duration,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub latency_budget: Duration,
    /// A target with more than `flap_threshold` transitions within `flap_window` is flapping.
    /// `None` (the default): derived from the target's interval and thresholds,
    /// [`Defaults::flap_window_or_derived`].
    pub flap_window: Option<Duration>,
    pub flap_threshold: u32,
    /// Re-send an open incident's alert this often (none: never).
    pub reminder: Option<Duration>,
    pub era: EraMode,
    /// Send the security checks' extra requests (the grade is then tracked).
    pub security: bool,
    /// Which health tool each check calls. Off by default in the monitor (the CLI's is
    /// `auto`): a check runs every interval across a fleet, a health tool may cost the server
    /// real work (a query to each dependency), and an upgrade must not change what the monitor
    /// sends to servers nobody asked it to call.
    pub health_tool: HealthToolMode,
    /// Call tools that are not annotated read-only, or are annotated destructive.
    pub allow_side_effects: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            failure_threshold: 3,
            success_threshold: 2,
            latency_budget: Duration::from_secs(3),
            flap_window: None,
            flap_threshold: 4,
            reminder: None,
            era: EraMode::Auto,
            security: true,
            health_tool: HealthToolMode::Off,
            allow_side_effects: false,
        }
    }
}

/// The checks a default flap window spans: Nagios keeps a service's last 21 states for its
/// flap detection (`MAX_STATE_HISTORY_ENTRIES`), so 20 possible transitions.
pub const FLAP_WINDOW_CHECKS: u32 = 21;

impl Defaults {
    /// The flap window these settings give: `flap_window` when set, else the last
    /// [`FLAP_WINDOW_CHECKS`] checks (21 × interval), or [`min_flap_window`] when the
    /// thresholds need more. A fixed default (it was 10 minutes) cannot fit every interval:
    /// with the default interval and thresholds, 5 transitions take at least 10 intervals,
    /// exactly 10 minutes, so a window of 10 minutes held them only when every check ran on
    /// the dot, and flapping was practically never detected.
    pub fn flap_window_or_derived(&self) -> Duration {
        self.flap_window.unwrap_or_else(|| {
            self.interval
                .saturating_mul(FLAP_WINDOW_CHECKS)
                .max(self.min_flap_window())
        })
    }

    /// [`min_flap_window`] for these settings.
    pub fn min_flap_window(&self) -> Duration {
        min_flap_window(
            self.interval,
            self.failure_threshold,
            self.success_threshold,
            self.flap_threshold,
        )
    }
}

/// The shortest flap window in which a target flapping as fast as its thresholds allow is
/// seen flapping: `flap_threshold + 1` transitions (flapping is *more* than `flap_threshold`),
/// each down after `failure` checks and back up after `success`, span `flap_threshold` gaps of
/// alternately `failure` and `success` intervals (the larger first when their number is odd),
/// and one interval more for checks that do not run on the dot (a probe's duration, a wait for
/// the concurrency limit). With the defaults (60 s, 3, 2, 4): 2 × (3 + 2) + 1 = 11 intervals,
/// 11 minutes.
pub fn min_flap_window(
    interval: Duration,
    failure: u32,
    success: u32,
    flap_threshold: u32,
) -> Duration {
    let gaps = u64::from(flap_threshold);
    let (f, s) = (u64::from(failure), u64::from(success));
    let checks = (gaps / 2)
        .saturating_mul(f.saturating_add(s))
        .saturating_add((gaps % 2).saturating_mul(f.max(s)))
        .saturating_add(1);
    interval.saturating_mul(u32::try_from(checks).unwrap_or(u32::MAX))
}

/// How to reach a target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Url(String),
    /// A stdio server; only ever from a config file, never from an API call.
    Command {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Only an HTTP health endpoint (`health_url` without `url` or `command`), e.g. the
    /// `/readyz` of `mcpulse supervise --listen`: each check is one read of it.
    Health(String),
}

#[derive(Clone, PartialEq)]
pub struct TargetConfig {
    pub name: String,
    pub endpoint: Endpoint,
    /// Header values with `${VAR}` expanded. Never logged or exposed.
    pub headers: Vec<(String, String)>,
    pub interval: Duration,
    pub timeout: Duration,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub latency_budget: Duration,
    pub flap_window: Duration,
    pub flap_threshold: u32,
    pub reminder: Option<Duration>,
    pub era: EraMode,
    pub security: bool,
    pub labels: BTreeMap<String, String>,
    /// Where it came from: the config file, or an imported client config.
    pub source: String,
    /// Values hidden wherever the target is shown or recorded (API, store, logs, transcripts):
    /// what an import's expansion read from the environment, and the target's `env` and header
    /// values of [`SECRET_MIN_LEN`] characters or more.
    pub secrets: Secrets,
    /// The server's HTTP health endpoint, read beside each check (`health_url`).
    pub health_url: Option<String>,
    /// `health_url = "auto"`: discover it on the url target's origin at each check (off by
    /// default: three more requests a check, and the first path that answers a health document
    /// wins, so a catch-all that answers every path could shadow the real one).
    pub health_discovery: bool,
    /// Synthetic tool calls made at each check (`[[targets.call]]`), in order.
    pub calls: Vec<CallSpec>,
    pub health_tool: HealthToolMode,
    pub allow_side_effects: bool,
}

/// Shows the endpoint as the API does, and only the names of headers and `env` variables.
impl std::fmt::Debug for TargetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (endpoint, env) = match &self.endpoint {
            Endpoint::Url(u) | Endpoint::Health(u) => {
                (redact::target_url(u, &self.secrets), Vec::new())
            }
            Endpoint::Command { argv, env } => (
                redact::command_line(argv, &self.secrets),
                env.keys().collect(),
            ),
        };
        let headers: Vec<&String> = self.headers.iter().map(|(k, _)| k).collect();
        f.debug_struct("TargetConfig")
            .field("name", &self.name)
            .field("endpoint", &endpoint)
            .field("env", &env)
            .field("headers", &headers)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("labels", &self.labels)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The shortest `env` or header value taken as a secret. Shorter ones (`1`, `true`, `debug`)
/// are settings, and hiding them would blank every `1` in a command line; values from
/// `${VAR}` are secret whatever their length.
pub const SECRET_MIN_LEN: usize = 8;

/// An alert sink.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertConfig {
    pub kind: SinkKind,
    /// Only these targets (by name); empty means all.
    pub targets: Vec<String>,
    /// Only these alert kinds (`down`, `degraded`, `recovered`, `drift`, `auth`, `protocol`,
    /// `grade`, `flapping`); empty means all.
    pub on: Vec<String>,
    /// What `${VAR}` read from the environment for this sink (its URL, routing key, secret,
    /// header values), whatever its length, and the path of a URL that came from there (where
    /// a Teams or Discord webhook keeps its token): hidden in every error the sink's
    /// deliveries and re-sends log or store, besides what [`crate::sink::delivery`] hides by
    /// kind.
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SinkKind {
    Webhook {
        url: String,
        secret: Option<String>,
        headers: Vec<(String, String)>,
    },
    Slack {
        url: String,
    },
    PagerDuty {
        routing_key: String,
        url: String,
    },
    Alertmanager {
        url: String,
        /// How often the open incidents are posted again (`resend`, default 1 minute, like
        /// Prometheus's `resend_delay`): Alertmanager keeps alerts in memory only, so a restart
        /// of it would otherwise lose a firing alert until its next reminder.
        resend: Duration,
    },
    Command {
        argv: Vec<String>,
        /// The monitor's variables passed on to the command, by name. It starts with a clean
        /// environment otherwise (`sink::command`).
        env: Vec<String>,
    },
}

/// A `/probe` module: how to probe, like blackbox_exporter's modules.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleConfig {
    pub era: EraMode,
    pub timeout: Duration,
    pub latency_budget: Duration,
    pub headers: Vec<(String, String)>,
    pub security: bool,
}

/// A maintenance window: alerts for the named targets (all when empty) are silenced.
#[derive(Debug, Clone, PartialEq)]
pub struct Maintenance {
    pub targets: Vec<String>,
    /// Unix milliseconds.
    pub start_ms: i64,
    pub end_ms: i64,
}

/// The alert kinds a sink can subscribe to.
pub const ALERT_KINDS: &[&str] = &[
    "down",
    "degraded",
    "recovered",
    "drift",
    "auth",
    "protocol",
    "grade",
    "flapping",
];
