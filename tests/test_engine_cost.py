"""Cost model against real GPU measurements (/work/shared/reference/gpu-h200-measurements.md).

The table: vLLM 0.26.0 on one H200, Llama-3.1-8B shape, input 512, output 256, median TPOT per concurrency
without speculation and with k=4 drafts at acceptance length 3.0.
"""
from __future__ import annotations

import pytest

from advisor.engine.cost import CostModel, StepLoad
from advisor.hardware import H200_MEASURED_MODEL, resolve_gpu, resolve_model
from advisor.engine.whatif import whatif
from advisor.errors import ConfigError

# concurrency -> (median TPOT ms without speculation, with k=4 at AL 3.0)
MEASURED_TPOT = {1: (6.66, 2.40), 8: (6.98, 3.16), 32: (8.43, 5.12), 128: (15.90, 15.19)}


@pytest.mark.parametrize("concurrency", sorted(MEASURED_TPOT))
def test_whatif_reproduces_h200_table_within_15_percent(concurrency: int) -> None:
    """The acceptance command: advise whatif --model meta-llama/Llama-3.1-8B --gpu H200 --k 4 --acceptance-length 3.0."""
    rows = whatif("meta-llama/Llama-3.1-8B", "H200", 4, 3.0, [concurrency], 512, 256)["rows"]
    baseline, speculative = MEASURED_TPOT[concurrency]
    assert rows[0]["baseline_tpot_ms"] == pytest.approx(baseline, rel=0.15)
    assert rows[0]["speculative_tpot_ms"] == pytest.approx(speculative, rel=0.15)


@pytest.mark.parametrize("concurrency", sorted(MEASURED_TPOT))
def test_calibrated_model_fits_within_5_percent(concurrency: int) -> None:
    """With the measured model's own vocabulary (151,669) the fit is tighter than the acceptance bound."""
    cost = CostModel(H200_MEASURED_MODEL, resolve_gpu("H200"))
    baseline, speculative = MEASURED_TPOT[concurrency]
    assert cost.closed_loop(concurrency, 512, 256).tpot_ms == pytest.approx(baseline, rel=0.05)
    spec = cost.closed_loop(concurrency, 512, 256, tokens_per_seq=5, tokens_per_step=3.0, speculative=True)
    assert spec.tpot_ms == pytest.approx(speculative, rel=0.05)


def test_speculation_stops_paying_at_high_concurrency() -> None:
    rows = whatif("meta-llama/Llama-3.1-8B", "H200", 4, 3.0, [1, 8, 32, 128])["rows"]
    speedups = [row["speedup"] for row in rows]
    assert speedups == sorted(speedups, reverse=True)
    assert speedups[0] > 2.0 and speedups[-1] < 1.15


def test_step_cost_of_extra_tokens_grows_with_batch() -> None:
    """Measured: +12% step cost at concurrency 1, +42% at 32 for 4 extra verified tokens per sequence."""
    cost = CostModel(H200_MEASURED_MODEL, resolve_gpu("H200"))
    ratios = []
    for batch in (1, 32):
        base = cost.step_ms(StepLoad(batch, 1.0, 640))
        spec = cost.step_ms(StepLoad(batch, 5.0, 640, speculative=True))
        ratios.append(spec / base)
    assert ratios[0] == pytest.approx(1.12, abs=0.06)
    assert ratios[1] == pytest.approx(1.42, abs=0.12)


def test_other_gpus_scale_by_spec_sheet() -> None:
    model = resolve_model("meta-llama/Llama-3.1-8B")
    h200, h100, a10g = (CostModel(model, resolve_gpu(name)) for name in ("H200", "H100", "A10G"))
    load = StepLoad(1, 1.0, 640)
    assert h100.step_ms(load) > h200.step_ms(load)
    # bandwidth-bound at batch 1: the weight-read part scales with 1 / bandwidth
    assert (a10g.step_ms(load) - 2.83) / (h200.step_ms(load) - 2.83) == pytest.approx(4800 / 600, rel=0.1)


def test_tensor_parallel_divides_weight_reads() -> None:
    model = resolve_model("meta-llama/Llama-3.1-70B-Instruct")
    gpu = resolve_gpu("H100")
    assert CostModel(model, gpu, tp=4).weight_bytes(1) == pytest.approx(CostModel(model, gpu).weight_bytes(1) / 4)


def test_moe_reads_more_experts_as_batch_grows() -> None:
    cost = CostModel(resolve_model("deepseek-ai/DeepSeek-V3"), resolve_gpu("H200"), tp=8)
    assert cost.weight_bytes(1) < cost.weight_bytes(64) < cost.weight_bytes(100000) * 1.0001


def test_apc_hits_shorten_prefill_only() -> None:
    cost = CostModel(H200_MEASURED_MODEL, resolve_gpu("H200"))
    assert cost.prefill_ms(4000, cached_tokens=3000) < cost.prefill_ms(4000)


def test_open_loop_obeys_littles_law() -> None:
    cost = CostModel(H200_MEASURED_MODEL, resolve_gpu("H200"))
    point = cost.open_loop(10.0, 512, 256)
    assert point.batch == pytest.approx(10.0 * (point.ttft_ms + 255 * point.tpot_ms) / 1e3, rel=1e-3)
    assert cost.open_loop(1000.0, 512, 256).saturated


def test_whatif_rejects_impossible_acceptance() -> None:
    with pytest.raises(ConfigError):
        whatif("meta-llama/Llama-3.1-8B", "H200", 2, 3.5, [1])
