//! A small HTTP/1.1 client on hyper's connection API.
//!
//! Why not a convenience client: a prober must see what those hide. Per connection we time DNS,
//! TCP connect and the TLS handshake separately (the phases blackbox_exporter reports); per
//! request we keep the raw status and headers and the time to the response head; bodies are read
//! under a byte cap and a deadline by the caller. One connection is kept alive and reused for the
//! POSTs of a probe, as a real client would; a legacy SSE stream gets a connection of its own.
//!
//! Credentials are redacted by construction: headers the user supplied travel separately from
//! protocol headers and are recorded as `<redacted>`, and they are dropped when a redirect leaves
//! the target's origin.

use crate::clock::Clock;
use bytes::Bytes;
use http::{Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use mcpulse_wire::redact;
use mcpulse_wire::transcript::{ConnectError, ConnectStage, Connection, ErrorKind, Redirect};
pub use rustls::pki_types::CertificateDer;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

/// The most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 5;

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Why a request got no response head.
#[derive(Debug, Clone)]
pub enum SendError {
    /// DNS, connect, TLS or the HTTP exchange failed; already recorded as a connection.
    Connect(ConnectError),
    /// The deadline passed first.
    Timeout,
    /// The request could not even be built (a bad URL from a server's `endpoint` event).
    Invalid(String),
    /// More than [`MAX_REDIRECTS`], a loop, or a scheme not followed.
    Redirects(RedirectError),
}

impl SendError {
    /// The kind recorded in the transcript, for checks to match.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SendError::Connect(e) => e.kind(),
            SendError::Timeout => ErrorKind::Unknown,
            SendError::Invalid(_) => ErrorKind::InvalidRequest,
            SendError::Redirects(r) => r.kind(),
        }
    }
}

/// A redirect chain not followed to its end.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedirectError {
    #[error("more than {MAX_REDIRECTS} redirects; last to {location}")]
    TooMany { location: String },
    #[error("redirect to {location} refused: only http and https are followed, not {scheme}:")]
    Scheme { location: String, scheme: String },
    #[error("redirect loop back to {url}")]
    Loop { url: String },
    #[error("redirect to {location} refused: it leaves the origin {origin}")]
    OffOrigin { location: String, origin: String },
}

impl RedirectError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            RedirectError::TooMany { .. } => ErrorKind::TooManyRedirects,
            RedirectError::Scheme { .. } => ErrorKind::RedirectRefused,
            RedirectError::Loop { .. } => ErrorKind::RedirectLoop,
            RedirectError::OffOrigin { .. } => ErrorKind::RedirectRefused,
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Connect(e) => {
                let stage = match e.stage {
                    ConnectStage::Dns => "DNS lookup failed",
                    ConnectStage::Connect => "connection failed",
                    ConnectStage::Tls => "TLS handshake failed",
                    ConnectStage::Http => "HTTP exchange failed",
                };
                write!(f, "{stage}: {}", e.message)
            }
            SendError::Timeout => f.write_str("timed out waiting for the response"),
            SendError::Invalid(m) => write!(f, "invalid request: {m}"),
            SendError::Redirects(r) => r.fmt(f),
        }
    }
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Outgoing<'a> {
    pub method: Method,
    pub uri: Uri,
    /// Protocol headers: recorded as they are.
    pub headers: Vec<(String, String)>,
    /// Headers the user supplied (credentials): sent, recorded redacted, dropped off-origin.
    pub user_headers: &'a [(String, String)],
    pub body: Option<String>,
}

impl Outgoing<'_> {
    /// The headers as they go into a transcript.
    pub fn recorded_headers(&self) -> Vec<(String, String)> {
        let mut h = self.headers.clone();
        h.extend(
            self.user_headers
                .iter()
                .map(|(k, _)| (k.clone(), redact::REDACTED.to_owned())),
        );
        h
    }
}

/// The scheme, host and port of a URI: what a connection is for.
pub fn origin(uri: &Uri) -> String {
    format!(
        "{}://{}:{}",
        uri.scheme_str().unwrap_or("http"),
        uri.host().unwrap_or(""),
        port_of(uri)
    )
}

fn port_of(uri: &Uri) -> u16 {
    uri.port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        })
}

pub use crate::reference::{InvalidReference, reference_scheme, resolve};

/// The client: a clock, a lazily built TLS configuration, one kept-alive connection, and the
/// record of every connection made.
pub struct HttpClient {
    clock: Clock,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Extra trusted roots (`--ca-file`), DER.
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Refuse to connect to loopback, private, link-local and other non-public addresses:
    /// set while following metadata URLs named by a public server (SSRF guard).
    pub deny_private: bool,
    /// What `deny_private` lets through: [`is_public`]. Every connection, the first and each
    /// redirect's, passes this one check. (A field so that this module's tests can tell two
    /// loopback addresses apart; nothing else sets it.)
    public: fn(IpAddr) -> bool,
    /// Follow redirects within the first request's origin only (a health endpoint's: what it
    /// says about another host is not this server's health, and the request must not be
    /// steered elsewhere).
    pub same_origin_only: bool,
    idle: Option<(String, SendRequest<Full<Bytes>>)>,
    /// Every connection attempt, in order; the probe moves these into the transcript.
    pub connections: Vec<Connection>,
}

impl HttpClient {
    pub fn new(clock: Clock) -> Self {
        HttpClient {
            clock,
            tls: None,
            extra_roots: Vec::new(),
            deny_private: false,
            public: is_public,
            same_origin_only: false,
            idle: None,
            connections: Vec::new(),
        }
    }

    /// A client of its own (its own connections and records) that shares this one's clock
    /// and TLS configuration: for requests sent concurrently.
    /// (A client that has made a TLS connection has its configuration built; forks share it
    /// instead of loading the system roots again.)
    pub fn fork(&self) -> HttpClient {
        HttpClient {
            clock: self.clock,
            tls: self.tls.clone(),
            extra_roots: self.extra_roots.clone(),
            deny_private: self.deny_private,
            public: self.public,
            same_origin_only: self.same_origin_only,
            idle: None,
            connections: Vec::new(),
        }
    }

    /// Also trusts these roots (DER), e.g. a private CA from `--ca-file`.
    pub fn with_roots(mut self, roots: Vec<rustls::pki_types::CertificateDer<'static>>) -> Self {
        self.extra_roots = roots;
        self
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Sends a request, following same-method redirects (307/308, and any for GET) up to
    /// [`MAX_REDIRECTS`]. `pooled` requests share the kept-alive connection; others (a
    /// long-lived SSE stream) get their own.
    pub async fn send(
        &mut self,
        out: &Outgoing<'_>,
        pooled: bool,
        deadline: Instant,
        redirects: &mut Vec<Redirect>,
    ) -> Result<Response<Incoming>, SendError> {
        let first_origin = origin(&out.uri);
        let mut uri = out.uri.clone();
        let mut seen = vec![uri.to_string()];
        loop {
            let keep_user_headers = origin(&uri) == first_origin;
            let resp = self
                .send_once(out, &uri, keep_user_headers, pooled, deadline)
                .await?;
            let status = resp.status().as_u16();
            let follow = match status {
                307 | 308 => true,
                301..=303 => out.method == Method::GET,
                _ => false,
            };
            let location = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let (true, Some(location)) = (follow, location) else {
                return Ok(resp);
            };
            redirects.push(Redirect {
                status,
                location: redact::url(&location),
            });
            if redirects.len() > MAX_REDIRECTS {
                return Err(SendError::Redirects(RedirectError::TooMany {
                    location: redact::url(&location),
                }));
            }
            // Only http and https are followed: anything else (`gopher://`, `file:`, `ftp://`)
            // would otherwise be spoken to as plain HTTP on whatever port it names. The
            // redirect is recorded above, so the transcript shows where it pointed.
            let scheme = reference_scheme(&location).map(str::to_ascii_lowercase);
            if let Some(scheme) = scheme.filter(|s| s != "http" && s != "https") {
                return Err(SendError::Redirects(RedirectError::Scheme {
                    location: redact::url(location.trim()),
                    scheme,
                }));
            }
            let next = resolve(&uri, &location).map_err(|e| SendError::Invalid(e.to_string()))?;
            if self.same_origin_only && origin(&next) != first_origin {
                return Err(SendError::Redirects(RedirectError::OffOrigin {
                    location: redact::url(&next.to_string()),
                    origin: first_origin,
                }));
            }
            if seen.contains(&next.to_string()) {
                return Err(SendError::Redirects(RedirectError::Loop {
                    url: redact::url(&next.to_string()),
                }));
            }
            seen.push(next.to_string());
            // Drain nothing: the connection that carried the redirect is dropped, not reused.
            self.idle = None;
            uri = next;
        }
    }

    async fn send_once(
        &mut self,
        out: &Outgoing<'_>,
        uri: &Uri,
        user_headers: bool,
        pooled: bool,
        deadline: Instant,
    ) -> Result<Response<Incoming>, SendError> {
        let key = origin(uri);
        // A kept-alive connection may have been closed by the server; one retry on a new one.
        if pooled
            && let Some((k, mut sender)) = self.idle.take()
            && k == key
            && timeout_at(deadline, sender.ready())
                .await
                .is_ok_and(|r| r.is_ok())
        {
            match timeout_at(
                deadline,
                sender.send_request(build(out, uri, user_headers)?),
            )
            .await
            {
                Err(_) => return Err(SendError::Timeout),
                Ok(Ok(resp)) => {
                    self.idle = Some((k, sender));
                    return Ok(resp);
                }
                Ok(Err(_)) => {} // stale connection: fall through to a fresh one
            }
        }
        let mut sender = self.connect(uri, deadline).await?;
        let resp = match timeout_at(
            deadline,
            sender.send_request(build(out, uri, user_headers)?),
        )
        .await
        {
            Err(_) => return Err(SendError::Timeout),
            Ok(Err(e)) => {
                let err = ConnectError {
                    stage: ConnectStage::Http,
                    cause: ErrorKind::Unknown,
                    message: error_chain(&e),
                };
                return Err(SendError::Connect(err));
            }
            Ok(Ok(resp)) => resp,
        };
        if pooled {
            self.idle = Some((key, sender));
        }
        Ok(resp)
    }

    /// Opens a connection, recording DNS, connect and TLS timings or the stage that failed.
    /// Public for clients that keep their own pool of connections (the gateway's HTTP
    /// upstream), so that they dial, time and speak TLS exactly as the probe does; such a
    /// caller clears [`HttpClient::connections`] itself.
    pub async fn connect(
        &mut self,
        uri: &Uri,
        deadline: Instant,
    ) -> Result<SendRequest<Full<Bytes>>, SendError> {
        let host = uri
            .host()
            .unwrap_or("")
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = port_of(uri);
        let tls = uri.scheme_str() == Some("https");
        let mut rec = Connection {
            at_ms: self.clock.at(),
            authority: format!("{}:{port}", uri.host().unwrap_or("")),
            addr: None,
            tls,
            dns_ms: None,
            connect_ms: None,
            tls_ms: None,
            cert_not_before: None,
            cert_not_after: None,
            error: None,
        };
        let result = self
            .connect_recorded(&host, port, tls, deadline, &mut rec)
            .await;
        if let Err(SendError::Connect(e)) = &result {
            rec.error = Some(e.clone());
        }
        self.connections.push(rec);
        result
    }

    async fn connect_recorded(
        &mut self,
        host: &str,
        port: u16,
        tls: bool,
        deadline: Instant,
        rec: &mut Connection,
    ) -> Result<SendRequest<Full<Bytes>>, SendError> {
        let fail = |stage, message: String| {
            SendError::Connect(ConnectError {
                stage,
                cause: ErrorKind::Unknown,
                message,
            })
        };
        // DNS
        let t = Instant::now();
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => match timeout_at(deadline, tokio::net::lookup_host((host, port))).await {
                Err(_) => return Err(SendError::Timeout),
                Ok(Err(e)) => return Err(fail(ConnectStage::Dns, format!("{host}: {e}"))),
                Ok(Ok(a)) => a.collect(),
            },
        };
        rec.dns_ms = Some(self.clock.since(t));
        if addrs.is_empty() {
            return Err(fail(ConnectStage::Dns, format!("{host}: no addresses")));
        }
        if self.deny_private
            && let Some(a) = addrs.iter().find(|a| !(self.public)(a.ip()))
        {
            return Err(SendError::Connect(ConnectError {
                stage: ConnectStage::Connect,
                cause: ErrorKind::NonPublicAddress,
                message: format!(
                    "refused: {host} resolves to the non-public address {}, and a public server may not point mcpulse there",
                    a.ip()
                ),
            }));
        }
        // TCP: each address in turn.
        let t = Instant::now();
        let mut last_err = String::new();
        let mut stream = None;
        for addr in &addrs {
            match timeout_at(deadline, TcpStream::connect(addr)).await {
                Err(_) => return Err(SendError::Timeout),
                Ok(Ok(s)) => {
                    rec.addr = Some(addr.to_string());
                    stream = Some(s);
                    break;
                }
                Ok(Err(e)) if addrs.len() > 1 => last_err = format!("{addr}: {e}"),
                Ok(Err(e)) => last_err = e.to_string(),
            }
        }
        let Some(tcp) = stream else {
            return Err(fail(ConnectStage::Connect, last_err));
        };
        rec.connect_ms = Some(self.clock.since(t));
        let _ = tcp.set_nodelay(true);
        // TLS
        let io: Box<dyn Io> = if tls {
            let t = Instant::now();
            let config = self
                .tls_config()
                .map_err(|e| fail(ConnectStage::Tls, e.to_string()))?;
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| fail(ConnectStage::Tls, format!("{host}: {e}")))?;
            let connector = tokio_rustls::TlsConnector::from(config);
            let s = match timeout_at(deadline, connector.connect(name, tcp)).await {
                Err(_) => return Err(SendError::Timeout),
                Ok(Err(e)) => return Err(fail(ConnectStage::Tls, tls_failure(&e, host))),
                Ok(Ok(s)) => s,
            };
            rec.tls_ms = Some(self.clock.since(t));
            if let Some(v) = s
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| mcpulse_wire::x509::validity(c.as_ref()))
            {
                rec.cert_not_before = Some(v.not_before);
                rec.cert_not_after = Some(v.not_after);
            }
            Box::new(s)
        } else {
            Box::new(tcp)
        };
        let (sender, conn) = match timeout_at(
            deadline,
            hyper::client::conn::http1::handshake(TokioIo::new(io)),
        )
        .await
        {
            Err(_) => return Err(SendError::Timeout),
            Ok(Err(e)) => return Err(fail(ConnectStage::Http, error_chain(&e))),
            Ok(Ok(pair)) => pair,
        };
        // The connection task ends when the sender and any response body are dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn tls_config(&mut self) -> Result<Arc<rustls::ClientConfig>, TlsConfigError> {
        if let Some(c) = &self.tls {
            return Ok(c.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        for cert in &self.extra_roots {
            roots.add(cert.clone()).map_err(TlsConfigError::CaFile)?;
        }
        if roots.is_empty() {
            return Err(TlsConfigError::NoRoots);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsConfigError::Provider)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.tls = Some(config.clone());
        Ok(config)
    }
}

/// Why no TLS client configuration could be made; recorded as the connection's TLS error.
#[derive(Debug, thiserror::Error)]
enum TlsConfigError {
    #[error("a certificate from --ca-file was rejected: {0}")]
    CaFile(rustls::Error),
    #[error(
        "no trusted root certificates found on this system (install the ca-certificates package)"
    )]
    NoRoots,
    #[error("{0}")]
    Provider(rustls::Error),
}

fn build(
    out: &Outgoing<'_>,
    uri: &Uri,
    user_headers: bool,
) -> Result<Request<Full<Bytes>>, SendError> {
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    // Host is host[:port]: userinfo never goes on the wire in clear.
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_override = out
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("host"));
    let mut b = Request::builder().method(out.method.clone()).uri(path);
    if !host_override {
        b = b.header(http::header::HOST, host);
    }
    let mut b = b.header(
        http::header::USER_AGENT,
        concat!("mcpulse/", env!("CARGO_PKG_VERSION")),
    );
    for (k, v) in &out.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if user_headers {
        for (k, v) in out.user_headers {
            b = b.header(k.as_str(), v.as_str());
        }
    }
    let body = out.body.clone().map(Bytes::from).unwrap_or_default();
    b.body(Full::new(body))
        .map_err(|e| SendError::Invalid(e.to_string()))
}

/// Why a `--ca-file` gave no certificates.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("not a valid PEM certificate file: {0}")]
    Invalid(rustls::pki_types::pem::Error),
    #[error("no PEM certificates (-----BEGIN CERTIFICATE-----) found")]
    Empty,
}

/// Reads PEM certificates (a `--ca-file`). Errors say what is wrong with the file.
pub fn read_pem_certs(pem: &[u8]) -> Result<Vec<Vec<u8>>, PemError> {
    use rustls::pki_types::pem::PemObject;
    let mut out = Vec::new();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
        out.push(cert.map_err(PemError::Invalid)?.as_ref().to_vec());
    }
    if out.is_empty() {
        return Err(PemError::Empty);
    }
    Ok(out)
}

/// Whether an address is publicly routable: not loopback, private (RFC 1918, ULA), link-local,
/// CGNAT, unspecified, multicast, documentation or otherwise reserved.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (18..20).contains(&o[1]))
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00
                || (seg[0] & 0xffc0) == 0xfe80
                || seg[0] == 0x2001 && seg[1] == 0x0db8)
        }
    }
}

/// Whether a host (name or literal) is loopback: `localhost`, 127.0.0.0/8, ::1.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.to_ascii_lowercase().ends_with(".localhost")
        || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A failed TLS handshake as a sentence a person can act on. rustls's own text names the check
/// that failed, in its types' debug form (`invalid peer certificate:
/// Other(OtherError(CaUsedAsEndEntity))`), not what is wrong with the certificate or what to do
/// about it. Errors that are not about the certificate keep rustls's text.
fn tls_failure(e: &std::io::Error, host: &str) -> String {
    use rustls::CertificateError as C;
    let Some(err) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return error_chain(e);
    };
    let rustls::Error::InvalidCertificate(cert) = err else {
        return err.to_string();
    };
    let days = |a: &rustls::pki_types::UnixTime, b: &rustls::pki_types::UnixTime| {
        let d = a.as_secs().saturating_sub(b.as_secs()) / 86_400;
        if d == 1 {
            "1 day".to_owned()
        } else {
            format!("{d} days")
        }
    };
    let reissue = "fix the certificate the server sends";
    match cert {
        C::UnknownIssuer => "the server's certificate is not signed by a trusted certificate authority \
             (it is self-signed, from a private CA, or sent without its intermediate certificates); \
             trust its CA with --ca-file FILE, or have the server send its full chain"
            .to_owned(),
        C::Expired => "the server's certificate has expired; renew it".to_owned(),
        C::ExpiredContext { time, not_after } => format!(
            "the server's certificate expired {} ago; renew it",
            days(time, not_after)
        ),
        C::NotValidYet => format!(
            "the server's certificate is not valid yet; check the clocks of this machine and the server, or {reissue}"
        ),
        C::NotValidYetContext { time, not_before } => format!(
            "the server's certificate is not valid for another {}; check the clocks of this machine and the server, or {reissue}",
            days(not_before, time)
        ),
        C::NotValidForName => format!(
            "the server's certificate is not valid for the name {host}; connect with a name it lists, or reissue it with {host} in its subject alternative names"
        ),
        C::NotValidForNameContext { presented, .. } => format!(
            "the server's certificate is for {} and not for {host}; connect with a name it lists, or reissue it with {host} in its subject alternative names",
            names(presented)
        ),
        C::BadSignature => format!(
            "a signature in the server's certificate chain does not verify (a certificate paired with the wrong issuer, or altered); {reissue}"
        ),
        C::BadEncoding => format!("the server's certificate is malformed (not valid DER); {reissue}"),
        C::Revoked => "the server's certificate has been revoked by its issuer; replace it".to_owned(),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => "the server's certificate is not for TLS \
             servers (its extended key usage lacks serverAuth); reissue it with that purpose"
            .to_owned(),
        C::UnhandledCriticalExtension => format!(
            "the server's certificate has a critical extension that mcpulse does not understand; {reissue}"
        ),
        #[allow(deprecated)]
        C::UnsupportedSignatureAlgorithm
        | C::UnsupportedSignatureAlgorithmContext { .. }
        | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => "the server's certificate is \
             signed with an algorithm mcpulse does not accept (such as SHA-1); reissue it with ECDSA, \
             Ed25519 or RSA and SHA-256 or better"
            .to_owned(),
        // webpki's own errors arrive boxed, untyped but for their debug names.
        C::Other(other) => {
            let name = format!("{other:?}");
            if name.contains("CaUsedAsEndEntity") {
                "the server's certificate is a CA certificate used as the server's own (as a self-signed \
                 certificate made with `openssl req -x509` is by default), which TLS clients refuse even \
                 when they trust it; give the server a certificate issued by that CA, or a self-signed one \
                 without the CA flag (basicConstraints CA:FALSE), and trust it with --ca-file FILE"
                    .to_owned()
            } else if name.contains("UnsupportedCertVersion") {
                format!("the server's certificate is not X.509 version 3; {reissue}")
            } else if name.contains("EndEntityUsedAsCa") {
                format!(
                    "a certificate in the server's chain that is not a CA certificate signed the next one; {reissue}"
                )
            } else {
                format!("the server's certificate was rejected: {other}")
            }
        }
        other => format!("the server's certificate was rejected: {other}"),
    }
}

/// The names a certificate presents, as a short list: they come from the server, so at most
/// five, each cut to 64 characters, control characters dropped. webpki gives them in debug
/// form (`DnsName("mcp.example.com")`); the name inside is what a person compares.
fn names(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no name at all".to_owned();
    }
    let bare = |n: &str| -> String {
        let inner = n
            .split_once('(')
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .unwrap_or(n);
        let inner = inner.trim_matches('"');
        inner.chars().filter(|c| !c.is_control()).take(64).collect()
    };
    let mut list: Vec<String> = presented.iter().take(5).map(|n| bare(n)).collect();
    if presented.len() > 5 {
        list.push(format!("{} more", presented.len() - 5));
    }
    list.join(", ")
}

/// An error and its sources, joined: "connection refused" alone rarely says enough.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let m = inner.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = inner.source();
    }
    s
}

/// How reading a body ended.
#[derive(Debug, Clone, PartialEq)]
pub enum BodyEnd {
    Complete,
    TooLarge,
    Timeout,
    Error(String),
}

/// Reads a whole body, up to `cap` bytes, before `deadline`.
pub async fn read_body(body: &mut Incoming, cap: usize, deadline: Instant) -> (Vec<u8>, BodyEnd) {
    let mut buf = Vec::new();
    loop {
        match next_chunk(body, deadline).await {
            Chunk::Data(d) => {
                if buf.len() + d.len() > cap {
                    let room = cap - buf.len();
                    buf.extend_from_slice(&d[..room]);
                    return (buf, BodyEnd::TooLarge);
                }
                buf.extend_from_slice(&d);
            }
            Chunk::End => return (buf, BodyEnd::Complete),
            Chunk::Timeout => return (buf, BodyEnd::Timeout),
            Chunk::Error(e) => return (buf, BodyEnd::Error(e)),
        }
    }
}

/// One step of reading a body.
pub enum Chunk {
    Data(Bytes),
    End,
    Timeout,
    Error(String),
}

/// The next data chunk of a body (trailers are skipped).
pub async fn next_chunk(body: &mut Incoming, deadline: Instant) -> Chunk {
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => return Chunk::Timeout,
            Ok(None) => return Chunk::End,
            Ok(Some(Err(e))) => return Chunk::Error(error_chain(&e)),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    return Chunk::Data(data);
                }
            }
        }
    }
}

/// Response headers as recorded pairs (values lossily decoded; sensitive ones redacted).
pub fn recorded_headers(resp: &Response<Incoming>) -> Vec<(String, String)> {
    resp.headers()
        .iter()
        .map(|(k, v)| {
            let value = if redact::is_sensitive_header(k.as_str()) {
                redact::REDACTED.to_owned()
            } else {
                String::from_utf8_lossy(v.as_bytes()).into_owned()
            };
            (k.as_str().to_owned(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed TLS set-up errors print what the `String` errors they replaced printed.
    #[test]
    fn tls_config_messages_are_unchanged() {
        let bad = rustls::Error::General("bad der".into());
        assert_eq!(
            TlsConfigError::CaFile(bad.clone()).to_string(),
            format!("a certificate from --ca-file was rejected: {bad}")
        );
        assert_eq!(
            TlsConfigError::NoRoots.to_string(),
            "no trusted root certificates found on this system (install the ca-certificates package)"
        );
        assert_eq!(
            TlsConfigError::Provider(bad.clone()).to_string(),
            bad.to_string()
        );
    }

    #[test]
    fn address_classes() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "0.0.0.0",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        assert!(is_loopback_host("localhost"));
        assert!(is_loopback_host("[::1]"));
        assert!(is_loopback_host("127.0.0.2"));
        assert!(!is_loopback_host("example.com"));
    }

    /// The SSRF guard holds for every hop of a redirect, http or https, not only the first:
    /// each connection passes the same check. A loopback test cannot have a public first hop,
    /// so here 127.0.0.1 stands in for "public" and 127.0.0.2 for the private address a
    /// redirect points at.
    #[tokio::test]
    async fn the_guard_applies_to_each_redirect() {
        use mcpulse_testkit::RawListener;
        for scheme in ["http", "https"] {
            let private = RawListener::start("127.0.0.2", "").await;
            let first = RawListener::start(
                "127.0.0.1",
                format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nlocation: {scheme}://{}/x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    private.addr()
                ),
            )
            .await;
            let mut client = HttpClient::new(Clock::start());
            client.deny_private = true;
            client.public = |ip| ip == IpAddr::from([127, 0, 0, 1]);
            let out = Outgoing {
                method: Method::POST,
                uri: format!("http://{}/mcp", first.addr()).parse().unwrap(),
                headers: Vec::new(),
                user_headers: &[],
                body: Some("{}".into()),
            };
            let mut redirects = Vec::new();
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            let err = client
                .send(&out, true, deadline, &mut redirects)
                .await
                .err()
                .unwrap();
            let message = err.to_string();
            assert!(
                message.contains("non-public address 127.0.0.2"),
                "{scheme}: {message}"
            );
            assert_eq!(redirects.len(), 1);
            assert_eq!(client.connections.len(), 2);
            assert!(client.connections[0].error.is_none());
            assert_eq!(client.connections[1].addr, None);
            assert_eq!(
                private.connections(),
                0,
                "{scheme}: no connection to the private address"
            );
        }
    }

    #[test]
    fn origins() {
        let a: Uri = "http://h/x".parse().unwrap();
        let b: Uri = "http://h:80/y".parse().unwrap();
        let c: Uri = "https://h/x".parse().unwrap();
        assert_eq!(origin(&a), origin(&b));
        assert_ne!(origin(&a), origin(&c));
    }
}
