//! The SSRF guard (`HttpClient::deny_private`), on a real socket: while it is set, a metadata
//! fetch to a non-public address is refused before any connection is made, with the message the
//! judge's `metadata-private-address` rule keys on ("non-public address").
//!
//! The probe sets the guard only when the target itself was reached on a public address, which
//! a loopback-only test cannot arrange end to end; so the guard is shown here on a loopback
//! listener, and the rule on a hand-written transcript (mcpulse-judge's tests/security_rules.rs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::RawListener;
use mcpulse_transport::Limits;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::HttpClient;
use mcpulse_transport::streamable_http::get_document;
use mcpulse_wire::transcript::{ErrorKind, Outcome, Step};
use std::time::Duration;
use tokio::time::Instant;

const LIMITS: Limits = Limits {
    max_response_bytes: 1 << 20,
};

/// A listener that answers every connection with a tiny JSON document, counting connections.
async fn listener() -> RawListener {
    RawListener::start(
        "127.0.0.1",
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    )
    .await
}

/// A listener that answers every connection with a redirect to `location`.
async fn redirecting(location: &str) -> RawListener {
    RawListener::start(
        "127.0.0.1",
        format!(
            "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
    )
    .await
}

#[tokio::test]
async fn a_guarded_fetch_to_a_private_address_is_refused_without_connecting() {
    let server = listener().await;
    let uri: http::Uri = format!(
        "http://{}/.well-known/oauth-protected-resource",
        server.addr()
    )
    .parse()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);

    let mut client = HttpClient::new(Clock::start());
    client.deny_private = true;
    let ex = get_document(&mut client, &uri, Step::ResourceMetadata, LIMITS, deadline).await;
    match &ex.outcome {
        Outcome::TransportError { cause, message } => {
            assert_eq!(*cause, ErrorKind::NonPublicAddress);
            assert!(message.contains("non-public address"), "{message}");
            assert!(message.contains("127.0.0.1"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(ex.response, None);
    assert_eq!(server.connections(), 0, "no connection is made");
    assert_eq!(client.connections.len(), 1);
    assert_eq!(client.connections[0].addr, None);

    // The same fetch without the guard (a loopback or private target may name its own
    // network's metadata) goes through.
    let mut client = HttpClient::new(Clock::start());
    let ex = get_document(&mut client, &uri, Step::ResourceMetadata, LIMITS, deadline).await;
    assert_eq!(ex.status(), Some(200), "{ex:?}");
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_host_name_is_checked_after_resolution() {
    // The check is on the resolved addresses, not on the name: `localhost` (resolved through
    // /etc/hosts, no DNS traffic) is refused like 127.0.0.1, and so would be any public-looking
    // name that a rebinding DNS server points at a private address.
    let server = listener().await;
    let uri: http::Uri = format!("http://localhost:{}/doc", server.addr().port())
        .parse()
        .unwrap();
    let mut client = HttpClient::new(Clock::start());
    client.deny_private = true;
    let deadline = Instant::now() + Duration::from_secs(5);
    let ex = get_document(
        &mut client,
        &uri,
        Step::AuthServerMetadata,
        LIMITS,
        deadline,
    )
    .await;
    assert!(
        matches!(&ex.outcome, Outcome::TransportError { cause: ErrorKind::NonPublicAddress, message } if message.contains("non-public address")),
        "{:?}",
        ex.outcome
    );
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_redirect_to_another_scheme_is_refused_without_connecting() {
    // A listener on the port a `gopher://` redirect names: before the fix, the redirect was
    // followed as plain HTTP and this listener saw a connection.
    let gopher = listener().await;
    let at = gopher.addr();
    for location in [
        format!("gopher://{at}/x"),
        format!("GOPHER://{at}/x"),
        format!("ftp://{at}/x"),
    ] {
        let server = redirecting(&location).await;
        let uri: http::Uri = format!("http://{}/doc", server.addr()).parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut client = HttpClient::new(Clock::start());
        let ex = get_document(&mut client, &uri, Step::ResourceMetadata, LIMITS, deadline).await;
        match &ex.outcome {
            Outcome::TransportError { cause, message } => assert!(
                *cause == ErrorKind::RedirectRefused
                    && message.contains(&format!("redirect to {location} refused"))
                    && message.contains("only http and https are followed"),
                "{message}"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // The redirect is in the record, where it pointed included.
        assert_eq!(ex.redirects.len(), 1, "{ex:?}");
        assert_eq!(ex.redirects[0].status, 302);
        assert_eq!(ex.redirects[0].location, location);
        assert_eq!(server.connections(), 1);
        assert_eq!(
            client.connections.len(),
            1,
            "only the first request connected"
        );
    }
    assert_eq!(
        gopher.connections(),
        0,
        "the redirect's target never sees a connection"
    );
}

#[tokio::test]
async fn a_redirect_to_http_is_still_followed() {
    // The refusal is about the scheme: an http redirect goes through, in any case.
    let target = listener().await;
    let at = target.addr();
    for location in [format!("http://{at}/doc"), format!("HTTP://{at}/doc")] {
        let server = redirecting(&location).await;
        let uri: http::Uri = format!("http://{}/start", server.addr()).parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut client = HttpClient::new(Clock::start());
        let ex = get_document(&mut client, &uri, Step::ResourceMetadata, LIMITS, deadline).await;
        assert_eq!(ex.status(), Some(200), "{ex:?}");
        assert_eq!(ex.redirects.len(), 1);
    }
    assert_eq!(target.connections(), 2);
}
