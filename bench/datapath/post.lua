-- wrk script: POST a /v1/completions request with a PROMPT_BYTES prompt (default 2048), and
-- print the latency percentiles and throughput as one machine-readable line at the end.
local bytes = tonumber(os.getenv("PROMPT_BYTES") or "2048")
local words = {}
local len = 0
local i = 0
while len < bytes do
  i = i + 1
  local w = "token" .. (i % 97) .. " "
  words[#words + 1] = w
  len = len + #w
end
local prompt = table.concat(words):sub(1, bytes)
wrk.method = "POST"
wrk.path = "/v1/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"tiny","prompt":"' .. prompt .. '","max_tokens":1,"stream":false}'

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT rps=%.1f p50_us=%d p90_us=%d p99_us=%d mean_us=%.1f requests=%d errors=%d non2xx=%d body_bytes=%d\n",
    summary.requests / secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean,
    summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, #wrk.body))
end
