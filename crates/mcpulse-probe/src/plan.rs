//! How to probe: the [`Plan`] (steps, deadlines, limits, credentials), and the one place one
//! is built, [`PlanSpec::plan`], which the CLI (`mcpulse probe`, `snapshot`), the monitor's
//! scheduler and its `/probe` all use. The defaults live here, once; what differs between a
//! one-off probe and a watched target is [`Caller`]'s, spelled out.
//!
//! It does not parse settings (the CLI's flags and the monitor's config are parsed by their
//! owners, into the plain values a [`PlanSpec`] takes) and does not run a probe (`crate::flow`).

use crate::target::Target;
use mcpulse_wire::call::{CallSpec, HealthToolMode};
use mcpulse_wire::message::ClientInfo;
use mcpulse_wire::redact::Secrets;
use mcpulse_wire::transcript::PlanRecord;
use mcpulse_wire::version::EraMode;
use std::time::Duration;

/// The whole-probe timeout of an HTTP target when the caller gives none.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole-probe timeout of a stdio command when the caller gives none: its start-up may be
/// a package manager's cold download. On a loaded 2-core machine with an empty npm cache,
/// `npx -y` of the reference server took 18.9 s to its first reply (14.4 s in an earlier
/// report); 60 s leaves room for a slower network, and the legacy fallback still gets half of
/// it.
pub const STDIO_TIMEOUT: Duration = Duration::from_secs(60);
/// The most bytes one response may take, unless the caller says otherwise.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// The most pages followed per list, unless the caller says otherwise.
pub const MAX_PAGES: u32 = 50;
/// How long a stdio child gets to exit after its stdin closes, and again after SIGTERM.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(100);

/// The timeout of a probe of `target` when the caller gives none.
pub fn default_timeout(target: &Target) -> Duration {
    match target {
        Target::Http { .. } => HTTP_TIMEOUT,
        Target::Stdio { .. } => STDIO_TIMEOUT,
    }
}

/// Which HTTP transport to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportMode {
    /// Streamable HTTP, falling back to legacy HTTP+SSE.
    #[default]
    Auto,
    StreamableHttp,
    Sse,
}

/// The steps and deadlines of a probe.
#[derive(Debug, Clone)]
pub struct Plan {
    pub era: EraMode,
    pub transport: TransportMode,
    /// Bounds the whole probe, whatever the server does.
    pub timeout: Duration,
    /// The most bytes one response may take.
    pub max_response_bytes: usize,
    /// The most pages followed per list.
    pub max_pages: u32,
    /// Headers the user supplied (credentials): never recorded in clear.
    pub headers: Vec<(String, String)>,
    pub client: ClientInfo,
    /// How long a stdio child gets to exit after its stdin closes, and again after SIGTERM.
    pub shutdown_grace: Duration,
    /// Send the security checks' extra, read-only requests (HTTP targets).
    pub security: bool,
    /// Extra trusted root certificates (DER), from `--ca-file`.
    pub extra_roots: Vec<Vec<u8>>,
    /// Environment variables for a stdio server (credentials: never recorded).
    pub env: Vec<(String, String)>,
    /// Start a stdio server with only a small set of the caller's variables (PATH, HOME, the
    /// locale, …) plus `env`, rather than all of them: the monitor's own secrets (sink URLs,
    /// API tokens, other targets' credentials) are not a server's business.
    pub clean_env: bool,
    /// In auto mode over stdio, also check whether a modern server serves legacy clients, in a
    /// second process of its own (a second start-up, hence opt-in; over HTTP it is one request
    /// and always made).
    pub stdio_dual_era: bool,
    /// Values that must not appear in the transcript (what config expansion read from the
    /// environment, a stdio server's environment values): hidden wherever the probe records
    /// something about the target ([`mcpulse_wire::transcript::Transcript::hide`]).
    pub secrets: Secrets,
    /// Also read this HTTP health endpoint (`/readyz` of `mcpulse supervise`, a server's
    /// `/healthz`), alongside the protocol steps: see `crate::health`.
    pub health_url: Option<String>,
    /// Discover the health endpoint instead (`--health-url auto`): `/healthz`, `/readyz` and
    /// `/health` on an HTTP target's origin (see `crate::health::discover`); nothing for stdio.
    pub health_discovery: bool,
    /// Synthetic `tools/call`s made after `tools/list` (`--call`): see `crate::flow::calls`.
    pub calls: Vec<CallSpec>,
    /// Which health tool to call after `tools/list`.
    pub health_tool: HealthToolMode,
    /// Call tools not annotated read-only, or annotated destructive (`--allow-side-effects`).
    pub allow_side_effects: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            era: EraMode::Auto,
            transport: TransportMode::Auto,
            timeout: HTTP_TIMEOUT,
            max_response_bytes: MAX_RESPONSE_BYTES,
            max_pages: MAX_PAGES,
            headers: Vec::new(),
            client: ClientInfo {
                name: "mcpulse".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            shutdown_grace: SHUTDOWN_GRACE,
            security: true,
            extra_roots: Vec::new(),
            env: Vec::new(),
            clean_env: false,
            stdio_dual_era: false,
            secrets: Secrets::default(),
            health_url: None,
            health_discovery: false,
            calls: Vec::new(),
            health_tool: HealthToolMode::Off,
            allow_side_effects: false,
        }
    }
}

impl Plan {
    /// How the plan appears in transcripts: no credential, only whether there were any.
    pub fn record(&self) -> PlanRecord {
        PlanRecord {
            era: self.era,
            security: self.security,
            credentials: !self.headers.is_empty(),
            timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            max_response_bytes: self.max_response_bytes,
        }
    }
}

/// Who a probe is for. It fixes what differs between a one-off probe and a watched target, so
/// that the difference is written once rather than implied by three struct literals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `mcpulse probe` and `mcpulse snapshot`: a stdio server inherits the user's environment
    /// (as when they start it by hand), and the stdio dual-era check (a second start-up) is made
    /// only when asked for (`--dual-era`).
    Cli { stdio_dual_era: bool },
    /// The monitor, its scheduler and its `/probe`: a stdio server starts with a clean
    /// environment plus its configured one (the daemon's own secrets are not a server's
    /// business), and its auto-mode checks make the stdio dual-era check (the monitor pins the
    /// era between them, so most checks start one process).
    Monitor,
}

/// What a caller decides about a probe. Everything it leaves alone keeps the default set in
/// [`PlanSpec::new`]; [`PlanSpec::plan`] turns it into a [`Plan`] for a target.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    pub caller: Caller,
    pub era: EraMode,
    pub transport: TransportMode,
    /// `None`: [`default_timeout`] for the target's kind.
    pub timeout: Option<Duration>,
    pub max_response_bytes: usize,
    pub max_pages: u32,
    /// Headers to send (credentials): never recorded in clear.
    pub headers: Vec<(String, String)>,
    pub security: bool,
    /// Extra trusted root certificates (DER).
    pub extra_roots: Vec<Vec<u8>>,
    /// Environment variables for a stdio server (credentials: never recorded).
    pub env: Vec<(String, String)>,
    /// Values hidden wherever the probe records something about the target.
    pub secrets: Secrets,
    /// An HTTP health endpoint to read as well.
    pub health_url: Option<String>,
    /// Discover one on an HTTP target's origin instead (`--health-url auto`).
    pub health_discovery: bool,
    /// Synthetic tool calls, in order.
    pub calls: Vec<CallSpec>,
    /// Which health tool to call.
    pub health_tool: HealthToolMode,
    /// Call tools that are not annotated read-only, or are annotated destructive.
    pub allow_side_effects: bool,
}

impl PlanSpec {
    /// The defaults for `caller`: auto era and transport, the timeout for the target's kind,
    /// [`MAX_RESPONSE_BYTES`], [`MAX_PAGES`], the security checks on, no credentials, no
    /// synthetic calls and no health tool: a `tools/call` is the caller's choice to make
    /// (`mcpulse probe --health-tool` defaults to `auto`; `snapshot` and the monitor make
    /// none until asked).
    pub fn new(caller: Caller) -> PlanSpec {
        PlanSpec {
            caller,
            era: EraMode::Auto,
            transport: TransportMode::Auto,
            timeout: None,
            max_response_bytes: MAX_RESPONSE_BYTES,
            max_pages: MAX_PAGES,
            headers: Vec::new(),
            security: true,
            extra_roots: Vec::new(),
            env: Vec::new(),
            secrets: Secrets::default(),
            health_url: None,
            health_discovery: false,
            calls: Vec::new(),
            health_tool: HealthToolMode::Off,
            allow_side_effects: false,
        }
    }

    /// The plan for probing `target`.
    pub fn plan(self, target: &Target) -> Plan {
        let (clean_env, stdio_dual_era) = match self.caller {
            Caller::Cli { stdio_dual_era } => (false, stdio_dual_era),
            Caller::Monitor => (true, true),
        };
        // Secret by value wherever they land: the header values the user supplied (a server
        // may echo its token in an error) and what the argv rule hides in a command line.
        let mut secrets = self.secrets;
        for (_, v) in &self.headers {
            // A short value (`X-Debug: 1`) would blank ordinary text wherever it appears.
            if v.chars().count() >= mcpulse_wire::redact::ARGV_SECRET_MIN_LEN {
                secrets.add(v);
            }
            // The token alone, as a server quotes it: `Bearer <token>`.
            if let Some((_, token)) = v.split_once(' ')
                && token.chars().count() >= mcpulse_wire::redact::ARGV_SECRET_MIN_LEN
            {
                secrets.add(token.trim());
            }
        }
        if let Target::Stdio { program, args } = target {
            let mut argv = vec![program.clone()];
            argv.extend(args.iter().cloned());
            secrets.extend(&mcpulse_wire::redact::argv_secrets(&argv));
        }
        Plan {
            era: self.era,
            transport: self.transport,
            timeout: self.timeout.unwrap_or_else(|| default_timeout(target)),
            max_response_bytes: self.max_response_bytes,
            max_pages: self.max_pages,
            headers: self.headers,
            security: self.security,
            extra_roots: self.extra_roots,
            env: self.env,
            clean_env,
            stdio_dual_era,
            secrets,
            health_url: self.health_url,
            health_discovery: self.health_discovery,
            calls: self.calls,
            health_tool: self.health_tool,
            allow_side_effects: self.allow_side_effects,
            ..Plan::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> Target {
        Target::stdio(&["server".to_owned()]).unwrap()
    }
    fn http() -> Target {
        Target::http("http://127.0.0.1:1/mcp").unwrap()
    }

    #[test]
    fn the_timeout_defaults_by_the_target_kind_and_a_given_one_wins() {
        let cli = PlanSpec::new(Caller::Cli {
            stdio_dual_era: false,
        });
        assert_eq!(cli.clone().plan(&http()).timeout, Duration::from_secs(10));
        assert_eq!(cli.clone().plan(&stdio()).timeout, Duration::from_secs(60));
        let given = PlanSpec {
            timeout: Some(Duration::from_secs(3)),
            ..cli
        };
        assert_eq!(given.clone().plan(&stdio()).timeout, Duration::from_secs(3));
        assert_eq!(given.plan(&http()).timeout, Duration::from_secs(3));
    }

    #[test]
    fn the_caller_fixes_the_environment_and_the_stdio_dual_era_check() {
        let cli = PlanSpec::new(Caller::Cli {
            stdio_dual_era: false,
        })
        .plan(&stdio());
        assert!(!cli.clean_env && !cli.stdio_dual_era);
        let asked = PlanSpec::new(Caller::Cli {
            stdio_dual_era: true,
        })
        .plan(&stdio());
        assert!(!asked.clean_env && asked.stdio_dual_era);
        let monitor = PlanSpec::new(Caller::Monitor).plan(&stdio());
        assert!(monitor.clean_env && monitor.stdio_dual_era);
    }

    #[test]
    fn the_defaults_are_the_plan_defaults() {
        let plan = PlanSpec::new(Caller::Cli {
            stdio_dual_era: false,
        })
        .plan(&http());
        let default = Plan::default();
        assert_eq!(plan.era, default.era);
        assert_eq!(plan.transport, default.transport);
        assert_eq!(plan.timeout, default.timeout);
        assert_eq!(plan.max_response_bytes, default.max_response_bytes);
        assert_eq!(plan.max_pages, default.max_pages);
        assert_eq!(plan.security, default.security);
        assert_eq!(plan.shutdown_grace, default.shutdown_grace);
        assert_eq!(plan.client.name, "mcpulse");
    }
}
