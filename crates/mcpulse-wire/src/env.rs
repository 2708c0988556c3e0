//! `${VAR}` in settings, read from the environment: how secrets stay out of command lines and
//! config files. One expander for the CLI's `--header` values and the monitor's config.

use crate::redact::Secrets;

/// A value after expansion, and the values it took from the environment: those are secret
/// wherever the value goes (a URL's path, an argument), so displays hide them.
#[derive(Clone, PartialEq, Eq)]
pub struct Expanded {
    pub value: String,
    pub secrets: Secrets,
}

impl Expanded {
    /// The value as it may be shown: what came from the environment is `<redacted>`.
    pub fn display(&self) -> String {
        self.secrets.hide(&self.value)
    }
}

impl std::fmt::Debug for Expanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.display())
    }
}

/// Why a value could not be expanded. The messages are user-facing (the CLI's `--header` and
/// the monitor's config errors embed them), so they stay as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// `${` without its `}`.
    #[error("unclosed ${{ (write ${{VAR}})")]
    Unclosed,
    /// `${}`.
    #[error("empty ${{}} (write ${{VAR}})")]
    Empty,
    /// `${VAR}` where the environment has no `VAR`.
    #[error("the environment variable {0} is not set")]
    Unset(String),
}

/// Expands `${VAR}` with `env`; `$$` is a literal `$`, and a `$` before anything else is kept.
/// The error says which variable is missing or what is malformed.
pub fn expand(v: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    expand_marked(v, env).map(|e| e.value)
}

/// [`expand`], remembering what came from the environment.
pub fn expand_marked(
    v: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Expanded, ExpandError> {
    let mut secrets = Secrets::default();
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some(a) = after.strip_prefix('{') {
            let end = a.find('}').ok_or(ExpandError::Unclosed)?;
            let var = &a[..end];
            if var.is_empty() {
                return Err(ExpandError::Empty);
            }
            let val = env(var).ok_or_else(|| ExpandError::Unset(var.to_owned()))?;
            out.push_str(&val);
            secrets.add(&val);
            rest = &a[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(Expanded {
        value: out,
        secrets,
    })
}

/// Whether `name` is an RFC 9110 token, as an HTTP header name must be.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "TOKEN").then(|| "t0k".to_owned())
    }

    #[test]
    fn expansion() {
        assert_eq!(expand("Bearer ${TOKEN}", &env).unwrap(), "Bearer t0k");
        assert_eq!(expand("$$5 and $x", &env).unwrap(), "$5 and $x");
        let unset = expand("${NOPE}", &env).unwrap_err();
        assert_eq!(unset, ExpandError::Unset("NOPE".into()));
        assert_eq!(
            unset.to_string(),
            "the environment variable NOPE is not set"
        );
        let unclosed = expand("${TOKEN", &env).unwrap_err();
        assert_eq!(unclosed.to_string(), "unclosed ${ (write ${VAR})");
        assert_eq!(
            expand("${}", &env).unwrap_err().to_string(),
            "empty ${} (write ${VAR})"
        );
        let e = expand_marked("http://h/ok/${TOKEN}?q=${TOKEN}", &env).unwrap();
        assert_eq!(e.value, "http://h/ok/t0k?q=t0k");
        assert_eq!(e.display(), "http://h/ok/<redacted>?q=<redacted>");
        assert!(!format!("{e:?}").contains("t0k"));
        assert!(is_header_name("X-Api-Key"));
        assert!(!is_header_name("Bad Name"));
        assert!(!is_header_name(""));
    }
}
