// The status page in headless Chromium (Debian's `chromium`), driven over the DevTools protocol
// by playwright-core (npm, pinned in scripts/interop-setup.sh). Run by crates/mcpulse/tests/
// browser.rs, which starts the monitor over the demo fleet and a hostile server, and reads this
// script's stdout: one line per scenario, `ok NAME {json}`, or `fail NAME: why` (exit 1).
// For the live scenario it prints `want live up` and waits for `up` on stdin (the server is
// healthy), opens the page, then prints `ready live` and waits for `go` (the server is going
// down).
//
// One browser for every scenario; each step bounded in time. Screenshots go to cfg.artifacts.
//
// argv[2] is a JSON object: { base, playwright, chromium, artifacts, hostile, live, drifting,
// interval_ms, states: [...] }.
"use strict";
const path = require("path");
const readline = require("readline");

const cfg = JSON.parse(process.argv[2]);
const { chromium } = require(cfg.playwright);

const lines = readline.createInterface({ input: process.stdin });
const waiting = [];
lines.on("line", (l) => { const w = waiting.shift(); if (w) w(l.trim()); });
const nextLine = () => new Promise((r) => waiting.push(r));

function ok(name, facts) { console.log(`ok ${name} ${JSON.stringify(facts || {})}`); }
class Fail extends Error {}
function check(cond, msg) { if (!cond) throw new Fail(msg); }

// Records anything a script from the page could do to show itself, and every CSP violation.
// An init script comes in over the DevTools protocol, so the page's CSP does not stop it.
function hooks() {
  window.__fired = [];
  const note = (what) => function () { window.__fired.push(what + ": " + Array.from(arguments).join(" ")); };
  window.alert = note("alert");
  window.confirm = note("confirm");
  window.prompt = note("prompt");
  document.addEventListener("securitypolicyviolation", (e) =>
    window.__fired.push("csp: " + e.violatedDirective + " " + e.blockedURI + " " + (e.sample || "")));
}

async function shot(page, name) {
  const file = path.join(cfg.artifacts, name + ".png");
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

// The page's own record of what fired, plus what the browser reported.
async function fired(page, seen) {
  const inPage = await page.evaluate(() => window.__fired);
  check(Array.isArray(inPage), "the hooks did not install (window.__fired is missing)");
  return inPage.concat(seen);
}

async function open(ctx, url) {
  const page = await ctx.newPage();
  const seen = [];
  page.on("dialog", (d) => { seen.push("dialog: " + d.message()); d.dismiss().catch(() => {}); });
  page.on("pageerror", (e) => seen.push("pageerror: " + e.message));
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") seen.push("console " + m.type() + ": " + m.text()); });
  page.on("response", (r) => { if (r.status() >= 400) seen.push(`HTTP ${r.status()} for ${r.url()}`); });
  page.setDefaultTimeout(10000);
  const resp = await page.goto(url, { waitUntil: "domcontentloaded" });
  check(resp && resp.status() === 200, `${url}: HTTP ${resp && resp.status()}`);
  // The script ran (theme toggle shown, times localised): the page is as a viewer sees it.
  await page.waitForSelector("#theme:not([hidden])");
  return { page, seen };
}

async function everyState(ctx) {
  const { page, seen } = await open(ctx, cfg.base + "/");
  const counts = await page.$$eval("[data-count]", (els) =>
    Object.fromEntries(els.map((e) => [e.getAttribute("data-count"), Number(e.textContent)])));
  const pills = await page.$$eval("#fleet tbody .pill", (els) => [...new Set(els.map((e) => e.classList[1]))]);
  for (const s of cfg.states) {
    check(counts[s] > 0, `the summary counts no ${s} target: ${JSON.stringify(counts)}`);
    check(pills.includes(s), `no row shows a ${s} pill: ${JSON.stringify(pills)}`);
  }
  const rows = await page.$$eval("#fleet tbody tr[data-target]", (r) => r.length);
  const bad = await fired(page, seen);
  check(bad.length === 0, "the fleet page reported: " + bad.join("; "));
  const light = await shot(page, "fleet-light");
  await page.click("#theme");
  const dark = await page.evaluate(() => document.documentElement.getAttribute("data-theme"));
  check(dark === "dark", `the toggle set theme ${dark}`);
  const darkShot = await shot(page, "fleet-dark");
  ok("every-state", { counts, pills, rows, screenshots: [light, darkShot] });
  await page.close();
}

async function driftAndChart(ctx) {
  const { page, seen } = await open(ctx, cfg.base + "/targets/" + encodeURIComponent(cfg.drifting));
  const drift = await page.$eval("h2:text-is('Drift') ~ p .pill.drifted", (e) => e.textContent);
  const changes = await page.$$eval("h2:text-is('Drift') + p + table tbody tr", (rows) =>
    rows.map((r) => Array.from(r.cells).map((c) => c.textContent.trim())));
  check(changes.length > 0, "the drift section lists no classified change");
  // The drift history: the drift event with its whole classified diff, old → new.
  const history = await page.$$eval("table.diff tbody tr", (rows) =>
    rows.map((r) => Array.from(r.cells).map((c) => c.textContent.trim())));
  check(history.some((r) => r[1] === "required-parameter-added" && r[4].includes("→")),
    "the drift history shows no classified diff: " + JSON.stringify(history));
  const chart = await page.$("svg.chart[role=img]");
  check(chart, "no latency chart");
  const lines = await page.$$eval("svg.chart polyline", (ps) => ps.map((p) => p.getAttribute("points").trim().split(/\s+/).length));
  check(lines.length >= 2 && lines.some((n) => n >= 2), `the chart draws no line: ${JSON.stringify(lines)}`);
  const box = await chart.boundingBox();
  check(box && box.width > 200 && box.height > 80, `the chart is not visible: ${JSON.stringify(box)}`);
  const bad = await fired(page, seen);
  check(bad.length === 0, "the target page reported: " + bad.join("; "));
  ok("drift-and-chart", { drift, changes, history, polylines: lines.length, screenshot: await shot(page, "target-drifting") });
  await page.close();
}

async function hostile(ctx) {
  const { page, seen } = await open(ctx, cfg.base + "/targets/" + encodeURIComponent(cfg.hostile.target));
  // Give anything that would run a moment to run (an onerror fires when the image fails).
  await page.waitForTimeout(300);
  const text = await page.evaluate(() => document.body.innerText);
  for (const needle of cfg.hostile.shown) {
    check(text.includes(needle), `the page does not show ${JSON.stringify(needle)} as text`);
  }
  const dom = await page.evaluate(() => ({
    scripts: Array.from(document.scripts).map((s) => s.getAttribute("src")),
    handlers: Array.from(document.querySelectorAll("*")).flatMap((e) =>
      Array.from(e.attributes).filter((a) => /^on/i.test(a.name)).map((a) => e.tagName + "[" + a.name + "]")),
    images: Array.from(document.images).map((i) => i.getAttribute("src")),
    iframes: document.querySelectorAll("iframe, object, embed").length,
    marker: window.__pwned === undefined,
  }));
  check(JSON.stringify(dom.scripts) === JSON.stringify(["/assets/status.js"]), "scripts on the page: " + JSON.stringify(dom.scripts));
  check(dom.handlers.length === 0, "event-handler attributes on the page: " + dom.handlers.join(", "));
  check(dom.images.length === 0 && dom.iframes === 0, `images or frames from the server: ${JSON.stringify(dom)}`);
  check(dom.marker, "window.__pwned was set: a script from the server ran");
  const bad = await fired(page, seen);
  check(bad.length === 0, "a script ran or the CSP was violated: " + bad.join("; "));
  ok("hostile-inert", { dom, screenshot: await shot(page, "target-hostile") });
  await page.close();
}

async function keyboard(ctx) {
  const { page } = await open(ctx, cfg.base + "/");
  const names = await page.$$eval("#fleet tbody tr[data-target]", (rs) => rs.map((r) => r.getAttribute("data-target")));
  check(names.length > 0, "no rows");
  const reached = new Set();
  const order = [];
  for (let i = 0; i < 400 && reached.size < names.length; i++) {
    await page.keyboard.press("Tab");
    const at = await page.evaluate(() => {
      const a = document.activeElement;
      const tr = a && a.closest("tr[data-target]");
      const style = a && getComputedStyle(a);
      return { row: tr && tr.getAttribute("data-target"), tag: a && a.tagName, outline: style && style.outlineStyle };
    });
    if (at.row) { reached.add(at.row); order.push(at); }
  }
  const missing = names.filter((n) => !reached.has(n));
  check(missing.length === 0, "Tab never reached the rows of " + JSON.stringify(missing));
  const visible = order.every((o) => o.outline && o.outline !== "none");
  check(visible, "a focused row link shows no focus outline: " + JSON.stringify(order));
  ok("keyboard", { rows: names.length });
  await page.close();
}

async function live(ctx) {
  // The test brings the server up (it is down after flapping), then takes it down on `go`.
  console.log("want live up");
  const up = await nextLine();
  check(up === "up", `expected up, got ${up}`);
  const { page, seen } = await open(ctx, cfg.base + "/");
  const cell = `tr[data-target="${cfg.live}"] [data-field=status]`;
  const before = await page.$eval(cell, (e) => e.textContent);
  check(before !== "down", `${cfg.live} is already down`);
  await page.evaluate(() => { window.__sameDocument = true; });
  console.log("ready live");
  const go = await nextLine();
  check(go === "go", `expected go, got ${go}`);
  await page.waitForFunction((sel) => document.querySelector(sel).textContent === "down", cell, { timeout: 20000, polling: 50 });
  const seenAt = Date.now();
  const same = await page.evaluate(() => window.__sameDocument === true);
  check(same, "the page was reloaded");
  const fleet = await page.evaluate(() => fetch("/api/v1/fleet").then((r) => r.json()));
  const t = fleet.targets.find((x) => x.name === cfg.live);
  check(t && t.status === "down" && t.since_ms, `the API says ${JSON.stringify(t)}`);
  const lag = seenAt - t.since_ms;
  // The page polls once per check interval: the change shows within one interval of the
  // transition's timestamp (allowing 1 s for the failing check itself and the fetch).
  check(lag <= cfg.interval_ms + 1000, `the page showed ${cfg.live} down ${lag} ms after the transition`);
  const counted = await page.$eval("[data-count=down]", (e) => Number(e.textContent));
  check(counted === fleet.down, `the down count shows ${counted}, the API ${fleet.down}`);
  const bad = await fired(page, seen);
  check(bad.length === 0, "the fleet page reported: " + bad.join("; "));
  ok("live", { before, lag_ms: lag, interval_ms: cfg.interval_ms, screenshot: await shot(page, "fleet-live-down") });
  await page.close();
}

// A monitor with `[server] token`: the page asks for it once, keeps a cookie script cannot
// read, and from then on only reads (every request the page makes is a GET but the sign-in).
async function token(browser) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await ctx.addInitScript(hooks);
  const page = await ctx.newPage();
  page.setDefaultTimeout(10000);
  const requests = [];
  page.on("request", (r) => requests.push(r.method() + " " + new URL(r.url()).pathname));
  let resp = await page.goto(cfg.token.base + "/", { waitUntil: "domcontentloaded" });
  check(resp.status() === 401, `without the token: HTTP ${resp.status()}`);
  const api = await page.evaluate(() => fetch("/api/v1/fleet").then((r) => r.status));
  check(api === 401, `the API without the token: HTTP ${api}`);
  await page.fill("input[name=token]", "not-it");
  await Promise.all([page.waitForNavigation(), page.click("form.login button")]);
  check(/not valid/.test(await page.textContent("main")), "a wrong token is not refused");
  await page.fill("input[name=token]", cfg.token.token);
  [resp] = await Promise.all([page.waitForNavigation(), page.click("form.login button")]);
  check(resp.status() === 200 && new URL(page.url()).pathname === "/", `after signing in: HTTP ${resp.status()} at ${page.url()}`);
  const rows = await page.$$eval("#fleet tbody tr[data-target]", (r) => r.length);
  check(rows > 0, "no rows after signing in");
  const cookies = await ctx.cookies();
  const c = cookies.find((x) => x.name === "mcpulse_page");
  check(c && c.httpOnly && c.sameSite === "Strict" && c.path === "/" && !c.value.includes(cfg.token.token),
    "the cookie: " + JSON.stringify(cookies));
  const visible = await page.evaluate(() => document.cookie);
  check(!visible.includes("mcpulse_page"), "script can read the cookie: " + visible);
  // The live script reads the API with the cookie.
  await page.waitForFunction(() => /updated/.test(document.getElementById("live").textContent), null, { timeout: 15000 });
  await page.click("tr[data-target] th a");
  await page.waitForSelector("h2#latency");
  const forms = await page.$$eval("form", (fs) => fs.map((f) => (f.getAttribute("method") || "get").toLowerCase()));
  check(!forms.includes("post"), "a page with the data has a form that posts: " + JSON.stringify(forms));
  const writes = requests.filter((r) => !r.startsWith("GET ") && r !== "POST /login");
  check(writes.length === 0, "the page sent: " + writes.join(", "));
  const bad = await fired(page, []);
  check(bad.length === 0, "the page reported: " + bad.join("; "));
  ok("token", { requests: requests.length, posts: requests.filter((r) => r.startsWith("POST")).length, cookie: { httpOnly: c.httpOnly, sameSite: c.sameSite, path: c.path } });
  await ctx.close();
}

// `{"mode": "readme", "base": …, "playwright": …, "chromium": …, "out": "docs/img"}`: the
// README's two screenshots of a running `mcpulse demo` (docs/status-page.md says how).
async function readme() {
  const browser = await chromium.launch({ executablePath: cfg.chromium, timeout: 20000, args: ["--no-sandbox"] });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 820 }, colorScheme: "light" });
  const page = await ctx.newPage();
  const shots = [];
  for (const [path, file] of [["/", "status-fleet.png"], ["/targets/" + encodeURIComponent(cfg.target || "drifting") + "?range=1h", "status-target.png"]]) {
    const resp = await page.goto(cfg.base + path, { waitUntil: "domcontentloaded" });
    check(resp && resp.status() === 200, `${path}: HTTP ${resp && resp.status()}`);
    await page.waitForSelector("#theme:not([hidden])");
    // The target view down to its latency chart.
    await page.setViewportSize({ width: 1280, height: path === "/" ? 820 : 1260 });
    const out = require("path").join(cfg.out, file);
    await page.screenshot({ path: out });
    shots.push(out);
  }
  await browser.close();
  ok("readme", { screenshots: shots });
}

// `{"mode": "measure", "base": …, "paths": [...], "runs": N, …}`: how soon each page is usable
// in Chromium (the 10,000-target benchmark in crates/mcpulse-monitor/tests/status_page.rs runs
// it): from the navigation's start to DOMContentLoaded and to the first contentful paint
// (the first rows drawn; the HTML comes rendered, so they are there at the first paint), the
// later of the two being "usable". A fresh page (not a fresh cache) per run; one browser.
async function measure() {
  const browser = await chromium.launch({ executablePath: cfg.chromium, timeout: 20000, args: ["--no-sandbox"] });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const median = (xs) => { const v = xs.slice().sort((a, b) => a - b); return v[Math.floor((v.length - 1) / 2)]; };
  for (const path of cfg.paths) {
    const runs = [];
    for (let i = 0; i < cfg.runs; i++) {
      const page = await ctx.newPage();
      const resp = await page.goto(cfg.base + path, { waitUntil: "domcontentloaded", timeout: 30000 });
      check(resp && resp.status() === 200, `${path}: HTTP ${resp && resp.status()}`);
      await page.waitForFunction(() => performance.getEntriesByType("paint").some((p) => p.name === "first-contentful-paint"), null, { timeout: 30000 });
      const t = await page.evaluate(() => {
        const n = performance.getEntriesByType("navigation")[0];
        const fcp = performance.getEntriesByType("paint").find((p) => p.name === "first-contentful-paint");
        return { ttfb: n.responseStart, dcl: n.domContentLoadedEventEnd, fcp: fcp.startTime, rows: document.querySelectorAll("tbody tr").length };
      });
      runs.push({ ...t, usable: Math.max(t.dcl, t.fcp) });
      await page.close();
    }
    const warm = runs.slice(1); // the first run pays for the browser's own start-up work
    const fig = (k) => ({ median: median(warm.map((r) => r[k])), worst: Math.max(...warm.map((r) => r[k])) });
    ok("measure", { path, runs: warm.length, rows: runs[0].rows, ttfb: fig("ttfb"), dcl: fig("dcl"), fcp: fig("fcp"), usable: fig("usable") });
  }
  await browser.close();
}

(async () => {
  if (cfg.mode === "measure") {
    try { await measure(); process.exit(0); } catch (e) { console.log(`fail measure: ${e.stack || e}`); process.exit(1); }
  }
  if (cfg.mode === "readme") {
    try { await readme(); process.exit(0); } catch (e) { console.log(`fail readme: ${e.stack || e}`); process.exit(1); }
  }
  let browser;
  let name = "launch";
  try {
    const started = Date.now();
    browser = await chromium.launch({ executablePath: cfg.chromium, timeout: 20000, args: ["--no-sandbox"] });
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: "light" });
    await ctx.addInitScript(hooks);
    ok("launch", { ms: Date.now() - started, version: browser.version() });
    for (const [n, f] of [["every-state", everyState], ["drift-and-chart", driftAndChart], ["hostile-inert", hostile], ["keyboard", keyboard], ["live", live]]) {
      name = n;
      await f(ctx);
    }
    name = "token";
    await token(browser);
    await browser.close();
    process.exit(0);
  } catch (e) {
    console.log(`fail ${name}: ${e instanceof Fail ? e.message : e.stack || e}`);
    if (browser) await browser.close().catch(() => {});
    process.exit(1);
  }
})();
