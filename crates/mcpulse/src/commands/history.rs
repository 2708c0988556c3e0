//! `mcpulse history export`: the monitor's history as CSV or JSON, for people who don't speak
//! SQL. It reads the file through the stable views ([`mcpulse_monitor::store::read`]) and takes
//! no lock, so it runs while the monitor writes.
//!
//! Output is streamed: one row is formatted and written at a time (through a buffer), so
//! memory stays flat however long the history is.
//!
//! Every text cell comes from a config or a server (a target name, a transition's reason, an
//! alert's summary): in CSV it is made inert ([`mcpulse_wire::text::message`]: control, bidi
//! and invisible characters escaped, cut at 1000 characters), and a cell a spreadsheet would
//! run as a formula (starting with `=`, `+`, `-`, `@`, a tab or a carriage return, OWASP's
//! list) gets a `'` in front, so opening the file in Excel or LibreOffice runs nothing. JSON
//! keeps the exact text: JSON escapes control characters itself, and its readers are programs.

use crate::cli::{ExportFormat, ExportTable, HistoryExportArgs};
use anyhow::{Context, Result, bail};
use mcpulse_monitor::store::read::{Cell, ExportError, HistoryReader, Query, Table};
use std::io::Write;

pub fn export(args: HistoryExportArgs) -> Result<u8> {
    let db = match (&args.db, &args.config) {
        (Some(db), _) => db.clone(),
        (None, Some(config)) => {
            let env = |k: &str| std::env::var(k).ok();
            mcpulse_monitor::config::load(config, &env)?.storage.path
        }
        // clap requires one of them.
        (None, None) => bail!("give the history file with --db FILE or --config FILE"),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let query = Query {
        table: match args.table {
            ExportTable::Checks => Table::Checks,
            ExportTable::Transitions => Table::Transitions,
            ExportTable::Alerts => Table::Alerts,
        },
        targets: args.target.clone(),
        since_ms: args
            .since
            .as_deref()
            .map(|t| time_arg("--since", t, now))
            .transpose()?,
        until_ms: args
            .until
            .as_deref()
            .map(|t| time_arg("--until", t, now))
            .transpose()?,
    };
    let reader = HistoryReader::open(&db)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let columns = query.table.columns();
    let mut line = String::new();
    let result = match args.format {
        ExportFormat::Csv => {
            writeln!(out, "{}", columns.join(","))?;
            reader.export(&query, |cells| {
                line.clear();
                for (i, cell) in cells.iter().enumerate() {
                    if i > 0 {
                        line.push(',');
                    }
                    csv_cell(&mut line, cell);
                }
                line.push('\n');
                out.write_all(line.as_bytes())
            })
        }
        ExportFormat::Json => {
            out.write_all(b"[")?;
            let mut first = true;
            let r = reader.export(&query, |cells| {
                let mut row = serde_json::Map::with_capacity(cells.len());
                for (name, cell) in columns.iter().zip(cells) {
                    row.insert((*name).to_owned(), json_cell(cell));
                }
                out.write_all(if first { b"\n" } else { b",\n" })?;
                first = false;
                serde_json::to_writer(&mut out, &row).map_err(std::io::Error::other)
            });
            // Closed only when complete: an export cut short by an error is not valid JSON.
            if r.is_ok() {
                out.write_all(b"\n]\n")?;
            }
            r
        }
    };
    match result {
        Ok(_) => {}
        Err(ExportError::Write(e)) => return Err(e).context("writing the export"),
        Err(ExportError::Store(e)) => return Err(e.into()),
    }
    out.flush()?;
    Ok(0)
}

/// A `--since`/`--until` value: RFC 3339, or an age (`24h`: that long before `now_ms`).
fn time_arg(flag: &str, value: &str, now_ms: i64) -> Result<i64> {
    if let Ok(ms) = mcpulse_wire::units::parse_rfc3339(value) {
        return Ok(ms);
    }
    match mcpulse_wire::units::duration(value) {
        Ok(age) => Ok(now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX))),
        Err(_) => bail!(
            "{flag} {}: not a time; give RFC 3339 (2026-12-01T00:00:00Z) or an age (24h, 7d, 90m)",
            mcpulse_wire::text::quoted(value, mcpulse_wire::text::FIELD_CHARS)
        ),
    }
}

/// One CSV cell (RFC 4180), inert and safe to open in a spreadsheet (see the module docs).
fn csv_cell(line: &mut String, cell: &Cell<'_>) {
    use std::fmt::Write;
    match cell {
        Cell::Null => {}
        Cell::Int(v) => {
            let _ = write!(line, "{v}");
        }
        Cell::Real(v) => {
            let _ = write!(line, "{v}");
        }
        Cell::Text(t) => {
            let text = mcpulse_wire::text::message(t);
            let formula = text.starts_with(['=', '+', '-', '@', '\t', '\r']);
            let quote = formula || text.contains([',', '"', '\n', '\r']);
            if quote {
                line.push('"');
            }
            if formula {
                line.push('\'');
            }
            for c in text.chars() {
                if c == '"' {
                    line.push('"');
                }
                line.push(c);
            }
            if quote {
                line.push('"');
            }
        }
    }
}

fn json_cell(cell: &Cell<'_>) -> serde_json::Value {
    match *cell {
        Cell::Null => serde_json::Value::Null,
        Cell::Int(v) => v.into(),
        Cell::Real(v) => v.into(),
        Cell::Text(t) => t.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(t: &str) -> String {
        let mut s = String::new();
        csv_cell(&mut s, &Cell::Text(t));
        s
    }

    #[test]
    fn csv_cells_are_quoted_inert_and_never_formulas() {
        assert_eq!(csv("plain"), "plain");
        assert_eq!(csv("a,b"), "\"a,b\"");
        assert_eq!(csv("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv("+1"), "\"'+1\"");
        assert_eq!(csv("-2"), "\"'-2\"");
        assert_eq!(csv("@SUM(A1)"), "\"'@SUM(A1)\"");
        // A newline or an escape sequence is shown, not obeyed.
        assert_eq!(csv("a\nb\x1b[2J"), "a\\nb\\x1b[2J");
        // A tab at the start is escaped by the inert rule, so no longer a formula lead.
        assert_eq!(csv("\t=1"), "\\t=1");
    }

    #[test]
    fn times_are_rfc3339_or_ages() {
        let now = 1_800_000_000_000;
        assert_eq!(
            time_arg("--since", "2026-12-01T00:00:00Z", now).unwrap(),
            1_796_083_200_000
        );
        assert_eq!(time_arg("--since", "24h", now).unwrap(), now - 86_400_000);
        let err = time_arg("--until", "yesterday", now)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--until \"yesterday\": not a time"), "{err}");
    }
}
