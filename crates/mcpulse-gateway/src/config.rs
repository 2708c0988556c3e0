//! The gateway's settings: `--config gateway.toml` or flags for the simple case, resolved into
//! one validated [`Gateway`]. The rest of the gateway only sees [`Gateway`].
//!
//! Conventions are the monitor's (crates/mcpulse-monitor/src/config): unknown keys are
//! rejected, durations and sizes are written as `mcpulse_wire::units` reads them (`"10m"`,
//! `"4MiB"`), `${VAR}` in the upstream's URL and command is read from the environment at load
//! time (so secrets stay out of the file, and logs hide them), and every error points at the
//! value at fault: `file:line:column: message` for the file, `--flag: message` for flags. Flags
//! are validated by the same code as the file: they are turned into the file's raw form first
//! ([`Raw`]), so the two can never disagree on a rule or a default.
//!
//! Defaults live in one place ([`Defaults`]) and are documented in docs/gateway.md
//! §Configuration.

use crate::checks::{Check, CheckSpec};
use crate::serve::http::HttpSettings;
use mcpulse_relay::supervise::{Backoff, Program, RestartPolicy, Settings, Timeouts};
use mcpulse_wire::redact::Secrets;
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// The defaults, in one place.
pub struct Defaults;

impl Defaults {
    /// Loopback: a gateway reachable from elsewhere is a choice made explicitly.
    pub const LISTEN: &'static str = "127.0.0.1:8080";
    /// Each legacy session is a process: 100 of them is already a lot of memory for a
    /// Node or Python server.
    pub const MAX_SESSIONS: usize = 100;
    /// Ten minutes without a request (and no open GET stream) ends a session and stops its
    /// child: shorter than supergateway's 30, whose abandoned children are a known complaint,
    /// long enough for a person thinking between two tool calls.
    pub const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
    /// Children for stateless 2026-07-28 requests.
    pub const STATELESS_POOL: usize = 2;
    /// The largest request body: MCP requests are small; a tool's arguments rarely pass a few
    /// KiB. Responses are bounded by `max_message_size` instead.
    pub const MAX_BODY: usize = 4 << 20;
    /// `tools/list` must list at least this many tools for `/readyz` to pass.
    pub const MIN_TOOLS: usize = 1;
    /// Runtime threads: one. A relay's work per request is its wake-ups; one thread keeps a
    /// request and its upstream exchange on one CPU, with no hand-off between threads (the
    /// figures: docs/benchmarks-gateway.md). More serve more calls a second on a machine
    /// with cores to spare.
    pub const THREADS: usize = 1;
    /// The name of the opt-in health tool when `--health-tool` is given without one.
    pub const HEALTH_TOOL: &'static str = "health_check";
    /// Connecting to an HTTP upstream.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
}

/// The most entries of `allowed_origins` / `allowed_hosts` (they are compared per request).
pub const MAX_ALLOWED: usize = 256;

/// Everything the gateway is told, resolved and validated.
#[derive(Debug, Clone)]
pub struct Gateway {
    /// Where `/mcp` is served (and the health endpoints, unless [`Gateway::health_listen`]).
    pub listen: SocketAddr,
    /// The health endpoints on a listener of their own.
    pub health_listen: Option<SocketAddr>,
    pub upstream: Upstream,
    pub door: Door,
    /// The most legacy sessions (each one a child, for a stdio upstream); past it, 503.
    pub max_sessions: usize,
    pub session_idle_timeout: Duration,
    /// Children serving stateless 2026-07-28 requests (stdio upstream).
    pub stateless_pool: usize,
    /// `/readyz` needs at least this many tools from `tools/list`.
    pub min_tools: usize,
    /// How often readiness asks the upstream `tools/list`, and how long one round may take.
    pub readiness_interval: Duration,
    pub readiness_timeout: Duration,
    /// The opt-in `health_check` tool's name.
    pub health_tool: Option<String>,
    /// The dependency checks (`[[checks]]`), validated.
    pub checks: Vec<Check>,
    /// Values taken from the environment (`${VAR}`): hidden wherever the gateway shows its
    /// settings (the start-up log line).
    pub secrets: Secrets,
    /// Keep-alives, health thresholds, connection limits ([`Streams`]).
    pub streams: Streams,
    /// Tool timeouts, breakers and load limits (`tool_timeout`, `[concurrency]`, `[[tools]]`).
    pub policies: crate::policy::config::Settings,
    /// The runtime's threads: 1 runs everything on the main thread (a single-threaded
    /// runtime), more a work-stealing pool of that many (the binary builds the runtime).
    pub threads: usize,
}

/// What the gateway serves.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A stdio server: one supervised child per legacy session.
    Stdio(Box<Settings>),
    /// A Streamable HTTP server.
    Http(Box<HttpSettings>),
}

/// What the front door lets in (Origin, Host, body size).
#[derive(Debug, Clone)]
pub struct Door {
    /// Origins allowed besides loopback ones (`http://localhost:*`, `http://127.0.0.1:*`,
    /// `http://[::1]:*`), compared whole (`scheme://host[:port]`, ASCII case ignored); `*`
    /// allows any.
    pub allowed_origins: Vec<String>,
    /// `Host` values allowed besides the listen address and loopback names (`localhost`,
    /// `127.0.0.1`, `[::1]`, with the listen port): DNS-rebinding protection. `*` turns it off.
    pub allowed_hosts: Vec<String>,
    pub max_body: usize,
}

/// A configuration error, located: in the file (`line` ≥ 1), or in a flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file, or `None` for the command line.
    pub file: Option<String>,
    /// 1-based; 0 when the error is about the whole file.
    pub line: usize,
    pub column: usize,
    /// The key (`max_sessions`), for a flag's error (`--max-sessions`).
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) if self.line == 0 => write!(f, "{file}: {}", self.message),
            Some(file) => write!(
                f,
                "{file}:{}:{}: {}: {}",
                self.line, self.column, self.key, self.message
            ),
            None if self.key.is_empty() => write!(f, "{}", self.message),
            None => write!(f, "{}: {}", flag_name(&self.key), self.message),
        }
    }
}

/// The flag that sets a key (the simple case has no flag for most `[upstream]` keys).
fn flag_name(key: &str) -> String {
    match key {
        "upstream.url" => "--upstream".to_owned(),
        "upstream" | "upstream.command" => "the server command (after --)".to_owned(),
        "allowed_origins" => "--allowed-origin".to_owned(),
        "allowed_hosts" => "--allowed-host".to_owned(),
        key => format!("--{}", key.replace('_', "-")),
    }
}

// ---- the raw form: the file, or the flags turned into it -----------------------------------

/// A value with where it was written (a flag's span is empty).
pub type At<T> = toml::Spanned<T>;

/// The file as written; flags fill in the same structure ([`Raw::from_flags`]).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    pub listen: Option<At<String>>,
    pub health_listen: Option<At<String>>,
    pub max_sessions: Option<At<i64>>,
    pub session_idle_timeout: Option<At<String>>,
    pub stateless_pool: Option<At<i64>>,
    pub allowed_origins: Option<At<Vec<String>>>,
    pub allowed_hosts: Option<At<Vec<String>>>,
    pub max_body: Option<At<String>>,
    pub min_tools: Option<At<i64>>,
    pub readiness_interval: Option<At<String>>,
    pub readiness_timeout: Option<At<String>>,
    pub health_tool: Option<At<String>>,
    pub threads: Option<At<i64>>,
    pub upstream: Option<At<RawUpstream>>,
    #[serde(default)]
    pub checks: Vec<CheckSpec>,
    // ---- streams, thresholds and connections ([`Streams`]) ----
    pub keepalive: Option<At<String>>,
    pub thresholds: Option<At<crate::thresholds::RawThresholds>>,
    pub max_connections: Option<At<i64>>,
    /// The call policies (crate::policy::config).
    pub tool_timeout: Option<At<String>>,
    pub concurrency: Option<At<crate::policy::config::RawConcurrency>>,
    pub retry_budget: Option<At<crate::policy::config::RawBudget>>,
    #[serde(default)]
    pub tools: Vec<At<crate::policy::config::RawTool>>,
}

/// `[upstream]`: `command` (stdio) or `url` (HTTP), and how the stdio child is supervised
/// (the same settings as `mcpulse supervise`'s flags, same defaults).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub command: Option<At<Vec<String>>>,
    pub url: Option<At<String>>,
    pub connect_timeout: Option<At<String>>,
    pub reply_timeout: Option<At<String>>,
    pub max_message_size: Option<At<String>>,
    pub heartbeat_interval: Option<At<String>>,
    pub heartbeat_timeout: Option<At<String>>,
    pub failures: Option<At<i64>>,
    pub backoff_initial: Option<At<String>>,
    pub backoff_max: Option<At<String>>,
    pub max_restarts: Option<At<i64>>,
    pub restart_window: Option<At<String>>,
    pub request_timeout: Option<At<String>>,
    pub stop_grace: Option<At<String>>,
}

/// The flags of the simple case, as the CLI parsed them (strings where the file has strings).
#[derive(Debug, Default, Clone)]
pub struct Flags {
    pub listen: Option<SocketAddr>,
    pub health_listen: Option<SocketAddr>,
    pub upstream: Option<String>,
    pub command: Vec<String>,
    pub max_sessions: Option<usize>,
    pub session_idle_timeout: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub min_tools: Option<usize>,
    pub health_tool: Option<String>,
    pub threads: Option<usize>,
}

fn flag<T>(v: T) -> At<T> {
    toml::Spanned::new(0..0, v)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Raw {
    /// The flags in the file's form.
    pub fn from_flags(f: &Flags) -> Raw {
        let upstream = (f.upstream.is_some() || !f.command.is_empty()).then(|| {
            flag(RawUpstream {
                command: (!f.command.is_empty()).then(|| flag(f.command.clone())),
                url: f.upstream.clone().map(flag),
                ..RawUpstream::default()
            })
        });
        Raw {
            listen: f.listen.map(|a| flag(a.to_string())),
            health_listen: f.health_listen.map(|a| flag(a.to_string())),
            max_sessions: f.max_sessions.map(|n| flag(count(n))),
            session_idle_timeout: f.session_idle_timeout.clone().map(flag),
            allowed_origins: (!f.allowed_origins.is_empty())
                .then(|| flag(f.allowed_origins.clone())),
            allowed_hosts: (!f.allowed_hosts.is_empty()).then(|| flag(f.allowed_hosts.clone())),
            min_tools: f.min_tools.map(|n| flag(count(n))),
            health_tool: f.health_tool.clone().map(flag),
            threads: f.threads.map(|n| flag(count(n))),
            upstream,
            ..Raw::default()
        }
    }
}

/// Where errors point: the file's text, or the command line.
pub(crate) struct Source<'a> {
    file: Option<&'a str>,
    text: &'a str,
}

impl Source<'_> {
    /// The file's text (empty for the command line).
    pub(crate) fn text(&self) -> &str {
        self.text
    }

    pub(crate) fn at<T>(&self, v: &At<T>, key: &str, message: impl Into<String>) -> ConfigError {
        self.offset(v.span().start, key, message)
    }

    /// The error at byte `offset` of the file (line and column counted only here, for the one
    /// error returned).
    pub(crate) fn offset(
        &self,
        offset: usize,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = match self.file {
            Some(_) => {
                let mut offset = offset.min(self.text.len());
                while !self.text.is_char_boundary(offset) {
                    offset -= 1;
                }
                let before = self.text.get(..offset).unwrap_or_default();
                let column = match before.rfind('\n') {
                    Some(i) => before.get(i + 1..).unwrap_or_default().chars().count() + 1,
                    None => before.chars().count() + 1,
                };
                (before.matches('\n').count() + 1, column)
            }
            None => (0, 0),
        };
        ConfigError {
            file: self.file.map(str::to_owned),
            line,
            column,
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

/// Resolves the flags of the simple case. `env` resolves `${VAR}`.
pub fn from_flags(
    flags: &Flags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Gateway, ConfigError> {
    let src = Source {
        file: None,
        text: "",
    };
    resolve(&Raw::from_flags(flags), &src, env)
}

/// Reads and validates a config file; `listen` (the command line's `--listen`) overrides the
/// file's.
pub fn load(
    path: &std::path::Path,
    env: &dyn Fn(&str) -> Option<String>,
    listen: Option<SocketAddr>,
) -> Result<Gateway, ConfigError> {
    let file = path.display().to_string();
    let whole = |message: String| ConfigError {
        file: Some(file.clone()),
        line: 0,
        column: 0,
        key: String::new(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| whole(format!("cannot read the config: {e}")))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        whole(format!(
            "the config is not UTF-8 (at byte {})",
            e.valid_up_to()
        ))
    })?;
    let mut gateway = parse(text, &file, env)?;
    if let Some(listen) = listen {
        gateway.listen = listen;
    }
    Ok(gateway)
}

/// Parses and validates config text (`file` names it in errors).
pub fn parse(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Gateway, ConfigError> {
    let src = Source {
        file: Some(file),
        text,
    };
    let raw: Raw = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        src.offset(offset, "", e.message().trim_end().to_owned())
    })?;
    resolve(&raw, &src, env).map_err(|mut e| {
        // A file error's key is already in its message when the TOML parser wrote it.
        if e.key.is_empty() {
            e.key = "config".into();
        }
        e
    })
}

fn address(src: &Source<'_>, v: &At<String>, key: &str) -> Result<SocketAddr, ConfigError> {
    v.get_ref().parse().map_err(|_| {
        src.at(
            v,
            key,
            format!(
                "{:?} is not an address: write IP:PORT, e.g. 127.0.0.1:8080",
                v.get_ref()
            ),
        )
    })
}

pub(crate) fn duration(
    src: &Source<'_>,
    v: &At<String>,
    key: &str,
) -> Result<Duration, ConfigError> {
    let d =
        mcpulse_wire::units::duration(v.get_ref()).map_err(|e| src.at(v, key, e.to_string()))?;
    if d > Duration::from_secs(86_400) {
        return Err(src.at(v, key, format!("{:?} is more than a day", v.get_ref())));
    }
    Ok(d)
}

fn size(src: &Source<'_>, v: &At<String>, key: &str) -> Result<usize, ConfigError> {
    let n = mcpulse_wire::units::size(v.get_ref()).map_err(|e| src.at(v, key, e.to_string()))?;
    if n < 1024 {
        return Err(src.at(
            v,
            key,
            format!("{:?} is too small: allow at least 1KiB", v.get_ref()),
        ));
    }
    Ok(n)
}

/// A count in `min..=max`.
pub(crate) fn number(
    src: &Source<'_>,
    v: &At<i64>,
    key: &str,
    (min, max): (usize, usize),
) -> Result<usize, ConfigError> {
    usize::try_from(*v.get_ref())
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            src.at(
                v,
                key,
                format!("{} is out of range: give {min} to {max}", v.get_ref()),
            )
        })
}

fn resolve(
    raw: &Raw,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Gateway, ConfigError> {
    let mut secrets = Secrets::default();
    let listen = match &raw.listen {
        Some(v) => address(src, v, "listen")?,
        None => Defaults::LISTEN
            .parse()
            .map_err(|_| src.offset(0, "listen", "the default listen address is invalid"))?,
    };
    let health_listen = raw
        .health_listen
        .as_ref()
        .map(|v| address(src, v, "health_listen"))
        .transpose()?;
    if let Some(v) = &raw.health_listen
        && health_listen == Some(listen)
        && listen.port() != 0
    {
        return Err(src.at(
            v,
            "health_listen",
            "is the same address as listen: leave it out to serve the health endpoints on /mcp's listener",
        ));
    }
    let max_sessions = match &raw.max_sessions {
        Some(v) => number(src, v, "max_sessions", (1, 100_000))?,
        None => Defaults::MAX_SESSIONS,
    };
    let threads = match &raw.threads {
        Some(v) => number(src, v, "threads", (1, 1024))?,
        None => Defaults::THREADS,
    };
    let session_idle_timeout = match &raw.session_idle_timeout {
        Some(v) => {
            let d = duration(src, v, "session_idle_timeout")?;
            if d < Duration::from_millis(100) {
                return Err(src.at(v, "session_idle_timeout", "must be at least 100ms"));
            }
            d
        }
        None => Defaults::SESSION_IDLE_TIMEOUT,
    };
    let stateless_pool = match &raw.stateless_pool {
        Some(v) => number(src, v, "stateless_pool", (1, 64))?,
        None => Defaults::STATELESS_POOL,
    };
    let allowed_origins = match &raw.allowed_origins {
        Some(v) => {
            if v.get_ref().len() > MAX_ALLOWED {
                return Err(src.at(v, "allowed_origins", format!("more than {MAX_ALLOWED}")));
            }
            for o in v.get_ref() {
                if o != "*" && !(o.starts_with("http://") || o.starts_with("https://")) {
                    return Err(src.at(
                        v,
                        "allowed_origins",
                        format!(
                            "{o:?} is not an origin: write scheme://host[:port], e.g. https://app.example.com, or * for any"
                        ),
                    ));
                }
            }
            v.get_ref()
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect()
        }
        None => Vec::new(),
    };
    let allowed_hosts = match &raw.allowed_hosts {
        Some(v) => {
            if v.get_ref().len() > MAX_ALLOWED {
                return Err(src.at(v, "allowed_hosts", format!("more than {MAX_ALLOWED}")));
            }
            if let Some(h) = v
                .get_ref()
                .iter()
                .find(|h| h.is_empty() || h.contains(['/', ' ']))
            {
                return Err(src.at(
                    v,
                    "allowed_hosts",
                    format!("{h:?} is not a host: write host or host:port, or * for any"),
                ));
            }
            v.get_ref().iter().map(|h| h.to_ascii_lowercase()).collect()
        }
        None => Vec::new(),
    };
    let max_body = match &raw.max_body {
        Some(v) => size(src, v, "max_body")?,
        None => Defaults::MAX_BODY,
    };
    let min_tools = match &raw.min_tools {
        Some(v) => number(src, v, "min_tools", (0, 100_000))?,
        None => Defaults::MIN_TOOLS,
    };
    let readiness_interval = match &raw.readiness_interval {
        Some(v) => {
            let d = duration(src, v, "readiness_interval")?;
            if d < crate::checks::MIN_INTERVAL {
                return Err(src.at(v, "readiness_interval", "must be at least 1s"));
            }
            d
        }
        None => crate::health::DEFAULT_READINESS_INTERVAL,
    };
    let readiness_timeout = match &raw.readiness_timeout {
        Some(v) => {
            let d = duration(src, v, "readiness_timeout")?;
            if d < Duration::from_millis(100) || d > readiness_interval {
                return Err(src.at(
                    v,
                    "readiness_timeout",
                    "must be at least 100ms and at most readiness_interval",
                ));
            }
            d
        }
        None => crate::health::DEFAULT_READINESS_TIMEOUT.min(readiness_interval),
    };
    let health_tool = match &raw.health_tool {
        Some(v) => {
            let name = v.get_ref();
            let ok = !name.is_empty()
                && name.len() <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !ok {
                return Err(src.at(
                    v,
                    "health_tool",
                    format!("{name:?}: a tool name is 1 to 128 of A-Z a-z 0-9 _ - ."),
                ));
            }
            Some(name.clone())
        }
        None => None,
    };
    let mut upstream = upstream(raw, src, env, &mut secrets)?;
    let streams = streams(raw, src)?;
    if let Upstream::Http(h) = &mut upstream {
        // Over an HTTP upstream the relay lists and answers the health tool itself.
        h.health_tool = health_tool.clone();
        h.keepalive = streams.keepalive;
        h.max_body = Some(max_body);
    }
    let checks = crate::checks::resolve_all(&raw.checks).map_err(|(i, e)| {
        // The spans of a check's keys are not kept (CheckSpec is plain serde): point at its
        // `[[checks]]` header, the i-th in the file.
        let at = src
            .text
            .match_indices("[[checks]]")
            .nth(i)
            .map(|(o, _)| o)
            .unwrap_or(0);
        src.offset(at, &format!("checks[{i}]"), e.to_string())
    })?;
    let policies = crate::policy::config::resolve(
        src,
        raw.tool_timeout.as_ref(),
        raw.concurrency.as_ref(),
        raw.retry_budget.as_ref(),
        &raw.tools,
        &raw.checks,
    )?;
    Ok(Gateway {
        listen,
        health_listen,
        upstream,
        door: Door {
            allowed_origins,
            allowed_hosts,
            max_body,
        },
        max_sessions,
        session_idle_timeout,
        stateless_pool,
        min_tools,
        readiness_interval,
        readiness_timeout,
        health_tool,
        checks,
        secrets,
        streams,
        policies,
        threads,
    })
}

fn upstream(
    raw: &Raw,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Secrets,
) -> Result<Upstream, ConfigError> {
    let none = || {
        src.offset(
            0,
            "upstream",
            "no upstream: give a stdio command after `--`, or --upstream URL (in a file: [upstream] command = [...] or url = \"...\")",
        )
    };
    let Some(u) = &raw.upstream else {
        return Err(none());
    };
    let up = u.get_ref();
    let mut expand = |offset: usize, key: &str, value: &str| {
        mcpulse_wire::env::expand_marked(value, env)
            .map(|e| {
                secrets.extend(&e.secrets);
                e.value
            })
            .map_err(|e| src.offset(offset, key, e.to_string()))
    };
    let max_message_size = match &up.max_message_size {
        Some(v) => size(src, v, "upstream.max_message_size")?,
        None => 64 << 20,
    };
    match (&up.command, &up.url) {
        (Some(_), Some(url)) => {
            Err(src.at(url, "upstream", "give either a command or a url, not both"))
        }
        (None, None) => Err(none()),
        (None, Some(url)) => {
            let value = expand(url.span().start, "upstream.url", url.get_ref())?;
            let parsed: Result<http::Uri, _> = value.parse();
            let ok = parsed.as_ref().is_ok_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
            });
            if !ok {
                return Err(src.at(
                    url,
                    "upstream.url",
                    "is not an http(s) URL: write e.g. https://internal.example/mcp",
                ));
            }
            for (key, v) in [
                (
                    "upstream.heartbeat_interval",
                    up.heartbeat_interval.as_ref(),
                ),
                ("upstream.request_timeout", up.request_timeout.as_ref()),
                ("upstream.stop_grace", up.stop_grace.as_ref()),
            ] {
                if let Some(v) = v {
                    return Err(src.at(v, key, "applies to a stdio upstream (command) only"));
                }
            }
            let mut http = HttpSettings::new(value);
            http.secrets = secrets.clone();
            http.connect_timeout = match &up.connect_timeout {
                Some(v) => duration(src, v, "upstream.connect_timeout")?,
                None => Defaults::CONNECT_TIMEOUT,
            };
            if let Some(v) = &up.reply_timeout {
                http.reply_timeout = duration(src, v, "upstream.reply_timeout")?;
            }
            http.max_message_size = max_message_size;
            Ok(Upstream::Http(Box::new(http)))
        }
        (Some(cmd), None) => {
            let mut argv = Vec::with_capacity(cmd.get_ref().len());
            for a in cmd.get_ref() {
                argv.push(expand(cmd.span().start, "upstream.command", a)?);
            }
            let Some((program, args)) = argv.split_first() else {
                return Err(src.at(cmd, "upstream.command", "is empty"));
            };
            if program.is_empty() {
                return Err(src.at(cmd, "upstream.command", "the program is empty"));
            }
            for (key, v) in [
                ("upstream.connect_timeout", up.connect_timeout.as_ref()),
                ("upstream.reply_timeout", up.reply_timeout.as_ref()),
            ] {
                if let Some(v) = v {
                    return Err(src.at(v, key, "applies to an HTTP upstream (url) only"));
                }
            }
            let mut s = Settings::new(Program {
                program: program.clone(),
                args: args.to_vec(),
            });
            s.max_message_size = max_message_size;
            // The gateway's clients are remote: a child's stderr is for the operator's log
            // (line by line, inert, secrets hidden), never in an error a client gets.
            s.stderr_in_errors = false;
            s.stderr_as_log_lines = true;
            s.secrets.extend(secrets);
            supervision(up, src, &mut s)?;
            Ok(Upstream::Stdio(Box::new(s)))
        }
    }
}

/// The stdio child's supervision, as `mcpulse supervise`'s flags set it.
fn supervision(up: &RawUpstream, src: &Source<'_>, s: &mut Settings) -> Result<(), ConfigError> {
    let d = |v: &Option<At<String>>, key: &str, default: Duration| match v {
        Some(v) => duration(src, v, key),
        None => Ok(default),
    };
    s.heartbeat_interval = d(
        &up.heartbeat_interval,
        "upstream.heartbeat_interval",
        s.heartbeat_interval,
    )?;
    s.heartbeat_timeout = d(
        &up.heartbeat_timeout,
        "upstream.heartbeat_timeout",
        s.heartbeat_timeout,
    )?;
    if let Some(v) = &up.failures {
        s.heartbeat.failures =
            u32::try_from(number(src, v, "upstream.failures", (1, 1000))?).unwrap_or(u32::MAX);
    }
    let backoff = Backoff {
        initial: d(
            &up.backoff_initial,
            "upstream.backoff_initial",
            s.restart.backoff.initial,
        )?,
        max: d(
            &up.backoff_max,
            "upstream.backoff_max",
            s.restart.backoff.max,
        )?,
    };
    if backoff.max < backoff.initial
        && let Some(v) = up.backoff_max.as_ref().or(up.backoff_initial.as_ref())
    {
        return Err(src.at(
            v,
            "upstream.backoff_max",
            "is shorter than upstream.backoff_initial",
        ));
    }
    s.restart = RestartPolicy {
        backoff,
        max_restarts: match &up.max_restarts {
            Some(v) => u32::try_from(number(src, v, "upstream.max_restarts", (0, 100_000))?)
                .unwrap_or(u32::MAX),
            None => s.restart.max_restarts,
        },
        window: d(
            &up.restart_window,
            "upstream.restart_window",
            s.restart.window,
        )?,
        reset_after: s.restart.reset_after,
    };
    s.timeouts = Timeouts {
        request: up
            .request_timeout
            .as_ref()
            .map(|v| duration(src, v, "upstream.request_timeout"))
            .transpose()?,
        tools: Vec::new(),
    };
    s.stop_grace = d(&up.stop_grace, "upstream.stop_grace", s.stop_grace)?;
    // As `mcpulse supervise`: a restarted child answers the replayed initialize within a few
    // heartbeat timeouts, or at least 10 s (npx and uv may download before they start).
    s.start_timeout = (s.heartbeat_timeout * 4).max(Duration::from_secs(10));
    Ok(())
}

// ---- streams, thresholds and connections (docs/gateway.md `## Streams, thresholds and
// connections`) -------------------------------------------------------------------------------

/// What bounds and keeps alive the gateway's streams and connections.
#[derive(Debug, Clone, PartialEq)]
pub struct Streams {
    /// An SSE comment on every response stream silent this long (`keepalive = "off"`: `None`).
    pub keepalive: Option<Duration>,
    /// `[thresholds]`: calls' error rate and p95 into `/readyz`.
    pub thresholds: crate::thresholds::Settings,
    /// Client connections open at once on `/mcp`'s listener; past it a new one is answered
    /// 503 and closed ([`crate::serve`]'s listener).
    pub max_connections: usize,
}

impl Default for Streams {
    fn default() -> Streams {
        Streams {
            keepalive: Some(mcpulse_policy::keepalive::DEFAULT_INTERVAL),
            thresholds: crate::thresholds::Settings::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// `max_connections` by default: room for every session and its streams (a client of
/// `max_sessions`' 100 holds a POST and a GET stream at once) and for the connections a
/// keep-alive pool leaves open, well under the common soft limit of 1024 open files, which the
/// stdio children's pipes share.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The shortest keep-alive interval: shorter would be a comment storm, not a keep-alive.
pub const MIN_KEEPALIVE: Duration = Duration::from_millis(100);

fn streams(raw: &Raw, src: &Source<'_>) -> Result<Streams, ConfigError> {
    let mut s = Streams::default();
    if let Some(v) = &raw.keepalive {
        s.keepalive = if v.get_ref().trim() == "off" {
            None
        } else {
            let d = duration(src, v, "keepalive")?;
            if d < MIN_KEEPALIVE {
                return Err(src.at(
                    v,
                    "keepalive",
                    "must be at least 100ms, or \"off\" to send none",
                ));
            }
            Some(d)
        };
    }
    if let Some(v) = &raw.max_connections {
        s.max_connections = number(src, v, "max_connections", (1, 1_000_000))?;
    }
    if let Some(t) = &raw.thresholds {
        s.thresholds = t
            .get_ref()
            .resolve()
            .map_err(|e| src.at(t, &e.key, format!("{}: {}", e.key, e.message)))?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn err(text: &str) -> String {
        match parse(text, "gateway.toml", &no_env) {
            Ok(g) => panic!("accepted: {g:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn readiness_rounds_fit_their_interval() {
        let e = err("readiness_timeout = \"20s\"\n[upstream]\ncommand = [\"x\"]\n");
        assert!(e.contains("at most readiness_interval"), "{e}");
        let e = err("readiness_interval = \"10ms\"\n[upstream]\ncommand = [\"x\"]\n");
        assert!(e.contains("readiness_interval: must be at least 1s"), "{e}");
        let g = parse(
            "readiness_interval = \"2s\"\n[upstream]\ncommand = [\"x\"]\n",
            "gateway.toml",
            &no_env,
        )
        .unwrap();
        assert_eq!(g.readiness_interval, Duration::from_secs(2));
        assert_eq!(
            g.readiness_timeout,
            Duration::from_secs(2),
            "the 5s default, capped"
        );
    }

    #[test]
    fn defaults_for_a_stdio_command() {
        let flags = Flags {
            command: vec!["server".into(), "--stdio".into()],
            ..Flags::default()
        };
        let g = from_flags(&flags, &no_env).unwrap();
        assert_eq!(g.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(g.max_sessions, 100);
        assert_eq!(g.session_idle_timeout, Duration::from_secs(600));
        assert_eq!(g.min_tools, 1);
        assert_eq!(g.health_tool, None);
        assert_eq!(g.threads, 1, "one thread unless asked");
        let Upstream::Stdio(s) = g.upstream else {
            panic!("not stdio")
        };
        assert_eq!(s.program.program, "server");
        assert_eq!(s.program.args, vec!["--stdio".to_owned()]);
    }

    #[test]
    fn the_file_and_the_flags_agree() {
        let text = r#"
listen = "127.0.0.1:9000"
health_listen = "0.0.0.0:9001"
max_sessions = 7
session_idle_timeout = "2m"
allowed_origins = ["https://app.example.com/"]
allowed_hosts = ["mcp.internal"]
health_tool = "health"
min_tools = 3
threads = 4

[upstream]
command = ["server", "${TOKEN}"]
heartbeat_interval = "10s"
request_timeout = "1m"
"#;
        let env = |k: &str| (k == "TOKEN").then(|| "s3cret-value".to_owned());
        let g = parse(text, "gateway.toml", &env).unwrap();
        assert_eq!(g.max_sessions, 7);
        assert_eq!(g.session_idle_timeout, Duration::from_secs(120));
        assert_eq!(g.door.allowed_origins, vec!["https://app.example.com"]);
        assert_eq!(g.door.allowed_hosts, vec!["mcp.internal"]);
        assert_eq!(g.health_tool.as_deref(), Some("health"));
        assert_eq!(g.min_tools, 3);
        assert_eq!(g.threads, 4);
        assert_eq!(g.health_listen.map(|a| a.port()), Some(9001));
        let Upstream::Stdio(s) = &g.upstream else {
            panic!("not stdio")
        };
        assert_eq!(s.program.args, vec!["s3cret-value".to_owned()]);
        assert_eq!(s.heartbeat_interval, Duration::from_secs(10));
        assert_eq!(s.timeouts.request, Some(Duration::from_secs(60)));
        assert_eq!(g.secrets.hide("x s3cret-value"), "x <redacted>");

        let flags = Flags {
            listen: Some("127.0.0.1:9000".parse().unwrap()),
            max_sessions: Some(7),
            session_idle_timeout: Some("2m".into()),
            upstream: Some("http://127.0.0.1:1/mcp".into()),
            health_tool: Some("health".into()),
            threads: Some(4),
            ..Flags::default()
        };
        let f = from_flags(&flags, &no_env).unwrap();
        assert_eq!(f.max_sessions, 7);
        assert_eq!(f.threads, 4);
        assert_eq!(f.session_idle_timeout, Duration::from_secs(120));
        assert!(matches!(f.upstream, Upstream::Http(ref h) if h.url == "http://127.0.0.1:1/mcp"));
        let Upstream::Http(h) = &f.upstream else {
            panic!("not http")
        };
        assert_eq!(
            h.health_tool.as_deref(),
            Some("health"),
            "the relay answers it"
        );
    }

    #[test]
    fn an_http_upstream_takes_its_timeouts_and_the_checks_are_validated() {
        let g = parse(
            "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\nconnect_timeout = \"2s\"\nreply_timeout = \"90s\"\n",
            "gateway.toml",
            &no_env,
        )
        .unwrap();
        let Upstream::Http(h) = &g.upstream else {
            panic!("not http")
        };
        assert_eq!(h.connect_timeout, Duration::from_secs(2));
        assert_eq!(h.reply_timeout, Duration::from_secs(90));
        assert_eq!(
            err("[upstream]\ncommand = [\"x\"]\nreply_timeout = \"1s\"\n"),
            "gateway.toml:3:17: upstream.reply_timeout: applies to an HTTP upstream (url) only"
        );
        let e = err(
            "[upstream]\ncommand = [\"x\"]\n\n[[checks]]\nname = \"db\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:5432\"\n\n[[checks]]\nname = \"db\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:5433\"\n",
        );
        assert!(e.starts_with("gateway.toml:9:1: checks[1]: "), "{e}");
    }

    #[test]
    fn errors_point_at_the_value() {
        assert_eq!(
            err("max_sessions = 0\n[upstream]\ncommand = [\"x\"]\n"),
            "gateway.toml:1:16: max_sessions: 0 is out of range: give 1 to 100000"
        );
        assert_eq!(
            err("threads = 0\n[upstream]\ncommand = [\"x\"]\n"),
            "gateway.toml:1:11: threads: 0 is out of range: give 1 to 1024"
        );
        assert_eq!(
            err("[upstream]\ncommand = [\"x\"]\nurl = \"http://a/mcp\"\n"),
            "gateway.toml:3:7: upstream: give either a command or a url, not both"
        );
        let e = err("listen = \"127.0.0.1:1\"\nmax_session = 3\n[upstream]\ncommand = [\"x\"]\n");
        assert!(e.starts_with("gateway.toml:2:1: "), "{e}");
        assert!(e.contains("max_session"), "{e}");
        let e = err("session_idle_timeout = \"ten\"\n[upstream]\ncommand = [\"x\"]\n");
        assert!(
            e.starts_with("gateway.toml:1:24: session_idle_timeout: "),
            "{e}"
        );
        let e = err("[upstream]\ncommand = [\"${NOPE}\"]\n");
        assert!(e.contains("NOPE is not set"), "{e}");
        let e = err("allowed_origins = [\"evil.example\"]\n[upstream]\ncommand = [\"x\"]\n");
        assert!(e.contains("is not an origin"), "{e}");
        let e = err("[upstream]\nurl = \"http://a/mcp\"\nstop_grace = \"1s\"\n");
        assert!(e.contains("stdio upstream"), "{e}");
        let e = err("listen = \"127.0.0.1:1\"\n");
        assert!(e.contains("no upstream"), "{e}");
    }

    #[test]
    fn flag_errors_name_the_flag() {
        let flags = Flags {
            command: vec!["x".into()],
            session_idle_timeout: Some("soon".into()),
            ..Flags::default()
        };
        let e = from_flags(&flags, &no_env).unwrap_err().to_string();
        assert!(e.starts_with("--session-idle-timeout: "), "{e}");
        let flags = Flags {
            command: vec!["x".into()],
            threads: Some(5000),
            ..Flags::default()
        };
        let e = from_flags(&flags, &no_env).unwrap_err().to_string();
        assert_eq!(e, "--threads: 5000 is out of range: give 1 to 1024");
        let flags = Flags {
            upstream: Some("ftp://x".into()),
            ..Flags::default()
        };
        let e = from_flags(&flags, &no_env).unwrap_err().to_string();
        assert!(e.starts_with("--upstream: is not an http(s) URL"), "{e}");
    }
}
