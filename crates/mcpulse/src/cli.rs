//! The command line. `--help` is part of the contract: exit codes are documented there.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

const EXIT_CODES: &str = "\
Exit codes (the monitoring-plugin convention, as Nagios, Icinga and Sensu expect):
  0  healthy
  1  degraded (up, but gated by auth, slow, tools/list failing, or a --call failing)
  2  down
  3  the probe could not run (bad arguments, unreadable input)";

#[derive(Debug, Parser)]
#[command(name = "mcpulse", version, about = "Protocol-level health checks for MCP servers", after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Probe one MCP server: handshake (or discovery), tools/list, timings, auth, a verdict.
    #[command(after_help = PROBE_HELP)]
    Probe(Box<ProbeArgs>),
    /// Write a baseline of a server's contract (tools, prompts, resources, server facts).
    #[command(after_help = SNAPSHOT_HELP)]
    Snapshot(SnapshotArgs),
    /// Compare two baselines: every change classified breaking, risky or info.
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Run the monitor daemon over a fleet from a config file.
    #[command(after_help = MONITOR_HELP)]
    Monitor(MonitorArgs),
    /// Validate a monitor config file (exit 0 valid, 1 invalid with file:line:column).
    CheckConfig(CheckConfigArgs),
    /// Start a built-in fleet of demo MCP servers and the monitor over them.
    Demo(DemoArgs),
    /// Run a local stdio MCP server under supervision, in place of its command in a client's
    /// config: heartbeats, restarts with backoff, the session kept across restarts.
    #[command(after_help = SUPERVISE_HELP)]
    Supervise(Box<SuperviseArgs>),
    /// Serve an MCP server (a stdio command or an HTTP upstream) over Streamable HTTP, with
    /// /livez, /readyz (three layers: process, protocol, dependencies) and /metrics.
    #[command(after_help = GATEWAY_HELP)]
    Gateway(Box<GatewayArgs>),
    /// Read the monitor's history file (while the monitor runs, too): export checks,
    /// transitions or alerts as CSV or JSON.
    #[command(subcommand)]
    History(HistoryCommand),
    /// Print generated documentation (used to keep docs/ in step with the code).
    #[command(hide = true)]
    Docs { which: DocKind },
    /// A demo MCP server, as `mcpulse demo` runs it (`demo-server stdio`).
    #[command(hide = true)]
    DemoServer { which: DemoServerKind },
    /// The guard `mcpulse supervise` starts: kills what its child left if it is SIGKILLed.
    #[command(hide = true, name = "supervise-watchdog")]
    SuperviseWatchdog { lineage_prefix: String },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout, or write one page per command into a directory.
    #[command(after_help = MAN_HELP)]
    Man {
        /// Write mcpulse.1 and mcpulse-COMMAND.1 for every command into this directory.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
}

const COMPLETIONS_HELP: &str = "\
Install (see docs/packaging.md):
  mcpulse completions bash > /usr/share/bash-completion/completions/mcpulse
  mcpulse completions zsh > /usr/local/share/zsh/site-functions/_mcpulse
  mcpulse completions fish > /usr/share/fish/vendor_completions.d/mcpulse.fish";

const MAN_HELP: &str = "\
Examples:
  mcpulse man | man -l -
  mcpulse man --out-dir /usr/local/share/man/man1";
#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Stream history rows as CSV or JSON, by target and time range, through the stable views
    /// (docs/history.md). Reads only: runs beside the monitor.
    #[command(after_help = HISTORY_EXPORT_HELP)]
    Export(HistoryExportArgs),
}

const HISTORY_EXPORT_HELP: &str = "\
Examples:
  mcpulse history export --config mcpulse.toml --since 24h > last-day.csv
  mcpulse history export --db mcpulse.db --target api --target search --format json
  mcpulse history export --db mcpulse.db --table transitions --since 2026-12-01T00:00:00Z

Rows are ordered by target, then time. CSV cells that a spreadsheet would run as a formula
(starting with = + - @, tab or carriage return) are prefixed with '. See docs/history.md.";

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["db", "config"])))]
pub struct HistoryExportArgs {
    /// The history database file.
    #[arg(long, value_name = "FILE")]
    pub db: Option<std::path::PathBuf>,
    /// A monitor config: its `[storage] path` is read.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Only this target (repeatable; default: every target).
    #[arg(long, value_name = "NAME")]
    pub target: Vec<String>,
    /// From this time on (inclusive): RFC 3339 (2026-12-01T00:00:00Z) or an age (24h, 7d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Before this time (exclusive): RFC 3339 or an age.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    #[arg(long, value_enum, default_value_t = ExportFormat::Csv)]
    pub format: ExportFormat,
    /// What to export.
    #[arg(long, value_enum, default_value_t = ExportTable::Checks)]
    pub table: ExportTable,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    Csv,
    /// One JSON array, one object per line.
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportTable {
    /// One row a check (v_checks).
    Checks,
    /// One row a confirmed status change (v_transitions).
    Transitions,
    /// One row an alert for one sink (v_alerts).
    Alerts,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DemoServerKind {
    Stdio,
}

const MONITOR_HELP: &str = "\
Examples:
  mcpulse monitor --config mcpulse.toml
  mcpulse monitor --config mcpulse.toml --import ~/.cursor/mcp.json
  mcpulse monitor accept search --config mcpulse.toml

Signals: SIGINT/SIGTERM stop cleanly; SIGHUP reloads the config (an invalid file is reported
and the running config kept). See docs/monitor.md.";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct MonitorArgs {
    #[command(subcommand)]
    pub action: Option<MonitorAction>,
    /// The config file (TOML; see docs/monitor.md).
    #[arg(long, short = 'c', value_name = "FILE", required = true)]
    pub config: Option<std::path::PathBuf>,
    /// Also monitor the mcpServers of an MCP client config (Claude Desktop, Cursor, VS Code,
    /// Claude Code); repeatable.
    #[arg(long, value_name = "FILE")]
    pub import: Vec<std::path::PathBuf>,
    /// Listen on this address instead of `[server] listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// How many probes may run at once.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// error, warn, info (transitions and alerts), debug (every check) or trace.
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
}

#[derive(Debug, Subcommand)]
pub enum MonitorAction {
    /// Make a target's current contract its drift baseline, through the running monitor's
    /// API (after a planned change of its tools): its drift incident resolves.
    #[command(after_help = ACCEPT_HELP)]
    Accept(AcceptArgs),
}

const ACCEPT_HELP: &str = "\
Examples:
  mcpulse monitor accept search --config /etc/mcpulse/mcpulse.toml
  mcpulse monitor accept search --config mcpulse.toml --url http://127.0.0.1:9477

The monitor's next check of the target that reaches the server takes its contract as the
baseline. Needs the API token ([server] token, read from the config with ${VAR} expanded).
Exit status: 0 accepted (the new baseline is stored), 1 refused, unreachable or the request
lost (a restart forgets a pending accept), 2 asked but not yet taken within --wait,
3 could not run (bad arguments, an invalid config).";

#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// The target's name, as the running monitor knows it (the config's, or a server added
    /// with `monitor --import`).
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// The monitor's config file: its API address and token are read from it (the target is
    /// looked up by the API).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: std::path::PathBuf,
    /// The monitor's API, when it listens elsewhere than [server] listen (e.g. --listen).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// How long to wait for the check that takes the contract (default: two of the target's
    /// intervals and its timeout, at least 5 s).
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The config file.
    #[arg(value_name = "FILE")]
    pub config: std::path::PathBuf,
    /// Client config files to import, as for `monitor --import`.
    #[arg(long, value_name = "FILE")]
    pub import: Vec<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where the monitor's API listens.
    #[arg(long, default_value = "127.0.0.1:9477", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,
    /// Also send the alerts to this webhook.
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// error, warn, info (transitions and alerts), debug (every check) or trace.
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
}

const SUPERVISE_HELP: &str = "\
Examples:
  mcpulse supervise -- npx -y @modelcontextprotocol/server-everything@2026.8.31
  mcpulse supervise --listen 127.0.0.1:9478 -- python3 -m mcp_server_time
  mcpulse supervise --wrap ~/.cursor/mcp.json --dry-run

See docs/supervise.md.";

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    /// The server: its command and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,

    /// How often to send the child a heartbeat (`ping`, or `server/discover` on 2026-07-28).
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub heartbeat_interval: String,
    /// How long a heartbeat may go unanswered before it counts as failed.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub heartbeat_timeout: String,
    /// Restart the child after this many heartbeat failures in a row.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub failures: u32,
    /// A heartbeat missed while a client request has been running for less than this counts
    /// as busy, not failed.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub busy_grace: String,
    /// The first restart's backoff; it doubles (with full jitter) up to --backoff-max.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub backoff_initial: String,
    /// The longest backoff between restarts.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub backoff_max: String,
    /// How long a child must stay up for the backoff to reset.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub backoff_reset: String,
    /// At most this many restarts within --restart-window; past it the supervisor gives up.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub max_restarts: u32,
    /// The window of --max-restarts.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub restart_window: String,
    /// Answer a client request that outlives this with an error, and cancel it in the child.
    /// Off by default: the client's own timeouts stand.
    #[arg(long, value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// A per-tool --request-timeout for `tools/call`, 'TOOL=DURATION' (repeatable).
    #[arg(long, value_name = "TOOL=DURATION")]
    pub tool_timeout: Vec<String>,
    /// How long a stopping child gets after its stdin is closed, and again after SIGTERM,
    /// before the next step (SIGTERM, then SIGKILL to its whole process group).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub stop_grace: String,
    /// The most messages held while the child restarts.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub queue_max_messages: usize,
    /// The most bytes held while the child restarts.
    #[arg(long, default_value = "16MiB", value_name = "SIZE")]
    pub queue_max_bytes: String,
    /// The longest message relayed either way; a longer line is dropped and reported.
    #[arg(long, default_value = "64MiB", value_name = "SIZE")]
    pub max_message_size: String,
    /// How much of the child's stderr to keep for diagnostics (it is passed through as well).
    #[arg(long, default_value = "64KiB", value_name = "SIZE")]
    pub stderr_ring: String,

    /// Serve /livez, /readyz (application/health+json) and /metrics on this address.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub log: LogArgs,

    /// Rewrite the stdio servers of this client config (Claude Desktop, Cursor, VS Code,
    /// Claude Code) to run under `mcpulse supervise`; a backup is written first.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["unwrap", "command"])]
    pub wrap: Option<std::path::PathBuf>,
    /// Undo --wrap: restore each server's own command.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["wrap", "command"])]
    pub unwrap: Option<std::path::PathBuf>,
    /// With --wrap or --unwrap: show the change as a diff and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

const GATEWAY_HELP: &str = "\
Examples:
  mcpulse gateway --listen 127.0.0.1:8080 -- npx -y @modelcontextprotocol/server-everything@2026.8.31
  mcpulse gateway --listen 127.0.0.1:8080 --upstream https://internal.example/mcp
  mcpulse gateway --config gateway.toml

See docs/gateway.md.";

#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// A stdio server to bridge: its command and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Front this Streamable HTTP server instead of a stdio command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub upstream: Option<String>,
    /// Serve /mcp (and, unless --health-listen, the health endpoints) on this address
    /// [default: 127.0.0.1:8080]; port 0 picks one (the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Read the settings from this TOML file (see docs/gateway.md); --listen and the log flags
    /// still apply.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "command", "upstream", "health_listen", "max_sessions", "session_idle_timeout",
        "allowed_origin", "allowed_host", "min_tools", "health_tool", "threads",
    ])]
    pub config: Option<std::path::PathBuf>,
    /// Serve /livez, /readyz and /metrics on this address instead of /mcp's.
    #[arg(long, value_name = "ADDR")]
    pub health_listen: Option<std::net::SocketAddr>,
    /// The most legacy sessions at once (each a child, for a stdio server); past it, 503
    /// [default: 100].
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// End a session (and stop its child) after this long without a request [default: 10m].
    #[arg(long, value_name = "DURATION")]
    pub session_idle_timeout: Option<String>,
    /// Also accept requests with this Origin (scheme://host[:port], or * for any); loopback
    /// origins are always accepted. Repeatable.
    #[arg(long, value_name = "ORIGIN")]
    pub allowed_origin: Vec<String>,
    /// Also accept this Host (host or host:port, or * to turn DNS-rebinding protection off);
    /// loopback names and the listen IP are always accepted. Repeatable.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
    /// /readyz needs at least this many tools from tools/list [default: 1].
    #[arg(long, value_name = "N")]
    pub min_tools: Option<usize>,
    /// Add a health tool to tools/list, answered by the gateway with /readyz's status
    /// [default name: health_check].
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "health_check")]
    pub health_tool: Option<String>,
    /// Runtime threads: 1 runs the gateway on one thread, which relays a request with the
    /// fewest wake-ups; more serve more calls a second where cores are spare [default: 1].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Where a long-running command (`supervise`, `gateway`) logs, and how much.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Write logs to this file instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<std::path::PathBuf>,
    /// error, warn, info (restarts, state changes; the gateway's requests), debug (heartbeats)
    /// or trace.
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
    /// Log lines as JSON objects instead of text.
    #[arg(long)]
    pub log_json: bool,
}

impl LogArgs {
    pub fn init(&self) -> anyhow::Result<()> {
        crate::log::init(&self.log_level, self.log_file.as_deref(), self.log_json)
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DocKind {
    Findings,
    Drift,
    Checks,
}

const PROBE_HELP: &str = "\
Examples:
  mcpulse probe https://mcp.example.com/mcp
  mcpulse probe http://127.0.0.1:3001/sse --transport sse
  mcpulse probe --json -- npx -y @modelcontextprotocol/server-everything@2026.8.31
  mcpulse probe -H 'Authorization: Bearer ${TOKEN}' https://mcp.example.com/mcp
  mcpulse probe --bearer-env MCP_TOKEN https://mcp.example.com/mcp
  mcpulse probe --baseline mcp.lock https://mcp.example.com/mcp

Exit codes: 0 healthy, 1 degraded, 2 down, 3 the probe could not run.
With --baseline: the worse of that and the drift (1 risky, 2 breaking).";

/// What to probe and how: shared by `probe` and `snapshot`.
const SNAPSHOT_HELP: &str = "\
Examples:
  mcpulse snapshot https://mcp.example.com/mcp -o mcp.lock
  mcpulse snapshot -o mcp.lock -- npx -y @modelcontextprotocol/server-everything@2026.8.31

Exit codes: 0 written; 1 the server is up but its contract could not be taken (gated by auth,
a list failing or cut short); 2 the server is down; 3 could not run.";

const DIFF_HELP: &str = "\
Examples:
  mcpulse diff mcp.lock new.lock
  mcpulse diff --json mcp.lock new.lock
  mcpulse diff --accept mcp.lock new.lock     # reviewed: new.lock becomes the baseline

Exit codes (a CI gate): 0 no drift or only info, 1 risky drift, 2 breaking drift, 3 could not run.";

#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The server's URL (Streamable HTTP or legacy HTTP+SSE). For a stdio server, give its
    /// command after `--` instead.
    #[arg(value_name = "URL")]
    pub url: Option<String>,

    /// A stdio server: the command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,

    /// Which protocol era to speak: auto tries the stateless 2026-07-28 `server/discover`
    /// first and falls back to the legacy `initialize` handshake.
    #[arg(long, value_enum, default_value_t = EraArg::Auto)]
    pub era: EraArg,

    /// Which HTTP transport: auto tries Streamable HTTP, then legacy HTTP+SSE.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    pub transport: TransportArg,

    /// Bounds the whole probe, whatever the server does (e.g. 10s, 500ms, 1m). Default: 10s
    /// for a URL; 60s for a stdio command, whose start-up may include a package manager's cold
    /// download (`npx`, `uvx`).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,

    /// Over stdio (auto era): also check whether a modern server serves legacy clients. It
    /// needs a second process, so a second start-up; over HTTP the check is always made.
    #[arg(long)]
    pub dual_era: bool,

    /// An HTTP header to send, 'Name: value' (repeatable). `${VAR}` in the value is read from
    /// the environment, so secrets need not be on the command line: -H 'Authorization: Bearer ${TOKEN}'.
    /// Header values never appear in any output.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,

    /// Send `Authorization: Bearer <value of VAR>`.
    #[arg(long, value_name = "VAR")]
    pub bearer_env: Option<String>,

    /// The most bytes one response may take, and one list across its pages (e.g. 8MiB, 512KiB).
    #[arg(long, default_value = "8MiB", value_name = "SIZE")]
    pub max_response_size: String,

    /// The most pages followed per list (tools, prompts, resources).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub max_pages: u32,

    /// Skip the security checks' extra requests (foreign Origin/Host, a malformed request,
    /// OAuth metadata); the grade then rests on what the health probe saw.
    #[arg(long)]
    pub no_security: bool,

    /// Also trust the CA certificates in this PEM file (a private CA).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Also read this HTTP health endpoint (`mcpulse supervise --listen`'s `/readyz`, a
    /// server's `/healthz`): a 503, a `fail`/`warn` document or a failing component is a
    /// finding. `auto`: read /readyz, /health and /healthz on the MCP URL's origin and judge the
    /// worst that answers as a health endpoint (none is an info finding). Default: none. See
    /// docs/probe.md.
    #[arg(long, value_name = "URL|auto")]
    pub health_url: Option<String>,

    /// After tools/list, call this tool (repeatable). The --args, --expect, --budget and
    /// --critical that follow a --call apply to it. Only a tool annotated readOnlyHint: true
    /// and not destructiveHint: true is called, unless --allow-side-effects. A failing call
    /// makes the server degraded, or down with --critical. See docs/probe.md.
    #[arg(long = "call", value_name = "TOOL")]
    pub calls: Vec<String>,

    /// The arguments of the preceding --call, a JSON object (default {}).
    #[arg(long = "args", value_name = "JSON")]
    pub call_args: Vec<String>,

    /// A condition on the preceding --call's result, 'PATH OP VALUE' (repeatable): PATH a JSON
    /// pointer into the result, OP ==, !=, <, <=, >, >=, contains or exists, VALUE JSON.
    /// E.g. '/structuredContent/status == "ok"'.
    #[arg(long, value_name = "'PATH OP VALUE'")]
    pub expect: Vec<String>,

    /// The latency budget of the preceding --call (default 5s): slower is a finding, and a
    /// call with no answer by then is given up and cancelled.
    #[arg(long, value_name = "DURATION")]
    pub budget: Vec<String>,

    /// The preceding --call is critical: its failure makes the server down, not degraded.
    #[arg(long, action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub critical: Vec<String>,

    /// Call tools that are not annotated read-only, or are annotated destructive. A health
    /// check must not mutate anything by accident: give this only for tools you know are safe.
    #[arg(long)]
    pub allow_side_effects: bool,

    /// The server's own health tool: auto (a tool named exactly health_check, health or
    /// healthcheck, with no required arguments, not destructive), a tool NAME, or off. Its
    /// structuredContent.status (ok, degraded, down) and components become findings.
    #[arg(long, default_value = "auto", value_name = "auto|NAME|off")]
    pub health_tool: String,

    /// The --call options in command-line order, grouped by call (filled by [`parse`]).
    #[arg(skip)]
    pub call_groups: Vec<CallGroup>,

    /// A handshake slower than this makes the server degraded.
    #[arg(long, default_value = "3s", value_name = "DURATION")]
    pub latency_budget: String,

    /// Print one JSON report (schema mcpulse.report/v1) instead of the summary; the same as
    /// `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// Output format: a summary for people, the JSON report, or SARIF 2.1.0 for code-scanning
    /// dashboards.
    #[arg(long, value_enum, default_value_t = FormatArg::Human)]
    pub format: FormatArg,

    /// Treat a remote server that answers without credentials as a high security finding
    /// (for servers that are not meant to be public).
    #[arg(long)]
    pub expect_auth: bool,

    /// Also write the raw transcript (every request and response, secrets redacted) to FILE.
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<std::path::PathBuf>,

    /// Compare the server's contract with this baseline (from `mcpulse snapshot`) and add a
    /// drift section; the exit code is then the worse of health and drift (2 breaking, 1 risky).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<std::path::PathBuf>,

    /// With --baseline: after reporting, rewrite the baseline with the current contract.
    #[arg(long, requires = "baseline")]
    pub accept: bool,

    /// With --baseline: use a baseline whose stored digests do not match its content (edited by
    /// hand or by a tool), with the digests computed from the content; each mismatch is
    /// reported. Without it, such a baseline is refused (exit 3).
    #[arg(long, requires = "baseline")]
    pub force: bool,

    /// When to use colour (auto: only on a terminal, and never with NO_COLOR set).
    #[arg(long, value_enum, default_value_t = ColorArg::Auto)]
    pub color: ColorArg,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Where to write the baseline (default: standard output).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline (reviewed, accepted) contract.
    #[arg(value_name = "OLD")]
    pub old: std::path::PathBuf,

    /// The contract to compare with it.
    #[arg(value_name = "NEW")]
    pub new: std::path::PathBuf,

    /// Print the drift as JSON (schema mcpulse.drift/v1).
    #[arg(long)]
    pub json: bool,

    /// After reporting, replace OLD with NEW (the drift was reviewed) and exit 0.
    #[arg(long)]
    pub accept: bool,

    /// Compare baselines whose stored digests do not match their content (edited by hand or
    /// by a tool): the digests are computed from the content, and each mismatch is reported.
    /// Without it, such a baseline is refused (exit 3).
    #[arg(long)]
    pub force: bool,

    /// When to use colour (auto: only on a terminal, and never with NO_COLOR set).
    #[arg(long, value_enum, default_value_t = ColorArg::Auto)]
    pub color: ColorArg,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum FormatArg {
    Human,
    Json,
    Sarif,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum EraArg {
    Auto,
    Modern,
    Legacy,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum TransportArg {
    Auto,
    StreamableHttp,
    Sse,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ColorArg {
    Auto,
    Always,
    Never,
}

/// Parses the command line. Usage errors exit 3 (could not run), not clap's 2, which would
/// read as "down" to a monitoring system; `--help` and `--version` exit 0.
pub fn parse() -> Result<Cli, ExitCode> {
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Cli::command().try_get_matches().and_then(|m| {
        let mut cli = Cli::from_arg_matches(&m)?;
        if let (Command::Probe(args), Some(pm)) = (&mut cli.command, m.subcommand_matches("probe"))
        {
            args.call_groups = group_calls(pm).map_err(|msg| {
                Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg)
            })?;
        }
        Ok(cli)
    });
    match parsed {
        Ok(c) => Ok(c),
        Err(e) => {
            let _ = e.print();
            Err(if e.use_stderr() {
                ExitCode::from(crate::EXIT_COULD_NOT_RUN)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// One `--call` and the options that followed it, as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallGroup {
    pub tool: String,
    pub args: Option<String>,
    pub expect: Vec<String>,
    pub budget: Option<String>,
    pub critical: bool,
}

/// Groups `--args`, `--expect`, `--budget` and `--critical` with the `--call` before them, by
/// their positions on the command line.
fn group_calls(m: &clap::ArgMatches) -> Result<Vec<CallGroup>, String> {
    let with_index = |id: &str| -> Vec<(usize, String)> {
        match (m.indices_of(id), m.get_many::<String>(id)) {
            (Some(i), Some(v)) => i.zip(v.cloned()).collect(),
            _ => Vec::new(),
        }
    };
    group(
        with_index("calls"),
        [
            ("--args", with_index("call_args")),
            ("--expect", with_index("expect")),
            ("--budget", with_index("budget")),
            ("--critical", with_index("critical")),
        ],
    )
}

/// [`group_calls`] on positions: each option goes to the last `--call` before it.
fn group(
    calls: Vec<(usize, String)>,
    options: [(&'static str, Vec<(usize, String)>); 4],
) -> Result<Vec<CallGroup>, String> {
    let mut groups: Vec<(usize, CallGroup)> = calls
        .into_iter()
        .map(|(i, tool)| {
            (
                i,
                CallGroup {
                    tool,
                    ..CallGroup::default()
                },
            )
        })
        .collect();
    for (flag, values) in options {
        for (at, value) in values {
            let Some((_, g)) = groups.iter_mut().rev().find(|(i, _)| *i < at) else {
                return Err(format!(
                    "{flag} applies to the --call before it, and there is none: write --call TOOL first"
                ));
            };
            let twice = |what: &str| {
                format!(
                    "{flag} given twice for --call {}: one {what} per call",
                    g.tool
                )
            };
            match flag {
                "--args" if g.args.is_some() => return Err(twice("--args")),
                "--args" => g.args = Some(value),
                "--budget" if g.budget.is_some() => return Err(twice("--budget")),
                "--budget" => g.budget = Some(value),
                "--critical" => g.critical = true,
                _ => g.expect.push(value),
            }
        }
    }
    Ok(groups.into_iter().map(|(_, g)| g).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_options_go_to_the_call_before_them() {
        let v = |i: usize, s: &str| (i, s.to_owned());
        let g = group(
            vec![v(1, "echo"), v(7, "add")],
            [
                ("--args", vec![v(3, "{}"), v(9, "{\"a\":1}")]),
                ("--expect", vec![v(5, "/x exists"), v(11, "/y exists")]),
                ("--budget", vec![v(13, "1s")]),
                ("--critical", vec![v(4, "true")]),
            ],
        )
        .unwrap_or_default();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].args.as_deref(), g[0].critical), (Some("{}"), true));
        assert_eq!(g[0].expect, ["/x exists"]);
        assert_eq!(g[1].budget.as_deref(), Some("1s"));
        assert!(!g[1].critical);
        let none: Vec<(usize, String)> = Vec::new();
        let orphan = group(
            vec![v(5, "echo")],
            [
                ("--args", vec![v(2, "{}")]),
                ("--expect", none.clone()),
                ("--budget", none.clone()),
                ("--critical", none.clone()),
            ],
        );
        assert_eq!(
            orphan,
            Err("--args applies to the --call before it, and there is none: write --call TOOL first".into())
        );
        let twice = group(
            vec![v(1, "echo")],
            [
                ("--args", vec![v(3, "{}"), v(5, "{}")]),
                ("--expect", none.clone()),
                ("--budget", none.clone()),
                ("--critical", none),
            ],
        );
        assert_eq!(
            twice,
            Err("--args given twice for --call echo: one --args per call".into())
        );
    }

    /// The words of one shell command line: single and double quotes group (and are removed),
    /// a `#` outside quotes starts a comment, and a `|`, `>` or `&` (a pipe, a redirect, a
    /// command sent to the background or chained) ends the command.
    fn words(line: &str) -> Vec<String> {
        let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => cur.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    any = true;
                }
                (None, '#' | '|' | '>' | '&') => break,
                (None, c) if c.is_whitespace() => {
                    if any || !cur.is_empty() {
                        out.push(std::mem::take(&mut cur));
                        any = false;
                    }
                }
                (None, c) => cur.push(c),
            }
        }
        if any || !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    /// Every `mcpulse …` command line in the fenced blocks of the README and docs/*.md (a
    /// `$ ` prompt and `cargo run … --` before it are allowed; usage lines with `[OPTIONS]` or
    /// `<…>` placeholders are not commands).
    fn doc_commands() -> Vec<(String, Vec<String>)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = vec![root.join("README.md")];
        if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
            let mut docs: Vec<_> = dir
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect();
            docs.sort();
            files.extend(docs);
        }
        let mut out = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            // The fence's language while inside one: in a shell block every `mcpulse` line
            // is a command; in another block only one after a `$ ` prompt.
            let mut fence: Option<String> = None;
            for (n, line) in text.lines().enumerate() {
                let t = line.trim_start();
                if let Some(info) = t.strip_prefix("```") {
                    fence = match fence {
                        Some(_) => None,
                        None => Some(info.trim().to_owned()),
                    };
                    continue;
                }
                let Some(lang) = &fence else { continue };
                let shell = matches!(lang.as_str(), "sh" | "bash" | "shell" | "console");
                let t = match t.strip_prefix("$ ") {
                    Some(rest) => rest,
                    None if shell => t,
                    None => continue,
                };
                let t = t
                    .strip_prefix("cargo run --release -p mcpulse -- ")
                    .map(|rest| format!("mcpulse {rest}"))
                    .unwrap_or_else(|| t.to_owned());
                if !t.starts_with("mcpulse ") || t.contains("[OPTIONS]") || t.contains(" <") {
                    continue;
                }
                out.push((format!("{}:{}", file.display(), n + 1), words(&t)));
            }
        }
        out
    }

    #[test]
    fn every_command_line_in_the_docs_parses() {
        let commands = doc_commands();
        assert!(commands.len() >= 20, "{commands:?}");
        for (at, argv) in commands {
            // `--version` and `--help` "fail" to parse by printing, as they should.
            if let Err(e) = Cli::try_parse_from(&argv)
                && !matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayVersion | clap::error::ErrorKind::DisplayHelp
                )
            {
                panic!("{at}: `{}` does not parse:\n{e}", argv.join(" "));
            }
        }
    }

    #[test]
    fn words_follow_the_shell() {
        assert_eq!(
            words("mcpulse probe -H 'Authorization: Bearer ${T}' https://h/mcp # note"),
            [
                "mcpulse",
                "probe",
                "-H",
                "Authorization: Bearer ${T}",
                "https://h/mcp"
            ]
        );
        assert_eq!(
            words("mcpulse probe --json x | jq ."),
            ["mcpulse", "probe", "--json", "x"]
        );
        assert_eq!(words("a \"\" b"), ["a", "", "b"]);
    }
}
