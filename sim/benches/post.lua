-- wrk script: non-streaming completions against one simulator replica.
--   wrk -t1 -c32 -d10s -s sim/benches/post.lua http://127.0.0.1:9001/v1/completions
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"tiny","prompt":"You are a helpful assistant. Answer briefly: what is the capital of France?","max_tokens":8}'
