//! An rmcp server with all of mcpulse-kit (docs/kit.md walks through it):
//!
//! - tools `echo` and `add`, each under a timeout, a circuit breaker and a concurrency limit,
//!   and `report` (a long one that reports progress) under a longer timeout and a lower limit,
//!   without a breaker; and the opt-in `health_check` tool;
//! - dependency checks: `inventory-db`, a critical TCP connect to `--db HOST:PORT`; and
//!   `feature-flags`, a non-critical check that is down while the file `--broken-flag PATH`
//!   exists (break it on purpose: `touch PATH`; mend it: `rm PATH`);
//! - `/mcp` (rmcp's Streamable HTTP service) and `/livez`, `/readyz`, `/metrics` on one
//!   listener.
//!
//! ```text
//! cargo run -p mcpulse-kit --example kit_server -- --listen 127.0.0.1:8080 --db 127.0.0.1:5432 --broken-flag /tmp/flags-broken
//! curl -s localhost:8080/readyz?verbose
//! mcpulse probe http://127.0.0.1:8080/mcp --health-tool health_check --health-url http://127.0.0.1:8080/readyz
//! ```
//!
//! `--plain` serves the same tools with no kit at all (a plain rmcp server, for comparisons).
//! It prints `kit_server: listening on http://ADDR/mcp` once it listens.

#![allow(dead_code)] // the tests include this file as a module and use its `serve`

use mcpulse_kit::check::Outcome;
use mcpulse_kit::{Check, Health, Kit, ToolPolicy};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// What to say back.
    pub message: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    pub a: i64,
    pub b: i64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ReportArgs {
    /// How many steps (at most 100), 100 ms each.
    pub steps: u32,
}

#[derive(Clone)]
pub struct Example {
    tool_router: ToolRouter<Example>,
}

#[tool_router]
impl Example {
    #[tool(
        description = "Says the message back",
        annotations(read_only_hint = true)
    )]
    async fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> String {
        message
    }

    #[tool(description = "Adds two integers", annotations(read_only_hint = true))]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        a.saturating_add(b).to_string()
    }

    #[tool(
        description = "Builds a report in steps of 100 ms, with progress notifications when asked",
        annotations(read_only_hint = true)
    )]
    async fn report(
        &self,
        Parameters(ReportArgs { steps }): Parameters<ReportArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> String {
        let steps = steps.min(100);
        let mut progress = mcpulse_kit::progress::Progress::new(&ctx);
        for i in 1..=steps {
            tokio::time::sleep(Duration::from_millis(100)).await;
            progress
                .report(f64::from(i), Some(f64::from(steps)), None)
                .await;
        }
        format!("report of {steps} steps")
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Example {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// What to serve.
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    /// The `inventory-db` dependency (a TCP connect).
    pub db: SocketAddr,
    /// While this file exists, `feature-flags` is down.
    pub broken_flag: PathBuf,
    /// No kit at all: the same tools on a plain rmcp server.
    pub plain: bool,
    /// How often the checks run (5 s by default; the tests use less).
    pub check_every: Duration,
}

/// A running example: its address, and its tasks (dropping it stops them).
pub struct Running {
    pub addr: SocketAddr,
    pub health: Option<Health>,
    _checks: Option<mcpulse_kit::Running>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// The example's tool router, wrapped in the kit's policies with its health registry (none
/// with `plain`).
pub fn build(o: &Options) -> std::io::Result<(ToolRouter<Example>, Option<Health>)> {
    let router = Example::tool_router();
    if o.plain {
        return Ok((router, None));
    }
    let flag = Arc::new(o.broken_flag.clone());
    let h = Health::new("kit-example", env!("CARGO_PKG_VERSION"))
        .with_check(
            Check::tcp("inventory-db", o.db.ip().to_string(), o.db.port())
                .interval(o.check_every)
                .timeout(Duration::from_secs(2))
                .failure_threshold(1),
        )
        .with_check(
            Check::from_fn("feature-flags", move || {
                let broken = flag.exists();
                async move {
                    if broken {
                        Outcome::down("the flag file says broken")
                    } else {
                        Outcome::ok("flags loaded")
                    }
                }
            })
            .critical(false)
            .interval(o.check_every)
            .failure_threshold(1),
        );
    // Every tool: a timeout, a concurrency limit and a circuit breaker; `report` its own
    // (longer, lower, no breaker).
    let everyday = ToolPolicy::new()
        .timeout(Duration::from_secs(10))
        .max_concurrent(32)
        .breaker(Default::default());
    let kit = Kit::new(h.clone())
        .default_policy(everyday)
        .tool(
            "report",
            ToolPolicy::new()
                .timeout(Duration::from_secs(15))
                .max_concurrent(4),
        )
        .health_tool(mcpulse_kit::kit::HEALTH_TOOL);
    let router = kit
        .wrap(router)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok((router, Some(h)))
}

impl Example {
    /// A server over `router` (what [`build`] returns), for any rmcp transport.
    pub fn new(tool_router: ToolRouter<Example>) -> Example {
        Example { tool_router }
    }
}

/// Binds, starts the checks and serves on the current runtime.
pub async fn serve(o: Options) -> std::io::Result<Running> {
    let listener = tokio::net::TcpListener::bind(o.listen).await?;
    let addr = listener.local_addr()?;
    let (router, health) = build(&o)?;
    let config = if o.plain {
        Default::default()
    } else {
        mcpulse_kit::server_config()
    };
    let mcp = StreamableHttpService::new(
        move || {
            Ok(Example {
                tool_router: router.clone(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut app = axum::Router::new().nest_service("/mcp", mcp);
    if let Some(h) = &health {
        app = app.merge(mcpulse_kit::endpoints::router(h.clone()));
    }
    let checks = health.as_ref().map(Health::start);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Running {
        addr,
        health,
        _checks: checks,
        server,
    })
}

fn usage() -> ! {
    eprintln!(
        "usage: kit_server [--listen ADDR] [--db HOST:PORT] [--broken-flag PATH] [--check-every MS] [--plain]"
    );
    std::process::exit(2)
}

fn main() {
    let mut o = Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        db: SocketAddr::from(([127, 0, 0, 1], 5432)),
        broken_flag: std::env::temp_dir().join("kit-example-flags-broken"),
        plain: false,
        check_every: Duration::from_secs(5),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--listen" => o.listen = value().parse().unwrap_or_else(|_| usage()),
            "--db" => o.db = value().parse().unwrap_or_else(|_| usage()),
            "--broken-flag" => o.broken_flag = PathBuf::from(value()),
            "--check-every" => {
                o.check_every = Duration::from_millis(value().parse().unwrap_or_else(|_| usage()))
            }
            "--plain" => o.plain = true,
            _ => usage(),
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kit_server: {e}");
            std::process::exit(1)
        }
    };
    rt.block_on(async {
        match serve(o).await {
            Ok(running) => {
                println!("kit_server: listening on {}", running.url());
                // Until killed (Ctrl-C's SIGINT ends the process).
                std::future::pending::<()>().await;
            }
            Err(e) => {
                eprintln!("kit_server: {e}");
                std::process::exit(1)
            }
        }
    });
}
