-- wrk script: POST real request bodies, one JSON per line of a file, cycling through them,
-- and print the run's figures as one JSON line (prefix BENCH_JSON) when it ends.
--   wrk -t1 -c64 -d10s -s bench/wrk.lua http://127.0.0.1:8000 -- /entailment bodies.jsonl
-- Requests are formatted once in init(), so the generator's per-request cost is a table lookup.

local requests_ = {}
local count = 0
local index = 0

function init(args)
  local path, file = args[1], args[2]
  local headers = { ["Content-Type"] = "application/json" }
  for line in io.lines(file) do
    if #line > 0 then
      count = count + 1
      requests_[count] = wrk.format("POST", path, headers, line)
    end
  end
  if count == 0 then
    error("no request bodies in " .. file)
  end
end

function request()
  index = index % count + 1
  return requests_[index]
end

function done(summary, latency, requests)
  local e = summary.errors
  local p = function(q) return latency:percentile(q) end
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"p50": %.1f, "p90": %.1f, "p95": %.1f, "p99": %.1f, "max": %.1f, "mean": %.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    p(50), p(90), p(95), p(99), latency.max, latency.mean))
end
