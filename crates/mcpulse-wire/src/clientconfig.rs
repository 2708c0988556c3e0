//! Where MCP clients keep their servers: the format knowledge shared by the monitor's import
//! (`mcpulse monitor --import`) and the supervisor's `--wrap` / `--unwrap`, so that a client
//! layout learnt once is both monitored and wrapped.
//!
//! The files and where their servers live ([`server_tables`]):
//! - Claude Desktop, Cursor, Windsurf, Claude Code's project `.mcp.json`: `mcpServers`;
//! - VS Code's `.vscode/mcp.json`: `servers`;
//! - VS Code's `settings.json`: `mcp.servers` (nested, or as the flat key `"mcp.servers"`);
//! - Claude Code's `~/.claude.json`: `mcpServers` at the top, and `projects.<path>.mcpServers`
//!   for each project.
//!
//! A server is stdio ([`is_stdio`]) when it has a `command` and no `url` / `serverUrl`, and its
//! `type`, if any, is `stdio`. VS Code's files are JSON with comments and trailing commas
//! ([`strip_jsonc`] turns them into JSON). This module reads; it owns neither the validation of a
//! monitor target nor the rewriting of a file.

use serde_json::Value;

/// One object of servers in a client config: the keys from the top of the file down to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTable {
    pub path: Vec<String>,
}

impl ServerTable {
    fn new(path: &[&str]) -> Self {
        ServerTable {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// The table in `json`, if it is there and an object.
    pub fn get<'a>(&self, json: &'a Value) -> Option<&'a serde_json::Map<String, Value>> {
        let mut v = json;
        for k in &self.path {
            v = v.get(k)?;
        }
        v.as_object()
    }

    /// `mcpServers`, `projects › /home/me/app › mcpServers`: for messages (the keys may come
    /// from the file: make the result inert before printing it).
    pub fn describe(&self) -> String {
        self.path.join(" › ")
    }
}

/// Every object of servers in a client config, in file order of kind: the top-level
/// `mcpServers`, `servers`, `mcp.servers`, then each Claude Code project's. Empty when `json` is
/// no client config of a kind known here.
pub fn server_tables(json: &Value) -> Vec<ServerTable> {
    let mut out = Vec::new();
    for path in [
        &["mcpServers"][..],
        &["servers"],
        &["mcp", "servers"],
        &["mcp.servers"],
    ] {
        let t = ServerTable::new(path);
        if t.get(json).is_some() {
            out.push(t);
        }
    }
    if let Some(projects) = json.get("projects").and_then(Value::as_object) {
        for (dir, p) in projects {
            if p.get("mcpServers").and_then(Value::as_object).is_some() {
                out.push(ServerTable::new(&["projects", dir, "mcpServers"]));
            }
        }
    }
    out
}

/// Whether a server is started by the client over stdio (and so can be supervised): a
/// non-empty `command`, no `url` or `serverUrl`, and no `type` other than `stdio`.
pub fn is_stdio(server: &Value) -> bool {
    let command = server
        .get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    let url = server.get("url").is_some() || server.get("serverUrl").is_some();
    let typ = server.get("type").and_then(Value::as_str);
    command && !url && matches!(typ, None | Some("stdio"))
}

/// Whether the client skips this server (`"disabled": true`, as Claude Desktop and Cursor allow).
pub fn is_disabled(server: &Value) -> bool {
    server.get("disabled").and_then(Value::as_bool) == Some(true)
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as VS Code writes it, to JSON.
pub fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 2;
                continue;
            }
            if c == '"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match (c, b.get(i + 1)) {
            ('"', _) => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            ('/', Some('/')) => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            (',', _) => {
                // A trailing comma: the next significant character (past white space and
                // comments, as in `"a": 1, // note`) closes the container.
                let mut j = i + 1;
                loop {
                    match (b.get(j), b.get(j + 1)) {
                        (Some(c), _) if c.is_whitespace() => j += 1,
                        (Some('/'), Some('/')) => {
                            while j < b.len() && b[j] != '\n' {
                                j += 1;
                            }
                        }
                        (Some('/'), Some('*')) => {
                            j += 2;
                            while j + 1 < b.len() && !(b[j] == '*' && b[j + 1] == '/') {
                                j += 1;
                            }
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if !matches!(b.get(j), Some('}') | Some(']')) {
                    out.push(c);
                }
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(text: &str) -> Vec<String> {
        let json: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        server_tables(&json)
            .iter()
            .map(ServerTable::describe)
            .collect()
    }

    #[test]
    fn every_client_layout() {
        assert_eq!(tables(r#"{"mcpServers": {}}"#), ["mcpServers"]);
        assert_eq!(tables(r#"{"servers": {}, "inputs": []}"#), ["servers"]);
        assert_eq!(
            tables(r#"{"editor.x": 1, "mcp": {"servers": {}}}"#),
            ["mcp › servers"]
        );
        assert_eq!(tables(r#"{"mcp.servers": {}}"#), ["mcp.servers"]);
        assert_eq!(
            tables(r#"{"mcpServers": {}, "projects": {"/a": {"mcpServers": {}}, "/b": {"x": 1}}}"#),
            ["mcpServers", "projects › /a › mcpServers"]
        );
        assert!(tables(r#"{"mcpServers": 1, "other": {}}"#).is_empty());
        assert!(server_tables(&Value::Null).is_empty());
    }

    #[test]
    fn which_servers_are_stdio() {
        let v = |s: &str| -> Value { serde_json::from_str(s).unwrap() };
        assert!(is_stdio(&v(r#"{"command": "npx", "args": ["x"]}"#)));
        assert!(is_stdio(&v(r#"{"type": "stdio", "command": "uvx"}"#)));
        assert!(!is_stdio(&v(r#"{"command": ""}"#)));
        assert!(!is_stdio(&v(r#"{"url": "https://x/mcp"}"#)));
        assert!(!is_stdio(&v(r#"{"type": "http", "command": "x"}"#)));
        assert!(!is_stdio(&v(
            r#"{"command": "x", "serverUrl": "https://x"}"#
        )));
        assert!(is_disabled(&v(r#"{"command": "x", "disabled": true}"#)));
    }

    #[test]
    fn jsonc_keeps_strings() {
        assert_eq!(
            strip_jsonc(r#"{"a": "http://x // not a comment", "b": [1,2,],}"#),
            r#"{"a": "http://x // not a comment", "b": [1,2]}"#
        );
    }
}
