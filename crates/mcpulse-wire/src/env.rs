//! `${VAR}` in settings, read from the environment: how secrets stay out of command lines and
//! config files. One expander for the CLI's `--header` values and the monitor's config.

/// Expands `${VAR}` with `env`; `$$` is a literal `$`, and a `$` before anything else is kept.
/// The error says which variable is missing or what is malformed.
pub fn expand(v: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some(a) = after.strip_prefix('{') {
            let end = a.find('}').ok_or("unclosed ${ (write ${VAR})")?;
            let var = &a[..end];
            if var.is_empty() {
                return Err("empty ${} (write ${VAR})".into());
            }
            let val =
                env(var).ok_or_else(|| format!("the environment variable {var} is not set"))?;
            out.push_str(&val);
            rest = &a[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
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
        assert!(expand("${NOPE}", &env).unwrap_err().contains("NOPE"));
        assert!(expand("${TOKEN", &env).is_err());
        assert!(expand("${}", &env).is_err());
        assert!(is_header_name("X-Api-Key"));
        assert!(!is_header_name("Bad Name"));
        assert!(!is_header_name(""));
    }
}
