//! Keeping secrets out of everything mcpulse prints or stores.
//!
//! Credentials are redacted *by construction*: a header the user supplied is recorded as
//! [`REDACTED`] whatever its name, and URLs lose their userinfo and query values before they
//! reach a transcript or report.
//!
//! Names and patterns only go so far: a token in a URL's path or a bare argument has no name.
//! So secrets are also a property of the *value*: whatever config expansion read from the
//! environment (`${VAR}`, `${env:VAR}`) or put in a server's environment is kept in
//! [`Secrets`], and every display of a target ([`target_url`], [`command_line`]) and every
//! string a probe records about it ([`crate::transcript::Transcript::hide`]) has those values
//! replaced, wherever they landed.

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Response or request headers whose values are credentials whoever set them.
pub fn is_sensitive_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || n.contains("token")
        || n.contains("secret")
        || n.contains("api-key")
        || n.contains("apikey")
}

/// A URL fit for display: userinfo and query values replaced, fragment dropped.
///
/// Works on the text, so it never fails: an unparseable URL is still cleaned of anything that
/// looks like `user:pass@` or `?key=value`.
pub fn url(raw: &str) -> String {
    let (before_frag, _) = raw.split_once('#').unwrap_or((raw, ""));
    let (base, query) = match before_frag.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_frag, None),
    };
    let mut out = String::with_capacity(raw.len());
    match base.split_once("://") {
        Some((scheme, rest)) => {
            out.push_str(scheme);
            out.push_str("://");
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            match authority.rsplit_once('@') {
                Some((_, host)) => {
                    out.push_str(REDACTED);
                    out.push('@');
                    out.push_str(host);
                }
                None => out.push_str(authority),
            }
            out.push_str(path);
        }
        None => out.push_str(base),
    }
    if let Some(q) = query {
        out.push('?');
        let parts: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) => format!("{k}={REDACTED}"),
                None => kv.to_owned(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    out
}

/// Values that must never be shown: what config expansion read from the environment, and
/// a stdio server's environment values. Held in full (they are needed to hide them), never
/// printed: `Debug` shows only how many there are.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} {REDACTED})", self.0.len())
    }
}

impl Secrets {
    /// Remembers `value` as secret. The empty string hides nothing and is ignored.
    pub fn add(&mut self, value: &str) {
        if !value.is_empty() && !self.0.iter().any(|s| s == value) {
            self.0.push(value.to_owned());
            // Longest first, so that a secret containing another is hidden whole.
            self.0.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// Remembers all of `other`'s values.
    pub fn extend(&mut self, other: &Secrets) {
        for s in &other.0 {
            self.add(s);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every occurrence of a secret value replaced by [`REDACTED`]: every byte of
    /// every occurrence, overlapping ones too (secrets `xab` and `abcdef` in `xabcdef` leave
    /// nothing of either), each run of them one marker. A `<redacted>` already in the text is
    /// left whole, and a secret is never looked for across one, so hiding twice changes
    /// nothing. (The one exception, a secret that contains `<redacted>` itself, is hidden
    /// first, over the whole text.) The price: a secret that runs into a `<redacted>` already
    /// in the text (`hunter2<` before one) is not hidden there.
    pub fn hide(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_owned();
        }
        let holding = |s: &&String| s.contains(REDACTED);
        let whole;
        let text = if self.0.iter().any(|s| holding(&s)) {
            whole = cover(text, self.0.iter().filter(holding));
            whole.as_str()
        } else {
            text
        };
        let mut out = String::with_capacity(text.len());
        for (i, piece) in text.split(REDACTED).enumerate() {
            if i > 0 {
                out.push_str(REDACTED);
            }
            out.push_str(&cover(piece, self.0.iter().filter(|s| !holding(s))));
        }
        out
    }

    /// Whether any secret value occurs in `text`: a check without allocating, for walks over
    /// many strings. `false` means [`Secrets::hide`] would leave `text` as it is (`true` does
    /// not mean it would change it: a secret inside a `<redacted>` already there).
    pub fn appears_in(&self, text: &str) -> bool {
        self.0.iter().any(|s| text.contains(s.as_str()))
    }

    /// Hides secrets in `text` in place.
    pub fn hide_in(&self, text: &mut String) {
        self.hide_str(text);
    }

    /// Hides secrets in `text` in place, looking first (no allocation for a text without one);
    /// whether it changed.
    pub fn hide_str(&self, text: &mut String) -> bool {
        if !self.appears_in(text) {
            return false;
        }
        let hidden = self.hide(text);
        let changed = hidden != *text;
        *text = hidden;
        changed
    }

    /// Hides secrets in every string of `v`, object keys included (a property named after a
    /// secret); whether anything changed.
    pub fn hide_value(&self, v: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        if self.0.is_empty() {
            return false;
        }
        match v {
            Value::String(s) => self.hide_str(s),
            Value::Array(a) => a.iter_mut().fold(false, |c, v| self.hide_value(v) | c),
            Value::Object(m) => {
                let mut changed = false;
                // Keys rebuilt only when one holds a secret.
                if m.keys().any(|k| self.appears_in(k) && self.hide(k) != *k) {
                    let old = std::mem::take(m);
                    for (k, v) in old {
                        // Two keys may hide alike (`TOKEN`, `TOKEN_2`): numbered, so that
                        // neither value is lost.
                        let hidden = self.hide(&k);
                        let mut key = hidden.clone();
                        let mut n = 2;
                        while m.contains_key(&key) {
                            key = format!("{hidden} ({n})");
                            n += 1;
                        }
                        m.insert(key, v);
                    }
                    changed = true;
                }
                m.values_mut().fold(changed, |c, v| self.hide_value(v) | c)
            }
            _ => false,
        }
    }

    /// [`Secrets::hide_str`] on an optional text.
    pub fn hide_opt(&self, text: &mut Option<String>) -> bool {
        text.as_mut().is_some_and(|t| self.hide_str(t))
    }

    /// The longest secret value, in bytes (0 when there is none): how much context before a
    /// cut [`Secrets::hide_from`] needs.
    pub fn longest(&self) -> usize {
        self.0.first().map_or(0, String::len)
    }

    /// The end of `text` from byte `from` on (moved forward to a character boundary) with
    /// every secret hidden, for showing the tail of a longer text: the bytes before `from` are
    /// context only, never shown. An occurrence of a secret that begins before `from` and runs
    /// past it is hidden whole (the result then starts with [`REDACTED`]), so the cut never
    /// shows a part of one, as hiding after cutting did. Give it [`Secrets::longest`] bytes of
    /// context before `from`: an occurrence that begins before `text` does cannot reach
    /// `from` then. Overlapping occurrences are hidden as one, as by [`Secrets::hide`]; unlike
    /// it, a `<redacted>` already in the text is not treated apart.
    pub fn hide_from(&self, text: &str, from: usize) -> String {
        let mut from = from.min(text.len());
        while !text.is_char_boundary(from) {
            from += 1;
        }
        let mut out = String::with_capacity(text.len() - from);
        let mut shown = from;
        for (start, end) in self.runs(text.as_bytes()) {
            if end <= from {
                continue;
            }
            out.push_str(text.get(shown..start.max(shown)).unwrap_or(""));
            out.push_str(REDACTED);
            shown = end;
        }
        out.push_str(text.get(shown..).unwrap_or(""));
        out
    }

    /// Where to end a piece of a text still being written, each piece hidden on its own
    /// ([`Secrets::hide`]): before the bytes at its end that begin a secret (the bytes still to
    /// come may complete it), and never inside an occurrence of one (moved back to the start
    /// of the run of occurrences the cut would split). Cut the piece there and keep the rest
    /// to start the next one. `text.len()` when nothing is in the way; 0 when the whole text
    /// is in the way (a secret longer than the piece).
    pub fn piece_end(&self, text: &[u8]) -> usize {
        // The longest end of the text that is the start of a secret (not a whole one).
        let open = self
            .0
            .iter()
            .filter_map(|s| {
                let s = s.as_bytes();
                (1..s.len().min(text.len() + 1))
                    .rev()
                    .find(|&n| text.ends_with(&s[..n]))
            })
            .max()
            .unwrap_or(0);
        let at = text.len() - open;
        self.runs(text)
            .into_iter()
            .find(|&(start, end)| start < at && at < end)
            .map_or(at, |(start, _)| start)
    }

    /// The runs of occurrences of secrets in `text` (overlapping occurrences merged), as byte
    /// ranges, in order.
    fn runs(&self, text: &[u8]) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        if self.0.is_empty() {
            return runs;
        }
        for i in 0..text.len() {
            let rest = &text[i..];
            let Some(end) = self
                .0
                .iter()
                .filter(|s| rest.starts_with(s.as_bytes()))
                .map(|s| i + s.len())
                .max()
            else {
                continue;
            };
            match runs.last_mut() {
                Some(run) if i < run.1 => run.1 = run.1.max(end),
                _ => runs.push((i, end)),
            }
        }
        runs
    }
}

/// `text` with every byte of every occurrence of `secrets` (overlapping ones too) replaced:
/// each run of overlapping occurrences by one [`REDACTED`]; occurrences that only touch stay
/// one marker each. One pass over the text, with nothing kept but the output (at most
/// `REDACTED.len()` bytes for each byte of `text`, a one-character secret repeated), whatever
/// the number of occurrences.
fn cover<'a>(text: &str, secrets: impl Iterator<Item = &'a String> + Clone) -> String {
    let mut out = String::with_capacity(text.len());
    // The text before `shown` is in `out`; a run of occurrences is open while `run` is set,
    // up to `until`.
    let (mut shown, mut until, mut run) = (0, 0, false);
    for (i, _) in text.char_indices() {
        if run && i >= until {
            out.push_str(REDACTED);
            shown = until;
            run = false;
        }
        let rest = &text[i..];
        let end = secrets
            .clone()
            .filter(|s| rest.starts_with(s.as_str()))
            .map(|s| i + s.len())
            .max();
        if let Some(end) = end {
            if !run {
                out.push_str(text.get(shown..i).unwrap_or(""));
                run = true;
            }
            until = until.max(end);
        }
    }
    if run {
        out.push_str(REDACTED);
        shown = until;
    }
    out.push_str(text.get(shown..).unwrap_or(""));
    out
}

/// A target URL fit for display: [`url`]'s rule, and every secret value hidden (a token in
/// the path has no name to go by).
pub fn target_url(raw: &str, secrets: &Secrets) -> String {
    url(&secrets.hide(raw))
}

/// A command line fit for display: [`args`] joined by spaces.
pub fn command_line(argv: &[String], secrets: &Secrets) -> String {
    args(argv, secrets).join(" ")
}

/// Short flags that take no value in the commands MCP servers are started with (`npx -y`,
/// `docker run -i`, quiet, verbose): the argument after them is shown.
const VALUELESS_SHORT_FLAGS: &[&str] = &["-y", "-i", "-q", "-v"];

/// Each argument of a command line fit for display. The rule errs on the side of hiding
/// (docs/monitor.md, "Secrets"):
///
/// 1. a secret value (from `${VAR}` or the server's environment) is hidden wherever it is;
/// 2. the argument after a flag whose name suggests a credential (`--api-key`, `--token`,
///    `-password`, `--auth`, …) is hidden, whatever it looks like;
/// 3. the argument after any other one-letter flag (`-p VALUE`) is hidden, unless the flag is
///    one that takes no value (`-y`, `-i`, `-q`, `-v`) or the argument is itself a flag;
///    `-e NAME=value` keeps the name;
/// 4. `name=value` and `--name=value` hide the value when the name suggests a credential
///    or the value looks like a token; `-pVALUE` hides the value;
/// 5. an argument that looks like a token is hidden: a known prefix (`ghp_`, `github_pat_`,
///    `sk-`, `xoxb-`, `AKIA`, `glpat-`, a JWT's `eyJ`, …) or 20 or more letters and digits
///    mixed throughout;
/// 6. URLs lose their userinfo and query values ([`url`]);
/// 7. a header written as one argument, `Name: value` or `Name:value` (`--header
///    "Authorization: Bearer …"`, as mcp-remote takes it), hides the value when the name is a
///    credential header's ([`is_sensitive_header`]) or suggests a credential.
pub fn args(argv: &[String], secrets: &Secrets) -> Vec<String> {
    #[derive(PartialEq)]
    enum Next {
        Show,
        /// After a credential flag: hidden whatever it is.
        Hide,
        /// After a one-letter flag: hidden unless it is a flag itself.
        HideValue,
    }
    let mut out = Vec::with_capacity(argv.len());
    let mut next = Next::Show;
    for a in argv {
        let after = std::mem::replace(&mut next, Next::Show);
        let shown = if after == Next::Hide || (after == Next::HideValue && !a.starts_with('-')) {
            match a.split_once('=') {
                Some((k, _)) if after == Next::HideValue && is_env_name(k) => {
                    format!("{k}={REDACTED}")
                }
                _ => REDACTED.to_owned(),
            }
        } else if let Some(name) = header_name(a) {
            format!("{name}: {REDACTED}")
        } else if a.contains("://") {
            url(a)
        } else if looks_like_token(a) {
            REDACTED.to_owned()
        } else if let Some((k, v)) = a.split_once('=') {
            if credential_name(k) || looks_like_token(v) {
                format!("{k}={REDACTED}")
            } else {
                a.clone()
            }
        } else if a.starts_with('-') && credential_name(a) {
            next = Next::Hide;
            a.clone()
        } else if is_short_flag(a) {
            if !VALUELESS_SHORT_FLAGS.contains(&a.as_str()) {
                next = Next::HideValue;
            }
            a.clone()
        } else if a.len() > 2 && a.starts_with("-p") && !a.starts_with("--") {
            // `-pVALUE`, the password form of mysql and its kin.
            format!("-p{REDACTED}")
        } else {
            a.clone()
        };
        out.push(secrets.hide(&shown));
    }
    out
}

/// The name of a credential header written as one argument (`Authorization: Bearer …`,
/// `X-Api-Key:abc`): a header name (RFC 9110 token characters) before a colon, with a value.
fn header_name(a: &str) -> Option<&str> {
    let (name, value) = a.split_once(':')?;
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    (token && !value.trim().is_empty() && !value.starts_with("//") && credential_name(name))
        .then_some(name)
}

/// The least length of a value the argv rule hid that is also hidden wherever else it shows
/// (a server echoing it in stderr or an error): shorter ones would blank ordinary words.
pub const ARGV_SECRET_MIN_LEN: usize = 6;

/// The values [`args`] hides in `argv`, as [`Secrets`]: hidden too where the server echoes
/// them (its stderr, an error message), not only in the command line shown.
pub fn argv_secrets(argv: &[String]) -> Secrets {
    let mut secrets = Secrets::default();
    for (a, shown) in argv.iter().zip(args(argv, &Secrets::default())) {
        if shown == *a || a.contains("://") {
            continue;
        }
        let value = match shown.strip_suffix(REDACTED) {
            // `k=`, `-p`, or a header's `Name: ` (the argument may have no space after `:`).
            Some(prefix) => a.get(prefix.trim_end().len()..).unwrap_or(a).trim(),
            None => continue,
        };
        if value.chars().count() >= ARGV_SECRET_MIN_LEN {
            secrets.add(value);
        }
    }
    secrets
}

/// `-x`: one dash, one letter.
fn is_short_flag(a: &str) -> bool {
    let b = a.as_bytes();
    b.len() == 2 && b[0] == b'-' && b[1].is_ascii_alphabetic()
}

/// An environment variable's name, as in `-e NAME=value`.
fn is_env_name(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A flag or variable name that suggests its value is a credential.
fn credential_name(k: &str) -> bool {
    let k = k.trim_start_matches('-').to_ascii_lowercase();
    is_sensitive_header(&k)
        || [
            "password",
            "passwd",
            "passphrase",
            "credential",
            "auth",
            "bearer",
            "private",
        ]
        .iter()
        .any(|w| k.contains(w))
        || k == "pass"
        || k == "pwd"
        || k.ends_with("key")
}

/// Prefixes of credentials that announce themselves (GitHub, OpenAI/Stripe, Slack, AWS,
/// GitLab, npm, PyPI, Google, Hugging Face, JWTs).
const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "xoxb-",
    "xoxa-",
    "xoxp-",
    "xoxs-",
    "xapp-",
    "AKIA",
    "ASIA",
    "glpat-",
    "npm_",
    "pypi-",
    "AIza",
    "hf_",
    "eyJ",
];

/// Whether an argument looks like a credential by its shape alone: a known prefix followed by
/// at least 8 token characters, or 20 or more token characters with letters and digits mixed
/// throughout (at least four switches between a letter and a digit: random, not a word with a
/// version number). Paths (`/`, `.`, `~` first) are not tokens.
pub fn looks_like_token(a: &str) -> bool {
    let token_char = |c: char| c.is_ascii_alphanumeric() || "_-+/=.".contains(c);
    if !a.chars().all(token_char) || a.starts_with(['/', '.', '~', '-']) {
        return false;
    }
    if TOKEN_PREFIXES
        .iter()
        .any(|p| a.starts_with(p) && a.len() >= p.len() + 8)
    {
        return true;
    }
    if a.len() < 20 {
        return false;
    }
    let mut switches = 0;
    let mut last: Option<bool> = None;
    for c in a.chars().filter(char::is_ascii_alphanumeric) {
        let digit = c.is_ascii_digit();
        if last.is_some_and(|l| l != digit) {
            switches += 1;
        }
        last = Some(digit);
    }
    switches >= 4
}

#[cfg(test)]
mod tests {
    use super::{REDACTED, Secrets};

    /// Keys that hide alike keep both their values, numbered.
    #[test]
    fn keys_that_hide_alike_lose_no_value() {
        let mut secrets = Secrets::default();
        secrets.add("tok-123456");
        secrets.add("tok-654321");
        let mut v = serde_json::json!({"tok-123456": 1, "tok-654321": 2, "plain": 3});
        assert!(secrets.hide_value(&mut v));
        let m = v.as_object().unwrap();
        assert_eq!(m.len(), 3, "{v}");
        assert_eq!(m["plain"], 3);
        let mut values: Vec<i64> = m.values().filter_map(serde_json::Value::as_i64).collect();
        values.sort_unstable();
        assert_eq!(values, [1, 2, 3]);
        assert!(m.keys().all(|k| !k.contains("tok-")), "{v}");
    }

    #[test]
    fn hiding_twice_changes_nothing_even_when_a_secret_is_a_piece_of_the_marker() {
        // Found by the no_panic proptest: the secret "<" turned "<redacted>" into
        // "<redacted>redacted>" on a second pass.
        for secret in ["<", "red", ">", "<redacted", "redacted>"] {
            let mut secrets = Secrets::default();
            secrets.add(secret);
            let once = secrets.hide(&format!("a {secret} b"));
            assert_eq!(once, format!("a {REDACTED} b"), "{secret}");
            assert_eq!(secrets.hide(&once), once, "{secret}");
        }
        // A secret that runs into a marker the first pass wrote (the review's "a<").
        let mut secrets = Secrets::default();
        secrets.add("a<");
        let once = secrets.hide("aa<");
        assert_eq!(once, format!("a{REDACTED}"));
        assert_eq!(secrets.hide(&once), once);
        // A secret that contains the marker is still hidden whole.
        let mut secrets = Secrets::default();
        secrets.add("<redacted>tail");
        assert_eq!(
            secrets.hide("x <redacted>tail y"),
            format!("x {REDACTED} y")
        );
        assert_eq!(secrets.hide("x <redacted> y"), format!("x {REDACTED} y"));
    }

    #[test]
    fn overlapping_secrets_show_nothing_of_either() {
        let mut secrets = Secrets::default();
        secrets.add("xab");
        secrets.add("abcdef");
        assert_eq!(secrets.hide("1 xabcdef 2"), format!("1 {REDACTED} 2"));
        // Touching is not overlapping: one marker each, as before.
        let mut secrets = Secrets::default();
        secrets.add("s3cret");
        assert_eq!(
            secrets.hide("s3crets3cret"),
            format!("{REDACTED}{REDACTED}")
        );
        // Multi-byte text around and inside secrets.
        let mut secrets = Secrets::default();
        secrets.add("ñé");
        assert_eq!(secrets.hide("añéñéb"), format!("a{REDACTED}{REDACTED}b"));
    }

    #[test]
    fn header_arguments_and_what_the_rule_hides_elsewhere() {
        let argv: Vec<String> = [
            "npx",
            "mcp-remote",
            "https://x.example/mcp",
            "--header",
            "Authorization: Bearer abcdef123456",
            "--header",
            "X-Api-Key:k3y-v4lue",
            "--header",
            "Accept: text/plain",
            "--api-key",
            "s3cret-value",
            "-p",
            "1",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            command_line(&argv, &Secrets::default()),
            "npx mcp-remote https://x.example/mcp --header Authorization: <redacted> --header X-Api-Key: <redacted> --header Accept: text/plain --api-key <redacted> -p <redacted>"
        );
        let s = argv_secrets(&argv);
        assert_eq!(
            s.hide("401: Bearer abcdef123456 / k3y-v4lue / s3cret-value / 1 / text/plain"),
            "401: <redacted> / <redacted> / <redacted> / 1 / text/plain"
        );
    }
    use super::*;

    #[test]
    fn a_tail_cut_inside_a_secret_shows_none_of_it() {
        let mut secrets = Secrets::default();
        secrets.add("hunter2hunter2");
        assert_eq!(secrets.longest(), 14);
        let text = "log: hunter2hunter2 and more";
        // A cut inside the secret: hidden whole, not its end shown.
        let from = text.find("ter2hunter2").unwrap();
        assert_eq!(secrets.hide_from(text, from), "<redacted> and more");
        // A cut before it, after it, at its very start and end.
        assert_eq!(secrets.hide_from(text, 0), "log: <redacted> and more");
        assert_eq!(secrets.hide_from(text, 5), "<redacted> and more");
        assert_eq!(secrets.hide_from(text, 19), " and more");
        assert_eq!(secrets.hide_from(text, text.len()), "");
        // Overlapping secrets across the cut: one marker for the run.
        secrets.add("xab");
        secrets.add("abcdef");
        assert_eq!(secrets.hide_from("0xabcdef1", 4), "<redacted>1");
        // Not a character boundary: moved forward.
        assert_eq!(Secrets::default().hide_from("é!", 1), "!");
    }

    #[test]
    fn a_piece_ends_before_a_secret_not_inside_it() {
        let mut secrets = Secrets::default();
        secrets.add("hunter2HUNTER3");
        // Nothing in the way.
        assert_eq!(secrets.piece_end(b"xxxx"), 4);
        assert_eq!(secrets.piece_end(b"xxxxhunter2HUNTER3"), 18);
        assert_eq!(Secrets::default().piece_end(b"xxxxhunt"), 8);
        // The start of a secret at the end: kept for the next piece.
        assert_eq!(secrets.piece_end(b"xxxxhunt"), 4);
        assert_eq!(secrets.piece_end(b"xxxxhunter2HUNTER"), 4);
        assert_eq!(secrets.piece_end(b"xxxxh"), 4);
        // A secret that repeats itself ends with its own start: kept, it may go on.
        let mut periodic = Secrets::default();
        periodic.add("abab");
        assert_eq!(periodic.piece_end(b"xxabab"), 2);
        // An occurrence that the kept end would split: kept whole.
        secrets.add("xab");
        secrets.add("abcdef");
        assert_eq!(secrets.piece_end(b"0xabcde"), 1);
        assert_eq!(secrets.piece_end(b"0xabcdef"), 8);
        // All of it in the way.
        assert_eq!(secrets.piece_end(b"hunter2HUN"), 0);
    }

    #[test]
    fn urls_lose_secrets() {
        assert_eq!(url("https://h.example/mcp"), "https://h.example/mcp");
        assert_eq!(
            url("https://u:p@h.example/mcp"),
            "https://<redacted>@h.example/mcp"
        );
        assert_eq!(
            url("https://h.example/mcp?token=abc&x=1&flag#frag"),
            "https://h.example/mcp?token=<redacted>&x=<redacted>&flag"
        );
        assert_eq!(url("http://127.0.0.1:3001"), "http://127.0.0.1:3001");
        assert_eq!(url("not a url?k=v"), "not a url?k=<redacted>");
    }

    #[test]
    fn sensitive_names() {
        assert!(is_sensitive_header("Authorization"));
        assert!(is_sensitive_header("X-API-Key"));
        assert!(is_sensitive_header("x-auth-token"));
        assert!(!is_sensitive_header("Content-Type"));
    }

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn secret_values_are_hidden_wherever_they_are() {
        let mut s = Secrets::default();
        s.add("t0k");
        s.add("");
        s.add("t0ken-long");
        assert_eq!(format!("{s:?}"), "Secrets(2 <redacted>)");
        assert_eq!(
            target_url("http://h/ok/t0ken-long/x?a=1", &s),
            "http://h/ok/<redacted>/x?a=<redacted>"
        );
        assert_eq!(s.hide("a t0k b t0ken-long"), "a <redacted> b <redacted>");
        assert_eq!(Secrets::default().hide("t0k"), "t0k");
        let mut d = Secrets::default();
        d.add("d");
        assert_eq!(d.hide(&d.hide("a d")), "a <redacted>");
        d.add("<redacted>x");
        assert_eq!(d.hide("<redacted>x"), "<redacted>");
        assert_eq!(
            command_line(&argv("server --root /srv/t0k"), &s),
            "server --root /srv/<redacted>"
        );
    }

    #[test]
    fn the_argv_rule() {
        let none = Secrets::default();
        let cases = [
            (
                "server --api-key s3cret --token=abc --root /srv",
                "server --api-key <redacted> --token=<redacted> --root /srv",
            ),
            (
                "mysql -p hunter2 -pHunter2",
                "mysql -p <redacted> -p<redacted>",
            ),
            (
                "npx -y @modelcontextprotocol/server-filesystem /srv",
                "npx -y @modelcontextprotocol/server-filesystem /srv",
            ),
            (
                "docker run -i --rm -e GITHUB_TOKEN=abc -e PLAIN ghcr.io/github/github-mcp-server",
                "docker run -i --rm -e GITHUB_TOKEN=<redacted> -e <redacted> ghcr.io/github/github-mcp-server",
            ),
            (
                "server ghp_abcdefghijklmnopqrstuvwxyz0123456789 API_KEY=x DEBUG=1",
                "server <redacted> API_KEY=<redacted> DEBUG=1",
            ),
            (
                "server -s --password --x --out=a8Fk2mQ9xL7pR3tZ5wB1",
                "server -s --password <redacted> --out=<redacted>",
            ),
            (
                "server eyJhbGciOiJIUzI1NiJ9.e30.sig sk-proj-0123456789abcdef mcp-server-everything-2024",
                "server <redacted> <redacted> mcp-server-everything-2024",
            ),
            (
                "server https://u:p@h/x?k=v 123e4567-e89b-12d3-a456-426614174000",
                "server https://<redacted>@h/x?k=<redacted> <redacted>",
            ),
        ];
        for (input, shown) in cases {
            assert_eq!(command_line(&argv(input), &none), shown, "{input}");
        }
    }
}
