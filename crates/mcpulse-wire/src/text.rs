//! Inert text: what server-controlled (or imported) text becomes before it reaches a terminal, a
//! log line, a chat message or a program's environment.
//!
//! A server chooses its `serverInfo.name`, its version, its tool names, its error messages and
//! the lines it writes to stderr; an imported config chooses target names. Printed raw, such text
//! can drive the terminal (an OSC sequence sets the window title, a CSI clears the screen or
//! paints text, U+009B is a one-byte CSI), forge whole lines with a newline (`✔ healthy`, or a
//! log line `INFO alert target=prod kind=recovered`), or reorder what a person reads with bidi
//! overrides. Every renderer for people and logs goes through this module; JSON outputs do not
//! (they stay exact, and JSON escapes control characters itself).
//!
//! ## The rule
//!
//! These characters are replaced by a visible escape:
//! - C0 controls U+0000–U+001F as `\n`, `\r`, `\t` or `\xNN` (so ESC is `\x1b`), and DEL as `\x7f`;
//! - C1 controls U+0080–U+009F (U+009B is a CSI on its own) as `\u{9b}`;
//! - bidi controls U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069, and the line and
//!   paragraph separators U+2028, U+2029, as `\u{202e}`;
//! - invisible characters that let one name pass for another: U+00AD (soft hyphen), U+180E,
//!   U+200B–U+200D (zero-width space, non-joiner, joiner), U+2060–U+2065 and U+206A–U+206F
//!   (word joiner, invisible operators, deprecated format controls), U+FEFF (BOM), U+FFF9–U+FFFB
//!   (interlinear annotation) and the tag characters U+E0000–U+E007F (invisible ASCII).
//!
//! - the ways a CI log line becomes a workflow command (GitHub Actions reads `::command::` at
//!   the start of a line, after spaces, and a legacy `##[command]` anywhere in it; Azure
//!   Pipelines reads `##vso[command]` anywhere): a text beginning with `::` (after white space)
//!   has that first colon escaped (`\x3a:`), and the second `#` of every `##[` and `##vso[`
//!   (`#\x23[`), so that a server's name printed by `mcpulse diff` or `probe` in a CI job
//!   cannot raise an annotation, mask a value or stop the job's commands.
//!
//! Everything else passes as is: a backslash is not doubled, so the escapes are for reading, not
//! for decoding (the `--json` report has the exact text).
//!
//! The result is cut to a length counted in characters *of the output* (escapes included), never
//! inside a character or an escape, and a cut ends with [`MARKER`] (`…`, counted in the length):
//! [`FIELD_CHARS`] (200) for one-line facts such as a name, a version, a tool name or a path;
//! [`MESSAGE_CHARS`] (1000) for messages (a finding, an error, an alert summary, a stderr line).
//! Sinks with their own limit (PagerDuty's 1024) pass it to [`inert`].
//!
//! Plain text comes back borrowed: the common case allocates nothing.

use std::borrow::Cow;

/// The longest single-line fact shown (a server name, a version, a tool name, a JSON path), in
/// characters.
pub const FIELD_CHARS: usize = 200;
/// The longest message shown (a finding, an error, an alert summary, a stderr line), in
/// characters.
pub const MESSAGE_CHARS: usize = 1000;
/// What ends a cut text.
pub const MARKER: char = '…';

/// Whether a character is escaped (see the module docs for the list and why).
pub fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{206a}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// A one-line fact, inert and at most [`FIELD_CHARS`] long.
pub fn field(s: &str) -> Cow<'_, str> {
    inert(s, FIELD_CHARS)
}

/// A message, inert and at most [`MESSAGE_CHARS`] long.
pub fn message(s: &str) -> Cow<'_, str> {
    inert(s, MESSAGE_CHARS)
}

/// `s` with every [`is_escaped`] character replaced by a visible escape, cut to at most `max`
/// characters (see the module docs).
pub fn inert(s: &str, max: usize) -> Cow<'_, str> {
    if is_plain(s, max) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(render(s, max, false))
}

/// Whether `s` is returned as it is: within `max` and nothing to escape. Printable ASCII, the
/// usual case, is checked a byte at a time.
fn is_plain(s: &str, max: usize) -> bool {
    if workflow_command(s) {
        return false;
    }
    if s.len() <= max && s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return true;
    }
    (s.len() <= max || s.chars().count() <= max) && !s.chars().any(is_escaped)
}

/// Whether `s` holds what a CI runner would take for a workflow command (module docs).
fn workflow_command(s: &str) -> bool {
    if s.trim_start().starts_with("::") {
        return true;
    }
    // One memchr pass for `#` (most texts have none; two substring searches cost every log
    // value of every request a few hundred instructions).
    let b = s.as_bytes();
    s.match_indices('#').any(|(i, _)| {
        let rest = &b[i + 1..];
        rest.starts_with(b"#[") || rest.starts_with(b"#vso[")
    })
}

/// The escape for the character at byte `i` of `s` that [`workflow_command`] looks for: the
/// first colon of a `::` at `lead` (where the text starts after white space), the second `#`
/// of a `##[` or `##vso[`.
fn workflow_escape(s: &str, lead: usize, i: usize, c: char) -> Option<&'static str> {
    let b = s.as_bytes();
    match c {
        ':' if i == lead && b.get(i + 1) == Some(&b':') => Some("\\x3a"),
        '#' if i > 0
            && b[i - 1] == b'#'
            && (b[i + 1..].starts_with(b"[") || b[i + 1..].starts_with(b"vso[")) =>
        {
            Some("\\x23")
        }
        _ => None,
    }
}

/// Text of our own that spans lines (an error with its cause chain, a config error pointing
/// at a line) but may quote text from a file or a server: each line is made inert as a
/// [`message`], and only the line breaks themselves are kept.
pub fn lines(s: &str) -> Cow<'_, str> {
    if !s.split('\n').any(|l| matches!(message(l), Cow::Owned(_))) {
        return Cow::Borrowed(s);
    }
    let parts: Vec<Cow<'_, str>> = s.split('\n').map(message).collect();
    Cow::Owned(parts.join("\n"))
}

/// `s` between double quotes, inert, with `"` and `\` escaped too (so the quotes are
/// unambiguous: nothing inside can close them), the inside cut to at most `max` characters.
pub fn quoted(s: &str, max: usize) -> String {
    format!("\"{}\"", render(s, max, true))
}

/// A value in a `key=value` log line: bare when it is one plain token (no space, `"`, `=`, `\`
/// or escaped character, at most [`MESSAGE_CHARS`]), else [`quoted`]. Every value of every line
/// is written this way, so a value can neither end the line nor pass for another field.
pub fn log_value(s: &str) -> Cow<'_, str> {
    let bare = !s.is_empty()
        && !workflow_command(s)
        && s.len() <= MESSAGE_CHARS
        && !s
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '=' | '\\') || is_escaped(c));
    if bare {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(quoted(s, MESSAGE_CHARS))
    }
}

/// The escape for one character, written into `buf` (ASCII, at most 10 bytes: `\u{e007f}`),
/// or `None` when it passes as is.
fn escape(c: char, quoting: bool, buf: &mut [u8; 12]) -> Option<&str> {
    use std::io::Write as _;
    let fixed = match c {
        '\n' => "\\n",
        '\r' => "\\r",
        '\t' => "\\t",
        '"' if quoting => "\\\"",
        '\\' if quoting => "\\\\",
        c if is_escaped(c) => {
            let mut w = std::io::Cursor::new(&mut buf[..]);
            let code = c as u32;
            let written = if code < 0x20 || code == 0x7f {
                write!(w, "\\x{code:02x}")
            } else {
                write!(w, "\\u{{{code:x}}}")
            };
            let n = usize::try_from(w.position()).unwrap_or(0);
            return written
                .ok()
                .and_then(|()| std::str::from_utf8(buf.get(..n)?).ok());
        }
        _ => return None,
    };
    Some(fixed)
}

/// The slow path: escapes, and cuts at the last piece boundary that leaves room for the marker.
fn render(s: &str, max: usize, quoting: bool) -> String {
    let mut out = String::with_capacity(s.len().min(max.saturating_mul(4)));
    let mut chars = 0usize;
    // Where to cut if the text turns out too long: the end of the last piece after which the
    // marker still fits.
    let mut cut = 0usize;
    let mut esc = [0u8; 12];
    let mut utf8 = [0u8; 4];
    let lead = s.len() - s.trim_start().len();
    for (i, c) in s.char_indices() {
        let (piece, n): (&str, usize) = match workflow_escape(s, lead, i, c) {
            Some(e) => (e, e.len()),
            None => match escape(c, quoting, &mut esc) {
                // Escapes are ASCII: one character per byte.
                Some(e) => (e, e.len()),
                None => (c.encode_utf8(&mut utf8), 1),
            },
        };
        if chars + n > max {
            out.truncate(cut);
            if max > 0 {
                out.push(MARKER);
            }
            return out;
        }
        out.push_str(piece);
        chars += n;
        if chars < max {
            cut = out.len();
        }
    }
    out
}

/// Why a program could not be started, for a person: `NotFound` is the program or, for a
/// script, the interpreter its `#!` line names (ENOENT says not which), so neither is called
/// missing when the other is. The program's name is the caller's to make inert.
pub fn spawn_failure(program: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("{program}: not found (the program, or the interpreter its first line names)")
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("{program}: permission denied (is it a file you may execute?)")
        }
        _ => format!("{program}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_workflow_commands_are_broken() {
        assert_eq!(
            field("::error title=x::pwned"),
            "\\x3a:error title=x::pwned"
        );
        assert_eq!(
            message("a ##[error]pwned and ##[group]"),
            "a #\\x23[error]pwned and #\\x23[group]"
        );
        assert_eq!(lines("ok\n::add-mask::x"), "ok\n\\x3a:add-mask::x");
        // After white space too (the runner trims it), and Azure's form.
        assert_eq!(message("  \u{a0}::error::x"), "  \u{a0}\\x3a:error::x");
        assert_eq!(
            message("##vso[task.setvariable]x"),
            "#\\x23vso[task.setvariable]x"
        );
        assert_eq!(log_value("##[error]x"), "\"#\\x23[error]x\"");
        // Not at the start, or a lone `#[`: as is.
        assert!(matches!(field("a::b #[x]"), Cow::Borrowed(_)));
    }

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(field("search 1.2.0 · ✔"), Cow::Borrowed(_)));
        assert!(matches!(log_value("degraded"), Cow::Borrowed(_)));
    }

    #[test]
    fn escapes_are_visible() {
        assert_eq!(
            field("a\x1b]0;pwned\x07b\n✔ healthy\r\t\u{7f}\u{9b}2J\u{202e}x\u{200b}"),
            "a\\x1b]0;pwned\\x07b\\n✔ healthy\\r\\t\\x7f\\u{9b}2J\\u{202e}x\\u{200b}"
        );
        assert_eq!(field("C:\\dir"), "C:\\dir");
    }

    #[test]
    fn cuts_count_output_characters_and_never_split_an_escape() {
        assert_eq!(inert("abcd", 4), "abcd");
        assert_eq!(inert("abcde", 4), "abc…");
        assert_eq!(inert("ééééé", 3), "éé…");
        // `\x1b` is four characters: it does not fit before the marker, and is not split.
        assert_eq!(inert("ab\x1bcdef", 5), "ab…");
        assert_eq!(inert("abc", 0), "");
    }

    #[test]
    fn lines_keep_their_breaks_and_nothing_else() {
        assert!(matches!(lines("a\n  b"), Cow::Borrowed(_)));
        assert_eq!(
            lines("bad \x1b[2J\r\n  at line 3"),
            "bad \\x1b[2J\\r\n  at line 3"
        );
    }

    #[test]
    fn log_values_are_bare_or_quoted() {
        assert_eq!(log_value("Trigger"), "Trigger");
        assert_eq!(log_value(""), "\"\"");
        assert_eq!(log_value("is down"), "\"is down\"");
        assert_eq!(
            log_value("x\" kind=recovered\nFAKE"),
            "\"x\\\" kind=recovered\\nFAKE\""
        );
        assert_eq!(log_value("a\\b"), "\"a\\\\b\"");
    }
}
