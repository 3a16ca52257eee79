//! vLLM KV-cache events: to be written (issue 2).
