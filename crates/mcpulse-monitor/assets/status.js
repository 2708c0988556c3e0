// mcpulse status page: local times, the theme toggle and live updates. The page works without
// this script; it only improves it. No dependencies, no inline code (the CSP forbids it), and
// it never changes the monitor: it only GETs the read-only JSON API.
"use strict";
(function () {
  var fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

  // Timestamps in the viewer's time zone.
  function localise(root) {
    var ts = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < ts.length; i++) {
      var d = new Date(ts[i].getAttribute("datetime"));
      if (!isNaN(d)) { ts[i].textContent = fmt.format(d); ts[i].title = ts[i].getAttribute("datetime"); }
    }
  }

  // Light and dark: the system's by default, the toggle's once pressed (kept per browser).
  function theme() {
    var b = document.getElementById("theme");
    if (!b) return;
    var root = document.documentElement;
    var saved = null;
    try { saved = localStorage.getItem("mcpulse-theme"); } catch (e) { /* storage off */ }
    var dark = saved ? saved === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
    function apply() {
      root.setAttribute("data-theme", dark ? "dark" : "light");
      b.setAttribute("aria-pressed", dark ? "true" : "false");
      b.textContent = dark ? "Light theme" : "Dark theme";
    }
    if (saved) apply(); else b.textContent = dark ? "Light theme" : "Dark theme";
    b.hidden = false;
    b.addEventListener("click", function () {
      dark = !dark;
      try { localStorage.setItem("mcpulse-theme", dark ? "dark" : "light"); } catch (e) { /* storage off */ }
      apply();
    });
  }

  // Live updates: poll /api/v1/fleet and update the state cells and the counts in place.
  // textContent only: nothing from the API is ever parsed as HTML.
  var STATES = ["healthy", "degraded", "down", "unknown"];
  function setState(cell, status) {
    if (!cell || cell.textContent === status) return;
    cell.textContent = status;
    for (var i = 0; i < STATES.length; i++) cell.classList.remove(STATES[i]);
    cell.classList.add(status);
  }
  function poll() {
    var rows = document.querySelectorAll("tr[data-target]");
    var one = document.querySelector("[data-live-target]");
    if (!rows.length && !one) return;
    // The page says how often (its targets' shortest check interval, 1-10 s).
    var every = document.querySelector("[data-live-every]");
    var period = every ? Number(every.getAttribute("data-live-every")) : 10000;
    if (!(period >= 1000 && period <= 10000)) period = 10000;
    function tick() {
      fetch("/api/v1/fleet", { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
        .then(function (f) {
          var byName = {};
          for (var i = 0; i < f.targets.length; i++) byName[f.targets[i].name] = f.targets[i];
          for (var j = 0; j < rows.length; j++) {
            var t = byName[rows[j].getAttribute("data-target")];
            if (!t) continue;
            setState(rows[j].querySelector("[data-field=status]"), t.status);
            var last = rows[j].querySelector("[data-field=last]");
            if (last && t.last_check_ms) {
              last.textContent = fmt.format(new Date(t.last_check_ms)) + " (" + t.last_status + ")";
            }
          }
          if (one) {
            var t1 = byName[one.getAttribute("data-live-target")];
            if (t1) setState(one, t1.status);
          }
          var counts = document.querySelectorAll("[data-count]");
          for (var k = 0; k < counts.length; k++) {
            var key = counts[k].getAttribute("data-count");
            if (typeof f[key] === "number") counts[k].textContent = String(f[key]);
          }
          var stamp = document.getElementById("live");
          if (stamp) stamp.textContent = "live · updated " + fmt.format(new Date(f.generated_at_ms));
        })
        .catch(function () {
          var stamp = document.getElementById("live");
          if (stamp) stamp.textContent = "live updates paused (the API did not answer)";
        })
        .then(function () { setTimeout(tick, period); });
    }
    setTimeout(tick, period);
  }

  document.addEventListener("DOMContentLoaded", function () {
    localise(document);
    theme();
    poll();
  });
})();
