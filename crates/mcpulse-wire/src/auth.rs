//! Reading `WWW-Authenticate` challenges (RFC 9110 §11.6.1, RFC 6750 §3, RFC 9728 §5.1).

/// One challenge: the scheme and its `name=value` parameters (quoted strings unquoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a `WWW-Authenticate` value into its challenges. Tolerant: what it cannot read it
/// skips, and it never panics.
pub fn parse_challenges(header: &str) -> Vec<Challenge> {
    let mut out: Vec<Challenge> = Vec::new();
    let mut rest = header.trim();
    while !rest.is_empty() {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        if rest.is_empty() {
            break;
        }
        // A token followed by '=' is a parameter of the current challenge; otherwise a scheme.
        let tok_end = rest
            .find(|c: char| c == '=' || c == ',' || c.is_whitespace())
            .unwrap_or(rest.len());
        let token = &rest[..tok_end];
        let after = rest[tok_end..].trim_start();
        if after.starts_with('=') && !out.is_empty() && !after.starts_with("==") {
            let value_part = after[1..].trim_start();
            let (value, remaining) = if let Some(q) = value_part.strip_prefix('"') {
                let mut v = String::new();
                let mut chars = q.char_indices();
                let mut end = q.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, n)) = chars.next() {
                                v.push(n);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        _ => v.push(c),
                    }
                }
                (v, &q[end.min(q.len())..])
            } else {
                let e = value_part.find(',').unwrap_or(value_part.len());
                (value_part[..e].trim().to_owned(), &value_part[e..])
            };
            if let Some(last) = out.last_mut() {
                last.params.push((token.to_owned(), value));
            }
            rest = remaining;
        } else {
            if token.is_empty() {
                break;
            }
            out.push(Challenge {
                scheme: token.to_owned(),
                params: Vec::new(),
            });
            rest = &rest[tok_end..];
        }
    }
    out
}

/// The `resource_metadata` URL of the first challenge that has one.
pub fn resource_metadata(header: &str) -> Option<String> {
    parse_challenges(header)
        .into_iter()
        .find_map(|c| c.param("resource_metadata").map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_with_metadata_and_scope() {
        let h = r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="files:read files:write""#;
        let c = parse_challenges(h);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "Bearer");
        assert_eq!(c[0].param("scope"), Some("files:read files:write"));
        assert_eq!(
            resource_metadata(h).as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
    }

    #[test]
    fn several_challenges_and_garbage() {
        let c = parse_challenges(
            r#"Basic realm="x", Bearer error="invalid_token", error_description="a \"q\"""#,
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].param("error_description"), Some("a \"q\""));
        assert_eq!(parse_challenges("Bearer").len(), 1);
        for junk in [
            "",
            "=",
            "\"",
            "a=\"unterminated",
            ",,,",
            "Bearer ==x",
            "é=ü",
        ] {
            let _ = parse_challenges(junk);
        }
    }
}
