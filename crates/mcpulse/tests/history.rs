//! The history file while the monitor runs (issue #22 item 3), with the real `mcpulse monitor`
//! writing it and Debian's `sqlite3` CLI (scripts/ci-packages.sh) reading it:
//!
//! - `sqlite3 -readonly FILE "select ..."` returns the history through the views;
//! - `VACUUM INTO` makes a copy that passes `PRAGMA integrity_check` and holds the checks
//!   written so far;
//! - a second monitor on the same file exits 3 with an error naming the file, the first one's
//!   pid and what to do, and the first one keeps writing;
//! - `mcpulse history export` reads the same rows as CSV and JSON, by target and time, with a
//!   target whose name is a spreadsheet formula made harmless.
//!
//! The targets are scripted stdio servers (mcpulse-testkit); the API listens on a loopback port
//! chosen at run time; every wait polls with a deadline; every child is killed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::{StdioScript, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const SQLITE3: &str = "/usr/bin/sqlite3";
const PATIENCE: Duration = Duration::from_secs(20);

/// A target named like a spreadsheet formula, with the comma and quotes CSV must quote.
const FORMULA: &str = r#"=HYPERLINK("http://evil.example","x")"#;

/// `mcpulse monitor` as a child; stopped (SIGTERM, then SIGKILL) and reaped on drop, so it
/// stops its stdio servers itself.
struct Monitor {
    child: Child,
    log: PathBuf,
}

impl Monitor {
    fn start(dir: &TempDir, config: &Path, name: &str) -> Monitor {
        let log = dir.join(&format!("{name}.log"));
        let child = Command::new(BIN)
            .args(["monitor", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning mcpulse monitor");
        Monitor { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for it to exit, at most `bound`.
    fn wait(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + bound;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            if self.wait(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

fn sqlite3(args: &[&str]) -> Output {
    assert!(
        Path::new(SQLITE3).exists(),
        "{SQLITE3} is missing: install Debian's sqlite3 (scripts/ci-packages.sh)"
    );
    Command::new(SQLITE3).args(args).output().unwrap()
}

/// `sqlite3 -readonly db sql`: its stdout, or a failure with its stderr.
fn query(db: &Path, sql: &str) -> String {
    let out = sqlite3(&["-readonly", db.to_str().unwrap(), sql]);
    assert!(
        out.status.success(),
        "sqlite3 {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn count(db: &Path, sql: &str) -> i64 {
    query(db, sql).trim().parse().unwrap()
}

/// Polls `count(db, sql)` until it reaches `n`; the last count.
fn wait_count(m: &mut Monitor, db: &Path, sql: &str, n: i64) -> i64 {
    let until = Instant::now() + PATIENCE;
    loop {
        // Before the monitor made the file (and its views), sqlite3 has nothing to read.
        if db.exists() {
            let out = sqlite3(&["-readonly", db.to_str().unwrap(), sql]);
            if out.status.success()
                && let Ok(c) = String::from_utf8_lossy(&out.stdout).trim().parse::<i64>()
                && c >= n
            {
                return c;
            }
        }
        assert!(
            Instant::now() < until,
            "{sql} never reached {n}:\n{}",
            m.log()
        );
        assert!(
            m.child.try_wait().unwrap().is_none(),
            "the monitor exited:\n{}",
            m.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn export(args: &[&str]) -> (Output, String) {
    let out = Command::new(BIN)
        .args(["history", "export"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    (out, stdout)
}

/// Two healthy stdio targets, one of them named [`FORMULA`], checked every second.
fn fleet(dir: &TempDir) -> (PathBuf, PathBuf) {
    let script = StdioScript::legacy().write(dir, "server.sh");
    let script = script.to_str().unwrap();
    let name = FORMULA.replace('"', "\\\"");
    let config = dir.join("mcpulse.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\npath = \"mcpulse.db\"\n\n[defaults]\ninterval = \"1s\"\n\
             timeout = \"500ms\"\nsecurity = false\n\n\
             [[targets]]\nname = \"svc\"\ncommand = [\"sh\", \"{script}\"]\n\n\
             [[targets]]\nname = \"{name}\"\ncommand = [\"sh\", \"{script}\"]\n"
        ),
    )
    .unwrap();
    (config, dir.join("mcpulse.db"))
}

#[test]
fn sqlite3_reads_and_copies_the_history_while_the_monitor_writes_and_a_second_monitor_is_refused() {
    let dir = TempDir::new("history-live");
    let (config, db) = fleet(&dir);
    let mut first = Monitor::start(&dir, &config, "first");
    let db_s = db.to_str().unwrap();

    // Read while it writes: the views answer with names and times.
    wait_count(
        &mut first,
        &db,
        "SELECT count(*) FROM v_checks WHERE target = 'svc'",
        3,
    );
    let rows = query(
        &db,
        "SELECT target, status, at FROM v_checks WHERE target = 'svc' ORDER BY at_ms LIMIT 2",
    );
    for line in rows.lines() {
        let cells: Vec<&str> = line.split('|').collect();
        assert_eq!(cells[..2], ["svc", "healthy"], "{rows}");
        assert!(cells[2].len() == 24 && cells[2].ends_with('Z'), "{rows}");
    }
    assert_eq!(query(&db, "PRAGMA journal_mode").trim(), "wal");

    // A consistent copy while it writes, holding at least what was there before.
    let before = count(&db, "SELECT count(*) FROM checks");
    let copy = dir.join("copy.db");
    let out = sqlite3(&[
        "-readonly",
        db_s,
        &format!("VACUUM INTO '{}'", copy.display()),
    ]);
    assert!(
        out.status.success(),
        "VACUUM INTO: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(query(&copy, "PRAGMA integrity_check").trim(), "ok");
    let copied = count(&copy, "SELECT count(*) FROM v_checks");
    assert!(
        copied >= before,
        "the copy has {copied} checks, {before} before it was made"
    );
    assert_eq!(
        count(
            &copy,
            "SELECT count(*) FROM checks WHERE target_id NOT IN (SELECT id FROM targets)"
        ),
        0
    );

    // A second monitor on the same file: refused at once, exit 3, a clear error.
    let started = Instant::now();
    let mut second = Monitor::start(&dir, &config, "second");
    let status = second
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("the second monitor kept running:\n{}", second.log()));
    assert_eq!(status.code(), Some(3), "{}", second.log());
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = second.log();
    let lock = format!("{db_s}.lock");
    for part in [
        &format!("another mcpulse monitor (pid {})", first.child.id()),
        db_s,
        &lock,
        "another storage.path",
        "docs/history.md",
    ] {
        assert!(err.contains(part), "{part:?} not in:\n{err}");
    }
    // The first still runs and still writes.
    assert!(first.child.try_wait().unwrap().is_none(), "{}", first.log());
    let now = count(&db, "SELECT count(*) FROM checks");
    wait_count(&mut first, &db, "SELECT count(*) FROM checks", now + 2);

    // Stopped, the lock is free: a monitor starts on the file again.
    sigterm(&mut first);
    let mut third = Monitor::start(&dir, &config, "third");
    let more = count(&db, "SELECT count(*) FROM checks");
    wait_count(&mut third, &db, "SELECT count(*) FROM checks", more + 1);
    assert!(third.child.try_wait().unwrap().is_none());
    drop((first, second, third));
    assert_no_server_left(&dir);
}

/// No scripted server of this test's directory is still running (the monitor stops its own).
fn assert_no_server_left(dir: &TempDir) {
    let script = dir.join("server.sh");
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let out = Command::new("pgrep")
            .args(["-f", script.to_str().unwrap()])
            .output()
            .unwrap();
        if out.stdout.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "servers left: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM through `kill(1)` (no `unsafe` in tests either), then a clean exit.
fn sigterm(m: &mut Monitor) {
    let ok = Command::new("kill")
        .args(["-TERM", &m.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = m.wait(Duration::from_secs(10)).expect("exit after SIGTERM");
    assert!(status.success(), "{status}: {}", m.log());
}

#[test]
fn history_export_streams_csv_and_json_by_target_and_time_while_the_monitor_runs() {
    let dir = TempDir::new("history-export");
    let (config, db) = fleet(&dir);
    let mut m = Monitor::start(&dir, &config, "monitor");
    let total = wait_count(&mut m, &db, "SELECT count(*) FROM v_checks", 6);
    let config_s = config.to_str().unwrap();

    // CSV, every target: a header, then rows by target then time.
    let (out, csv) = export(&["--config", config_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("check_id,target,at,at_ms,status,duration_ms,grade")
    );
    let rows: Vec<&str> = lines.collect();
    assert!(rows.len() as i64 >= total, "{csv}");
    // The formula target is quoted and prefixed: a spreadsheet shows it as text.
    let formula = rows
        .iter()
        .find(|r| r.contains("HYPERLINK"))
        .unwrap_or_else(|| panic!("{csv}"));
    assert!(
        formula.contains(r#","'=HYPERLINK(""http://evil.example"",""x"")","#),
        "{formula}"
    );
    assert!(!rows.iter().any(|r| r.contains(",=")), "{csv}");
    // Sorted by target (`=…` before `svc`), then time.
    let targets: Vec<bool> = rows.iter().map(|r| r.contains(",svc,")).collect();
    assert!(targets.windows(2).all(|w| w[0] <= w[1]), "{csv}");

    // JSON, one target: an array of objects with exact names and numbers.
    let (out, json) = export(&[
        "--db",
        db.to_str().unwrap(),
        "--format",
        "json",
        "--target",
        FORMULA,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let items = v.as_array().unwrap();
    assert!(!items.is_empty(), "{json}");
    let mut last = 0;
    for item in items {
        assert_eq!(item["target"], FORMULA);
        assert_eq!(item["status"], "healthy");
        let at = item["at_ms"].as_i64().unwrap();
        assert!(at >= last, "{json}");
        last = at;
        assert!(item["duration_ms"].is_number());
        assert!(item["check_id"].is_i64());
    }

    // Time range: an hour ahead has nothing; since an hour ago has everything of "svc";
    // an RFC 3339 `--until` before the first check has nothing.
    let (_, ahead) = export(&["--config", config_s, "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(ahead.lines().count(), 1, "{ahead}");
    let (_, hour) = export(&["--config", config_s, "--since", "1h", "--target", "svc"]);
    let svc = hour.lines().skip(1).collect::<Vec<_>>();
    assert!(
        !svc.is_empty() && svc.iter().all(|r| r.contains(",svc,")),
        "{hour}"
    );
    let (_, early) = export(&["--config", config_s, "--until", "2000-01-01T00:00:00Z"]);
    assert_eq!(early.lines().count(), 1, "{early}");

    // Transitions: unknown → healthy of each target.
    let (out, moves) = export(&[
        "--config",
        config_s,
        "--table",
        "transitions",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&moves).unwrap();
    let svc_moves: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["target"] == "svc")
        .collect();
    assert_eq!(svc_moves.len(), 1, "{moves}");
    assert_eq!(svc_moves[0]["from_status"], "unknown");
    assert_eq!(svc_moves[0]["to_status"], "healthy");

    // Errors: a bad time, a missing file; exit 3 with the reason.
    let (out, _) = export(&["--db", db.to_str().unwrap(), "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a time"));
    let (out, _) = export(&["--db", dir.join("nope.db").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.db"));
    assert!(
        !dir.join("nope.db").exists(),
        "a read must not create the file"
    );
    drop(m);
    assert_no_server_left(&dir);
}

/// Every command in the ```sh blocks of docs/history.md, run as written (`sh -c`, in the
/// config's directory, `mcpulse` on the PATH) against a monitor that is writing: each exits 0
/// with nothing on stderr.
#[test]
fn the_commands_of_docs_history_md_work() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/history.md"
    ))
    .unwrap();
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in doc.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            l if in_sh && !l.is_empty() && !l.starts_with('#') => commands.push(l.to_owned()),
            _ => {}
        }
    }
    assert!(commands.len() >= 10, "{commands:?}");
    let dir = TempDir::new("history-docs");
    let (config, db) = fleet(&dir);
    let mut m = Monitor::start(&dir, &config, "monitor");
    wait_count(&mut m, &db, "SELECT count(*) FROM v_transitions", 2);
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in &commands {
        let out = Command::new("sh")
            .args(["-c", command])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{command}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // What the backups made is whole and holds the history.
    for copy in ["backup.db", "backup-vacuum.db"] {
        let copy = dir.join(copy);
        assert_eq!(query(&copy, "PRAGMA integrity_check").trim(), "ok");
        assert!(count(&copy, "SELECT count(*) FROM v_checks") > 0);
    }
    let csv = std::fs::read_to_string(dir.join("last-day.csv")).unwrap();
    assert!(csv.lines().count() > 1, "{csv}");
    drop(m);
    assert_no_server_left(&dir);
}
