//! The health rules: what makes a server `down` (critical) or `degraded` (warning), and what is
//! only worth knowing (info). It owns each rule's code, severity and text; the checks that emit
//! them live in `report`, the registry and the docs page in [`super`].

use super::Severity;

crate::rule_family! {
    /// A health rule. The variant order is the order of `docs/findings.md`.
    Rule, Severity;
    DnsFailed = "dns-failed", Critical,
        "The target's host name did not resolve.",
        "No client can reach a server whose name does not resolve. Check the host name and the resolver.";
    ConnectFailed = "connect-failed", Critical,
        "The TCP connection was refused or could not be made.",
        "Nothing is listening at the address, or a firewall drops the traffic. Check that the server runs and listens on that port.";
    TlsFailed = "tls-failed", Critical,
        "The TLS handshake failed (untrusted, expired or mismatched certificate, or no common protocol).",
        "Clients verify certificates; a failing handshake is an outage for all of them.";
    HttpFailed = "http-failed", Critical,
        "The HTTP exchange failed below the protocol: a reset, a malformed response, a redirect loop.",
        "The server or a proxy in front of it broke the connection.";
    Timeout = "timeout", Critical,
        "The server did not complete the handshake (or discovery) before the deadline.",
        "A server that accepts connections but never answers is the classic silent failure: stuck event loop, exhausted worker pool, deadlock.";
    ServerError = "server-error", Critical,
        "The server answered with an HTTP 5xx status.",
        "The server or its gateway reports an internal failure.";
    NotJsonRpc = "not-json-rpc", Critical,
        "The server answered, but not with JSON-RPC (an HTML page, a plain-text error, an empty body).",
        "An HTTP 200 with an error page is not a working MCP server: typically a proxy, a login wall or the wrong URL.";
    WrongReplyId = "wrong-reply-id", Critical,
        "The server answered with JSON-RPC messages, none of which carried the id of our request.",
        "Clients match replies by id; a reply with the wrong id leaves every request hanging.";
    HandshakeFailed = "handshake-failed", Critical,
        "The server rejected the handshake: `initialize` (and, in auto mode, `server/discover`) failed.",
        "No client can start a session with it.";
    ResponseTooLarge = "response-too-large", Critical,
        "A response passed the size cap before it was complete.",
        "mcpulse caps responses (`--max-response-size`) so a misbehaving server cannot exhaust memory.";
    SseNoEndpoint = "sse-no-endpoint", Critical,
        "The legacy HTTP+SSE stream did not announce its `endpoint` event.",
        "Without the endpoint event a 2024-11-05 client has nowhere to POST.";
    SpawnFailed = "spawn-failed", Critical,
        "The stdio server's command could not be started.",
        "The command is missing, not executable, or not on PATH.";
    ProcessExited = "process-exited", Critical,
        "The stdio server exited before it completed the handshake.",
        "Its stderr, shown with the finding, usually says why.";
    ProcessExitedAfterHandshake = "process-exited-after-handshake", Critical,
        "The stdio server exited on its own after the handshake, while the probe was still using it (a crash on `tools/list`, say).",
        "A client would lose its session with it. Its stderr, shown with the finding, usually says why.";
    HealthEndpointDown = "health-endpoint-down", Critical,
        "The server's health endpoint (`--health-url`) reports it down: an HTTP 5xx, or a document whose `status` is `fail` (with any status code) (`down`, `error`, `unhealthy`).",
        "The server says of itself that it cannot serve: `mcpulse supervise` answers 503 while its child is starting, backing off after a crash, or given up on. The findings that follow name the failing components.";
    HealthEndpointUnreachable = "health-endpoint-unreachable", Critical,
        "The health endpoint could not be read: connection refused, timed out, or a redirect off its origin.",
        "Whoever watches this endpoint (a load balancer, Kubernetes, `mcpulse monitor`) sees the server as down. If only the endpoint is wrong, fix `--health-url`.";
    CriticalCallFailed = "critical-call-failed", Critical,
        "A synthetic tool call marked critical (`--critical`) failed: any of the `tool-*` findings of that call.",
        "You said this tool is the server's reason to exist (its database query, its upstream API): when it fails, the server is down for its users even though it answers the protocol.";
    HealthToolDown = "health-tool-down", Critical,
        "The server's health tool (`--health-tool`) reports `down` (`unhealthy`, `fail`, `error`).",
        "The server says of itself that a dependency it needs is down. The component findings that follow name it.";
    HealthEndpointDegraded = "health-endpoint-degraded", Warning,
        "The health endpoint reports `warn` (`degraded`): up, but something behind it is not well.",
        "`mcpulse supervise` reports `warn` while its child is busy (a heartbeat unanswered during a long tool call). The component findings say what.";
    HealthEndpointInvalid = "health-endpoint-invalid", Warning,
        "The health endpoint answered, but not with a health document: an HTML page, unparseable JSON, no `status`, a body over 64 KiB, an unfollowed redirect, or a 4xx that is not a health document (a 404: the URL is wrong).",
        "An HTTP 200 with a login page or a proxy's error page is not a healthy server: mcpulse does not take a 2xx alone as health. But something answered, and the usual cause is a mistyped `--health-url` (`health_url` in a monitor target), a config mistake rather than an outage: degraded, not down, so it does not page as one. A 503, or a document whose `status` is `fail`, is still `health-endpoint-down`.";
    HealthComponentUnhealthy = "health-component-unhealthy", Warning,
        "A component in the health document's `checks` reports `warn` or `fail`.",
        "The component is named (a database, the supervised child, its heartbeat) with its observed value and output, so the alert says what is wrong behind the server, not only that it is.";
    HealthToolDegraded = "health-tool-degraded", Warning,
        "The server's health tool reports `degraded` (`warn`).",
        "Up, but something behind it is not well; the component findings say what.";
    HealthToolInvalid = "health-tool-invalid", Warning,
        "The health tool answered, but not with a health document: no `structuredContent` or JSON text with a known `status`.",
        "A health tool whose answer cannot be read tells nothing; give it `structuredContent` with `status` (ok, degraded or down) and `checks` per component.";
    ToolCallFailed = "tool-call-failed", Warning,
        "A synthetic tool call (`--call`) failed: a JSON-RPC error, a result with `isError: true`, or no reply.",
        "The server answers the protocol, but the tool does not work: typically a dependency behind it (a database, an API) is down. Degraded by default; `--critical` makes it down.";
    ToolCallSlow = "tool-call-slow", Warning,
        "A synthetic tool call took longer than its budget (`--budget`, 5 s by default); one that had not answered by then was given up and cancelled.",
        "Agents time out on slow tools as they do on slow servers. Over stdio mcpulse sends `notifications/cancelled`; over Streamable HTTP it closes the response stream.";
    ToolOutputInvalid = "tool-output-invalid", Warning,
        "A tool that declares an `outputSchema` returned `structuredContent` that does not validate against it, or none at all.",
        "Clients validate structured results against the declared schema (the spec says servers MUST conform): a mismatch breaks every client that relies on it.";
    ToolOutputSchemaInvalid = "tool-output-schema-invalid", Warning,
        "A called tool's `outputSchema` could not be compiled as a JSON Schema (or refers to a remote schema, which mcpulse does not fetch).",
        "No client can validate the tool's results against it. mcpulse never fetches a `$ref` over the network.";
    ToolExpectationFailed = "tool-expectation-failed", Warning,
        "A condition on a synthetic call's result (`--expect 'PATH OP VALUE'`) did not hold.",
        "The tool answered, but not what a working one answers: the condition, and what was found instead, are in the message.";
    ToolCallRefused = "tool-call-refused", Warning,
        "A tool asked for (`--call`, `--health-tool NAME`) was not called: not listed, not annotated read-only, annotated destructive, with required arguments (a health tool), or no time left.",
        "A health check must not mutate anything by accident: pass `--allow-side-effects` to call a tool that may. A check that was asked for and not made is not a pass.";
    AuthRequired = "auth-required", Warning,
        "The server answered 401: it is up, but gated behind authentication.",
        "Up but gated, not down. Supply credentials with `--header` or `--bearer-env` to probe further.";
    Forbidden = "forbidden", Warning,
        "The server answered 403: the credentials (or the Origin) are not allowed.",
        "Up but refusing this client. Check the token's scopes, or the server's Origin allow-list.";
    ToolsListFailed = "tools-list-failed", Warning,
        "`tools/list` failed although the server advertises the tools capability.",
        "Agents cannot discover tools: the server is useless to them even though the handshake works.";
    PromptsListFailed = "prompts-list-failed", Warning,
        "`prompts/list` failed although the server advertises the prompts capability.",
        "Clients that show prompts will fail.";
    ResourcesListFailed = "resources-list-failed", Warning,
        "`resources/list` failed although the server advertises the resources capability.",
        "Clients that read resources will fail.";
    SlowHandshake = "slow-handshake", Warning,
        "The handshake (or discovery) took longer than the latency budget (`--latency-budget`).",
        "Slow handshakes are an early sign of overload and make agents time out.";
    ProtocolVersionMissing = "protocol-version-missing", Warning,
        "The `initialize` result carried no `protocolVersion`.",
        "Clients cannot tell which revision to speak.";
    ProtocolVersionUnknown = "protocol-version-unknown", Warning,
        "The server chose a protocol version mcpulse does not know, or does not support the modern revision it claims.",
        "Clients that do not support the version disconnect (the spec says they SHOULD).";
    CursorRepeated = "cursor-repeated", Warning,
        "A list returned a `nextCursor` it had returned before.",
        "A client following the cursors would loop forever.";
    PageLimit = "page-limit", Warning,
        "A list still had pages after `--max-pages`.",
        "Very long or endless pagination; the inventory is incomplete.";
    ListTruncated = "list-truncated", Warning,
        "A list (across its pages) had more than 10,000 items; the first 10,000 were kept and checked, the rest only counted.",
        "No client shows a model that many tools; mcpulse keeps its memory bounded rather than hold them all. The inventory, the security checks and the contract cover the kept items only, and no contract is taken.";
    StdoutPollution = "stdout-pollution", Warning,
        "The stdio server wrote lines to stdout that are not JSON-RPC messages.",
        "The spec forbids it: clients may fail to parse the stream. Log to stderr instead.";
    JsonRpcEnvelope = "jsonrpc-envelope", Warning,
        "A reply lacked `\"jsonrpc\": \"2.0\"`.",
        "Strict clients reject such messages.";
    ToolsListUnsupported = "tools-list-unsupported", Info,
        "`tools/list` failed, and the server does not advertise the tools capability.",
        "Consistent: a server without tools. Reported for completeness.";
    OptionalMethodMissing = "optional-method-missing", Info,
        "The server advertises `prompts` or `resources` but answered `-32601 Method not found` to one of that capability's list methods (`prompts/list`, `resources/list` or `resources/templates/list`).",
        "A clean, immediate \"no such method\": a client that asks treats it as an empty list, and agents that never use prompts, resources or templates are unaffected, so the server stays healthy. Typical of `resources/templates/list` on servers written before templates existed. Implement the method (an empty list will do) or stop advertising the capability. Any other failure of these lists (an internal error, a timeout, a reply without the list) is still `prompts-list-failed` or `resources-list-failed`, and `tools/list` answering `-32601` is still `tools-list-failed` (`tools-list-unsupported` without the tools capability): tools are what agents use.";
    DualEra = "dual-era", Info,
        "The server speaks both the modern (2026-07-28) and the legacy protocol.",
        "Old and new clients can both use it.";
    LegacyOnly = "legacy-only", Info,
        "The server does not speak the stateless 2026-07-28 revision.",
        "Modern clients fall back to the legacy handshake; plan an upgrade of the server's SDK.";
    DeprecatedSse = "deprecated-transport", Info,
        "The server uses the legacy HTTP+SSE transport (2024-11-05), deprecated since 2025-03-26.",
        "Move to Streamable HTTP; the old transport is scheduled for removal.";
    ModernResultFields = "modern-result-fields", Info,
        "A modern result lacked `resultType`, `ttlMs` or `cacheScope`, or had invalid values.",
        "2026-07-28 requires them; clients fall back to defaults (complete, 0 ms, private).";
    ServerInfoMissing = "server-info-missing", Info,
        "The server did not identify itself (`serverInfo`).",
        "Harder to tell which build is running when something breaks.";
    SessionDeleteFailed = "session-delete-failed", Info,
        "Ending the legacy session with `DELETE` failed (other than with 405, which is allowed).",
        "Sessions may pile up on the server.";
    Stderr = "stderr-output", Info,
        "The stdio server wrote to stderr.",
        "Allowed by the spec; shown because it is often the first clue.";
    HealthEndpointNotFound = "health-endpoint-not-found", Info,
        "`--health-url auto` (a monitor target's `health_url = \"auto\"`) read `/healthz`, `/readyz` and `/health` on the MCP endpoint's origin, and none answered with a health document.",
        "Not a failure: many servers have no health endpoint. A 404, or an HTML page answered with 200 to every path (a catch-all, a login page), is not taken as health. Give the endpoint's URL to `--health-url` if it lives elsewhere.";
    SlowStartup = "slow-startup", Info,
        "The stdio server took more than 5 s from spawn to its first output (`timings_ms.startup`).",
        "Usually a package manager's download (`npx`, `uvx`) or a slow interpreter start: every client that spawns the server waits as long. Not judged as handshake latency, which is timed from the first output on.";
}

/// The three layers of a server's health: can it be reached or started (liveness), does it
/// speak MCP (protocol: the handshake and the lists), and do the things behind it work
/// (dependencies: synthetic calls, its health tool, its health endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Liveness,
    Protocol,
    Dependencies,
}

impl Rule {
    /// The layer a finding of this rule is about.
    pub fn layer(self) -> Layer {
        use Rule::*;
        match self {
            DnsFailed
            | ConnectFailed
            | TlsFailed
            | HttpFailed
            | SpawnFailed
            | ProcessExited
            | ProcessExitedAfterHandshake
            | SlowStartup
            | Stderr => Layer::Liveness,
            HealthEndpointDown
            | HealthEndpointUnreachable
            | HealthEndpointInvalid
            | HealthEndpointDegraded
            | HealthEndpointNotFound
            | HealthComponentUnhealthy
            | CriticalCallFailed
            | HealthToolDown
            | HealthToolDegraded
            | HealthToolInvalid
            | ToolCallFailed
            | ToolCallSlow
            | ToolOutputInvalid
            | ToolOutputSchemaInvalid
            | ToolExpectationFailed
            | ToolCallRefused => Layer::Dependencies,
            _ => Layer::Protocol,
        }
    }

    /// The severity every finding of this rule has: the verdict follows from it.
    pub fn severity(self) -> Severity {
        self.weight()
    }

    /// A finding of this rule, at the rule's severity.
    pub fn finding(self, message: impl Into<String>) -> super::Finding {
        super::Finding {
            code: self,
            severity: self.severity(),
            message: message.into(),
        }
    }
}
