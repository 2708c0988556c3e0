//! `/api/v1/targets/{name}/history?limit=&before=`: a target's checks, newest first,
//! keyset-paged (410 for a cursor that is gone).
//!
//! This module does not own the history (the store, reached through [`super::HistorySource`]).

use super::fleet::{target_name, unknown_target};
use super::{ApiState, DEFAULT_PAGE, MAX_PAGE, error};
use crate::check::HistoryRow;
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug, Serialize)]
struct HistoryBody {
    target: String,
    limit: usize,
    before: Option<i64>,
    items: Vec<HistoryRow>,
    /// The `before` of the next (older) page; `null` on the last page.
    next_before: Option<i64>,
    /// The next page's path and query; `null` on the last page.
    next: Option<String>,
}

pub(super) async fn history_handler(
    State(s): State<ApiState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let name = match target_name(p) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let pairs = match q {
        Ok(Query(p)) => p,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the query string is malformed: {e}"),
            );
        }
    };
    let mut limit = DEFAULT_PAGE;
    let mut before = None;
    for (k, v) in pairs {
        match k.as_str() {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("limit {v:?} must be a whole number from 1 to {MAX_PAGE}"),
                    );
                }
            },
            "before" => match v.parse::<i64>() {
                Ok(n) => before = Some(n),
                Err(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "before {v:?} must be a check id (the next_before of the previous page)"
                        ),
                    );
                }
            },
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter {other:?}: use limit and before"),
                );
            }
        }
    }
    if !s.fleet.contains(&name) {
        return unknown_target(&name);
    }
    let history = s.history.clone();
    let target = name.clone();
    // One row more than asked tells whether another page exists.
    let rows =
        tokio::task::spawn_blocking(move || history.history(&target, before, limit + 1)).await;
    let mut items = match rows {
        Ok(Ok(Some(rows))) => rows,
        // An empty page here would end the client's paging as if it had reached the oldest
        // check; 410 says the cursor is gone and what to do.
        Ok(Ok(None)) => {
            return error(
                StatusCode::GONE,
                format!(
                    "before={} is not a check in the history of {name:?}: it was pruned (checks older than the retention are deleted, and the ones before it with it) or is not one of this target's checks; page again from the newest, without before",
                    before.unwrap_or_default()
                ),
            );
        }
        Ok(Err(e)) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the history store failed: {e}"),
            );
        }
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the history failed: {e}"),
            );
        }
    };
    let more = items.len() > limit;
    items.truncate(limit);
    let next_before = if more {
        items.last().map(|r| r.id)
    } else {
        None
    };
    let next = next_before.map(|b| {
        format!(
            "/api/v1/targets/{}/history?limit={limit}&before={b}",
            encode_segment(&name)
        )
    });
    Json(HistoryBody {
        target: name,
        limit,
        before,
        items,
        next_before,
        next,
    })
    .into_response()
}

/// Percent-encodes a path segment (everything but RFC 3986 unreserved characters).
fn encode_segment(s: &str) -> String {
    use mcpulse_transport::reference::{UNRESERVED, percent_encode};
    percent_encode(s, UNRESERVED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("files-1.x"), "files-1.x");
    }
}
