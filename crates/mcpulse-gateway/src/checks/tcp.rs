//! `kind = "tcp"`: connect to `host:port` (resolving the name each run, so a moved dependency
//! is followed), then close. Passes on an established connection; the latency is the resolve
//! and connect together. The caller's timeout bounds it (the connection attempt is dropped).

use super::{failed, passed};
use mcpulse_policy::check::Raw;
use tokio::time::Instant;

pub(super) async fn run(host: &str, port: u16) -> Raw {
    let start = Instant::now();
    match tokio::net::TcpStream::connect((host, port)).await {
        Ok(stream) => {
            let took = start.elapsed();
            drop(stream);
            passed(took, "connected")
        }
        Err(e) => failed(
            Some(start.elapsed()),
            &format!("connect to {host}:{port}: {e}"),
        ),
    }
}
