//! The values the probe puts on the wire (or on a process) that the judge must recognise again
//! in the transcript: the security checks' foreign `Origin` and `Host`, their malformed body,
//! and the purposes of the stdio processes a probe starts.
//!
//! One definition for both sides, so that a change on one cannot silently blind the other (the
//! judge used to carry the foreign Origin as a copied literal). It owns values only: what the
//! probe sends is `mcpulse-probe`'s, what the answers mean is `mcpulse-judge`'s.

/// The foreign `Origin` of the DNS-rebinding check: a page on another site.
pub const FOREIGN_ORIGIN: &str = "http://evil.example";

/// The foreign `Host` of the DNS-rebinding check (loopback targets): a name that resolves to
/// the server only through rebinding.
pub const FOREIGN_HOST: &str = "evil.example";

/// The malformed-request check's body: a deliberately truncated JSON-RPC request.
pub const MALFORMED_BODY: &str =
    r#"{"jsonrpc":"2.0","id":"mcpulse-malformed","method":"tools/list","params":{"#;

/// The purposes a stdio probe records on its processes
/// ([`crate::transcript::Process::purpose`]).
pub mod purpose {
    /// The probe's first process, which every probe starts.
    pub const PROBE: &str = "probe";
    /// The process of the stdio dual-era check: the judge leaves it out of the server's own
    /// lifecycle (its exit says nothing of the probe's session).
    pub const DUAL_ERA_CHECK: &str = "dual-era check";
    /// A fresh process for the legacy handshake, after the first went away.
    pub const LEGACY_FALLBACK: &str = "legacy fallback";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_foreign_origin_names_the_foreign_host() {
        assert_eq!(FOREIGN_ORIGIN.strip_prefix("http://"), Some(FOREIGN_HOST));
    }

    #[test]
    fn the_malformed_body_is_not_json() {
        assert!(serde_json::from_str::<serde_json::Value>(MALFORMED_BODY).is_err());
    }
}
