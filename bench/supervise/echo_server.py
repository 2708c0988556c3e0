#!/usr/bin/env python3
"""A tiny, fast stdio MCP server for the supervisor benchmark (bench/supervise/run.sh): it
answers `initialize`, `ping`, `tools/list` and `tools/call echo` (the `text` argument back as a
text content), one line in, one line out, nothing else. Written so that the server is not the
bottleneck when measuring a relay's throughput of large messages: no SDK, no validation, the
C JSON codec, unbuffered binary stdio."""
import json
import sys

TOOLS = {"tools": [{"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}


def main():
    out = sys.stdout.buffer
    # A 1 MiB read buffer: the default 8 KiB makes a 1 MiB line cost 128 reads, which made the
    # direct pipe look slower than a relay (whose large writes hid it).
    for line in open(0, "rb", buffering=1 << 20):
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "id" not in msg or "method" not in msg:
            continue  # notifications, replies
        method = msg["method"]
        if method == "initialize":
            result = {
                "protocolVersion": msg.get("params", {}).get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench-echo", "version": "1"},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = TOOLS
        elif method == "tools/call":
            text = msg.get("params", {}).get("arguments", {}).get("text", "")
            result = {"content": [{"type": "text", "text": text}]}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}}
            out.write(json.dumps(reply).encode() + b"\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
