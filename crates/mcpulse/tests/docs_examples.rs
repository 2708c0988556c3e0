//! Every config example in the docs is a test: each fenced `toml` block in README.md and
//! docs/*.md is written to a file and checked with `mcpulse check-config`, with the environment
//! variables it names set, and the client configs it imports made (under a temporary HOME).
//! A docs example that no longer parses fails here, not on a newcomer's machine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files whose examples are checked.
fn docs() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    files.extend(more);
    files
}

/// The fenced blocks of one language in a Markdown text, with the line each starts on.
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```")
                    && info.trim() == lang
                {
                    open = Some((n + 1, String::new(), indent));
                }
            }
            Some((start, body, ind)) => {
                if trimmed.starts_with("```") {
                    out.push((*start, std::mem::take(body)));
                    open = None;
                } else {
                    body.push_str(line.get(*ind..).unwrap_or(line.trim_start()));
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// `${NAME}` and `${env:NAME}` references in a text.
fn env_refs(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find('}') else { break };
        let name = rest[..end].trim_start_matches("env:");
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.push(name.to_owned());
        }
        rest = &rest[end..];
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_toml_example_in_the_docs_passes_check_config() {
    let tmp = std::env::temp_dir().join(format!("mcpulse-docs-examples-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut checked = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (line, body) in blocks(&text, "toml") {
            let name = format!("{}-{line}.toml", doc.file_stem().unwrap().to_string_lossy());
            let file = tmp.join(&name);
            std::fs::write(&file, &body).unwrap();
            // The client configs an example imports, made under the temporary HOME.
            for path in imports(&body) {
                let path = match path.strip_prefix("~/") {
                    Some(rest) => home.join(rest),
                    None => tmp.join(path),
                };
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(
                    &path,
                    r#"{"mcpServers": {"example": {"command": "npx", "args": ["-y", "example-server"]}}}"#,
                )
                .unwrap();
            }
            let mut cmd = Command::new(BIN);
            cmd.arg("check-config")
                .arg(&file)
                .env("HOME", &home)
                .env("NO_COLOR", "1");
            for var in env_refs(&body) {
                // A variable that holds a URL (a Slack webhook) gets one: sink URLs are
                // checked when the config is read.
                let value = if var.ends_with("_URL") {
                    format!("https://hooks.example.com/{}", var.to_lowercase())
                } else {
                    format!("example-{}", var.to_lowercase())
                };
                cmd.env(&var, value);
            }
            let out = cmd.output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "the toml example at {}:{line} fails check-config:\n{}{}",
                doc.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(checked > 0, "no toml example found in the docs");
}

/// The paths in an example's `import = [...]` line.
fn imports(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.trim_start().strip_prefix("import"))
        .filter_map(|l| l.trim_start().strip_prefix('='))
        .flat_map(|l| {
            let list = l.split('#').next().unwrap_or("");
            list.split('"')
                .enumerate()
                .filter(|(i, _)| i % 2 == 1)
                .map(|(_, s)| s.to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn block_extraction_reads_fences_and_indentation() {
    let md = "text\n```toml\na = 1\n```\n  ```toml\n  b = 2\n  ```\n```sh\nc\n```\n";
    let b = blocks(md, "toml");
    assert_eq!(
        b,
        vec![(2, "a = 1\n".to_owned()), (5, "b = 2\n".to_owned())]
    );
    assert_eq!(
        env_refs("x = \"${A}\" y = \"${env:B_2}\" z = \"${input:c}\""),
        ["A", "B_2"]
    );
    assert_eq!(
        imports("import = [\"~/a.json\", \"b.json\"]   # comment \"x\"\n"),
        ["~/a.json", "b.json"]
    );
}

/// Every `mcpulse supervise` command in the docs' `sh` blocks takes its options: each runs with
/// the server command swapped for `true` (the servers the docs name are not installed here),
/// stdin closed, `--listen` on port 0 and `--log-file` in a temporary directory, and must exit
/// 0 with nothing on stdout. `--wrap`/`--unwrap` lines are left to tests/supervise_wrap.rs.
#[test]
fn every_supervise_command_in_the_docs_takes_its_options() {
    let dir = std::env::temp_dir().join(format!("mcpulse-docs-supervise-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ran = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (start, body) in blocks(&text, "sh") {
            for line in body.lines() {
                let Some(rest) = line.trim().strip_prefix("mcpulse supervise ") else {
                    continue;
                };
                if rest.contains("--wrap") || rest.contains("--unwrap") {
                    continue;
                }
                let options = rest.split(" -- ").next().unwrap();
                let mut args = vec!["supervise".to_owned()];
                let mut words = options.split_whitespace();
                while let Some(w) = words.next() {
                    args.push(w.to_owned());
                    match w {
                        "--listen" => {
                            words.next();
                            args.push("127.0.0.1:0".into());
                        }
                        "--log-file" => {
                            words.next();
                            args.push(dir.join("log").to_string_lossy().into_owned());
                        }
                        _ => {}
                    }
                }
                args.extend(["--".into(), "true".into()]);
                let out = Command::new(BIN)
                    .args(&args)
                    .stdin(std::process::Stdio::null())
                    .output()
                    .unwrap();
                assert!(
                    out.status.success() && out.stdout.is_empty(),
                    "{}:{start}: `{line}` ({args:?}): {}",
                    doc.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                ran += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ran >= 4, "only {ran} supervise commands found in the docs");
}
