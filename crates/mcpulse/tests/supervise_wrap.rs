//! `mcpulse supervise --wrap` / `--unwrap` on real files (#17 adoption): what is written, what
//! is not, the backup, the permissions, a symlinked config, and the errors. The rewrite itself
//! (each client's layout, comments, idempotence, the diff) is tested in mcpulse-relay's `wrap`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::TempDir;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");

const CURSOR: &str = r#"{
  "mcpServers": {
    "time": {
      "command": "uvx",
      "args": ["mcp-server-time", "--local-timezone=UTC"],
      "env": {"TZ": "UTC"}
    },
    "remote": {"url": "https://mcp.example.com/mcp"}
  }
}
"#;

fn mcpulse(args: &[&str], file: &Path) -> Output {
    Command::new(BIN)
        .arg("supervise")
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn backups(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".mcpulse-backup-"))
        .collect();
    v.sort();
    v
}

#[test]
fn dry_run_shows_a_diff_and_writes_nothing() {
    let dir = TempDir::new("wrap-dry");
    let file = dir.path().join("mcp.json");
    std::fs::write(&file, CURSOR).unwrap();
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    let o = mcpulse(&["--dry-run", "--wrap"], &file);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.starts_with("--- "), "{out}");
    assert!(out.contains("-      \"command\": \"uvx\",\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("+      \"command\": \"/") && l.ends_with("/mcpulse\",")),
        "{out}"
    );
    assert!(
        out.contains("+      \"args\": [\"supervise\", \"--\", \"uvx\", \"mcp-server-time\""),
        "{out}"
    );
    assert!(err.contains("would wrap \"time\" in mcpServers"), "{err}");
    assert!(
        err.contains("left alone (not a stdio server): \"remote\""),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), CURSOR);
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        before
    );
    assert!(backups(dir.path()).is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn wrap_backs_up_keeps_permissions_and_unwrap_restores_the_bytes() {
    let dir = TempDir::new("wrap-write");
    let file = dir.path().join("claude_desktop_config.json");
    std::fs::write(&file, CURSOR).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let o = mcpulse(&["--wrap"], &file);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let wrapped = std::fs::read_to_string(&file).unwrap();
    let v: serde_json::Value = serde_json::from_str(&wrapped).unwrap();
    let time = &v["mcpServers"]["time"];
    let exe = time["command"].as_str().unwrap();
    assert!(
        Path::new(exe).is_absolute() && exe.ends_with("mcpulse"),
        "{exe}"
    );
    assert_eq!(
        time["args"],
        serde_json::json!([
            "supervise",
            "--",
            "uvx",
            "mcp-server-time",
            "--local-timezone=UTC"
        ])
    );
    assert_eq!(time["env"], serde_json::json!({"TZ": "UTC"}));
    assert_eq!(
        v["mcpServers"]["remote"],
        serde_json::json!({"url": "https://mcp.example.com/mcp"})
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    let b = backups(dir.path());
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(std::fs::read_to_string(&b[0]).unwrap(), CURSOR);
    assert_eq!(mode(&b[0]), 0o600);
    assert!(
        text(&o).1.contains(&b[0].display().to_string()),
        "{}",
        text(&o).1
    );

    // Twice: nothing to change, nothing written, no second backup.
    let o = mcpulse(&["--wrap"], &file);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o).1.contains("nothing to change"), "{}", text(&o).1);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), wrapped);
    assert_eq!(backups(dir.path()).len(), 1);

    let o = mcpulse(&["--unwrap"], &file);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), CURSOR);
    assert_eq!(mode(&file), 0o600);
    assert_eq!(backups(dir.path()).len(), 2);
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains("mcpulse-tmp")),
        "{names:?}"
    );
}

#[test]
fn a_symlinked_config_stays_a_symlink() {
    let dir = TempDir::new("wrap-link");
    let real = dir.path().join("dotfiles-mcp.json");
    let link = dir.path().join("mcp.json");
    std::fs::write(&real, CURSOR).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = mcpulse(&["--wrap"], &link);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::read_to_string(&real)
            .unwrap()
            .contains("\"supervise\"")
    );
}

#[test]
fn errors_say_what_to_do_and_change_nothing() {
    let dir = TempDir::new("wrap-errors");
    for (name, content, says) in [
        ("broken.json", "{\"mcpServers\": {", "is not JSON"),
        (
            "other.json",
            "{\"editor.fontSize\": 14}",
            "give the config file of Claude Desktop, Cursor, VS Code or Claude Code",
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, content).unwrap();
        let o = mcpulse(&["--wrap"], &file);
        assert_ne!(o.status.code(), Some(0), "{name}");
        assert!(text(&o).1.contains(says), "{name}: {}", text(&o).1);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), content);
    }
    let o = mcpulse(&["--unwrap"], &dir.path().join("missing.json"));
    assert_ne!(o.status.code(), Some(0));
    assert!(text(&o).1.contains("cannot read"), "{}", text(&o).1);
    assert!(backups(dir.path()).is_empty());
}

/// A name from the file reaches the terminal inert, in the summary and in the diff.
#[test]
fn hostile_names_are_printed_inert() {
    let dir = TempDir::new("wrap-hostile");
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        "{\"mcpServers\": {\"evil\\u001b]0;pwned\\u0007\u{202e}\": {\"command\": \"srv\"}}}",
    )
    .unwrap();
    let o = mcpulse(&["--dry-run", "--wrap"], &file);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for s in [&out, &err] {
        assert!(
            !s.contains('\u{1b}') && !s.contains('\u{7}') && !s.contains('\u{202e}'),
            "{s:?}"
        );
    }
    assert!(
        err.contains(r#"would wrap "evil\x1b]0;pwned\x07\u{202e}""#),
        "{err}"
    );
    assert!(out.contains("\\u{202e}"), "{out}");
}
