#!/usr/bin/env python3
"""Writes docs/benchmarks-monitor.md from the files bench/monitor/run.sh left in its work
directory. Every figure comes from that run.

    report.py WORKDIR OUT.md
"""
import json
import os
import re
import statistics
import sys

work, out_path = sys.argv[1], sys.argv[2]
meta = json.load(open(os.path.join(work, "meta.json")))
HZ = int(meta["hz"])


def read_tsv(name):
    p = os.path.join(work, name)
    if not os.path.exists(p):
        return []
    return [line.rstrip("\n").split("\t") for line in open(p) if line.strip()]


def fmt(x, digits=3):
    """A number with `digits` significant digits, thousands separated."""
    if x is None:
        return "–"
    if x == 0:
        return "0"
    mag = len(str(int(abs(x)))) if abs(x) >= 1 else 0
    decimals = max(0, digits - mag) if abs(x) >= 1 else digits
    return f"{x:,.{decimals}f}"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# --- throughput ---------------------------------------------------------------------------------
runs = {}
for r in read_tsv("runs.tsv"):
    rnd, rid, rate, fail, sock, pticks, sticks, secs, p50, p99, reqs, kticks = r
    runs.setdefault(int(rnd), {})[rid] = {
        "rate": float(rate),
        "failures": int(fail),
        "socket_errors": int(sock),
        "prober_ticks": int(pticks),
        "server_ticks": int(sticks),
        "secs": float(secs),
        "p50_us": float(p50),
        "p99_us": float(p99),
        "requests": int(reqs),
        "prober_sys_ticks": int(kticks),
    }
rounds = sorted(runs)

steps_min = [l.strip() for l in open(os.path.join(work, "mix-steps.txt")) if l.strip()]
tr_min = json.load(open(os.path.join(work, "tr-min.json")))
tr_def = json.load(open(os.path.join(work, "tr-default.json")))
req_min = len(tr_min["exchanges"])
req_def = len(tr_def["exchanges"])
steps_def = [e["step"] for e in tr_def["exchanges"]]
conns_min = len(tr_min.get("connections", []))

per_round = []
for rnd in rounds:
    x = runs[rnd]
    g = lambda k: x.get(k, {}).get("rate")
    cap, mc, bb = g("capacity-mix"), g("mcpulse"), g("blackbox")
    conn = g("capacity-conn")
    ceiling = cap / req_min if cap else None
    ceiling_conn = conn / req_min if conn else None

    def cpu_us(rid, which):
        e = x.get(rid)
        if not e or not e["requests"]:
            return None
        return e[which] / HZ / e["requests"] * 1e6

    per_round.append({
        "round": rnd,
        "capacity": cap,
        "ceiling": ceiling,
        "mcpulse": mc,
        "ratio": (ceiling / mc) if ceiling and mc else None,
        "blackbox": bb,
        "mc_vs_bb": (mc / bb) if mc and bb else None,
        "capacity_tools": g("capacity-tools"),
        "capacity_conn": conn,
        "ceiling_conn": ceiling_conn,
        "ratio_conn": (ceiling_conn / mc) if ceiling_conn and mc else None,
        "mcpulse_default": g("mcpulse-default"),
        "mc_cpu_us": cpu_us("mcpulse", "prober_ticks"),
        "mc_srv_us": cpu_us("mcpulse", "server_ticks"),
        "bb_cpu_us": cpu_us("blackbox", "prober_ticks"),
        "bb_srv_us": cpu_us("blackbox", "server_ticks"),
        "def_cpu_us": cpu_us("mcpulse-default", "prober_ticks"),
        "def_srv_us": cpu_us("mcpulse-default", "server_ticks"),
        "cap_srv_us": cpu_us("capacity-mix", "server_ticks"),
        "conn_srv_us": cpu_us("capacity-conn", "server_ticks"),
        "mc_core": (x["mcpulse"]["prober_ticks"] / HZ / x["mcpulse"]["secs"]) if "mcpulse" in x else None,
        "bb_core": (x["blackbox"]["prober_ticks"] / HZ / x["blackbox"]["secs"]) if "blackbox" in x else None,
        "srv_core_cap": (x["capacity-mix"]["server_ticks"] / HZ / x["capacity-mix"]["secs"]) if "capacity-mix" in x else None,
        "srv_core_mc": (x["mcpulse"]["server_ticks"] / HZ / x["mcpulse"]["secs"]) if "mcpulse" in x else None,
        "mc_sys_share": (x["mcpulse"]["prober_sys_ticks"] / x["mcpulse"]["prober_ticks"]) if x.get("mcpulse", {}).get("prober_ticks") else None,
        "bb_sys_share": (x["blackbox"]["prober_sys_ticks"] / x["blackbox"]["prober_ticks"]) if x.get("blackbox", {}).get("prober_ticks") else None,
    })
M = {k: med([r[k] for r in per_round]) for k in (per_round[0] if per_round else {}) if k != "round"}

# The same against the third-party server (the Python SDK).
tr_py_path = os.path.join(work, "tr-py.json")
tr_py = json.load(open(tr_py_path)) if os.path.exists(tr_py_path) else None
req_py = len(tr_py["exchanges"]) if tr_py else None
steps_py = [e["step"] for e in tr_py["exchanges"]] if tr_py else []
py_round = []
for rnd in rounds:
    x = runs[rnd]
    if "py-capacity" not in x or not req_py:
        continue
    cap, mc, bb = (x.get(k, {}).get("rate") for k in ("py-capacity", "py-mcpulse", "py-blackbox"))
    ceiling = cap / req_py if cap else None

    def per(rid, which):
        e = x.get(rid)
        return e[which] / HZ / e["requests"] * 1e6 if e and e["requests"] else None

    py_round.append({
        "round": rnd,
        "capacity": cap,
        "ceiling": ceiling,
        "mcpulse": mc,
        "ratio": (ceiling / mc) if ceiling and mc else None,
        "blackbox": bb,
        "mc_vs_bb": (mc / bb) if mc and bb else None,
        "mc_cpu_us": per("py-mcpulse", "prober_ticks"),
        "mc_srv_us": per("py-mcpulse", "server_ticks"),
        "cap_srv_us": per("py-capacity", "server_ticks"),
        "srv_core_mc": (x["py-mcpulse"]["server_ticks"] / HZ / x["py-mcpulse"]["secs"]) if "py-mcpulse" in x else None,
        "mc_core": (x["py-mcpulse"]["prober_ticks"] / HZ / x["py-mcpulse"]["secs"]) if "py-mcpulse" in x else None,
    })
PM = {k: med([r[k] for r in py_round]) for k in (py_round[0] if py_round else {}) if k != "round"}
failures = sum(e["failures"] + e["socket_errors"] for x in runs.values() for e in x.values())

# --- soak ---------------------------------------------------------------------------------------
soak = [[float(v) for v in r] for r in read_tsv("soak.tsv")]
interval = int(meta["interval"])
steady_from = interval + 10
steady = [s for s in soak if s[0] >= steady_from]
soak_db = json.load(open(os.path.join(work, "soak-db.json"))) if os.path.exists(os.path.join(work, "soak-db.json")) else {}


def cpu_pct(rows, col=3):
    if len(rows) < 2:
        return None
    return (rows[-1][col] - rows[0][col]) / HZ / (rows[-1][0] - rows[0][0]) * 100


rss_mib = lambda kb: kb / 1024
steady_rss = [s[1] for s in steady]
soak_fig = {
    "seconds": soak[-1][0] if soak else None,
    "rss_mean": rss_mib(statistics.mean(steady_rss)) if steady_rss else None,
    "rss_max": rss_mib(max(steady_rss)) if steady_rss else None,
    "rss_min": rss_mib(min(steady_rss)) if steady_rss else None,
    "hwm": rss_mib(soak[-1][2]) if soak else None,
    "cpu_steady": cpu_pct(steady),
    "cpu_first": cpu_pct([s for s in soak if s[0] <= interval]),
    "cpu_all": cpu_pct(soak),
    "srv_cpu_steady": cpu_pct(steady, 4),
}
per_second = {int(k): v for k, v in soak_db.get("per_second", {}).items()}
steady_secs = [per_second.get(s, 0) for s in range(steady_from, int(soak[-1][0]) - 1)] if soak else []
fleet = {}
try:
    fleet = json.load(open(os.path.join(work, "soak-fleet.json")))
except (OSError, ValueError):
    pass

# --- store --------------------------------------------------------------------------------------
store_text = open(os.path.join(work, "store.txt")).read() if os.path.exists(os.path.join(work, "store.txt")) else ""
m = re.search(r"write: ([\d.]+) results/s sustained", store_text)
store_rate = float(m.group(1)) if m else None

# --- targets ------------------------------------------------------------------------------------
targets = []


def target(name, figure, met):
    targets.append((name, figure, "yes" if met else "**no**"))


if M:
    target("/probe within 1.5× of the physical ceiling (server capacity ÷ requests per probe): the demo's Rust server",
           f"ceiling {fmt(M['ceiling'])}/s ÷ mcpulse {fmt(M['mcpulse'])}/s = {fmt(M['ratio'])}×",
           M["ratio"] is not None and M["ratio"] <= 1.5)
if PM:
    target("/probe within 1.5× of the physical ceiling: a server on the official Python SDK",
           f"ceiling {fmt(PM['ceiling'])}/s ÷ mcpulse {fmt(PM['mcpulse'])}/s = {fmt(PM['ratio'])}×",
           PM["ratio"] is not None and PM["ratio"] <= 1.5)
if M:
    target("at least 2,000 full probes/s through /probe (concurrency 64)", f"{fmt(M['mcpulse'])} probes/s",
           (M["mcpulse"] or 0) >= 2000)
    target("more MCP probes/s through mcpulse's /probe than blackbox_exporter's single-request probes/s",
           f"{fmt(M['mcpulse'])}/s vs {fmt(M['blackbox'])}/s ({fmt(M['mc_vs_bb'])}×)",
           (M["mcpulse"] or 0) > (M["blackbox"] or 0))
if soak_fig["rss_max"] is not None:
    target(f"{int(meta['targets']):,} targets at {interval}s: resident memory under 150 MB (steady state)",
           f"{fmt(soak_fig['rss_max'] * 1.048576)} MB at most ({fmt(soak_fig['rss_max'])} MiB); peak (VmHWM) {fmt(soak_fig['hwm'] * 1.048576)} MB",
           soak_fig["rss_max"] * 1.048576 < 150 and soak_fig["hwm"] * 1.048576 < 150)
if soak_fig["cpu_steady"] is not None:
    target(f"{int(meta['targets']):,} targets at {interval}s: CPU under 20% of one core",
           f"{fmt(soak_fig['cpu_steady'])}% mean over the steady window", soak_fig["cpu_steady"] < 20)
target("history writes: at least 20,000 results/s into SQLite (batched)",
       f"{fmt(store_rate)} results/s" if store_rate else "store_bench gave no figure", (store_rate or 0) >= 20000)

# --- the document -------------------------------------------------------------------------------
L = []
w = L.append
w("# Benchmarks: the monitor (`/probe` throughput, 10,000 targets, history writes)")
w("")
w("Generated by `bench/monitor/run.sh` (one command; not a test, and not run by CI). Every figure below "
  "comes from the run recorded here, and each comparison is between figures of that same run; rerun the "
  "script to refresh it. The probe benchmark (`mcpulse probe` against the Inspector and curl) is "
  "[benchmarks.md](benchmarks.md).")
w("")
w("## Machine and versions")
w("")
w(f"- date: {meta['date']}" + (" — **quick mode** (`BENCH_QUICK=1`): short runs, indicative only" if meta["quick"] else ""))
w(f"- machine: {meta['nproc']} CPUs ({meta['cpu']}), {meta['mem']} memory, {meta['kernel']}; load average "
  f"(1, 5, 15 min) {meta['load_start']} at the start, {meta['load_end']} at the end (the machine is shared: "
  "other work running at the same time lowers and spreads the figures)")
w(f"- mcpulse: {meta['mcpulse']}, release profile; {meta['rustc']}")
w(f"- blackbox_exporter: Debian `prometheus-blackbox-exporter` {meta['blackbox_deb']} ({meta['blackbox']})")
w(f"- load generator: {meta['wrk']} (Debian), one thread, keep-alive connections, Lua scripts in `bench/monitor/`")
w("- MCP server: the demo's `healthy-modern` (`crates/mcpulse-demo/examples/bench_fleet.rs`: the demo fleet "
  "on a one-thread runtime), a 2026-07-28 server that also answers legacy clients")
quiet = read_tsv("quiet.tsv")
if quiet:
    w("- CPUs busy with other work just before each block (percent of both CPUs, over 2 s; seconds waited for "
      f"them to go under {meta['max_busy']}%): " + ", ".join(f"{b} {p}% ({s} s)" for b, p, s in quiet))
w("")
w("## How it is measured")
w("")
w(f"- **CPU layout.** The MCP server is pinned to core {meta['server_cpu']} (`taskset`), alone. wrk and the "
  f"prober under test (the mcpulse monitor, or blackbox_exporter) share core {meta['client_cpu']}. The server's "
  "capacity is measured with the same layout, so the ceiling and the probes see the same server with the same "
  "core. Both probers get the same one core, so both run with one worker (tokio and Go size themselves from "
  "the CPU affinity).")
w(f"- **What a probe sends.** The throughput target is configured with `era = \"modern\"` and "
  f"`security = false`: the health probe, which sends {req_min} requests on {conns_min} new connection: "
  f"{', '.join(steps_min)} (the server advertises tools only). With the defaults (`era` auto, security checks "
  f"on) a probe of the same server sends {req_def}: {', '.join(steps_def)}; that is measured too "
  "(`mcpulse-default`), but the ceiling and the targets use the first.")
w("- **Raw capacity** is wrk sending those same requests (method, path, headers and body byte for byte from a "
  "transcript of a real probe, `bench/monitor/wrk_requests.py`) in turn, over 64 kept-alive connections: "
  "requests per second the server answers with HTTP 200. **Ceiling = capacity ÷ requests per probe.** Two "
  "more capacities, for reading the figures: `tools/list` alone, and the probe's requests with a new "
  "connection for each probe's worth (`Connection: close` on the last), since a probe opens a connection of "
  "its own and the server then also accepts and closes one per probe.")
w(f"- **Probes per second** is wrk sending `GET /probe?target=…` at concurrency {meta['concurrency']} for "
  f"{meta['duration']} s after a {meta['warmup']} s warm-up, and counting only answers that are HTTP 200 "
  "**with `probe_success 1`** (`bench/monitor/probe_check.lua`); any other answer is a failure, listed below. "
  "mcpulse: a `mcpulse monitor` whose config has the server as target `modern` (interval 1 h, so the "
  "scheduler stays out of the way), `/probe?target=modern`. blackbox_exporter: module `http_post_mcp`, one "
  "HTTP POST of the same `tools/list` request with the same headers, HTTP 200 and a body matching "
  "`\"result\"` required (`/probe?module=http_post_mcp&target=<url>`): one request per probe against "
  f"mcpulse's {req_min}.")
w(f"- **Rounds.** Capacity, mcpulse, blackbox_exporter and the rest run one after the other, {meta['rounds']} "
  "round(s); each ratio is between figures of the same round, and the summary takes the median over rounds.")
w("- **CPU per probe** is the process's user + system time (`/proc/PID/stat`) over the measured run, divided by "
  "the probes (or requests) wrk completed; *share of a core* is that time over the run's wall time.")
w(f"- **Memory and CPU with {int(meta['targets']):,} targets**: a monitor with {int(meta['targets']):,} targets "
  f"at `interval = \"{interval}s\"`, default settings (era auto, security checks on: the probe a real "
  "deployment runs), spread over three demo servers: of every 20 targets, 10 on `healthy-modern`, 9 on "
  "`healthy-legacy` (Streamable HTTP with sessions) and 1 on `legacy-sse` (HTTP+SSE); each target's URL "
  "differs by a query parameter. (The demo SSE server holds at most 256 open streams and notices a closed "
  "one only at its next 15 s keep-alive, so it refuses more than about 17 SSE probes a second with a 503; "
  "an earlier run with a third of the targets on it had those checks down for that reason.) The scheduler places each "
  f"target's first check at a hash of its name within the interval. It runs {meta['soak']} s, unpinned; its "
  "`VmRSS`, `VmHWM` and CPU time are sampled every second (`bench/monitor/sample.py`). *Steady state* is from "
  f"{steady_from} s on (one full interval, plus 10 s), to the end. Afterwards the history database tells how "
  "many checks ran, with which verdicts, and how evenly they were spread.")
w(f"- **History writes**: `store_bench` (`crates/mcpulse-monitor/examples/store_bench.rs`) writes "
  f"{int(meta['store_records']):,} results through `Store::record` into an SQLite file (WAL, batches of 500), "
  "its output quoted below.")
w("")
w("## Targets")
w("")
w("| target | figure (median over rounds) | met? |")
w("|---|---|---|")
for t in targets:
    w(f"| {t[0]} | {t[1]} | {t[2]} |")
w("")
met = [t[0] for t in targets if t[2] == "yes"]
missed = [t[0] for t in targets if t[2] != "yes"]
if met:
    w("**Met:** " + "; ".join(met) + ".")
    w("")
if missed:
    w("**Not met:** " + "; ".join(missed) + ".")
    w("")
if failures:
    w(f"**{failures} failed probes or socket errors** in the throughput runs (see the table): those runs' rates "
      "count only successes.")
    w("")
w("## `/probe` throughput")
w("")
w("| round | capacity (req/s) | ceiling (probes/s) | mcpulse (probes/s) | ceiling ÷ mcpulse | blackbox_exporter (probes/s) | mcpulse ÷ blackbox | capacity, `tools/list` only | capacity, a connection per probe | ceiling with a connection per probe | ÷ mcpulse | mcpulse, default settings |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in per_round + ([dict(M, round="**median**")] if len(per_round) > 1 else []):
    w(f"| {r['round']} | {fmt(r['capacity'])} | {fmt(r['ceiling'])} | {fmt(r['mcpulse'])} | {fmt(r['ratio'])}× | "
      f"{fmt(r['blackbox'])} | {fmt(r['mc_vs_bb'])}× | {fmt(r['capacity_tools'])} | {fmt(r['capacity_conn'])} | "
      f"{fmt(r['ceiling_conn'])} | {fmt(r['ratio_conn'])}× | {fmt(r['mcpulse_default'])} |")
w("")
w("Latency and failures of each run (wrk's own percentiles; failures are answers other than 200 with "
  "`probe_success 1`, or other than 200 for the capacity runs):")
w("")
w("| round | run | rate (/s) | p50 | p99 | failures | socket errors | prober CPU (share of a core) | server CPU (share of a core) |")
w("|---|---|---|---|---|---|---|---|---|")
for rnd in rounds:
    for rid, e in runs[rnd].items():
        pc = e["prober_ticks"] / HZ / e["secs"] * 100 if e["secs"] else 0
        sc = e["server_ticks"] / HZ / e["secs"] * 100 if e["secs"] else 0
        w(f"| {rnd} | {rid} | {fmt(e['rate'])} | {fmt(e['p50_us'] / 1000)} ms | {fmt(e['p99_us'] / 1000)} ms | "
          f"{e['failures']} | {e['socket_errors']} | {'–' if rid.startswith('capacity') else fmt(pc) + '%'} | {fmt(sc)}% |")
w("")
w("### Where the time goes")
w("")
if M:
    w(f"- mcpulse spends **{fmt(M['mc_cpu_us'])} µs of CPU per probe** (median; user + system, the monitor "
      f"process, for the whole `/probe` request: serving the HTTP request, the connection to the server, "
      f"{req_min} requests, judging the transcript, contract digests, the metrics text), using "
      f"{fmt(M['mc_core'] * 100)}% of its core (wrk has the rest). blackbox_exporter spends "
      f"**{fmt(M['bb_cpu_us'])} µs per probe** for one request, using {fmt(M['bb_core'] * 100)}% of the same core.")
    w(f"- The server spends {fmt(M['cap_srv_us'])} µs per request on kept-alive connections "
      f"({fmt(M['srv_core_cap'] * 100)}% of its core in the capacity run), so {fmt(M['cap_srv_us'] * req_min)} "
      f"µs per probe's worth; under mcpulse's probes it spends {fmt(M['mc_srv_us'])} µs per probe (a new "
      f"connection accepted and closed each time), at {fmt(M['srv_core_mc'] * 100)}% of its core: **the server "
      "is not the bottleneck of the probe runs; the prober's core is.**")
    need = M["ceiling"] / 1.5 if M["ceiling"] else None
    if need:
        w(f"- Within 1.5× of the ceiling needs {fmt(need)} probes/s: at most {fmt(1e6 / need)} µs of the "
          f"prober's core per probe, wrk's share included. mcpulse takes {fmt(M['mc_cpu_us'])} µs for "
          f"{req_min} requests and the verdict, where the server takes {fmt(M['cap_srv_us'])} µs to answer one "
          "request: the ceiling assumes the prober costs nothing. On loopback the kernel's TCP work (connect, "
          "send, close) is charged to the process that makes the call: "
          f"{fmt(M['mc_sys_share'] * 100)}% of mcpulse's CPU in the probe runs was system time "
          f"(blackbox_exporter: {fmt(M['bb_sys_share'] * 100)}%).")
w("")
if PM:
    w("## `/probe` against a third-party server: the official Python SDK")
    w("")
    w(f"The same runs against `bench/modern_server.py` ({meta.get('py_server', 'python mcp')}, `MCPServer` over "
      "Streamable HTTP on uvicorn, one process), pinned to the same core as the demo server and idle while that "
      f"one is measured. A probe (`era = \"modern\"`, `security = false`) sends {req_py} requests, since this "
      f"server also advertises prompts and resources: {', '.join(steps_py)}. blackbox_exporter sends it the "
      "same single `tools/list` POST as above. Here the server, not the prober, is the limit — as it is for most "
      "servers a monitor watches.")
    w("")
    w("| round | capacity (req/s) | ceiling (probes/s) | mcpulse (probes/s) | ceiling ÷ mcpulse | blackbox_exporter (probes/s, 1 request each) | server CPU per mcpulse probe | server's core busy under mcpulse | mcpulse's core busy |")
    w("|---|---|---|---|---|---|---|---|---|")
    for r in py_round + ([dict(PM, round="**median**")] if len(py_round) > 1 else []):
        w(f"| {r['round']} | {fmt(r['capacity'])} | {fmt(r['ceiling'])} | {fmt(r['mcpulse'])} | {fmt(r['ratio'])}× | "
          f"{fmt(r['blackbox'])} | {fmt(r['mc_srv_us'])} µs | "
          f"{fmt((r['srv_core_mc'] or 0) * 100)}% | {fmt((r['mc_core'] or 0) * 100)}% |")
    w("")
    if PM.get("cap_srv_us") and PM.get("mc_srv_us"):
        w(f"- The server spends {fmt(PM['cap_srv_us'])} µs per request on kept-alive connections, "
          f"{fmt(PM['cap_srv_us'] * req_py)} µs per probe's worth; under mcpulse's probes "
          f"{fmt(PM['mc_srv_us'])} µs per probe (with the connection it accepts and closes for each), at "
          f"{fmt(PM['srv_core_mc'] * 100)}% of its core, while mcpulse uses {fmt(PM['mc_core'] * 100)}% of its own.")
        w("")
w("Changes made to mcpulse while building this benchmark (profiled with `perf` and `heaptrack`; the "
  "figures above are after them): the judge parses each reply of a transcript once per judgement instead "
  "of once per rule that reads it; contract digests no longer copy values that are already canonical, nor "
  "format each hash byte separately; the prober does not parse a list page to learn that it has no "
  "`nextCursor`; the binary uses mimalloc instead of glibc's allocator; a target's accepted contract is "
  "kept as compact text with its digest (parsed only when a check's digest differs) rather than as a tree "
  "of JSON values; and a target task keeps its check's transcript, report and record in a heap future "
  "only while the check runs.")
w("")
w(f"## {int(meta['targets']):,} targets at a {interval} s interval: memory and CPU")
w("")
if soak_fig["seconds"]:
    w(f"| figure | value |")
    w("|---|---|")
    w(f"| run | {fmt(soak_fig['seconds'])} s; steady window from {steady_from} s |")
    w(f"| resident memory, steady (VmRSS, mean / min / max) | {fmt(soak_fig['rss_mean'])} / {fmt(soak_fig['rss_min'])} / {fmt(soak_fig['rss_max'])} MiB |")
    w(f"| peak resident memory (VmHWM, whole run) | {fmt(soak_fig['hwm'])} MiB |")
    w(f"| CPU, steady (mean share of one core) | {fmt(soak_fig['cpu_steady'])}% |")
    w(f"| CPU, first interval (start-up, first checks) | {fmt(soak_fig['cpu_first'])}% |")
    w(f"| CPU, whole run | {fmt(soak_fig['cpu_all'])}% |")
    w(f"| the three servers' CPU, steady | {fmt(soak_fig['srv_cpu_steady'])}% of their core |")
    if soak_db:
        bs = soak_db.get("by_status", {})
        w(f"| checks written to history | {soak_db['checks']:,} ({', '.join(f'{k} {v:,}' for k, v in sorted(bs.items()))}) |")
        w(f"| targets checked at least once | {soak_db['targets_checked']:,} of {int(meta['targets']):,} |")
        if steady_secs:
            w(f"| checks per second, steady (min / mean / max) | {min(steady_secs)} / {fmt(statistics.mean(steady_secs))} / {max(steady_secs)} (expected {fmt(int(meta['targets']) / interval)}) |")
        w(f"| check duration, not down (p50 / p99) | {fmt(soak_db.get('p50_ms'))} / {fmt(soak_db.get('p99_ms'))} ms |")
    if fleet:
        keys = [k for k in ("total", "healthy", "degraded", "down", "unknown", "flapping")
                if isinstance(fleet.get(k), (int, float))]
        if keys:
            w("| fleet at the end (`/api/v1/fleet`) | " + ", ".join(f"{k} {fleet[k]}" for k in keys) + " |")
    w("")
    w("Resident memory and CPU over the run (every 10th sample; CPU is the share of one core since the "
      "previous row):")
    w("")
    w("| s | VmRSS (MiB) | VmHWM (MiB) | CPU since previous row |")
    w("|---|---|---|---|")
    prev = None
    for s in soak[::10] + ([soak[-1]] if (len(soak) - 1) % 10 else []):
        c = "–" if prev is None else fmt((s[3] - prev[3]) / HZ / (s[0] - prev[0]) * 100) + "%"
        w(f"| {fmt(s[0], 3)} | {fmt(rss_mib(s[1]))} | {fmt(rss_mib(s[2]))} | {c} |")
        prev = s
w("")
w("## History writes (SQLite)")
w("")
if store_text:
    w("`store_bench` output, as printed:")
    w("")
    w("```")
    w(store_text.rstrip())
    w("```")
else:
    w("store_bench did not run.")
w("")
# The "Config validation" section comes from `config_bench`, run by hand (see its doc comment),
# and the "A/B" section after it from `ab_soak.sh`, also run by hand,
# not from this run: carry it over.
kept = ""
if os.path.exists(out_path):
    previous = open(out_path).read()
    i = previous.find("\n## Config validation")
    if i >= 0:
        kept = previous[i + 1:]
open(out_path, "w").write("\n".join(L) + ("\n" + kept if kept else ""))
