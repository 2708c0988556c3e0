//! The MCP the demo servers speak: JSON-RPC parsing and replies, version negotiation, and the
//! demo tools (what they list and what a call returns).
//!
//! Written from the spec digest, deliberately *not* from mcpulse's own wire crate: the demo is
//! meant to be an independent counterpart of the prober, so a bug shared by both cannot hide.
//! Transport concerns (HTTP status codes, headers, sessions, SSE framing) live with each server.

use crate::schedule::DriftStage;
use serde_json::{Map, Value, json};

/// The stateless revision.
pub const MODERN: &str = "2026-07-28";
/// The legacy revisions the demo servers negotiate, newest first.
pub const LEGACY: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The revision of the legacy HTTP+SSE transport.
pub const SSE_REVISION: &str = "2024-11-05";

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// The TS SDK v1's transport-level error code ("Bad Request: …", "Not Acceptable: …").
pub const SERVER_ERROR: i64 = -32000;
/// The TS SDK v1's "Session not found".
pub const SESSION_NOT_FOUND: i64 = -32001;
pub const HEADER_MISMATCH: i64 = -32020;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The `_meta` keys of 2026-07-28 requests and results.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// One message from a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
    },
    /// A response to a request of ours (the demo servers send none; ignored).
    Response,
    /// Not a message we can act on: the error reply to send (id `null`).
    Invalid(Value),
}

/// Parses one JSON-RPC message. Batches are refused: they exist only in 2025-03-26.
pub fn parse(text: &[u8]) -> Incoming {
    let Ok(v) = serde_json::from_slice::<Value>(text) else {
        return Incoming::Invalid(error(&Value::Null, PARSE_ERROR, "Parse error", None));
    };
    let Some(obj) = v.as_object() else {
        let why = if v.is_array() {
            "Invalid Request: JSON-RPC batches are not supported"
        } else {
            "Invalid Request: not a JSON-RPC object"
        };
        return Incoming::Invalid(error(&Value::Null, INVALID_REQUEST, why, None));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid(error(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: \"jsonrpc\" must be \"2.0\"",
            None,
        ));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str) else {
        if obj.contains_key("id") && (obj.contains_key("result") || obj.contains_key("error")) {
            return Incoming::Response;
        }
        return Incoming::Invalid(error(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: no method",
            None,
        ));
    };
    let method = method.to_owned();
    match obj.get("id") {
        None => Incoming::Notification { method },
        Some(id @ (Value::String(_) | Value::Number(_))) => Incoming::Request {
            id: id.clone(),
            method,
            params: obj
                .get("params")
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
        },
        Some(_) => Incoming::Invalid(error(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: id must be a string or a number",
            None,
        )),
    }
}

/// A result reply.
pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// An error reply.
pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut e = json!({ "code": code, "message": message });
    if let Some(d) = data {
        e["data"] = d;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": e })
}

/// Legacy version negotiation (lifecycle §Version Negotiation): the requested version when we
/// support it, otherwise our latest.
pub fn negotiate(requested: Option<&str>, supported: &[&'static str]) -> &'static str {
    supported
        .iter()
        .find(|v| Some(**v) == requested)
        .or(supported.first())
        .copied()
        .unwrap_or(SSE_REVISION)
}

/// Who a demo server says it is (`Implementation`).
pub fn server_info(name: &str, title: &str, rich: bool) -> Value {
    let mut v = json!({ "name": name, "version": env!("CARGO_PKG_VERSION") });
    if rich {
        v["title"] = Value::String(title.to_owned());
    }
    v
}

/// The legacy `InitializeResult`.
pub fn initialize_result(version: &str, info: Value, instructions: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": info,
        "instructions": instructions,
    })
}

/// Which tools a server lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Catalogue {
    /// `echo` and `add`.
    Basic,
    /// `echo`, `add` and `lookup`, whose definition depends on the stage.
    Drifting(DriftStage),
}

/// The tools of a catalogue. `rich` adds what 2025-03-26 and later know (titles,
/// annotations); the 2024-11-05 server lists only name, description and input schema.
pub fn tools(catalogue: Catalogue, rich: bool) -> Vec<Value> {
    let read_only = json!({
        "readOnlyHint": true,
        "destructiveHint": false,
        "idempotentHint": true,
        "openWorldHint": false,
    });
    let mut out = vec![
        json!({
            "name": "echo",
            "title": "Echo",
            "description": "Returns the message it is given.",
            "inputSchema": {
                "type": "object",
                "properties": { "message": { "type": "string", "description": "What to echo." } },
                "required": ["message"],
                "additionalProperties": false,
            },
            "annotations": read_only,
        }),
        json!({
            "name": "add",
            "title": "Add",
            "description": "Adds two numbers.",
            "inputSchema": {
                "type": "object",
                "properties": { "a": { "type": "number" }, "b": { "type": "number" } },
                "required": ["a", "b"],
                "additionalProperties": false,
            },
            "annotations": read_only,
        }),
    ];
    if let Catalogue::Drifting(stage) = catalogue {
        let description = match stage {
            DriftStage::Original => "Looks up a demo record by its id.",
            DriftStage::Reworded | DriftStage::ParameterAdded => {
                "Looks up a demo record by its id, with the record's full change history."
            }
        };
        let mut properties = json!({ "id": { "type": "string", "description": "The record id." } });
        let mut required = vec![json!("id")];
        if stage == DriftStage::ParameterAdded {
            properties["region"] = json!({ "type": "string", "enum": ["eu", "us"] });
            required.push(json!("region"));
        }
        out.push(json!({
            "name": "lookup",
            "title": "Lookup",
            "description": description,
            "inputSchema": {
                "type": "object",
                "properties": properties,
                "required": required,
            },
            "annotations": read_only,
        }));
    }
    if !rich {
        for t in &mut out {
            if let Some(o) = t.as_object_mut() {
                o.remove("title");
                o.remove("annotations");
            }
        }
    }
    out
}

/// Calls a tool: the `CallToolResult`, or a JSON-RPC error (code, message).
pub fn call_tool(catalogue: Catalogue, params: &Value) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    let listed = tools(catalogue, true);
    let Some(tool) = listed.iter().find(|t| t["name"] == name) else {
        return Err((INVALID_PARAMS, format!("Unknown tool: {name:?}")));
    };
    let required = tool
        .pointer("/inputSchema/required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for r in required.iter().filter_map(Value::as_str) {
        if args.get(r).is_none_or(Value::is_null) {
            return Err((INVALID_PARAMS, format!("{name}: missing argument {r:?}")));
        }
    }
    let text = match name {
        "echo" => args["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| args["message"].to_string()),
        "add" => match (args["a"].as_f64(), args["b"].as_f64()) {
            (Some(a), Some(b)) => (a + b).to_string(),
            _ => return Err((INVALID_PARAMS, "add: a and b must be numbers".to_owned())),
        },
        _ => format!(
            "record {}: a demo record{}",
            args["id"].as_str().unwrap_or("?"),
            args["region"]
                .as_str()
                .map(|r| format!(" in {r}"))
                .unwrap_or_default()
        ),
    };
    Ok(json!({ "content": [{ "type": "text", "text": text }], "isError": false }))
}

/// The answer to a legacy request once the session is set up (`initialize` is each
/// transport's own business: it negotiates and may mint a session).
pub fn legacy_answer(
    id: &Value,
    method: &str,
    params: &Value,
    catalogue: Catalogue,
    rich: bool,
) -> Value {
    match method {
        "ping" => result(id, json!({})),
        "tools/list" => match params.get("cursor") {
            // One page: any cursor but the empty string (the first page) is not ours.
            Some(Value::String(c)) if !c.is_empty() => {
                error(id, INVALID_PARAMS, "Invalid cursor", None)
            }
            _ => result(id, json!({ "tools": tools(catalogue, rich) })),
        },
        "tools/call" => match call_tool(catalogue, params) {
            Ok(r) => result(id, r),
            Err((code, message)) => error(id, code, &message, None),
        },
        _ => error(
            id,
            METHOD_NOT_FOUND,
            &format!("Method not found: {method}"),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_messages() {
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Incoming::Request { ref method, ref params, .. } if method == "ping" && params.is_object()
        ));
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification {
                method: "notifications/initialized".into()
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Incoming::Response
        );
        for bad in [
            &b"{"[..],
            b"[]",
            b"3",
            br#"{"id":1,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
        ] {
            let Incoming::Invalid(e) = parse(bad) else {
                panic!("{bad:?} parsed");
            };
            assert_eq!(e["id"], Value::Null);
            assert!(e["error"]["code"].as_i64().is_some_and(|c| c <= -32600));
        }
    }

    #[test]
    fn negotiates() {
        assert_eq!(negotiate(Some("2025-06-18"), LEGACY), "2025-06-18");
        assert_eq!(negotiate(Some("1999-01-01"), LEGACY), "2025-11-25");
        assert_eq!(negotiate(None, &[SSE_REVISION]), SSE_REVISION);
    }

    #[test]
    fn drift_stages_change_lookup() {
        let lookup = |s| {
            tools(Catalogue::Drifting(s), true)
                .into_iter()
                .find(|t| t["name"] == "lookup")
                .unwrap_or_default()
        };
        let (a, b, c) = (
            lookup(DriftStage::Original),
            lookup(DriftStage::Reworded),
            lookup(DriftStage::ParameterAdded),
        );
        assert_ne!(a["description"], b["description"]);
        assert_eq!(a["inputSchema"], b["inputSchema"]);
        assert_eq!(b["description"], c["description"]);
        assert_eq!(c["inputSchema"]["required"], json!(["id", "region"]));
    }

    #[test]
    fn calls_tools() {
        let ok = call_tool(
            Catalogue::Basic,
            &json!({"name":"add","arguments":{"a":2,"b":3}}),
        );
        assert_eq!(ok.unwrap_or_default()["content"][0]["text"], "5");
        let missing = call_tool(Catalogue::Basic, &json!({"name":"echo","arguments":{}}));
        assert!(matches!(missing, Err((INVALID_PARAMS, _))));
        let unknown = call_tool(Catalogue::Basic, &json!({"name":"lookup"}));
        assert!(matches!(unknown, Err((INVALID_PARAMS, _))));
        let stage = Catalogue::Drifting(DriftStage::ParameterAdded);
        assert!(call_tool(stage, &json!({"name":"lookup","arguments":{"id":"7"}})).is_err());
        assert!(
            call_tool(
                stage,
                &json!({"name":"lookup","arguments":{"id":"7","region":"eu"}})
            )
            .is_ok()
        );
    }

    #[test]
    fn legacy_answers() {
        let id = json!(3);
        assert_eq!(
            legacy_answer(&id, "ping", &json!({}), Catalogue::Basic, true)["result"],
            json!({})
        );
        let list = legacy_answer(
            &id,
            "tools/list",
            &json!({"cursor": ""}),
            Catalogue::Basic,
            false,
        );
        assert_eq!(list["result"]["tools"][0]["name"], "echo");
        assert!(list["result"]["tools"][0].get("annotations").is_none());
        let bad = legacy_answer(
            &id,
            "tools/list",
            &json!({"cursor": "x"}),
            Catalogue::Basic,
            true,
        );
        assert_eq!(bad["error"]["code"], INVALID_PARAMS);
        let nf = legacy_answer(&id, "server/discover", &json!({}), Catalogue::Basic, true);
        assert_eq!(nf["error"]["code"], METHOD_NOT_FOUND);
    }
}
