"""KV bytes per token and weight bytes per tensor-parallel rank: one function each, and every consumer (the
profile's APC capacity, the cost model, the sizing) agrees with it, MLA at tp > 1 included.

vLLM's layout (vLLM 0.32 source in /work/vllm-venv): `ModelConfig.get_num_kv_heads` (vllm/config/model.py)
returns max(1, kv_heads // tp), and 1 for MLA; `MLAAttention.get_kv_cache_spec`
(vllm/model_executor/layers/attention/mla_attention.py) caches one latent of kv_lora_rank + qk_rope_head_dim
per token with num_kv_heads=1 and max_tp_shards=1: every rank holds the full latent.
"""
from __future__ import annotations

import pytest

from advisor.engine.cost import CostModel
from advisor.engine.sizing import derive_flags
from advisor.errors import ConfigError
from advisor.hardware import kv_bytes_per_token_per_rank, resolve_gpu, resolve_model, weight_bytes_per_rank
from engine_reports import CODE_EDITING, report

LLAMA = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
DEEPSEEK = resolve_model("deepseek-ai/DeepSeek-V3")
H200 = resolve_gpu("H200")


def test_kv_bytes_per_token_per_rank_standard_attention() -> None:
    # Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128, bf16: 128 KiB per token; TP 4 -> 2 heads per rank.
    assert kv_bytes_per_token_per_rank(LLAMA) == 131072
    assert kv_bytes_per_token_per_rank(LLAMA, 4) == 32768
    assert kv_bytes_per_token_per_rank(LLAMA, 16) == 16384  # heads replicated: at least one per rank
    with pytest.raises(ConfigError):
        kv_bytes_per_token_per_rank(LLAMA, 0)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_mla_latent_is_not_sharded_by_tp(tp: int) -> None:
    # DeepSeek-V3: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, no factor 2 for K and V.
    assert kv_bytes_per_token_per_rank(DEEPSEEK, tp) == 61 * 576 * 2 == 70272


def test_weight_bytes_per_rank() -> None:
    assert weight_bytes_per_rank(DEEPSEEK, 8) == pytest.approx(671e9 * 1.0 / 8)  # FP8 weights
    assert weight_bytes_per_rank(LLAMA, 2) == pytest.approx(LLAMA.total_params * 2 / 2)
    assert weight_bytes_per_rank(LLAMA, 1, params=1e9) == 2e9


@pytest.mark.parametrize("model,tp", [(LLAMA, 1), (LLAMA, 4), (DEEPSEEK, 8)], ids=["llama-tp1", "llama-tp4", "mla-tp8"])
def test_cost_model_and_sizing_read_the_same_kv_bytes(model, tp: int) -> None:
    per_rank = kv_bytes_per_token_per_rank(model, tp)
    assert CostModel(model, H200, tp).kv_bytes_per_token(1000.0) == per_rank  # no sliding window here
    workload = report(**CODE_EDITING)
    flags = {f.flag: f for f in derive_flags(workload, model, H200, False, tp, 20, False, 0)}
    memory = flags["--gpu-memory-utilization"].reason
    need_gb = 32 * workload.lengths.total.mean * per_rank / 1e9  # --max-num-seqs 32 for a peak batch of 20
    assert flags["--max-num-seqs"].value == 32
    assert f"{need_gb:.1f} GB hold 32 sequences" in memory or f"{need_gb:.0f} GB are needed" in memory


def test_profile_apc_capacity_uses_the_per_rank_figures(tmp_path) -> None:
    from advisor.measure.apc import capacity_blocks, kv_budget_bytes
    from advisor.profile import ProfileOptions, build_profile

    log = tmp_path / "one.jsonl"
    log.write_text('{"prompt": "hello world, this is a prompt long enough to fill a block or two", "completion": "ok"}\n')
    options = ProfileOptions(paths=(str(log),), model="deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, replay=False,
                             recommend=False, tokenizer=None)
    apc = build_profile(options).report.apc
    budget = kv_budget_bytes(gpu_memory_bytes=141e9, weight_bytes_per_gpu=weight_bytes_per_rank(DEEPSEEK, 8))
    assert apc.kv_bytes_per_token == 70272
    assert apc.at_capacity.capacity_blocks == capacity_blocks(budget, 70272, 16)
