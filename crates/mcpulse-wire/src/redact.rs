//! Keeping secrets out of everything mcpulse prints or stores.
//!
//! Credentials are redacted *by construction*: a header the user supplied is recorded as
//! [`REDACTED`] whatever its name, and URLs lose their userinfo and query values before they
//! reach a transcript or report.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
