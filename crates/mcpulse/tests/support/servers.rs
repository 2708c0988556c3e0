//! Real third-party HTTP servers started for a test (interop.rs, gateway_interop.rs): each in
//! its own process group on a loopback port found at run time, killed with its group when the
//! test ends, pass or fail.
#![allow(dead_code)] // each test file uses a part

use super::installs::{SETUP_HINT, everything, scratch};
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
pub const START_WITHIN: Duration = Duration::from_secs(20);

/// A server process in its own process group. Dropping it kills the group (and, when the test
/// is failing, prints the end of the server's log).
pub struct Server {
    pub name: &'static str,
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Server {
    /// Starts the command that `command(port)` builds on a free loopback port and waits until
    /// the port accepts connections. The port is found by binding port 0 and letting it go:
    /// should another process take it in between, the server exits and is started again on a
    /// new port.
    pub fn start(name: &'static str, command: impl Fn(u16) -> Command) -> Server {
        let mut last_failure = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let log = scratch(&format!("{name}.log"));
            let out = File::create(&log).unwrap();
            let err = out.try_clone().unwrap();
            let mut cmd = command(port);
            cmd.stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .process_group(0);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("could not start {name} ({cmd:?}): {e}; {SETUP_HINT}"));
            let mut server = Server {
                name,
                child,
                port,
                log,
            };
            match server.wait_until_listening() {
                Ok(()) => return server,
                Err(why) => {
                    last_failure = format!("{why}\n--- its log ---\n{}", server.log_tail(40))
                }
            }
            // Dropping `server` kills what is left of it.
        }
        panic!("{name} did not start: {last_failure}");
    }

    fn wait_until_listening(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + START_WITHIN;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!(
                    "{} exited before listening on port {} ({status})",
                    self.name, self.port
                ));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                // The listener is ours only if the server is still running.
                if self.child.try_wait().unwrap().is_none() {
                    return Ok(());
                }
                continue;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not listen on port {} within {START_WITHIN:?}",
                    self.name, self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the process group this test created; no memory is touched.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let _ = writeln!(
                std::io::stderr(),
                "--- {} (port {}) log, last lines ---\n{}",
                self.name,
                self.port,
                self.log_tail(40)
            );
        }
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// server-everything in `mode` (`streamableHttp` or `sse`), with PORT set.
pub fn everything_http(mode: &str) -> Server {
    let bin = everything();
    let mode = mode.to_owned();
    Server::start("server-everything", move |port| {
        let mut c = Command::new("node");
        c.arg(&bin).arg(&mode).env("PORT", port.to_string());
        c
    })
}
