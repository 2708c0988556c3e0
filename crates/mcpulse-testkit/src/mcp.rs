//! MCP messages as a server sends them, for the fakes: envelopes, the results of
//! `server/discover`, `initialize` and the list methods, and SSE framing.
//!
//! The shapes follow the MCP specification: 2025-11-25 for the legacy lifecycle and transports,
//! 2026-07-28 for `server/discover`, per-request `_meta` and the cache fields.
//! Deliberately independent of `mcpulse-wire`: the fakes must not share mcpulse's idea of the
//! protocol, or a misreading would be invisible to the tests.

use serde_json::{Value, json};

/// The modern (stateless) revision.
pub const MODERN: &str = "2026-07-28";
/// The newest legacy revision.
pub const LEGACY: &str = "2025-11-25";

/// The `_meta` key of a modern result's server identity.
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// A JSON-RPC result.
pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// A JSON-RPC error (pass `&Value::Null` for an error not tied to a request).
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// A JSON-RPC notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

/// Who the fake servers say they are.
pub fn server_info() -> Value {
    json!({ "name": "fake-mcp", "version": "1.2.3" })
}

/// Tools with these names (each with a minimal input schema).
pub fn tools(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| {
            json!({
                "name": n,
                "description": format!("the {n} tool"),
                "inputSchema": { "type": "object", "properties": {} },
            })
        })
        .collect()
}

/// The fields every complete, cacheable 2026-07-28 result carries, merged into `result`.
pub fn modern(mut result: Value) -> Value {
    if let Some(o) = result.as_object_mut() {
        o.insert("resultType".into(), json!("complete"));
        o.insert("ttlMs".into(), json!(60_000));
        o.insert("cacheScope".into(), json!("public"));
        o.insert("_meta".into(), json!({ SERVER_INFO_META: server_info() }));
    }
    result
}

/// A `server/discover` result: the modern revision, the tools capability, the cache fields and
/// the server identity in `_meta`.
pub fn discover_result() -> Value {
    modern(json!({
        "supportedVersions": [MODERN],
        "capabilities": { "tools": { "listChanged": false } },
        "instructions": "a fake server for mcpulse's tests",
    }))
}

/// A legacy `initialize` result at `version`.
pub fn initialize_result(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": server_info(),
    })
}

/// A `tools/list` result page; modern pages carry the cache fields.
pub fn tools_list_result(tools: Vec<Value>, next_cursor: Option<&str>, modern_era: bool) -> Value {
    let mut r = json!({ "tools": tools });
    if let (Some(c), Some(o)) = (next_cursor, r.as_object_mut()) {
        o.insert("nextCursor".into(), json!(c));
    }
    if modern_era { modern(r) } else { r }
}

/// One SSE event, framed (`event:`, `id:`, `data:` lines and the blank line that ends it).
/// Empty `data` makes a priming event.
pub fn sse_event(event: Option<&str>, id: Option<&str>, data: &str) -> String {
    let mut s = String::new();
    if let Some(e) = event {
        s.push_str(&format!("event: {e}\n"));
    }
    if let Some(i) = id {
        s.push_str(&format!("id: {i}\n"));
    }
    if data.is_empty() {
        s.push_str("data:\n");
    }
    for line in data.lines() {
        s.push_str(&format!("data: {line}\n"));
    }
    s.push('\n');
    s
}

/// A `notifications/progress` a server sends before the reply to a long request.
pub fn progress(token: i64, progress: u64) -> Value {
    notification(
        "notifications/progress",
        json!({ "progressToken": token, "progress": progress, "total": 100 }),
    )
}
