"""The GPU measurements the cost model is fitted to, read from the package's measurement-data folder.

Each row of `points.csv` is one `vllm bench serve` run (closed loop: `--max-concurrency C --request-rate inf`,
random prompts of `input_len` tokens, `--ignore-eos` outputs of `output_len`) against one server: a model
shape (random weights of that shape: `shapes/<shape>/config.json`), no speculation (k=0) or a proposer that
drafts exactly k tokens every step at fixed synthetic acceptance. README.md beside the table gives the
provenance (vLLM version, flags, date, GPU). tests/test_engine_cost.py checks the model against every row;
scripts/fit_cost.py refits the coefficients from them.

A run is short (`--num-prompts` 2C to 4C of one fixed length: two to four waves of C requests that start
together), so its median TPOT is not the steady state `CostModel.closed_loop` models: the first requests
of a wave decode through the chunked prefills of the rest, the last ones through none. Each point is
therefore priced by replaying the run's schedule step by step as vLLM's scheduler builds it (running
decodes first, then prefill chunks in arrival order within `max_num_batched_tokens`; a finished request
lets the client send the next), every step priced by `CostModel.step_terms`, and each request's TPOT
taken from its own steps, as `vllm bench serve` computes it. The schedule does not depend on step times
(the closed loop counts steps, not seconds), so a request's TPOT stays linear in the coefficients.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from advisor.engine.cost import H200_CALIBRATION, Calibration, CostModel, LoadPoint, StepLoad
from advisor.errors import InputError
from advisor.hardware import ModelSpec, _from_config_dict, kv_bytes_per_token_per_rank, resolve_gpu

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "measurements" / "h200_vllm0.26"
DEFAULT_POINTS = DATA_DIR / "points.csv"
DEFAULT_OPEN_LOOP = DATA_DIR / "open_loop.csv"
KV_BLOCK_TOKENS = 16  # vLLM's KV block on a GPU: a request holds whole blocks
# The per-position synthetic acceptance rates each k ran with (README.md beside the table): rate j is the
# probability that draft position j is accepted, so a step emits 1 + #{j: u < rate_j} tokens for one uniform u
# (mean 1 + sum of the rates: 1.8, 2.4, 3.0, 3.18, the measured acceptance lengths).
SYNTHETIC_RATES = {
    1: (0.8,), 2: (0.8, 0.6), 4: (0.8, 0.6, 0.4, 0.2), 8: (0.8, 0.6, 0.4, 0.2, 0.1, 0.05, 0.02, 0.01),
}
# vLLM's default --max-num-batched-tokens for the API server on a GPU of 70-160 GiB (H100, H200;
# vllm/engine/arg_utils.py), which the measurement servers ran with; --max-num-seqs was 256.
BENCH_MAX_BATCHED_TOKENS = 8192
# --max-num-seqs of each run's servers (README.md): it bounds the batch and sets the largest captured CUDA graph
MAX_NUM_SEQS_BY_RUN = {"w1-2026-12-02": 128, "reference-2026-12-02": 256, "w2-2026-12-03": 256,
                      "w3-2026-12-03": 256, "w4-2026-12-04": 256}


# Shapes the table keeps but the calibration leaves out, with the reason (docs/engine.md, "Measurements and
# fit"). The 1.5B shape's step is 2-8 ms, mostly CPU work of the engine and API server, so its runs measure the
# host's CPU of the moment: repeats of one cell on one server minutes apart differ by up to 22%, one cell moved
# 69% between sessions (k=4, concurrency 8: 1.31 ms in w1, 2.21 ms in w3), and the same host timed a fixed
# Python loop at 120 to 199 ms within minutes (w4's runs.json). No model of the step can be within 15% of all
# of those runs at once; they stay in the table, and a test pins how far the calibration is from them.
EXCLUDED_SHAPES = {
    "qwen2.5-1.5b-shape-vocab-151669": "CPU-bound steps: its repeats and sessions disagree by more than 30%",
}


def measured_shape(name: str, data_dir: Path = DATA_DIR) -> ModelSpec:
    """A shape the measurements ran (random weights), from its config.json in the data folder."""
    path = data_dir / "shapes" / name / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: no readable shape config ({exc})") from exc
    return _from_config_dict(name, config, str(path.relative_to(data_dir.parent.parent.parent)))


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured (shape, k, input length, concurrency) point: medians of one bench run."""

    shape: str
    gpu: str
    k: int
    acceptance_length: float  # measured tokens per step per sequence (1 without speculation)
    input_len: int
    output_len: int
    concurrency: int
    num_prompts: int
    median_tpot_ms: float
    median_itl_ms: float
    median_ttft_ms: float
    output_throughput: float
    run: str
    holdout: bool

    def request_features(self, calibration: Calibration = H200_CALIBRATION) -> tuple[list[str], np.ndarray]:
        """Feature names and one row per request: the sum of `step_terms` over the steps between its first
        and last token, over output_len - 1 (its TPOT = row . coefficients). See the module docstring."""
        return _request_features(self, calibration.cuda_graph_max_tokens)

    @property
    def max_num_seqs(self) -> int:
        """The servers' --max-num-seqs in this point's run (README.md beside the table)."""
        return MAX_NUM_SEQS_BY_RUN[self.run]

    def predict(self, calibration: Calibration = H200_CALIBRATION) -> float:
        """The model's median TPOT over this run's requests (ms), as `vllm bench serve` reports it."""
        names, rows = self.request_features(calibration)
        coefficients = CostModel(measured_shape(self.shape), resolve_gpu(self.gpu), calibration=calibration).coefficients()
        return float(np.median(rows @ np.array([coefficients[name] for name in names])))


@dataclass(frozen=True)
class Cell:
    """One cell of the design in one session: the runs of one (shape, k, input, output, concurrency, requests)
    in one run of the table, repeats included (w3 and w4 ran cells two to four times on the same server or a
    twin of it minutes apart). Repeats replay the same schedule, so the model prices the cell once; its
    measured figure is the median of its runs, the agreement the calibration is held to (15%)."""

    runs: tuple[MeasuredPoint, ...]

    @property
    def first(self) -> MeasuredPoint:
        return self.runs[0]

    @property
    def median_tpot_ms(self) -> float:
        return float(np.median([run.median_tpot_ms for run in self.runs]))

    @property
    def spread(self) -> float:
        """Largest over smallest repeat, minus one: how far apart the same measurement came out."""
        values = [run.median_tpot_ms for run in self.runs]
        return max(values) / min(values) - 1

    @property
    def calibrated(self) -> bool:
        return self.first.shape not in EXCLUDED_SHAPES

    def request_features(self, calibration: Calibration = H200_CALIBRATION) -> tuple[list[str], np.ndarray]:
        return self.first.request_features(calibration)

    def predict(self, calibration: Calibration = H200_CALIBRATION) -> float:
        return self.first.predict(calibration)

    def label(self) -> str:
        p = self.first
        return f"{p.shape} k={p.k} in={p.input_len} c={p.concurrency} n={p.num_prompts} {p.run}"


def cells(points: list[MeasuredPoint]) -> list[Cell]:
    """The points grouped into cells, in the table's order of first appearance."""
    grouped: dict[tuple, list[MeasuredPoint]] = {}
    for p in points:
        key = (p.shape, p.gpu, p.k, p.input_len, p.output_len, p.concurrency, p.num_prompts, p.run)
        grouped.setdefault(key, []).append(p)
    return [Cell(tuple(runs)) for runs in grouped.values()]


@lru_cache(maxsize=None)
def _request_features(point: MeasuredPoint, graph_max_tokens: int) -> tuple[list[str], np.ndarray]:
    """The bench run's schedule replayed step by step (module docstring); acceptance drawn per sequence and
    step from the run's synthetic rates with a fixed seed."""
    calibration = replace(H200_CALIBRATION, cuda_graph_max_tokens=graph_max_tokens)  # only counts matter here
    cost = CostModel(measured_shape(point.shape), resolve_gpu(point.gpu), calibration=calibration,
                     max_num_seqs=point.max_num_seqs)
    rates = np.array(SYNTHETIC_RATES[point.k] if point.k else ())
    rng = np.random.default_rng(0)
    total = point.num_prompts
    waiting = list(range(min(point.concurrency, total)))
    sent = len(waiting)
    running: list[int] = []
    prefilled = [0] * total
    generated = [0] * total
    first_step = [0] * total
    last_step = [0] * total
    finished = 0
    steps: list[dict[str, float]] = []
    while finished < total:
        decoding = [r for r in running if prefilled[r] >= point.input_len]
        budget = BENCH_MAX_BATCHED_TOKENS - len(decoding) * (1 + point.k)
        chunks: dict[int, int] = {}
        for r in [r for r in running if prefilled[r] < point.input_len]:
            if budget <= 0:
                break
            chunks[r] = min(point.input_len - prefilled[r], budget)
            budget -= chunks[r]
        while waiting and budget > 0 and len(running) < point.max_num_seqs:
            r = waiting.pop(0)
            running.append(r)
            chunks[r] = min(point.input_len, budget)
            budget -= chunks[r]
        context = float(np.mean([point.input_len + generated[r] for r in decoding])) if decoding else 0.0
        load = StepLoad(batch=len(decoding), tokens_per_seq=1.0 + point.k, mean_context=context,
                        prefill_tokens=float(sum(chunks.values())), speculative=point.k > 0 and bool(decoding))
        terms = cost.step_terms(load)
        if not decoding:  # a prefill-only step: no sequence decodes (step_terms counts at least one)
            terms.update(per_sequence=0.0, draft_tokens=0.0, kv_read=0.0, decode_compute=0.0)
        steps.append(terms)
        step = len(steps) - 1
        for r in decoding:
            generated[r] += 1 + int(np.count_nonzero(rng.random() < rates))
            if generated[r] >= point.output_len:
                last_step[r] = step
                running.remove(r)
                finished += 1
                if sent < total:
                    waiting.append(sent)
                    sent += 1
        for r, tokens in chunks.items():
            prefilled[r] += tokens
            if prefilled[r] >= point.input_len:
                generated[r], first_step[r] = 1, step  # the prefill's step samples the first token
    names = list(steps[0])
    cumulative = np.vstack([np.zeros(len(names)), np.cumsum([[t[n] for n in names] for t in steps], axis=0)])
    rows = np.array([(cumulative[last_step[r] + 1] - cumulative[first_step[r] + 1]) for r in range(total)])
    return names, rows / (point.output_len - 1)


@dataclass(frozen=True)
class OpenLoopPoint:
    """One open-loop run: Poisson arrivals at `request_rate` (`vllm bench serve --request-rate R --burstiness
    1`), the load a deployment sees and the engine prices (`CostModel.open_loop`, its steady state: the running
    batch that Little's law and the step time agree on). Unlike a closed-loop run its schedule depends on the
    step times, so it is priced by the engine's own solve at the calibration under test, not by a replay."""

    shape: str
    gpu: str
    k: int
    acceptance_length: float
    input_len: int
    output_len: int
    request_rate: float
    num_prompts: int
    request_throughput: float
    mean_in_flight: float  # requests in the server, queued ones included (Little's law over the run)
    median_tpot_ms: float
    median_ttft_ms: float
    kv_cache_bytes: int
    run: str

    @property
    def max_batch(self) -> int:
        """Requests the server's KV cache holds at full length (whole blocks of prompt, output and k lookahead
        slots), within the servers' --max-num-seqs: the batch a saturated server runs."""
        shape = measured_shape(self.shape)
        blocks = self.kv_cache_bytes // int(kv_bytes_per_token_per_rank(shape) * KV_BLOCK_TOKENS)
        per_request = -(-(self.input_len + self.output_len + self.k) // KV_BLOCK_TOKENS)
        return min(int(blocks // per_request), MAX_NUM_SEQS_BY_RUN[self.run])

    def solve(self, calibration: Calibration = H200_CALIBRATION) -> LoadPoint:
        """The engine's steady state for this run under `calibration`."""
        cost = CostModel(measured_shape(self.shape), resolve_gpu(self.gpu), calibration=calibration,
                         max_num_seqs=MAX_NUM_SEQS_BY_RUN[self.run])
        return cost.open_loop(self.request_rate, self.input_len, self.output_len, tokens_per_seq=1.0 + self.k,
                              tokens_per_step=self.acceptance_length, speculative=self.k > 0,
                              max_batch=self.max_batch, max_batched_tokens=BENCH_MAX_BATCHED_TOKENS)

    def request_features(self, calibration: Calibration = H200_CALIBRATION) -> tuple[list[str], np.ndarray]:
        """Feature names and one row: the `step_terms` of the steady step solved under `calibration`, over the
        acceptance length (row . coefficients = the solve's TPOT), for the fit's linear programs."""
        solved = self.solve(calibration)
        cost = CostModel(measured_shape(self.shape), resolve_gpu(self.gpu), calibration=calibration,
                         max_num_seqs=MAX_NUM_SEQS_BY_RUN[self.run])
        chunk = min(self.input_len, BENCH_MAX_BATCHED_TOKENS)
        terms = cost.step_terms(StepLoad(solved.batch, 1.0 + self.k, self.input_len + self.output_len / 2,
                                         solved.prefill_tokens_per_step, self.k > 0, prefill_chunk=chunk))
        names = list(terms)
        return names, np.array([[terms[name] / self.acceptance_length for name in names]])

    def predict(self, calibration: Calibration = H200_CALIBRATION) -> float:
        return self.solve(calibration).tpot_ms

    def label(self) -> str:
        return f"{self.shape} k={self.k} in={self.input_len} rate={self.request_rate:g}/s {self.run}"


def _read_table(path: Path, kind: str, build) -> list:
    """Every row of a measurement table through `build`; InputError naming file, line and cause on a bad row."""
    rows = []
    with path.open(newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                rows.append(build(row))
            except (KeyError, ValueError, TypeError) as exc:
                raise InputError(f"{path}:{line}: bad {kind} row ({exc})") from exc
    return rows


def load_open_loop(path: Path = DEFAULT_OPEN_LOOP) -> list[OpenLoopPoint]:
    """Every row of the open-loop table."""
    return _read_table(path, "open-loop", lambda row: OpenLoopPoint(
        shape=row["shape"], gpu=row["gpu"], k=int(row["k"]), acceptance_length=float(row["acceptance_length"]),
        input_len=int(row["input_len"]), output_len=int(row["output_len"]), request_rate=float(row["request_rate"]),
        num_prompts=int(row["num_prompts"]), request_throughput=float(row["request_throughput"]),
        mean_in_flight=float(row["mean_in_flight"]), median_tpot_ms=float(row["median_tpot_ms"]),
        median_ttft_ms=float(row["median_ttft_ms"]), kv_cache_bytes=int(row["kv_cache_bytes"]), run=row["run"]))


def load_points(path: Path = DEFAULT_POINTS) -> list[MeasuredPoint]:
    """Every row of the measurement table."""
    return _read_table(path, "measurement", lambda row: MeasuredPoint(
        shape=row["shape"], gpu=row["gpu"], k=int(row["k"]), acceptance_length=float(row["acceptance_length"] or 1.0),
        input_len=int(row["input_len"]), output_len=int(row["output_len"]), concurrency=int(row["concurrency"]),
        num_prompts=int(row["num_prompts"]), median_tpot_ms=float(row["median_tpot_ms"]),
        median_itl_ms=float(row["median_itl_ms"]), median_ttft_ms=float(row["median_ttft_ms"]),
        output_throughput=float(row["output_throughput"]), run=row["run"], holdout=row["holdout"] == "1"))
