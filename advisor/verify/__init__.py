"""`advise verify`: a controlled A/B of a speculative config with a real `vllm serve` and `vllm bench serve`.

server (process groups, readiness, clean stop) -> metrics (/metrics scraping) -> dataset (bench input from the
logs) -> plan (every command, also as a shell script) -> runner (interleaved trials) -> verdict (bootstrap
ratios, predicted versus measured) -> history (JSON record + Markdown). See docs/verify.md.
"""
