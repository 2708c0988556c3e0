//! The documentation pages generated from the registry: `docs/findings.md`, `docs/checks.md`
//! and `docs/drift.md` (`mcpulse docs findings|checks|drift`; tests fail when a page is stale).
//! Only rendering lives here: every word about a rule comes from the rule itself, and the
//! pattern lists from the constants the checks match against.

use super::security::{DESTRUCTIVE_WORDS, GRADES, INJECTION_PATTERNS, LEAK_PATTERNS, Level};
use super::{drift, health, security};

/// `docs/findings.md`, generated from the rules.
pub fn findings_doc() -> String {
    let mut s = String::from(
        "# Findings\n\n<!-- Generated from crates/mcpulse-judge/src/rules/health.rs by `cargo run -p mcpulse -- docs findings`; a test fails when this file is stale. -->\n\n\
Every finding in a probe report has a stable `code` (never reused), a `severity` and a message. \
The verdict is the worst severity: any `critical` finding makes the server `down` (exit code 2), any `warning` makes it `degraded` (exit code 1), otherwise it is `healthy` (exit code 0).\n\n\
| code | severity | what it means |\n|---|---|---|\n",
    );
    for r in health::ALL {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            r.code(),
            r.severity().as_str(),
            r.title()
        ));
    }
    for r in health::ALL {
        s.push_str(&format!(
            "\n## `{}`\n\n**Severity:** {}\n\n{}\n\n{}\n",
            r.code(),
            r.severity().as_str(),
            r.title(),
            r.why()
        ));
    }
    s
}

/// `docs/checks.md`, generated from the rules: what each checks, why, its severity, and the
/// grade formula.
pub fn checks_doc() -> String {
    let mut s = String::from(
        "# Security checks and the grade\n\n<!-- Generated from crates/mcpulse-judge/src/rules/security.rs by `cargo run -p mcpulse -- docs checks`; a test fails when this file is stale. -->\n\n\
`mcpulse probe` grades a server's security posture from what it can observe. For HTTP targets it sends a few extra, read-only requests \
(`--no-security` turns them off): the successful handshake again with a foreign `Origin: http://evil.example` (and, for loopback targets, a foreign \
`Host: evil.example`) — over the legacy HTTP+SSE transport a `ping` POSTed to the session's endpoint with that header instead, since that is \
where such a server receives messages —, one malformed JSON-RPC body (Streamable HTTP), and for a server that answers 401 the OAuth metadata documents it names (RFC 9728 protected-resource \
metadata, then RFC 8414 / OpenID discovery). It never calls a tool, never sends your credentials to any host but the target (the metadata \
requests carry none), never follows a public server's metadata to a non-public address, and deletes any session a check opened.\n\n\
## The formula\n\n\
score = 100 − Σ penalty, over the rules that fired, each rule counted once at its worst severity\n\n\
| severity | penalty |\n|---|---|\n",
    );
    for l in [
        Level::Critical,
        Level::High,
        Level::Medium,
        Level::Low,
        Level::Info,
    ] {
        s.push_str(&format!("| {} | {} |\n", l.as_str(), l.penalty()));
    }
    s.push_str("\n| grade | score |\n|---|---|\n");
    for (g, min) in GRADES {
        s.push_str(&format!("| {g} | ≥ {min} |\n"));
    }
    s.push_str("\nAny **critical** finding makes the grade **F**, whatever the score.\n\n## The rules\n\n| code | severity | what it checks |\n|---|---|---|\n");
    for r in security::ALL {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            r.code(),
            r.level().as_str(),
            r.title()
        ));
    }
    for r in security::ALL {
        s.push_str(&format!(
            "\n### `{}`\n\n**Severity:** {} (default)\n\n{}\n\n**Why it matters:** {}\n",
            r.code(),
            r.level().as_str(),
            r.title(),
            r.why()
        ));
    }
    s.push_str("\n## Patterns\n\n`tool-prompt-injection` looks (case-insensitively) for these in tool descriptions:\n\n");
    for p in INJECTION_PATTERNS {
        s.push_str(&format!("- `{p}`\n"));
    }
    s.push_str("\n`tool-destructive-unannotated` treats a tool name as destructive when one of its words (split on `_`, `-`, `.` and camelCase) is one of: ");
    s.push_str(
        &DESTRUCTIVE_WORDS
            .iter()
            .map(|w| format!("`{w}`"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    s.push_str(".\n\n`error-leak` looks (case-sensitively) in the error body for:\n\n");
    for (needle, what) in LEAK_PATTERNS {
        // A needle with a tab or edge spaces is quoted with escapes: Markdown would eat them.
        if needle.trim() == *needle && !needle.chars().any(char::is_control) {
            s.push_str(&format!("- `{needle}`: {what}\n"));
        } else {
            s.push_str(&format!("- `{needle:?}`: {what}\n"));
        }
    }
    s
}

/// `docs/drift.md`, generated from the drift rules.
pub fn drift_doc() -> String {
    let mut s = String::from(
        "# Drift classes\n\n<!-- Generated from crates/mcpulse-judge/src/rules/drift.rs by `cargo run -p mcpulse -- docs drift`; a test fails when this file is stale. -->\n\n\
`mcpulse diff` and `mcpulse probe --baseline` report every change between two contracts with a stable code, the JSON path that changed, the old and new values, and a class. \
The CI gate exits 2 on any breaking change, 1 on any risky change, 0 when only info changes (or none) were found, and 3 when it could not run.\n\n\
A baseline's digests are computed again from its content when it is read: a stored digest or key its content does not give (an edit by hand) is refused with exit 3, \
or, with `--force`, compared by its content and listed under `baseline_mismatches`.\n\n\
| code | class | meaning |\n|---|---|---|\n",
    );
    for r in drift::ALL {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            r.code(),
            r.class().as_str(),
            r.title()
        ));
    }
    s
}
