-- wrk script of the proxy-overhead benchmark: POSTs the JSON body in the file named by WRK_BODY_FILE on every
-- request. With WRK_DELAY_MS > 0 each connection waits that long after a response before its next request
-- (wrk has no fixed-rate mode: N connections at D ms give about N * 1000 / D requests/s). Prints one line
-- "WRK_JSON {...}" with the counts and latency percentiles in microseconds.
local file = assert(io.open(os.getenv("WRK_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"

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
