//! The monitor's configuration: a TOML file parsed once into validated types.
//!
//! Every way a config can be wrong is rejected here with the file, line and column, and a
//! message that says what to write instead; the rest of the monitor only sees [`Config`].
//! Defaults live in one place ([`Defaults::default`]). `${VAR}` in header values and the API
//! token is read from the environment at load time, so secrets stay out of the file.

pub use mcpulse_wire::env::expand;
use mcpulse_wire::redact::{self, Secrets};
use mcpulse_wire::version::EraMode;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A configuration error, located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

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
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// A read-only bearer token for the API (`/livez` and `/readyz` stay open).
    pub token: Option<String>,
    /// Whether `/probe?target=<URL>` may probe URLs that are not configured targets.
    pub allow_url_probes: bool,
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
    pub flap_window: Duration,
    pub flap_threshold: u32,
    /// Re-send an open incident's alert this often (none: never).
    pub reminder: Option<Duration>,
    pub era: EraMode,
    /// Send the security checks' extra requests (the grade is then tracked).
    pub security: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            failure_threshold: 3,
            success_threshold: 2,
            latency_budget: Duration::from_secs(3),
            flap_window: Duration::from_secs(600),
            flap_threshold: 4,
            reminder: None,
            era: EraMode::Auto,
            security: true,
        }
    }
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
}

/// Shows the endpoint as the API does, and only the names of headers and `env` variables.
impl std::fmt::Debug for TargetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (endpoint, env) = match &self.endpoint {
            Endpoint::Url(u) => (redact::target_url(u, &self.secrets), Vec::new()),
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

// ---- the raw file -------------------------------------------------------------------------

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    storage: RawStorage,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    targets: Vec<toml::Spanned<RawTarget>>,
    #[serde(default)]
    alerts: Vec<toml::Spanned<RawAlert>>,
    #[serde(default)]
    modules: BTreeMap<String, toml::Spanned<RawModule>>,
    #[serde(default)]
    maintenance: Vec<toml::Spanned<RawMaintenance>>,
    /// MCP client config files whose `mcpServers` become targets.
    #[serde(default)]
    import: Vec<toml::Spanned<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<toml::Spanned<String>>,
    token: Option<String>,
    allow_url_probes: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    path: Option<String>,
    retention: Option<toml::Spanned<String>>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    interval: Option<toml::Spanned<String>>,
    timeout: Option<toml::Spanned<String>>,
    failure_threshold: Option<u32>,
    success_threshold: Option<u32>,
    latency_budget: Option<toml::Spanned<String>>,
    flap_window: Option<toml::Spanned<String>>,
    flap_threshold: Option<u32>,
    reminder: Option<toml::Spanned<String>>,
    era: Option<toml::Spanned<String>>,
    security: Option<bool>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: String,
    url: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    // The per-target settings (serde cannot flatten these and still deny unknown fields).
    interval: Option<String>,
    timeout: Option<String>,
    failure_threshold: Option<u32>,
    success_threshold: Option<u32>,
    latency_budget: Option<String>,
    flap_window: Option<String>,
    flap_threshold: Option<u32>,
    reminder: Option<String>,
    era: Option<String>,
    security: Option<bool>,
}

impl RawTarget {
    /// The settings, located at the target's table.
    fn settings(&self, span: std::ops::Range<usize>) -> RawDefaults {
        let sp = |v: &Option<String>| v.clone().map(|v| toml::Spanned::new(span.clone(), v));
        RawDefaults {
            interval: sp(&self.interval),
            timeout: sp(&self.timeout),
            failure_threshold: self.failure_threshold,
            success_threshold: self.success_threshold,
            latency_budget: sp(&self.latency_budget),
            flap_window: sp(&self.flap_window),
            flap_threshold: self.flap_threshold,
            reminder: sp(&self.reminder),
            era: sp(&self.era),
            security: self.security,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlert {
    kind: String,
    url: Option<String>,
    secret: Option<String>,
    routing_key: Option<String>,
    command: Option<Vec<String>>,
    /// Command sinks: the monitor's variables the command may see (beyond the clean base).
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    targets: Vec<String>,
    #[serde(default)]
    on: Vec<String>,
    resend: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModule {
    era: Option<String>,
    timeout: Option<String>,
    latency_budget: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    security: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMaintenance {
    #[serde(default)]
    targets: Vec<String>,
    /// RFC 3339, e.g. 2026-12-01T02:00:00Z
    start: String,
    end: String,
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

/// Where line/column come from.
struct Source<'a> {
    file: &'a str,
    text: &'a str,
}

impl Source<'_> {
    fn at(&self, offset: usize, message: impl Into<String>) -> ConfigError {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rfind('\n')
            .map(|i| before[i + 1..].chars().count() + 1)
            .unwrap_or(before.chars().count() + 1);
        ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }
}

/// Reads and validates a config file. `env` resolves `${VAR}`.
pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read the config: {e}"),
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&text, &file, &dir, env)
}

/// Parses and validates config text; `dir` anchors relative paths (storage, imports).
pub fn parse(
    text: &str,
    file: &str,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let src = Source { file, text };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        src.at(offset, e.message().trim_end().to_owned())
    })?;

    let listen = match &raw.server.listen {
        None => SocketAddr::from(([127, 0, 0, 1], 9477)),
        Some(l) => l.get_ref().parse().map_err(|_| {
            src.at(
                l.span().start,
                format!(
                    "listen {:?} is not an address: write e.g. \"127.0.0.1:9477\"",
                    l.get_ref()
                ),
            )
        })?,
    };
    let token = match &raw.server.token {
        Some(t) => Some(expand(t, env).map_err(|m| src.at(0, format!("server.token: {m}")))?),
        None => None,
    };
    let server = ServerConfig {
        listen,
        token,
        allow_url_probes: raw.server.allow_url_probes.unwrap_or(false),
    };

    let storage = StorageConfig {
        path: dir.join(raw.storage.path.as_deref().unwrap_or("mcpulse.db")),
        retention: match &raw.storage.retention {
            None => Duration::from_secs(30 * 86_400),
            Some(r) => duration(r.get_ref())
                .map_err(|m| src.at(r.span().start, format!("storage.retention: {m}")))?,
        },
    };

    let defaults = apply(&Defaults::default(), &raw.defaults, &src, "defaults")?;
    let mut targets = Vec::new();
    for t in &raw.targets {
        let span = t.span().start;
        let r = t.get_ref();
        let at = |m: String| src.at(span, format!("target {:?}: {m}", r.name));
        if r.name.trim().is_empty() || r.name.chars().any(|c| c.is_control()) {
            return Err(src.at(span, "a target needs a non-empty name"));
        }
        if targets.iter().any(|x: &TargetConfig| x.name == r.name) {
            return Err(at(
                "the name is used twice; names identify targets in history and alerts".into(),
            ));
        }
        let endpoint = match (&r.url, &r.command) {
            (Some(u), None) => {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(at(format!("url {u:?} must start with http:// or https://")));
                }
                Endpoint::Url(u.clone())
            }
            (None, Some(c)) if !c.is_empty() && !c[0].is_empty() => {
                let env_vals = r
                    .env
                    .iter()
                    .map(|(k, v)| expand(v, env).map(|v| (k.clone(), v)))
                    .collect::<Result<BTreeMap<_, _>, _>>()
                    .map_err(|m| at(format!("env: {m}")))?;
                Endpoint::Command {
                    argv: c.clone(),
                    env: env_vals,
                }
            }
            (None, Some(_)) => {
                return Err(at(
                    "command must name a program: command = [\"npx\", \"-y\", \"server\"]".into(),
                ));
            }
            (Some(_), Some(_)) => return Err(at("give either url or command, not both".into())),
            (None, None) => {
                return Err(at(
                    "give url = \"https://…\" or command = [\"program\", \"arg\"]".into(),
                ));
            }
        };
        if matches!(endpoint, Endpoint::Command { .. }) && !r.headers.is_empty() {
            return Err(at(
                "headers apply to url targets; a stdio server takes credentials from env".into(),
            ));
        }
        let headers = expand_headers(&r.headers, env).map_err(at)?;
        let s = apply(
            &defaults,
            &r.settings(t.span()),
            &src,
            &format!("target {:?}", r.name),
        )?;
        targets.push(target_from(
            r.name.clone(),
            endpoint,
            headers,
            &s,
            r.labels.clone(),
            file.to_owned(),
        ));
    }
    for imp in &raw.import {
        let path = dir.join(imp.get_ref());
        let imported =
            crate::import::read(&path, &defaults, env).map_err(|m| src.at(imp.span().start, m))?;
        for t in imported {
            if targets.iter().any(|x| x.name == t.name) {
                continue; // the config file's own definition wins
            }
            targets.push(t);
        }
    }
    for t in &targets {
        if t.timeout >= t.interval {
            let span = raw
                .targets
                .iter()
                .find(|x| x.get_ref().name == t.name)
                .map(|x| x.span().start)
                .unwrap_or(0);
            return Err(src.at(
                span,
                format!(
                    "target {:?}: timeout {:?} must be below the interval {:?}",
                    t.name, t.timeout, t.interval
                ),
            ));
        }
    }

    let mut alerts = Vec::new();
    for a in &raw.alerts {
        let span = a.span().start;
        let r = a.get_ref();
        let at = |m: String| src.at(span, format!("alert {:?}: {m}", r.kind));
        let need_url = || r.url.clone().ok_or_else(|| at("needs url = \"…\"".into()));
        let kind = match r.kind.as_str() {
            "webhook" => SinkKind::Webhook {
                url: need_url()?,
                secret: r.secret.as_deref().map(|s| expand(s, env)).transpose().map_err(|m| at(format!("secret: {m}")))?,
                headers: expand_headers(&r.headers, env).map_err(at)?,
            },
            "slack" => SinkKind::Slack { url: expand(&need_url()?, env).map_err(|m| at(format!("url: {m}")))? },
            "pagerduty" => SinkKind::PagerDuty {
                routing_key: expand(r.routing_key.as_deref().ok_or_else(|| at("needs routing_key = \"${PAGERDUTY_KEY}\"".into()))?, env).map_err(|m| at(format!("routing_key: {m}")))?,
                url: r.url.clone().unwrap_or_else(|| "https://events.pagerduty.com/v2/enqueue".into()),
            },
            "alertmanager" => SinkKind::Alertmanager {
                url: need_url()?,
                resend: match &r.resend {
                    Some(d) => duration(d).map_err(|m| at(format!("resend: {m}")))?,
                    None => DEFAULT_RESEND,
                },
            },
            "command" => match &r.command {
                Some(c) if !c.is_empty() => SinkKind::Command {
                    argv: c.clone(),
                    env: command_env(&r.env).map_err(at)?,
                },
                _ => return Err(at("needs command = [\"program\", \"arg\"]".into())),
            },
            other => return Err(src.at(span, format!("unknown alert kind {other:?}: use webhook, slack, pagerduty, alertmanager or command"))),
        };
        if !r.env.is_empty() && r.kind != "command" {
            return Err(at(
                "env applies to command sinks only (the variables the command may see)".into(),
            ));
        }
        if r.resend.is_some() && r.kind != "alertmanager" {
            return Err(at("resend applies to alertmanager sinks only".into()));
        }
        for on in &r.on {
            if !ALERT_KINDS.contains(&on.as_str()) {
                return Err(at(format!(
                    "unknown alert kind in on: {on:?}; use {}",
                    ALERT_KINDS.join(", ")
                )));
            }
        }
        for t in &r.targets {
            if !targets.iter().any(|x| &x.name == t) {
                return Err(at(format!(
                    "targets names {t:?}, which is not a configured target"
                )));
            }
        }
        alerts.push(AlertConfig {
            kind,
            targets: r.targets.clone(),
            on: r.on.clone(),
        });
    }

    let mut modules = BTreeMap::new();
    modules.insert(
        "default".to_owned(),
        ModuleConfig {
            era: defaults.era,
            timeout: defaults.timeout,
            latency_budget: defaults.latency_budget,
            headers: Vec::new(),
            security: false,
        },
    );
    for (name, m) in &raw.modules {
        let span = m.span().start;
        let r = m.get_ref();
        let at = |msg: String| src.at(span, format!("module {name:?}: {msg}"));
        modules.insert(
            name.clone(),
            ModuleConfig {
                era: r
                    .era
                    .as_deref()
                    .map(era)
                    .transpose()
                    .map_err(at)?
                    .unwrap_or(defaults.era),
                timeout: r
                    .timeout
                    .as_deref()
                    .map(duration)
                    .transpose()
                    .map_err(at)?
                    .unwrap_or(defaults.timeout),
                latency_budget: r
                    .latency_budget
                    .as_deref()
                    .map(duration)
                    .transpose()
                    .map_err(at)?
                    .unwrap_or(defaults.latency_budget),
                headers: expand_headers(&r.headers, env).map_err(at)?,
                security: r.security.unwrap_or(false),
            },
        );
    }

    let mut maintenance = Vec::new();
    for m in &raw.maintenance {
        let span = m.span().start;
        let r = m.get_ref();
        let start_ms = rfc3339_ms(&r.start).ok_or_else(|| {
            src.at(
                span,
                format!(
                    "maintenance start {:?} is not RFC 3339 (2026-12-01T02:00:00Z)",
                    r.start
                ),
            )
        })?;
        let end_ms = rfc3339_ms(&r.end).ok_or_else(|| {
            src.at(
                span,
                format!(
                    "maintenance end {:?} is not RFC 3339 (2026-12-01T04:00:00Z)",
                    r.end
                ),
            )
        })?;
        if end_ms <= start_ms {
            return Err(src.at(span, "maintenance end must be after its start"));
        }
        maintenance.push(Maintenance {
            targets: r.targets.clone(),
            start_ms,
            end_ms,
        });
    }

    Ok(Config {
        server,
        storage,
        defaults,
        targets,
        alerts,
        modules,
        maintenance,
    })
}

pub(crate) fn target_from(
    name: String,
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    s: &Defaults,
    labels: BTreeMap<String, String>,
    source: String,
) -> TargetConfig {
    let mut secrets = Secrets::default();
    let env_values = match &endpoint {
        Endpoint::Command { env, .. } => env.values().collect(),
        Endpoint::Url(_) => Vec::new(),
    };
    for v in env_values.into_iter().chain(headers.iter().map(|(_, v)| v)) {
        if v.len() >= SECRET_MIN_LEN {
            secrets.add(v);
        }
    }
    TargetConfig {
        secrets,
        name,
        endpoint,
        headers,
        interval: s.interval,
        timeout: s.timeout,
        failure_threshold: s.failure_threshold,
        success_threshold: s.success_threshold,
        latency_budget: s.latency_budget,
        flap_window: s.flap_window,
        flap_threshold: s.flap_threshold,
        reminder: s.reminder,
        era: s.era,
        security: s.security,
        labels,
        source,
    }
}

fn apply(
    base: &Defaults,
    raw: &RawDefaults,
    src: &Source<'_>,
    what: &str,
) -> Result<Defaults, ConfigError> {
    let dur = |f: &Option<toml::Spanned<String>>,
               key: &str,
               cur: Duration|
     -> Result<Duration, ConfigError> {
        match f {
            None => Ok(cur),
            Some(v) => duration(v.get_ref())
                .map_err(|m| src.at(v.span().start, format!("{what}: {key}: {m}"))),
        }
    };
    let mut d = base.clone();
    d.interval = dur(&raw.interval, "interval", d.interval)?;
    d.timeout = dur(&raw.timeout, "timeout", d.timeout)?;
    d.latency_budget = dur(&raw.latency_budget, "latency_budget", d.latency_budget)?;
    d.flap_window = dur(&raw.flap_window, "flap_window", d.flap_window)?;
    if let Some(r) = &raw.reminder {
        d.reminder = Some(
            duration(r.get_ref())
                .map_err(|m| src.at(r.span().start, format!("{what}: reminder: {m}")))?,
        );
    }
    if let Some(e) = &raw.era {
        d.era = era(e.get_ref()).map_err(|m| src.at(e.span().start, format!("{what}: {m}")))?;
    }
    for (v, key, slot) in [
        (
            raw.failure_threshold,
            "failure_threshold",
            &mut d.failure_threshold,
        ),
        (
            raw.success_threshold,
            "success_threshold",
            &mut d.success_threshold,
        ),
        (raw.flap_threshold, "flap_threshold", &mut d.flap_threshold),
    ] {
        if let Some(n) = v {
            if n == 0 {
                return Err(src.at(0, format!("{what}: {key} must be at least 1")));
            }
            *slot = n;
        }
    }
    if let Some(s) = raw.security {
        d.security = s;
    }
    if d.interval < Duration::from_secs(1) {
        return Err(src.at(
            raw.interval.as_ref().map(|v| v.span().start).unwrap_or(0),
            format!("{what}: interval must be at least 1s"),
        ));
    }
    Ok(d)
}

fn era(s: &str) -> Result<EraMode, String> {
    match s {
        "auto" => Ok(EraMode::Auto),
        "modern" => Ok(EraMode::Modern),
        "legacy" => Ok(EraMode::Legacy),
        other => Err(format!("era {other:?}: use auto, modern or legacy")),
    }
}

/// `10s`, `500ms`, `2m`, `1h`, `30d`.
/// How often an Alertmanager sink posts the open incidents again, by default.
pub const DEFAULT_RESEND: Duration = Duration::from_secs(60);

pub fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let i = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(i);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration: write e.g. 30s, 500ms, 5m, 1h or 30d"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        "" => return Err(format!("{s:?} has no unit: write e.g. {s}s")),
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?}; use ms, s, m, h or d"
            ));
        }
    };
    if !(secs.is_finite() && secs > 0.0 && secs <= 3.2e9) {
        return Err(format!("{s:?} must be more than zero"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A command sink's `env`: names of the monitor's variables, each at most once.
fn command_env(names: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if n.is_empty() || n.contains(['=', '\0']) {
            return Err(format!(
                "env {n:?} is not a variable name: write the names to pass on, e.g. env = [\"PAGER_TOKEN\"]"
            ));
        }
        if !out.contains(n) {
            out.push(n.clone());
        }
    }
    Ok(out)
}

fn expand_headers(
    h: &BTreeMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    h.iter()
        .map(|(k, v)| {
            if !mcpulse_wire::env::is_header_name(k) {
                return Err(format!("header name {k:?} is not a valid HTTP header name"));
            }
            let v = expand(v, env).map_err(|m| format!("header {k:?}: {m}"))?;
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(format!("header {k:?}: the value contains a line break"));
            }
            Ok((k.clone(), v))
        })
        .collect()
}

/// RFC 3339 UTC (`2026-12-01T02:00:00Z`, optional fraction and offset) to Unix milliseconds.
pub fn rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', 't', ' '])?;
    let mut d = date.split('-');
    let (y, mo, da): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (clock, offset_s) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else {
        let i = time.rfind(['+', '-'])?;
        let (c, off) = time.split_at(i);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':')?;
        (
            c,
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60),
        )
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut t = hms.split(':');
    let (h, mi, se): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let ms: i64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + da - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + se - offset_s) * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "TOKEN").then(|| "t0k".to_owned())
    }

    fn parse_ok(t: &str) -> Config {
        parse(t, "mcpulse.toml", Path::new("/etc/mcpulse"), &env).unwrap()
    }

    fn parse_err(t: &str) -> ConfigError {
        parse(t, "mcpulse.toml", Path::new("/etc/mcpulse"), &env).unwrap_err()
    }

    #[test]
    fn command_sink_env_is_an_allowlist_of_names() {
        let base = "[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        let c = parse_ok(&format!(
            "{base}[[alerts]]\nkind = \"command\"\ncommand = [\"notify\"]\nenv = [\"PAGER\", \"PAGER\"]\n\
             [[alerts]]\nkind = \"command\"\ncommand = [\"notify\"]\n"
        ));
        let envs: Vec<&Vec<String>> = c
            .alerts
            .iter()
            .filter_map(|a| match &a.kind {
                SinkKind::Command { env, .. } => Some(env),
                _ => None,
            })
            .collect();
        assert_eq!(envs, [&vec!["PAGER".to_owned()], &Vec::<String>::new()]);
        let e = parse_err(&format!(
            "{base}[[alerts]]\nkind = \"command\"\ncommand = [\"notify\"]\nenv = [\"A=b\"]\n"
        ));
        assert!(e.to_string().contains("is not a variable name"), "{e}");
        let e = parse_err(&format!(
            "{base}[[alerts]]\nkind = \"webhook\"\nurl = \"http://hook\"\nenv = [\"A\"]\n"
        ));
        assert!(
            e.to_string().contains("env applies to command sinks only"),
            "{e}"
        );
    }

    #[test]
    fn alertmanager_resend_defaults_to_a_minute_and_is_for_alertmanager_only() {
        let base = "[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        let c = parse_ok(&format!(
            "{base}[[alerts]]\nkind = \"alertmanager\"\nurl = \"http://am:9093\"\n\
             [[alerts]]\nkind = \"alertmanager\"\nurl = \"http://am2:9093\"\nresend = \"15s\"\n"
        ));
        let resends: Vec<Duration> = c
            .alerts
            .iter()
            .filter_map(|a| match &a.kind {
                SinkKind::Alertmanager { resend, .. } => Some(*resend),
                _ => None,
            })
            .collect();
        assert_eq!(resends, [DEFAULT_RESEND, Duration::from_secs(15)]);
        let e = parse_err(&format!(
            "{base}[[alerts]]\nkind = \"webhook\"\nurl = \"http://hook\"\nresend = \"15s\"\n"
        ));
        assert!(
            e.to_string()
                .contains("resend applies to alertmanager sinks only"),
            "{e}"
        );
        let e = parse_err(&format!(
            "{base}[[alerts]]\nkind = \"alertmanager\"\nurl = \"http://am\"\nresend = \"soon\"\n"
        ));
        assert!(
            e.to_string().contains("resend: \"soon\" is not a duration"),
            "{e}"
        );
    }

    #[test]
    fn the_issue_example() {
        let c = parse_ok(
            r#"
[server]
listen = "127.0.0.1:9477"
[storage]
path = "mcpulse.db"
retention = "30d"
[defaults]
interval = "60s"
timeout = "10s"
failure_threshold = 3
success_threshold = 2
[[targets]]
name = "search"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${TOKEN}" }
interval = "30s"
[[targets]]
name = "files"
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"]
[[alerts]]
kind = "webhook"
url = "https://hooks.example.com/mcp"
"#,
        );
        assert_eq!(c.storage.path, Path::new("/etc/mcpulse/mcpulse.db"));
        assert_eq!(c.storage.retention, Duration::from_secs(30 * 86_400));
        assert_eq!(c.targets[0].interval, Duration::from_secs(30));
        assert_eq!(
            c.targets[0].headers,
            vec![("Authorization".into(), "Bearer t0k".into())]
        );
        assert_eq!(c.targets[1].interval, Duration::from_secs(60));
        assert_eq!(c.targets[1].failure_threshold, 3);
        assert!(matches!(c.alerts[0].kind, SinkKind::Webhook { .. }));
        assert!(c.modules.contains_key("default"));
    }

    #[test]
    fn rejections_are_located() {
        let e = parse_err("[server]\nlisten = \"nowhere\"\n");
        assert_eq!((e.line, e.column), (2, 10), "{e}");
        let e = parse_err("[defaults]\nintervall = \"5s\"\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
        let e = parse_err("[[targets]]\nname = \"a\"\nurl = \"https://x\"\ninterval = \"5s\"\n");
        assert!(
            e.message.contains("timeout") && e.message.contains("below the interval"),
            "{e}"
        );
        assert_eq!(e.line, 1);
        let e = parse_err("[[targets]]\nname = \"a\"\n");
        assert!(e.message.contains("give url"), "{e}");
        let e = parse_err(
            "[[targets]]\nname = \"a\"\nurl = \"https://x\"\n[[targets]]\nname = \"a\"\nurl = \"https://y\"\n",
        );
        assert_eq!(e.line, 4, "{e}");
        let e = parse_err(
            "[[targets]]\nname = \"a\"\nurl = \"https://x\"\nheaders = { A = \"${NOPE}\" }\n",
        );
        assert!(e.message.contains("NOPE"), "{e}");
        let e = parse_err("[[alerts]]\nkind = \"pager\"\n");
        assert!(e.message.contains("unknown alert kind"), "{e}");
        let e = parse_err("[defaults]\ntimeout = \"ten\"\n");
        assert_eq!((e.line, e.column), (2, 11), "{e}");
        let e = parse_err("this is not toml");
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(duration("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert!(duration("30").is_err());
        assert!(duration("0s").is_err());
        assert_eq!(rfc3339_ms("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(
            rfc3339_ms("2026-12-01T02:00:00+01:00"),
            rfc3339_ms("2026-12-01T01:00:00Z")
        );
        assert_eq!(
            rfc3339_ms("2026-12-01T02:00:00.5Z").map(|m| m % 1000),
            Some(500)
        );
        assert_eq!(rfc3339_ms("yesterday"), None);
    }
}
