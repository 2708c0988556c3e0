//! The kit's overhead per tool call (#23), all policies on (timeout, concurrency limit,
//! circuit breaker, metrics), against the same tools on a plain rmcp server, in the same run
//! (bench/kit/run.sh; figures in docs/kit.md).
//!
//! Both servers are the example's (kit_server.rs), served by rmcp over an in-memory pipe
//! (newline-delimited JSON-RPC, rmcp's async-rw transport) on one current-thread runtime, so
//! that no socket, no HTTP and no second core blur a difference of microseconds. The client
//! writes one `tools/call echo` and reads its answer, one call at a time; rounds of
//! `--block` calls alternate between the two servers (plain first, then kit, and so on), so
//! that a drift of the machine during the run falls on both. Reports p50, p90 and p99 of each
//! and the difference of the medians, as JSON on stdout.
//!
//! ```text
//! cargo run --release -p mcpulse-kit --example kit_bench -- --calls 20000 --block 500
//! ```

#[path = "kit_server.rs"]
mod server;

use rmcp::ServiceExt;
use std::time::{Duration, Instant};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

struct Client {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    next: u64,
    _server: tokio::task::JoinHandle<()>,
}

impl Client {
    async fn start(plain: bool) -> Client {
        let o = server::Options {
            listen: "127.0.0.1:0"
                .parse()
                .unwrap_or_else(|_| std::process::exit(1)),
            db: "127.0.0.1:9"
                .parse()
                .unwrap_or_else(|_| std::process::exit(1)),
            broken_flag: std::env::temp_dir().join("kit-bench-never"),
            plain,
            check_every: Duration::from_secs(3600),
        };
        let (router, _health) = match server::build(&o) {
            Ok(b) => b,
            Err(e) => fail(&e.to_string()),
        };
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(async move {
            let (r, w) = tokio::io::split(theirs);
            if let Ok(running) = server::Example::new(router).serve((r, w)).await {
                let _ = running.waiting().await;
            }
        });
        let (r, write) = tokio::io::split(ours);
        let mut c = Client {
            lines: BufReader::new(r).lines(),
            write,
            next: 1,
            _server: task,
        };
        c.request(r#""method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}"#).await;
        c.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        c
    }

    async fn send(&mut self, line: &str) {
        if self
            .write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .is_err()
        {
            fail("the server went away");
        }
    }

    /// One request; returns its answer line.
    async fn request(&mut self, rest: &str) -> String {
        let id = self.next;
        self.next += 1;
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},{rest}}}"#))
            .await;
        loop {
            match self.lines.next_line().await {
                Ok(Some(l)) if l.contains(&format!(r#""id":{id}"#)) => return l,
                Ok(Some(_)) => continue,
                _ => fail("no answer"),
            }
        }
    }

    async fn call(&mut self) -> Duration {
        let t = Instant::now();
        let answer = self
            .request(
                r#""method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}"#,
            )
            .await;
        let took = t.elapsed();
        if !answer.contains(r#""text":"hi""#) || answer.contains(r#""isError":true"#) {
            fail(&format!("unexpected answer: {answer}"));
        }
        took
    }
}

fn fail(why: &str) -> ! {
    eprintln!("kit_bench: {why}");
    std::process::exit(1)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

fn main() {
    let (mut calls, mut block) = (20_000usize, 500usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| fail("usage: kit_bench [--calls N] [--block N]"));
        match a.as_str() {
            "--calls" => calls = v,
            "--block" => block = v.max(1),
            _ => fail("usage: kit_bench [--calls N] [--block N]"),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    rt.block_on(async {
        let mut plain = Client::start(true).await;
        let mut kit = Client::start(false).await;
        // Warm-up: allocations, the breaker's window, the metrics' series.
        for _ in 0..block {
            plain.call().await;
            kit.call().await;
        }
        let (mut p, mut k) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
        while p.len() < calls {
            for _ in 0..block {
                p.push(plain.call().await);
            }
            for _ in 0..block {
                k.push(kit.call().await);
            }
        }
        p.sort();
        k.sort();
        let report = serde_json::json!({
            "calls_each": p.len(),
            "block": block,
            "plain_us": {"p50": pct(&p, 0.5), "p90": pct(&p, 0.9), "p99": pct(&p, 0.99)},
            "kit_us": {"p50": pct(&k, 0.5), "p90": pct(&k, 0.9), "p99": pct(&k, 0.99)},
            "overhead_p50_us": pct(&k, 0.5) - pct(&p, 0.5),
        });
        println!("{report}");
    });
}
