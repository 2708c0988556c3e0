//! Targets from the MCP client config files people already have, so that "monitor the servers
//! my editor uses" is one line: `import = ["~/.cursor/mcp.json"]` or `mcpulse monitor --import`.
//!
//! Where each client keeps its servers is `mcpulse_wire::clientconfig` (shared with
//! `mcpulse supervise --wrap`): `{"mcpServers": {name: server}}` (Claude Desktop, Cursor, Claude
//! Code's `.mcp.json` and, per project too, `~/.claude.json`, Windsurf), `{"servers": {…}}` (VS
//! Code's `mcp.json`) and `mcp.servers` (VS Code's `settings.json`). A server is
//! `{"command", "args", "env"}` (stdio) or `{"url", "headers"}` (HTTP; `type` may say `http`,
//! `streamable-http` or `sse`). VS Code files are JSON with comments and trailing commas, and use
//! `${env:VAR}`; both `${VAR}` and `${env:VAR}` are read from the environment.
//!
//! A file that cannot be read, or is not such a config, is an error. A server in it that cannot
//! be monitored (a name, header or URL the config file would refuse, by the same checks; a
//! `${input:…}` only the editor can fill in; an unset variable) is left out with a warning that
//! names the file, the server and why: one editor-only server should not stop the monitoring of
//! the others, nor page as `down` at run time.

use super::check::{
    CheckError, check_header_name, check_header_value, check_name, check_url, target_from,
};
use super::types::{Defaults, Endpoint, TargetConfig};
pub use mcpulse_wire::clientconfig::strip_jsonc;
use mcpulse_wire::clientconfig::{is_disabled, server_tables};
use mcpulse_wire::env::Expanded;
use mcpulse_wire::redact::Secrets;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a client config file could not be imported at all (a server in it that cannot be
/// monitored is not an error: see [`LeftOut`]). The messages name the file and are shown as
/// they are, so their wording is fixed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("import {}: cannot read it: {error}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("import {file}: not JSON: {error}")]
    NotJson {
        file: String,
        #[source]
        error: serde_json::Error,
    },
    #[error("import {file}: no \"mcpServers\", \"servers\" or \"mcp.servers\" object")]
    NoServers { file: String },
    #[error(
        "import {}: imported targets take the defaults, and the default timeout {timeout:?} must be below the interval {interval:?}",
        .path.display()
    )]
    TimeoutNotBelowInterval {
        path: PathBuf,
        timeout: Duration,
        interval: Duration,
    },
}

/// Why one server of a client config is left out (the warning's reason).
#[derive(Debug, thiserror::Error)]
enum LeftOut {
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Expand(#[from] EditorExpandError),
    #[error("\"command\" is empty")]
    EmptyCommand,
    #[error("args must be strings")]
    ArgNotString,
    #[error("has neither \"url\" nor \"command\"")]
    NoEndpoint,
    #[error("\"{key}\" must be an object of strings")]
    NotObject { key: String },
    #[error("{key} {name:?} must be a string")]
    NotString { key: String, name: String },
    #[error("header {name:?}: {error}")]
    HeaderValue {
        name: String,
        #[source]
        error: EditorExpandError,
    },
}

/// A [`LeftOut`] with the values expansion read from the environment, which its message must
/// not show (an expanded URL can carry a token in its path): `Display` and `Debug` hide them.
struct Skipped {
    reason: LeftOut,
    secrets: Secrets,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.secrets.hide(&self.reason.to_string()))
    }
}

/// Why `${…}` in a client config could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum EditorExpandError {
    #[error("unclosed ${{ in {value:?}")]
    Unclosed { value: String },
    #[error(
        "uses ${{{var}}}, which only the editor can fill in; define this target in mcpulse.toml instead"
    )]
    EditorOnly { var: String },
    #[error("the environment variable {name} is not set")]
    Unset { name: String },
}

/// What one client config file gives.
#[derive(Debug, Default)]
pub struct Imported {
    pub targets: Vec<TargetConfig>,
    /// One line per server left out: the file, the server and why.
    pub skipped: Vec<String>,
}

/// Reads one client config file.
pub fn read(
    path: &Path,
    defaults: &Defaults,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Imported, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|error| ImportError::Read {
        path: path.to_owned(),
        error,
    })?;
    parse(&text, &path.display().to_string(), defaults, env)
}

/// The targets being assembled (the config file's, then each import's), with their names as a
/// set so that adding an import costs the same for a large fleet as for a small one.
pub(crate) struct Fleet<'a> {
    pub targets: &'a mut Vec<TargetConfig>,
    pub names: &'a mut HashSet<String>,
    pub warnings: &'a mut Vec<String>,
}

impl Fleet<'_> {
    /// Adds the servers of the client config at `path`. A name already taken keeps its first
    /// definition: the config file's own wins over an import, an earlier import over a later.
    pub fn import(
        &mut self,
        path: &Path,
        defaults: &Defaults,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ImportError> {
        let imported = read(path, defaults, env)?;
        if !imported.targets.is_empty() && defaults.timeout >= defaults.interval {
            return Err(ImportError::TimeoutNotBelowInterval {
                path: path.to_owned(),
                timeout: defaults.timeout,
                interval: defaults.interval,
            });
        }
        self.warnings.extend(imported.skipped);
        for t in imported.targets {
            if self.names.insert(t.name.clone()) {
                self.targets.push(t);
            }
        }
        Ok(())
    }
}

pub fn parse(
    text: &str,
    source: &str,
    defaults: &Defaults,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Imported, ImportError> {
    let json: Value =
        serde_json::from_str(&strip_jsonc(text)).map_err(|error| ImportError::NotJson {
            file: source.to_owned(),
            error,
        })?;
    let tables = server_tables(&json);
    if tables.is_empty() {
        return Err(ImportError::NoServers {
            file: source.to_owned(),
        });
    }
    let mut out = Imported::default();
    // A name in two tables (Claude Code's projects) keeps its first definition, as across files.
    let servers = tables.iter().filter_map(|t| t.get(&json)).flatten();
    let mut seen = HashSet::new();
    for (name, s) in servers {
        if is_disabled(s) || !seen.insert(name) {
            continue;
        }
        match server(name, s, source, defaults, env) {
            Ok(t) => out.targets.push(t),
            Err(m) => out
                .skipped
                .push(format!("import {source}: server {name:?} left out: {m}")),
        }
    }
    Ok(out)
}

/// One server, validated by the same checks as a config file's targets.
fn server(
    name: &str,
    s: &Value,
    source: &str,
    defaults: &Defaults,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TargetConfig, Skipped> {
    // What expansion read from the environment is secret wherever it lands (url, args), the
    // message of a server left out included.
    let secrets = std::cell::RefCell::new(Secrets::default());
    check_name(name)
        .map_err(LeftOut::from)
        .and_then(|()| server_with(name, s, source, defaults, env, &secrets))
        .map_err(|reason| Skipped {
            reason,
            secrets: secrets.take(),
        })
}

fn server_with(
    name: &str,
    s: &Value,
    source: &str,
    defaults: &Defaults,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &std::cell::RefCell<Secrets>,
) -> Result<TargetConfig, LeftOut> {
    let expand_with =
        |v: &str, env: &dyn Fn(&str) -> Option<String>| -> Result<String, EditorExpandError> {
            let e = expand_editor(v, env)?;
            secrets.borrow_mut().extend(&e.secrets);
            Ok(e.value)
        };
    let expand = |v: &str| expand_with(v, env);
    // The server's own `env` block first: a launcher such as mcp-remote expands `${VAR}` in
    // its arguments from the environment it is given (`"args": ["--header",
    // "Authorization:${AUTH_HEADER}"], "env": {"AUTH_HEADER": "Bearer …"}`).
    let mut envs = BTreeMap::new();
    for (k, v) in strings(s, "env")? {
        envs.insert(k.clone(), expand(v)?);
    }
    let own = |k: &str| envs.get(k).cloned().or_else(|| env(k));
    let endpoint = if let Some(url) = s
        .get("url")
        .or_else(|| s.get("serverUrl"))
        .and_then(Value::as_str)
    {
        let url = expand(url)?;
        check_url(&url)?;
        Endpoint::Url(url)
    } else if let Some(cmd) = s.get("command").and_then(Value::as_str) {
        if cmd.is_empty() {
            return Err(LeftOut::EmptyCommand);
        }
        let mut argv = vec![expand_with(cmd, &own)?];
        for a in s
            .get("args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            argv.push(expand_with(a.as_str().ok_or(LeftOut::ArgNotString)?, &own)?);
        }
        Endpoint::Command {
            argv,
            env: envs.clone(),
        }
    } else {
        return Err(LeftOut::NoEndpoint);
    };
    let mut headers = Vec::new();
    for (k, v) in strings(s, "headers")? {
        check_header_name(k)?;
        let v = expand(v).map_err(|error| LeftOut::HeaderValue {
            name: k.clone(),
            error,
        })?;
        check_header_value(k, &v)?;
        headers.push((k.clone(), v));
    }
    let mut target = target_from(
        name.to_owned(),
        endpoint,
        headers,
        defaults,
        BTreeMap::from([("imported_from".to_owned(), source.to_owned())]),
        source.to_owned(),
    );
    target.secrets.extend(&secrets.borrow());
    Ok(target)
}

/// The string-valued object `key` of a server (`env`, `headers`); absent is empty.
fn strings<'a>(s: &'a Value, key: &str) -> Result<Vec<(&'a String, &'a str)>, LeftOut> {
    let map = match s.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(LeftOut::NotObject {
                key: key.to_owned(),
            });
        }
    };
    map.iter()
        .map(|(k, v)| {
            v.as_str()
                .map(|v| (k, v))
                .ok_or_else(|| LeftOut::NotString {
                    key: key.to_owned(),
                    name: k.clone(),
                })
        })
        .collect()
}

/// `${VAR}` and `${env:VAR}` from the environment; `${input:…}` and other editor variables are
/// refused with a message.
fn expand_editor(
    v: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Expanded, EditorExpandError> {
    let mut secrets = Secrets::default();
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or_else(|| EditorExpandError::Unclosed {
            value: v.to_owned(),
        })?;
        let var = &after[..end];
        let name = var.strip_prefix("env:").unwrap_or(var);
        if name.contains(':') {
            return Err(EditorExpandError::EditorOnly {
                var: var.to_owned(),
            });
        }
        let val = env(name).ok_or_else(|| EditorExpandError::Unset {
            name: name.to_owned(),
        })?;
        out.push_str(&val);
        secrets.add(&val);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Expanded {
        value: out,
        secrets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "GH_TOKEN" => Some("ghp".to_owned()),
            "EVIL" => Some("x\r\nX-Injected: 1".to_owned()),
            _ => None,
        }
    }

    /// The typed errors print exactly what the `String` errors they replaced printed.
    #[test]
    fn messages_are_unchanged() {
        let e = import("[]").unwrap_err();
        assert!(matches!(e, ImportError::NoServers { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "import mcp.json: no \"mcpServers\", \"servers\" or \"mcp.servers\" object"
        );
        let e = import("{").unwrap_err();
        assert!(
            e.to_string().starts_with("import mcp.json: not JSON: EOF"),
            "{e}"
        );
        let e = read(
            Path::new("/nonexistent/mcp.json"),
            &Defaults::default(),
            &env,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("import /nonexistent/mcp.json: cannot read it: "),
            "{e}"
        );
        let e = ImportError::TimeoutNotBelowInterval {
            path: "/x/mcp.json".into(),
            timeout: Duration::from_secs(30),
            interval: Duration::from_secs(30),
        };
        assert_eq!(
            e.to_string(),
            "import /x/mcp.json: imported targets take the defaults, and the default timeout 30s must be below the interval 30s"
        );
        let skipped = import(
            r#"{"mcpServers": {
                "a": {"command": ""},
                "b": {"command": "x", "args": [1]},
                "c": {},
                "d": {"command": "x", "env": []},
                "e": {"command": "x", "env": {"K": 1}},
                "f": {"url": "http://h/", "headers": {"X-A": "${input:t}"}},
                "g": {"url": "http://h/${GH_TOKEN", "headers": {}},
                "h": {"url": "http://h/${NOPE}"},
                "i": {"url": "http://h/", "headers": {"X-A": "${EVIL}"}}
            }}"#,
        )
        .unwrap()
        .skipped;
        let why = |n: &str| {
            let head = format!("import mcp.json: server {n:?} left out: ");
            skipped
                .iter()
                .find_map(|w| w.strip_prefix(&head))
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(why("a"), "\"command\" is empty");
        assert_eq!(why("b"), "args must be strings");
        assert_eq!(why("c"), "has neither \"url\" nor \"command\"");
        assert_eq!(why("d"), "\"env\" must be an object of strings");
        assert_eq!(why("e"), "env \"K\" must be a string");
        assert_eq!(
            why("f"),
            "header \"X-A\": uses ${input:t}, which only the editor can fill in; define this target in mcpulse.toml instead"
        );
        assert_eq!(why("g"), "unclosed ${ in \"http://h/${GH_TOKEN\"");
        assert_eq!(why("h"), "the environment variable NOPE is not set");
        assert_eq!(why("i"), "header \"X-A\": the value contains a line break");
    }

    fn import(text: &str) -> Result<Imported, ImportError> {
        parse(text, "mcp.json", &Defaults::default(), &env)
    }

    #[test]
    fn claude_desktop_and_cursor() {
        let i = parse(
            r#"{"mcpServers": {
                "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"], "env": {"TOKEN": "${GH_TOKEN}"}},
                "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}},
                "off": {"command": "x", "disabled": true}
            }}"#,
            "claude_desktop_config.json",
            &Defaults::default(),
            &env,
        )
        .unwrap();
        let t = &i.targets;
        assert_eq!(t.len(), 2);
        assert!(i.skipped.is_empty(), "{:?}", i.skipped);
        assert!(
            matches!(&t[0].endpoint, Endpoint::Command { argv, env } if argv[0] == "npx" && env["TOKEN"] == "ghp")
        );
        assert_eq!(
            t[1].headers,
            vec![("Authorization".to_owned(), "Bearer ghp".to_owned())]
        );
        assert_eq!(t[1].labels["imported_from"], "claude_desktop_config.json");
    }

    /// Claude Code's `~/.claude.json`: top-level servers and each project's; a name in two
    /// projects keeps its first definition. VS Code's settings.json: `mcp.servers`.
    #[test]
    fn claude_code_projects_and_vscode_settings() {
        let i = import(
            r#"{"mcpServers": {"top": {"command": "a"}},
                "projects": {"/p1": {"mcpServers": {"p": {"command": "b"}, "top": {"command": "c"}}},
                             "/p2": {"mcpServers": {"p": {"command": "d"}}}}}"#,
        )
        .unwrap();
        let argv0 = |t: &TargetConfig| match &t.endpoint {
            Endpoint::Command { argv, .. } => argv[0].clone(),
            Endpoint::Url(u) | Endpoint::Health(u) => u.clone(),
        };
        let got: Vec<(&str, String)> = i
            .targets
            .iter()
            .map(|t| (t.name.as_str(), argv0(t)))
            .collect();
        assert_eq!(got, [("top", "a".to_owned()), ("p", "b".to_owned())]);
        let i = import(r#"{"editor.tabSize": 2, "mcp": {"servers": {"s": {"command": "e"}}}}"#)
            .unwrap();
        assert_eq!(i.targets[0].name, "s");
    }

    #[test]
    fn vscode_with_comments() {
        let i = import(
            "{\n // my servers\n \"servers\": {\n  \"gh\": {\"type\": \"http\", \"url\": \"https://api.example.com/mcp\", /* note */ \"headers\": {\"X\": \"${env:GH_TOKEN}\"},},\n },\n \"inputs\": [],\n}",
        )
        .unwrap();
        assert_eq!(i.targets[0].headers[0].1, "ghp");
        assert!(import("[]").is_err());
        assert!(import("{\"mcpServers\": 1}").is_err());
    }

    /// Issue #15: a trailing comma followed by a comment, as VS Code writes and accepts.
    #[test]
    fn vscode_trailing_comma_before_a_comment() {
        let i = import(
            "{\"servers\": {\n \"a\": {\"url\": \"https://a.example/mcp\"}, // the last one\n \"b\": {\"url\": \"https://b.example/mcp\", /* note */},\n /* end */\n},\n}",
        )
        .unwrap();
        let names: Vec<&str> = i.targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    /// Issue #14 item 7 and #15: a server the config file would refuse is left out with a
    /// warning naming the file, the server and why; the others are still imported.
    #[test]
    fn a_launchers_args_expand_from_its_own_env_block_and_stay_secret() {
        let t = parse(
            r#"{"mcpServers": {"remote": {"command": "npx",
                "args": ["mcp-remote", "https://x.example/mcp", "--header", "Authorization:${AUTH_HEADER}"],
                "env": {"AUTH_HEADER": "Bearer ${GH_TOKEN}-s3cr3t"}}}}"#,
            "claude_desktop_config.json",
            &Defaults::default(),
            &env,
        )
        .unwrap()
        .targets;
        let Endpoint::Command { argv, .. } = &t[0].endpoint else {
            panic!("{:?}", t[0].endpoint)
        };
        assert_eq!(argv[4], "Authorization:Bearer ghp-s3cr3t");
        assert!(!format!("{:?}", t[0]).contains("s3cr3t"), "{:?}", t[0]);
    }

    #[test]
    fn a_server_left_out_is_named_without_its_secrets() {
        let i = import(
            r#"{"mcpServers": {
                "spaced": {"url": "http://x.example/a b/${GH_TOKEN}"},
                "ftp": {"url": "ftp://x.example/ok/${env:GH_TOKEN}-tail"}
            }}"#,
        )
        .unwrap();
        assert!(i.targets.is_empty());
        assert_eq!(i.skipped.len(), 2, "{:?}", i.skipped);
        for w in &i.skipped {
            assert!(!w.contains("ghp"), "{w}");
            assert!(w.contains("<redacted>"), "{w}");
        }
    }

    #[test]
    fn invalid_servers_are_left_out_with_a_warning() {
        let i = import(
            r#"{"mcpServers": {
                "": {"url": "https://x.example/mcp"},
                " ": {"url": "https://x.example/mcp"},
                "red\u001b[31m": {"url": "https://x.example/mcp"},
                "two\nlines": {"url": "https://x.example/mcp"},
                "rtl\u202e": {"url": "https://x.example/mcp"},
                "spaced header": {"url": "https://x.example/mcp", "headers": {"X Key": "v"}},
                "crlf": {"url": "https://x.example/mcp", "headers": {"X": "a\r\nX-Injected: 1"}},
                "crlf-env": {"url": "https://x.example/mcp", "headers": {"X": "${EVIL}"}},
                "creds": {"url": "https://user:pw@x.example/mcp"},
                "editor": {"url": "https://x.example/mcp", "headers": {"K": "${input:key}"}},
                "unset": {"command": "srv", "env": {"K": "${NOPE}"}},
                "neither": {},
                "good": {"url": "https://x.example/mcp"}
            }}"#,
        )
        .unwrap();
        let names: Vec<&str> = i.targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["good"]);
        assert_eq!(i.skipped.len(), 12, "{:#?}", i.skipped);
        for (server, reason) in [
            ("\"\"", "non-empty name"),
            ("\" \"", "non-empty name"),
            ("\"red\\u{1b}[31m\"", "U+001B"),
            ("\"two\\nlines\"", "U+000A"),
            ("\"rtl\\u{202e}\"", "U+202E"),
            ("\"spaced header\"", "not a valid HTTP header name"),
            ("\"crlf\"", "line break"),
            ("\"crlf-env\"", "line break"),
            ("\"creds\"", "credentials in the URL"),
            ("\"editor\"", "only the editor can fill in"),
            ("\"unset\"", "NOPE is not set"),
            ("\"neither\"", "neither \"url\" nor \"command\""),
        ] {
            let prefix = format!("import mcp.json: server {server} left out: ");
            assert!(
                i.skipped
                    .iter()
                    .any(|w| w.starts_with(&prefix) && w.contains(reason)),
                "{prefix}…{reason} not in {:#?}",
                i.skipped
            );
        }
        // The password never reaches a warning.
        assert!(
            !i.skipped.iter().any(|w| w.contains("pw@")),
            "{:?}",
            i.skipped
        );
    }

    #[test]
    fn what_came_from_the_environment_is_secret() {
        let t = parse(
            r#"{"servers": {
                "u": {"url": "http://h/ok/${env:GH_TOKEN}/x?q=${GH_TOKEN}"},
                "c": {"command": "srv", "args": ["--root", "/srv/${GH_TOKEN}"], "env": {"K": "literal-value-9", "D": "1"}}
            }}"#,
            "mcp.json",
            &Defaults::default(),
            &env,
        )
        .unwrap()
        .targets;
        assert!(matches!(&t[0].endpoint, Endpoint::Command { .. }));
        let shown = format!("{:?}", t[0]);
        assert!(shown.contains("srv --root /srv/<redacted>"), "{shown}");
        assert!(
            !shown.contains("ghp") && !shown.contains("literal-value-9"),
            "{shown}"
        );
        assert_eq!(t[0].secrets.hide("literal-value-9 1"), "<redacted> 1");
        let shown = format!("{:?}", t[1]);
        assert!(
            shown.contains("http://h/ok/<redacted>/x?q=<redacted>"),
            "{shown}"
        );
        assert!(!shown.contains("ghp"), "{shown}");
    }
}
