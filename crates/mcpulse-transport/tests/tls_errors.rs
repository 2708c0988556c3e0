//! A rejected certificate is told as a sentence a person can act on, not as rustls's debug text
//! (`invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))`): real handshakes on
//! loopback against certificates made at test time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::FakeHttp;
use mcpulse_testkit::posture::Posture;
use mcpulse_testkit::tls::{ServerCert, TestCa, self_signed_ca_cert};
use mcpulse_transport::Limits;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{CertificateDer, HttpClient};
use mcpulse_transport::streamable_http::get_document;
use mcpulse_wire::transcript::{ConnectStage, ErrorKind, Outcome, Step};
use std::time::Duration;
use tokio::time::Instant;

const LIMITS: Limits = Limits {
    max_response_bytes: 1 << 20,
};

/// Serves `cert` on loopback, connects to `host` at its port trusting `roots` (PEM) only, and
/// returns the TLS failure's message.
async fn tls_failure(cert: &ServerCert, roots: &str, host: &str) -> String {
    let server = FakeHttp::start_tls(Posture::secure().script(), TestCa::server_config(cert)).await;
    let uri: http::Uri = format!("https://{host}:{}/mcp", server.addr().port())
        .parse()
        .unwrap();
    let roots = mcpulse_transport::http::read_pem_certs(roots.as_bytes())
        .unwrap()
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let mut client = HttpClient::new(Clock::start()).with_roots(roots);
    let deadline = Instant::now() + Duration::from_secs(5);
    let ex = get_document(&mut client, &uri, Step::ResourceMetadata, LIMITS, deadline).await;
    assert!(
        matches!(&ex.outcome, Outcome::TransportError { cause: ErrorKind::Tls, message } if message.starts_with("TLS handshake failed: ")),
        "{:?}",
        ex.outcome
    );
    let error = client.connections[0].error.clone().unwrap();
    assert_eq!(error.stage, ConnectStage::Tls);
    assert!(server.requests().is_empty());
    for raw in [
        "Other(",
        "OtherError",
        "Context",
        "invalid peer certificate",
    ] {
        assert!(!error.message.contains(raw), "{}", error.message);
    }
    error.message
}

#[tokio::test]
async fn a_self_signed_ca_certificate() {
    let (cert, pem) = self_signed_ca_cert();
    // Trusted or not, a CA certificate is refused as a server's own.
    for roots in [pem.as_str(), TestCa::new().pem()] {
        let m = tls_failure(&cert, roots, "127.0.0.1").await;
        assert!(
            m.contains("a CA certificate used as the server's own")
                && m.contains("basicConstraints CA:FALSE"),
            "{m}"
        );
    }
}

#[tokio::test]
async fn an_unknown_issuer() {
    // Trusting only a root of another name: the issuer is not found.
    let cert = TestCa::new().server_cert(90);
    let (_, other) = self_signed_ca_cert();
    let m = tls_failure(&cert, &other, "127.0.0.1").await;
    assert!(
        m.contains("not signed by a trusted certificate authority") && m.contains("--ca-file FILE"),
        "{m}"
    );
}

#[tokio::test]
async fn an_expired_certificate() {
    let ca = TestCa::new();
    let m = tls_failure(&ca.server_cert(-2), ca.pem(), "127.0.0.1").await;
    assert_eq!(m, "the server's certificate expired 2 days ago; renew it");
}

#[tokio::test]
async fn a_certificate_for_another_name() {
    let ca = TestCa::new();
    let cert = ca.server_cert_for(&["mcp.example.com"], 90);
    let m = tls_failure(&cert, ca.pem(), "127.0.0.1").await;
    assert_eq!(
        m,
        "the server's certificate is for mcp.example.com and not for 127.0.0.1; connect with a \
         name it lists, or reissue it with 127.0.0.1 in its subject alternative names"
    );
    assert!(m.contains("subject alternative names"), "{m}");
}

#[tokio::test]
async fn a_certificate_from_another_ca_of_the_same_name() {
    // Two CAs named alike (a re-made CA, say): the issuer is found by name, and its signature
    // does not verify.
    let cert = TestCa::new().server_cert(90);
    let m = tls_failure(&cert, TestCa::new().pem(), "127.0.0.1").await;
    assert!(m.contains("does not verify"), "{m}");
}
