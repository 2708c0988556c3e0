//! How long validating a large config takes: what `mcpulse check-config` does, at fleet sizes.
//!
//! ```text
//! cargo run --release -p mcpulse-monitor --example config_bench -- [TARGETS ...]
//!   TARGETS   target counts to generate and validate (default: 10000 40000 80000 491000)
//! ```
//!
//! Not a test: it measures and prints. For each count it writes a config of that many
//! `[[targets]]` (URL targets, one header with `${VAR}`, labels, a per-target interval; about
//! 105 bytes each, so 491,000 targets is the 50 MB file of issue #14) into a temporary file and
//! times `daemon::load` on it (read, parse, validate, build each target's probe plan: all of
//! `check-config`), then prints the wall time and the process's peak resident memory so far.

use mcpulse_monitor::daemon::{self, Options};
use std::fmt::Write as _;
use std::time::Instant;

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

fn main() {
    if let Err(e) = run() {
        eprintln!("config_bench: {e}");
        std::process::exit(1);
    }
}

fn config(targets: usize) -> String {
    let mut text = String::from("[defaults]\ninterval = \"60s\"\ntimeout = \"10s\"\n");
    for i in 0..targets {
        let _ = write!(
            text,
            "[[targets]]\nname = \"t{i}\"\nurl = \"https://mcp{}.example.com/mcp?i={i}\"\n\
             headers = {{ Authorization = \"Bearer ${{HOME}}\" }}\nlabels = {{ team = \"t{}\" }}\n\
             interval = \"30s\"\n",
            i % 97,
            i % 13
        );
    }
    text
}

/// The peak resident set size of this process so far (`VmHWM`), in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn run() -> Result<()> {
    let mut counts: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    if counts.is_empty() {
        counts = vec![10_000, 40_000, 80_000, 491_000];
    }
    let dir = std::env::temp_dir().join(format!("mcpulse-config-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = (|| -> Result<()> {
        println!("| targets | file | check-config (daemon::load) | peak RSS so far |");
        println!("|---:|---:|---:|---:|");
        for n in counts {
            let path = dir.join(format!("targets-{n}.toml"));
            let text = config(n);
            std::fs::write(&path, &text)?;
            let start = Instant::now();
            let cfg = daemon::load(&path, &Options::default())?;
            let took = start.elapsed();
            if cfg.targets.len() != n {
                return Err(format!("loaded {} targets, wrote {n}", cfg.targets.len()).into());
            }
            drop(cfg);
            println!(
                "| {n} | {:.1} MB | {:.3} s | {:.0} MiB |",
                text.len() as f64 / 1e6,
                took.as_secs_f64(),
                peak_rss_mib()
            );
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
