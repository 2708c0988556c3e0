-- wrk script for a /probe endpoint (mcpulse's or blackbox_exporter's): GET the URL given to
-- wrk, and count the answers that are not "HTTP 200 with probe_success 1". A probe that
-- failed is not a probe per second, so these are reported (and must be 0).
local failed = 0
local threads = {}

setup = function(thread)
  table.insert(threads, thread)
end

response = function(status, headers, body)
  if status ~= 200 or not string.find(body, "\nprobe_success 1\n", 1, true) then
    failed = failed + 1
  end
end

done = function(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do
    total = total + (t:get("failed") or 0)
  end
  io.write(string.format("probe_failures %d\n", total))
  io.write(string.format("socket_errors %d\n",
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
  io.write(string.format("latency_p50_us %d\nlatency_p99_us %d\n",
    latency:percentile(50), latency:percentile(99)))
end
