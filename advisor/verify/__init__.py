"""`advise verify`: a controlled A/B of a speculative config with a real `vllm serve` and `vllm bench serve`.

session (the one library call) -> dataset (bench input and load from the logs) -> plan (every command, also as a
shell script) -> runner (fresh server per arm and trial, via server) -> metrics (/metrics scraping) -> verdict
(bootstrap ratios, controls, predicted versus measured) -> history (record JSON, history file, Markdown).
See docs/verify.md.
"""
