//! The API token: a read-only bearer token (`[server] token`) in front of every route but the
//! health endpoints, compared in constant time.
//!
//! This module does not own the routes ([`super::router`] decides which are protected) or the
//! token's configuration ([`crate::config`]).

use super::{ApiState, error};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};

pub(super) async fn require_token(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(expected) = s.with_config(|c| c.server.token.clone()) else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match given {
        Some(token) if same_secret(token, &expected) => next.run(req).await,
        Some(_) => unauthorized("the bearer token is not valid"),
        None => unauthorized(
            "this endpoint needs the API token: send Authorization: Bearer <token> (/livez and /readyz are open)",
        ),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut r = error(StatusCode::UNAUTHORIZED, message);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mcpulse\""),
    );
    r
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares two secrets in constant time. Both are hashed first, so neither the position of
/// the first difference nor the length of the expected token shows in the timing.
fn same_secret(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("ab", "abc"));
    }
}
