//! Reading the history from outside the daemon, through the stable views (docs/history.md):
//! what `mcpulse history export` streams.
//!
//! A [`HistoryReader`] opens the file read-only and takes no lock of mcpulse's, so it runs
//! while the monitor writes. One export is one `SELECT`, so one read snapshot of SQLite's:
//! every row is as of the moment it started, and rows written meanwhile are not mixed in. Rows
//! are handed over one at a time and nothing is collected: memory does not grow with the
//! export. The order is by target, then time, which is the order of the tables' indexes, so
//! SQLite streams them without sorting (the alerts are sorted by SQLite, which spills to a
//! temporary file rather than grow past its cache).
//!
//! The views, not the tables, are read: a history written by a newer schema (whose views
//! keep their names and columns) is still read.

use super::{APPLICATION_ID, StoreError};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// The first schema version with the views.
const VIEWS_SINCE: i64 = 5;

/// Which history an export reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `v_checks`: one row a check.
    Checks,
    /// `v_transitions`: one row a confirmed status change.
    Transitions,
    /// `v_alerts`: one row an alert for one sink.
    Alerts,
}

impl Table {
    /// The columns exported, in order.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Table::Checks => &[
                "check_id",
                "target",
                "at",
                "at_ms",
                "status",
                "duration_ms",
                "grade",
            ],
            Table::Transitions => &[
                "event_id",
                "target",
                "at",
                "at_ms",
                "from_status",
                "to_status",
                "reason",
            ],
            Table::Alerts => &[
                "alert_id",
                "target",
                "created",
                "created_ms",
                "action",
                "kind",
                "severity",
                "summary",
                "sink",
                "dedup_key",
                "delivered",
                "attempts",
                "done",
                "last_error",
            ],
        }
    }

    fn view(self) -> &'static str {
        match self {
            Table::Checks => "v_checks",
            Table::Transitions => "v_transitions",
            Table::Alerts => "v_alerts",
        }
    }

    /// The column the time range applies to.
    fn time(self) -> &'static str {
        match self {
            Table::Checks | Table::Transitions => "at_ms",
            Table::Alerts => "created_ms",
        }
    }
}

/// What to export: a table, some targets (none: all), a half-open time range
/// `[since_ms, until_ms)`.
#[derive(Debug, Clone)]
pub struct Query {
    pub table: Table,
    pub targets: Vec<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// One value of an exported row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    Null,
    Int(i64),
    Real(f64),
    /// Text as stored: from the config and from servers, so not to be trusted.
    Text(&'a str),
}

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The row could not be written where it was going (a closed pipe, a full disk).
    #[error("writing the export: {0}")]
    Write(#[source] std::io::Error),
}

/// A read-only view of a history file; see the module docs.
pub struct HistoryReader {
    conn: Connection,
    path: String,
}

impl HistoryReader {
    /// Opens `path` read-only. Refuses a file that is missing, not mcpulse's, or older than the
    /// views (schema version 5).
    pub fn open(path: &Path) -> Result<HistoryReader, StoreError> {
        let shown = path.display().to_string();
        // Read-only and never created: a mistyped path is an error, not a new empty file.
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|e| StoreError::CannotOpen {
                path: shown.clone(),
                detail: e.to_string(),
            })?;
        let fail = |e: rusqlite::Error| super::classify(&shown, super::Fail::Sql(e));
        conn.busy_timeout(super::BUSY_TIMEOUT).map_err(fail)?;
        let app: i32 = conn
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .map_err(fail)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(fail)?;
        if app != APPLICATION_ID {
            return Err(StoreError::NotMcpulse { path: shown });
        }
        if version < VIEWS_SINCE {
            return Err(StoreError::TooOld {
                path: shown,
                found: version,
                needed: VIEWS_SINCE,
            });
        }
        Ok(HistoryReader { conn, path: shown })
    }

    /// Streams the rows of `q` to `each`, in [`Table::columns`] order, by target then time.
    /// Returns how many rows were handed over.
    pub fn export(
        &self,
        q: &Query,
        mut each: impl FnMut(&[Cell<'_>]) -> std::io::Result<()>,
    ) -> Result<u64, ExportError> {
        let fail = |e: rusqlite::Error| super::classify(&self.path, super::Fail::Sql(e));
        let cols = q.table.columns();
        let time = q.table.time();
        let mut sql = format!(
            "SELECT {} FROM {} WHERE {time} >= ?1 AND {time} < ?2",
            cols.join(", "),
            q.table.view()
        );
        if !q.targets.is_empty() {
            let marks: Vec<String> = (0..q.targets.len())
                .map(|i| format!("?{}", i + 3))
                .collect();
            sql.push_str(&format!(" AND target IN ({})", marks.join(", ")));
        }
        sql.push_str(&format!(" ORDER BY target, {time}"));
        let mut stmt = self.conn.prepare(&sql).map_err(fail)?;
        let mut params: Vec<rusqlite::types::Value> = vec![
            q.since_ms.unwrap_or(i64::MIN).into(),
            q.until_ms.unwrap_or(i64::MAX).into(),
        ];
        params.extend(q.targets.iter().map(|t| t.clone().into()));
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params))
            .map_err(fail)?;
        let mut n = 0u64;
        while let Some(row) = rows.next().map_err(fail)? {
            let mut cells: Vec<Cell<'_>> = Vec::with_capacity(cols.len());
            for i in 0..cols.len() {
                cells.push(match row.get_ref(i).map_err(fail)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(v) => Cell::Int(v),
                    ValueRef::Real(v) => Cell::Real(v),
                    // Not UTF-8 (written by something else): shown lossily would allocate;
                    // such a value is left out rather than guessed at.
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        std::str::from_utf8(t).map_or(Cell::Null, Cell::Text)
                    }
                });
            }
            each(&cells).map_err(ExportError::Write)?;
            n += 1;
        }
        Ok(n)
    }
}
