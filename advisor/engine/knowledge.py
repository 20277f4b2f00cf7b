"""What the engine knows without a network: target models, GPUs, drafts, acceptance priors and vLLM's keys.

Every entry names its source, because a recommendation is only as credible as the figures behind it:
model shapes are the values of each model's `config.json` on the Hugging Face hub (copied here because the
hub is unreachable at run time), GPU figures come from the vendors' spec sheets (dense bf16, no sparsity),
acceptance priors from /work/shared/reference/priors.md, and the speculative keys from vLLM's own
`vllm/config/speculative.py`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from advisor.errors import ConfigError

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

    @property
    def kv_bytes_per_token(self) -> float:
        """bf16 KV bytes per token over all attention layers (vllm-0.33.md section 2), before TP sharding."""
        if self.mla_kv_dim is not None:
            return self.num_layers * self.mla_kv_dim * 2.0
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * 2.0


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
    source="/work/shared/reference/gpu-h200-measurements.md (Setup)",
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
# Known drafts and heads per target family, and acceptance priors (priors.md; "needs verification").
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftSpec:
    """A draft or head that exists for a target family.

    `forwards_per_step`: "k" for autoregressive drafting (k sequential forwards), "1" for drafts that
    propose a whole block in one forward (dflash). `draft_params` is what one draft forward reads.
    """

    method: str
    model: str | None  # None: the target's own MTP layers
    families: tuple[str, ...]
    draft_params: float
    parallel: bool
    source: str


DRAFTS: tuple[DraftSpec, ...] = (
    DraftSpec("draft_model", "meta-llama/Llama-3.2-1B-Instruct", ("llama3",), 1.24e9, False,
              "same Llama 3 tokenizer and vocabulary (128,256), config.json of both models"),
    DraftSpec("draft_model", "Qwen/Qwen3-0.6B", ("qwen3",), 0.6e9, False,
              "vLLM docs, Draft Models example (Qwen/Qwen3-0.6B for Qwen3); vocabulary 151,936 on both"),
    DraftSpec("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", ("llama3",), 0.25e9, False,
              "vLLM tests/v1/spec_decode/test_acceptance_length.py uses this head for Llama-3.1-8B"),
    DraftSpec("eagle3", "RedHatAI/Qwen3-8B-speculator.eagle3", ("qwen3",), 0.4e9, False,
              "vLLM tests/v1/spec_decode/test_acceptance_length.py (Qwen3-8B EAGLE3)"),
    DraftSpec("dflash", "z-lab/Qwen3-8B-DFlash-b16", ("qwen3",), 1.0e9, True, "DFlash (z-lab) release for Qwen3-8B"),
    DraftSpec("mtp", None, ("deepseek-v3",), 14e9 / 61, False,
              "DeepSeek-V3 technical report: one native MTP module (one transformer block + shared head)"),
)


@dataclass(frozen=True)
class AcceptancePrior:
    """Per-position acceptance rates (unconditional: share of steps whose j-th draft token is accepted)."""

    method: str
    families: tuple[str, ...]
    per_position: tuple[float, ...]
    source: str

    def tokens_per_step(self, k: int) -> float:
        """E = 1 + sum of the first k rates; beyond the measured positions the last ratio is extrapolated."""
        rates = list(self.per_position)
        while len(rates) < k:
            ratio = rates[-1] / rates[-2] if len(rates) > 1 and rates[-2] > 0 else 0.5
            rates.append(rates[-1] * ratio)
        return 1.0 + sum(rates[:k])


PRIORS: tuple[AcceptancePrior, ...] = (
    AcceptancePrior("eagle3", ("llama3",), (0.73, 0.52, 0.35),
                    "priors.md: vLLM CI test_acceptance_length.py, Llama-3.1-8B EAGLE3 k=3 MT-Bench T=0 (AL 2.60)"),
    AcceptancePrior("eagle3", ("qwen3",), (0.65, 0.40, 0.20),
                    "priors.md: vLLM CI test_acceptance_length.py, Qwen3-8B EAGLE3 k=3 MT-Bench T=0 (AL 2.26)"),
    AcceptancePrior("mtp", ("deepseek-v3",), (0.85,),
                    "priors.md: DeepSeek-V3 technical report, second-token acceptance 85-90% (lower bound)"),
    AcceptancePrior("mtp", ("gemma4",), (0.844, 0.599, 0.385, 0.271),
                    "priors.md: user report, Gemma-4 MTP per-position acceptance at k=4"),
)


def drafts_for(model: ModelSpec) -> list[DraftSpec]:
    """Drafts and heads known to work with this target (same family, so same vocabulary)."""
    found = [d for d in DRAFTS if model.family in d.families]
    if model.mtp_layers > 0 and not any(d.method == "mtp" for d in found):
        per_layer = model.matmul_params / max(model.num_layers, 1)
        found.append(DraftSpec("mtp", None, (model.family,), per_layer, False, f"{model.source}: native MTP layers"))
    return found


def prior_for(method: str, model: ModelSpec) -> AcceptancePrior | None:
    for prior in PRIORS:
        if prior.method == method and model.family in prior.families:
            return prior
    return None
