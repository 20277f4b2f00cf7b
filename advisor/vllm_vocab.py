"""vLLM's configuration vocabulary: speculative-config keys and methods, removed flags, defaults.

The lowest layer of the package (beside `errors`, `record` and `report`): the replays, lint, the engine and
the emitters all speak it, so it imports nothing of the pipeline. Facts from vLLM 0.33's own source
(`vllm/config/speculative.py`, `vllm/config/cache.py`) and the project's vLLM 0.33 reference notes (vllm-0.33.md).
"""
from __future__ import annotations

# The placeholder a hand-written config leaves for a value still to choose; lint's `placeholder` rule flags
# it (emitted configs never contain it: undecided flags are left out and listed in the checklist).
PLACEHOLDER = "YOUR_VALUE"
# vLLM's default --gpu-memory-utilization (vllm/config/cache.py, CacheConfig.gpu_memory_utilization).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# How a router spreads requests over vLLM replicas, under the vLLM Router's `--policy` names
# (vllm-project/router; advisor.measure.routing replays both): round_robin as a plain load balancer does,
# consistent_hash keeping a session on one replica.
ROUTING_POLICIES = ("round_robin", "consistent_hash")
DEFAULT_ROUTING = "round_robin"

# --------------------------------------------------------------------------------------------------------
# vLLM's speculative-config vocabulary (vLLM 0.33, vllm/config/speculative.py, class SpeculativeConfig;
# pydantic `extra="forbid"`, so any other key is an error). Internal fields filled by the engine
# (target_model_config, draft_model_config, target_parallel_config, draft_parallel_config) are left out:
# users cannot set them. tests/test_emit_vllm.py compares this set with the installed vLLM's fields.
# --------------------------------------------------------------------------------------------------------
SPECULATIVE_KEYS: frozenset[str] = frozenset(
    {
        "method",
        "model",
        "num_speculative_tokens",
        "num_speculative_tokens_per_batch_size",
        "prompt_lookup_min",
        "prompt_lookup_max",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "draft_tensor_parallel_size",
        "tensor_parallel_size",  # accepted only to warn that draft_tensor_parallel_size is meant
        "max_model_len",
        "quantization",
        "revision",
        "code_revision",
        "enforce_eager",
        "draft_sample_method",
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        "disable_padded_drafter_batch",
        "use_local_argmax_reduction",
        "parallel_drafting",
        "draft_load_config",
        "attention_backend",
        "kv_cache_dtype",
        "moe_backend",
        "disable_eagle_block_drop",
        "dspark_draft_topk",
        "enable_adaptive_verification",
        "index_share_for_mtp_iteration",
        "use_heterogeneous_vocab",
    }
)

# Methods vLLM 0.33 accepts (vllm-0.33.md section 1).
SPECULATIVE_METHODS: frozenset[str] = frozenset(
    {
        "ngram",
        "ngram_gpu",
        "suffix",
        "draft_model",
        "eagle",
        "eagle3",
        "mtp",
        "dflash",
        "dspark",
        "custom_class",
        "extract_hidden_states",
    }
)
# Removed from vLLM: configs using them fail to start.
REMOVED_METHODS: dict[str, str] = {
    "medusa": "Medusa heads were removed; use eagle3 (a trained head) or a lookup method (ngram, suffix)",
    "mlp_speculator": "MLP speculators were removed; use eagle3 or draft_model",
}
# Per-model MTP names still accepted but rewritten to `mtp` with a deprecation warning
# (MTPModelTypes in vllm/config/speculative.py).
DEPRECATED_MTP_METHODS: frozenset[str] = frozenset(
    {
        "deepseek_mtp",
        "mimo_mtp",
        "glm4_moe_mtp",
        "ernie_mtp",
        "qwen3_next_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "pangu_ultra_moe_mtp",
        "nemotron_h_mtp",
    }
)
# Keys that existed in older releases and are rejected now (extra="forbid").
REMOVED_SPECULATIVE_KEYS: dict[str, str] = {
    "disable_by_batch_size": "use num_speculative_tokens_per_batch_size, e.g. [[1,16,4],[17,1024,0]]",
    "speculative_token_tree": "tree drafting was removed; use a chain (num_speculative_tokens)",
    "speculative_disable_by_batch_size": "use num_speculative_tokens_per_batch_size",
    "acceptance_method": "use rejection_sample_method",
    "typical_acceptance_sampler_posterior_threshold": "typical acceptance was removed; use the standard sampler",
    "typical_acceptance_sampler_posterior_alpha": "typical acceptance was removed; use the standard sampler",
    "disable_mqa_scorer": "the MQA scorer switch was removed with the V0 engine",
    "disable_logprobs": "removed with the V0 engine",
    "disable_log_stats": "removed with the V0 engine",
}
# Methods that need a `model` (draft or head); mtp defaults to the target, lookup methods need none.
METHODS_NEEDING_MODEL: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3", "dflash", "dspark"})
# Methods whose k must be given: suffix defaults to its tree depth, mtp may take n_predict from its config.
METHODS_NEEDING_K: frozenset[str] = frozenset({"ngram", "ngram_gpu", "draft_model", "eagle", "eagle3", "dflash"})
# `num_speculative_tokens_per_batch_size` ("dynamic SD") support, vllm-0.33.md section 1.
DYNAMIC_K_METHODS: frozenset[str] = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})
# Proposers that run on the CPU between steps and switch vLLM's async scheduling off (measured cost:
# 4.97 ms vs 6.66 ms TPOT at concurrency 1 on the H200, gpu-h200-measurements.md "Readings").
ASYNC_INCOMPATIBLE_METHODS: frozenset[str] = frozenset({"ngram", "suffix", "custom_class"})

# Command-line flags removed from vLLM (argparse: "unrecognized arguments"), with the JSON key replacing each.
LEGACY_FLAGS: dict[str, str] = {
    "--speculative-model": "model",
    "--num-speculative-tokens": "num_speculative_tokens",
    "--ngram-prompt-lookup-max": "prompt_lookup_max",
    "--ngram-prompt-lookup-min": "prompt_lookup_min",
    "--speculative-disable-by-batch-size": "num_speculative_tokens_per_batch_size",
    "--speculative-draft-tensor-parallel-size": "draft_tensor_parallel_size",
    "--speculative-max-model-len": "max_model_len",
    "--speculative-model-quantization": "quantization",
    "--speculative-disable-mqa-scorer": "(removed, no replacement)",
    "--spec-decoding-acceptance-method": "rejection_sample_method",
    "--typical-acceptance-sampler-posterior-threshold": "(removed, no replacement)",
    "--typical-acceptance-sampler-posterior-alpha": "(removed, no replacement)",
    "--speculative-disable-logprobs": "(removed, no replacement)",
}
# The shortcut flags of vLLM 0.33 and the JSON key each one sets (vllm-0.33.md section 1).
SHORTCUT_FLAGS: dict[str, str] = {
    "--spec-method": "method",
    "--spec-model": "model",
    "--spec-tokens": "num_speculative_tokens",
}
SPECULATIVE_CONFIG_FLAGS: tuple[str, ...] = ("--speculative-config", "-sc")
