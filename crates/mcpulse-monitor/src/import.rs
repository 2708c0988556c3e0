//! Targets from the MCP client config files people already have, so that "monitor the servers
//! my editor uses" is one line: `import = ["~/.cursor/mcp.json"]` or `mcpulse monitor --import`.
//!
//! Two shapes exist: `{"mcpServers": {name: server}}` (Claude Desktop, Cursor, Claude Code's
//! `.mcp.json`, Windsurf) and `{"servers": {name: server}}` (VS Code's `mcp.json`). A server is
//! `{"command", "args", "env"}` (stdio) or `{"url", "headers"}` (HTTP; `type` may say `http`,
//! `streamable-http` or `sse`). VS Code files are JSON with comments and trailing commas, and use
//! `${env:VAR}`; both `${VAR}` and `${env:VAR}` are read from the environment. A server needing
//! `${input:…}` (a prompt in the editor) cannot be monitored unattended and is reported.

use crate::config::{Defaults, Endpoint, TargetConfig, target_from};
use mcpulse_wire::env::Expanded;
use mcpulse_wire::redact::Secrets;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads one client config file into targets.
pub fn read(
    path: &Path,
    defaults: &Defaults,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<TargetConfig>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("import {}: cannot read it: {e}", path.display()))?;
    parse(&text, &path.display().to_string(), defaults, env)
}

pub fn parse(
    text: &str,
    source: &str,
    defaults: &Defaults,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<TargetConfig>, String> {
    let json: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|e| format!("import {source}: not JSON: {e}"))?;
    let servers = json
        .get("mcpServers")
        .or_else(|| json.get("servers"))
        .and_then(Value::as_object)
        .ok_or_else(|| format!("import {source}: no \"mcpServers\" or \"servers\" object"))?;
    let mut out = Vec::new();
    for (name, s) in servers {
        let at = |m: String| format!("import {source}: server {name:?}: {m}");
        if s.get("disabled").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        // What expansion read from the environment is secret wherever it lands (url, args).
        let mut secrets = Secrets::default();
        let mut expand = |v: &str| {
            let e = expand_editor(v, env).map_err(&at)?;
            secrets.extend(&e.secrets);
            Ok::<_, String>(e.value)
        };
        let strings = |v: Option<&Value>| -> BTreeMap<String, String> {
            v.and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let endpoint = if let Some(url) = s
            .get("url")
            .or_else(|| s.get("serverUrl"))
            .and_then(Value::as_str)
        {
            Endpoint::Url(expand(url)?)
        } else if let Some(cmd) = s.get("command").and_then(Value::as_str) {
            let mut argv = vec![expand(cmd)?];
            for a in s
                .get("args")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                argv.push(expand(
                    a.as_str()
                        .ok_or_else(|| at("args must be strings".into()))?,
                )?);
            }
            let mut envs = BTreeMap::new();
            for (k, v) in strings(s.get("env")) {
                envs.insert(k, expand(&v)?);
            }
            Endpoint::Command { argv, env: envs }
        } else {
            return Err(at("has neither \"url\" nor \"command\"".into()));
        };
        let mut headers = Vec::new();
        for (k, v) in strings(s.get("headers")) {
            headers.push((k, expand(&v)?));
        }
        let mut target = target_from(
            name.clone(),
            endpoint,
            headers,
            defaults,
            BTreeMap::from([("imported_from".to_owned(), source.to_owned())]),
            source.to_owned(),
        );
        target.secrets.extend(&secrets);
        out.push(target);
    }
    Ok(out)
}

/// `${VAR}` and `${env:VAR}` from the environment; `${input:…}` and other editor variables are
/// refused with a message.
fn expand_editor(v: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Expanded, String> {
    let mut secrets = Secrets::default();
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {v:?}"))?;
        let var = &after[..end];
        let name = var.strip_prefix("env:").unwrap_or(var);
        if name.contains(':') {
            return Err(format!(
                "uses ${{{var}}}, which only the editor can fill in; define this target in mcpulse.toml instead"
            ));
        }
        let val = env(name).ok_or_else(|| format!("the environment variable {name} is not set"))?;
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
                // A trailing comma: the next significant character closes the container.
                let mut j = i + 1;
                while j < b.len() && b[j].is_whitespace() {
                    j += 1;
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

    fn env(k: &str) -> Option<String> {
        (k == "GH_TOKEN").then(|| "ghp".to_owned())
    }

    #[test]
    fn claude_desktop_and_cursor() {
        let t = parse(
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
        assert_eq!(t.len(), 2);
        assert!(
            matches!(&t[0].endpoint, Endpoint::Command { argv, env } if argv[0] == "npx" && env["TOKEN"] == "ghp")
        );
        assert_eq!(
            t[1].headers,
            vec![("Authorization".to_owned(), "Bearer ghp".to_owned())]
        );
        assert_eq!(t[1].labels["imported_from"], "claude_desktop_config.json");
    }

    #[test]
    fn vscode_with_comments() {
        let t = parse(
            "{\n // my servers\n \"servers\": {\n  \"gh\": {\"type\": \"http\", \"url\": \"https://api.example.com/mcp\", /* note */ \"headers\": {\"X\": \"${env:GH_TOKEN}\"},},\n },\n \"inputs\": [],\n}",
            "mcp.json",
            &Defaults::default(),
            &env,
        )
        .unwrap();
        assert_eq!(t[0].headers[0].1, "ghp");
        let e = parse(
            r#"{"servers": {"a": {"url": "https://x", "headers": {"K": "${input:key}"}}}}"#,
            "mcp.json",
            &Defaults::default(),
            &env,
        )
        .unwrap_err();
        assert!(e.contains("only the editor can fill in"), "{e}");
        assert!(parse("[]", "x.json", &Defaults::default(), &env).is_err());
        assert!(
            parse(
                r#"{"mcpServers": {"a": {}}}"#,
                "x.json",
                &Defaults::default(),
                &env
            )
            .is_err()
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
        .unwrap();
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

    #[test]
    fn jsonc_keeps_strings() {
        assert_eq!(
            strip_jsonc(r#"{"a": "http://x // not a comment", "b": [1,2,],}"#),
            r#"{"a": "http://x // not a comment", "b": [1,2]}"#
        );
    }
}
