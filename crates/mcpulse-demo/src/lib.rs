//! `mcpulse demo`: a built-in fleet of small, hand-written MCP servers on loopback, one per
//! thing a newcomer should see, and the monitor config that watches them.
//!
//! | server | speaks | what the monitor shows |
//! |---|---|---|
//! | `healthy-modern` | 2026-07-28 stateless, and legacy `initialize` (dual-era) | healthy, modern, dual-era, grade A |
//! | `healthy-legacy` | 2025-11-25 Streamable HTTP with sessions, replies as SSE | healthy, legacy-only |
//! | `legacy-sse` | the 2024-11-05 HTTP+SSE transport | healthy, deprecated transport |
//! | `slow` | legacy; `initialize` takes 4 s (over the 3 s budget) | degraded, slow-handshake |
//! | `flaky` | modern; 20 s up, then 20 s of HTTP 503 | down and recovered alerts, then flapping |
//! | `drifting` | dual-era; its tools change every 30 s | risky, then breaking drift |
//! | `auth-gated` | dual-era behind a bearer token, with RFC 9728/8414 metadata | degraded, auth-required |
//! | `shifting` | legacy; every 15 s an older revision, no Origin guard, a bearer gate, steady | protocol, grade and auth alerts |
//! | `stdio` | legacy over stdio (`mcpulse demo-server stdio`) | healthy, stdio |
//!
//! Every HTTP server binds `127.0.0.1:0`, rejects a foreign `Origin` or `Host` with 403, and
//! lives until [`Fleet::shutdown`] (or the [`Fleet`] is dropped). The servers are written
//! from the spec, not from mcpulse's own wire code, so that the demo is also an independent
//! counterpart for the prober's tests.
//!
//! What this crate does not do: run the monitor, parse arguments or print (the `mcpulse`
//! binary wires [`start_fleet`], [`demo_config`] and the monitor daemon together).

mod auth;
mod config;
mod legacy_sse;
mod mcp;
mod schedule;
mod stdio;
mod streamable;
mod web;

pub use config::demo_config;
pub use schedule::{
    DriftStage, DriftSwitch, FlakySwitch, ShiftStage, ShiftSwitch, Stage, StageSwitch,
    drift_stage_at, flaky_up_at, stage_at,
};
pub use stdio::{serve_ndjson, serve_stdio};

use std::sync::Arc;
use std::time::Duration;
use streamable::{Gate, Profile, Tools};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The one bearer token `auth-gated` accepts, so the authenticated view can be shown too:
/// `mcpulse probe -H 'Authorization: Bearer mcpulse-demo-token' <auth-gated URL>`.
pub const DEMO_TOKEN: &str = "mcpulse-demo-token";

/// The arguments, after the `mcpulse` executable, that run the stdio demo server
/// ([`serve_stdio`]): `mcpulse demo-server stdio`.
pub const STDIO_ARGS: [&str; 2] = ["demo-server", "stdio"];

/// The stdio demo server's command line for the running executable:
/// `["<current exe>", "demo-server", "stdio"]`.
pub fn stdio_command() -> Result<Vec<String>, DemoError> {
    let exe = std::env::current_exe().map_err(DemoError::CurrentExe)?;
    let mut argv = vec![exe.to_string_lossy().into_owned()];
    argv.extend(STDIO_ARGS.iter().map(|a| (*a).to_owned()));
    Ok(argv)
}

/// Why the fleet could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo server {server}: cannot listen on 127.0.0.1: {source}")]
    Bind {
        server: &'static str,
        source: std::io::Error,
    },
    #[error("cannot find the current executable (for the stdio demo server): {0}")]
    CurrentExe(std::io::Error),
}

/// The demo servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    HealthyModern,
    HealthyLegacy,
    LegacySse,
    Slow,
    Flaky,
    Drifting,
    AuthGated,
    Shifting,
    Stdio,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::HealthyModern,
        Kind::HealthyLegacy,
        Kind::LegacySse,
        Kind::Slow,
        Kind::Flaky,
        Kind::Drifting,
        Kind::AuthGated,
        Kind::Shifting,
        Kind::Stdio,
    ];

    /// The target name in the monitor.
    pub fn name(self) -> &'static str {
        match self {
            Kind::HealthyModern => "healthy-modern",
            Kind::HealthyLegacy => "healthy-legacy",
            Kind::LegacySse => "legacy-sse",
            Kind::Slow => "slow",
            Kind::Flaky => "flaky",
            Kind::Drifting => "drifting",
            Kind::AuthGated => "auth-gated",
            Kind::Shifting => "shifting",
            Kind::Stdio => "stdio",
        }
    }

    /// What a newcomer should see for it, in one line.
    pub fn shows(self) -> &'static str {
        match self {
            Kind::HealthyModern => {
                "2026-07-28 stateless + legacy initialize: healthy, modern, dual-era, grade A"
            }
            Kind::HealthyLegacy => {
                "2025-11-25 Streamable HTTP with sessions, SSE replies: healthy, legacy-only"
            }
            Kind::LegacySse => "2024-11-05 HTTP+SSE transport: healthy, deprecated transport",
            Kind::Slow => "initialize slower than the latency budget: degraded, slow-handshake",
            Kind::Flaky => {
                "up, then HTTP 503, in a cycle: down and recovered alerts, then flapping"
            }
            Kind::Drifting => {
                "tools change on a timer: a reworded description (risky), a new required parameter (breaking), and back"
            }
            Kind::AuthGated => {
                "401 + WWW-Authenticate, RFC 9728/8414 metadata: degraded, auth-required"
            }
            Kind::Shifting => {
                "an older protocol revision, then no Origin guard, then a bearer gate, in turn: protocol, grade and auth alerts"
            }
            Kind::Stdio => "a legacy server over stdio (`mcpulse demo-server stdio`): healthy",
        }
    }
}

/// One running demo server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoServer {
    pub name: &'static str,
    pub kind: Kind,
    /// The MCP endpoint; `None` for the stdio server.
    pub url: Option<String>,
    /// The stdio server's command line; empty for HTTP servers.
    pub command: Vec<String>,
}

/// How the fleet behaves. [`FleetOptions::new`] gives the demo's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetOptions {
    /// The stdio server's command line (see [`stdio_command`]); empty leaves it out.
    pub stdio_command: Vec<String>,
    /// How long `slow` takes to answer `initialize`.
    pub slow_delay: Duration,
    /// `flaky`'s cycle: this long up, then this long down.
    pub flaky_up: Duration,
    pub flaky_down: Duration,
    /// How often `drifting` moves to its next stage.
    pub drift_every: Duration,
    /// How often `shifting` moves to its next stage.
    pub shift_every: Duration,
    /// How often the monitor checks each target (the demo config's `interval`).
    pub check_every: Duration,
}

impl FleetOptions {
    pub fn new(stdio_command: Vec<String>) -> FleetOptions {
        FleetOptions {
            stdio_command,
            slow_delay: Duration::from_secs(4),
            flaky_up: Duration::from_secs(20),
            flaky_down: Duration::from_secs(20),
            drift_every: Duration::from_secs(30),
            shift_every: Duration::from_secs(15),
            check_every: Duration::from_secs(5),
        }
    }
}

/// The running fleet. Dropping it stops every server; [`Fleet::shutdown`] also waits for them.
#[derive(Debug)]
pub struct Fleet {
    servers: Vec<DemoServer>,
    options: FleetOptions,
    flaky: Arc<FlakySwitch>,
    drift: Arc<DriftSwitch>,
    shift: Arc<ShiftSwitch>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts the fleet with the demo's defaults: each HTTP server on its own `127.0.0.1:0`.
pub async fn start_fleet(stdio_command: Vec<String>) -> Result<Fleet, DemoError> {
    start_fleet_with(FleetOptions::new(stdio_command)).await
}

/// Starts the fleet with explicit options.
pub async fn start_fleet_with(options: FleetOptions) -> Result<Fleet, DemoError> {
    let (shutdown, stop) = watch::channel(false);
    let mut fleet = Fleet {
        servers: Vec::new(),
        flaky: Arc::new(FlakySwitch::new(options.flaky_up, options.flaky_down)),
        drift: Arc::new(DriftSwitch::new(options.drift_every)),
        shift: Arc::new(ShiftSwitch::new(options.shift_every)),
        options,
        shutdown,
        tasks: Vec::new(),
    };
    for kind in Kind::ALL {
        if kind == Kind::Stdio {
            if !fleet.options.stdio_command.is_empty() {
                fleet.servers.push(DemoServer {
                    name: kind.name(),
                    kind,
                    url: None,
                    command: fleet.options.stdio_command.clone(),
                });
            }
            continue;
        }
        // On failure the servers started so far stop as `fleet` drops.
        let (listener, addr) = web::bind().await.map_err(|source| DemoError::Bind {
            server: kind.name(),
            source,
        })?;
        let base = format!("http://{addr}");
        let (router, path) = match kind {
            Kind::LegacySse => (legacy_sse::router(stop.clone()), "/sse"),
            _ => (streamable::router(fleet.profile(kind, &base)), "/mcp"),
        };
        fleet.tasks.push(web::serve(listener, router, stop.clone()));
        fleet.servers.push(DemoServer {
            name: kind.name(),
            kind,
            url: Some(format!("{base}{path}")),
            command: Vec::new(),
        });
    }
    Ok(fleet)
}

impl Fleet {
    /// The servers, in [`Kind::ALL`] order.
    pub fn servers(&self) -> &[DemoServer] {
        &self.servers
    }

    pub fn server(&self, kind: Kind) -> Option<&DemoServer> {
        self.servers.iter().find(|s| s.kind == kind)
    }

    /// The MCP endpoint of an HTTP server.
    pub fn url(&self, kind: Kind) -> Option<&str> {
        self.server(kind).and_then(|s| s.url.as_deref())
    }

    pub fn options(&self) -> &FleetOptions {
        &self.options
    }

    /// `flaky`'s switch: pin it up or down, or let it follow its cycle.
    pub fn flaky(&self) -> &FlakySwitch {
        &self.flaky
    }

    /// `drifting`'s switch: pin a stage, or let it follow the clock.
    pub fn drift(&self) -> &DriftSwitch {
        &self.drift
    }

    /// `shifting`'s switch: pin a stage, or let it follow the clock.
    pub fn shift(&self) -> &ShiftSwitch {
        &self.shift
    }

    /// A table of the servers for a person: name, where it is, what it shows.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for s in &self.servers {
            let at = match &s.url {
                Some(u) => u.clone(),
                None => s.command.join(" "),
            };
            out.push_str(&format!(
                "  {:<15} {at}\n  {:<15} ({})\n",
                s.name,
                "",
                s.kind.shows()
            ));
        }
        out
    }

    /// Stops every server and waits (at most 5 s) for in-flight responses to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for mut task in std::mem::take(&mut self.tasks) {
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }

    fn profile(&self, kind: Kind, base: &str) -> Profile {
        let p = Profile {
            name: "mcpulse-demo-healthy-modern",
            title: "mcpulse demo: healthy modern",
            instructions: "A healthy 2026-07-28 server that also answers legacy clients.",
            modern: true,
            legacy: true,
            sse_replies: false,
            initialize_delay: Duration::ZERO,
            tools: Tools::Basic,
            gate: Gate::Open,
            ttl_ms: 60_000,
        };
        match kind {
            Kind::HealthyLegacy => Profile {
                name: "mcpulse-demo-healthy-legacy",
                title: "mcpulse demo: healthy legacy",
                instructions: "A healthy 2025-11-25 Streamable HTTP server with sessions.",
                modern: false,
                sse_replies: true,
                ..p
            },
            Kind::Slow => Profile {
                name: "mcpulse-demo-slow",
                title: "mcpulse demo: slow",
                instructions: "A legacy server whose handshake is slower than the latency budget.",
                modern: false,
                initialize_delay: self.options.slow_delay,
                ..p
            },
            Kind::Flaky => Profile {
                name: "mcpulse-demo-flaky",
                title: "mcpulse demo: flaky",
                instructions: "A 2026-07-28 server that fails with HTTP 503 half of the time.",
                legacy: false,
                gate: Gate::Flaky(self.flaky.clone()),
                ..p
            },
            Kind::Drifting => Profile {
                name: "mcpulse-demo-drifting",
                title: "mcpulse demo: drifting",
                instructions: "A server whose tools change every few minutes.",
                tools: Tools::Drifting(self.drift.clone()),
                ttl_ms: 0,
                ..p
            },
            Kind::AuthGated => Profile {
                name: "mcpulse-demo-auth-gated",
                title: "mcpulse demo: auth-gated",
                instructions: "A server behind OAuth bearer tokens.",
                gate: Gate::Bearer {
                    base: base.to_owned(),
                },
                ..p
            },
            Kind::Shifting => Profile {
                name: "mcpulse-demo-shifting",
                title: "mcpulse demo: shifting",
                instructions: "A legacy server whose protocol revision, Origin guard and auth change in turn.",
                modern: false,
                gate: Gate::Shifting {
                    switch: self.shift.clone(),
                    base: base.to_owned(),
                },
                ..p
            },
            Kind::HealthyModern | Kind::LegacySse | Kind::Stdio => p,
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}
