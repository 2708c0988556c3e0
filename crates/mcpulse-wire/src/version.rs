//! MCP protocol revisions and eras.
//!
//! Revisions up to 2025-11-25 are *legacy*: a stateful `initialize` handshake. 2026-07-28 is
//! *modern*: stateless, every request carries its version in `_meta`, discovery through
//! `server/discover`.

use serde::{Deserialize, Serialize};

/// The modern (stateless) revision this prober speaks.
pub const MODERN: &str = "2026-07-28";
/// The newest legacy revision; what we offer in `initialize`.
pub const LEGACY_LATEST: &str = "2025-11-25";

/// Every revision we know, oldest first. `2024-10-07` is accepted by some SDKs as a
/// pre-release alias of 2024-11-05.
pub const KNOWN: &[&str] = &[
    "2024-10-07",
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// JSON-RPC error codes that only a modern server sends; receiving one proves the modern era.
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Whether a JSON-RPC error code is one of the 2026 codes that identify a modern server.
pub fn is_modern_error(code: i64) -> bool {
    matches!(
        code,
        HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION
    )
}

/// The two protocol eras.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// 2024-11-05 … 2025-11-25: `initialize` handshake, sessions.
    Legacy,
    /// 2026-07-28: stateless, `server/discover`.
    Modern,
}

impl Era {
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }
}

/// Which era(s) a probe is allowed to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EraMode {
    /// Try modern first, fall back to legacy, and check for a dual-era server.
    #[default]
    Auto,
    Modern,
    Legacy,
}

/// Whether `v` is a revision this prober knows.
pub fn is_known(v: &str) -> bool {
    KNOWN.contains(&v)
}

/// The era a revision belongs to; `None` for a string we do not know.
pub fn era_of(v: &str) -> Option<Era> {
    match v {
        MODERN => Some(Era::Modern),
        _ if is_known(v) => Some(Era::Legacy),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eras_of_revisions() {
        assert_eq!(era_of("2024-11-05"), Some(Era::Legacy));
        assert_eq!(era_of("2025-11-25"), Some(Era::Legacy));
        assert_eq!(era_of("2026-07-28"), Some(Era::Modern));
        assert_eq!(era_of("1.0"), None);
        assert!(is_modern_error(-32022));
        assert!(!is_modern_error(-32601));
    }
}
