// The load client of bench/gateway/run.sh: one Streamable HTTP MCP client (Node's own http
// module, keep-alive, no SDK), identical for every path, so that only the path differs.
//
//   node client.cjs latency N URL        one session; N sequential `tools/call echo` (after 200
//                                        not counted); per-call p50/p99/mean in µs
//   node client.cjs throughput S C URL   C sessions at once (C clients), each calling
//                                        `tools/call echo` back to back for S seconds; calls/s
//   node client.cjs open S RATE URL      open loop (saturation.sh): RATE `tools/call work` a
//                                        second, on a fixed schedule whatever the answers, for S
//                                        seconds, round robin over 8 sessions; then waits for
//                                        every answer. Accepted calls (200 and a result), shed
//                                        ones (503) and errors counted apart, with the accepted
//                                        calls' p50/p95/p99/max and the shed ones' p50 in µs
//   node client.cjs paired N URL...      one session per URL; N rounds of one sequential
//                                        `tools/call echo` per URL (the order rotates each
//                                        round), so that every path is measured in the same
//                                        moments of a noisy machine; per URL p50/p99/mean in µs,
//                                        and the median of each round's difference from the
//                                        first URL (the paired added latency)
//   node client.cjs idle N URL           opens N sessions (initialize, initialized, tools/list),
//                                        prints READY, holds them until stdin ends, then ends
//                                        them (DELETE)
//
// Each session is a legacy (2025-11-25) session: `initialize`, then the Mcp-Session-Id and
// MCP-Protocol-Version headers on every request. A reply may come as application/json or as an
// SSE stream (the bridges answer with either); the JSON-RPC response with the request's id is
// what ends a call, the moment it arrives (not the end of the stream). Prints one JSON object on stdout. A failed call fails the run (exit 1), except
// under throughput, where failures are counted and reported.
"use strict";
const http = require("node:http");

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const VERSION = "2025-11-25";

// One HTTP request. Resolves with the JSON-RPC messages of the reply: the whole JSON body, or,
// for an SSE stream, its events as they arrive, as soon as the response to `id` is among them
// (an SDK client acts on that event then; a bridge may hold the stream open a while after it).
// The rest of such a stream is read and dropped, so the connection goes back to the pool.
function post(url, headers, body, method = "POST", id = undefined) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent, headers }, (res) => {
      const sse = (res.headers["content-type"] || "").includes("text/event-stream");
      const chunks = [];
      const found = [];
      let text = "";
      let done = false;
      const finish = (messages) => {
        if (!done) {
          done = true;
          resolve({ status: res.statusCode, headers: res.headers, messages });
        }
      };
      res.on("data", (c) => {
        if (!sse) return chunks.push(c);
        if (done) return;
        text += c.toString("utf8");
        let end;
        while ((end = text.search(/\r?\n\r?\n/)) >= 0) {
          const event = text.slice(0, end);
          text = text.slice(end).replace(/^\r?\n\r?\n/, "");
          const m = sseData(event);
          if (m !== undefined) found.push(m);
          if (m && m.id === id && ("result" in m || "error" in m)) finish(found);
        }
      });
      res.on("end", () => {
        if (sse) {
          const m = sseData(text);
          if (m !== undefined) found.push(m);
          return finish(found);
        }
        const all = Buffer.concat(chunks).toString("utf8");
        let messages = [];
        try {
          messages = all ? [JSON.parse(all)] : [];
        } catch {
          messages = [{ unparsed: all.slice(0, 200) }];
        }
        finish(messages);
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.setTimeout(30000, () => req.destroy(new Error("timeout (30 s)")));
    req.end(body);
  });
}

// The JSON of one SSE event's data lines; undefined for an event without data or not JSON (a
// priming or keep-alive event).
function sseData(event) {
  const data = event
    .split(/\r?\n/)
    .filter((l) => l.startsWith("data:"))
    .map((l) => l.slice(5).replace(/^ /, ""));
  if (!data.length) return undefined;
  try {
    return JSON.parse(data.join("\n"));
  } catch {
    return undefined;
  }
}

class Session {
  constructor(url) {
    this.url = url;
    this.id = 0;
    this.headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  }

  async open() {
    const init = await this.request("initialize", {
      protocolVersion: VERSION,
      capabilities: {},
      clientInfo: { name: "mcpulse-bench", version: "1" },
    });
    this.headers["mcp-protocol-version"] = init.result.protocolVersion || VERSION;
    const note = await post(this.url, this.headers, JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
    if (note.status >= 300) throw new Error(`notifications/initialized: HTTP ${note.status}`);
    return this;
  }

  async request(method, params) {
    const id = ++this.id;
    const res = await post(this.url, this.headers, JSON.stringify({ jsonrpc: "2.0", id, method, params }), "POST", id);
    if (res.status !== 200) throw new Error(`${method}: HTTP ${res.status} ${JSON.stringify(res.messages).slice(0, 200)}`);
    if (method === "initialize" && res.headers["mcp-session-id"]) this.headers["mcp-session-id"] = res.headers["mcp-session-id"];
    const reply = res.messages.find((m) => m && m.id === id && ("result" in m || "error" in m));
    if (!reply) throw new Error(`${method}: no reply with id ${id} in ${JSON.stringify(res.messages).slice(0, 200)}`);
    if (reply.error) throw new Error(`${method}: ${JSON.stringify(reply.error)}`);
    return reply;
  }

  async echo() {
    const r = await this.request("tools/call", { name: "echo", arguments: { text: "hi", message: "hi" } });
    if (!r.result || r.result.isError) throw new Error(`echo: ${JSON.stringify(r)}`);
  }

  async close() {
    if (this.headers["mcp-session-id"]) await post(this.url, this.headers, undefined, "DELETE").catch(() => {});
  }
}

async function latency(n, url) {
  const s = await new Session(url).open();
  for (let i = 0; i < Math.min(200, n); i++) await s.echo();
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await s.echo();
    times.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  await s.close();
  times.sort((a, b) => a - b);
  const at = (q) => times[Math.min(times.length - 1, Math.floor(times.length * q))];
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  return { kind: "latency", n, p50_us: round(at(0.5)), p99_us: round(at(0.99)), mean_us: round(mean) };
}

async function paired(n, urls) {
  const sessions = [];
  for (const url of urls) sessions.push(await new Session(url).open());
  for (const s of sessions) for (let i = 0; i < 200; i++) await s.echo();
  const times = sessions.map(() => []);
  const diffs = sessions.map(() => []);
  for (let i = 0; i < n; i++) {
    const t = new Array(sessions.length);
    for (let k = 0; k < sessions.length; k++) {
      const j = (i + k) % sessions.length;
      const t0 = process.hrtime.bigint();
      await sessions[j].echo();
      t[j] = Number(process.hrtime.bigint() - t0) / 1000;
    }
    for (let j = 0; j < sessions.length; j++) {
      times[j].push(t[j]);
      diffs[j].push(t[j] - t[0]);
    }
  }
  await Promise.all(sessions.map((s) => s.close()));
  const at = (xs, q) => {
    const v = [...xs].sort((a, b) => a - b);
    return round(v[Math.min(v.length - 1, Math.floor(v.length * q))]);
  };
  const paths = times.map((ts, j) => ({
    p50_us: at(ts, 0.5),
    p99_us: at(ts, 0.99),
    mean_us: round(ts.reduce((a, b) => a + b, 0) / ts.length),
    added_p50_us: at(diffs[j], 0.5),
  }));
  return { kind: "paired", n, paths };
}

async function throughput(seconds, c, url) {
  const sessions = await Promise.all(Array.from({ length: c }, () => new Session(url).open()));
  await Promise.all(sessions.map(async (s) => { for (let i = 0; i < 20; i++) await s.echo(); }));
  let calls = 0;
  let errors = 0;
  let firstError = null;
  const t0 = process.hrtime.bigint();
  const until = t0 + BigInt(Math.round(seconds * 1e9));
  await Promise.all(
    sessions.map(async (s) => {
      while (process.hrtime.bigint() < until) {
        try {
          await s.echo();
          calls++;
        } catch (e) {
          errors++;
          firstError = firstError || e.message;
        }
      }
    }),
  );
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  await Promise.all(sessions.map((s) => s.close()));
  const out = { kind: "throughput", concurrency: c, seconds: round(elapsed), calls, errors, calls_per_s: round(calls / elapsed) };
  if (firstError) out.first_error = firstError.slice(0, 200);
  return out;
}

// An open-loop load: the calls go out on a fixed schedule (RATE a second), not when earlier
// ones are answered, so that a path that slows down meets the same offered load (a closed-loop
// client would slow down with it and hide the queue). Each call's latency is from its
// scheduled start.
async function open(seconds, rate, url) {
  const sessions = await Promise.all(Array.from({ length: 8 }, () => new Session(url).open()));
  const total = Math.round(seconds * rate);
  const accepted = [];
  const shed = [];
  let errors = 0;
  let firstError = null;
  let inFlight = 0;
  let maxInFlight = 0;
  const t0 = process.hrtime.bigint();
  const calls = [];
  const one = async (i) => {
    const s = sessions[i % sessions.length];
    const start = t0 + BigInt(Math.round((i * 1e9) / rate));
    const id = ++s.id;
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    try {
      const body = JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "work", arguments: {} } });
      const res = await post(s.url, s.headers, body, "POST", id);
      const us = Number(process.hrtime.bigint() - start) / 1000;
      const reply = res.messages.find((m) => m && m.id === id);
      if (res.status === 200 && reply && reply.result && !reply.result.isError) accepted.push(us);
      else if (res.status === 503) shed.push(us);
      else {
        errors++;
        firstError = firstError || `HTTP ${res.status} ${JSON.stringify(res.messages).slice(0, 160)}`;
      }
    } catch (e) {
      errors++;
      firstError = firstError || e.message;
    }
    inFlight--;
  };
  for (let i = 0; i < total; i++) {
    const due = t0 + BigInt(Math.round((i * 1e9) / rate));
    const wait = Number(due - process.hrtime.bigint()) / 1e6;
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    calls.push(one(i));
  }
  const sent = Number(process.hrtime.bigint() - t0) / 1e9;
  await Promise.all(calls);
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  await Promise.all(sessions.map((s) => s.close()));
  accepted.sort((a, b) => a - b);
  shed.sort((a, b) => a - b);
  const at = (xs, q) => (xs.length ? round(xs[Math.min(xs.length - 1, Math.floor(xs.length * q))]) : null);
  const out = {
    kind: "open",
    rate,
    seconds: round(sent),
    elapsed: round(elapsed),
    calls: total,
    accepted: accepted.length,
    shed: shed.length,
    errors,
    accepted_per_s: round(accepted.length / elapsed),
    p50_us: at(accepted, 0.5),
    p95_us: at(accepted, 0.95),
    p99_us: at(accepted, 0.99),
    max_us: at(accepted, 1),
    shed_p50_us: at(shed, 0.5),
    max_in_flight: maxInFlight,
  };
  if (firstError) out.first_error = firstError.slice(0, 200);
  return out;
}

async function idle(n, url) {
  const sessions = [];
  for (let i = 0; i < n; i++) {
    const s = await new Session(url).open();
    await s.request("tools/list", {});
    sessions.push(s);
  }
  process.stderr.write("READY\n");
  await new Promise((resolve) => {
    process.stdin.on("end", resolve);
    process.stdin.resume();
  });
  await Promise.all(sessions.map((s) => s.close()));
  return { kind: "idle", sessions: n };
}

const round = (x) => Math.round(x * 10) / 10;

async function main() {
  const [what, ...args] = process.argv.slice(2);
  let r;
  if (what === "latency") r = await latency(Number(args[0]), args[1]);
  else if (what === "throughput") r = await throughput(Number(args[0]), Number(args[1]), args[2]);
  else if (what === "open") r = await open(Number(args[0]), Number(args[1]), args[2]);
  else if (what === "idle") r = await idle(Number(args[0]), args[1]);
  else if (what === "paired") r = await paired(Number(args[0]), args.slice(1));
  else throw new Error("usage: client.cjs latency N URL | throughput S C URL | open S RATE URL | idle N URL | paired N URL...");
  process.stdout.write(JSON.stringify(r) + "\n");
  agent.destroy();
}

main().catch((e) => {
  process.stderr.write(`client: ${e.message}\n`);
  process.exit(1);
});
