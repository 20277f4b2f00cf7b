"""Renders a recommendation as what people paste: a `vllm serve` command, a `--config` YAML, `LLM(...)`
keyword arguments and JSON for config repositories.

Rules from vLLM itself (vllm-0.33.md): one JSON `--speculative-config` with `method` explicit, never the
removed legacy flags; in YAML, APC off must be written `no-enable-prefix-caching: true` because
`enable-prefix-caching: false` is silently dropped. Resource flags are derived from the observed workload
with their reason, or left as YOUR_VALUE with what to decide; the speculative config is validated against
the keys vLLM accepts before anything is emitted.
"""
from __future__ import annotations

import json
import math
import shlex
from typing import TYPE_CHECKING

from advisor.engine.knowledge import ModelSpec, resolve_gpu
from advisor.errors import ConfigError

if TYPE_CHECKING:
    from advisor.engine.decide import Recommendation

PLACEHOLDER = "YOUR_VALUE"
MAX_MODEL_LEN_HEADROOM = 1.10  # 10% above the observed p99.9 of prompt + output
SMALL_ROUNDING = 256  # max-model-len rounds up to a multiple of 256 up to 8192 tokens ...
LARGE_ROUNDING = 1024  # ... and to a multiple of 1024 above
MAX_NUM_SEQS_HEADROOM = 1.5  # above the Little's-law peak batch, for bursts within the busiest minute
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM's default (vllm-0.33.md section 2)
ACTIVATION_RESERVE_GB = 4.0  # activations + CUDA graphs, a rough allowance before the KV cache
MIN_BATCHED_TOKENS = 2048
MIN_MAX_NUM_SEQS = 16  # room for one-second bursts above the busiest minute's mean


def _round_up(value: float, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def derive_flags(report: dict, model: ModelSpec, gpu_name: str, gpu_assumed: bool, tp: int,
                 peak_batch: int | None, saturated: bool, speculative_tokens: int) -> list[dict]:
    """Resource flags as {flag, value, reason}; value YOUR_VALUE when the logs cannot decide it."""
    flags: list[dict] = []
    total = ((report.get("lengths") or {}).get("total") or {})
    p999 = total.get("p99_9")
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
        flags.append({"flag": "--max-model-len", "value": max_model_len, "reason": reason})
    else:
        flags.append({"flag": "--max-model-len", "value": PLACEHOLDER,
                      "reason": "no token lengths in the profile: set your business limit for prompt + output"})

    if peak_batch is None or saturated:
        why = "the observed peak saturates the assumed server: measure with `advise verify`" if saturated else \
            "no arrival times: set from your business concurrency"
        flags.append({"flag": "--max-num-seqs", "value": PLACEHOLDER, "reason": why})
        max_num_seqs = None
    else:
        max_num_seqs = max(MIN_MAX_NUM_SEQS, _round_up(peak_batch * MAX_NUM_SEQS_HEADROOM, 8))
        flags.append({"flag": "--max-num-seqs", "value": max_num_seqs,
                      "reason": f"Little's-law batch at the busiest minute is {peak_batch}; x1.5 headroom, "
                                "rounded up to a multiple of 8 (at least 16)"})

    input_p99 = ((report.get("lengths") or {}).get("input") or {}).get("p99")
    if input_p99:
        batched = max(MIN_BATCHED_TOKENS, _round_up(input_p99, 1024))
        reason = f"a p99 prompt ({input_p99:.0f} tokens) prefills in one step"
        if max_num_seqs is not None and max_num_seqs * (speculative_tokens + 1) > batched:
            batched = _round_up(max_num_seqs * (speculative_tokens + 1), 1024)
            reason = f"{max_num_seqs} sequences x {speculative_tokens + 1} verified tokens fit in one step"
        flags.append({"flag": "--max-num-batched-tokens", "value": batched,
                      "reason": reason + "; larger values lengthen decode steps that share a prefill"})
    else:
        flags.append({"flag": "--max-num-batched-tokens", "value": PLACEHOLDER,
                      "reason": "no prompt lengths: choose the prefill chunk (2048-8192) against your ITL target"})

    if gpu_assumed or max_num_seqs is None or max_model_len is None:
        flags.append({"flag": "--gpu-memory-utilization", "value": PLACEHOLDER,
                      "reason": "GPU or load not known: keep 0.92 (default) unless other processes share the GPU"})
    else:
        gpu = resolve_gpu(gpu_name)
        weights_gb = model.total_params * model.weight_bytes_per_param / tp / 1e9
        kv_gb = (gpu.memory_gb * DEFAULT_GPU_MEMORY_UTILIZATION - weights_gb - ACTIVATION_RESERVE_GB)
        mean_total = ((report.get("lengths") or {}).get("total") or {}).get("mean") or max_model_len
        kv_per_token = model.kv_bytes_per_token / tp
        need_gb = max_num_seqs * mean_total * kv_per_token / 1e9
        if kv_gb > need_gb:
            flags.append({"flag": "--gpu-memory-utilization", "value": DEFAULT_GPU_MEMORY_UTILIZATION,
                          "reason": f"vLLM default; leaves about {kv_gb:.0f} GB of KV cache per GPU on {gpu.name}, "
                                    f"{need_gb:.1f} GB hold {max_num_seqs} sequences of the mean length"})
        else:
            flags.append({"flag": "--gpu-memory-utilization", "value": PLACEHOLDER,
                          "reason": f"weights {weights_gb:.0f} GB leave {kv_gb:.0f} GB of KV on {gpu.name} but "
                                    f"{need_gb:.0f} GB are needed: raise --tensor-parallel-size or lower --max-num-seqs"})
    return flags


def _json(config: dict) -> str:
    return json.dumps(config, separators=(", ", ": "))


def serve_command(model: str, speculative_config: dict | None, enable_prefix_caching: bool,
                  flags: list[dict], tp: int = 1) -> str:
    """A `vllm serve` command, one argument per line."""
    parts = [f"vllm serve {shlex.quote(model)}"]
    if speculative_config is not None:
        parts.append(f"--speculative-config {shlex.quote(_json(speculative_config))}")
    parts.append("--enable-prefix-caching" if enable_prefix_caching else "--no-enable-prefix-caching")
    if tp > 1:
        parts.append(f"--tensor-parallel-size {tp}")
    parts.extend(f"{flag['flag']} {flag['value']}" for flag in flags)
    return " \\\n  ".join(parts)


def config_yaml(speculative_config: dict | None, enable_prefix_caching: bool, flags: list[dict], tp: int = 1) -> str:
    """A `vllm serve MODEL --config FILE` YAML; reasons as comments.

    The speculative config is written as JSON, which YAML reads as a flow mapping: one line, the same text
    as on the command line.
    """
    lines = []
    if speculative_config is not None:
        lines.append(f"speculative-config: {_json(speculative_config)}")
    # `enable-prefix-caching: false` would be silently dropped by vLLM's YAML loader.
    lines.append(("enable-prefix-caching" if enable_prefix_caching else "no-enable-prefix-caching") + ": true")
    if tp > 1:
        lines.append(f"tensor-parallel-size: {tp}")
    for flag in flags:
        lines.append(f"# {flag['reason']}")
        lines.append(f"{flag['flag'][2:]}: {flag['value']}")
    return "\n".join(lines) + "\n"


def llm_kwargs(model: str, speculative_config: dict | None, enable_prefix_caching: bool, flags: list[dict],
               tp: int = 1) -> dict:
    """Keyword arguments for `vllm.LLM(...)`; undecided values are left out (listed in the checklist)."""
    kwargs: dict = {"model": model, "enable_prefix_caching": enable_prefix_caching}
    if speculative_config is not None:
        kwargs["speculative_config"] = speculative_config
    if tp > 1:
        kwargs["tensor_parallel_size"] = tp
    for flag in flags:
        if flag["value"] != PLACEHOLDER:
            kwargs[flag["flag"][2:].replace("-", "_")] = flag["value"]
    return kwargs


def config_json(model: str, speculative_config: dict | None, enable_prefix_caching: bool, flags: list[dict],
                tp: int = 1) -> dict:
    """A JSON document for config repositories: serve arguments, decided and undecided values apart."""
    args: dict = {"enable-prefix-caching": enable_prefix_caching}
    if speculative_config is not None:
        args["speculative-config"] = speculative_config
    if tp > 1:
        args["tensor-parallel-size"] = tp
    undecided = {}
    for flag in flags:
        if flag["value"] == PLACEHOLDER:
            undecided[flag["flag"][2:]] = flag["reason"]
        else:
            args[flag["flag"][2:]] = flag["value"]
    return {"model": model, "vllm": "0.33", "serve_args": args, "undecided": undecided,
            "reasons": {flag["flag"][2:]: flag["reason"] for flag in flags}}


def validate_speculative_config(config: dict | None) -> None:
    """Raises ConfigError when the config would not pass vLLM's own validation (lint's rules)."""
    if config is None:
        return
    from advisor.lint import check_speculative_config

    errors = [finding for finding in check_speculative_config(config, line=0) if finding.severity == "error"]
    if errors:
        raise ConfigError("emitted speculative config is invalid: " + "; ".join(f.message for f in errors))


def emit_all(recommendation: Recommendation, report: dict, model: ModelSpec, max_peak_batch: int | None) -> tuple[dict, list[dict]]:
    """All emitted forms of one recommendation, and the derived resource flags with their reasons."""
    config = recommendation.speculative_config
    validate_speculative_config(config)
    saturated = any(c.peak.saturated for c in recommendation.candidates if c.method is None)
    peak_batch = max_peak_batch if report.get("arrivals") else None  # an assumed load sizes nothing
    k = int((config or {}).get("num_speculative_tokens") or 0)
    flags = derive_flags(report, model, recommendation.gpu, not recommendation.gpu_given, recommendation.tp,
                         peak_batch, saturated, k)
    name = recommendation.model
    apc = recommendation.enable_prefix_caching
    emitted = {
        "serve_command": serve_command(name, config, apc, flags, recommendation.tp),
        "config_yaml": config_yaml(config, apc, flags, recommendation.tp),
        "llm_kwargs": llm_kwargs(name, config, apc, flags, recommendation.tp),
        "config_json": config_json(name, config, apc, flags, recommendation.tp),
    }
    return emitted, flags
