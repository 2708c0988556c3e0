//! A loopback port kept for a server that goes away and comes back on it.
//!
//! A test that stops a server and starts it again on the same port must not let another test,
//! binding port 0 meanwhile, be handed that port: the first test would then probe a stranger
//! (seen: a monitor's "down" alert quoting another test's monitor API). [`KeptPort`] holds the
//! port with a socket that is bound but never listens, with `SO_REUSEPORT` and without
//! `SO_REUSEADDR`: while it is there, a connection to the port is refused (as to a dead
//! server), no other socket can take the port (a bind needs `SO_REUSEPORT` by the same user, and
//! nothing else here sets it), and [`KeptPort::listen`] binds a listener beside it at once.

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpSocket};

/// A loopback port held for as long as this value lives.
pub struct KeptPort {
    _holder: TcpSocket,
    addr: SocketAddr,
}

impl KeptPort {
    /// A free loopback port (chosen by the kernel), held.
    pub fn new() -> KeptPort {
        let holder = TcpSocket::new_v4().unwrap();
        holder.set_reuseport(true).unwrap();
        holder.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = holder.local_addr().unwrap();
        KeptPort {
            _holder: holder,
            addr,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A listener on the port (a server up). Dropping it takes the server down: connections
    /// are refused again, and the port stays this test's.
    pub fn listen(&self) -> TcpListener {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseport(true).unwrap();
        // Connections of the previous listener may linger in TIME_WAIT.
        socket.set_reuseaddr(true).unwrap();
        socket.bind(self.addr).unwrap();
        socket.listen(1024).unwrap()
    }
}

impl Default for KeptPort {
    fn default() -> Self {
        KeptPort::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a connection to `addr` is refused, as to a dead server, within a second (once
    /// in a full suite run, a connect right after the listener closed was not refused at once).
    async fn refused(addr: SocketAddr) -> bool {
        for _ in 0..20 {
            if matches!(
                tokio::net::TcpStream::connect(addr).await,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
            ) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    }

    #[tokio::test]
    async fn the_port_stays_ours_while_no_server_listens_on_it() {
        let port = KeptPort::new();
        assert!(refused(port.addr()).await, "down: refused");
        // Another socket cannot take it (tokio's listeners set SO_REUSEADDR).
        let other = tokio::net::TcpListener::bind(port.addr()).await;
        assert!(other.is_err(), "taken by another listener");
        let listener = port.listen();
        assert!(tokio::net::TcpStream::connect(port.addr()).await.is_ok());
        drop(listener);
        assert!(refused(port.addr()).await, "down again: refused");
        assert!(tokio::net::TcpListener::bind(port.addr()).await.is_err());
        // Up again at once, on the same port.
        let _again = port.listen();
        assert!(tokio::net::TcpStream::connect(port.addr()).await.is_ok());
    }
}
