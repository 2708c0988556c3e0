//! Text a server chooses reaches a person inert (issue #14, item 2): the real binary against a
//! server whose name, version, tool names and error messages hold terminal escapes (OSC title,
//! clear screen, colours), a newline forging a `✔ healthy` line, the one-byte CSI (U+009B) and
//! bidi overrides; with `--color always` and `--color never`, for `probe`, `snapshot`, `diff`
//! and a stdio server's stderr. The only escapes in the output are our own SGR styles, and no
//! forged line appears. `--json` stays exact.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::mcp::LEGACY;
use mcpulse_testkit::run::{self, Run};
use mcpulse_testkit::scenario::{self, HOSTILE};
use mcpulse_testkit::{Act, FakeHttp, StdioScript, TempDir};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(15);

/// The output with our own SGR styles (`ESC [ digits/; m`) taken out; fails on any other
/// escape sequence.
fn without_our_styles(out: &str) -> String {
    let mut s = String::new();
    let mut chars = out.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            s.push(c);
            continue;
        }
        assert_eq!(
            chars.next(),
            Some('['),
            "an escape that is not SGR in {out:?}"
        );
        loop {
            match chars.next() {
                Some('m') => break,
                Some(d) if d.is_ascii_digit() || d == ';' => {}
                other => panic!("an escape that is not SGR ({other:?}) in {out:?}"),
            }
        }
    }
    s
}

/// No raw control (but line breaks), C1, bidi or invisible character; no line a server forged.
fn assert_inert(what: &str, out: &str) {
    assert_no_raw(what, out);
    for line in without_our_styles(out).lines() {
        let t = line.trim_start();
        assert!(
            !t.starts_with("✔ healthy  forged") && !t.starts_with("2026-12-01T00:00:00Z"),
            "{what}: a forged line {line:?}\n{out}"
        );
    }
}

/// No raw control (but line breaks), C1, bidi or invisible character.
fn assert_no_raw(what: &str, out: &str) {
    for line in without_our_styles(out).lines() {
        assert!(
            !line.chars().any(mcpulse_wire::text::is_escaped),
            "{what}: a raw control character in {line:?}\n{out}"
        );
    }
}

async fn mcpulse(args: &[&str]) -> Run {
    run::run(BIN, args, &[], BOUND).await
}

/// `mcpulse probe --no-security --timeout 5s --color <color> <target...>`, the human summary.
async fn probe(color: &str, target: &[&str]) -> Run {
    let mut args = vec![
        "probe",
        "--no-security",
        "--timeout",
        "5s",
        "--color",
        color,
    ];
    args.extend_from_slice(target);
    mcpulse(&args).await
}

/// `out` shows `text` (our styles aside).
fn assert_shows(out: &str, text: &str) {
    let plain = without_our_styles(out);
    assert!(plain.contains(text), "{text:?} is not in:\n{plain}");
}

#[tokio::test]
async fn probe_shows_server_text_inert_with_colour_on_and_off() {
    let server = FakeHttp::start_script(scenario::hostile(HOSTILE, LEGACY, false)).await;
    let url = server.url("/mcp");
    for color in ["always", "never"] {
        let run = probe(color, &[&url]).await;
        assert_inert(&format!("probe --color {color}"), &run.stdout);
        assert_inert(&format!("probe --color {color} (stderr)"), &run.stderr);
        // Shown, visibly escaped: the name and version, the tool names.
        assert_shows(
            &run.stdout,
            "server evil\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x1b[32m\\n✔ healthy  forged\\n2026",
        );
        assert_shows(&run.stdout, "\\r\\u{9b}31mred\\u{202e}txt.exe\\u{200b}");
        assert_shows(&run.stdout, "tools evil\\x1b]0;pwned");
        if color == "always" {
            assert!(
                run.stdout.contains('\x1b'),
                "our own colours are on: {:?}",
                run.stdout
            );
        }
    }
    // The JSON report keeps the exact text.
    let run = mcpulse(&["probe", "--json", "--no-security", "--timeout", "5s", &url]).await;
    assert_eq!(run.json()["server"]["name"], HOSTILE, "{}", run.stdout);
}

#[tokio::test]
async fn error_messages_and_a_protocol_version_are_shown_inert() {
    // The handshake rejected with a hostile message: a finding quotes it.
    let rejecting = FakeHttp::start_script(scenario::hostile(HOSTILE, LEGACY, true)).await;
    // A hostile protocolVersion.
    let odd_version = FakeHttp::start_script(scenario::hostile(HOSTILE, HOSTILE, false)).await;
    for server in [&rejecting, &odd_version] {
        let url = server.url("/mcp");
        let run = probe("always", &[&url]).await;
        assert_inert("probe", &run.stdout);
        assert_shows(&run.stdout, "evil\\x1b]0;pwned\\x07");
    }
    // A snapshot that cannot be taken says why, on stderr, inert.
    let run = mcpulse(&["snapshot", "--timeout", "5s", &rejecting.url("/mcp")]).await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_inert("snapshot", &run.stderr);
    assert_shows(&run.stderr, "evil\\x1b]0;pwned\\x07");
}

#[tokio::test]
async fn a_stdio_servers_stderr_is_shown_inert() {
    let dir = TempDir::new("hostile-stderr");
    let script = StdioScript::new()
        .at_start(Act::Stderr(HOSTILE.into()))
        .at_start(Act::Exit(1))
        .write(&dir, "server.sh");
    let path = script.to_str().unwrap();
    for color in ["always", "never"] {
        let run = probe(color, &["--", "sh", path]).await;
        assert_eq!(run.code, Some(2), "{}{}", run.stdout, run.stderr);
        // Each line the server wrote to stderr is shown as one indented line of that section:
        // its own, not one of ours.
        assert_no_raw("stderr lines", &run.stdout);
        let plain = without_our_styles(&run.stdout);
        let (_, section) = plain.split_once("stderr (last lines)\n").unwrap();
        assert!(section.lines().all(|l| l.starts_with("    ")), "{plain}");
        assert!(section.contains("\n    ✔ healthy  forged\n"), "{plain}");
        assert_shows(&run.stdout, "\\u{9b}31mred\\u{202e}txt.exe");
    }
}

#[tokio::test]
async fn diff_shows_tool_names_paths_and_values_inert() {
    let dir = TempDir::new("hostile-diff");
    let before = FakeHttp::start_script(scenario::hostile(HOSTILE, LEGACY, false)).await;
    let after = FakeHttp::start_script(scenario::hostile(
        "\x1b[2J\u{9b}H\n  ✔ no drift\u{202e}",
        LEGACY,
        false,
    ))
    .await;
    let (old, new) = (dir.join("old.lock"), dir.join("new.lock"));
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    for (server, lock) in [(&before, old), (&after, new)] {
        let run = mcpulse(&[
            "snapshot",
            "--timeout",
            "5s",
            "-o",
            lock,
            &server.url("/mcp"),
        ])
        .await;
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert_inert("snapshot", &run.stderr);
    }
    for color in ["always", "never"] {
        let run = mcpulse(&["diff", "--color", color, old, new]).await;
        assert_eq!(run.code, Some(2), "breaking: {}{}", run.stdout, run.stderr);
        assert_inert(&format!("diff --color {color}"), &run.stdout);
        let plain = without_our_styles(&run.stdout);
        assert!(
            !plain
                .lines()
                .any(|l| l.trim_start().starts_with("✔ no drift")),
            "{plain}"
        );
        // The removed tool's path names it, escaped.
        assert_shows(&run.stdout, "tools[evil\\x1b]0;pwned\\x07");
        assert_shows(&run.stdout, "\\x1b[2J\\u{9b}H\\n  ✔ no drift\\u{202e}");
    }
}
