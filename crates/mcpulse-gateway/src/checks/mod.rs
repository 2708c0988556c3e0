//! Dependency checks (`[[checks]]`): TCP connect, HTTP GET, a command, the upstream's own
//! health tool. Each runs on its own schedule; its result is cached and read by readiness,
//! never run on a request's path. To be built (issue #19 part 2).

use serde::Deserialize;

/// One `[[checks]]` entry, as written in the config.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    pub name: String,
}
