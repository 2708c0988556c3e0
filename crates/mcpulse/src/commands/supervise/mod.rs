//! `mcpulse supervise`: relay a client's stdio to a supervised child ([`relay`]), with health
//! endpoints, metrics and logs ([`visibility`]); or rewrite a client's config to use it
//! ([`adopt`]: `--wrap`, `--unwrap`).

mod adopt;
mod relay;
mod visibility;

use crate::cli::SuperviseArgs;
use anyhow::Result;

pub fn run(args: SuperviseArgs) -> Result<u8> {
    if args.wrap.is_some() || args.unwrap.is_some() {
        return adopt::run(&args);
    }
    relay::run(args)
}
