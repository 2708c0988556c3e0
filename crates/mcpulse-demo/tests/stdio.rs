//! The stdio demo server, driven over an in-memory duplex with the messages a prober sends:
//! `server/discover` first (refused with -32601, so the prober falls back in the same process),
//! then the legacy handshake and the inventory; end of input ends the server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_demo::serve_ndjson;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::test]
async fn answers_the_probe_sequence_and_exits_on_eof() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let (server_in, server_out) = tokio::io::split(server);
    let task = tokio::spawn(serve_ndjson(server_in, server_out));
    let (client_in, mut client_out) = tokio::io::split(client);
    let mut replies = BufReader::new(client_in).lines();

    let mut send = async |msg: Value| {
        let mut line = msg.to_string();
        line.push('\n');
        client_out.write_all(line.as_bytes()).await.expect("writes");
    };
    let discover = json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}}}});
    send(discover).await;
    send(
        json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
    )
    .await;
    send(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    send(json!({"jsonrpc":"2.0","id":"three","method":"tools/list","params":{}})).await;
    send(json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}})).await;
    send(json!({"jsonrpc":"2.0","id":5,"method":"ping"})).await;

    let mut next = async || -> Value {
        let line = replies
            .next_line()
            .await
            .expect("reads")
            .expect("a reply line");
        serde_json::from_str(&line).expect("every stdout line is JSON")
    };
    let r = next().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(1), json!(-32601))
    );
    let r = next().await;
    assert_eq!(r["id"], 2);
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(r["result"]["serverInfo"]["name"], "mcpulse-demo-stdio");
    // The notification got no reply: the next line answers tools/list.
    let r = next().await;
    assert_eq!(r["id"], "three");
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["echo", "add"]);
    let r = next().await;
    assert_eq!(r["result"]["content"][0]["text"], "hi");
    let r = next().await;
    assert_eq!(
        (r["id"].clone(), r["result"].clone()),
        (json!(5), json!({}))
    );

    // Garbage gets a parse error with a null id, and the server carries on.
    client_out.write_all(b"not json\n\n").await.expect("writes");
    let r = next().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );

    // End of input: the server returns.
    client_out.shutdown().await.expect("closes");
    drop(client_out);
    let done = tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("the server exits on EOF")
        .expect("joins");
    assert!(done.is_ok());
}
