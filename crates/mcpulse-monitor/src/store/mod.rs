//! The monitor's memory: an embedded SQLite file holding every check, the events it caused,
//! the state to resume after a restart, the alert outbox and the accepted contracts.
//!
//! It owns the schema, its migrations, the durability settings and the queries (history
//! pages, uptime and latency statistics, pruning). It does not decide anything: the state
//! machine ([`crate::state`]) and the alert policy ([`crate::alert`]) hand it finished
//! [`CheckRecord`]s, and the sink workers read the outbox and report back. It is synchronous;
//! the daemon runs it on one dedicated thread (or `spawn_blocking`), through [`adapters`] where
//! async code reads it.
//!
//! ## Why the outbox makes alerts exactly-once across crashes
//!
//! A check's result, the target's new state, its open incidents and the alerts to send are
//! written in **one transaction** ([`Store::record`]). After a crash, either all of it is there
//! or none of it is: a restarted monitor resumes from the stored state (thresholds, flapping
//! window, open incidents) and finds every alert of every committed check in the outbox,
//! undelivered ones still pending. Nothing is sent from memory, so nothing is lost, and an
//! alert row exists once per (check, alert, sink) (a `UNIQUE` constraint), so nothing is
//! duplicated. A sink that fails keeps its row pending with a later due time; the rows of one
//! incident (`dedup_key`) for one sink leave in order, so a `resolve` never overtakes its
//! `trigger`.
//!
//! ## Durability and speed
//!
//! WAL journal, `synchronous=NORMAL` by default ([`Durability::ProcessCrash`]): a commit
//! `write()`s the transaction into the WAL before returning, so a crash of the process
//! (SIGKILL, panic, OOM kill) loses no committed batch; only a crash of the machine (power
//! loss, kernel panic) can roll back the last few transactions, never corrupt the file.
//! [`Durability::PowerLoss`] (`synchronous=FULL`) fsyncs every commit. Writes are batched:
//! one transaction for many checks, with cached prepared statements, and a target's state is
//! written once per batch however many of its checks the batch holds. The WAL is
//! checkpointed every ~40 MiB (not SQLite's 4 MiB), which about halved the system time of
//! writing in `examples/store_bench.rs` (the benchmark: `cargo run --release -p
//! mcpulse-monitor --example store_bench`).
//!
//! ## One writer, many readers
//!
//! The file is opened with SQLite's normal locking, so other programs can read it while the
//! monitor writes (`sqlite3 -readonly`, `.backup`, `VACUUM INTO`, Litestream; docs/history.md).
//! A second monitor on the same file would double every alert: it is refused by an advisory
//! lock on a sidecar file, `<database>.lock`, held for the store's life ([`lock`]).
//!
//! ## Schema (version 5)
//!
//! ```text
//! targets  id, name UNIQUE, state JSON, incidents JSON, updated_ms, contract, contract_ms
//! checks   id, target_id, at_ms, status, duration_ms, timings JSON, findings JSON, grade
//!          index (target_id, at_ms, status, duration_ms): history pages, and statistics
//!          read from the index alone without touching the wide JSON rows
//! events   id, target_id, check_id, at_ms, kind, event JSON      index (target_id, at_ms)
//! calls    id, target_id, check_id, at_ms, tool, ok, ms   index (target_id, at_ms, tool, ok, ms):
//!          each synthetic call of a check, for the per-tool figures ([`Store::tool_stats`])
//!          check_id 0: not caused by a check (a target removed from the config)
//! uptime_hourly  target_id, hour, checks, up, healthy   PRIMARY KEY (target_id, hour), no rowid:
//!          the checks counted per hour (`at_ms / 3600000`), written with them, for the status
//!          page's uptime bars ([`Store::uptime_hours`])
//! outbox   id, target_id, check_id, seq, sink, dedup_key, created_ms, due_ms, attempts,
//!          last_error, done_ms, delivered, alert JSON             UNIQUE (check_id, seq, sink)
//!          sink is the sink's identity ([`SinkId`]: kind and digest of its destination);
//!          check_id NULL: not caused by a check (the resolves of a removed target)
//!          partial indexes of the pending rows (done_ms IS NULL): (sink, dedup_key, id) for
//!          the per-incident order, (due_ms) for what is due
//! views    v_checks, v_events, v_transitions, v_alerts, v_calls, v_uptime_hourly: the
//!          stable read interface (docs/history.md); the tables above may change
//! ```
//!
//! Version 1 named the sink by its index in `[[alerts]]`, which a reordered config sent to
//! the wrong receiver. Migration 2 rewrites those rows' sink as `legacy#<index>`;
//! [`Store::adopt_legacy_sinks`] (the daemon calls it at start, with the config it starts
//! with) gives each the identity of the sink at that index, and
//! [`Store::abandon_missing_sinks`] sets aside pending rows whose sink is not configured.
//!
//! `PRAGMA user_version` is the schema version and `PRAGMA application_id` marks the file as
//! mcpulse's. Each migration runs in its own transaction together with the version bump.

pub mod adapters;
mod lock;
pub mod read;

pub use lock::lock_path;

use crate::alert::{Alert, Incidents};
use crate::check::{CallStats, CheckRecord, HistoryRow, Removal, Stats, ToolStats};
use crate::sink::SinkId;
use crate::state::{Event, Health, TargetState};
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

/// `PRAGMA application_id`: "MCPL".
const APPLICATION_ID: i32 = 0x4d43_504c;

/// The migrations, in order: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
/// Append only; never edit one that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "
    CREATE TABLE targets (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL UNIQUE,
        state       TEXT,
        incidents   TEXT,
        updated_ms  INTEGER,
        contract    TEXT,
        contract_ms INTEGER
    ) STRICT;

    CREATE TABLE checks (
        id          INTEGER PRIMARY KEY,
        target_id   INTEGER NOT NULL,
        at_ms       INTEGER NOT NULL,
        status      TEXT NOT NULL
                    CHECK (status IN ('unknown', 'healthy', 'degraded', 'down')),
        duration_ms REAL NOT NULL,
        timings     TEXT NOT NULL,
        findings    TEXT NOT NULL,
        grade       TEXT
    ) STRICT;
    CREATE INDEX checks_by_target_time ON checks (target_id, at_ms, status, duration_ms);

    CREATE TABLE events (
        id        INTEGER PRIMARY KEY,
        target_id INTEGER NOT NULL,
        check_id  INTEGER NOT NULL,
        at_ms     INTEGER NOT NULL,
        kind      TEXT NOT NULL,
        event     TEXT NOT NULL
    ) STRICT;
    CREATE INDEX events_by_target_time ON events (target_id, at_ms);

    CREATE TABLE outbox (
        id         INTEGER PRIMARY KEY,
        target_id  INTEGER NOT NULL,
        check_id   INTEGER NOT NULL,
        seq        INTEGER NOT NULL,
        sink       INTEGER NOT NULL,
        dedup_key  TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        due_ms     INTEGER NOT NULL,
        attempts   INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        done_ms    INTEGER,
        delivered  INTEGER NOT NULL DEFAULT 0,
        alert      TEXT NOT NULL,
        UNIQUE (check_id, seq, sink)
    ) STRICT;
    CREATE INDEX outbox_pending ON outbox (sink, dedup_key, id) WHERE done_ms IS NULL;
    CREATE INDEX outbox_due ON outbox (due_ms) WHERE done_ms IS NULL;
    ",
    // 2: outbox rows name their sink by identity, not by index; rows that no check caused
    // (resolves of a removed target) have no check_id. Old rows keep their ids (their
    // order) and get `legacy#<index>` until the daemon maps them (`adopt_legacy_sinks`).
    "
    CREATE TABLE outbox_v2 (
        id         INTEGER PRIMARY KEY,
        target_id  INTEGER NOT NULL,
        check_id   INTEGER,
        seq        INTEGER NOT NULL,
        sink       TEXT NOT NULL,
        dedup_key  TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        due_ms     INTEGER NOT NULL,
        attempts   INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        done_ms    INTEGER,
        delivered  INTEGER NOT NULL DEFAULT 0,
        alert      TEXT NOT NULL,
        UNIQUE (check_id, seq, sink)
    ) STRICT;
    INSERT INTO outbox_v2 (id, target_id, check_id, seq, sink, dedup_key, created_ms, due_ms,
                           attempts, last_error, done_ms, delivered, alert)
        SELECT id, target_id, check_id, seq, 'legacy#' || sink, dedup_key, created_ms, due_ms,
               attempts, last_error, done_ms, delivered, alert
        FROM outbox;
    DROP TABLE outbox;
    ALTER TABLE outbox_v2 RENAME TO outbox;
    CREATE INDEX outbox_pending ON outbox (sink, dedup_key, id) WHERE done_ms IS NULL;
    CREATE INDEX outbox_due ON outbox (due_ms) WHERE done_ms IS NULL;
    ",
    // 3: the synthetic calls of each check (`[[targets.call]]`), one row a call, for the
    // per-tool latency and error figures; the index covers what those read.
    "
    CREATE TABLE calls (
        id        INTEGER PRIMARY KEY,
        target_id INTEGER NOT NULL,
        check_id  INTEGER NOT NULL,
        at_ms     INTEGER NOT NULL,
        tool      TEXT NOT NULL,
        ok        INTEGER NOT NULL,
        ms        REAL
    ) STRICT;
    CREATE INDEX calls_by_target_time ON calls (target_id, at_ms, tool, ok, ms);
    ",
    // 4: an hourly rollup of the checks (how many, how many answered, how many healthy) for
    // the status page's uptime bars: 90 days of a page of targets is a few thousand rows of
    // a clustered key instead of millions of checks. Filled from the checks already stored.
    "
    CREATE TABLE uptime_hourly (
        target_id INTEGER NOT NULL,
        hour      INTEGER NOT NULL,
        checks    INTEGER NOT NULL,
        up        INTEGER NOT NULL,
        healthy   INTEGER NOT NULL,
        PRIMARY KEY (target_id, hour)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO uptime_hourly (target_id, hour, checks, up, healthy)
        SELECT target_id, at_ms / 3600000, count(*), sum(status <> 'down'),
               sum(status = 'healthy')
        FROM checks GROUP BY 1, 2;
    ",
    // 5: the read interface (docs/history.md): views with target names instead of ids and
    // RFC 3339 times beside the milliseconds, for `sqlite3`, dashboards and `mcpulse history
    // export`. Their names and columns are stable across schema versions (columns may be
    // added at the end; none is renamed or removed): the tables under them are not. Each is
    // dropped first, so the step also mends a file whose version was set back by hand.
    "
    DROP VIEW IF EXISTS v_checks;
    DROP VIEW IF EXISTS v_events;
    DROP VIEW IF EXISTS v_transitions;
    DROP VIEW IF EXISTS v_alerts;
    DROP VIEW IF EXISTS v_calls;
    DROP VIEW IF EXISTS v_uptime_hourly;
    CREATE VIEW v_checks AS
        SELECT c.id AS check_id, t.name AS target, c.at_ms,
               strftime('%Y-%m-%dT%H:%M:%fZ', c.at_ms / 1000.0, 'unixepoch') AS at,
               c.status, c.duration_ms, c.grade, c.timings, c.findings
        FROM checks c JOIN targets t ON t.id = c.target_id;
    CREATE VIEW v_events AS
        SELECT e.id AS event_id, t.name AS target, e.check_id, e.at_ms,
               strftime('%Y-%m-%dT%H:%M:%fZ', e.at_ms / 1000.0, 'unixepoch') AS at,
               e.kind, e.event
        FROM events e JOIN targets t ON t.id = e.target_id;
    CREATE VIEW v_transitions AS
        SELECT e.id AS event_id, t.name AS target, e.check_id, e.at_ms,
               strftime('%Y-%m-%dT%H:%M:%fZ', e.at_ms / 1000.0, 'unixepoch') AS at,
               json_extract(e.event, '$.from') AS from_status,
               json_extract(e.event, '$.to') AS to_status,
               json_extract(e.event, '$.reason') AS reason,
               json_extract(e.event, '$.quiet') AS quiet
        FROM events e JOIN targets t ON t.id = e.target_id
        WHERE e.kind = 'transition';
    CREATE VIEW v_alerts AS
        SELECT o.id AS alert_id, t.name AS target, o.check_id, o.dedup_key, o.sink,
               json_extract(o.alert, '$.action') AS action,
               json_extract(o.alert, '$.kind') AS kind,
               json_extract(o.alert, '$.severity') AS severity,
               json_extract(o.alert, '$.summary') AS summary,
               o.created_ms,
               strftime('%Y-%m-%dT%H:%M:%fZ', o.created_ms / 1000.0, 'unixepoch') AS created,
               o.done_ms,
               strftime('%Y-%m-%dT%H:%M:%fZ', o.done_ms / 1000.0, 'unixepoch') AS done,
               o.delivered, o.attempts, o.last_error
        FROM outbox o JOIN targets t ON t.id = o.target_id;
    CREATE VIEW v_calls AS
        SELECT c.id AS call_id, t.name AS target, c.check_id, c.at_ms,
               strftime('%Y-%m-%dT%H:%M:%fZ', c.at_ms / 1000.0, 'unixepoch') AS at,
               c.tool, c.ok, c.ms
        FROM calls c JOIN targets t ON t.id = c.target_id;
    CREATE VIEW v_uptime_hourly AS
        SELECT t.name AS target, u.hour * 3600000 AS hour_ms,
               strftime('%Y-%m-%dT%H:%M:%SZ', u.hour * 3600, 'unixepoch') AS hour,
               u.checks, u.up, u.healthy
        FROM uptime_hourly u JOIN targets t ON t.id = u.target_id;
    ",
];

/// The length of one rollup bucket ([`Store::uptime_hours`]).
pub const HOUR_MS: i64 = 3_600_000;

/// The sink of an outbox row written by schema version 1, before it is mapped to an identity.
const LEGACY_SINK_PREFIX: &str = "legacy#";

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The statistics windows.
const WINDOWS: [(&str, i64); 4] = [
    ("1h", 3_600_000),
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

/// How long a statement waits for a lock held by another connection before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a committed batch survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=NORMAL`: survives a crash of the process (SIGKILL, panic, OOM kill); a
    /// crash of the machine may roll back the last transactions, without corruption.
    #[default]
    ProcessCrash,
    /// `synchronous=FULL`: every commit is fsynced, and survives power loss too. Slower.
    PowerLoss,
}

/// Why the store could not do what was asked. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "could not open the history database {path}: {detail}; check that its directory \
         exists and is writable, or set storage.path to another file"
    )]
    CannotOpen { path: String, detail: String },
    #[error(
        "another mcpulse monitor{} is writing the history database {path} (it holds the lock \
         {lock}); stop it, or give this monitor another storage.path. Reading the file while \
         it runs needs no lock (docs/history.md)",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    AnotherMonitor {
        path: String,
        lock: String,
        pid: Option<u32>,
    },
    #[error(
        "the database file {path} is locked by another program writing it; stop that \
         program, or set storage.path to another file"
    )]
    Locked { path: String },
    #[error(
        "{path} is not an SQLite database or is damaged ({detail}); move it aside and \
         mcpulse will start a new history there"
    )]
    Damaged { path: String, detail: String },
    #[error(
        "{path} is an SQLite database that mcpulse did not create; set storage.path to \
         another file"
    )]
    NotMcpulse { path: String },
    #[error(
        "{path} was written by a newer mcpulse (schema version {found}; this mcpulse knows up \
         to {supported}); upgrade mcpulse, or set storage.path to another file"
    )]
    TooNew {
        path: String,
        found: i64,
        supported: i64,
    },
    #[error(
        "{path} has schema version {found}, older than the read interface (version \
         {needed}); start this mcpulse's monitor on it once to upgrade it"
    )]
    TooOld {
        path: String,
        found: i64,
        needed: i64,
    },
    #[error(
        "could not upgrade the history database {path} to schema version {version}: \
         {detail}; the file was left at version {} unchanged",
        version - 1
    )]
    Migration {
        path: String,
        version: i64,
        detail: String,
    },
    #[error(
        "the disk holding the history database {path} is full; free space or shorten storage.retention"
    )]
    DiskFull { path: String },
    #[error(
        "the history database {path} is read-only; check its permissions and those of its directory"
    )]
    ReadOnly { path: String },
    #[error("could not encode {what} for the history database: {source}")]
    Encode {
        what: String,
        source: serde_json::Error,
    },
    #[error(
        "could not read {what} from the history database {path}: {detail}; the file may have \
         been written by an incompatible mcpulse"
    )]
    Decode {
        path: String,
        what: String,
        detail: String,
    },
    #[error("history database {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
}

/// One alert waiting in the outbox for one sink.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxItem {
    pub id: i64,
    /// The sink's identity.
    pub sink: SinkId,
    pub alert: Alert,
    /// Failed attempts so far (for the backoff).
    pub attempts: u32,
}

/// One hour of one target's checks ([`Store::uptime_hours`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourCount {
    pub target: String,
    /// `at_ms / 3600000`.
    pub hour: i64,
    pub checks: u64,
    /// Checks that were not down.
    pub up: u64,
    pub healthy: u64,
}

/// One alert for one sink, as the outbox holds it ([`Store::sent_alerts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SentAlert {
    /// The sink's identity (`kind:digest`).
    pub sink: String,
    pub created_ms: i64,
    /// When it left the outbox (delivered or given up); `None` while pending.
    pub done_ms: Option<i64>,
    pub delivered: bool,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub alert: Alert,
}

/// The history database. One per monitor; see the module docs.
pub struct Store {
    // Declared before the lock: dropped (closed, the WAL checkpointed) before it is released.
    conn: Connection,
    path: String,
    /// The single-writer lock of a file database; `None` in memory.
    _lock: Option<lock::WriterLock>,
}

/// Errors inside the store, before they are given their path and their advice.
enum Fail {
    Sql(rusqlite::Error),
    Encode(&'static str, serde_json::Error),
    Decode(String, String),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Fail {
        Fail::Sql(e)
    }
}

fn classify(path: &str, e: Fail) -> StoreError {
    let path = path.to_owned();
    match e {
        Fail::Sql(e) => match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StoreError::Locked { path }
            }
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Damaged {
                path,
                detail: e.to_string(),
            },
            Some(ErrorCode::DiskFull) => StoreError::DiskFull { path },
            Some(ErrorCode::ReadOnly) => StoreError::ReadOnly { path },
            Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => StoreError::CannotOpen {
                path,
                detail: e.to_string(),
            },
            _ => StoreError::Sqlite { path, source: e },
        },
        Fail::Encode(what, source) => StoreError::Encode {
            what: what.to_owned(),
            source,
        },
        Fail::Decode(what, detail) => StoreError::Decode { path, what, detail },
    }
}

fn encode<T: serde::Serialize>(what: &'static str, v: &T) -> Result<String, Fail> {
    serde_json::to_string(v).map_err(|e| Fail::Encode(what, e))
}

fn decode<T: serde::de::DeserializeOwned>(what: impl Fn() -> String, s: &str) -> Result<T, Fail> {
    serde_json::from_str(s).map_err(|e| Fail::Decode(what(), e.to_string()))
}

fn health(s: &str) -> Result<Health, Fail> {
    Ok(match s {
        "unknown" => Health::Unknown,
        "healthy" => Health::Healthy,
        "degraded" => Health::Degraded,
        "down" => Health::Down,
        other => return Err(Fail::Decode("a check".into(), format!("status {other:?}"))),
    })
}

fn event_kind(e: &Event) -> &'static str {
    match e {
        Event::Transition { .. } => "transition",
        Event::FlappingStarted { .. } => "flapping_started",
        Event::FlappingStopped { .. } => "flapping_stopped",
        Event::Drift { .. } => "drift",
        Event::AuthChanged { .. } => "auth_changed",
        Event::ProtocolChanged { .. } => "protocol_changed",
        Event::GradeChanged { .. } => "grade_changed",
        Event::Component { .. } => "component",
        Event::Removed { .. } => "removed",
    }
}

fn event_at(e: &Event) -> i64 {
    match e {
        Event::Transition { at_ms, .. }
        | Event::FlappingStarted { at_ms, .. }
        | Event::FlappingStopped { at_ms, .. }
        | Event::Drift { at_ms, .. }
        | Event::AuthChanged { at_ms, .. }
        | Event::ProtocolChanged { at_ms, .. }
        | Event::GradeChanged { at_ms, .. }
        | Event::Component { at_ms, .. }
        | Event::Removed { at_ms, .. } => *at_ms,
    }
}

/// Converts a count for SQLite, saturating (a `LIMIT` of `i64::MAX` is as good as unlimited).
/// A stored count (never negative) as a `u64`.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn sql_count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// Opens (creating it and its directory when missing) the history database at `path`,
    /// with [`Durability::ProcessCrash`], and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, Durability::default())
    }

    /// [`Store::open`] with a chosen durability.
    pub fn open_with(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        let shown = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::CannotOpen {
                path: shown.clone(),
                detail: format!("creating {}: {e}", dir.display()),
            })?;
        }
        // The lock before the database: a second monitor is refused before it reads a page.
        let held = lock::WriterLock::acquire(path).map_err(|e| match e {
            lock::LockFail::Held { lock, pid } => StoreError::AnotherMonitor {
                path: shown.clone(),
                lock: lock.display().to_string(),
                pid,
            },
            lock::LockFail::Io { lock, error } => StoreError::CannotOpen {
                path: shown.clone(),
                detail: format!("locking {}: {error}", lock.display()),
            },
        })?;
        let conn = Connection::open(path).map_err(|e| classify(&shown, Fail::Sql(e)))?;
        Store::setup(conn, shown, durability, Some(held))
    }

    /// A private database in memory, for tests.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(|e| classify(":memory:", Fail::Sql(e)))?;
        Store::setup(conn, ":memory:".to_owned(), Durability::default(), None)
    }

    fn setup(
        conn: Connection,
        path: String,
        durability: Durability,
        lock: Option<lock::WriterLock>,
    ) -> Result<Store, StoreError> {
        let mut store = Store {
            conn,
            path,
            _lock: lock,
        };
        store
            .configure(durability)
            .map_err(|e| classify(&store.path, e))?;
        store.migrate()?;
        Ok(store)
    }

    /// Connection settings. Order matters: the page size only applies to a file not written
    /// yet. Normal locking (not `EXCLUSIVE`): readers share the WAL's index in `<db>-shm`.
    /// The first read of the file happens here, so a file that is not a database is refused
    /// at open.
    fn configure(&mut self, durability: Durability) -> Result<(), Fail> {
        let c = &self.conn;
        c.busy_timeout(BUSY_TIMEOUT)?;
        c.pragma_update(None, "page_size", 4096)?;
        let mode: String = c.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(Fail::Decode(
                "the journal mode".into(),
                format!("the file stays in {mode} mode; WAL is required"),
            ));
        }
        let sync = match durability {
            Durability::ProcessCrash => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        c.pragma_update(None, "synchronous", sync)?;
        c.pragma_update(None, "temp_store", "MEMORY")?;
        // 16 MiB of page cache: the indexes of a busy fleet stay hot.
        c.pragma_update(None, "cache_size", -16_384)?;
        // Checkpoint every ~40 MiB of WAL rather than SQLite's 4 MiB: a batch of 500 results
        // dirties hundreds of index pages (one per target), and a hot page overwritten in
        // the WAL many times is copied into the database once per checkpoint. In the
        // benchmark this cut the system time of writing by about half. After a checkpoint
        // the WAL file is cut back to 64 MiB rather than keeping its peak size.
        c.pragma_update(None, "wal_autocheckpoint", 10_000)?;
        c.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
        c.set_prepared_statement_cache_capacity(32);
        // Take SQLite's write lock once now, so a file another program is writing (not a
        // monitor: the sidecar lock refused those) fails at open, not at the first check.
        c.execute_batch("BEGIN IMMEDIATE; COMMIT;")?;
        Ok(())
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let (version, app, tables) = (|| -> Result<(i64, i32, i64), Fail> {
            let c = &self.conn;
            let version: i64 = c.pragma_query_value(None, "user_version", |r| r.get(0))?;
            let app: i32 = c.pragma_query_value(None, "application_id", |r| r.get(0))?;
            let tables: i64 =
                c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
            Ok((version, app, tables))
        })()
        .map_err(|e| classify(&path, e))?;
        if (app != 0 && app != APPLICATION_ID) || (version == 0 && tables > 0) {
            return Err(StoreError::NotMcpulse { path });
        }
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
            let to = i as i64 + 1;
            let step = (|| -> Result<(), rusqlite::Error> {
                let tx = self
                    .conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute_batch(sql)?;
                tx.pragma_update(None, "application_id", APPLICATION_ID)?;
                tx.pragma_update(None, "user_version", to)?;
                tx.commit()
            })();
            step.map_err(|e| match classify(&path, Fail::Sql(e)) {
                StoreError::Sqlite { source, .. } => StoreError::Migration {
                    path: path.clone(),
                    version: to,
                    detail: source.to_string(),
                },
                other => other,
            })?;
        }
        Ok(())
    }

    fn fail(&self, e: Fail) -> StoreError {
        classify(&self.path, e)
    }

    /// Writes a batch of finished checks in one transaction: for each, the check row, its
    /// events, its alerts (one outbox row per alert per sink, `sinks` being the identities of
    /// the configured sinks) and the accepted contract when it carries one; for each target of
    /// the batch, its state and open incidents as of its last record in the batch.
    pub fn record(&mut self, batch: &[CheckRecord], sinks: &[SinkId]) -> Result<(), StoreError> {
        record_batch(&mut self.conn, batch, sinks).map_err(|e| classify(&self.path, e))
    }

    /// Records a target's removal from the config in one transaction: its `Removed` event,
    /// the resolves of its open incidents (one outbox row per alert per sink of
    /// `removal.sinks`), and its stored incidents and state cleared (a target added back
    /// starts afresh; its accepted contract stays, so drift against it still shows). A target the
    /// store never saw, with nothing to resolve, leaves no trace.
    pub fn record_removal(&mut self, removal: &Removal) -> Result<(), StoreError> {
        record_removal(&mut self.conn, removal).map_err(|e| classify(&self.path, e))
    }

    /// Gives the outbox rows written by schema version 1 (`legacy#<index>`) the identity of
    /// the sink at that index of `sinks` (the config the monitor starts with, which is the
    /// best knowledge of the config that wrote them). Rows whose index is past the end keep
    /// their legacy name; [`Store::abandon_missing_sinks`] sets the pending ones aside.
    /// Returns how many rows were mapped.
    pub fn adopt_legacy_sinks(&mut self, sinks: &[SinkId]) -> Result<usize, StoreError> {
        let run = |conn: &mut Connection| -> Result<usize, Fail> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut n = 0;
            {
                let mut update =
                    tx.prepare_cached("UPDATE outbox SET sink = ?1 WHERE sink = ?2")?;
                for (i, id) in sinks.iter().enumerate() {
                    n +=
                        update.execute(params![id.as_str(), format!("{LEGACY_SINK_PREFIX}{i}")])?;
                }
            }
            tx.commit()?;
            Ok(n)
        };
        run(&mut self.conn).map_err(|e| classify(&self.path, e))
    }

    /// Sets aside the pending outbox rows of every sink not in `sinks` (the configured ones):
    /// they leave the queue undelivered at `at_ms`, with an error naming the missing sink, and
    /// are never sent to another sink. Returns, per missing sink, how many rows were set aside.
    pub fn abandon_missing_sinks(
        &mut self,
        sinks: &[SinkId],
        at_ms: i64,
    ) -> Result<Vec<(SinkId, usize)>, StoreError> {
        let run = |conn: &mut Connection| -> Result<Vec<(SinkId, usize)>, Fail> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut out = Vec::new();
            {
                let pending: Vec<String> = {
                    let mut stmt = tx.prepare_cached(
                        "SELECT DISTINCT sink FROM outbox WHERE done_ms IS NULL ORDER BY sink",
                    )?;
                    stmt.query_map([], |r| r.get(0))?
                        .collect::<Result<_, _>>()?
                };
                let mut abandon = tx.prepare_cached(
                    "UPDATE outbox SET done_ms = ?2, delivered = 0, last_error = ?3
                     WHERE sink = ?1 AND done_ms IS NULL",
                )?;
                for sink in pending {
                    if sinks.iter().any(|s| s.as_str() == sink) {
                        continue;
                    }
                    let error =
                        format!("not delivered: sink {sink} is no longer in the configuration");
                    let n = abandon.execute(params![sink, at_ms, error])?;
                    out.push((SinkId::new(sink), n));
                }
            }
            tx.commit()?;
            Ok(out)
        };
        run(&mut self.conn).map_err(|e| classify(&self.path, e))
    }

    /// The state to resume after a restart: per target that has been checked, its state and
    /// open incidents.
    pub fn load_states(&self) -> Result<BTreeMap<String, (TargetState, Incidents)>, StoreError> {
        let run = || -> Result<_, Fail> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT name, state, incidents FROM targets WHERE state IS NOT NULL",
            )?;
            let mut rows = stmt.query([])?;
            let mut out = BTreeMap::new();
            while let Some(row) = rows.next()? {
                let name: String = row.get(0)?;
                let state: String = row.get(1)?;
                let incidents: Option<String> = row.get(2)?;
                let what = || format!("the stored state of target {name}");
                let state: TargetState = decode(what, &state)?;
                let incidents: Incidents = match incidents {
                    Some(s) => decode(what, &s)?,
                    None => Incidents::new(),
                };
                out.insert(name, (state, incidents));
            }
            Ok(out)
        };
        run().map_err(|e| self.fail(e))
    }

    /// Pending alerts due at or before `now_ms`, oldest first, at most `limit`. An alert waits
    /// while an older one of the same incident (`dedup_key`) for the same sink is pending, so
    /// that a sink sees an incident's alerts in order even when one of them is being retried.
    pub fn due_alerts(&self, now_ms: i64, limit: usize) -> Result<Vec<OutboxItem>, StoreError> {
        let run = || -> Result<_, Fail> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT o.id, o.sink, o.alert, o.attempts FROM outbox o
                 WHERE o.done_ms IS NULL AND o.due_ms <= ?1
                   AND NOT EXISTS (
                       SELECT 1 FROM outbox p
                       WHERE p.done_ms IS NULL AND p.sink = o.sink
                         AND p.dedup_key = o.dedup_key AND p.id < o.id)
                 ORDER BY o.id LIMIT ?2",
            )?;
            let mut rows = stmt.query(params![now_ms, sql_count(limit)])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let id: i64 = row.get(0)?;
                let sink: String = row.get(1)?;
                let alert: String = row.get(2)?;
                let attempts: i64 = row.get(3)?;
                out.push(OutboxItem {
                    id,
                    sink: SinkId::new(sink),
                    alert: decode(|| format!("outbox alert {id}"), &alert)?,
                    attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                });
            }
            Ok(out)
        };
        run().map_err(|e| self.fail(e))
    }

    /// The alert was delivered: it leaves the queue. A row already gone (its target forgotten)
    /// is not an error.
    pub fn mark_delivered(&mut self, id: i64, at_ms: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE outbox SET done_ms = ?2, delivered = 1 WHERE id = ?1 AND done_ms IS NULL",
            )
            .and_then(|mut s| s.execute(params![id, at_ms]))
            .map(drop)
            .map_err(|e| self.fail(e.into()))
    }

    /// A delivery failed: counts the attempt, keeps the error and sets when to try again.
    ///
    /// `next_attempt_ms == i64::MAX` (never) gives up, as [`Store::give_up`] does at the time
    /// of the last attempt: a row left pending forever would hold back the later alerts of its
    /// incident for that sink (see [`Store::due_alerts`]) and never be pruned.
    pub fn mark_failed(
        &mut self,
        id: i64,
        error: &str,
        next_attempt_ms: i64,
    ) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<usize> {
            if next_attempt_ms == i64::MAX {
                // `due_ms` on the right is the old value: when the failed attempt was due.
                self.conn
                    .prepare_cached(
                        "UPDATE outbox SET attempts = attempts + 1, last_error = ?2,
                                           done_ms = due_ms, delivered = 0
                         WHERE id = ?1 AND done_ms IS NULL",
                    )?
                    .execute(params![id, error])
            } else {
                self.conn
                    .prepare_cached(
                        "UPDATE outbox SET attempts = attempts + 1, last_error = ?2, due_ms = ?3
                         WHERE id = ?1 AND done_ms IS NULL",
                    )?
                    .execute(params![id, error, next_attempt_ms])
            }
        };
        run().map(drop).map_err(|e| self.fail(e.into()))
    }

    /// The sink gives up on an alert (too many attempts, or a permanent refusal): it leaves the
    /// queue undelivered, with the error kept, and the incident's later alerts may go.
    pub fn give_up(&mut self, id: i64, error: &str, at_ms: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE outbox SET done_ms = ?3, delivered = 0, last_error = ?2
                 WHERE id = ?1 AND done_ms IS NULL",
            )
            .and_then(|mut s| s.execute(params![id, error, at_ms]))
            .map(drop)
            .map_err(|e| self.fail(e.into()))
    }

    /// A page of a target's checks, newest first (by check time, then id). `before_id` is the
    /// id of the last row of the previous page; an id that is not one of the target's checks
    /// (pruned, or never its) gives an empty page: [`Store::history_page`] tells the two apart.
    pub fn history(
        &self,
        target: &str,
        before_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        self.history_page(target, before_id, limit)
            .map(Option::unwrap_or_default)
    }

    /// [`Store::history`], with `None` when `before_id` is not one of the target's checks. The
    /// order is by check time, so the cursor is the time of the row it names, not its id alone
    /// (a check that ran long is stored after one that started later): a cursor whose row was
    /// pruned or belongs to another target cannot be placed, and the caller must say so rather
    /// than answer an empty page that looks like the end.
    pub fn history_page(
        &self,
        target: &str,
        before_id: Option<i64>,
        limit: usize,
    ) -> Result<Option<Vec<HistoryRow>>, StoreError> {
        let run = || -> Result<_, Fail> {
            let Some(tid) = target_id(&self.conn, target)? else {
                return Ok(before_id.is_none().then(Vec::new));
            };
            // The cursor is (at_ms, id) of the row the previous page ended with.
            let (at, id) = match before_id {
                None => (i64::MAX, i64::MAX),
                Some(id) => {
                    let at = self
                        .conn
                        .prepare_cached(
                            "SELECT at_ms FROM checks WHERE id = ?1 AND target_id = ?2",
                        )?
                        .query_row(params![id, tid], |r| r.get::<_, i64>(0))
                        .optional()?;
                    match at {
                        Some(at) => (at, id),
                        None => return Ok(None),
                    }
                }
            };
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, at_ms, status, duration_ms, timings, findings, grade FROM checks
                 WHERE target_id = ?1 AND at_ms <= ?2 AND (at_ms < ?2 OR id < ?3)
                 ORDER BY at_ms DESC, id DESC LIMIT ?4",
            )?;
            let mut rows = stmt.query(params![tid, at, id, sql_count(limit)])?;
            // A check's calls share its time: found through the (target, time) index.
            let mut calls = self.conn.prepare_cached(
                "SELECT tool, ok, ms FROM calls WHERE target_id = ?1 AND at_ms = ?2
                 AND check_id = ?3 ORDER BY id",
            )?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let id: i64 = row.get(0)?;
                let at_ms: i64 = row.get(1)?;
                let status: String = row.get(2)?;
                let timings: String = row.get(4)?;
                let findings: String = row.get(5)?;
                let what = || format!("check {id}");
                let samples = calls
                    .query_map(params![tid, at_ms, id], |c| {
                        Ok(crate::check::CallSample {
                            tool: c.get(0)?,
                            ok: c.get::<_, i64>(1)? != 0,
                            ms: c.get(2)?,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                out.push(HistoryRow {
                    id,
                    at_ms,
                    status: health(&status)?,
                    duration_ms: row.get(3)?,
                    timings: decode(what, &timings)?,
                    findings: decode(what, &findings)?,
                    grade: row.get(6)?,
                    calls: samples,
                });
            }
            Ok(Some(out))
        };
        run().map_err(|e| self.fail(e))
    }

    /// A target's events (status transitions, flapping, drift and signal changes), newest
    /// first, as the JSON of [`Event`] (tagged by `event`).
    pub fn transitions(
        &self,
        target: &str,
        limit: usize,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        let run = || -> Result<_, Fail> {
            let Some(tid) = target_id(&self.conn, target)? else {
                return Ok(Vec::new());
            };
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, event FROM events WHERE target_id = ?1
                 ORDER BY at_ms DESC, id DESC LIMIT ?2",
            )?;
            let mut rows = stmt.query(params![tid, sql_count(limit)])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let id: i64 = row.get(0)?;
                let event: String = row.get(1)?;
                out.push(decode(|| format!("event {id}"), &event)?);
            }
            Ok(out)
        };
        run().map_err(|e| self.fail(e))
    }

    /// Uptime and latency of a target over the last 1h, 24h, 7d and 30d before `now_ms`
    /// (windows `(now - w, now]`).
    ///
    /// - `uptime`: the share of checks that were not down (a degraded server answered);
    /// - `healthy_ratio`: the share of checks that were healthy;
    /// - `p50/p95/p99_ms`: nearest-rank percentiles of `duration_ms` over the checks that
    ///   answered (not down): a down check's duration is how long it took to fail (often the
    ///   timeout), which says nothing about latency and would swamp the tail.
    ///
    /// One read of the 30-day range, from the `(target_id, at_ms, status, duration_ms)` index
    /// alone; the windows and percentiles are computed here (sorting 43,200 durations takes
    /// about a millisecond; `ORDER BY … OFFSET` per percentile and window re-reads the range
    /// twelve times).
    pub fn stats(&self, target: &str, now_ms: i64) -> Result<Vec<Stats>, StoreError> {
        let run = || -> Result<_, Fail> {
            let mut rows: Vec<(i64, Health, f64)> = Vec::new();
            if let Some(tid) = target_id(&self.conn, target)? {
                let longest = WINDOWS.iter().map(|w| w.1).max().unwrap_or(0);
                let mut stmt = self.conn.prepare_cached(
                    "SELECT at_ms, status, duration_ms FROM checks
                     WHERE target_id = ?1 AND at_ms > ?2 AND at_ms <= ?3",
                )?;
                let mut q = stmt.query(params![tid, now_ms.saturating_sub(longest), now_ms])?;
                while let Some(row) = q.next()? {
                    let status: String = row.get(1)?;
                    rows.push((row.get(0)?, health(&status)?, row.get(2)?));
                }
            }
            Ok(WINDOWS
                .iter()
                .map(|(name, w)| window_stats(name, &rows, now_ms.saturating_sub(*w)))
                .collect())
        };
        run().map_err(|e| self.fail(e))
    }

    /// Each synthetic call's figures over the windows of [`Store::stats`], ending at `now_ms`:
    /// how many calls, how many failed, and nearest-rank p50/p95/p99 of the duration of the
    /// calls that were answered (one given up at its budget is an error, its duration the
    /// budget). One read of the longest window from the covering index. Tools in name order;
    /// a target has as many tools as its config has calls.
    pub fn tool_stats(&self, target: &str, now_ms: i64) -> Result<Vec<ToolStats>, StoreError> {
        let run = || -> Result<_, Fail> {
            let mut rows: BTreeMap<String, Vec<(i64, bool, Option<f64>)>> = BTreeMap::new();
            if let Some(tid) = target_id(&self.conn, target)? {
                let longest = WINDOWS.iter().map(|w| w.1).max().unwrap_or(0);
                let mut stmt = self.conn.prepare_cached(
                    "SELECT at_ms, tool, ok, ms FROM calls
                     WHERE target_id = ?1 AND at_ms > ?2 AND at_ms <= ?3",
                )?;
                let mut q = stmt.query(params![tid, now_ms.saturating_sub(longest), now_ms])?;
                while let Some(row) = q.next()? {
                    let tool: String = row.get(1)?;
                    rows.entry(tool)
                        .or_default()
                        .push((row.get(0)?, row.get(2)?, row.get(3)?));
                }
            }
            Ok(rows
                .into_iter()
                .map(|(tool, calls)| ToolStats {
                    windows: WINDOWS
                        .iter()
                        .map(|(name, w)| window_call_stats(name, &calls, now_ms.saturating_sub(*w)))
                        .collect(),
                    tool,
                })
                .collect())
        };
        run().map_err(|e| self.fail(e))
    }

    /// The hourly rollups of `targets` from hour `from_hour` (`at_ms / 3600000`) on, by target
    /// and hour: one query for a whole page of the status page, over the rollup's clustered
    /// key (at most 2,160 rows a target for 90 days). Unknown names have no rows.
    pub fn uptime_hours(
        &self,
        targets: &[String],
        from_hour: i64,
    ) -> Result<Vec<HourCount>, StoreError> {
        let run = || -> Result<_, Fail> {
            let mut out = Vec::new();
            // SQLite's default bound on host parameters is 32,766: ask in chunks well below it.
            for chunk in targets.chunks(500) {
                let marks = vec!["?"; chunk.len()].join(",");
                let sql = format!(
                    "SELECT t.name, u.hour, u.checks, u.up, u.healthy
                     FROM targets t JOIN uptime_hourly u ON u.target_id = t.id
                     WHERE t.name IN ({marks}) AND u.hour >= ?
                     ORDER BY t.name, u.hour"
                );
                let mut stmt = self.conn.prepare_cached(&sql)?;
                let mut args: Vec<&dyn rusqlite::ToSql> =
                    chunk.iter().map(|n| n as &dyn rusqlite::ToSql).collect();
                args.push(&from_hour);
                let mut q = stmt.query(args.as_slice())?;
                while let Some(row) = q.next()? {
                    out.push(HourCount {
                        target: row.get(0)?,
                        hour: row.get(1)?,
                        checks: count(row.get(2)?),
                        up: count(row.get(3)?),
                        healthy: count(row.get(4)?),
                    });
                }
            }
            Ok(out)
        };
        run().map_err(|e| self.fail(e))
    }

    /// A target's checks in `(from_ms, to_ms]`, oldest first, as (time, status, timings): the
    /// status page's latency chart. At most `limit` rows (the newest ones when there are more).
    pub fn checks_between(
        &self,
        target: &str,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Health, crate::check::PhaseTimings)>, StoreError> {
        let run = || -> Result<_, Fail> {
            let Some(tid) = target_id(&self.conn, target)? else {
                return Ok(Vec::new());
            };
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, at_ms, status, timings FROM checks
                 WHERE target_id = ?1 AND at_ms > ?2 AND at_ms <= ?3
                 ORDER BY at_ms DESC LIMIT ?4",
            )?;
            let mut q = stmt.query(params![tid, from_ms, to_ms, sql_count(limit)])?;
            let mut out = Vec::new();
            while let Some(row) = q.next()? {
                let id: i64 = row.get(0)?;
                let status: String = row.get(2)?;
                // Borrowed from the row: no copy of the text, no JSON tree (typed, lenient).
                let timings = row.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
                out.push((
                    row.get(1)?,
                    health(&status)?,
                    decode(|| format!("check {id}"), timings)?,
                ));
            }
            out.reverse();
            Ok(out)
        };
        run().map_err(|e| self.fail(e))
    }

    /// A target's alerts as the outbox holds them, one row per (alert, sink), newest first:
    /// the status page's incident timeline shows where each went and whether it arrived.
    pub fn sent_alerts(&self, target: &str, limit: usize) -> Result<Vec<SentAlert>, StoreError> {
        let run = || -> Result<_, Fail> {
            let Some(tid) = target_id(&self.conn, target)? else {
                return Ok(Vec::new());
            };
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, sink, created_ms, done_ms, delivered, attempts, last_error, alert
                 FROM outbox WHERE target_id = ?1 ORDER BY created_ms DESC, id DESC LIMIT ?2",
            )?;
            let mut q = stmt.query(params![tid, sql_count(limit)])?;
            let mut out = Vec::new();
            while let Some(row) = q.next()? {
                let id: i64 = row.get(0)?;
                let alert: String = row.get(7)?;
                out.push(SentAlert {
                    sink: row.get(1)?,
                    created_ms: row.get(2)?,
                    done_ms: row.get(3)?,
                    delivered: row.get(4)?,
                    attempts: row.get(5)?,
                    last_error: row.get(6)?,
                    alert: decode(|| format!("alert {id}"), &alert)?,
                });
            }
            Ok(out)
        };
        run().map_err(|e| self.fail(e))
    }

    /// The accepted contract of a target, if one was accepted.
    pub fn accepted_contract(&self, target: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT contract FROM targets WHERE name = ?1")
            .and_then(|mut s| s.query_row([target], |r| r.get(0)).optional())
            .map(Option::flatten)
            .map_err(|e| self.fail(e.into()))
    }

    /// The accepted contract of a target and when it was accepted (`contract_ms`; `None` for
    /// a contract set without one), if one was accepted.
    pub fn accepted_contract_at(
        &self,
        target: &str,
    ) -> Result<Option<(String, Option<i64>)>, StoreError> {
        self.conn
            .prepare_cached("SELECT contract, contract_ms FROM targets WHERE name = ?1")
            .and_then(|mut s| {
                s.query_row([target], |r| {
                    Ok(r.get::<_, Option<String>>(0)?
                        .map(|c| (c, r.get(1).ok().flatten())))
                })
                .optional()
            })
            .map(Option::flatten)
            .map_err(|e| self.fail(e.into()))
    }

    /// Accepts `contract` (a baseline file's JSON) as the target's contract.
    pub fn set_accepted_contract(
        &mut self,
        target: &str,
        contract: &str,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        set_contract(&self.conn, target, contract, at_ms).map_err(|e| self.fail(e))
    }

    /// Deletes what is older than `older_than_ms`: checks, events, and alerts that left the
    /// outbox (delivered or given up). Pending alerts are kept whatever their age. Returns the
    /// number of rows deleted. It commits every 50,000 rows or so, so a large first prune
    /// does not make one huge transaction.
    pub fn prune(&mut self, older_than_ms: i64) -> Result<usize, StoreError> {
        let (mut deleted, mut from) = (0, Some(PruneFrom::default()));
        while let Some(at) = from {
            let step = self.prune_step(older_than_ms, at, PRUNE_CHUNK)?;
            deleted += step.deleted;
            from = step.next;
        }
        Ok(deleted)
    }

    /// One transaction of a prune: the targets from `from` on, until `max_rows` rows of
    /// history are deleted (a target with more is continued by the next step); after the last
    /// target, the outbox. A caller
    /// that shares the store (the daemon) takes its lock per step, so a large prune never holds
    /// it for long. Start with `PruneFrom::default()`; go on with `next` until it is `None`.
    pub fn prune_step(
        &mut self,
        older_than_ms: i64,
        from: PruneFrom,
        max_rows: usize,
    ) -> Result<PruneStep, StoreError> {
        prune_rows(&mut self.conn, older_than_ms, from, max_rows)
            .map_err(|e| classify(&self.path, e))
    }

    /// Forgets a target entirely: its checks, events, alerts (pending ones too), state and
    /// accepted contract. Unknown targets are not an error.
    pub fn forget_target(&mut self, target: &str) -> Result<(), StoreError> {
        let run = |conn: &mut Connection| -> Result<(), Fail> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(tid) = target_id(&tx, target)? {
                for sql in [
                    "DELETE FROM checks WHERE target_id = ?1",
                    "DELETE FROM events WHERE target_id = ?1",
                    "DELETE FROM calls WHERE target_id = ?1",
                    "DELETE FROM uptime_hourly WHERE target_id = ?1",
                    "DELETE FROM outbox WHERE target_id = ?1",
                    "DELETE FROM targets WHERE id = ?1",
                ] {
                    tx.execute(sql, [tid])?;
                }
            }
            tx.commit()?;
            Ok(())
        };
        run(&mut self.conn).map_err(|e| classify(&self.path, e))
    }

    /// Where the database lives (`:memory:` for an in-memory one).
    pub fn path(&self) -> &str {
        &self.path
    }
}

fn target_id(conn: &Connection, name: &str) -> Result<Option<i64>, Fail> {
    Ok(conn
        .prepare_cached("SELECT id FROM targets WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?)
}

fn set_contract(conn: &Connection, target: &str, contract: &str, at_ms: i64) -> Result<(), Fail> {
    conn.prepare_cached(
        "INSERT INTO targets (name, contract, contract_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET contract = excluded.contract,
                                          contract_ms = excluded.contract_ms",
    )?
    .execute(params![target, contract, at_ms])?;
    Ok(())
}

fn record_batch(
    conn: &mut Connection,
    batch: &[CheckRecord],
    sinks: &[SinkId],
) -> Result<(), Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        // A target's state is written once, from its last record in the batch.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, r) in batch.iter().enumerate() {
            last.insert(r.target.as_str(), i);
        }
        let mut ids: HashMap<&str, i64> = HashMap::with_capacity(last.len());
        let mut upsert = tx.prepare_cached(
            "INSERT INTO targets (name, state, incidents, updated_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (name) DO UPDATE SET state = excluded.state,
                                              incidents = excluded.incidents,
                                              updated_ms = excluded.updated_ms
             RETURNING id",
        )?;
        for (i, r) in batch.iter().enumerate() {
            if last.get(r.target.as_str()) != Some(&i) {
                continue;
            }
            let state = encode("a target state", &r.state)?;
            let incidents = encode("open incidents", &r.incidents)?;
            let id: i64 = upsert
                .query_row(params![r.target, state, incidents, r.at_ms], |row| {
                    row.get(0)
                })?;
            ids.insert(r.target.as_str(), id);
        }

        let mut check = tx.prepare_cached(
            "INSERT INTO checks (target_id, at_ms, status, duration_ms, timings, findings, grade)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut event = tx.prepare_cached(
            "INSERT INTO events (target_id, check_id, at_ms, kind, event)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut call = tx.prepare_cached(
            "INSERT INTO calls (target_id, check_id, at_ms, tool, ok, ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let mut rollup = tx.prepare_cached(
            "INSERT INTO uptime_hourly (target_id, hour, checks, up, healthy)
             VALUES (?1, ?2, 1, ?3, ?4)
             ON CONFLICT (target_id, hour) DO UPDATE SET checks = checks + 1,
                                                         up = up + excluded.up,
                                                         healthy = healthy + excluded.healthy",
        )?;
        let mut outbox = tx.prepare_cached(
            "INSERT INTO outbox (target_id, check_id, seq, sink, dedup_key, created_ms, due_ms,
                                 alert)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
        )?;
        let mut timings = String::new();
        let mut findings = String::new();
        for r in batch {
            let Some(&tid) = ids.get(r.target.as_str()) else {
                continue; // unreachable: every target of the batch was upserted above
            };
            timings.clear();
            findings.clear();
            write_json(&mut timings, "check timings", &r.timings)?;
            write_json(&mut findings, "check findings", &r.findings)?;
            let check_id = check.insert(params![
                tid,
                r.at_ms,
                r.status.as_str(),
                r.duration_ms,
                timings,
                findings,
                r.grade,
            ])?;
            rollup.execute(params![
                tid,
                r.at_ms.div_euclid(HOUR_MS),
                r.status != Health::Down,
                r.status == Health::Healthy,
            ])?;
            for e in &r.events {
                let json = encode("an event", e)?;
                event.execute(params![tid, check_id, event_at(e), event_kind(e), json])?;
            }
            for c in &r.calls {
                call.execute(params![tid, check_id, r.at_ms, c.tool, c.ok, c.ms])?;
            }
            for (seq, a) in r.alerts.iter().enumerate() {
                let json = encode("an alert", a)?;
                for sink in sinks {
                    outbox.execute(params![
                        tid,
                        check_id,
                        sql_count(seq),
                        sink.as_str(),
                        a.dedup_key,
                        a.at_ms,
                        json,
                    ])?;
                }
            }
            if let Some(contract) = &r.contract {
                set_contract(&tx, &r.target, contract, r.at_ms)?;
            }
        }
    }
    tx.commit()?;
    Ok(())
}

fn record_removal(conn: &mut Connection, removal: &Removal) -> Result<(), Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let known = target_id(&tx, &removal.target)?;
        let tid = match known {
            Some(tid) => {
                // Its incidents are resolved and its state forgotten: a target added back
                // starts afresh (unknown, no streak), keeping only its accepted contract. A
                // state stored after the removal is the target's since it was added back (the
                // removal's write came late): that one stays.
                let none = encode("open incidents", &Incidents::new())?;
                tx.prepare_cached(
                    "UPDATE targets SET incidents = ?2, state = NULL
                     WHERE id = ?1 AND (updated_ms IS NULL OR updated_ms <= ?3)",
                )?
                .execute(params![tid, none, removal.at_ms])?;
                tid
            }
            None if removal.alerts.is_empty() => return Ok(()),
            None => tx
                .prepare_cached("INSERT INTO targets (name) VALUES (?1) RETURNING id")?
                .query_row([&removal.target], |r| r.get(0))?,
        };
        let json = encode("an event", &removal.event)?;
        tx.prepare_cached(
            "INSERT INTO events (target_id, check_id, at_ms, kind, event)
             VALUES (?1, 0, ?2, ?3, ?4)",
        )?
        .execute(params![
            tid,
            event_at(&removal.event),
            event_kind(&removal.event),
            json
        ])?;
        let mut outbox = tx.prepare_cached(
            "INSERT INTO outbox (target_id, check_id, seq, sink, dedup_key, created_ms, due_ms,
                                 alert)
             VALUES (?1, NULL, ?2, ?3, ?4, ?5, ?5, ?6)",
        )?;
        for (seq, a) in removal.alerts.iter().enumerate() {
            let json = encode("an alert", a)?;
            for sink in &removal.sinks {
                outbox.execute(params![
                    tid,
                    sql_count(seq),
                    sink.as_str(),
                    a.dedup_key,
                    a.at_ms,
                    json,
                ])?;
            }
        }
    }
    tx.commit()?;
    Ok(())
}

/// Serialises into a reused buffer (one allocation per batch, not two per check).
fn write_json(buf: &mut String, what: &'static str, v: &serde_json::Value) -> Result<(), Fail> {
    use std::fmt::Write;
    // `Value`'s Display is its compact JSON; it cannot fail except through the writer, and
    // writing to a String does not fail.
    write!(buf, "{v}").map_err(|_| {
        Fail::Encode(
            what,
            serde::ser::Error::custom("could not format the value"),
        )
    })
}

/// Rows of history deleted per prune transaction, at most: bounds the WAL a large first prune
/// writes, without one commit per target.
pub const PRUNE_CHUNK: usize = 50_000;

/// Where a prune goes on: the first target id not yet pruned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneFrom(i64);

/// What one [`Store::prune_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneStep {
    pub deleted: usize,
    /// Where the next step starts; `None` when the prune is complete.
    pub next: Option<PruneFrom>,
}

fn prune_rows(
    conn: &mut Connection,
    older_than_ms: i64,
    from: PruneFrom,
    max_rows: usize,
) -> Result<PruneStep, Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let targets: Vec<i64> = {
        let mut stmt = tx.prepare_cached("SELECT id FROM targets WHERE id >= ?1 ORDER BY id")?;
        stmt.query_map([from.0], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let mut budget = max_rows.max(1);
    let mut deleted = 0;
    let mut next = None;
    for tid in targets {
        if budget == 0 {
            next = Some(PruneFrom(tid));
            break;
        }
        for sql in [
            "DELETE FROM checks WHERE rowid IN
                 (SELECT rowid FROM checks WHERE target_id = ?1 AND at_ms < ?2 LIMIT ?3)",
            "DELETE FROM events WHERE rowid IN
                 (SELECT rowid FROM events WHERE target_id = ?1 AND at_ms < ?2 LIMIT ?3)",
            "DELETE FROM calls WHERE rowid IN
                 (SELECT rowid FROM calls WHERE target_id = ?1 AND at_ms < ?2 LIMIT ?3)",
        ] {
            let limit = i64::try_from(budget).unwrap_or(i64::MAX);
            let n = tx
                .prepare_cached(sql)?
                .execute(params![tid, older_than_ms, limit])?;
            deleted += n;
            budget = budget.saturating_sub(n);
        }
        if budget == 0 {
            // The limit is reached: this target may have more; the next step starts with it.
            next = Some(PruneFrom(tid));
            break;
        }
    }
    if next.is_none() {
        deleted += tx
            .prepare_cached("DELETE FROM outbox WHERE done_ms IS NOT NULL AND done_ms < ?1")?
            .execute([older_than_ms])?;
        // Whole hours only: the hour the cut falls in keeps its counts. Not counted in
        // `deleted`, which counts history rows.
        tx.prepare_cached("DELETE FROM uptime_hourly WHERE hour < ?1")?
            .execute([older_than_ms.div_euclid(HOUR_MS)])?;
    }
    tx.commit()?;
    Ok(PruneStep { deleted, next })
}

/// One window's figures from the rows of the longest window.
fn window_stats(name: &str, rows: &[(i64, Health, f64)], after_ms: i64) -> Stats {
    let mut checks = 0u64;
    let mut up = 0u64;
    let mut healthy = 0u64;
    let mut durations = Vec::new();
    for &(at, status, duration) in rows {
        if at <= after_ms {
            continue;
        }
        checks += 1;
        if status != Health::Down {
            up += 1;
            durations.push(duration);
        }
        if status == Health::Healthy {
            healthy += 1;
        }
    }
    durations.sort_unstable_by(f64::total_cmp);
    let ratio = |n: u64| (checks > 0).then(|| n as f64 / checks as f64);
    Stats {
        window: name.to_owned(),
        checks,
        uptime: ratio(up),
        healthy_ratio: ratio(healthy),
        p50_ms: nearest_rank(&durations, 50),
        p95_ms: nearest_rank(&durations, 95),
        p99_ms: nearest_rank(&durations, 99),
    }
}

/// One window's figures of one tool's calls.
fn window_call_stats(name: &str, calls: &[(i64, bool, Option<f64>)], after_ms: i64) -> CallStats {
    let mut n = 0u64;
    let mut errors = 0u64;
    let mut durations = Vec::new();
    for &(at, ok, ms) in calls {
        if at <= after_ms {
            continue;
        }
        n += 1;
        if !ok {
            errors += 1;
        }
        if let Some(ms) = ms {
            durations.push(ms);
        }
    }
    durations.sort_unstable_by(f64::total_cmp);
    CallStats {
        window: name.to_owned(),
        calls: n,
        errors,
        error_ratio: (n > 0).then(|| errors as f64 / n as f64),
        p50_ms: nearest_rank(&durations, 50),
        p95_ms: nearest_rank(&durations, 95),
        p99_ms: nearest_rank(&durations, 99),
    }
}

/// The nearest-rank percentile of sorted values: the value at rank ⌈p·n/100⌉ (1-based).
fn nearest_rank(sorted: &[f64], p: usize) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = (p * n).div_ceil(100).clamp(1, n);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_matches_the_definition() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50), Some(50.0));
        assert_eq!(nearest_rank(&v, 95), Some(95.0));
        assert_eq!(nearest_rank(&v, 99), Some(99.0));
        assert_eq!(nearest_rank(&[7.0], 99), Some(7.0));
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0, 4.0], 50), Some(2.0));
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0, 4.0], 95), Some(4.0));
        assert_eq!(nearest_rank(&[], 50), None);
    }

    #[test]
    fn windows_are_half_open_and_down_checks_are_not_latency() {
        let rows = vec![
            (100, Health::Healthy, 10.0),
            (200, Health::Down, 5000.0),
            (300, Health::Degraded, 30.0),
        ];
        let s = window_stats("w", &rows, 100);
        assert_eq!(s.checks, 2);
        assert_eq!(s.uptime, Some(0.5));
        assert_eq!(s.healthy_ratio, Some(0.0));
        assert_eq!(s.p99_ms, Some(30.0));
        let empty = window_stats("w", &rows, 300);
        assert_eq!((empty.checks, empty.uptime, empty.p50_ms), (0, None, None));
    }

    #[test]
    fn the_schema_is_mcpulse_at_the_latest_version_in_memory() {
        let s = Store::open_in_memory().unwrap();
        let v: i64 = s
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }
}
