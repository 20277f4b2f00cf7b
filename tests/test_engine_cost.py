"""Cost model against real GPU measurements (advisor/data/measurements/h200_vllm0.26; vLLM 0.26.0 on one H200):
194 closed-loop runs of four dense shapes (1.5B, 3B, 8B, 14B; k = 0, 1, 2, 4, 8 at synthetic acceptance; inputs
128 / 512 / 2048; concurrency 1 to 128; runs w1, reference, w2, w3 and w4, repeats kept as rows) and six
open-loop runs (Poisson arrivals, 8B shape, k = 0 and 4, 10 to 45 requests/s), which the calibration was fitted
to (scripts/fit_cost.py) except the 1.5B shape's (calibration_data.EXCLUDED_SHAPES).
"""
from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import pytest

from advisor.engine.calibration_data import (
    DATA_DIR,
    DEFAULT_POINTS,
    EXCLUDED_SHAPES,
    cells,
    load_open_loop,
    load_points,
    measured_shape,
)
from advisor.engine.cost import H200_CALIBRATION, SMALLEST_CALIBRATED_WEIGHT_BYTES, CostModel, StepLoad
from advisor.hardware import H200_MEASURED_MODEL, resolve_gpu, resolve_model, weight_bytes_per_rank
from advisor.engine.whatif import whatif
from advisor.errors import ConfigError

POINTS = load_points()
CELLS = cells(POINTS)
CALIBRATED = [cell for cell in CELLS if cell.calibrated]
OPEN_LOOP = load_open_loop()
BOUND = 0.15  # the agreement at every measured point; measured worst 14.9% (docs/engine.md)
EXCLUDED_WORST = 0.34  # the 1.5B shape's cells, not fitted: measured worst 32.4%


def test_measurements_cover_the_design() -> None:
    """Four shapes, every k, three prompt lengths, concurrency 1 to 128, with provenance on every row; the
    calibrated shapes (three besides none excluded: 3B, 8B, 14B) each at k = 0, 4 and 8, the 3B at every k."""
    assert {p.shape for p in POINTS} == {"qwen2.5-1.5b-shape-vocab-151669", "llama-3.2-3b-shape-vocab-151669",
                                         "llama-3.1-8b-shape-vocab-151669", "qwen2.5-14b-shape-vocab-151669"}
    calibrated_shapes = {cell.first.shape for cell in CALIBRATED}
    assert len(calibrated_shapes) == 3
    for shape in calibrated_shapes:
        assert {c.first.k for c in CALIBRATED if c.first.shape == shape} >= {0, 4, 8}
        assert {c.first.concurrency for c in CALIBRATED if c.first.shape == shape} >= {1, 8, 32, 128}
    assert {c.first.k for c in CALIBRATED if c.first.shape.startswith("llama-3.2-3b")} == {0, 1, 2, 4, 8}
    assert {c.first.input_len for c in CALIBRATED} == {128, 512, 2048}
    assert all(p.run and p.gpu == "H200" for p in POINTS)
    with DEFAULT_POINTS.open() as handle:
        assert len(list(csv.DictReader(handle))) == len(POINTS) == 194
    assert len(CALIBRATED) == 89 and len(OPEN_LOOP) == 6


@pytest.mark.parametrize("cell", CALIBRATED, ids=lambda c: f"{c.first.shape[:12]}-k{c.first.k}-in{c.first.input_len}-"
                                                           f"c{c.first.concurrency}-n{c.first.num_prompts}-{c.first.run[:2]}")
def test_model_agrees_with_every_calibrated_cell(cell) -> None:
    """The issue's bound at every cell of the calibrated shapes (the median of a cell's repeats)."""
    assert cell.predict() == pytest.approx(cell.median_tpot_ms, rel=BOUND)


def test_every_run_of_a_calibrated_cell_is_near_the_model() -> None:
    """Run by run, repeats on their own: 115 of the 120 runs within 15%, every one within 18.2% (the 3B k=4 cell
    at concurrency 8 took 1.95, 2.36 and 2.45 ms on three servers)."""
    residuals = [abs(cell.predict() / run.median_tpot_ms - 1) for cell in CALIBRATED for run in cell.runs]
    assert len(residuals) == 120 and max(residuals) < 0.182
    assert sum(residual > BOUND for residual in residuals) == 5


@pytest.mark.parametrize("point", OPEN_LOOP, ids=lambda p: f"k{p.k}-rate{p.request_rate:g}")
def test_the_engines_steady_state_agrees_with_every_open_loop_run(point) -> None:
    """Poisson arrivals at 10, 25 and 45 requests/s against the 8B shape, without speculation and with k=4:
    the engine's own `open_loop` solve (the batch that Little's law and the step time agree on; at 45/s without
    speculation the server saturates its KV cache) against the run's median TPOT."""
    solved = point.solve()
    assert solved.tpot_ms == pytest.approx(point.median_tpot_ms, rel=BOUND)
    assert solved.saturated == (point.k == 0 and point.request_rate == 45)


def test_open_loop_servers_hold_the_logged_kv_cache() -> None:
    """max_batch comes from the server's KV bytes as vLLM sizes them: 81,920 tokens logged for 10 GiB."""
    lines = (DATA_DIR / "raw_w4" / "w4a" / "server_key_lines.txt").read_text()
    logged = int(re.search(r"l8k0\.server\.log:.*GPU KV cache size: ([\d,]+) tokens", lines).group(1).replace(",", ""))
    assert logged == 81920
    baseline = next(p for p in OPEN_LOOP if p.k == 0)
    assert baseline.max_batch == logged // 640  # 512 + 128 tokens: 40 blocks of 16


def test_the_excluded_shape_contradicts_any_model_within_the_bound() -> None:
    """The 1.5B shape stays in the table but out of the fit: the same cell (k=4, input 512, concurrency 8) took
    1.31 ms in w1 and 2.21 ms in w3, further apart than any one figure can be within 15% of both
    (2.21 / 1.31 > 1.15 / 0.85); the calibration is within 34% of its cells."""
    def cell(run: str) -> float:
        return next(c.median_tpot_ms for c in CELLS if c.first.shape.startswith("qwen2.5-1.5b") and c.first.k == 4
                    and c.first.input_len == 512 and c.first.concurrency == 8 and c.first.run == run)

    assert cell("w3-2026-12-03") / cell("w1-2026-12-02") > (1 + BOUND) / (1 - BOUND)
    assert set(EXCLUDED_SHAPES) == {"qwen2.5-1.5b-shape-vocab-151669"}
    excluded = [c for c in CELLS if not c.calibrated]
    assert max(abs(c.predict() / c.median_tpot_ms - 1) for c in excluded) < EXCLUDED_WORST


def test_repeats_of_one_cell_bound_any_model() -> None:
    """Cells run two to four times in one session (the same server or a twin, minutes apart): the 1.5B shape's
    at concurrency 32 differ by up to 22%, the 3B shape's by up to 26%, the 8B and 14B shapes' by at most 6%.
    A cell's measured figure is therefore the median of its repeats."""
    spread = {c.label(): c.spread for c in CELLS if len(c.runs) > 1}
    assert max(s for label, s in spread.items() if "1.5b" in label and " c=32 " in label) > 0.2
    assert max(s for label, s in spread.items() if "3.2-3b" in label) > 0.2
    assert max(s for label, s in spread.items() if "3.2-3b" not in label and "1.5b" not in label) < 0.065


def test_the_1_5b_k8_and_k4_cells_contradict_any_monotone_step_model() -> None:
    """Measured step time (TPOT x acceptance length) at concurrency 128: k=8 (1,152 verified tokens per step)
    costs less than k=4 (640) in w1 (256 requests) and again in w2's long runs (1,024 requests), though both
    run without CUDA graphs; and the same k=8 cell run twice the same way (256 requests) differs by 26%."""
    def point(k: int, concurrency: int, prompts: int, run: str):
        return next(p for p in POINTS if p.shape.startswith("qwen2.5-1.5b") and p.k == k and p.input_len == 512
                    and p.concurrency == concurrency and p.num_prompts == prompts and p.run == run)

    def step(k: int, concurrency: int, prompts: int, run: str) -> float:
        measured = point(k, concurrency, prompts, run)
        return measured.median_tpot_ms * measured.acceptance_length

    assert step(8, 128, 256, "w1-2026-12-02") < step(4, 128, 256, "w1-2026-12-02")
    assert step(8, 128, 1024, "w2-2026-12-03") < step(4, 128, 1024, "w2-2026-12-03")
    repeat = point(8, 128, 256, "w2-2026-12-03").median_tpot_ms / point(8, 128, 256, "w1-2026-12-02").median_tpot_ms
    assert repeat > 1.2


def test_the_calibration_is_the_fit_of_the_measurements() -> None:
    """scripts/fit_cost.py over the calibrated cells and the open-loop runs gives H200_CALIBRATION (to the
    four significant digits it prints): the committed constants are the committed data's fit."""
    spec = importlib.util.spec_from_file_location("fit_cost", Path(__file__).parent.parent / "scripts" / "fit_cost.py")
    fit_cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_cost)
    fitted = fit_cost.fit([*CALIBRATED, *OPEN_LOOP])
    for field, _ in fit_cost.FIELDS.values():
        assert getattr(fitted, field) == pytest.approx(getattr(H200_CALIBRATION, field), rel=1e-3), field


def test_smallest_calibrated_shape_sets_the_confidence_threshold() -> None:
    smallest = min(weight_bytes_per_rank(measured_shape(c.first.shape)) for c in CALIBRATED)
    assert SMALLEST_CALIBRATED_WEIGHT_BYTES == pytest.approx(smallest, rel=1e-3)
    assert all(weight_bytes_per_rank(measured_shape(shape)) < smallest for shape in EXCLUDED_SHAPES)


def test_a_run_is_priced_by_its_own_schedule() -> None:
    """The bench replay (advisor.engine.calibration_data): a run of 2C requests of one length decodes in
    waves, so at concurrency 128 its median request sees fewer prefills than the steady state's C - 1."""
    point = next(p for p in POINTS if p.shape.startswith("llama-3.1-8b") and p.k == 0 and p.concurrency == 128)
    names, rows = point.request_features()
    assert rows.shape == (point.num_prompts, len(names))
    steady = CostModel(resolve_model(str(DEFAULT_POINTS.parent / "shapes" / point.shape)), resolve_gpu("H200")).closed_loop(
        point.concurrency, point.input_len, point.output_len)
    assert point.predict() < steady.tpot_ms


def test_whatif_predicts_the_8b_reference_table() -> None:
    """advise whatif --model meta-llama/Llama-3.1-8B --gpu H200 --k 4 --acceptance-length 3.0 (input 512,
    output 256) against the 8 reference cells (median TPOT, ms). whatif prices the steady state; the cells are
    runs of 4C requests decoding in waves, whose median request sees about half the steady state's prefills.
    Up to concurrency 32 that is within the bounds; at 128 the steady state's baseline lies above the cell
    (every other step carries a 512-token prompt chunk and runs without CUDA graphs)."""
    measured = {1: (6.66, 2.40), 8: (6.98, 3.16), 32: (8.43, 5.12), 128: (15.90, 15.19)}
    rows = whatif("meta-llama/Llama-3.1-8B", "H200", 4, 3.0, sorted(measured), 512, 256)["rows"]
    for row in rows:
        baseline, speculative = measured[row["concurrency"]]
        assert row["speculative_tpot_ms"] == pytest.approx(speculative, rel=0.20)
        if row["concurrency"] < 128:
            assert row["baseline_tpot_ms"] == pytest.approx(baseline, rel=0.15)
        else:
            assert baseline < row["baseline_tpot_ms"] < 1.25 * baseline


def test_whatif_takes_a_local_config(tmp_path) -> None:
    shape = DEFAULT_POINTS.parent / "shapes" / "qwen2.5-14b-shape-vocab-151669"
    rows = whatif(str(shape), "H200", 4, 3.0, [1], 512, 128)["rows"]
    measured = next(p for p in POINTS if p.shape.startswith("qwen2.5-14b") and p.k == 0 and p.input_len == 512
                    and p.concurrency == 1)
    assert rows[0]["baseline_tpot_ms"] == pytest.approx(measured.median_tpot_ms, rel=0.15)


def test_speculation_stops_paying_at_high_concurrency() -> None:
    rows = whatif("meta-llama/Llama-3.1-8B", "H200", 4, 3.0, [1, 8, 32, 128])["rows"]
    speedups = [row["speedup"] for row in rows]
    assert speedups == sorted(speedups, reverse=True)
    # measured: 2.8x at 1, 1.05x at 128 (4-wave runs of output 256), 1.0x at 128 (w3's 8-wave runs of output
    # 128); the steady state, where a prompt chunk rides on most steps, keeps 1.41x at 128 (see above)
    assert speedups[0] > 2.0 and speedups[-1] < 1.5


def test_step_cost_of_extra_tokens_grows_with_batch() -> None:
    """Measured on the 8B shape: +12% step cost at concurrency 1, +42% at 32 for 4 extra verified tokens."""
    cost = CostModel(H200_MEASURED_MODEL, resolve_gpu("H200"))
    ratios = []
    for batch in (1, 32):
        base = cost.step_ms(StepLoad(batch, 1.0, 640))
        spec = cost.step_ms(StepLoad(batch, 5.0, 640, speculative=True))
        ratios.append(spec / base)
    assert ratios[0] == pytest.approx(1.12, abs=0.08)
    assert ratios[1] > ratios[0]


def test_other_gpus_scale_by_spec_sheet() -> None:
    model = resolve_model("meta-llama/Llama-3.1-8B")
    h200, h100, a10g = (CostModel(model, resolve_gpu(name)) for name in ("H200", "H100", "A10G"))
    load = StepLoad(1, 1.0, 640)
    assert h100.step_ms(load) > h200.step_ms(load)
    # bandwidth-bound at batch 1: the weight-read part scales with 1 / bandwidth
    # (plus a compute part that scales with 1 / peak FLOPs, 14x lower on the A10G)
    fixed = H200_CALIBRATION.step_overhead_ms + H200_CALIBRATION.per_sequence_ms
    ratio = (a10g.step_ms(load) - fixed) / (h200.step_ms(load) - fixed)
    assert 4800 / 600 <= ratio <= 989 / 70


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


def test_memoized_solves_are_the_fresh_solves() -> None:
    """Step times and open-loop solves are memoized per CostModel: every argument must be in the key, so a
    warmed model answers each variation with the exact float a fresh model computes."""
    model, gpu = resolve_model("meta-llama/Llama-3.1-8B-Instruct"), resolve_gpu("H200")
    warmed = CostModel(model, gpu)
    base = dict(request_rate=4.0, input_len=1500.0, output_len=300.0)
    variations = [{}, {"tokens_per_seq": 3.0, "tokens_per_step": 2.2, "speculative": True},
                  {"async_scheduling": True}, {"cached_share": 0.4}, {"max_batch": 64}, {"max_batched_tokens": 2048},
                  {"step_scale": 1.1}, {"request_rate": 40.0}, {"input_len": 200.0}, {"output_len": 50.0}]
    for variation in variations + variations:  # the second round is answered from the memo
        arguments = {**base, **variation}
        assert warmed.open_loop(**arguments) == CostModel(model, gpu).open_loop(**arguments)
    load = StepLoad(batch=32, tokens_per_seq=1.0, mean_context=2000.0)
    for other in (load, StepLoad(batch=32, tokens_per_seq=1.0, mean_context=2000.0, scale=1.2), load):
        assert warmed.step_ms(other) == CostModel(model, gpu).step_ms(other)
    # A draft function is no key: its solve is never taken from (or put in) the memo.
    drafted = warmed.open_loop(**base, draft_for_batch=lambda batch: 2.0)
    assert drafted != warmed.open_loop(**base)
    assert drafted == CostModel(model, gpu).open_loop(**base, draft_for_batch=lambda batch: 2.0)
