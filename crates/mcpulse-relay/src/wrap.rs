//! `mcpulse supervise --wrap` / `--unwrap`: rewrite a client config (Claude Desktop, Cursor, VS
//! Code, Claude Code) so that each stdio server runs as `<mcpulse> supervise -- <command>
//! <args…>`, and back.
//!
//! Where the servers are and which are stdio is `mcpulse_wire::clientconfig`, shared with the
//! monitor's import. This module owns the rewrite, which edits the file's *text*, not a parsed
//! value: only the `command` string and the start of the `args` array change, so every other
//! key, its order, the white space, and the comments and trailing commas of VS Code's JSONC stay
//! byte for byte (a parse-and-print round trip would sort keys and drop comments). The original
//! command's JSON token is moved into `args` as it was written and moved back on `--unwrap`, so
//! wrap then unwrap gives back the original bytes (see [`plan`] for the two white-space cases
//! where it gives back the same JSON but not the same bytes).
//!
//! A wrapped server is recognised by its shape (a `command` whose file name is `mcpulse`, and
//! `args` starting with `supervise` and holding `--` then the server's command), so wrapping
//! twice changes nothing and `--unwrap` leaves alone what is not wrapped. Writing ([`apply`])
//! makes a backup first and replaces the file atomically, keeping its permissions.
//!
//! Bounds: the file is read whole (client configs are kilobytes; Claude Code's `~/.claude.json`
//! can reach megabytes, which is still fine) and refused past [`MAX_FILE_BYTES`]; the parser
//! refuses nesting deeper than [`MAX_DEPTH`] rather than recurse without end.

use mcpulse_wire::clientconfig::{ServerTable, is_stdio, server_tables, strip_jsonc};
use mcpulse_wire::text;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The largest config file read (64 MiB): far above any real one, below memory trouble.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// The deepest nesting of objects and arrays the parser follows.
pub const MAX_DEPTH: usize = 256;

/// Which way to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Wrap,
    Unwrap,
}

/// What happened (or would happen) to one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Now runs under the supervisor.
    Wrapped,
    /// Runs its own command again.
    Unwrapped,
    /// Left alone: the reason (already wrapped, not wrapped, HTTP, args not strings…).
    Unchanged(&'static str),
}

/// One server of the file and its [`Outcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Where its table is, as [`ServerTable::describe`] says it (raw: make it inert to print).
    pub table: String,
    /// Its name (raw: make it inert to print).
    pub server: String,
    pub outcome: Outcome,
}

/// A rewrite worked out but not written: the original text, the new one and what changed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub original: String,
    pub edited: String,
    pub changes: Vec<Change>,
    edits: Vec<Edit>,
}

impl Plan {
    /// Whether writing it would change the file.
    pub fn is_change(&self) -> bool {
        !self.edits.is_empty()
    }
}

/// What `--wrap` / `--unwrap` can fail on; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is larger than {MAX_FILE_BYTES} bytes; is it really a client config?")]
    TooLarge { path: String },
    #[error("{path} is not UTF-8 text; is it really a client config?")]
    NotUtf8 { path: String },
    #[error("{path} is not JSON ({detail}); fix it, or restore a backup, and run again")]
    NotJson { path: String, detail: String },
    #[error(
        "{path} has no \"mcpServers\", \"servers\" or \"mcp.servers\" object: give the config file of Claude Desktop, Cursor, VS Code or Claude Code"
    )]
    NoServers { path: String },
    #[error("cannot rewrite {path}: {detail}; the file was not changed")]
    Rewrite { path: String, detail: String },
    #[error(
        "{path} changed while it was being rewritten (is the client writing it?); nothing was written: run again"
    )]
    Changed { path: String },
    #[error("cannot write {path}: {source}; the original file was not changed")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// Works out the rewrite of a config's `text` (`source` names it in errors). `exe` is the
/// command a wrapped server runs: the absolute path of mcpulse, so the client needs no `PATH`.
///
/// Wrapping a server:
/// - `command` becomes `exe` (as a JSON string);
/// - `"supervise", "--", <the old command token>,` is put at the start of `args`, and an
///   absent `args` becomes `, "args": ["supervise", "--", <token>]` after `command`.
///
/// Unwrapping undoes that. The bytes come back as they were, except in two cases where the
/// JSON comes back the same but the white space does not: `args` that began with a space
/// (`[ "x"]` comes back `["x"]`), and `"args": []` written right after `command` on the same
/// line, which comes back absent (as if `--wrap` had added it).
pub fn plan(text: &str, source: &str, direction: Direction, exe: &str) -> Result<Plan, WrapError> {
    let json: Value = serde_json::from_str(&strip_jsonc(text)).map_err(|e| WrapError::NotJson {
        path: source.to_owned(),
        detail: e.to_string(),
    })?;
    let tables = server_tables(&json);
    if tables.is_empty() {
        return Err(WrapError::NoServers {
            path: source.to_owned(),
        });
    }
    let rewrite = |detail: String| WrapError::Rewrite {
        path: source.to_owned(),
        detail,
    };
    let tree = Parser::new(text).document().map_err(rewrite)?;
    let mut edits = Vec::new();
    let mut changes = Vec::new();
    for table in &tables {
        let (Some(values), Some(node)) = (table.get(&json), find(&tree, &table.path)) else {
            continue;
        };
        let Kind::Object(members) = &node.kind else {
            continue;
        };
        // In file order; of a duplicated name, the last member, as serde_json reads it.
        for (n, (name, snode)) in members.iter().enumerate() {
            let Some(server) = values.get(name) else {
                continue;
            };
            if members[n + 1..].iter().any(|(k, _)| k == name) {
                continue;
            }
            let outcome = if is_stdio(server) {
                server_edits(text, snode, direction, exe, &mut edits)
            } else {
                Outcome::Unchanged("not a stdio server")
            };
            changes.push(Change {
                table: table.describe(),
                server: name.clone(),
                outcome,
            });
        }
    }
    edits.sort_by_key(|e| e.start);
    let mut edited = text.to_owned();
    for e in edits.iter().rev() {
        edited.replace_range(e.start..e.end, &e.text);
    }
    check(&json, &edited, &tables, &changes, direction, exe).map_err(rewrite)?;
    Ok(Plan {
        original: text.to_owned(),
        edited,
        changes,
        edits,
    })
}

/// Whether `command` and `args` are the shape `--wrap` writes: mcpulse, `supervise`, options,
/// `--`, the server's command and its args. Returns the index of the server's command in args.
fn wrapped_at(command: &str, args: &[&str]) -> Option<usize> {
    let file = command.rsplit(['/', '\\']).next().unwrap_or(command);
    if !matches!(file, "mcpulse" | "mcpulse.exe") || args.first() != Some(&"supervise") {
        return None;
    }
    let dash = args.iter().position(|a| *a == "--")?;
    (dash + 1 < args.len()).then_some(dash + 1)
}

/// The edits for one stdio server.
fn server_edits(
    text: &str,
    server: &Node,
    direction: Direction,
    exe: &str,
    edits: &mut Vec<Edit>,
) -> Outcome {
    let Kind::Object(members) = &server.kind else {
        return Outcome::Unchanged("not an object");
    };
    let last = |key: &str| members.iter().rev().find(|(k, _)| k == key).map(|(_, n)| n);
    let Some(cmd) = last("command") else {
        return Outcome::Unchanged("no command");
    };
    let Kind::Str(command) = &cmd.kind else {
        return Outcome::Unchanged("command is not a string");
    };
    let args = last("args");
    let items: Vec<&Node> = match args.map(|a| &a.kind) {
        None => Vec::new(),
        Some(Kind::Array(items)) => items.iter().collect(),
        Some(_) => return Outcome::Unchanged("args is not an array"),
    };
    let mut strs = Vec::new();
    for i in &items {
        let Kind::Str(s) = &i.kind else {
            return Outcome::Unchanged("args are not all strings");
        };
        strs.push(s.as_str());
    }
    let at = wrapped_at(command, &strs);
    let raw = |n: &Node| text[n.start..n.end].to_owned();
    match (direction, at) {
        (Direction::Wrap, Some(_)) => Outcome::Unchanged("already wrapped"),
        (Direction::Unwrap, None) => Outcome::Unchanged("not wrapped"),
        (Direction::Wrap, None) => {
            let exe = serde_json::Value::from(exe).to_string();
            edits.push(Edit::new(cmd.start, cmd.end, exe));
            let head = format!("\"supervise\", \"--\", {}", raw(cmd));
            match (args, items.first()) {
                (None, _) => {
                    edits.push(Edit::new(cmd.end, cmd.end, format!(", \"args\": [{head}]")))
                }
                (Some(a), None) => edits.push(Edit::new(a.start + 1, a.start + 1, head)),
                (Some(a), Some(first)) => {
                    let gap = if first.start == a.start + 1 {
                        ", "
                    } else {
                        ","
                    };
                    edits.push(Edit::new(a.start + 1, a.start + 1, format!("{head}{gap}")));
                }
            }
            Outcome::Wrapped
        }
        (Direction::Unwrap, Some(at)) => {
            let (Some(a), Some(own)) = (args, items.get(at)) else {
                return Outcome::Unchanged("not wrapped");
            };
            edits.push(Edit::new(cmd.start, cmd.end, raw(own)));
            match items.get(at + 1) {
                Some(_) => {
                    // Through the comma after the command, and the one space --wrap added.
                    let mut end = skip_blank(text.as_bytes(), own.end) + 1;
                    let b = text.as_bytes();
                    if b.get(end) == Some(&b' ')
                        && b.get(end + 1).is_some_and(|c| !c.is_ascii_whitespace())
                    {
                        end += 1;
                    }
                    edits.push(Edit::new(a.start + 1, end, String::new()));
                }
                None if at == 2 && text[cmd.end..a.start] == *", \"args\": " => {
                    // The args --wrap added to a server that had none.
                    edits.push(Edit::new(cmd.end, a.end, String::new()));
                }
                None => edits.push(Edit::new(a.start + 1, own.end, String::new())),
            }
            Outcome::Unwrapped
        }
    }
}

/// A guard against a wrong edit: the rewritten text must parse, and differ from the original
/// only in the `command` and `args` of the servers said to change, which must now be what the
/// direction promises.
fn check(
    before: &Value,
    edited: &str,
    tables: &[ServerTable],
    changes: &[Change],
    direction: Direction,
    exe: &str,
) -> Result<(), String> {
    let after: Value = serde_json::from_str(&strip_jsonc(edited))
        .map_err(|e| format!("the rewritten file would not be JSON ({e})"))?;
    let (mut before, mut after) = (before.clone(), after);
    for c in changes
        .iter()
        .filter(|c| !matches!(c.outcome, Outcome::Unchanged(_)))
    {
        let Some(table) = tables.iter().find(|t| t.describe() == c.table) else {
            continue;
        };
        let get = |v: &mut Value| -> Option<serde_json::Map<String, Value>> {
            let mut v = &mut *v;
            for k in &table.path {
                v = v.get_mut(k)?;
            }
            v.get_mut(&c.server)?.as_object_mut().map(std::mem::take)
        };
        let (Some(mut b), Some(mut a)) = (get(&mut before), get(&mut after)) else {
            return Err(format!(
                "server {} went missing",
                text::quoted(&c.server, 200)
            ));
        };
        let strings = |m: &serde_json::Map<String, Value>| -> Vec<String> {
            let mut v: Vec<String> = m
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .into_iter()
                .collect();
            for a in m
                .get("args")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                v.extend(a.as_str().map(str::to_owned));
            }
            v
        };
        let (old, new) = (strings(&b), strings(&a));
        let (plain, wrapped) = match direction {
            Direction::Wrap => (old, new),
            Direction::Unwrap => (new, old),
        };
        let ok = match direction {
            Direction::Wrap => {
                wrapped.first().map(String::as_str) == Some(exe)
                    && wrapped.get(1..4).is_some()
                    && wrapped[1..3] == ["supervise", "--"]
                    && wrapped[3..] == plain[..]
            }
            Direction::Unwrap => {
                let at = wrapped
                    .get(2..)
                    .and_then(|rest| rest.iter().position(|a| a == "--"));
                at.is_some_and(|i| wrapped[i + 3..] == plain[..])
            }
        };
        if !ok {
            return Err(format!(
                "server {} would not be rewritten as intended",
                text::quoted(&c.server, 200)
            ));
        }
        for m in [&mut b, &mut a] {
            m.remove("command");
            m.remove("args");
        }
        if a != b {
            return Err(format!(
                "server {} would change beyond its command",
                text::quoted(&c.server, 200)
            ));
        }
    }
    if before != after {
        return Err("the rest of the file would change".to_owned());
    }
    Ok(())
}

/// Reads a config file (following a symlink, which is what gets rewritten) and plans the
/// rewrite. Returns the real path too, for [`apply`].
pub fn read_and_plan(
    path: &Path,
    direction: Direction,
    exe: &str,
) -> Result<(PathBuf, Plan), WrapError> {
    let shown = path.display().to_string();
    let read = |source| WrapError::Read {
        path: shown.clone(),
        source,
    };
    let real = std::fs::canonicalize(path).map_err(read)?;
    if std::fs::metadata(&real).map_err(read)?.len() > MAX_FILE_BYTES {
        return Err(WrapError::TooLarge { path: shown });
    }
    let bytes = std::fs::read(&real).map_err(read)?;
    let text = String::from_utf8(bytes).map_err(|_| WrapError::NotUtf8 {
        path: shown.clone(),
    })?;
    let plan = plan(&text, &shown, direction, exe)?;
    Ok((real, plan))
}

/// Writes a [`Plan`] to `path` (the real path [`read_and_plan`] returned): first a backup of
/// the original, `FILE.mcpulse-backup-YYYYMMDDTHHMMSSZ` beside it (`-2`, `-3`… if taken), with
/// the file's permissions; then the new text to a temporary file beside it, with the same
/// permissions, renamed over the original (atomic: a client reading it sees the old file or the
/// new one, never half). If the file changed since it was read, nothing is written. Returns the
/// backup's path; a plan that changes nothing writes nothing and returns `None`.
pub fn apply(path: &Path, plan: &Plan) -> Result<Option<PathBuf>, WrapError> {
    if !plan.is_change() {
        return Ok(None);
    }
    let shown = path.display().to_string();
    let write = |p: &Path| {
        let p = p.display().to_string();
        move |source| WrapError::Write { path: p, source }
    };
    let perms = std::fs::metadata(path).map_err(write(path))?.permissions();
    let stamp: String = mcpulse_wire::units::format_rfc3339(now_ms())
        .chars()
        .take(19)
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let backup = create_new(
        path,
        &format!("mcpulse-backup-{stamp}Z"),
        plan.original.as_bytes(),
        &perms,
    )?;
    let tmp = create_new(
        path,
        &format!("mcpulse-tmp-{}", std::process::id()),
        plan.edited.as_bytes(),
        &perms,
    )?;
    let now = std::fs::read(path).map_err(write(path));
    if now.as_deref().ok() != Some(plan.original.as_bytes()) {
        let _ = std::fs::remove_file(&tmp);
        now?;
        return Err(WrapError::Changed { path: shown });
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write(path)(e)
    })?;
    Ok(Some(backup))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A new file `path.suffix` (or `path.suffix-N` if taken) holding `bytes`, synced, with `perms`.
fn create_new(
    path: &Path,
    suffix: &str,
    bytes: &[u8],
    perms: &std::fs::Permissions,
) -> Result<PathBuf, WrapError> {
    use std::io::Write;
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{suffix}"));
    for n in 1..=100 {
        let mut p = name.clone();
        if n > 1 {
            p.push(format!("-{n}"));
        }
        let p = PathBuf::from(p);
        let err = |source| WrapError::Write {
            path: p.display().to_string(),
            source,
        };
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(err(e)),
        };
        let done = f
            .set_permissions(perms.clone())
            .and_then(|()| f.write_all(bytes))
            .and_then(|()| f.sync_all());
        if let Err(e) = done {
            let _ = std::fs::remove_file(&p);
            return Err(err(e));
        }
        return Ok(p);
    }
    Err(WrapError::Write {
        path: PathBuf::from(name).display().to_string(),
        source: std::io::Error::other("a hundred such files exist already"),
    })
}

/// The plan as a unified-style diff of `label` (old and new), three lines of context, every
/// line made inert ([`text::message`]: a config line may hold any character, and reaches a
/// terminal). Built from the edits, so it costs one pass over the file however large.
pub fn diff(plan: &Plan, label: &str) -> String {
    const CONTEXT: usize = 3;
    let old = &plan.original;
    let starts: Vec<usize> = std::iter::once(0)
        .chain(old.match_indices('\n').map(|(i, _)| i + 1))
        .filter(|&i| i < old.len() || i == 0)
        .collect();
    let line_of = |pos: usize| starts.partition_point(|&s| s <= pos).saturating_sub(1);
    let line_end = |l: usize| starts.get(l + 1).copied().unwrap_or(old.len());
    // Blocks of changed lines: edits on the same or next lines are one block.
    let mut blocks: Vec<(usize, usize, Vec<&Edit>)> = Vec::new();
    for e in &plan.edits {
        let (a, b) = (line_of(e.start), line_of(e.end.max(e.start)));
        match blocks.last_mut() {
            Some((_, end, es)) if a <= *end + 1 => {
                *end = (*end).max(b);
                es.push(e);
            }
            _ => blocks.push((a, b, vec![e])),
        }
    }
    let line = |l: usize| old[starts[l]..line_end(l)].trim_end_matches('\n');
    let mut out = format!("--- {}\n+++ {}\n", text::field(label), text::field(label));
    let mut delta: isize = 0;
    let mut i = 0;
    while i < blocks.len() {
        // A hunk: blocks whose context would overlap.
        let mut j = i;
        while j + 1 < blocks.len() && blocks[j + 1].0 <= blocks[j].1 + 2 * CONTEXT + 1 {
            j += 1;
        }
        let first = blocks[i].0.saturating_sub(CONTEXT);
        let last = (blocks[j].1 + CONTEXT).min(starts.len() - 1);
        let mut body = String::new();
        let (mut n_old, mut n_new) = (0usize, 0usize);
        let mut l = first;
        let new_start = first as isize + delta;
        for (a, b, es) in &blocks[i..=j] {
            while l < *a {
                body.push_str(&format!(" {}\n", text::message(line(l))));
                (n_old, n_new, l) = (n_old + 1, n_new + 1, l + 1);
            }
            let (from, to) = (starts[*a], line_end(*b));
            let mut new = old[from..to].to_owned();
            for e in es.iter().rev() {
                new.replace_range(e.start - from..e.end - from, &e.text);
            }
            for l in *a..=*b {
                body.push_str(&format!("-{}\n", text::message(line(l))));
                n_old += 1;
            }
            let added: Vec<&str> = new.trim_end_matches('\n').split('\n').collect();
            for s in &added {
                body.push_str(&format!("+{}\n", text::message(s)));
            }
            n_new += added.len();
            delta += added.len() as isize - (b - a + 1) as isize;
            l = b + 1;
        }
        while l <= last {
            body.push_str(&format!(" {}\n", text::message(line(l))));
            (n_old, n_new, l) = (n_old + 1, n_new + 1, l + 1);
        }
        out.push_str(&format!(
            "@@ -{},{n_old} +{},{n_new} @@\n{body}",
            first + 1,
            new_start + 1
        ));
        i = j + 1;
    }
    out
}

/// Replace `start..end` of the original text with `text`.
#[derive(Debug, Clone)]
struct Edit {
    start: usize,
    end: usize,
    text: String,
}

impl Edit {
    fn new(start: usize, end: usize, text: String) -> Self {
        Edit { start, end, text }
    }
}

/// A JSON value and where it is in the text (byte offsets, `end` exclusive).
#[derive(Debug)]
struct Node {
    start: usize,
    end: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    Str(String),
    Other,
}

/// The node at `path` (object keys; the last member of a duplicated key).
fn find<'a>(tree: &'a Node, path: &[String]) -> Option<&'a Node> {
    let mut n = tree;
    for k in path {
        let Kind::Object(members) = &n.kind else {
            return None;
        };
        n = members
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v)?;
    }
    Some(n)
}

/// The position of the next byte past white space and comments (`//`, `/* */`) from `i`.
fn skip_blank(b: &[u8], mut i: usize) -> usize {
    loop {
        match (b.get(i), b.get(i + 1)) {
            (Some(c), _) if c.is_ascii_whitespace() => i += 1,
            (Some(b'/'), Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            }
            _ => return i,
        }
    }
}

/// A JSONC parser that keeps where each value is. It is only run on text that `serde_json`
/// already accepted (after [`strip_jsonc`]), so its errors are a guard, not a diagnosis.
struct Parser<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            text,
            b: text.as_bytes(),
            i: 0,
        }
    }

    fn document(mut self) -> Result<Node, String> {
        let n = self.value(0)?;
        Ok(n)
    }

    fn error(&self, what: &str) -> String {
        format!("{what} at byte {}", self.i)
    }

    fn value(&mut self, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deep"));
        }
        self.i = skip_blank(self.b, self.i);
        let start = self.i;
        let kind = match self.b.get(start) {
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                loop {
                    self.i = skip_blank(self.b, self.i);
                    match self.b.get(self.i) {
                        Some(b'}') => break,
                        Some(b'"') => {}
                        _ => return Err(self.error("expected a key")),
                    }
                    let key = self.string()?;
                    self.i = skip_blank(self.b, self.i);
                    if self.b.get(self.i) != Some(&b':') {
                        return Err(self.error("expected ':'"));
                    }
                    self.i += 1;
                    let v = self.value(depth + 1)?;
                    members.push((key, v));
                    if !self.comma(b'}')? {
                        break;
                    }
                }
                self.i += 1;
                Kind::Object(members)
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.i = skip_blank(self.b, self.i);
                    if self.b.get(self.i) == Some(&b']') {
                        break;
                    }
                    items.push(self.value(depth + 1)?);
                    if !self.comma(b']')? {
                        break;
                    }
                }
                self.i += 1;
                Kind::Array(items)
            }
            Some(b'"') => Kind::Str(self.string()?),
            Some(_) => {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !c.is_ascii_whitespace() && !b",]}/".contains(c))
                {
                    self.i += 1;
                }
                if self.i == start {
                    return Err(self.error("expected a value"));
                }
                Kind::Other
            }
            None => return Err(self.error("unexpected end")),
        };
        Ok(Node {
            start,
            end: self.i,
            kind,
        })
    }

    /// After a member or item: true at a comma (passed), false at `close` (not passed).
    fn comma(&mut self, close: u8) -> Result<bool, String> {
        self.i = skip_blank(self.b, self.i);
        match self.b.get(self.i) {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(c) if *c == close => Ok(false),
            _ => Err(self.error("expected ',' or a closing bracket")),
        }
    }

    /// A string token from its opening quote, decoded.
    fn string(&mut self) -> Result<String, String> {
        let start = self.i;
        self.i += 1;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    let raw = self
                        .text
                        .get(start..self.i)
                        .ok_or_else(|| self.error("bad string"))?;
                    return serde_json::from_str(raw)
                        .map_err(|e| self.error(&format!("bad string ({e})")));
                }
                _ => self.i += 1,
            }
        }
        Err(self.error("unterminated string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/opt/bin/mcpulse";

    fn wrap(text: &str) -> Plan {
        plan(text, "f.json", Direction::Wrap, EXE).unwrap()
    }

    fn unwrap(text: &str) -> Plan {
        plan(text, "f.json", Direction::Unwrap, EXE).unwrap()
    }

    /// The command and args of the server at `path` after the plan.
    fn argv(plan: &Plan, path: &[&str]) -> Vec<String> {
        let v: Value = serde_json::from_str(&strip_jsonc(&plan.edited)).unwrap();
        let s = path.iter().fold(&v, |v, k| &v[k]);
        let mut out = vec![s["command"].as_str().unwrap().to_owned()];
        for a in s["args"].as_array().into_iter().flatten() {
            out.push(a.as_str().unwrap().to_owned());
        }
        out
    }

    /// Wrapping gives the expected argv, wrapping again changes nothing, and unwrapping gives
    /// back the original bytes.
    fn round_trip(text: &str, server: &[&str], original: &[&str]) {
        let w = wrap(text);
        assert!(w.is_change(), "{text}");
        let mut expected = vec![EXE, "supervise", "--"];
        expected.extend(original);
        assert_eq!(argv(&w, server), expected, "{}", w.edited);
        let again = wrap(&w.edited);
        assert!(!again.is_change(), "{}", again.edited);
        assert_eq!(again.edited, w.edited);
        let u = unwrap(&w.edited);
        assert_eq!(u.edited, text, "wrapped:\n{}", w.edited);
        assert!(!unwrap(text).is_change());
    }

    #[test]
    fn claude_desktop_and_cursor() {
        round_trip(
            "{\n  \"mcpServers\": {\n    \"files\": {\n      \"command\": \"npx\",\n      \"args\": [\n        \"-y\",\n        \"@modelcontextprotocol/server-filesystem\"\n      ],\n      \"env\": {\"K\": \"v\"}\n    }\n  },\n  \"globalShortcut\": \"\"\n}\n",
            &["mcpServers", "files"],
            &["npx", "-y", "@modelcontextprotocol/server-filesystem"],
        );
        // Cursor: one line, no args, `cwd`.
        round_trip(
            r#"{"mcpServers":{"t":{"command":"uvx","cwd":"/w"},"x":{"command":"a","args":[]}}}"#,
            &["mcpServers", "t"],
            &["uvx"],
        );
    }

    #[test]
    fn vscode_mcp_json_keeps_its_comments() {
        let text = "{\n  // my servers\n  \"servers\": {\n    \"time\": {\n      \"type\": \"stdio\", /* local */\n      \"command\": \"uvx\",\n      \"args\": [\"mcp-server-time\", /* tz */ \"--local-timezone=UTC\",],\n    },\n    \"gh\": {\"type\": \"http\", \"url\": \"https://api.example.com/mcp\"},\n  },\n  \"inputs\": [],\n}\n";
        round_trip(
            text,
            &["servers", "time"],
            &["uvx", "mcp-server-time", "--local-timezone=UTC"],
        );
        let w = wrap(text);
        for kept in [
            "// my servers",
            "/* local */",
            "/* tz */",
            "},\n  },\n  \"inputs\": [],\n}",
        ] {
            assert!(w.edited.contains(kept), "{kept} lost: {}", w.edited);
        }
    }

    #[test]
    fn vscode_settings_and_claude_code() {
        round_trip(
            r#"{"editor.fontSize": 14, "mcp": {"servers": {"a": {"command": "srv", "args": ["x"]}}}}"#,
            &["mcp", "servers", "a"],
            &["srv", "x"],
        );
        round_trip(
            r#"{"mcp.servers": {"a": {"command": "srv"}}}"#,
            &["mcp.servers", "a"],
            &["srv"],
        );
        let claude_code = r#"{"numStartups": 9, "mcpServers": {"top": {"type": "stdio", "command": "node", "args": ["s.js"], "env": {}}},
 "projects": {"/home/me/app": {"allowedTools": [], "mcpServers": {"p": {"type": "stdio", "command": "python3", "args": ["-m", "srv"]}}}}}"#;
        round_trip(claude_code, &["mcpServers", "top"], &["node", "s.js"]);
        let w = wrap(claude_code);
        assert_eq!(
            argv(&w, &["projects", "/home/me/app", "mcpServers", "p"]),
            [EXE, "supervise", "--", "python3", "-m", "srv"]
        );
        let names: Vec<(&str, &Outcome)> = w
            .changes
            .iter()
            .map(|c| (c.server.as_str(), &c.outcome))
            .collect();
        assert_eq!(
            names,
            [("top", &Outcome::Wrapped), ("p", &Outcome::Wrapped)]
        );
    }

    #[test]
    fn http_servers_and_odd_ones_are_left_alone() {
        let text = r#"{"mcpServers": {
  "h": {"url": "https://x.example/mcp", "headers": {"A": "b"}},
  "s": {"type": "sse", "url": "https://x.example/sse"},
  "w": {"serverUrl": "https://x.example/mcp"},
  "n": {"command": "srv", "args": [1]},
  "e": {"command": ""}
}}"#;
        let w = wrap(text);
        assert!(!w.is_change(), "{}", w.edited);
        assert_eq!(w.edited, text);
        let why: Vec<&Outcome> = w.changes.iter().map(|c| &c.outcome).collect();
        assert_eq!(
            why,
            [
                &Outcome::Unchanged("not a stdio server"),
                &Outcome::Unchanged("not a stdio server"),
                &Outcome::Unchanged("not a stdio server"),
                &Outcome::Unchanged("args are not all strings"),
                &Outcome::Unchanged("not a stdio server"),
            ]
        );
    }

    #[test]
    fn unwrap_leaves_alone_what_it_did_not_wrap() {
        // Options the user added between `supervise` and `--` go too; another program's
        // `supervise` is not ours.
        let text = r#"{"mcpServers": {
  "mine": {"command": "/usr/local/bin/mcpulse", "args": ["supervise", "--listen", "127.0.0.1:9478", "--", "npx", "srv"]},
  "other": {"command": "/usr/bin/runner", "args": ["supervise", "--", "npx"]},
  "plain": {"command": "npx", "args": ["srv"]}
}}"#;
        let u = unwrap(text);
        assert_eq!(argv(&u, &["mcpServers", "mine"]), ["npx", "srv"]);
        assert_eq!(
            argv(&u, &["mcpServers", "other"]),
            ["/usr/bin/runner", "supervise", "--", "npx"]
        );
        assert_eq!(argv(&u, &["mcpServers", "plain"]), ["npx", "srv"]);
        // A server wrapped by another mcpulse (another path) is recognised as wrapped.
        assert!(
            !wrap(text)
                .changes
                .iter()
                .any(|c| c.server == "mine" && c.outcome == Outcome::Wrapped)
        );
    }

    #[test]
    fn the_two_whitespace_cases_give_the_same_json() {
        for text in [
            r#"{"mcpServers": {"a": {"command": "x", "args": [ "y"]}}}"#,
            r#"{"mcpServers": {"a": {"command": "x", "args": []}}}"#,
        ] {
            let back = unwrap(&wrap(text).edited).edited;
            let v = |t: &str| -> Value { serde_json::from_str(t).unwrap() };
            let (a, b) = (v(text), v(&back));
            assert_eq!(
                a["mcpServers"]["a"]["command"],
                b["mcpServers"]["a"]["command"]
            );
            let args = |x: &Value| {
                x["mcpServers"]["a"]["args"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            };
            assert_eq!(args(&a), args(&b), "{back}");
        }
    }

    #[test]
    fn clear_errors() {
        let e = |t: &str| {
            plan(t, "f.json", Direction::Wrap, EXE)
                .unwrap_err()
                .to_string()
        };
        assert!(
            e("{\"mcpServers\": ").contains("f.json is not JSON"),
            "{}",
            e("{")
        );
        assert!(e("[]").contains("no \"mcpServers\", \"servers\" or \"mcp.servers\" object"));
        assert!(e(r#"{"other": {}}"#).contains("Claude Desktop, Cursor, VS Code or Claude Code"));
    }

    #[test]
    fn the_diff_is_inert_and_shows_only_the_change() {
        // A raw bidi override and a C1 control in a name and an argument: legal in JSON.
        let text = "{\"mcpServers\": {\n  \"evil\u{202e}\": {\"command\": \"x\u{9b}2J\"},\n  \"ok\": {\"command\": \"y\"}\n}}\n";
        let w = wrap(text);
        let d = diff(&w, "cfg\u{1b}]0;t\u{7}.json");
        assert!(!d.lines().any(|l| l.chars().any(text::is_escaped)), "{d:?}");
        assert!(
            d.contains("evil\\u{202e}") && d.contains("x\\u{9b}2J"),
            "{d}"
        );
        assert!(d.starts_with("--- cfg\\x1b]0;t\\x07.json\n+++ "), "{d}");
        assert!(
            d.contains("@@ -1,4 +1,4 @@\n {\"mcpServers\": {\n-  \"evil"),
            "{d}"
        );
        assert!(
            d.contains(&format!(
                "+  \"ok\": {{\"command\": \"{EXE}\", \"args\": [\"supervise\", \"--\", \"y\"]}}\n"
            )),
            "{d}"
        );
        // Far apart edits make two hunks, with the right line numbers on both sides.
        let mut long = String::from(
            "{\"mcpServers\": {\n  \"a\": {\n    \"command\": \"a\",\n    \"args\": [\n      \"1\"\n    ]\n  },\n",
        );
        for i in 0..20 {
            long.push_str(&format!("  \"h{i}\": {{\"url\": \"https://x/{i}\"}},\n"));
        }
        long.push_str("  \"z\": {\"command\": \"z\"}\n}}\n");
        let d = diff(&wrap(&long), "f");
        assert!(d.contains("@@ -1,7 +1,7 @@\n"), "{d}");
        assert!(d.contains("@@ -25,5 +25,5 @@\n   \"h17\""), "{d}");
    }
    /// Whatever the text (cut anywhere, a byte replaced by JSON punctuation), `plan` returns
    /// and never panics, and what it would write still parses: the span parser and the edits
    /// only ever cut at token boundaries.
    #[test]
    fn no_panic_on_damaged_configs() {
        let base = "{\n // c\n \"mcpServers\": {\"a\": {\"command\": \"x\\\"y\", \"args\": [\"1\", /* n */ \"2\",]},\n  \"b\": {\"command\": \"/opt/bin/mcpulse\", \"args\": [\"supervise\", \"--\", \"z\"]}, \"é\": {\"url\": \"u\"}}}";
        assert!(wrap(base).is_change() && unwrap(base).is_change());
        let mut texts: Vec<String> = (0..=base.len())
            .filter(|&i| base.is_char_boundary(i))
            .map(|i| base[..i].to_owned())
            .collect();
        for (i, _) in base.char_indices() {
            for c in ['"', '\\', '[', ']', '{', '}', ',', '/', '*', ':', ' '] {
                let mut t = base.to_owned();
                t.replace_range(
                    i..i + base[i..].chars().next().map_or(1, char::len_utf8),
                    &c.to_string(),
                );
                texts.push(t);
            }
        }
        for t in &texts {
            for d in [Direction::Wrap, Direction::Unwrap] {
                if let Ok(p) = plan(t, "f", d, EXE) {
                    assert!(
                        serde_json::from_str::<Value>(&strip_jsonc(&p.edited)).is_ok(),
                        "{t}"
                    );
                    let _ = diff(&p, "f");
                }
            }
        }
    }
}
