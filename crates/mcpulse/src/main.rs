//! `mcpulse`: the binary. A thin shell: parse arguments into settings, run a command, print,
//! and map the outcome to an exit code. Logic lives in the library crates.

mod cli;
mod commands;
mod log;
mod printer;
mod settings;

use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a probe is many small, short-lived allocations (JSON
/// values, headers, transcript records), and glibc's free lists (`_int_free`,
/// `malloc_consolidate`) were a fifth of the monitor's CPU under `/probe` load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code when mcpulse itself could not run (bad arguments, unreadable input).
pub const EXIT_COULD_NOT_RUN: u8 = 3;

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(c) => c,
        Err(code) => return code,
    };
    match commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        // A closed pipe (`mcpulse probe … | head`) is the reader's choice, not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut msg = format!("mcpulse: error: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!("\n  caused by: {cause}"));
            }
            // An error can quote a file or a server (a baseline, an imported name): one line
            // at a time, it is made inert like any other text from outside.
            anstream::eprintln!("{}", mcpulse_wire::text::lines(&msg));
            ExitCode::from(EXIT_COULD_NOT_RUN)
        }
    }
}
