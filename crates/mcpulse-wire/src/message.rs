//! The exact messages a prober sends, per era.
//!
//! A prober advertises no client capabilities, so a legacy server never sends it sampling,
//! elicitation or roots requests, and never calls a tool.

use crate::version::{Era, LEGACY_LATEST, MODERN};
use serde_json::{Value, json};

/// Who we say we are in `clientInfo`.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub name: String,
    pub version: String,
}

impl ClientInfo {
    fn to_value(&self) -> Value {
        json!({ "name": self.name, "version": self.version })
    }
}

/// The list methods a probe uses to take inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl ListKind {
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::ResourceTemplates => "resources/templates/list",
        }
    }
    /// The member of the result that holds the items.
    pub fn items_key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
        }
    }
    /// The server capability that advertises this list.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::ResourceTemplates => "resources",
            other => other.items_key(),
        }
    }
}

/// The per-request `_meta` every modern request carries.
pub fn modern_meta(version: &str, client: &ClientInfo) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": client.to_value(),
    })
}

/// A JSON-RPC request with a method and params.
pub fn request(id: i64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// `server/discover` at the given modern revision.
pub fn discover(id: i64, version: &str, client: &ClientInfo) -> Value {
    request(
        id,
        "server/discover",
        json!({ "_meta": modern_meta(version, client) }),
    )
}

/// Legacy `initialize`, offering the newest legacy revision.
pub fn initialize(id: i64, client: &ClientInfo) -> Value {
    request(
        id,
        "initialize",
        json!({
            "protocolVersion": LEGACY_LATEST,
            "capabilities": {},
            "clientInfo": client.to_value(),
        }),
    )
}

/// `notifications/initialized`, sent once `initialize` succeeded.
pub fn initialized() -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })
}

/// A page of a list, in the given era.
pub fn list(id: i64, kind: ListKind, cursor: Option<&str>, era: Era, client: &ClientInfo) -> Value {
    let mut params = serde_json::Map::new();
    if let Some(c) = cursor {
        params.insert("cursor".into(), Value::String(c.to_owned()));
    }
    if era == Era::Modern {
        params.insert("_meta".into(), modern_meta(MODERN, client));
    }
    request(id, kind.method(), Value::Object(params))
}

/// `tools/call` of `name` with `arguments`, in the given era (a modern request carries its
/// `_meta`).
pub fn tools_call(
    id: i64,
    name: &str,
    arguments: &serde_json::Map<String, Value>,
    era: Era,
    client: &ClientInfo,
) -> Value {
    let mut params = serde_json::Map::new();
    params.insert("name".into(), Value::String(name.to_owned()));
    params.insert("arguments".into(), Value::Object(arguments.clone()));
    if era == Era::Modern {
        params.insert("_meta".into(), modern_meta(MODERN, client));
    }
    request(id, "tools/call", Value::Object(params))
}

/// `notifications/cancelled` for request `id` (as it was sent: a number or a string), given up.
pub fn cancelled(id: impl Into<Value>, reason: &str) -> Value {
    let id: Value = id.into();
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": id, "reason": reason },
    })
}

/// A JSON-RPC error reply, used to decline server-to-client requests over stdio.
pub fn method_not_found_reply(id: &crate::jsonrpc::Id) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": -32601, "message": "mcpulse is a prober and supports no client features" }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> ClientInfo {
        ClientInfo {
            name: "mcpulse".into(),
            version: "0.1.0".into(),
        }
    }

    #[test]
    fn discover_carries_required_meta() {
        let d = discover(1, MODERN, &me());
        let meta = &d["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], MODERN);
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({})
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"],
            "mcpulse"
        );
    }

    #[test]
    fn list_pages() {
        let l = list(3, ListKind::Tools, Some(""), Era::Legacy, &me());
        assert_eq!(l["params"], json!({"cursor": ""}));
        let m = list(3, ListKind::Prompts, None, Era::Modern, &me());
        assert_eq!(m["method"], "prompts/list");
        assert!(m["params"]["_meta"].is_object());
    }
}
