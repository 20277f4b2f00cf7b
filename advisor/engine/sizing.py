"""Sizing: the resource flags of the recommended deployment (`--max-model-len`, `--max-num-seqs`,
`--max-num-batched-tokens`, `--gpu-memory-utilization`), each derived from the observed workload with its
reason.

Where the logs cannot decide a value the flag is left out (vLLM's default applies) or set to vLLM's default
explicitly, and `confirm` marks it for the checklist: emitted configs never hold a placeholder, so they run
as printed.
"""
from __future__ import annotations

import math

from advisor.hardware import GpuSpec, ModelSpec, kv_bytes_per_token_per_rank, weight_bytes_per_rank
from advisor.report import DerivedFlag, Report
from advisor.vllm_vocab import DEFAULT_GPU_MEMORY_UTILIZATION

MAX_MODEL_LEN_HEADROOM = 1.10  # 10% above the observed p99.9 of prompt + output
SMALL_ROUNDING = 256  # max-model-len rounds up to a multiple of 256 up to 8192 tokens ...
LARGE_ROUNDING = 1024  # ... and to a multiple of 1024 above
MAX_NUM_SEQS_HEADROOM = 1.5  # above the Little's-law peak batch, for bursts within the busiest minute
ACTIVATION_RESERVE_GB = 4.0  # activations + CUDA graphs, a rough allowance before the KV cache
MIN_BATCHED_TOKENS = 2048
MIN_MAX_NUM_SEQS = 16  # room for one-second bursts above the busiest minute's mean


def _round_up(value: float, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def derive_flags(report: Report, model: ModelSpec, gpu: GpuSpec, gpu_assumed: bool, tp: int,
                 peak_batch: int | None, saturated: bool, speculative_tokens: int) -> list[DerivedFlag]:
    """The four resource flags for this workload on `gpu` x `tp` (see the module docstring)."""
    flags: list[DerivedFlag] = []
    total = report.lengths.total
    p999 = total.p99_9 if total else None
    max_model_len: int | None = None
    if p999:
        wanted = p999 * MAX_MODEL_LEN_HEADROOM
        rounding = SMALL_ROUNDING if wanted <= 8192 else LARGE_ROUNDING
        max_model_len = _round_up(wanted, rounding)
        reason = (f"observed p99.9 of prompt + output is {p999:.0f} tokens; +10% headroom rounded up to a "
                  f"multiple of {rounding}")
        if model.max_position_embeddings and max_model_len > model.max_position_embeddings:
            max_model_len = model.max_position_embeddings
            reason += f", capped at the model's {model.max_position_embeddings}"
        flags.append(DerivedFlag("--max-model-len", max_model_len, reason, False))
    else:
        flags.append(DerivedFlag("--max-model-len", None,
                                 "no token lengths in the profile: left out (vLLM uses the model's full context); "
                                 "set your business limit for prompt + output", True))

    if peak_batch is None or saturated:
        why = "the observed peak saturates the assumed server: measure with `advise verify`" if saturated else \
            "no arrival times: set from your business concurrency"
        flags.append(DerivedFlag("--max-num-seqs", None, f"left out (vLLM's default applies); {why}", True))
        max_num_seqs = None
    else:
        max_num_seqs = max(MIN_MAX_NUM_SEQS, _round_up(peak_batch * MAX_NUM_SEQS_HEADROOM, 8))
        flags.append(DerivedFlag("--max-num-seqs", max_num_seqs,
                                 f"Little's-law batch at the busiest minute is {peak_batch}; x1.5 headroom, "
                                 "rounded up to a multiple of 8 (at least 16)", False))

    input_p99 = report.lengths.input.p99
    if input_p99:
        batched = max(MIN_BATCHED_TOKENS, _round_up(input_p99, 1024))
        reason = f"a p99 prompt ({input_p99:.0f} tokens) prefills in one step"
        if max_num_seqs is not None and max_num_seqs * (speculative_tokens + 1) > batched:
            batched = _round_up(max_num_seqs * (speculative_tokens + 1), 1024)
            reason = f"{max_num_seqs} sequences x {speculative_tokens + 1} verified tokens fit in one step"
        flags.append(DerivedFlag("--max-num-batched-tokens", batched,
                                 reason + "; larger values lengthen decode steps that share a prefill", False))
    else:
        flags.append(DerivedFlag("--max-num-batched-tokens", None,
                                 "no prompt lengths: left out (vLLM's default applies); choose the prefill chunk "
                                 "(2048-8192) against your ITL target", True))

    if gpu_assumed or max_num_seqs is None or max_model_len is None:
        flags.append(DerivedFlag("--gpu-memory-utilization", DEFAULT_GPU_MEMORY_UTILIZATION,
                                 f"vLLM default; GPU or load not known: keep {DEFAULT_GPU_MEMORY_UTILIZATION} unless "
                                 "other processes share the GPU", True))
    else:
        weights_gb = weight_bytes_per_rank(model, tp) / 1e9
        kv_gb = gpu.memory_gb * DEFAULT_GPU_MEMORY_UTILIZATION - weights_gb - ACTIVATION_RESERVE_GB
        mean_total = (total.mean if total else None) or max_model_len
        need_gb = max_num_seqs * mean_total * kv_bytes_per_token_per_rank(model, tp) / 1e9
        if kv_gb > need_gb:
            flags.append(DerivedFlag("--gpu-memory-utilization", DEFAULT_GPU_MEMORY_UTILIZATION,
                                     f"vLLM default; leaves about {kv_gb:.0f} GB of KV cache per GPU on {gpu.name}, "
                                     f"{need_gb:.1f} GB hold {max_num_seqs} sequences of the mean length", False))
        else:
            flags.append(DerivedFlag("--gpu-memory-utilization", DEFAULT_GPU_MEMORY_UTILIZATION,
                                     f"vLLM default, but weights {weights_gb:.0f} GB leave {kv_gb:.0f} GB of KV on "
                                     f"{gpu.name} and {need_gb:.0f} GB are needed: raise --tensor-parallel-size or "
                                     "lower --max-num-seqs", True))
    return flags
