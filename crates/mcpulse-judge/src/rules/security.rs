//! The security rules: code, documented level, title and explanation of each, the published
//! pattern lists the tool and leak checks match against, and how a level may depend on what was
//! seen ([`Exposure`]). It does not own the checks themselves (`crate::security`).

use serde::{Deserialize, Serialize};

/// How much a security finding weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Low => "low",
            Level::Medium => "medium",
            Level::High => "high",
            Level::Critical => "critical",
        }
    }
    /// Points off the score of 100.
    pub fn penalty(self) -> u32 {
        match self {
            Level::Info => 0,
            Level::Low => 5,
            Level::Medium => 15,
            Level::High => 30,
            Level::Critical => 60,
        }
    }
}

/// The grade thresholds, best first: (grade, minimum score).
pub const GRADES: &[(&str, u32)] = &[("A", 90), ("B", 75), ("C", 60), ("D", 40), ("F", 0)];

crate::rule_family! {
    /// A security rule. The variant order is the order of `docs/checks.md`.
    SecRule, Level;
    PlainHttpRemote = "plain-http-remote", Critical,
        "The target is `http://` on a host that is not loopback.",
        "Tokens and tool traffic cross the network in clear text; bearer tokens (RFC 6750) and OAuth 2.1 require TLS.";
    TlsInvalid = "tls-invalid", Critical,
        "The TLS handshake failed on the certificate (untrusted, expired, wrong name).",
        "Clients either fail or are taught to skip verification, which invites interception.";
    TlsExpiring = "tls-expiring", Medium,
        "The server certificate expires in less than 14 days.",
        "An expired certificate is an outage for every client; renew before it happens.";
    OriginNotValidated = "origin-not-validated", High,
        "A request with a foreign `Origin: http://evil.example` was accepted instead of rejected with 403. Critical for a loopback server without authentication.",
        "The spec requires servers to validate `Origin` (403 since 2025-11-25); without it a web page can drive a local server through DNS rebinding.";
    HostNotValidated = "host-not-validated", High,
        "A loopback server accepted a request with a foreign `Host: evil.example`. Critical without authentication.",
        "The conformance scenario `dns-rebinding-protection`: a rebinding attack reaches a local server under a foreign host name.";
    NoAuthRemote = "no-auth-remote", Info,
        "A server on a non-loopback host answered `tools/list` without any credentials. Low when it exposes tools that may be destructive.",
        "Fine for a deliberately public server; otherwise anyone who can reach it can use its tools. Use `--expect-auth` to make it high.";
    ChallengeMissing = "auth-challenge-missing", Medium,
        "A 401 came without a `WWW-Authenticate` header, and no protected-resource metadata was found at the well-known URLs either.",
        "Clients cannot discover how to authenticate (RFC 9728, MCP authorization).";
    ResourceMetadataInvalid = "resource-metadata-invalid", Medium,
        "The protected-resource metadata (RFC 9728) is missing, not JSON, lacks `authorization_servers`, or names another resource.",
        "Clients cannot find the authorization server, or may send tokens meant for another resource.";
    AuthServerMetadataMissing = "auth-server-metadata-missing", Medium,
        "No authorization-server metadata (RFC 8414 or OpenID discovery) was found for the advertised issuer.",
        "Clients cannot learn the endpoints and must refuse to proceed.";
    IssuerMismatch = "issuer-mismatch", High,
        "The authorization-server metadata's `issuer` differs from the issuer it was fetched for.",
        "The 2026 spec requires rejecting such metadata: it is the mix-up attack's opening.";
    PkceS256Missing = "pkce-s256-missing", High,
        "`code_challenge_methods_supported` is absent or lacks `S256`.",
        "MCP clients must use PKCE with S256 and must refuse an authorization server that does not advertise it.";
    AuthEndpointsNotHttps = "auth-endpoints-not-https", High,
        "An authorization-server endpoint (authorization, token, registration) is not HTTPS.",
        "All authorization-server endpoints must be HTTPS: codes and tokens would travel in clear text.";
    MetadataPrivateAddress = "metadata-private-address", High,
        "A public server's metadata pointed at a non-public address; mcpulse refused to follow it.",
        "A server that sends clients to internal addresses is a server-side request forgery vector.";
    CorsWildcardCredentials = "cors-wildcard-credentials", High,
        "`Access-Control-Allow-Origin: *` together with `Access-Control-Allow-Credentials: true`.",
        "Any web page may make credentialed requests (browsers refuse the combination, but the intent is unsafe and proxies vary).";
    CorsReflectsOrigin = "cors-reflects-origin", High,
        "The server reflected the foreign `Origin` in `Access-Control-Allow-Origin` (high with `Access-Control-Allow-Credentials: true`, medium without).",
        "Any web page may read responses; with credentials allowed this hands a user's session to any site.";
    CorsWildcard = "cors-wildcard", Low,
        "`Access-Control-Allow-Origin: *` on a loopback server without authentication.",
        "A browser page can call a local server directly.";
    SessionIdWeak = "session-id-weak", Medium,
        "An `Mcp-Session-Id` is short, low in entropy, not visible ASCII, or predictable from another.",
        "Session ids must be secure and non-deterministic (spec: session hijacking).";
    HiddenUnicode = "tool-hidden-unicode", High,
        "Invisible, bidirectional-control or tag Unicode characters in a tool's name, title or description.",
        "Text a person cannot see but the model reads: the signature of tool poisoning.";
    Homoglyph = "tool-homoglyph", Medium,
        "A tool name with characters outside `[A-Za-z0-9_.-]` that look like ASCII (Cyrillic, Greek, full-width).",
        "A look-alike name can shadow a trusted tool.";
    PromptInjection = "tool-prompt-injection", Medium,
        "A tool description addresses the model with instructions from a small published pattern list (see below).",
        "Descriptions are read by the model; instructions hidden in them steer the agent.";
    ExcessiveTools = "tool-count-excessive", Low,
        "More than 100 tools.",
        "Clients cap the tools they show the model (often at 128); a huge surface is hard to review.";
    DestructiveUnannotated = "tool-destructive-unannotated", Low,
        "A tool whose name looks destructive (delete, remove, drop, …) does not declare `destructiveHint`, or declares `readOnlyHint: true`.",
        "Clients use the hints to ask for confirmation; an honest server declares them.";
    ErrorLeak = "error-leak", Medium,
        "The response to a malformed request contains a stack trace or an internal file path.",
        "Internals help an attacker; errors should say what was wrong with the request and nothing more.";
}

/// Patterns of descriptions that address the model (lowercase substrings). Published in
/// `docs/checks.md`.
pub const INJECTION_PATTERNS: &[&str] = &[
    "ignore previous instructions",
    "ignore all previous",
    "ignore any previous",
    "disregard previous",
    "<important>",
    "</important>",
    "do not tell the user",
    "don't tell the user",
    "do not mention",
    "without telling the user",
    "you must always",
    "~/.ssh",
    "id_rsa",
    ".env file",
    "<instructions>",
];

/// Tool names that look destructive (matched as whole words of the name).
pub const DESTRUCTIVE_WORDS: &[&str] = &[
    "delete",
    "remove",
    "rm",
    "drop",
    "destroy",
    "kill",
    "terminate",
    "truncate",
    "purge",
    "wipe",
    "erase",
    "reset",
    "revoke",
    "overwrite",
    "shutdown",
];

/// What `error-leak` looks for in an error body: (substring, what it shows). Published in
/// `docs/checks.md`.
pub const LEAK_PATTERNS: &[(&str, &str)] = &[
    ("Traceback (most recent call last)", "a Python traceback"),
    ("panicked at", "a Rust panic message"),
    ("Exception in thread", "a Java stack trace"),
    ("\tat ", "a stack trace"),
    ("    at ", "a JavaScript stack trace"),
    ("goroutine ", "a Go stack trace"),
    ("node_modules/", "an internal node_modules path"),
    ("/site-packages/", "an internal Python path"),
    ("/home/", "an internal home-directory path"),
    ("/usr/src/", "an internal source path"),
    ("/var/www/", "an internal path"),
    ("C:\\\\", "an internal Windows path"),
];
/// What was seen that a rule's level may depend on. Four rules weigh more or less than their
/// documented default, each as its explanation says; the level is then [`SecRule::level_in`],
/// never a level chosen at the call site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exposure {
    /// A loopback target that neither sent credentials nor answered 401: `origin-not-validated`
    /// and `host-not-validated` are critical (a web page can drive it through DNS rebinding).
    pub loopback_without_auth: bool,
    /// `--expect-auth`: `no-auth-remote` is high.
    pub auth_expected: bool,
    /// Some tools are not declared read-only or non-destructive: `no-auth-remote` is low.
    pub tools_may_write: bool,
    /// The response allowed credentials (`Access-Control-Allow-Credentials: true`):
    /// `cors-reflects-origin` is high; without, medium.
    pub credentials_allowed: bool,
}

impl SecRule {
    /// The documented default level (the one `docs/checks.md` and SARIF list).
    pub fn level(self) -> Level {
        self.weight()
    }

    /// The level of a finding of this rule given what was seen: the default, except for the
    /// four rules [`Exposure`] names.
    pub fn level_in(self, e: Exposure) -> Level {
        match self {
            SecRule::OriginNotValidated | SecRule::HostNotValidated if e.loopback_without_auth => {
                Level::Critical
            }
            SecRule::NoAuthRemote if e.auth_expected => Level::High,
            SecRule::NoAuthRemote if e.tools_may_write => Level::Low,
            SecRule::CorsReflectsOrigin if !e.credentials_allowed => Level::Medium,
            r => r.level(),
        }
    }
}
