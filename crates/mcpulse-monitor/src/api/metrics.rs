//! `/metrics`: the fleet in Prometheus text or OpenMetrics, as the `Accept` header asks; and
//! the exposition response `/probe` shares.
//!
//! This module does not render the metrics ([`crate::metrics`] does).

use super::{ApiState, text_error};
use crate::metrics::{self, Format};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub(super) fn exposition(format: Format, text: Result<String, std::fmt::Error>) -> Response {
    match text {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, format.content_type())],
            body,
        )
            .into_response(),
        Err(_) => text_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed",
        ),
    }
}

pub(super) fn accepted_format(headers: &HeaderMap) -> Format {
    Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

pub(super) async fn metrics_handler(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    let format = accepted_format(&headers);
    exposition(format, metrics::fleet(s.fleet.snapshot(), format))
}
