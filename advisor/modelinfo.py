"""KV-cache shape of a model read from its local config (transformers AutoConfig, offline only).

The APC replay needs KV bytes per token (`advisor.measure.apc.kv_bytes_per_token`); this module reads the
numbers it takes from a `config.json` on disk. It never downloads: a model that is not at hand raises
TokenizerError (the engine may fall back to its built-in table).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from advisor.errors import TokenizerError
from advisor.measure.apc import kv_bytes_per_token

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1, "auto": 2}


@dataclass(frozen=True, slots=True)
class KvShape:
    """What sizes one token's KV cache. `kv_lora_rank` is set for MLA models (DeepSeek V2/V3 style)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: float
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None

    def bytes_per_token(self, tensor_parallel_size: int = 1) -> float:
        return kv_bytes_per_token(
            self.num_layers, self.num_kv_heads, self.head_dim, self.dtype_bytes, tensor_parallel_size,
            self.kv_lora_rank, self.qk_rope_head_dim,
        )


def kv_shape(model: str | Path, kv_cache_dtype: str | None = None) -> KvShape:
    """KvShape from a local model folder or a model already in the Hugging Face cache (no download).

    `kv_cache_dtype` overrides the model's dtype (vLLM's --kv-cache-dtype, e.g. "fp8").
    """
    from transformers import AutoConfig  # heavy import, only when a config is read

    try:
        config = AutoConfig.from_pretrained(str(model), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise TokenizerError(
            f"{model}: no local model config (config.json) found offline ({exc.__class__.__name__}); "
            "pass a model folder or give the KV bytes per token"
        ) from exc
    text = getattr(config, "text_config", None) or config
    layers = int(text.num_hidden_layers)
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    dtype = kv_cache_dtype or str(getattr(text, "torch_dtype", None) or getattr(config, "torch_dtype", None)
                                  or "bfloat16").replace("torch.", "")
    if dtype not in DTYPE_BYTES:
        raise TokenizerError(f"{model}: unknown KV dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}")
    rank = getattr(text, "kv_lora_rank", None)
    return KvShape(
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        dtype_bytes=DTYPE_BYTES[dtype],
        kv_lora_rank=int(rank) if rank else None,
        qk_rope_head_dim=int(getattr(text, "qk_rope_head_dim", 0) or 0) if rank else None,
    )
