#!/usr/bin/env python3
"""Turns an mcpulse transcript into curl commands that send the same HTTP requests.

Usage: curl_from_transcript.py TRANSCRIPT.json OUT_PREFIX

Writes OUT_PREFIX.sh (always: a bash script) and, when the requests fit in one curl process,
OUT_PREFIX.curlrc too (run it as `curl -K OUT_PREFIX.curlrc`, no shell needed).

The requests are mcpulse's own (method, URL, headers, body), byte for byte. What curl cannot do
in one process is carry a value from one response into a later request: a Streamable HTTP
session id (Mcp-Session-Id) or a legacy HTTP+SSE endpoint. So:
  * Streamable HTTP: a new curl process starts whenever a request needs the session id that an
    earlier request of the same process received; the id travels through a shell variable
    (`sid=$(curl ... -w '%header{mcp-session-id}')`). Within a process, transfers are chained
    with --next and share one kept-alive connection, as mcpulse's do.
  * legacy HTTP+SSE: one curl holds the GET stream open in the background; the shell reads the
    `endpoint` event, one curl POSTs every message (back to back, without waiting for each
    reply, which favours curl), and the shell waits on the stream for the last reply's id.
"""
import json
import shlex
import sys

SID = "mcp-session-id"


def transfers(exchanges):
    out = []
    for e in exchanges:
        r = e["request"]
        resp = e.get("response") or {}
        got_sid = next((v for k, v in resp.get("headers", []) if k.lower() == SID), None)
        out.append({
            "step": e["step"],
            "method": r["method"],
            "url": r.get("url"),
            "headers": [(k, v) for k, v in r.get("headers", [])],
            "body": r.get("body"),
            "id": e.get("id"),
            "gives_sid": got_sid,
            "needs_sid": next((v for k, v in r.get("headers", []) if k.lower() == SID), None),
        })
    return out


def curl_args(t, url=None, sid_var="$sid", write_sid=False):
    """Arguments (as bash words, already quoted) for one transfer."""
    a = ["-o", "/dev/null"]
    if t["method"] not in ("GET", "POST") or (t["method"] == "GET" and t["body"]):
        a += ["-X", t["method"]]
    for k, v in t["headers"]:
        if k.lower() == SID:
            a += ["-H", f'"{k}: {sid_var}"']
            continue
        a += ["-H", shlex.quote(f"{k}: {v}")]
    if t["body"] is not None and t["method"] != "DELETE":
        a += ["--data-binary", shlex.quote(t["body"])]
    if write_sid:
        a += ["-w", shlex.quote("%header{" + SID + "}")]
    a.append(url if url is not None else shlex.quote(t["url"]))
    return a


def cfg_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def curlrc(ts):
    lines = ["silent", "show-error"]
    for i, t in enumerate(ts):
        if i:
            lines.append("next")
        lines.append('output = "/dev/null"')
        if t["method"] not in ("GET", "POST"):
            lines.append(f"request = {cfg_quote(t['method'])}")
        for k, v in t["headers"]:
            lines.append(f"header = {cfg_quote(f'{k}: {v}')}")
        if t["body"] is not None and t["method"] != "DELETE":
            lines.append(f"data-binary = {cfg_quote(t['body'])}")
        lines.append(f"url = {cfg_quote(t['url'])}")
    return "\n".join(lines) + "\n"


def http_processes(ts):
    """Splits Streamable HTTP transfers into curl processes (see the module docs). Returns
    (processes, capture): capture[n] is the index, in process n, of the transfer whose session
    id the next process needs."""
    procs, cur = [], []
    known = None  # the session id that the shell variable holds
    new_here = {}  # session ids first received in the current process -> transfer index
    capture = []
    for t in ts:
        need = t["needs_sid"]
        if need is not None and need != known and need in new_here:
            procs.append(cur)
            capture.append(new_here[need])
            cur, known, new_here = [], need, {}
        cur.append(t)
        got = t["gives_sid"]
        if got is not None and got != known and got not in new_here:
            new_here[got] = len(cur) - 1
    if cur:
        procs.append(cur)
        capture.append(None)
    return procs, capture


def http_script(ts):
    procs, capture = http_processes(ts)
    lines = []
    for n, p in enumerate(procs):
        words = ["curl", "-sS"]
        for i, t in enumerate(p):
            if i:
                words.append("--next")
            words += curl_args(t, write_sid=(i == capture[n]))
        cmd = " ".join(words)
        if capture[n] is not None:
            lines.append(f"sid=$({cmd})")
        elif n == len(procs) - 1:
            lines.append(f"exec {cmd}")
        else:
            lines.append(cmd)
    return lines, len(procs)


def sse_script(before, opener, posts):
    lines, nprocs = ([], 0)
    if before:
        pre, nprocs = http_script(before)
        lines += [l.removeprefix("exec ") for l in pre]
    hdrs = " ".join("-H " + shlex.quote(f"{k}: {v}") for k, v in opener["headers"])
    url = opener["url"]
    origin = "/".join(url.split("/")[:3])
    last_id = max(t["id"] for t in posts if t["id"] is not None)
    lines += [
        f"exec 3< <(exec curl -sSN {hdrs} {shlex.quote(url)})",
        "stream=$!",
        "ep=",
        "while IFS= read -r -t 10 line <&3; do",
        '  line=${line%$\'\\r\'}',
        '  if [[ $line == data:* ]]; then ep=${line#data:}; ep=${ep# }; break; fi',
        "done",
        '[[ -n $ep ]] || { kill "$stream" 2>/dev/null; echo "no endpoint event" >&2; exit 1; }',
        f'[[ $ep == *://* ]] || ep={shlex.quote(origin)}"$ep"',
    ]
    words = ["curl", "-sS"]
    for i, t in enumerate(posts):
        if i:
            words.append("--next")
        words += curl_args(t, url='"$ep"')
    lines.append(" ".join(words))
    lines += [
        "while IFS= read -r -t 10 line <&3; do",
        f'  [[ $line == data:* && $line =~ \\"id\\":{last_id}[,}}] ]] && break',
        "done",
        'kill "$stream" 2>/dev/null',
    ]
    return lines, nprocs + 2


def main():
    tr = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    ts = transfers(tr["exchanges"])
    opener = next((i for i, t in enumerate(ts) if t["step"] == "sse-open"), None)
    if opener is None:
        lines, nprocs = http_script(ts)
        if nprocs == 1:
            with open(prefix + ".curlrc", "w") as f:
                f.write(curlrc(ts))
    else:
        lines, nprocs = sse_script(ts[:opener], ts[opener], ts[opener + 1:])
    with open(prefix + ".sh", "w") as f:
        f.write("#!/usr/bin/env bash\n# Generated by bench/curl_from_transcript.py: the requests of one mcpulse probe, sent by curl.\n")
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"processes": nprocs, "requests": len(ts), "steps": [t["step"] for t in ts]}))


if __name__ == "__main__":
    main()
