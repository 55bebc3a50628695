-- wrk script of the proxy-overhead benchmark: POSTs the JSON bodies in the file named by WRK_BODY_FILE, one body
-- per line (bodies.py writes it). One line: that body on every request (wrk's static request, no Lua per request).
-- Several: each wrk thread sends them in the file's order, round and round, thread i starting 1009 x i lines in;
-- the order of the bodies a thread sends is fixed, the connection that carries each one is whichever is free
-- (wrk's request() is called per thread, not per connection). With WRK_DELAY_MS > 0 each connection waits that
-- long after a response before its next request (wrk has no fixed-rate mode: N connections at D ms give about
-- N * 1000 / D requests/s). Prints one line "WRK_JSON {...}" with the counts and latency percentiles in
-- microseconds.
local bodies = {}
for line in io.lines(os.getenv("WRK_BODY_FILE")) do
  if #line > 0 then
    bodies[#bodies + 1] = line
  end
end
assert(#bodies > 0, "no body in WRK_BODY_FILE")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local thread_count = 0
function setup(thread)
  thread:set("thread_index", thread_count)
  thread_count = thread_count + 1
end

if #bodies == 1 then
  wrk.body = bodies[1]
else
  local requests, next_index = {}, 1
  function init(args)
    for i, body in ipairs(bodies) do
      requests[i] = wrk.format(nil, nil, nil, body)
    end
    next_index = ((thread_index or 0) * 1009) % #requests + 1
  end
  function request()
    local r = requests[next_index]
    next_index = next_index % #requests + 1
    return r
  end
end

local delay_ms = tonumber(os.getenv("WRK_DELAY_MS") or "0")
if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"socket_errors":%d,"non2xx":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.mean, latency.max))
end
