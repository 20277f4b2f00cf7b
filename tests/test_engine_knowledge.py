"""Knowledge tables: model shapes (config.json values), local config dirs, GPUs, priors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.engine.knowledge import drafts_for, prior_for
from advisor.errors import ConfigError
from advisor.hardware import H200_MEASURED_MODEL, kv_bytes_per_token_per_rank, resolve_gpu, resolve_model
from advisor.vllm_vocab import SPECULATIVE_KEYS


def test_llama_8b_shape_matches_its_published_size() -> None:
    model = resolve_model("meta-llama/Llama-3.1-8B")
    assert model.total_params == pytest.approx(8.03e9, rel=0.01)  # "8B": 8,030,261,248 parameters
    assert kv_bytes_per_token_per_rank(model) == 32 * 2 * 8 * 128 * 2  # 128 KiB per token in bf16
    assert H200_MEASURED_MODEL.vocab_size == 151669


def test_local_config_dir_wins(tmp_path: Path) -> None:
    config = {"model_type": "deepseek_v3", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000, "kv_lora_rank": 64,
              "qk_rope_head_dim": 16, "num_nextn_predict_layers": 1, "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = resolve_model(str(tmp_path))
    assert model.mtp_layers == 1 and model.mla_kv_dim == 80
    assert kv_bytes_per_token_per_rank(model) == 4 * 80 * 2
    assert [d.method for d in drafts_for(model)] == ["mtp"]


def test_unknown_model_and_gpu_name_what_exists() -> None:
    with pytest.raises(ConfigError, match="Qwen/Qwen3-8B"):
        resolve_model("org/unknown-model")
    with pytest.raises(ConfigError, match="H200"):
        resolve_gpu("T4")
    assert resolve_gpu("h200").bandwidth == 4.8e12


def test_prior_tokens_per_step_sums_per_position_rates() -> None:
    prior = prior_for("eagle3", resolve_model("meta-llama/Llama-3.1-8B-Instruct"))
    assert prior.tokens_per_step(3) == pytest.approx(2.60)  # priors.md: AL 2.60 at k=3


def test_speculative_keys_cover_the_documented_ones() -> None:
    documented = {"method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
                  "num_speculative_tokens_per_batch_size", "suffix_decoding_max_tree_depth",
                  "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
                  "suffix_decoding_min_token_prob", "draft_tensor_parallel_size", "max_model_len", "quantization",
                  "revision", "enforce_eager", "draft_sample_method", "rejection_sample_method",
                  "synthetic_acceptance_rates", "synthetic_acceptance_length"}
    assert documented <= SPECULATIVE_KEYS
    assert "disable_by_batch_size" not in SPECULATIVE_KEYS
