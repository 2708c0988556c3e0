//! The API token: a bearer token (`[server] token`) in front of every route but the health
//! endpoints, compared in constant time.
//!
//! A browser cannot send a bearer header by itself, so the status page has a second way in: the
//! token typed once into `/login`, which sets a cookie (`HttpOnly`, `SameSite=Strict`,
//! `Path=/`, for the browser session) holding a digest of the token, never the token itself.
//! The cookie is accepted for `GET` and `HEAD` only (every protected route but
//! `POST …/accept` only reads, and that one takes a bearer alone), and is checked in constant
//! time like the bearer. `SameSite=Strict` keeps other sites' pages from sending it; `HttpOnly`
//! keeps it from the page's own script.
//!
//! This module does not own the routes ([`super::router`] decides which are protected) or the
//! token's configuration ([`crate::config`]).

use super::{ApiState, error};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The status page's cookie.
pub(super) const COOKIE: &str = "mcpulse_page";

/// How a request stands with the token.
enum Verdict {
    /// No token configured, a valid bearer, or a valid page cookie on a read.
    Allowed,
    /// A bearer (or cookie) that does not match.
    Invalid,
    /// Nothing was sent.
    Missing,
}

fn verdict(s: &ApiState, req: &Request) -> Verdict {
    let Some(expected) = s.with_config(|c| c.server.token.clone()) else {
        return Verdict::Allowed;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    if let Some(token) = given {
        return if same_secret(token, &expected) {
            Verdict::Allowed
        } else {
            Verdict::Invalid
        };
    }
    let read = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    match page_cookie(req.headers()) {
        Some(c) if read && same_secret(c, &cookie_value(&expected)) => Verdict::Allowed,
        Some(_) => Verdict::Invalid,
        None => Verdict::Missing,
    }
}

pub(super) async fn require_token(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    match verdict(&s, &req) {
        Verdict::Allowed => next.run(req).await,
        Verdict::Invalid => unauthorized("the bearer token is not valid"),
        Verdict::Missing => unauthorized(
            "this endpoint needs the API token: send Authorization: Bearer <token> (/livez and /readyz are open)",
        ),
    }
}

/// As [`require_token`], for the HTML pages: a refusal is the login form, not JSON.
pub(super) async fn require_token_page(
    State(s): State<ApiState>,
    req: Request,
    next: Next,
) -> Response {
    match verdict(&s, &req) {
        Verdict::Allowed => next.run(req).await,
        Verdict::Invalid => {
            super::page::login_page("The token is not valid (or has changed): enter it again.")
        }
        Verdict::Missing => super::page::login_page(""),
    }
}

/// The cookie's value for `token`: a digest, so that the cookie (which a browser stores on
/// disk) does not hold the token that the JSON API takes as a bearer.
pub(super) fn cookie_value(token: &str) -> String {
    let d = Sha256::digest(format!("mcpulse status page cookie\n{token}").as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The page cookie's value, from the `Cookie` headers.
fn page_cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim())
}

/// `POST /login`: the token typed into the form. Right: the cookie, and back to the fleet.
/// Wrong: the form again, 401. Without a configured token there is nothing to log in to.
pub(super) async fn login(
    State(s): State<ApiState>,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(expected) = s.with_config(|c| c.server.token.clone()) else {
        return see_other("/", None);
    };
    match form {
        Ok(axum::Form(f)) if same_secret(f.token.trim(), &expected) => see_other(
            "/",
            Some(format!(
                "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
                cookie_value(&expected)
            )),
        ),
        _ => super::page::login_page("The token is not valid."),
    }
}

/// The login form's one field.
#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

fn see_other(to: &'static str, cookie: Option<String>) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    let h = r.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_static(to));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(c) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, c);
    }
    r
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

    #[test]
    fn page_cookies() {
        let mut h = axum::http::HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; mcpulse_page=xyz ; b=2"),
        );
        assert_eq!(page_cookie(&h), Some("xyz"));
        assert_eq!(page_cookie(&axum::http::HeaderMap::new()), None);
        assert_ne!(cookie_value("s3cret"), "s3cret");
        assert_eq!(cookie_value("s3cret").len(), 64);
        assert_ne!(cookie_value("s3cret"), cookie_value("s3cre7"));
    }
}
