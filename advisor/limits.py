"""Bounds on every option value that sets work or memory (docs/input.md, "Option limits").

vLLM's own config types give the lower bounds (vllm/config/parallel.py `tensor_parallel_size: Field(ge=1)`,
vllm/config/scheduler.py `max_num_seqs: Field(ge=1)`, vllm/config/cache.py `block_size: Field(gt=0)`,
vllm/config/speculative.py `num_speculative_tokens > 0`, `prompt_lookup_min/max: Field(ge=1)`); vLLM puts no
upper bound on them, so the upper bounds here are the largest values a real deployment reaches, with room:
beyond them a replay or a load model would only burn time or memory on a configuration no server runs.
An option outside its range is a usage error (exit 2) that names the limit.
"""
from __future__ import annotations

# Tensor parallelism: ranks of one model instance. The largest NVLink domains (GB200 NVL72) hold 72 GPUs;
# 1024 leaves room for multi-node TP.
MAX_TP = 1024
# vLLM's --max-num-seqs sizes per-sequence buffers on the GPU; 65,536 is 64x vLLM's largest default (1024).
MAX_NUM_SEQS = 65_536
# Concurrency levels of `advise whatif`: in-flight requests of one server.
MAX_CONCURRENCY = 1_000_000
MAX_CONCURRENCY_LEVELS = 64
# KV block size: vLLM's CUDA backends take 1..256 (attention kernels), the CPU backend 128; hash block sizes
# of token-free traces are at most a few thousand tokens (Mooncake: 512).
MAX_BLOCK_SIZE = 4096
# Requests per second of business load (vLLM bench serve's --request-rate is a float; 1e6 req/s is beyond
# any single deployment).
MAX_REQUEST_RATE = 1e6
# Replay sample size (requests).
MAX_REPLAY_REQUESTS = 10_000_000
# Speculative tokens per step (num_speculative_tokens, whatif --k): each step verifies k + 1 tokens per
# sequence; published configs use up to 24 (suffix decoding's default tree depth), EAGLE trees up to 64.
MAX_SPECULATIVE_TOKENS = 128
# ngram lookup windows (prompt_lookup_min/max): vLLM's ngram proposer matches suffixes of at most this many
# tokens; its own default is 5 and no published config exceeds 16.
MAX_PROMPT_LOOKUP = 128
# Suffix decoding (Arctic Inference): tree depth bounds per-node work; default 24.
MAX_SUFFIX_TREE_DEPTH = 1024
# Requests kept in the global suffix tree (default 10,000).
MAX_SUFFIX_CACHED_REQUESTS = 10_000_000
MAX_SUFFIX_SPEC_FACTOR = 1024.0
# Prompt/output lengths of `advise whatif` (tokens): the ingest limit of one request.
MAX_WHATIF_TOKENS = 1 << 24
