// The upstream of the gateway benchmark (bench/gateway/run.sh): a tiny, fast MCP server with no
// SDK, serving the same four methods over stdio and over Streamable HTTP, so that every path
// (direct HTTP, and each bridge in front of its stdio or its HTTP) talks to the same server and
// the server is not what is measured: `initialize`, `ping`, `tools/list` and `tools/call echo`
// (the `text` argument back as a text content).
//
//   node echo_server.cjs stdio
//   node echo_server.cjs http PORT       # http://127.0.0.1:PORT/mcp
//
// With BENCH_SERVICE_MS set (the saturation benchmark, saturation.sh), a second tool, `work`,
// answers after holding one of BENCH_SERVICE_SLOTS (default 4) slots for BENCH_SERVICE_MS ms:
// a server with a fixed service time and a fixed capacity (SLOTS * 1000 / MS calls/s), whose
// excess waits in its own queue, in arrival order, as a thread pool's would.
//
// Over HTTP it behaves as a stateful legacy (2025-11-25) server: `initialize` issues an
// Mcp-Session-Id, later requests must carry it (404 for an unknown one, 400 without), replies
// are application/json, notifications get 202, DELETE ends the session, GET is 405 (no
// server-initiated stream). Bodies are capped at 16 MiB.
"use strict";
const http = require("node:http");
const { randomUUID } = require("node:crypto");

const TOOLS = {
  tools: [
    {
      name: "echo",
      description: "Echoes back the text",
      inputSchema: { type: "object", properties: { text: { type: "string" } } },
    },
  ],
};
const MAX_BODY = 16 << 20;
const SERVICE_MS = Number(process.env.BENCH_SERVICE_MS || 0);
const SERVICE_SLOTS = Number(process.env.BENCH_SERVICE_SLOTS || 4);
if (SERVICE_MS > 0) {
  TOOLS.tools.push({
    name: "work",
    description: `Answers after ${SERVICE_MS} ms of work; ${SERVICE_SLOTS} at a time`,
    inputSchema: { type: "object", properties: {} },
  });
}

// The `work` tool's slots: `busy` calls hold one; the others wait in `waiting`, FIFO.
let busy = 0;
const waiting = [];
function work(done) {
  if (busy >= SERVICE_SLOTS) return waiting.push(done);
  busy++;
  setTimeout(() => {
    busy--;
    done();
    if (waiting.length) work(waiting.shift());
  }, SERVICE_MS);
}

// Like answer(), but `tools/call work` answers through `reply` once its work is done.
function respond(msg, reply) {
  if (SERVICE_MS > 0 && msg && msg.method === "tools/call" && msg.params && msg.params.name === "work" && msg.id !== undefined) {
    return work(() => reply({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "done" }] } }));
  }
  reply(answer(msg));
}

// The reply to one request, or null for a notification or a reply.
function answer(msg) {
  if (msg === null || typeof msg !== "object" || msg.id === undefined || typeof msg.method !== "string") {
    return null;
  }
  const params = msg.params || {};
  let result;
  switch (msg.method) {
    case "initialize":
      result = {
        protocolVersion: params.protocolVersion || "2025-11-25",
        capabilities: { tools: {} },
        serverInfo: { name: "bench-echo", version: "1" },
      };
      break;
    case "ping":
      result = {};
      break;
    case "tools/list":
      result = TOOLS;
      break;
    case "tools/call": {
      const text = (params.arguments && params.arguments.text) || "";
      result = { content: [{ type: "text", text: String(text) }] };
      break;
    }
    default:
      return { jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } };
  }
  return { jsonrpc: "2.0", id: msg.id, result };
}

function stdio() {
  let buf = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      respond(msg, (reply) => {
        if (reply) process.stdout.write(JSON.stringify(reply) + "\n");
      });
    }
  });
  process.stdin.on("end", () => process.exit(0));
}

function serve(port) {
  const sessions = new Set();
  const send = (res, status, body, headers = {}) => {
    const text = body === undefined ? "" : JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
    res.end(text);
  };
  const server = http.createServer((req, res) => {
    if (req.url.split("?")[0] !== "/mcp") return send(res, 404, { error: "not found" });
    const sid = req.headers["mcp-session-id"];
    if (req.method === "DELETE") {
      if (!sessions.delete(sid)) return send(res, 404, { error: "no such session" });
      return send(res, 200);
    }
    if (req.method !== "POST") return send(res, 405, { error: "method not allowed" }, { allow: "POST, DELETE" });
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      let msg;
      try {
        msg = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        return send(res, 400, { jsonrpc: "2.0", id: null, error: { code: -32700, message: "parse error" } });
      }
      if (msg && msg.method === "initialize") {
        const id = randomUUID();
        sessions.add(id);
        return send(res, 200, answer(msg), { "mcp-session-id": id });
      }
      if (!sid) return send(res, 400, { jsonrpc: "2.0", id: null, error: { code: -32000, message: "no session" } });
      if (!sessions.has(sid)) return send(res, 404, { jsonrpc: "2.0", id: null, error: { code: -32001, message: "no such session" } });
      respond(msg, (reply) => {
        if (!reply) {
          res.writeHead(202);
          return res.end();
        }
        send(res, 200, reply);
      });
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(port, "127.0.0.1");
}

const [mode, port] = process.argv.slice(2);
if (mode === "stdio") stdio();
else if (mode === "http" && port) serve(Number(port));
else {
  process.stderr.write("usage: echo_server.cjs stdio | http PORT\n");
  process.exit(2);
}
