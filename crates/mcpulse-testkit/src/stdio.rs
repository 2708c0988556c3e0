//! Scripted stdio MCP servers: small POSIX `sh` scripts, generated from a description, that read
//! one JSON-RPC line at a time from stdin and answer by method.
//!
//! A shell script rather than a Rust binary because what matters on stdio is process
//! behaviour (exiting, hanging, ignoring SIGTERM, leaving a grandchild behind, writing junk to
//! stdout), and a script shows that behaviour in a few readable lines. Replies echo the
//! request's numeric id (mcpulse's ids are 1, 2, 3... in order), extracted with `sed`.
//!
//! Run a script as `sh <path>`; it needs nothing but `sh`, `sed`, `printf` and `sleep` (and
//! `yes` for [`Act::Flood`]).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A directory under the system temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "mcpulse-testkit-{label}-{}-{n}-{nanos}",
            std::process::id()
        ));
        if let Err(e) = std::fs::create_dir_all(&path) {
            panic!("creating {}: {e}", path.display());
        }
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// What the script does, at start or on a request.
#[derive(Debug, Clone)]
pub enum Act {
    /// Answer with this `result` (the request's id is filled in).
    Result(Value),
    /// Answer the request read before this one (its id filled in) with this `result`: a reply
    /// that comes after the next request's, as a server handling requests concurrently sends.
    ResultToPrevious(Value),
    /// Answer with a JSON-RPC error.
    Error(i64, String),
    /// Write this line to stdout, as is (JSON or not).
    Stdout(String),
    /// Do this act this many times over.
    Repeat(Box<Act>, usize),
    /// Write this line to stderr.
    Stderr(String),
    /// Exit with this code.
    Exit(i32),
    /// Stop reading and never answer again, ignoring SIGTERM: only SIGKILL ends it.
    Hang,
    /// Sleep this many milliseconds (a slow start-up, at start; a slow answer, on a request).
    Sleep(u64),
    /// Start a long `sleep` in the background and append its pid to `file`: a grandchild of
    /// mcpulse, as `npx` starting `node` makes one. Its stdio is detached, so only the process
    /// group ties it to the server (and the server's stdout closes when the script exits).
    SpawnGrandchild(PathBuf),
    /// Append the script's own pid to `file`.
    RecordPid(PathBuf),
    /// Exit with code 1 the first time any process of the script gets here (a directory made at
    /// `marker` remembers it across processes); later, go on with the next act.
    ExitOnce(PathBuf),
    /// The first act the first time any process of the script gets here (a directory made at
    /// the path remembers it across processes, as for [`Act::ExitOnce`]), the second one
    /// every later time: a server that behaves differently after a restart.
    FirstTimeElse(PathBuf, Box<Act>, Box<Act>),
    /// Start a long `sleep` in a session of its own (`setsid`), and append its pid to `file`:
    /// a grandchild that left the server's process group, so killing the group misses it.
    SpawnSessionLeader(PathBuf),
    /// Append the message being handled (the whole line) to `file`.
    RecordLine(PathBuf),
    /// The first act while a file exists at the path, the second otherwise: a dependency the
    /// test takes down (creates the file) and brings back (removes it).
    IfExists(PathBuf, Box<Act>, Box<Act>),
    /// A `notifications/progress` for the request being handled, with the `progressToken` its
    /// line carries (a string or a number, spliced as the line has it) and this `message`.
    Progress(String),
    /// Write this line to stdout over and over, as fast as the pipe takes it, for ever (the
    /// script becomes `yes`: it reads nothing more): a server flooding its stdout.
    Flood(String),
    /// Ignore SIGTERM from here on, and so do the processes the script starts after it (an
    /// ignored signal stays ignored across fork and exec).
    IgnoreSigterm,
}

/// A scripted stdio server, built up then written to a file.
#[derive(Debug, Clone, Default)]
pub struct StdioScript {
    start: Vec<Act>,
    /// Each rule's `case` pattern (quoted for `sh`, without the surrounding `*`) and acts.
    rules: Vec<(String, Vec<Act>)>,
    otherwise: Vec<Act>,
}

impl StdioScript {
    pub fn new() -> StdioScript {
        StdioScript::default()
    }

    /// A legacy server: `initialize` and `tools/list` (one tool, `echo`) answered, anything
    /// else ignored. Healthy, with a stable contract.
    pub fn legacy() -> StdioScript {
        StdioScript::legacy_advertising(serde_json::json!({ "tools": { "listChanged": false } }))
    }

    /// [`StdioScript::legacy`] with these `capabilities` in its `initialize` result (rules for
    /// the lists they promise are added after).
    pub fn legacy_advertising(capabilities: Value) -> StdioScript {
        let mut init = crate::mcp::initialize_result(crate::mcp::LEGACY);
        init["capabilities"] = capabilities;
        StdioScript::new()
            .on("initialize", vec![Act::Result(init)])
            .on(
                "tools/list",
                vec![Act::Result(crate::mcp::tools_list_result(
                    crate::mcp::tools(&["echo"]),
                    None,
                    false,
                ))],
            )
    }

    /// Something done once at start, before reading stdin.
    pub fn at_start(mut self, act: Act) -> StdioScript {
        self.start.push(act);
        self
    }

    /// What to do on a message with this `method` (requests and notifications alike). Messages
    /// with no rule are read and ignored.
    pub fn on(mut self, method: &str, acts: Vec<Act>) -> StdioScript {
        self.rules
            .push((quote(&format!("\"method\":\"{method}\"")), acts));
        self
    }

    /// What to do on a `tools/call` of `tool` (mcpulse's requests put `method` before
    /// `params.name`: its JSON objects keep their keys sorted). Give it before any rule for
    /// `tools/call` itself: the first matching rule wins.
    pub fn on_tool(mut self, tool: &str, acts: Vec<Act>) -> StdioScript {
        let pattern = format!(
            "{}*{}",
            quote("\"method\":\"tools/call\""),
            quote(&format!("\"name\":\"{tool}\""))
        );
        self.rules.push((pattern, acts));
        self
    }

    /// What to do on a message whose line contains `text` (as the server reads it: the
    /// client's JSON is compact, `"id":"x"` without spaces): a reply to a request of the
    /// server's, say.
    pub fn on_line(mut self, text: &str, acts: Vec<Act>) -> StdioScript {
        self.rules.push((quote(text), acts));
        self
    }

    /// What to do on a message no rule matched (replies from the client included); by default
    /// nothing.
    pub fn otherwise(mut self, acts: Vec<Act>) -> StdioScript {
        self.otherwise = acts;
        self
    }

    /// The script text.
    pub fn render(&self) -> String {
        let mut s = String::from(
            "#!/bin/sh\n# A scripted stdio MCP server, generated by mcpulse-testkit.\n",
        );
        for act in &self.start {
            s.push_str(&render_act(act));
        }
        s.push_str("while IFS= read -r line; do\n");
        // A numeric id, or a string one (quotes kept, no escapes inside): spliced as is.
        s.push_str(
            "  id=$(printf '%s\\n' \"$line\" | sed -n -e 's/.*\"id\":\\([0-9][0-9]*\\).*/\\1/p' -e 's/.*\"id\":\\(\"[^\"]*\"\\).*/\\1/p')\n",
        );
        s.push_str("  case \"$line\" in\n");
        for (pattern, acts) in &self.rules {
            s.push_str(&format!("    *{pattern}*)\n"));
            for act in acts {
                for line in render_act(act).lines() {
                    s.push_str(&format!("      {line}\n"));
                }
            }
            s.push_str("      ;;\n");
        }
        s.push_str("    *)\n");
        for act in &self.otherwise {
            for line in render_act(act).lines() {
                s.push_str(&format!("      {line}\n"));
            }
        }
        s.push_str("      ;;\n  esac\n");
        s.push_str("  if [ -n \"$id\" ]; then prev=$id; fi\ndone\n");
        s
    }

    /// Writes the script to `dir/name` and returns its path.
    pub fn write(&self, dir: &TempDir, name: &str) -> PathBuf {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, self.render()) {
            panic!("writing {}: {e}", path.display());
        }
        path
    }
}

/// Single-quotes a string for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A JSON-RPC reply as a `printf` whose id is the shell variable `$id` (or `var`).
fn reply_line(payload: (&str, Value)) -> String {
    reply_line_to("id", payload)
}

fn reply_line_to(var: &str, payload: (&str, Value)) -> String {
    let mut msg = serde_json::Map::new();
    msg.insert("jsonrpc".into(), Value::String("2.0".into()));
    msg.insert("id".into(), Value::String("__ID__".into()));
    msg.insert(payload.0.into(), payload.1);
    let text = quote(&Value::Object(msg).to_string());
    // Close the quote around the id, splice in "$id", reopen.
    format!(
        "printf '%s\\n' {}\n",
        text.replace(r#""__ID__""#, &format!(r#"'"${var}"'"#))
    )
}

fn render_act(act: &Act) -> String {
    match act {
        Act::Result(v) => reply_line(("result", v.clone())),
        Act::ResultToPrevious(v) => reply_line_to("prev", ("result", v.clone())),
        Act::Error(code, message) => reply_line((
            "error",
            serde_json::json!({ "code": code, "message": message }),
        )),
        Act::Stdout(line) => format!("printf '%s\\n' {}\n", quote(line)),
        Act::Repeat(act, times) => format!(
            "i=0\nwhile [ $i -lt {times} ]; do\n{}i=$((i+1))\ndone\n",
            render_act(act)
        ),
        Act::Stderr(line) => format!("printf '%s\\n' {} >&2\n", quote(line)),
        Act::Exit(code) => format!("exit {code}\n"),
        Act::Hang => "trap '' TERM\nexec sleep 100000\n".to_owned(),
        Act::IgnoreSigterm => "trap '' TERM\n".to_owned(),
        Act::Flood(line) => format!("exec yes {}\n", quote(line)),
        Act::Sleep(ms) => format!("sleep {}.{:03}\n", ms / 1000, ms % 1000),
        Act::SpawnGrandchild(file) => format!(
            "sleep 100000 </dev/null >/dev/null 2>&1 &\necho $! >> {}\n",
            quote(&file.to_string_lossy())
        ),
        Act::RecordPid(file) => format!("echo $$ >> {}\n", quote(&file.to_string_lossy())),
        Act::ExitOnce(marker) => format!(
            "if mkdir {} 2>/dev/null; then exit 1; fi\n",
            quote(&marker.to_string_lossy())
        ),
        Act::FirstTimeElse(marker, first, later) => format!(
            "if mkdir {} 2>/dev/null; then\n{}else\n{}fi\n",
            quote(&marker.to_string_lossy()),
            render_act(first),
            render_act(later)
        ),
        Act::SpawnSessionLeader(file) => format!(
            "setsid sh -c 'echo $$ >> \"$1\"; exec sleep 100000' sh {} </dev/null >/dev/null 2>&1 &\n",
            quote(&file.to_string_lossy())
        ),
        Act::IfExists(file, then, otherwise) => format!(
            "if [ -e {} ]; then\n{}else\n{}fi\n",
            quote(&file.to_string_lossy()),
            render_act(then),
            render_act(otherwise)
        ),
        Act::Progress(message) => {
            let text = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "__TOKEN__", "progress": 1, "message": message}})
            .to_string();
            format!(
                "token=$(printf '%s\\n' \"$line\" | sed -n -e 's/.*\"progressToken\":\\([0-9][0-9]*\\).*/\\1/p' -e 's/.*\"progressToken\":\\(\"[^\"]*\"\\).*/\\1/p')\nprintf '%s\\n' {}\n",
                quote(&text).replace(r#""__TOKEN__""#, r#"'"$token"'"#)
            )
        }
        Act::RecordLine(file) => format!(
            "printf '%s\\n' \"$line\" >> {}\n",
            quote(&file.to_string_lossy())
        ),
    }
}

/// Pids, one per line, from a file written by [`Act::RecordPid`] or [`Act::SpawnGrandchild`].
pub fn read_pids(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether a process is running. A zombie (exited, not yet reaped: common in containers whose
/// init does not reap orphans) counts as not running.
pub fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X" | "x")),
        Err(_) if Path::new("/proc/self/stat").exists() => false,
        // No procfs: ask kill(1).
        Err(_) => std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

/// Waits (polling, at most `bound`) until none of `pids` runs; returns those still running.
/// A SIGKILL is delivered at once but the process takes a moment to go, hence the wait.
pub fn still_running_after(pids: &[u32], bound: Duration) -> Vec<u32> {
    let until = Instant::now() + bound;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|p| is_running(*p)).collect();
        if alive.is_empty() || Instant::now() >= until {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills leftover processes so that a failing test does not leak them.
pub fn kill(pids: &[u32]) {
    for pid in pids {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Runs a script with these stdin lines; returns its exit code, stdout and stderr.
    fn run(script: &StdioScript, input: &[&str]) -> (Option<i32>, String, String) {
        use std::io::Write;
        let dir = TempDir::new("selftest");
        let path = script.write(&dir, "s.sh");
        let mut child = std::process::Command::new("sh")
            .arg(&path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for line in input {
            // The script may exit before reading everything (that is what `Act::Exit` is for).
            let _ = writeln!(stdin, "{line}");
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    fn parse_lines(stdout: &str) -> Vec<Value> {
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_script_answers_by_method_with_the_request_id() {
        let script = StdioScript::new()
            .at_start(Act::Stderr("starting".into()))
            .on("ping", vec![Act::Result(json!({"note": "it's $HOME `x`"}))])
            .on("initialize", vec![Act::Error(-32601, "no".into())])
            .on("quit", vec![Act::Exit(3)]);
        let (code, stdout, stderr) = run(
            &script,
            &[
                r#"{"id":7,"jsonrpc":"2.0","method":"ping"}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                r#"{"id":12,"jsonrpc":"2.0","method":"initialize","params":{}}"#,
                r#"{"id":13,"jsonrpc":"2.0","method":"quit"}"#,
                r#"{"id":14,"jsonrpc":"2.0","method":"ping"}"#,
            ],
        );
        assert_eq!(code, Some(3));
        let replies = parse_lines(&stdout);
        assert_eq!(
            replies,
            vec![
                json!({"jsonrpc": "2.0", "id": 7, "result": {"note": "it's $HOME `x`"}}),
                json!({"jsonrpc": "2.0", "id": 12, "error": {"code": -32601, "message": "no"}}),
            ]
        );
        assert_eq!(stderr, "starting\n");
    }

    #[test]
    fn string_ids_are_echoed_and_a_script_can_change_after_its_first_time() {
        let dir = TempDir::new("selftest-first");
        let script = StdioScript::new().on(
            "ping",
            vec![Act::FirstTimeElse(
                dir.join("m"),
                Box::new(Act::Result(json!(1))),
                Box::new(Act::Result(json!(2))),
            )],
        );
        let (_, stdout, _) = run(
            &script,
            &[
                r#"{"jsonrpc":"2.0","id":"hb-1","method":"ping"}"#,
                r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
            ],
        );
        let replies = parse_lines(&stdout);
        assert_eq!(
            replies,
            vec![
                json!({"jsonrpc": "2.0", "id": "hb-1", "result": 1}),
                json!({"jsonrpc": "2.0", "id": 8, "result": 2}),
            ]
        );
    }

    #[test]
    fn liveness() {
        assert!(is_running(std::process::id()));
        assert!(!is_running(u32::MAX - 1));
    }
}
