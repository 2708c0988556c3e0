//! `mcpulse supervise`: relay a client's stdio to a supervised child ([`relay`]), with health
//! endpoints, metrics and logs ([`visibility`]); or rewrite a client's config to use it
//! ([`adopt`]: `--wrap`, `--unwrap`).

mod adopt;
mod relay;
mod visibility;

pub(crate) use relay::start_watchdog;

use crate::cli::SuperviseArgs;
use anyhow::Result;

pub fn run(args: SuperviseArgs) -> Result<u8> {
    if args.wrap.is_some() || args.unwrap.is_some() {
        return adopt::run(&args);
    }
    relay::run(args)
}

/// `mcpulse supervise-watchdog PREFIX` (hidden): the process `mcpulse supervise` starts to kill
/// what its child left behind should it be SIGKILLed (`mcpulse_relay::supervise::watchdog`).
pub fn watchdog(lineage_prefix: &str) -> Result<u8> {
    let killed = mcpulse_relay::supervise::watchdog::run(lineage_prefix);
    if killed > 0 {
        eprintln!(
            "mcpulse supervise-watchdog: the supervisor died; {killed} kill(s) sent to what its server left running"
        );
    }
    Ok(0)
}
