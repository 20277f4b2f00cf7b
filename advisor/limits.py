"""Bounds on every option value that sets work or memory (docs/input.md, "Option limits").

vLLM's own config types give the lower bounds (vllm/config/parallel.py `tensor_parallel_size: Field(ge=1)`,
vllm/config/scheduler.py `max_num_seqs: Field(ge=1)`, vllm/config/cache.py `block_size: Field(gt=0)`,
vllm/config/speculative.py `num_speculative_tokens > 0`, `prompt_lookup_min/max: Field(ge=1)`); vLLM puts no
upper bound on them, so the upper bounds here are the largest values a real deployment reaches, with room:
beyond them a replay or a load model would only burn time or memory on a configuration no server runs.
An option outside its range is a usage error (exit 2) that names the limit.
"""
from __future__ import annotations

import math
from typing import Any

from advisor.errors import ConfigError

# Tensor parallelism: ranks of one model instance. The largest NVLink domains (GB200 NVL72) hold 72 GPUs;
# 1024 leaves room for multi-node TP.
MAX_TP = 1024
# vLLM's --max-num-seqs sizes per-sequence buffers on the GPU; 65,536 is 64x vLLM's largest default (1024).
MAX_NUM_SEQS = 65_536
# --replicas: vLLM servers behind one router (each has its own prefix cache and suffix tree).
MAX_REPLICAS = 100_000
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
# Worker processes of the profile (`--workers`): each holds a tokenizer and its share of the context budget.
MAX_WORKERS = 256

# `advise verify` (advisor/cli/verify.py). Each trial starts two servers (minutes each on a GPU): 100 trials
# of the default plan are days of serving.
MAX_TRIALS = 100
# --max-model-len: vLLM's `max_model_len: Field(ge=-1)` (vllm/config/model.py) has no upper bound; a request
# longer than the ingest limit (2^24 tokens) never reaches the dataset, so a longer limit changes nothing.
MAX_MODEL_LEN = 1 << 24
# vLLM seeds numpy with the server's --seed (vllm/utils/torch_utils.py set_random_seed: np.random.seed),
# which takes 0 .. 2^32 - 1; vllm bench serve's --seed seeds Python's and numpy's generators the same way.
MAX_SEED = 2**32 - 1
# vllm bench serve's gamma arrivals need burstiness > 0 (vllm/benchmarks/serve.py: `assert burstiness > 0`);
# at 100 the inter-arrival CV (1/sqrt(burstiness)) is 0.1: near-metronome arrivals. The logs' own burstiness
# is capped here too (advisor/verify/dataset.py).
MAX_BURSTINESS = 100.0
# Sampling temperature: vLLM requires a finite value >= 0 (vllm/sampling_params.py, _verify_args) and has no
# upper bound; the ingest limit (advisor/ingest/_schema.py) is the same 100.
MAX_TEMPERATURE = 100.0
# VLLM_CPU_KVCACHE_SPACE is parsed as an integer count of GiB (vllm/envs.py: int(os.getenv(...))).
MAX_KV_CACHE_GIB = 4096
# Seconds a server may take to become ready: the largest models load and compile within an hour or two.
MAX_READY_TIMEOUT_S = 86_400.0
# --serve-arg: flags shared by both servers; a real `vllm serve` command line is a few hundred characters.
MAX_SERVE_ARG_CHARS = 1 << 16
MAX_SERVE_ARGS = 256
# A --speculative-config JSON is a few keys (lint applies the same limit).
MAX_SPECULATIVE_CONFIG_CHARS = 1 << 16

# Integer keys of a speculative config and their ranges: vLLM's lower bound (vllm/config/speculative.py),
# advise's upper one.
SPECULATIVE_INTEGERS = {
    "num_speculative_tokens": (1, MAX_SPECULATIVE_TOKENS),
    "prompt_lookup_min": (1, MAX_PROMPT_LOOKUP),
    "prompt_lookup_max": (1, MAX_PROMPT_LOOKUP),
    "suffix_decoding_max_tree_depth": (1, MAX_SUFFIX_TREE_DEPTH),
    "suffix_decoding_max_cached_requests": (0, MAX_SUFFIX_CACHED_REQUESTS),
    "draft_tensor_parallel_size": (1, MAX_TP),
}
SPECULATIVE_FRACTIONS = {
    "suffix_decoding_max_spec_factor": (0.0, MAX_SUFFIX_SPEC_FACTOR),
    "suffix_decoding_min_token_prob": (0.0, 1.0),
}


def check_int(config: dict[str, Any], key: str, minimum: int, maximum: int) -> None:
    """An integer speculative-config value within [minimum, maximum]: vLLM's lower bound, advise's upper one."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:40]}..."
        raise ConfigError(f"speculative config: {key} must be an integer >= {minimum}, got {shown}")
    if value > maximum:
        raise ConfigError(f"speculative config: {key}={value} is over advise's limit of {maximum} (beyond any "
                          f"deployed configuration; docs/input.md, option limits)")


def check_number(config: dict[str, Any], key: str, minimum: float, maximum: float) -> None:
    """A finite speculative-config number within [minimum, maximum]."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and minimum <= value <= maximum):
        raise ConfigError(f"speculative config: {key} must be a number in [{minimum:g}, {maximum:g}] (advise's "
                          f"limit, docs/input.md)")


def check_speculative_config(config: dict[str, Any]) -> None:
    """The numeric keys a speculative config gives (dashed or not, any method) within their limits: the check
    of a config that goes to vLLM as it is (`advise verify`); the profile's replay completes it first."""
    plain = {str(key).replace("-", "_"): value for key, value in config.items()}
    for key, (minimum, maximum) in SPECULATIVE_INTEGERS.items():
        if plain.get(key) is not None:
            check_int(plain, key, minimum, maximum)
    for key, (low, high) in SPECULATIVE_FRACTIONS.items():
        if plain.get(key) is not None:
            check_number(plain, key, low, high)
