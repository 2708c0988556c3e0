//! URI reference resolution (RFC 3986 §5): turning what a server names — a legacy SSE
//! `endpoint` event, a redirect's `Location`, an OAuth metadata URL — into the absolute URI to
//! request, with `./` and `../` removed the way every browser and HTTP client does.
//!
//! Written here on `http::Uri` rather than taken from the `url` crate: the algorithm is forty
//! lines of the RFC's own pseudocode, and `url` would bring IDNA and its Unicode tables (a dozen
//! crates) into every build for host names we never need to translate. It does not decide
//! whether a URI may be followed (schemes, the SSRF guard): that is [`crate::http`]'s.

use http::Uri;

/// A reference that does not resolve to a URI a request can go to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference:?}: {reason}")]
pub struct InvalidReference {
    pub reference: String,
    pub reason: String,
}

/// RFC 3986 unreserved characters: what a path segment keeps as is.
pub const UNRESERVED: &[u8] = b"-._~";
/// The unreserved and reserved characters and `%`: what a URI reference keeps as is.
pub const URI_CHARS: &[u8] = b"-._~:/?#[]@!$&'()*+,;=%";

/// Percent-encodes every byte of `s` but ASCII letters, digits and `keep` ([`UNRESERVED`]
/// for a path segment, [`URI_CHARS`] to make any text a valid URI reference).
pub fn percent_encode(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The scheme a reference names, if it is absolute (RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" /
/// "-" / "." ) ":"`). `file:/etc/passwd` and `gopher://h/x` have one; `/a:b` and `a/b:c` do not.
pub fn reference_scheme(reference: &str) -> Option<&str> {
    let reference = reference.trim();
    let end = reference.find(':')?;
    let scheme = &reference[..end];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// Resolves a possibly relative reference against a base URI (RFC 3986 §5.2.2). A fragment is
/// dropped: it is never sent in a request.
pub fn resolve(base: &Uri, reference: &str) -> Result<Uri, InvalidReference> {
    let reference = reference.trim();
    let r = Parts::split(reference);
    let base_scheme = base.scheme_str().unwrap_or("http");
    let base_authority = base.authority().map(|a| a.as_str());
    let (scheme, authority, path, query) = if let Some(scheme) = r.scheme {
        (scheme, r.authority, remove_dot_segments(r.path), r.query)
    } else if r.authority.is_some() {
        (
            base_scheme,
            r.authority,
            remove_dot_segments(r.path),
            r.query,
        )
    } else if r.path.is_empty() {
        (
            base_scheme,
            base_authority,
            base.path().to_owned(),
            r.query.or(base.query()),
        )
    } else if r.path.starts_with('/') {
        (
            base_scheme,
            base_authority,
            remove_dot_segments(r.path),
            r.query,
        )
    } else {
        let merged = merge(base.path(), base_authority.is_some(), r.path);
        (
            base_scheme,
            base_authority,
            remove_dot_segments(&merged),
            r.query,
        )
    };
    let mut out = format!("{scheme}:");
    if let Some(a) = authority {
        out.push_str("//");
        out.push_str(a);
    }
    out.push_str(&path);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out.parse::<Uri>().map_err(|e| InvalidReference {
        reference: reference.to_owned(),
        reason: e.to_string(),
    })
}

/// A reference's five parts (RFC 3986 Appendix B), the fragment left out.
struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn split(s: &'a str) -> Parts<'a> {
        let s = s.split_once('#').map_or(s, |(before, _)| before);
        let (scheme, rest) = match reference_scheme(s) {
            // `reference_scheme` trims; `s` already is, so the scheme is its prefix.
            Some(scheme) => (Some(scheme), &s[scheme.len() + 1..]),
            None => (None, s),
        };
        let (authority, rest) = match rest.strip_prefix("//") {
            Some(after) => {
                let end = after.find(['/', '?']).unwrap_or(after.len());
                (Some(&after[..end]), &after[end..])
            }
            None => (None, rest),
        };
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        Parts {
            scheme,
            authority,
            path,
            query,
        }
    }
}

/// RFC 3986 §5.2.3: a relative path joined to the base's directory.
fn merge(base_path: &str, has_authority: bool, path: &str) -> String {
    if has_authority && base_path.is_empty() {
        return format!("/{path}");
    }
    match base_path.rfind('/') {
        Some(i) => format!("{}{path}", &base_path[..=i]),
        None => path.to_owned(),
    }
}

/// RFC 3986 §5.2.4: `.` and `..` segments removed; `..` never climbs above the root.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path;
    let mut out = String::with_capacity(path.len());
    let pop = |out: &mut String| out.truncate(out.rfind('/').unwrap_or(0));
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest;
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") {
            input = &input[3..];
            pop(&mut out);
        } else if input == "/.." {
            input = "/";
            pop(&mut out);
        } else if input == "." || input == ".." {
            input = "";
        } else {
            // The first segment, with its leading `/` if it has one, moves to the output.
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |i| i + start);
            out.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(base: &str, reference: &str) -> String {
        resolve(&base.parse().unwrap(), reference)
            .unwrap()
            .to_string()
    }

    #[test]
    fn resolves_endpoint_references() {
        let base = "http://127.0.0.1:3001/sse";
        assert_eq!(
            join(base, "/message?sessionId=1"),
            "http://127.0.0.1:3001/message?sessionId=1"
        );
        assert_eq!(
            join(base, "messages?x=1"),
            "http://127.0.0.1:3001/messages?x=1"
        );
        assert_eq!(join(base, "https://o.example/p"), "https://o.example/p");
        assert_eq!(join("http://h/a/b/sse", "m"), "http://h/a/b/m");
        let base: Uri = base.parse().unwrap();
        assert!(resolve(&base, "http://bad host/").is_err());
        assert_eq!(
            resolve(&base, "http://bad host/").unwrap_err().to_string(),
            format!(
                "\"http://bad host/\": {}",
                "http://bad host/".parse::<Uri>().unwrap_err()
            ),
            "the message names the reference and why"
        );
    }

    /// The normal examples of RFC 3986 §5.4.1 (those an HTTP request can carry: no fragment,
    /// no `g;x` parameters), and the abnormal ones of §5.4.2 that apply.
    #[test]
    fn rfc_3986_examples() {
        let base = "http://a/b/c/d;p?q";
        for (reference, want) in [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q"),
            ("g#s", "http://a/b/c/g"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../", "http://a/"),
            ("../../g", "http://a/g"),
            // abnormal: `..` never climbs above the root
            ("../../../g", "http://a/g"),
            ("../../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            (".g", "http://a/b/c/.g"),
            ("g..", "http://a/b/c/g.."),
            ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"),
            ("./g/.", "http://a/b/c/g/"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("g?y/./x", "http://a/b/c/g?y/./x"),
            ("g?y/../x", "http://a/b/c/g?y/../x"),
            ("http:g", "http:g"),
        ] {
            // `http:g` is no URI a request can go to; the rest are.
            match resolve(&base.parse().unwrap(), reference) {
                Ok(u) => assert_eq!(u.to_string(), want, "{reference:?}"),
                Err(_) => assert_eq!(reference, "http:g"),
            }
        }
    }

    #[test]
    fn scheme_relative_and_absolute_references() {
        let base = "https://mcp.example.com/v1/sse";
        assert_eq!(
            join(base, "//other.example:8443/m?s=1"),
            "https://other.example:8443/m?s=1"
        );
        assert_eq!(
            join(base, "http://x.example/a/./b/../c"),
            "http://x.example/a/c"
        );
        assert_eq!(
            join(base, "../messages?sessionId=7"),
            "https://mcp.example.com/messages?sessionId=7"
        );
        assert_eq!(
            join(base, "?sessionId=7"),
            "https://mcp.example.com/v1/sse?sessionId=7"
        );
        // A base without a path: its path is the root.
        assert_eq!(join("http://h:1", "m"), "http://h:1/m");
        assert_eq!(join("http://h:1", "../m"), "http://h:1/m");
    }

    #[test]
    fn reference_schemes() {
        assert_eq!(reference_scheme("gopher://h:70/x"), Some("gopher"));
        assert_eq!(reference_scheme(" file:/etc/passwd"), Some("file"));
        assert_eq!(reference_scheme("svn+ssh://h/r"), Some("svn+ssh"));
        assert_eq!(reference_scheme("https://h/"), Some("https"));
        for relative in ["/a:b", "a/b:c", "//h:80/x", "?q=a:b", "1x:y", ""] {
            assert_eq!(reference_scheme(relative), None, "{relative}");
        }
    }
}
