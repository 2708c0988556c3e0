//! The stdio supervisor: `mcpulse supervise -- <command>` sits between an MCP client and a
//! local server process, relays their messages line by line, and keeps the server alive and
//! answering (issue #17). See docs/supervise.md.
//!
//! - [`child`]: the process: group, parent-death signal, subreaper, stderr ring, stop;
//! - [`lines`]: bounded line reading, both directions;
//! - [`envelope`]: the little of a message the relay reads;
//! - [`session`]: the relay loop: routing, heartbeats, restarts, replay, queue, timeouts;
//! - [`watchdog`]: the process that kills what is left when the supervisor is SIGKILLed.
//!
//! Every decision (is a missed heartbeat a failure, how long to back off, when to give up, when
//! a request expires) is `mcpulse-policy`'s; this module waits, reads, writes and signals.

pub mod child;
pub mod envelope;
pub mod lines;
pub mod session;
pub mod watchdog;

pub use child::Program;
pub use session::{Outcome, SIGNAL_GRACE, run, run_until};

// The policy settings a caller fills in, re-exported so that the CLI needs no other crate.
pub use mcpulse_policy::backoff::Backoff;
pub use mcpulse_policy::heartbeat::HeartbeatPolicy;
pub use mcpulse_policy::restart::RestartPolicy;
pub use mcpulse_policy::timeout::Timeouts;
use std::time::Duration;

/// The JSON-RPC error codes the supervisor answers with (all in the range JSON-RPC leaves to
/// implementations, -32000..-32099). Documented in docs/supervise.md §Error codes.
pub mod codes {
    /// A request outlived `--request-timeout` / `--tool-timeout` (the TypeScript SDK's
    /// `RequestTimeout` code, so clients already treat it as a timeout).
    pub const REQUEST_TIMEOUT: i64 = -32001;
    /// The server exited or was restarted while the request was in flight.
    pub const SERVER_RESTARTED: i64 = -32080;
    /// The restart budget is spent: the supervisor no longer restarts the server.
    pub const SUPERVISOR_GAVE_UP: i64 = -32081;
    /// The restarted server negotiated a different protocol version or capabilities than the
    /// client did; the client must initialize again.
    pub const SESSION_CHANGED: i64 = -32082;
    /// The queue held during a restart is full.
    pub const QUEUE_FULL: i64 = -32083;
    /// The request (or its reply) was longer than `--max-message-size`.
    pub const MESSAGE_TOO_LARGE: i64 = -32084;
    /// Not forwarded: too many requests in flight (10,000), or an id over 1 KiB; the
    /// supervisor bounds what it tracks.
    pub const TOO_MANY_REQUESTS: i64 = -32085;
    /// JSON-RPC's own "Invalid Request": each request of a client's batch (a JSON array of
    /// messages), which the supervisor does not forward, and each item of a batch that is no
    /// message (id null).
    pub const INVALID_REQUEST: i64 = -32600;
}

/// Everything the supervisor is told, resolved and validated (by the CLI).
#[derive(Debug, Clone)]
pub struct Settings {
    pub program: Program,
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
    pub heartbeat: HeartbeatPolicy,
    pub restart: RestartPolicy,
    pub timeouts: Timeouts,
    /// Each step of a graceful stop: after closing stdin, after SIGTERM.
    pub stop_grace: Duration,
    pub queue_max_messages: usize,
    pub queue_max_bytes: usize,
    pub max_message_size: usize,
    pub stderr_ring: usize,
    /// How long a restarted child has to answer the replayed `initialize`; past it the start
    /// counts as failed (and goes through the restart policy).
    pub start_timeout: Duration,
    /// Whether the errors a client gets when the server exits or is given up on end with the
    /// server's stderr tail. On for `mcpulse supervise` (the client spawned the server, on its
    /// own machine: the tail tells its user why); off in the gateway, whose clients are remote
    /// and may be others than the one whose request the server was serving. The log has it
    /// either way.
    pub stderr_in_errors: bool,
    /// Whether the server's stderr is logged line by line, inert and with `secrets` hidden
    /// ([`child::Stderr::Log`]), rather than passed to our stderr byte for byte. Off for
    /// `mcpulse supervise` (its stderr is the client's log of the server); on in the gateway,
    /// whose stderr is its own log.
    pub stderr_as_log_lines: bool,
    /// Values hidden in the stderr tail wherever it is shown (the log included): the command
    /// line's secrets ([`mcpulse_wire::redact::argv_secrets`], set by [`Settings::new`]), and
    /// the config's `${VAR}` values where there is a config.
    pub secrets: mcpulse_wire::redact::Secrets,
}

impl Settings {
    /// The CLI's defaults, for `program`.
    pub fn new(program: Program) -> Settings {
        let argv: Vec<String> = std::iter::once(program.program.clone())
            .chain(program.args.iter().cloned())
            .collect();
        Settings {
            secrets: mcpulse_wire::redact::argv_secrets(&argv),
            stderr_in_errors: true,
            stderr_as_log_lines: false,
            program,
            heartbeat_interval: Duration::from_secs(30),
            heartbeat_timeout: Duration::from_secs(5),
            heartbeat: HeartbeatPolicy::default(),
            restart: RestartPolicy::default(),
            timeouts: Timeouts::default(),
            stop_grace: Duration::from_secs(2),
            queue_max_messages: 1000,
            queue_max_bytes: 16 << 20,
            max_message_size: 64 << 20,
            stderr_ring: 64 << 10,
            start_timeout: Duration::from_secs(30),
        }
    }
}
