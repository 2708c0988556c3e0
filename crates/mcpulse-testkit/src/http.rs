//! A fake HTTP/1.1 server on a real loopback socket, answering from a script.
//!
//! It parses requests by hand (request line, headers, a `Content-Length` body) and writes
//! responses by hand, so that it can misbehave in ways a real framework refuses to: hold a
//! request forever, drip a body one byte at a time, stream an event stream that never ends,
//! stream a body past any cap, or answer `200` with an HTML page. Connections are kept alive,
//! as mcpulse reuses one connection for the POSTs of a probe.
//!
//! Every request is recorded (method, target, headers, body, and which connection carried it)
//! before it is answered, so once the client has its answer a test can assert on what was sent.
//! Dropping the [`FakeHttp`] aborts the accept task, and with it every connection task.
//!
//! It owns no MCP knowledge; see [`crate::mcp`] for messages and [`crate::scenario`] for
//! servers that speak (or mis-speak) MCP.

use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// The most bytes of a request head (request line and headers) the server reads.
const MAX_HEAD: usize = 64 * 1024;
/// The most bytes of a request body the server reads.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target: path and query, as sent.
    pub target: String,
    /// Header names lowercased, values as sent, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Which connection carried it: 0 for the first accepted, 1 for the next, ...
    pub connection: usize,
    /// The server's own address (to build absolute URLs in answers).
    pub local_addr: SocketAddr,
    /// `https` when the server speaks TLS ([`FakeHttp::start_tls`]), else `http`.
    pub scheme: &'static str,
}

impl Request {
    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, when it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The JSON-RPC method of the body, when it has one.
    pub fn rpc_method(&self) -> Option<String> {
        self.json()?.get("method")?.as_str().map(str::to_owned)
    }

    /// The JSON-RPC id of the body (`None` for a notification or a non-JSON body).
    pub fn rpc_id(&self) -> Option<Value> {
        self.json()?.get("id").cloned()
    }

    /// `http://<this server>` + `path` (`https://` for a TLS server).
    pub fn url_for(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.local_addr)
    }
}

/// One piece of a chunked (`Transfer-Encoding: chunked`) body.
#[derive(Debug)]
pub enum Piece {
    /// These bytes, as one chunk.
    Data(Vec<u8>),
    /// Wait this long before the next piece.
    Pause(Duration),
    /// These bytes again and again, every `every`, forever (until the client goes away).
    Repeat { data: Vec<u8>, every: Duration },
    /// Whatever arrives on the channel, one chunk per message, until every sender is dropped.
    Channel(mpsc::UnboundedReceiver<Vec<u8>>),
    /// Nothing more, ever: the body never ends.
    Pending,
}

/// How the body of a reply is sent.
#[derive(Debug)]
pub enum Body {
    /// No response at all: the request is read and then nothing is ever written.
    Silence,
    /// The whole body, with `Content-Length`.
    Bytes(Vec<u8>),
    /// `Content-Length` of the whole body, then one byte every `every`.
    Drip { bytes: Vec<u8>, every: Duration },
    /// `Transfer-Encoding: chunked`; the terminating chunk follows the last piece.
    Chunked(Vec<Piece>),
}

/// What happens to the connection after a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Wait for the next request on it.
    KeepAlive,
    /// Say `Connection: close`, and close it.
    Close,
    /// Close it without a word, as a server with a short idle timeout does: the client finds
    /// out when it reuses the connection.
    HangUp,
}

/// The answer to one request.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    pub then: Then,
}

impl Reply {
    /// A status with an empty body.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Bytes(Vec::new()),
            then: Then::KeepAlive,
        }
    }

    /// `202 Accepted`, no body: what a notification gets.
    pub fn accepted() -> Reply {
        Reply::status(202)
    }

    /// A JSON body.
    pub fn json(status: u16, value: &Value) -> Reply {
        Reply::bytes(status, "application/json", value.to_string().into_bytes())
    }

    /// A body of the given content type.
    pub fn bytes(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply::status(status)
            .header("content-type", content_type)
            .with_body(Body::Bytes(body.into()))
    }

    /// An HTML page (what a proxy, a login wall or the wrong URL sends).
    pub fn html(status: u16, page: &str) -> Reply {
        Reply::bytes(status, "text/html; charset=utf-8", page)
    }

    /// A finite event stream of these events (each already framed, see [`crate::mcp::sse_event`]).
    pub fn sse(events: Vec<String>) -> Reply {
        let pieces = events
            .into_iter()
            .map(|e| Piece::Data(e.into_bytes()))
            .collect();
        Reply::chunked(200, "text/event-stream", pieces)
    }

    /// A chunked body of the given content type.
    pub fn chunked(status: u16, content_type: &str, pieces: Vec<Piece>) -> Reply {
        Reply::status(status)
            .header("content-type", content_type)
            .header("cache-control", "no-cache")
            .with_body(Body::Chunked(pieces))
    }

    /// Reads the request and never answers.
    pub fn silence() -> Reply {
        Reply::status(0).with_body(Body::Silence)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn with_body(mut self, body: Body) -> Reply {
        self.body = body;
        self
    }

    /// Closes the connection after this reply, saying so (`Connection: close`).
    pub fn closing(mut self) -> Reply {
        self.then = Then::Close;
        self
    }

    /// Closes the connection after this reply without saying so. With an explicit
    /// `content-length` header larger than the body, this makes a truncated response; on
    /// [`Reply::silence`], a connection closed once the request is read, with no response.
    pub fn hanging_up(mut self) -> Reply {
        self.then = Then::HangUp;
        self
    }
}

/// What the server does with each request.
pub type Script = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A running fake server. Dropping it stops it.
pub struct FakeHttp {
    addr: SocketAddr,
    scheme: &'static str,
    log: Arc<Mutex<Vec<Request>>>,
    gone: Arc<Mutex<Vec<Abandoned>>>,
    accept: JoinHandle<()>,
}

/// A reply the client walked away from before it was complete, as the server found out: a
/// write of the reply failed (a response stream the client closed, found at the next write:
/// [`Piece::Repeat`] finds it within about two of its periods, [`Piece::Pending`] never), or,
/// for a [`Body::Silence`], the client closed the connection while waiting. Timed by the
/// server alone, so a test can bound how soon a client gave up without timing the client.
#[derive(Debug, Clone)]
pub struct Abandoned {
    pub request: Request,
    /// From reading the request to finding the client gone.
    pub after: Duration,
}

impl Drop for FakeHttp {
    fn drop(&mut self) {
        // The accept task owns the JoinSet of connection tasks: aborting it drops the set,
        // which aborts them all.
        self.accept.abort();
    }
}

/// A bare listener on `ip` (port 0) that writes the same bytes to every connection and counts
/// the connections, reading nothing: for tests about whether a connection is made at all (an
/// SSRF guard, a refused redirect). Dropping it stops it.
pub struct RawListener {
    addr: SocketAddr,
    count: Arc<std::sync::atomic::AtomicUsize>,
    accept: JoinHandle<()>,
}

impl RawListener {
    pub async fn start(ip: &str, response: impl Into<String>) -> RawListener {
        let response = response.into();
        let listener = match TcpListener::bind((ip, 0)).await {
            Ok(l) => l,
            Err(e) => panic!("binding {ip}:0: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("reading the listener's address: {e}"),
        };
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = count.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = s.write_all(response.as_bytes()).await;
            }
        });
        RawListener {
            addr,
            count,
            accept,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for RawListener {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeHttp {
    /// Binds 127.0.0.1 on a port chosen by the system and starts answering with `script`.
    /// Must be called inside a tokio runtime.
    pub async fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> FakeHttp {
        FakeHttp::start_script(Arc::new(script)).await
    }

    pub async fn start_script(script: Script) -> FakeHttp {
        FakeHttp::bind(script, None).await
    }

    /// Like [`FakeHttp::start_script`], speaking HTTPS with this TLS configuration (see
    /// [`crate::tls`]). A client that rejects the certificate sends no request: the connection
    /// ends in the handshake and nothing is logged.
    pub async fn start_tls(script: Script, config: Arc<rustls::ServerConfig>) -> FakeHttp {
        FakeHttp::bind(script, Some(tokio_rustls::TlsAcceptor::from(config))).await
    }

    async fn bind(script: Script, tls: Option<tokio_rustls::TlsAcceptor>) -> FakeHttp {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("binding a loopback port for the fake server: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("reading the fake server's address: {e}"),
        };
        let log = Arc::new(Mutex::new(Vec::new()));
        let gone = Arc::new(Mutex::new(Vec::new()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let logs = Logs {
            requests: log.clone(),
            gone: gone.clone(),
        };
        let accept = tokio::spawn(accept_loop(listener, addr, tls, script, logs));
        FakeHttp {
            addr,
            scheme,
            log,
            gone,
            accept,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>` (`https://` for a TLS server).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.log).clone()
    }

    /// The replies the client walked away from so far, in the order the server found out.
    pub fn abandoned(&self) -> Vec<Abandoned> {
        lock(&self.gone).clone()
    }

    /// The JSON-RPC methods of the requests so far (`GET`/`DELETE`/... for requests without one).
    pub fn methods(&self) -> Vec<String> {
        lock(&self.log)
            .iter()
            .map(|r| r.rpc_method().unwrap_or_else(|| r.method.clone()))
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the connection tasks record: the requests, and the replies abandoned.
#[derive(Clone)]
struct Logs {
    requests: Arc<Mutex<Vec<Request>>>,
    gone: Arc<Mutex<Vec<Abandoned>>>,
}

async fn accept_loop(
    listener: TcpListener,
    addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    script: Script,
    log: Logs,
) {
    let mut connections = JoinSet::new();
    let mut n = 0usize;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let (script, log) = (script.clone(), log.clone());
        match &tls {
            None => {
                connections.spawn(serve(stream, n, addr, "http", script, log));
            }
            Some(acceptor) => {
                // The handshake runs in the connection's task, so a client that stalls or
                // rejects the certificate holds up no other connection.
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        serve(stream, n, addr, "https", script, log).await;
                    }
                });
            }
        }
        n += 1;
    }
}

/// Serves one connection: request after request until the client closes it, a reply closes
/// it, or a reply never ends.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    connection: usize,
    local_addr: SocketAddr,
    scheme: &'static str,
    script: Script,
    log: Logs,
) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let req = match read_request(&mut stream, &mut buf, connection, local_addr, scheme).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(status) => {
                let _ = write_reply(&mut stream, Reply::status(status).closing()).await;
                return;
            }
        };
        lock(&log.requests).push(req.clone());
        let received = tokio::time::Instant::now();
        let reply = script(&req);
        let wants_close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let abandoned = |request: Request| Abandoned {
            request,
            after: received.elapsed(),
        };
        if matches!(reply.body, Body::Silence) && reply.then == Then::HangUp {
            // No response at all: the connection is closed once the request is read.
            return;
        }
        if matches!(reply.body, Body::Silence) {
            // Nothing is ever written: wait for the client to close the connection, which is
            // how it gives up the request.
            let mut sink = [0u8; 1024];
            while let Ok(1..) = stream.read(&mut sink).await {}
            lock(&log.gone).push(abandoned(req));
            return;
        }
        match write_reply(&mut stream, reply).await {
            Ok(true) if !wants_close => {}
            Ok(_) => return,
            Err(_) => {
                lock(&log.gone).push(abandoned(req));
                return;
            }
        }
    }
}

/// Reads one request; `Ok(None)` when the client closed the connection between requests,
/// `Err(status)` for a request the server refuses to parse.
async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    connection: usize,
    local_addr: SocketAddr,
    scheme: &'static str,
) -> Result<Option<Request>, u16> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(431);
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    if !version.starts_with("HTTP/1.") {
        return Err(505);
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            return Err(400);
        };
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if header("transfer-encoding").is_some() {
        return Err(411); // mcpulse always knows its body length
    }
    let len = match header("content-length") {
        None => 0,
        Some(v) => v.parse::<usize>().map_err(|_| 400u16)?,
    };
    if len > MAX_BODY {
        return Err(413);
    }
    while buf.len() < len {
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body: Vec<u8> = buf.drain(..len).collect();
    Ok(Some(Request {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
        body,
        connection,
        local_addr,
        scheme,
    }))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes a reply; `Ok(true)` when the connection can carry another request.
async fn write_reply<S: AsyncWrite + Unpin>(stream: &mut S, reply: Reply) -> std::io::Result<bool> {
    let Reply {
        status,
        headers,
        body,
        then,
    } = reply;
    if matches!(body, Body::Silence) {
        std::future::pending::<()>().await;
    }
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    match &body {
        Body::Bytes(b) if !has("content-length") => {
            head.push_str(&format!("content-length: {}\r\n", b.len()))
        }
        Body::Drip { bytes, .. } if !has("content-length") => {
            head.push_str(&format!("content-length: {}\r\n", bytes.len()))
        }
        Body::Chunked(_) if !has("transfer-encoding") => {
            head.push_str("transfer-encoding: chunked\r\n")
        }
        _ => {}
    }
    if then == Then::Close {
        head.push_str("connection: close\r\n");
    }
    for (k, v) in &headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    match body {
        Body::Silence => {}
        Body::Bytes(b) => stream.write_all(&b).await?,
        Body::Drip { bytes, every } => {
            for b in bytes {
                stream.write_all(&[b]).await?;
                stream.flush().await?;
                tokio::time::sleep(every).await;
            }
        }
        Body::Chunked(pieces) => {
            for piece in pieces {
                match piece {
                    Piece::Data(d) => write_chunk(stream, &d).await?,
                    Piece::Pause(d) => tokio::time::sleep(d).await,
                    Piece::Repeat { data, every } => loop {
                        write_chunk(stream, &data).await?;
                        tokio::time::sleep(every).await;
                    },
                    Piece::Channel(mut rx) => {
                        while let Some(d) = rx.recv().await {
                            write_chunk(stream, &d).await?;
                        }
                    }
                    Piece::Pending => std::future::pending::<()>().await,
                }
            }
            stream.write_all(b"0\r\n\r\n").await?;
        }
    }
    stream.flush().await?;
    if then != Then::KeepAlive {
        let _ = stream.shutdown().await;
    }
    Ok(then == Then::KeepAlive)
}

async fn write_chunk<S: AsyncWrite + Unpin>(stream: &mut S, data: &[u8]) -> std::io::Result<()> {
    if data.is_empty() {
        return Ok(()); // an empty chunk would end the body
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    stream.write_all(&out).await?;
    stream.flush().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Whatever",
    }
}

/// A response read by [`get`]: header names lowercased.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: String,
}

impl Response {
    /// A header by its (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The body as JSON (panics, with the body, if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One `GET` over a fresh connection (`Connection: close`), read to the end, within 5 s: for
/// tests of health and metrics endpoints, with no HTTP client between the test and the wire.
pub async fn get(addr: SocketAddr, path: &str) -> Response {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Response {
            status,
            headers,
            body: body.to_string(),
        }
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .unwrap()
}
