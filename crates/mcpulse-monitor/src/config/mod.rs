//! The monitor's configuration: a TOML file parsed once into validated types.
//!
//! Every way a config can be wrong is rejected here with the file, line and column of the value
//! at fault (each raw value keeps its span), and a message that says what to write instead; the
//! rest of the monitor only sees [`Config`]. The checks on names, headers and URLs
//! ([`check_name`], [`check_header_name`], [`check_header_value`], [`check_url`]) are the ones
//! the importer applies to client configs too. Validation is linear in the number of targets:
//! repeats are found in a set, and line numbers are counted only for the error returned.
//! Defaults live in one place ([`Defaults::default`]). `${VAR}` in header values, the API
//! token and every alert sink's URL, routing key and secret is read from the environment at
//! load time, so secrets stay out of the file; sink URLs are checked with [`check_url`] like
//! target URLs, so a sink that could never deliver is a config error, not alerts set aside.
//!
//! Layout: [`types`] (what a valid config is), [`check`] (the rules a target must pass, shared
//! with imports), [`import`] (MCP client config files), and this module, which reads the file
//! in named steps (server, storage, defaults, targets, imports, alerts, modules, maintenance).

pub mod check;
pub mod import;
pub mod types;

pub(crate) use check::target_from;
pub use check::{MAX_NAME_CHARS, check_header_name, check_header_value, check_name, check_url};
pub use types::{
    ALERT_KINDS, AlertConfig, Config, Defaults, Endpoint, Maintenance, ModuleConfig,
    SECRET_MIN_LEN, ServerConfig, SinkKind, StorageConfig, TargetConfig,
};

use mcpulse_wire::call::{CallSpec, DEFAULT_CALL_BUDGET_MS, Expectation, HealthToolMode};
pub use mcpulse_wire::env::expand;
use mcpulse_wire::redact::Secrets;
use mcpulse_wire::version::EraMode;
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A configuration error, located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 (with `column` 0) when the error is about the whole file (it cannot be read).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    /// `file:line:column: message`, or `file: message` for the whole file (no bogus `0:0`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

// ---- the raw file -------------------------------------------------------------------------

/// A value with where it was written, so that every error can point at it.
type At<T> = toml::Spanned<T>;

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
    targets: Vec<At<RawTarget>>,
    #[serde(default)]
    alerts: Vec<At<RawAlert>>,
    #[serde(default)]
    modules: BTreeMap<String, At<RawModule>>,
    #[serde(default)]
    maintenance: Vec<At<RawMaintenance>>,
    /// MCP client config files whose `mcpServers` become targets.
    #[serde(default)]
    import: Vec<At<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<At<String>>,
    token: Option<At<String>>,
    allow_url_probes: Option<bool>,
    allow_unauthenticated: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    path: Option<String>,
    retention: Option<At<String>>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    interval: Option<At<String>>,
    timeout: Option<At<String>>,
    failure_threshold: Option<At<u32>>,
    success_threshold: Option<At<u32>>,
    latency_budget: Option<At<String>>,
    flap_window: Option<At<String>>,
    flap_threshold: Option<At<u32>>,
    reminder: Option<At<String>>,
    era: Option<At<String>>,
    security: Option<bool>,
    health_tool: Option<At<String>>,
    allow_side_effects: Option<bool>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: At<String>,
    url: Option<At<String>>,
    command: Option<At<Vec<String>>>,
    #[serde(default)]
    env: BTreeMap<String, At<String>>,
    #[serde(default)]
    headers: BTreeMap<At<String>, At<String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    // The per-target settings (serde cannot flatten these and still deny unknown fields).
    interval: Option<At<String>>,
    timeout: Option<At<String>>,
    failure_threshold: Option<At<u32>>,
    success_threshold: Option<At<u32>>,
    latency_budget: Option<At<String>>,
    flap_window: Option<At<String>>,
    flap_threshold: Option<At<u32>>,
    reminder: Option<At<String>>,
    era: Option<At<String>>,
    security: Option<bool>,
    /// The server's HTTP health endpoint, read at each check (`mcpulse supervise`'s `/readyz`).
    health_url: Option<At<String>>,
    health_tool: Option<At<String>>,
    allow_side_effects: Option<bool>,
    /// Synthetic tool calls (`[[targets.call]]`).
    #[serde(default)]
    call: Vec<At<RawCall>>,
}

/// One `[[targets.call]]`: `mcpulse probe --call`'s options as a table.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawCall {
    tool: At<String>,
    args: Option<At<toml::Table>>,
    #[serde(default)]
    expect: Vec<At<String>>,
    budget: Option<At<String>>,
    #[serde(default)]
    critical: bool,
}

impl RawTarget {
    /// The per-target settings, each located where it was written.
    fn settings(&self) -> RawDefaults {
        RawDefaults {
            interval: self.interval.clone(),
            timeout: self.timeout.clone(),
            failure_threshold: self.failure_threshold.clone(),
            success_threshold: self.success_threshold.clone(),
            latency_budget: self.latency_budget.clone(),
            flap_window: self.flap_window.clone(),
            flap_threshold: self.flap_threshold.clone(),
            reminder: self.reminder.clone(),
            era: self.era.clone(),
            security: self.security,
            health_tool: self.health_tool.clone(),
            allow_side_effects: self.allow_side_effects,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlert {
    kind: String,
    url: Option<At<String>>,
    secret: Option<String>,
    routing_key: Option<At<String>>,
    command: Option<Vec<String>>,
    /// Command sinks: the monitor's variables the command may see (beyond the clean base).
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    headers: BTreeMap<At<String>, At<String>>,
    #[serde(default)]
    targets: Vec<At<String>>,
    #[serde(default)]
    on: Vec<String>,
    resend: Option<At<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModule {
    era: Option<At<String>>,
    timeout: Option<At<String>>,
    latency_budget: Option<At<String>>,
    #[serde(default)]
    headers: BTreeMap<At<String>, At<String>>,
    security: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMaintenance {
    #[serde(default)]
    targets: Vec<String>,
    /// RFC 3339, e.g. 2026-12-01T02:00:00Z
    start: At<String>,
    end: At<String>,
}

/// Where line/column come from.
struct Source<'a> {
    file: &'a str,
    text: &'a str,
}

impl Source<'_> {
    /// The error at byte `offset`. Counting lines costs a pass over the text, which is fine for
    /// the one error a parse returns; nothing on the success path calls this.
    fn at(&self, offset: usize, message: impl Into<String>) -> ConfigError {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = self.text.get(..offset).unwrap_or_default();
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
    load_listening(path, env, None)
}

/// [`load`], with `listen` (the command line's `--listen`) in place of `[server] listen`, so
/// that the rule on listening beyond loopback applies to the address actually bound.
pub fn load_listening(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    listen: Option<SocketAddr>,
) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| ConfigError {
        file: file.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read the config: {e}"),
    })?;
    let text = decode(&bytes, &file)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_listening(text, &file, &dir, env, listen)
}

/// The file as UTF-8, or an error located at the first byte that is not.
fn decode<'a>(bytes: &'a [u8], file: &str) -> Result<&'a str, ConfigError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let good = e.valid_up_to();
        // The bytes before `good` are valid UTF-8 by definition of `valid_up_to`.
        let text = std::str::from_utf8(bytes.get(..good).unwrap_or_default()).unwrap_or_default();
        let byte = bytes.get(good).copied().unwrap_or_default();
        Source { file, text }.at(
            good,
            format!(
                "the config is not UTF-8: byte 0x{byte:02x} at offset {good} is not valid UTF-8; save the file as UTF-8"
            ),
        )
    })
}

/// Parses and validates config text; `dir` anchors relative paths (storage, imports).
pub fn parse(
    text: &str,
    file: &str,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    parse_listening(text, file, dir, env, None)
}

fn parse_listening(
    text: &str,
    file: &str,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    listen: Option<SocketAddr>,
) -> Result<Config, ConfigError> {
    let src = Source { file, text };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        src.at(offset, e.message().trim_end().to_owned())
    })?;

    let server = server(&raw.server, &src, env, listen)?;
    let storage = storage(&raw.storage, &src, dir, env)?;
    let defaults = apply(&Defaults::default(), &raw.defaults, &src, "defaults")?;
    let (mut targets, mut names) = targets(&raw.targets, &defaults, &src, env)?;
    let warnings = imports(
        &raw.import,
        dir,
        &defaults,
        &src,
        env,
        (&mut targets, &mut names),
    )?;
    let mut warnings = warnings;
    warnings.extend(flap_window_warnings(&targets));
    let alerts = alerts(&raw.alerts, &names, &src, env)?;
    let modules = modules(&raw.modules, &defaults, &src, env)?;
    let maintenance = maintenance(&raw.maintenance, &src)?;
    Ok(Config {
        server,
        storage,
        defaults,
        targets,
        alerts,
        modules,
        maintenance,
        warnings,
    })
}

/// `[storage]`: the database path (relative to the config's directory) and the retention.
/// Without a path, the history goes to `$STATE_DIRECTORY` (its first entry) when set, as
/// systemd sets it for `StateDirectory=`: the config's own directory (/etc/mcpulse) is
/// read-only under ProtectSystem=strict, so the unit works with a plain config.
fn storage(
    raw: &RawStorage,
    src: &Source<'_>,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StorageConfig, ConfigError> {
    let state = env("STATE_DIRECTORY")
        .and_then(|s| s.split(':').next().map(str::to_owned))
        .filter(|s| !s.is_empty());
    let path = match (&raw.path, state) {
        (Some(p), _) => dir.join(p),
        (None, Some(state)) => Path::new(&state).join("mcpulse.db"),
        (None, None) => dir.join("mcpulse.db"),
    };
    Ok(StorageConfig {
        path,
        retention: match &raw.retention {
            None => Duration::from_secs(30 * 86_400),
            Some(r) => duration(r.get_ref())
                .map_err(|m| src.at(r.span().start, format!("storage.retention: {m}")))?,
        },
    })
}

/// `[[targets]]`, each validated, and the set of their names (no name twice).
fn targets(
    raw: &[At<RawTarget>],
    defaults: &Defaults,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<TargetConfig>, HashSet<String>), ConfigError> {
    let mut targets = Vec::with_capacity(raw.len());
    // The names so far, as a set: a repeat costs the same to find for the 100,000th target as
    // for the first (scanning the list instead made validating a large fleet quadratic).
    let mut names = HashSet::with_capacity(raw.len());
    for t in raw {
        let name = &t.get_ref().name;
        check_name(name.get_ref()).map_err(|e| src.at(name.span().start, e.to_string()))?;
        if !names.insert(name.get_ref().clone()) {
            return Err(src.at(
                name.span().start,
                format!(
                    "target {:?}: the name is used twice; names identify targets in history and alerts",
                    name.get_ref()
                ),
            ));
        }
        targets.push(target(t, defaults, src, env)?);
    }
    Ok((targets, names))
}

/// `import = [...]`: the servers of MCP client config files, added to `targets` (their names
/// joining `names`). Returns the warnings about servers left out.
fn imports(
    raw: &[At<String>],
    dir: &Path,
    defaults: &Defaults,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    (targets, names): (&mut Vec<TargetConfig>, &mut HashSet<String>),
) -> Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    for imp in raw {
        let at = |e: &dyn std::fmt::Display| src.at(imp.span().start, e.to_string());
        let path = dir.join(home(imp.get_ref(), env).map_err(|e| at(&e))?);
        let mut fleet = import::Fleet {
            targets,
            names,
            warnings: &mut warnings,
        };
        fleet.import(&path, defaults, env).map_err(|e| at(&e))?;
    }
    Ok(warnings)
}

/// A warning for each `flap_window` too short to hold the `flap_threshold + 1` transitions of
/// a target flapping as fast as its thresholds allow ([`types::min_flap_window`]): such
/// flapping is never detected. One line for the targets that share the settings (a window set
/// in `[defaults]` is named once, not once per target), naming the first few.
pub fn flap_window_warnings(targets: &[TargetConfig]) -> Vec<String> {
    // (window, interval, failure, success, threshold) -> the targets with them
    let mut short: BTreeMap<(Duration, Duration, u32, u32, u32), Vec<&str>> = BTreeMap::new();
    for t in targets {
        let need = types::min_flap_window(
            t.interval,
            t.failure_threshold,
            t.success_threshold,
            t.flap_threshold,
        );
        if t.flap_window < need {
            short
                .entry((
                    t.flap_window,
                    t.interval,
                    t.failure_threshold,
                    t.success_threshold,
                    t.flap_threshold,
                ))
                .or_default()
                .push(&t.name);
        }
    }
    short
        .into_iter()
        .map(|((window, interval, failure, success, threshold), names)| {
            let need = types::min_flap_window(interval, failure, success, threshold);
            let shown: Vec<String> = names.iter().take(3).map(|n| format!("{n:?}")).collect();
            let who = match names.len() {
                1 => format!("target {}", shown.join("")),
                n if n <= 3 => format!("targets {}", shown.join(", ")),
                n => format!("targets {} and {} more", shown.join(", "), n - 3),
            };
            format!(
                "{who}: flap_window {} cannot hold the {} transitions (more than flap_threshold {threshold}) of a server flapping as fast as failure_threshold {failure} and success_threshold {success} allow at interval {}, so that flapping is never detected: set flap_window to at least {}, or remove it (the default is 21 checks, more when the thresholds need it)",
                exact(window),
                u64::from(threshold) + 1,
                exact(interval),
                exact(need),
            )
        })
        .collect()
}

/// A duration as a config value would write it, exactly (`11m`, `90s`, `1500ms`).
fn exact(d: Duration) -> String {
    let ms = d.as_millis();
    let s = ms / 1000;
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if s != 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s != 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// `[[alerts]]`: the sinks, each naming only configured targets (`names`).
fn alerts(
    raw: &[At<RawAlert>],
    names: &HashSet<String>,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<AlertConfig>, ConfigError> {
    let mut alerts = Vec::new();
    for a in raw {
        let span = a.span().start;
        let r = a.get_ref();
        let at = |m: String| src.at(span, format!("alert {:?}: {m}", r.kind));
        let need_url = || r.url.as_ref().ok_or_else(|| at("needs url = \"…\"".into()));
        // What `${VAR}` reads for this sink: hidden wherever its errors land.
        let mut secrets = Secrets::default();
        let what = format!("alert {:?}", r.kind);
        let kind = match r.kind.as_str() {
            "webhook" => SinkKind::Webhook {
                url: sink_url(need_url()?, src, env, &what, &mut secrets)?,
                secret: r.secret.as_deref().map(|s| mcpulse_wire::env::expand_marked(s, env)).transpose().map_err(|m| at(format!("secret: {m}")))?.map(|e| {
                    secrets.extend(&e.secrets);
                    e.value
                }),
                headers: headers(&r.headers, src, env, &what, &mut secrets)?,
            },
            "slack" => SinkKind::Slack { url: sink_url(need_url()?, src, env, &what, &mut secrets)? },
            "pagerduty" => SinkKind::PagerDuty {
                routing_key: routing_key(r.routing_key.as_ref().ok_or_else(|| at("needs routing_key = \"${PAGERDUTY_KEY}\"".into()))?, src, env, &what, &mut secrets)?,
                url: match &r.url {
                    Some(u) => sink_url(u, src, env, &what, &mut secrets)?,
                    None => crate::sink::pagerduty::DEFAULT_URL.to_owned(),
                },
            },
            "alertmanager" => SinkKind::Alertmanager {
                url: sink_url(need_url()?, src, env, &what, &mut secrets)?,
                resend: match &r.resend {
                    Some(d) => duration(d.get_ref()).map_err(|m| src.at(d.span().start, format!("{what}: resend: {m}")))?,
                    None => DEFAULT_RESEND,
                },
            },
            "command" => match &r.command {
                Some(c) if !c.is_empty() => SinkKind::Command {
                    argv: c.clone(),
                    env: command_env(&r.env).map_err(|e| at(e.to_string()))?,
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
        if let Some(resend) = r.resend.as_ref().filter(|_| r.kind != "alertmanager") {
            return Err(src.at(
                resend.span().start,
                format!("{what}: resend applies to alertmanager sinks only"),
            ));
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
            if !names.contains(t.get_ref()) {
                return Err(src.at(
                    t.span().start,
                    format!(
                        "{what}: targets names {:?}, which is not a configured target",
                        t.get_ref()
                    ),
                ));
            }
        }
        alerts.push(AlertConfig {
            kind,
            targets: r.targets.iter().map(|t| t.get_ref().clone()).collect(),
            on: r.on.clone(),
            secrets,
        });
    }
    Ok(alerts)
}

/// A sink's `url`: `${VAR}` expanded, then checked as a target's URL is (http or https, a
/// host, no credentials), here rather than at the first alert, which would be set aside as
/// undeliverable with every one after it. A URL from the environment is secret (a Slack or
/// Teams webhook URL is the credential): the error shows it `<redacted>` and names the
/// variable, and the value and its path join `secrets`.
fn sink_url(
    u: &At<String>,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    what: &str,
    secrets: &mut Secrets,
) -> Result<String, ConfigError> {
    let at = |m: String| src.at(u.span().start, format!("{what}: {m}"));
    let e =
        mcpulse_wire::env::expand_marked(u.get_ref(), env).map_err(|m| at(format!("url: {m}")))?;
    if let Err(bad) = check_url(&e.value) {
        return Err(at(if e.secrets.is_empty() {
            // Written in the file, but its path is still a secret by nature (a Slack or Teams
            // webhook's token, a webhook's capability path): the error, which SIGHUP logs and
            // check-config prints, shows the scheme and host only.
            hide_sink_path(&e.value, &bad.to_string())
        } else {
            format!(
                "url {:?} comes from the environment, and its value is not a URL the monitor can post to: {}; set the variable to the sink's full URL, e.g. https://hooks.example.com/…",
                u.get_ref(),
                e.secrets.hide(&bad.to_string())
            )
        }));
    }
    if !e.secrets.is_empty() {
        secrets.extend(&e.secrets);
        if let Ok(uri) = e.value.parse::<http::Uri>()
            && let Some(pq) = uri.path_and_query().map(|p| p.as_str())
            && pq.chars().count() >= mcpulse_wire::redact::ARGV_SECRET_MIN_LEN
        {
            secrets.add(pq);
        }
    }
    Ok(e.value)
}

/// `text` (an error about the sink URL `url`) with the URL's path, query and fragment
/// hidden, as written and as [`mcpulse_wire::redact::url`] shows it (quoted or not).
fn hide_sink_path(url: &str, text: &str) -> String {
    // What follows the host's `/` (or the host, when the path starts with `?` or `#`).
    fn path_of(url: &str) -> Option<&str> {
        let after = url.split_once("://").map_or(url, |(_, rest)| rest);
        let i = after.find(['/', '?', '#'])?;
        let rest = after.get(i..)?;
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        (!rest.is_empty()).then_some(rest)
    }
    let shown = mcpulse_wire::redact::url(url);
    let mut secrets = Secrets::default();
    for u in [url, shown.as_str()] {
        if let Some(path) = path_of(u) {
            secrets.add(path);
            let quoted = format!("{path:?}");
            if let Some(inner) = quoted.get(1..quoted.len().saturating_sub(1)) {
                secrets.add(inner);
            }
        }
    }
    secrets.hide(text)
}

/// A PagerDuty sink's `routing_key`, `${VAR}` expanded: required, and not empty (PagerDuty
/// refuses every event without one, so each alert would be set aside at delivery).
fn routing_key(
    k: &At<String>,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    what: &str,
    secrets: &mut Secrets,
) -> Result<String, ConfigError> {
    let at = |m: String| src.at(k.span().start, format!("{what}: routing_key: {m}"));
    let e = mcpulse_wire::env::expand_marked(k.get_ref(), env).map_err(|m| at(m.to_string()))?;
    if e.value.trim().is_empty() {
        return Err(at(if e.secrets.is_empty() && !k.get_ref().contains("${") {
            "is empty: write routing_key = \"${PAGERDUTY_KEY}\" and set that variable to the integration key of the PagerDuty service".to_owned()
        } else {
            format!(
                "{:?} is empty (its environment variable is set, but empty), so PagerDuty would refuse every event: set the variable to the integration key of the PagerDuty service",
                k.get_ref()
            )
        }));
    }
    secrets.extend(&e.secrets);
    Ok(e.value)
}

/// `[modules.<name>]`: `/probe`'s settings for URLs outside the config, with `default` built
/// from `[defaults]`.
fn modules(
    raw: &BTreeMap<String, At<RawModule>>,
    defaults: &Defaults,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, ModuleConfig>, ConfigError> {
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
    for (name, m) in raw {
        let r = m.get_ref();
        let what = format!("module {name:?}");
        let at = |v: &At<String>, msg: String| src.at(v.span().start, format!("{what}: {msg}"));
        let dur = |v: &Option<At<String>>, key: &str, default: Duration| match v {
            None => Ok(default),
            Some(v) => duration(v.get_ref()).map_err(|m| at(v, format!("{key}: {m}"))),
        };
        modules.insert(
            name.clone(),
            ModuleConfig {
                era: match &r.era {
                    None => defaults.era,
                    Some(v) => era(v.get_ref()).map_err(|e| at(v, e.to_string()))?,
                },
                timeout: dur(&r.timeout, "timeout", defaults.timeout)?,
                latency_budget: dur(&r.latency_budget, "latency_budget", defaults.latency_budget)?,
                headers: headers(&r.headers, src, env, &what, &mut Secrets::default())?,
                security: r.security.unwrap_or(false),
            },
        );
    }
    Ok(modules)
}

/// `[[maintenance]]`: windows (RFC 3339 start and end) when alerts are held.
fn maintenance(
    raw: &[At<RawMaintenance>],
    src: &Source<'_>,
) -> Result<Vec<Maintenance>, ConfigError> {
    let mut maintenance = Vec::new();
    for m in raw {
        let r = m.get_ref();
        let time = |v: &At<String>, key: &str, example: &str| {
            rfc3339_ms(v.get_ref()).ok_or_else(|| {
                src.at(
                    v.span().start,
                    format!(
                        "maintenance {key} {:?} is not RFC 3339 ({example})",
                        v.get_ref()
                    ),
                )
            })
        };
        let start_ms = time(&r.start, "start", "2026-12-01T02:00:00Z")?;
        let end_ms = time(&r.end, "end", "2026-12-01T04:00:00Z")?;
        if end_ms <= start_ms {
            return Err(src.at(
                r.end.span().start,
                "maintenance end must be after its start",
            ));
        }
        maintenance.push(Maintenance {
            targets: r.targets.clone(),
            start_ms,
            end_ms,
        });
    }
    Ok(maintenance)
}

fn server(
    raw: &RawServer,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    listen_override: Option<SocketAddr>,
) -> Result<ServerConfig, ConfigError> {
    let listen = match &raw.listen {
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
    let token = match &raw.token {
        None => None,
        Some(t) => {
            let at = |m: &str| src.at(t.span().start, format!("server.token: {m}"));
            let value = expand(t.get_ref(), env).map_err(|e| at(&e.to_string()))?;
            // A client cannot send an empty bearer token, so an empty one locks everyone out.
            if value.trim().is_empty() {
                return Err(at(if t.get_ref().contains("${") {
                    "is empty (its environment variable is set, but empty), which would lock every API client out: set the variable to the token, or remove token"
                } else {
                    "is empty, which would lock every API client out: write token = \"${MCPULSE_API_TOKEN}\" and set that variable, or remove token"
                }));
            }
            Some(value)
        }
    };
    let server = ServerConfig {
        listen: listen_override.unwrap_or(listen),
        token,
        allow_url_probes: raw.allow_url_probes.unwrap_or(false),
        allow_unauthenticated: raw.allow_unauthenticated.unwrap_or(false),
    };
    server.exposure().map_err(|e| match listen_override {
        // Not the file's address: said as the command line's, about the file as a whole.
        Some(l) => ConfigError {
            file: src.file.to_owned(),
            line: 0,
            column: 0,
            message: format!("--listen {l}: {e}"),
        },
        None => src.at(
            raw.listen.as_ref().map_or(0, |l| l.span().start),
            e.to_string(),
        ),
    })?;
    Ok(server)
}

/// One `[[targets]]` entry, validated (its name has been checked by the caller).
fn target(
    t: &At<RawTarget>,
    defaults: &Defaults,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TargetConfig, ConfigError> {
    let r = t.get_ref();
    let name = r.name.get_ref();
    let what = format!("target {name:?}");
    let at = |offset: usize, m: &str| src.at(offset, format!("{what}: {m}"));
    // What `${VAR}` read from the environment (env and header values): secret by value.
    let mut secrets = Secrets::default();
    let endpoint = match (&r.url, &r.command) {
        (Some(u), None) => {
            check_url(u.get_ref()).map_err(|e| at(u.span().start, &e.to_string()))?;
            Endpoint::Url(u.get_ref().clone())
        }
        (None, Some(c)) => {
            if c.get_ref().first().is_none_or(String::is_empty) {
                return Err(at(
                    c.span().start,
                    "command must name a program: command = [\"npx\", \"-y\", \"server\"]",
                ));
            }
            let mut vars = BTreeMap::new();
            for (k, v) in &r.env {
                let e = mcpulse_wire::env::expand_marked(v.get_ref(), env)
                    .map_err(|m| at(v.span().start, &format!("env {k}: {m}")))?;
                secrets.extend(&e.secrets);
                vars.insert(k.clone(), e.value);
            }
            Endpoint::Command {
                argv: c.get_ref().clone(),
                env: vars,
            }
        }
        (Some(u), Some(_)) => {
            return Err(at(u.span().start, "give either url or command, not both"));
        }
        // Only a health endpoint (`mcpulse supervise`'s `/readyz`): judged from that alone.
        (None, None) => match &r.health_url {
            Some(u) if u.get_ref() != "auto" => {
                check_url(u.get_ref())
                    .map_err(|m| at(u.span().start, &format!("health_url: {m}")))?;
                health_only(r, &at)?;
                Endpoint::Health(u.get_ref().clone())
            }
            Some(u) => {
                return Err(at(
                    u.span().start,
                    "health_url = \"auto\" reads /healthz, /readyz and /health on a url target's origin: give url, or the endpoint's own URL (health_url = \"http://127.0.0.1:8080/readyz\")",
                ));
            }
            None => {
                return Err(at(
                    t.span().start,
                    "give url = \"https://…\", command = [\"program\", \"arg\"] or health_url = \"http://…/readyz\"",
                ));
            }
        },
    };
    if let Some(k) = r.headers.keys().next().filter(|_| r.url.is_none()) {
        return Err(at(
            k.span().start,
            "headers apply to url targets; a stdio server takes credentials from env",
        ));
    }
    if let Some(v) = r.env.values().next().filter(|_| r.command.is_none()) {
        return Err(at(
            v.span().start,
            "env applies to command targets; a url target takes credentials from headers",
        ));
    }
    let headers = headers(&r.headers, src, env, &what, &mut secrets)?;
    let s = apply(defaults, &r.settings(), src, &what)?;
    if s.timeout >= s.interval {
        // At the value that broke it: the target's own timeout or interval, else its table.
        let offset = r
            .timeout
            .as_ref()
            .or(r.interval.as_ref())
            .map_or(t.span().start, |v| v.span().start);
        return Err(at(
            offset,
            &format!(
                "timeout {:?} must be below the interval {:?}",
                s.timeout, s.interval
            ),
        ));
    }
    let mut target = target_from(
        name.clone(),
        endpoint,
        headers,
        &s,
        r.labels.clone(),
        src.file.to_owned(),
    );
    target.secrets.extend(&secrets);
    match &r.health_url {
        // The target's own endpoint, not a read beside an MCP check.
        _ if matches!(target.endpoint, Endpoint::Health(_)) => {
            // A health read has no MCP era and nothing to grade (`security`, which has no
            // line to point at, is ignored, as the `[defaults]` settings that do not apply).
            target.security = false;
            target.health_tool = HealthToolMode::Off;
            target.allow_side_effects = false;
        }
        None => {}
        Some(u) if u.get_ref() == "auto" => {
            if r.url.is_none() {
                return Err(at(
                    u.span().start,
                    "health_url = \"auto\" reads /healthz, /readyz and /health on a url target's origin; a command target has none: give the endpoint's URL",
                ));
            }
            target.health_discovery = true;
        }
        Some(u) => {
            check_url(u.get_ref()).map_err(|m| at(u.span().start, &format!("health_url: {m}")))?;
            target.health_url = Some(u.get_ref().clone());
        }
    }
    target.calls = r
        .call
        .iter()
        .map(|c| call(c, s.timeout, &at))
        .collect::<Result<_, _>>()?;
    Ok(target)
}

/// Rejects, at its line, what only an MCP target can use on a health-only target (one with
/// `health_url` and neither `url` nor `command`): its check is one GET of the endpoint.
fn health_only(r: &RawTarget, at: &dyn Fn(usize, &str) -> ConfigError) -> Result<(), ConfigError> {
    let why =
        "a health-only target (health_url without url or command) is one read of its endpoint";
    if let Some(c) = r.call.first() {
        return Err(at(
            c.span().start,
            &format!("call: {why}, it has no tools to call: give url or command"),
        ));
    }
    if let Some(h) = &r.health_tool {
        return Err(at(
            h.span().start,
            &format!("health_tool: {why}, it has no tools: give url or command"),
        ));
    }
    if let Some(k) = r.headers.keys().next() {
        return Err(at(
            k.span().start,
            &format!("headers: {why}, sent without headers: put credentials on a url target"),
        ));
    }
    if let Some(v) = r.env.values().next() {
        return Err(at(
            v.span().start,
            &format!("env: {why}, no process is started"),
        ));
    }
    if let Some(e) = &r.era {
        return Err(at(
            e.span().start,
            &format!("era: {why}, it has no MCP era"),
        ));
    }
    Ok(())
}

/// One `[[targets.call]]`, validated into the call spec `mcpulse probe --call` builds: the
/// same expectation parser, the same default budget. `at` locates an error in the target.
fn call(
    c: &At<RawCall>,
    timeout: Duration,
    at: &dyn Fn(usize, &str) -> ConfigError,
) -> Result<CallSpec, ConfigError> {
    let r = c.get_ref();
    let tool = r.tool.get_ref();
    if tool.is_empty() || tool.chars().any(char::is_control) {
        return Err(at(
            r.tool.span().start,
            "call: tool must name a tool (visible characters), e.g. tool = \"health_check\"",
        ));
    }
    let what = format!("call {tool:?}");
    let arguments = match &r.args {
        None => serde_json::Map::new(),
        Some(a) => {
            let mut m = serde_json::Map::new();
            for (k, v) in a.get_ref() {
                let v =
                    json(v).map_err(|e| at(a.span().start, &format!("{what}: args.{k}: {e}")))?;
                m.insert(k.clone(), v);
            }
            m
        }
    };
    let expect = r
        .expect
        .iter()
        .map(|e| {
            e.get_ref()
                .parse::<Expectation>()
                .map_err(|m| at(e.span().start, &format!("{what}: expect {m}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let budget_ms = match &r.budget {
        None => DEFAULT_CALL_BUDGET_MS.min(duration_ms(timeout)),
        Some(b) => {
            let d = duration(b.get_ref())
                .map_err(|m| at(b.span().start, &format!("{what}: budget: {m}")))?;
            // Zero is refused by the duration parser already.
            if d > timeout {
                return Err(at(
                    b.span().start,
                    &format!("{what}: budget {d:?} must be at most the timeout {timeout:?}"),
                ));
            }
            duration_ms(d)
        }
    };
    Ok(CallSpec {
        arguments,
        expect,
        budget_ms,
        critical: r.critical,
        ..CallSpec::new(tool.clone())
    })
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A TOML value as JSON (a call's `args`). Dates become their RFC 3339 text; a float JSON
/// cannot hold (nan, inf) is refused rather than sent as something else.
fn json(v: &toml::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(J::Number)
            .ok_or_else(|| format!("{f} is not a JSON number"))?,
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(json).collect::<Result<_, _>>()?),
        toml::Value::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| Ok((k.clone(), json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

/// A `health_tool` that names no mode or tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("health_tool {0:?}: use auto, off or a tool's name")]
struct HealthToolError(String);

/// `health_tool`: `auto`, `off` or a tool's name (as `mcpulse probe --health-tool`).
fn health_tool(s: &str) -> Result<HealthToolMode, HealthToolError> {
    match s {
        "auto" => Ok(HealthToolMode::Auto),
        "off" => Ok(HealthToolMode::Off),
        name if name.is_empty() || name.chars().any(char::is_control) => {
            Err(HealthToolError(name.to_owned()))
        }
        name => Ok(HealthToolMode::Named(name.to_owned())),
    }
}

/// Why `~` in an import path could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum HomeError {
    #[error(
        "import {path:?}: only ~ and ~/… are expanded (the current user's home); write the full path"
    )]
    OtherUser { path: String },
    #[error("import {path:?}: ~ needs HOME, which is not set; set it or write the full path")]
    NoHome { path: String },
}

/// `~` and `~/…` in an import path, from `HOME` (as a shell would expand it).
fn home(path: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, HomeError> {
    let rest = match path.strip_prefix('~') {
        None => return Ok(PathBuf::from(path)),
        Some(rest) => rest,
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(HomeError::OtherUser {
            path: path.to_owned(),
        });
    }
    let home = env("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| HomeError::NoHome {
            path: path.to_owned(),
        })?;
    Ok(PathBuf::from(format!("{home}{rest}")))
}

fn apply(
    base: &Defaults,
    raw: &RawDefaults,
    src: &Source<'_>,
    what: &str,
) -> Result<Defaults, ConfigError> {
    let dur = |v: &At<String>, key: &str| {
        duration(v.get_ref()).map_err(|m| src.at(v.span().start, format!("{what}: {key}: {m}")))
    };
    let mut d = base.clone();
    for (v, key, slot) in [
        (&raw.interval, "interval", &mut d.interval),
        (&raw.timeout, "timeout", &mut d.timeout),
        (&raw.latency_budget, "latency_budget", &mut d.latency_budget),
    ] {
        if let Some(v) = v {
            *slot = dur(v, key)?;
        }
    }
    if let Some(w) = &raw.flap_window {
        d.flap_window = Some(dur(w, "flap_window")?);
    }
    if let Some(r) = &raw.reminder {
        d.reminder = Some(dur(r, "reminder")?);
    }
    if let Some(e) = &raw.era {
        d.era = era(e.get_ref()).map_err(|m| src.at(e.span().start, format!("{what}: {m}")))?;
    }
    for (v, key, slot) in [
        (
            &raw.failure_threshold,
            "failure_threshold",
            &mut d.failure_threshold,
        ),
        (
            &raw.success_threshold,
            "success_threshold",
            &mut d.success_threshold,
        ),
        (&raw.flap_threshold, "flap_threshold", &mut d.flap_threshold),
    ] {
        if let Some(n) = v {
            if *n.get_ref() == 0 {
                return Err(src.at(n.span().start, format!("{what}: {key} must be at least 1")));
            }
            *slot = *n.get_ref();
        }
    }
    if let Some(s) = raw.security {
        d.security = s;
    }
    if let Some(h) = &raw.health_tool {
        d.health_tool =
            health_tool(h.get_ref()).map_err(|m| src.at(h.span().start, format!("{what}: {m}")))?;
    }
    if let Some(a) = raw.allow_side_effects {
        d.allow_side_effects = a;
    }
    if d.interval < Duration::from_secs(1) {
        return Err(src.at(
            raw.interval.as_ref().map(|v| v.span().start).unwrap_or(0),
            format!("{what}: interval must be at least 1s"),
        ));
    }
    Ok(d)
}

/// An `era` that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("era {0:?}: use auto, modern or legacy")]
struct EraError(String);

fn era(s: &str) -> Result<EraMode, EraError> {
    match s {
        "auto" => Ok(EraMode::Auto),
        "modern" => Ok(EraMode::Modern),
        "legacy" => Ok(EraMode::Legacy),
        other => Err(EraError(other.to_owned())),
    }
}

/// How often an Alertmanager sink posts the open incidents again, by default.
pub const DEFAULT_RESEND: Duration = Duration::from_secs(60);

/// A duration setting: the forms of [`mcpulse_wire::units::duration`] (`10s`, `500ms`, `2m`,
/// `1h`, `30d`, a bare number of seconds), up to 37,000 days.
pub fn duration(s: &str) -> Result<Duration, mcpulse_wire::units::UnitError> {
    mcpulse_wire::units::duration(s)
}

/// A command sink's `env` entry that cannot name a variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "env {0:?} is not a variable name: write the names to pass on, e.g. env = [\"PAGER_TOKEN\"]"
)]
struct NotAVariable(String);

/// A command sink's `env`: names of the monitor's variables, each at most once.
fn command_env(names: &[String]) -> Result<Vec<String>, NotAVariable> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if n.is_empty() || n.contains(['=', '\0']) {
            return Err(NotAVariable(n.clone()));
        }
        if !out.contains(n) {
            out.push(n.clone());
        }
    }
    Ok(out)
}

/// A `headers` table: names checked, values expanded and checked, each error at its key or
/// value.
///
/// What `${VAR}` read from the environment goes into `secrets`: it is secret wherever it
/// lands (a server that echoes its token in an error must not put it in the API).
fn headers(
    h: &BTreeMap<At<String>, At<String>>,
    src: &Source<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    what: &str,
    secrets: &mut Secrets,
) -> Result<Vec<(String, String)>, ConfigError> {
    h.iter()
        .map(|(k, v)| {
            let name = k.get_ref();
            check_header_name(name).map_err(|e| src.at(k.span().start, format!("{what}: {e}")))?;
            let at = |m: &dyn std::fmt::Display| src.at(v.span().start, format!("{what}: {m}"));
            let e = mcpulse_wire::env::expand_marked(v.get_ref(), env)
                .map_err(|e| at(&format_args!("header {name:?}: {e}")))?;
            secrets.extend(&e.secrets);
            check_header_value(name, &e.value).map_err(|e| at(&e))?;
            Ok((name.clone(), e.value))
        })
        .collect()
}

/// RFC 3339 (`2026-12-01T02:00:00Z`, optional fraction and offset) to Unix milliseconds: see
/// [`mcpulse_wire::units::parse_rfc3339`].
pub fn rfc3339_ms(s: &str) -> Option<i64> {
    mcpulse_wire::units::parse_rfc3339(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "TOKEN" => Some("t0k".to_owned()),
            "EMPTY" => Some(String::new()),
            "CRLF" => Some("a\r\nX-Injected: 1".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn what_a_header_or_env_read_from_the_environment_is_secret_however_short() {
        let c = parse_ok(
            "[[targets]]\nname = \"h\"\nurl = \"https://x.example/mcp\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }\n\n[[targets]]\nname = \"c\"\ncommand = [\"srv\"]\nenv = { K = \"${TOKEN}\" }\n",
        );
        for t in &c.targets {
            assert_eq!(
                t.secrets.hide("the server said: token t0k is revoked"),
                "the server said: token <redacted> is revoked",
                "{}",
                t.name
            );
        }
    }

    fn parse_ok(t: &str) -> Config {
        parse(t, "mcpulse.toml", Path::new("/etc/mcpulse"), &env).unwrap()
    }

    fn parse_err(t: &str) -> ConfigError {
        parse(t, "mcpulse.toml", Path::new("/etc/mcpulse"), &env).unwrap_err()
    }

    #[test]
    fn calls_and_the_health_tool_become_the_plans_call_specs() {
        let c = parse_ok(
            "[defaults]\nhealth_tool = \"auto\"\n\n[[targets]]\nname = \"s\"\nurl = \"https://x.example/mcp\"\nallow_side_effects = true\n\n[[targets.call]]\ntool = \"echo\"\nargs = { message = \"hi\", n = 2, nested = { on = [true, 1.5] } }\nexpect = ['/content/0/text contains \"hi\"']\nbudget = \"2s\"\ncritical = true\n\n[[targets.call]]\ntool = \"add\"\n\n[[targets]]\nname = \"t\"\nurl = \"https://y.example/mcp\"\nhealth_tool = \"db_health\"\n",
        );
        let s = &c.targets[0];
        assert_eq!(s.health_tool, HealthToolMode::Auto, "from [defaults]");
        assert!(s.allow_side_effects);
        assert_eq!(s.calls.len(), 2);
        assert_eq!(s.calls[0].tool, "echo");
        assert_eq!(
            serde_json::Value::Object(s.calls[0].arguments.clone()),
            serde_json::json!({"message": "hi", "n": 2, "nested": {"on": [true, 1.5]}})
        );
        assert_eq!(s.calls[0].expect.len(), 1);
        assert_eq!(s.calls[0].budget_ms, 2000);
        assert!(s.calls[0].critical);
        assert_eq!(s.calls[1].budget_ms, DEFAULT_CALL_BUDGET_MS);
        assert!(!s.calls[1].critical);
        let t = &c.targets[1];
        assert_eq!(t.health_tool, HealthToolMode::Named("db_health".into()));
        assert!(!t.allow_side_effects && t.calls.is_empty());
        // The monitor's own default: no health tool, no side effects.
        let d = Defaults::default();
        assert_eq!(d.health_tool, HealthToolMode::Off);
        assert!(!d.allow_side_effects);
    }

    /// One case per way a call or health-tool setting is rejected, each located at the value.
    #[test]
    fn bad_calls_and_health_tools_are_rejected_where_they_are_written() {
        let head = "[[targets]]\nname = \"s\"\nurl = \"https://x.example/mcp\"\n";
        let cases: &[(&str, &str, &str)] = &[
            (
                "health_tool = \"\"\n",
                ":4:15",
                "health_tool \"\": use auto, off or a tool's name",
            ),
            (
                "[[targets.call]]\ntool = \"\"\n",
                ":5:8",
                "call: tool must name a tool",
            ),
            (
                "[[targets.call]]\nargs = {}\n",
                ":4:1",
                "missing field `tool`",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nbogus = 1\n",
                ":6:1",
                "unknown field `bogus`",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nargs = \"{}\"\n",
                ":6:8",
                "invalid type",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nargs = { x = nan }\n",
                ":6:8",
                "call \"e\": args.x: NaN is not a JSON number",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nexpect = [\"status == ok\"]\n",
                ":6:11",
                "call \"e\": expect \"status == ok\": the path must be a JSON pointer",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nexpect = [\"/s ~ 1\"]\n",
                ":6:11",
                "unknown operator \"~\"",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nbudget = \"soon\"\n",
                ":6:10",
                "call \"e\": budget: ",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nbudget = \"0s\"\n",
                ":6:10",
                "budget: \"0s\" must be more than zero",
            ),
            (
                "[[targets.call]]\ntool = \"e\"\nbudget = \"11s\"\n",
                ":6:10",
                "must be at most the timeout 10s",
            ),
            ("allow_side_effects = \"yes\"\n", ":4:22", "invalid type"),
        ];
        for (tail, at, message) in cases {
            let e = parse_err(&format!("{head}{tail}"));
            let shown = e.to_string();
            assert!(
                shown.starts_with(&format!("mcpulse.toml{at}:")) && shown.contains(message),
                "{tail}\nexpected mcpulse.toml{at}: …{message}, got {shown}"
            );
        }
        let c = parse_ok(&format!("{head}health_url = \"auto\"\n"));
        assert!(c.targets[0].health_discovery && c.targets[0].health_url.is_none());
        assert!(
            !parse_ok(head).targets[0].health_discovery,
            "off by default"
        );
        let e =
            parse_err("[[targets]]\nname = \"s\"\ncommand = [\"srv\"]\nhealth_url = \"auto\"\n");
        assert!(
            e.to_string()
                .starts_with("mcpulse.toml:4:14: target \"s\": health_url = \"auto\" reads"),
            "{e}"
        );
        let e = parse_err("[defaults]\nhealth_tool = \"\\u0007\"\n");
        assert!(
            e.to_string()
                .starts_with("mcpulse.toml:2:15: defaults: health_tool"),
            "{e}"
        );
    }

    #[test]
    fn a_health_url_is_an_http_url_on_a_target() {
        let c = parse_ok(
            "[[targets]]\nname = \"s\"\ncommand = [\"mcpulse\", \"supervise\", \"--listen\", \"127.0.0.1:9478\", \"--\", \"srv\"]\nhealth_url = \"http://127.0.0.1:9478/readyz\"\n",
        );
        assert_eq!(
            c.targets[0].health_url.as_deref(),
            Some("http://127.0.0.1:9478/readyz")
        );
        let e = parse_err(
            "[[targets]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nhealth_url = \"file:///etc/passwd\"\n",
        );
        assert!(e.to_string().contains("health_url: url"), "{e}");
        assert!(e.to_string().starts_with("mcpulse.toml:4:"), "{e}");
    }

    #[test]
    fn a_health_url_alone_is_a_health_only_target() {
        let head = "[defaults]\nera = \"legacy\"\nhealth_tool = \"auto\"\n\n[[targets]]\nname = \"s\"\nhealth_url = \"http://127.0.0.1:9478/readyz\"\n";
        let c = parse_ok(head);
        let t = &c.targets[0];
        assert_eq!(
            t.endpoint,
            Endpoint::Health("http://127.0.0.1:9478/readyz".into())
        );
        // The [defaults] that only an MCP check uses do not reach it.
        assert!(t.health_url.is_none() && !t.security && t.calls.is_empty());
        assert_eq!(t.health_tool, HealthToolMode::Off);
        // What only an MCP target can use is rejected at its line.
        let cases = [
            ("era = \"modern\"\n", ":8:7", "era: a health-only target"),
            (
                "health_tool = \"h\"\n",
                ":8:15",
                "health_tool: a health-only target",
            ),
            (
                "headers = { X = \"y\" }\n",
                ":8:13",
                "headers: a health-only target",
            ),
            (
                "env = { X = \"y\" }\n",
                ":8:13",
                "env: a health-only target",
            ),
            (
                "[[targets.call]]\ntool = \"t\"\n",
                ":8:1",
                "call: a health-only target",
            ),
        ];
        for (tail, at, message) in cases {
            let shown = parse_err(&format!("{head}{tail}")).to_string();
            assert!(
                shown.starts_with(&format!("mcpulse.toml{at}: target \"s\": "))
                    && shown.contains(message),
                "{tail}\nexpected mcpulse.toml{at}: …{message}, got {shown}"
            );
        }
        let e = parse_err("[[targets]]\nname = \"s\"\nhealth_url = \"auto\"\n");
        assert!(
            e.to_string()
                .starts_with("mcpulse.toml:3:14: target \"s\": health_url = \"auto\" reads"),
            "{e}"
        );
        let e = parse_err("[[targets]]\nname = \"s\"\nhealth_url = \"ftp://x/readyz\"\n");
        assert!(
            e.to_string()
                .starts_with("mcpulse.toml:3:14: target \"s\": health_url: "),
            "{e}"
        );
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
        assert!(
            e.message.ends_with(
                "alert \"command\": env \"A=b\" is not a variable name: write the names to pass on, e.g. env = [\"PAGER_TOKEN\"]"
            ),
            "{e}"
        );
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
    fn without_a_storage_path_the_history_goes_to_systemds_state_directory() {
        let state = |k: &str| match k {
            "STATE_DIRECTORY" => Some("/var/lib/mcpulse:/var/lib/other".to_owned()),
            _ => None,
        };
        let dir = Path::new("/etc/mcpulse");
        let c = parse("", "mcpulse.toml", dir, &state).unwrap();
        assert_eq!(c.storage.path, Path::new("/var/lib/mcpulse/mcpulse.db"));
        let c = parse("[storage]\npath = \"h.db\"\n", "mcpulse.toml", dir, &state).unwrap();
        assert_eq!(c.storage.path, Path::new("/etc/mcpulse/h.db"));
        let c = parse("", "mcpulse.toml", dir, &env).unwrap();
        assert_eq!(c.storage.path, Path::new("/etc/mcpulse/mcpulse.db"));
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
        // At the interval that made the (default) timeout too long.
        assert_eq!((e.line, e.column), (4, 12), "{e}");
        let e = parse_err("[[targets]]\nname = \"a\"\n");
        assert!(e.message.contains("give url"), "{e}");
        let e = parse_err(
            "[[targets]]\nname = \"a\"\nurl = \"https://x\"\n[[targets]]\nname = \"a\"\nurl = \"https://y\"\n",
        );
        assert_eq!((e.line, e.column), (5, 8), "{e}");
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

    /// Issue #14 item 8: each error points at the value that caused it.
    #[test]
    fn errors_point_at_the_offending_value() {
        let target = "[[targets]]\nname = \"a\"\nurl = \"https://x\"\n";
        let cases: Vec<(String, (usize, usize), &str)> = vec![
            (
                "[defaults]\ninterval = \"60s\"\ntimeout = \"10s\"\n\n\nfailure_threshold = 0\n"
                    .into(),
                (6, 21),
                "defaults: failure_threshold must be at least 1",
            ),
            (
                format!("{target}success_threshold = 0\n"),
                (4, 21),
                "target \"a\": success_threshold must be at least 1",
            ),
            (
                "[server]\nlisten = \"127.0.0.1:1\"\ntoken = \"${UNSET}\"\n".into(),
                (3, 9),
                "server.token: the environment variable UNSET is not set",
            ),
            (
                "[[targets]]\nname = \"a\"\nurl = \"https://user:hunter2@x.example/mcp\"\n".into(),
                (3, 7),
                "has credentials in the URL",
            ),
            (
                "[defaults]\ninterval = \"10000000000000d\"\n".into(),
                (2, 12),
                "defaults: interval: \"10000000000000d\" is too large",
            ),
            (
                format!("{target}reminder = \"0.0000000001ms\"\n"),
                (4, 12),
                "must be more than zero",
            ),
            (
                format!("{target}headers = {{ A = \"${{NOPE}}\" }}\n"),
                (4, 17),
                "NOPE is not set",
            ),
            (
                format!("{target}headers = {{ \"X Key\" = \"v\" }}\n"),
                (4, 13),
                "not a valid HTTP header name",
            ),
            (
                format!("{target}headers = {{ X = \"a\\r\\nX-Injected: 1\" }}\n"),
                (4, 17),
                "line break",
            ),
            (
                format!("{target}headers = {{ X = \"${{CRLF}}\" }}\n"),
                (4, 17),
                "line break",
            ),
            (
                "[[targets]]\nname = \"b\"\ncommand = [\"x\"]\nenv = { K = \"${NOPE}\" }\n".into(),
                (4, 13),
                "env K: the environment variable NOPE is not set",
            ),
            (
                format!("{target}env = {{ K = \"v\" }}\n"),
                (4, 13),
                "env applies to command targets",
            ),
            (
                "[[targets]]\nname = \"b\"\ncommand = [\"x\"]\nheaders = { A = \"b\" }\n".into(),
                (4, 13),
                "headers apply to url targets",
            ),
            (
                format!(
                    "{target}[[alerts]]\nkind = \"webhook\"\nurl = \"https://h\"\ntargets = [\"a\", \"zz\"]\n"
                ),
                (7, 17),
                "targets names \"zz\"",
            ),
            (
                "[[maintenance]]\nstart = \"2026-12-01T02:00:00Z\"\nend = \"later\"\n".into(),
                (3, 7),
                "maintenance end \"later\" is not RFC 3339",
            ),
            (
                "[modules.m]\ntimeout = \"soon\"\n".into(),
                (2, 11),
                "module \"m\": timeout: \"soon\" is not a duration",
            ),
        ];
        for (text, at, message) in cases {
            let e = parse(&text, "mcpulse.toml", Path::new("/etc/mcpulse"), &env)
                .err()
                .unwrap_or_else(|| panic!("accepted:\n{text}"));
            assert_eq!((e.line, e.column), at, "{text}\n{e}");
            assert!(e.message.contains(message), "{text}\n{e}");
            assert!(!e.message.contains("hunter2"), "{e}");
        }
    }

    /// Issue #14 item 7: names a person can see, one rule for config and imports.
    #[test]
    fn target_names_are_visible_text() {
        for (name, message) in [
            ("\"\"", "a target needs a non-empty name"),
            ("\" \"", "a target needs a non-empty name"),
            ("\" a\"", "starts or ends with white space"),
            ("\"red\\u001b[31m\"", "U+001B"),
            ("\"two\\nlines\"", "U+000A"),
            ("\"c1\\u0085\"", "U+0085"),
            ("\"rtl\\u202Eevil\"", "U+202E"),
            ("\"zero\\u200Bwidth\"", "U+200B"),
        ] {
            let e = parse_err(&format!(
                "[[targets]]\nname = {name}\nurl = \"https://x\"\n"
            ));
            assert_eq!((e.line, e.column), (2, 8), "{name}: {e}");
            assert!(e.message.contains(message), "{name}: {e}");
        }
        let long = "n".repeat(MAX_NAME_CHARS + 1);
        let e = parse_err(&format!(
            "[[targets]]\nname = \"{long}\"\nurl = \"https://x\"\n"
        ));
        assert!(e.message.contains("the most is 128"), "{e}");
        let ok = "n".repeat(MAX_NAME_CHARS);
        parse_ok(&format!(
            "[[targets]]\nname = \"Café — prod ☕ {}\"\nurl = \"https://x\"\n[[targets]]\nname = \"{ok}\"\nurl = \"https://x\"\n",
            "x"
        ));
    }

    /// Issue #14 item 11: an empty token locks every client out; an open API beyond loopback
    /// is refused unless allowed.
    #[test]
    fn empty_tokens_and_open_listeners_are_refused() {
        let e = parse_err("[server]\ntoken = \"\"\n");
        assert_eq!((e.line, e.column), (2, 9), "{e}");
        assert!(e.message.contains("server.token: is empty"), "{e}");
        let e = parse_err("[server]\ntoken = \"${EMPTY}\"\n");
        assert_eq!((e.line, e.column), (2, 9), "{e}");
        assert!(e.message.contains("set, but empty"), "{e}");
        assert_eq!(
            parse_ok("[server]\ntoken = \"${TOKEN}\"\n")
                .server
                .token
                .as_deref(),
            Some("t0k")
        );

        for listen in ["0.0.0.0:9477", "[::]:9477", "192.0.2.1:9477"] {
            let e = parse_err(&format!("[server]\nlisten = \"{listen}\"\n"));
            assert_eq!((e.line, e.column), (2, 10), "{e}");
            assert!(
                e.message.contains("beyond loopback) without a token"),
                "{e}"
            );
            assert!(e.message.contains("allow_unauthenticated = true"), "{e}");
            parse_ok(&format!(
                "[server]\nlisten = \"{listen}\"\ntoken = \"${{TOKEN}}\"\n"
            ));
            let c = parse_ok(&format!(
                "[server]\nlisten = \"{listen}\"\nallow_unauthenticated = true\n"
            ));
            assert!(c.server.allow_unauthenticated);
        }
        for listen in ["127.0.0.1:0", "[::1]:0", "[::ffff:127.0.0.1]:0"] {
            parse_ok(&format!("[server]\nlisten = \"{listen}\"\n"));
        }
    }

    #[test]
    fn a_file_that_is_not_utf8_is_located_at_the_bad_byte() {
        let e = decode(b"[server]\nlisten = \"caf\xe9\"\n", "m.toml").unwrap_err();
        assert_eq!((e.line, e.column), (2, 14), "{e}");
        assert!(
            e.message.contains("not UTF-8: byte 0xe9 at offset 22"),
            "{e}"
        );
        assert_eq!(decode(b"ok", "m.toml"), Ok("ok"));
    }

    /// Issue #14 item 7: `~` in `import = [...]` is the home directory, as in the docs.
    #[test]
    fn import_paths_expand_the_home_directory() {
        let home = mcpulse_testkit::TempDir::new("config-home");
        std::fs::create_dir_all(home.join(".cursor")).unwrap();
        std::fs::write(
            home.join(".cursor/mcp.json"),
            r#"{"mcpServers": {"ed": {"url": "https://x/mcp"}, "bad\u0007": {"url": "https://y/mcp"}}}"#,
        )
        .unwrap();
        let home_dir = home.path().display().to_string();
        let with_home = |k: &str| (k == "HOME").then(|| home_dir.clone());
        let text = "import = [\"~/.cursor/mcp.json\"]\n";
        let c = parse(text, "m.toml", Path::new("/elsewhere"), &with_home).unwrap();
        assert_eq!(c.targets.len(), 1);
        assert_eq!(c.targets[0].name, "ed");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].contains(".cursor/mcp.json: server \"bad\\u{7}\" left out: "),
            "{:?}",
            c.warnings
        );
        let e = parse(text, "m.toml", Path::new("/elsewhere"), &|_| None).unwrap_err();
        assert_eq!((e.line, e.column), (1, 11), "{e}");
        assert!(e.message.contains("~ needs HOME, which is not set"), "{e}");
        let e = parse_err("import = [\"~bob/mcp.json\"]\n");
        assert!(e.message.contains("only ~ and ~/… are expanded"), "{e}");
    }

    #[test]
    fn durations_and_times() {
        assert!(
            duration("10000000000000d")
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
        assert_eq!(
            duration("37000d").unwrap(),
            Duration::from_secs(37_000 * 86_400)
        );
        assert_eq!(duration("30d").unwrap(), Duration::from_secs(30 * 86_400));
        // One grammar with the CLI: a bare number is seconds (it was refused here).
        assert_eq!(duration("30").unwrap(), Duration::from_secs(30));
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
