"""Target models and GPUs: the shape and memory facts behind KV capacity, weights per rank and step cost.

Every entry names its source: model shapes are the values of each model's `config.json` on the Hugging Face
hub (copied here because the hub is unreachable at run time), GPU figures come from the vendors' spec sheets
(dense bf16, no sparsity). This module sits at the bottom of the package (it imports only `errors`) because
the profile's APC replay, lint's vocabulary check, the engine's cost model and its sizing all read it:
`kv_bytes_per_token_per_rank` and `weight_bytes_per_rank` are the one place each figure is computed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from advisor.errors import ConfigError

KV_CACHE_DTYPE_BYTES = 2.0  # bf16 KV cache (vLLM's --kv-cache-dtype auto with a bf16 model)

# --------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """The shape facts the cost model needs, with the source they were read from.

    `active_params` counts the weights read and multiplied per token (for MoE: shared + routed experts
    actually used); `params` is the total (memory footprint). `mla_kv_dim` is set for MLA attention
    (kv_lora_rank + rope dim), which changes the KV bytes per token.
    """

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    source: str
    params: float | None = None  # total parameters when not a dense Llama-like shape (MoE)
    active_params: float | None = None
    weight_bytes_per_param: float = 2.0  # bf16
    mla_kv_dim: int | None = None
    mtp_layers: int = 0  # native MTP layers (num_nextn_predict_layers ...), the `mtp` method needs > 0
    sliding_window_share: float = 0.0  # share of attention layers with a sliding window (gpt-oss: half)
    sliding_window: int | None = None
    family: str = ""

    @property
    def dense_layer_params(self) -> float:
        """Attention + gated MLP parameters of one dense layer (q, k, v, o; gate, up, down)."""
        attention = self.hidden_size * self.num_heads * self.head_dim * 2
        attention += self.hidden_size * self.num_kv_heads * self.head_dim * 2
        return attention + 3 * self.hidden_size * self.intermediate_size

    @property
    def lm_head_params(self) -> float:
        return float(self.hidden_size * self.vocab_size)

    @property
    def matmul_params(self) -> float:
        """Weights read from memory and multiplied for each decoded token (the embedding is a gather)."""
        if self.active_params is not None:
            return self.active_params
        return self.num_layers * self.dense_layer_params + self.lm_head_params

    @property
    def total_params(self) -> float:
        if self.params is not None:
            return self.params
        embedding = 0.0 if self.tie_word_embeddings else self.lm_head_params
        return self.num_layers * self.dense_layer_params + self.lm_head_params + embedding


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("meta-llama/Llama-3.1-8B", 4096, 32, 32, 8, 128, 14336, 128256, False, 131072,
              _hf("meta-llama/Llama-3.1-8B"), family="llama3"),
    ModelSpec("meta-llama/Llama-3.1-8B-Instruct", 4096, 32, 32, 8, 128, 14336, 128256, False, 131072,
              _hf("meta-llama/Llama-3.1-8B-Instruct"), family="llama3"),
    ModelSpec("meta-llama/Llama-3.1-70B-Instruct", 8192, 80, 64, 8, 128, 28672, 128256, False, 131072,
              _hf("meta-llama/Llama-3.1-70B-Instruct"), family="llama3"),
    ModelSpec("meta-llama/Llama-3.3-70B-Instruct", 8192, 80, 64, 8, 128, 28672, 128256, False, 131072,
              _hf("meta-llama/Llama-3.3-70B-Instruct"), family="llama3"),
    ModelSpec("meta-llama/Llama-3.2-1B-Instruct", 2048, 16, 32, 8, 64, 8192, 128256, True, 131072,
              _hf("meta-llama/Llama-3.2-1B-Instruct"), family="llama3"),
    ModelSpec("meta-llama/Llama-3.2-3B-Instruct", 3072, 28, 24, 8, 128, 8192, 128256, True, 131072,
              _hf("meta-llama/Llama-3.2-3B-Instruct"), family="llama3"),
    ModelSpec("Qwen/Qwen2.5-7B-Instruct", 3584, 28, 28, 4, 128, 18944, 152064, False, 32768,
              _hf("Qwen/Qwen2.5-7B-Instruct"), family="qwen2.5"),
    ModelSpec("Qwen/Qwen2.5-0.5B-Instruct", 896, 24, 14, 2, 64, 4864, 151936, True, 32768,
              _hf("Qwen/Qwen2.5-0.5B-Instruct"), family="qwen2.5"),
    ModelSpec("Qwen/Qwen2.5-1.5B-Instruct", 1536, 28, 12, 2, 128, 8960, 151936, True, 32768,
              _hf("Qwen/Qwen2.5-1.5B-Instruct"), family="qwen2.5"),
    ModelSpec("Qwen/Qwen2.5-14B-Instruct", 5120, 48, 40, 8, 128, 13824, 152064, False, 32768,
              _hf("Qwen/Qwen2.5-14B-Instruct"), family="qwen2.5"),
    ModelSpec("Qwen/Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, False, 40960,
              _hf("Qwen/Qwen3-8B"), family="qwen3"),
    ModelSpec("Qwen/Qwen3-32B", 5120, 64, 64, 8, 128, 25600, 151936, False, 40960,
              _hf("Qwen/Qwen3-32B"), family="qwen3"),
    ModelSpec("Qwen/Qwen3-0.6B", 1024, 28, 16, 8, 128, 3072, 151936, True, 40960,
              _hf("Qwen/Qwen3-0.6B"), family="qwen3"),
    ModelSpec("mistralai/Mistral-7B-Instruct-v0.3", 4096, 32, 32, 8, 128, 14336, 32768, False, 32768,
              _hf("mistralai/Mistral-7B-Instruct-v0.3"), family="mistral"),
    # DeepSeek-V3: 671B total, 37B activated per token (model card); MLA with kv_lora_rank 512 +
    # qk_rope_head_dim 64; FP8 weights; one native MTP layer (num_nextn_predict_layers: 1).
    ModelSpec("deepseek-ai/DeepSeek-V3", 7168, 61, 128, 128, 128, 18432, 129280, False, 163840,
              _hf("deepseek-ai/DeepSeek-V3") + " and the model card (671B total / 37B active)",
              params=671e9, active_params=37e9, weight_bytes_per_param=1.0, mla_kv_dim=576, mtp_layers=1,
              family="deepseek-v3"),
    # gpt-oss: MoE with MXFP4 experts (about 4.25 bits per weight); alternating sliding-window (128) layers.
    ModelSpec("openai/gpt-oss-20b", 2880, 24, 64, 8, 64, 2880, 201088, False, 131072,
              _hf("openai/gpt-oss-20b") + " and the model card (21B total / 3.6B active)",
              params=21e9, active_params=3.6e9, weight_bytes_per_param=0.53, sliding_window_share=0.5,
              sliding_window=128, family="gpt-oss"),
    ModelSpec("openai/gpt-oss-120b", 2880, 36, 64, 8, 64, 2880, 201088, False, 131072,
              _hf("openai/gpt-oss-120b") + " and the model card (117B total / 5.1B active)",
              params=117e9, active_params=5.1e9, weight_bytes_per_param=0.53, sliding_window_share=0.5,
              sliding_window=128, family="gpt-oss"),
)
MODELS: dict[str, ModelSpec] = {spec.name.lower(): spec for spec in _MODELS}

# The model the H200 measurements ran: Llama-3.1-8B's shape with a vocabulary of 151,669
# (gpu-h200-measurements.md, "Setup").
H200_MEASURED_MODEL = replace(
    MODELS["meta-llama/llama-3.1-8b"],
    name="llama-3.1-8b-shape-vocab-151669",
    vocab_size=151669,
    source="H200 measurements, vLLM 0.26.0 (advisor/data/measurements/README.md)",
)

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _from_config_dict(name: str, config: dict, source: str) -> ModelSpec:
    """Reads the fields vLLM itself reads from a Hugging Face `config.json` (text config of VL models)."""
    text = config.get("text_config") or config
    heads = int(text["num_attention_heads"])
    hidden = int(text["hidden_size"])
    mtp = int(text.get("num_nextn_predict_layers") or text.get("mtp_num_hidden_layers") or 0)
    kv_lora = text.get("kv_lora_rank")
    rope_dim = text.get("qk_rope_head_dim")
    return ModelSpec(
        name=name,
        hidden_size=hidden,
        num_layers=int(text["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or hidden // heads),
        intermediate_size=int(text.get("intermediate_size") or 4 * hidden),
        vocab_size=int(text.get("vocab_size") or config.get("vocab_size")),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        max_position_embeddings=int(text.get("max_position_embeddings") or 0),
        source=source,
        mla_kv_dim=int(kv_lora) + int(rope_dim or 0) if kv_lora else None,
        mtp_layers=mtp,
        family=str(config.get("model_type", "")),
    )


def resolve_model(name: str) -> ModelSpec:
    """A target or draft model by hub id or local directory; local `config.json` wins over the table.

    Raises ConfigError naming what exists when the model is neither a local directory nor in the table
    (the hub cannot be reached, so there is no third way).
    """
    path = Path(name).expanduser()
    config_file = path / "config.json" if path.is_dir() else None
    if config_file is not None and config_file.is_file():
        try:
            config = json.loads(config_file.read_text())
            return _from_config_dict(name, config, str(config_file))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"{config_file}: cannot read the model shape ({error})") from error
    spec = MODELS.get(name.lower())
    if spec is None:
        known = ", ".join(sorted(s.name for s in _MODELS))
        raise ConfigError(
            f"model {name!r} is neither a local directory with config.json nor in the built-in table; "
            f"pass a local model directory, or one of: {known}"
        )
    return spec


def find_model(name: str | None) -> ModelSpec | None:
    """Like resolve_model but None when unknown (for lint checks that only run with configs at hand)."""
    if not name:
        return None
    try:
        return resolve_model(name)
    except ConfigError:
        return None


# --------------------------------------------------------------------------------------------------------
# GPUs: memory (GB), memory bandwidth (bytes/s) and dense bf16 tensor FLOP/s from the vendors' spec sheets.
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    bandwidth: float  # bytes/s
    bf16_flops: float  # dense FLOP/s
    source: str
    aliases: tuple[str, ...] = field(default=())


_NV = "https://www.nvidia.com/en-us/data-center/"
_GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("A10G", 24, 600e9, 70e12, "NVIDIA A10G (AWS G5) spec: 24 GB GDDR6, 600 GB/s, ~70 TFLOPS bf16 dense"),
    GpuSpec("L4", 24, 300e9, 121e12, _NV + "l4/ (L4 datasheet: 300 GB/s, 242 TFLOPS bf16 with sparsity)"),
    GpuSpec("L40S", 48, 864e9, 362e12, _NV + "l40s/ (L40S datasheet: 864 GB/s, 733 TFLOPS bf16 with sparsity)"),
    GpuSpec("A100-40GB", 40, 1555e9, 312e12, _NV + "a100/ (A100 40GB SXM: 1,555 GB/s, 312 TFLOPS bf16)",
            ("A100-40G", "A100_40GB")),
    GpuSpec("A100-80GB", 80, 2039e9, 312e12, _NV + "a100/ (A100 80GB SXM: 2,039 GB/s, 312 TFLOPS bf16)",
            ("A100", "A100-80G", "A100_80GB")),
    GpuSpec("H100", 80, 3350e9, 989e12, _NV + "h100/ (H100 SXM: 3.35 TB/s, 1,979 TFLOPS bf16 with sparsity)",
            ("H100-SXM", "H100-80GB")),
    GpuSpec("H200", 141, 4800e9, 989e12, _NV + "h200/ (H200 SXM: 141 GB, 4.8 TB/s, 1,979 TFLOPS bf16 with sparsity)",
            ("H200-SXM",)),
    GpuSpec("B200", 180, 8000e9, 2250e12, _NV + "dgx-b200/ (HGX B200: 180 GB, 8 TB/s, 4.5 PFLOPS bf16 with sparsity)"),
    GpuSpec("MI300X", 192, 5300e9, 1307e12,
            "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (5.3 TB/s, 1,307 TFLOPS bf16)"),
    # The CPU-only test machine (2 cores, 24 GiB): no vendor sheet applies; rough figures so predictions have
    # the right order of magnitude. Never trust absolute numbers on this profile.
    GpuSpec("CPU", 24, 20e9, 0.2e12, "rough estimate for the 2-core CPU test machine (vllm-cpu.md), not a spec sheet"),
)
GPUS: dict[str, GpuSpec] = {}
for _gpu in _GPUS:
    for _key in (_gpu.name, *_gpu.aliases):
        GPUS[_key.upper()] = _gpu

DEFAULT_GPU = "H100"


def resolve_gpu(name: str) -> GpuSpec:
    """A GPU by name (case-insensitive); ConfigError listing the known names otherwise."""
    gpu = GPUS.get(name.strip().upper())
    if gpu is None:
        raise ConfigError(f"unknown GPU {name!r}; known: {', '.join(g.name for g in _GPUS)}")
    return gpu


# --------------------------------------------------------------------------------------------------------
# Memory per tensor-parallel rank
# --------------------------------------------------------------------------------------------------------


def kv_bytes_per_token_per_rank(model: ModelSpec, tp: int = 1, dtype_bytes: float = KV_CACHE_DTYPE_BYTES) -> float:
    """KV-cache bytes one token takes on one GPU (one tensor-parallel rank), over all attention layers.

    Standard attention: layers x 2 (K and V) x max(1, kv_heads // tp) x head_dim x dtype bytes; vLLM
    replicates KV heads when tp exceeds them (`ModelConfig.get_num_kv_heads`, vllm/config/model.py).
    MLA (`mla_kv_dim` = kv_lora_rank + qk_rope_head_dim): layers x mla_kv_dim x dtype bytes, whatever tp is:
    vLLM caches one latent vector per token shared by K and V, and every rank holds all of it
    (`MLAAttention.get_kv_cache_spec` in vllm/model_executor/layers/attention/mla_attention.py:
    num_kv_heads=1, max_tp_shards=1, head_size = kv_lora_rank + qk_rope_head_dim; get_num_kv_heads returns
    1 for MLA).
    """
    if tp < 1:
        raise ConfigError(f"tensor-parallel size must be >= 1, got {tp}")
    if model.mla_kv_dim is not None:
        return float(model.num_layers * model.mla_kv_dim * dtype_bytes)
    heads_per_rank = max(1, model.num_kv_heads // tp)
    return float(model.num_layers * 2 * heads_per_rank * model.head_dim * dtype_bytes)


def weight_bytes_per_rank(model: ModelSpec, tp: int = 1, params: float | None = None) -> float:
    """Weight bytes on (or streamed by) one GPU: `params` (default all of them) x bytes per weight / tp.

    Tensor parallelism shards every linear layer; the small replicated parts (norms) are ignored.
    """
    if tp < 1:
        raise ConfigError(f"tensor-parallel size must be >= 1, got {tp}")
    return (model.total_params if params is None else params) * model.weight_bytes_per_param / tp
