"""The decision: candidates, their predictions at the observed load, a ranking, evidence and confidence.

Input is the typed report document (`advisor.report.Report`: its measurements and, under `options`, the
deployment facts the logs cannot tell) and optional per-request features for segmenting mixed traffic; the
output is the document's `recommendation` section, sized resource flags included (`advisor.engine.sizing`),
which `advisor.emit` renders. The rule the seed guidance insists on:
decide from the workload's bottleneck. Lookup speculation (ngram, suffix) is judged by its exact replay
over these logs; model drafts only by cited priors, flagged as needing verification; everything is priced
at the batch the observed arrivals produce, and "no speculation" is said plainly when nothing pays.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from advisor import report as doc
from advisor.engine import clustering
from advisor.engine.cost import DEFAULT_MAX_NUM_SEQS, SMALLEST_CALIBRATED_WEIGHT_BYTES, CostModel, LoadPoint
from advisor.engine.history import MeasuredCalibration, calibrate, log_names
from advisor.engine.knowledge import drafts_for, prior_for
from advisor.engine.load import (
    SpecPoint,
    Workload,
    best_k_per_batch,
    closed_loop_point,
    evaluate,
    k_for_batch,
    point_from_replay,
    points_from_prior,
)
from advisor.engine.sizing import derive_flags
from advisor.errors import ConfigError
from advisor.hardware import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    MODELS,
    ModelSpec,
    resolve_gpu,
    resolve_model,
    weight_bytes_per_rank,
)
from advisor.report import Report
from advisor.vllm_vocab import DYNAMIC_K_METHODS

# A candidate must cut the typical TPOT by at least this factor to be recommended: the H200 measurements
# varied about 15% between repeated runs at concurrency 8, so smaller predicted gains are not actionable.
MIN_SPEEDUP = 1.10
# At peak load a candidate may be at most this much slower than no speculation before it needs a
# per-batch-size table (or loses).
PEAK_TOLERANCE = 0.95
# Without timestamps the load is unknown: predictions are made at these running batches, and said so.
ASSUMED_TYPICAL_BATCH = 4
ASSUMED_PEAK_BATCH = 32
# Windows for the peak rate (report.arrivals): long enough for a steady-state batch to form.
PEAK_WINDOW_S = 60.0
SHORT_PEAK_WINDOW_S = 10.0
# Concurrency levels of the TPOT-by-concurrency curve (`recommendation.tpot_by_concurrency`), up to
# --max-num-seqs: powers of two, as `advise whatif` and the H200 measurements use.
CURVE_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Sample sizes for confidence (requests with replayed outputs).
HIGH_CONFIDENCE_REQUESTS = 300
LOW_CONFIDENCE_REQUESTS = 50


@dataclass
class Priced:
    """One configuration with its predictions at typical and peak load (unrounded, while deciding)."""

    name: str
    method: str | None
    speculative_config: dict | None
    enable_prefix_caching: bool
    source: str
    from_replay: bool
    typical: LoadPoint
    peak: LoadPoint
    speedup_typical: float
    speedup_peak: float
    tokens_per_step: float = 1.0
    notes: list[str] = field(default_factory=list)
    # The speculative setting behind the predictions: one point, or one per k with the batch-size bands.
    point: SpecPoint | None = None
    points_by_k: dict[int, SpecPoint] = field(default_factory=dict)
    bands: list[list[int]] | None = None
    baseline_scale: float = 1.0  # the measured factor on steps without drafts (a band with k = 0)

    def point_at(self, batch: float) -> SpecPoint | None:
        """The setting the server applies at `batch`: the band's k under a per-batch-size table."""
        if self.point is None or self.bands is None:
            return self.point
        k = k_for_batch(self.bands, batch)
        return self.points_by_k.get(k) or _zero_point(self.point, self.baseline_scale)

    def section(self) -> doc.Candidate:
        """The report's `candidates` entry (rounded)."""
        return doc.Candidate(
            name=self.name,
            method=self.method,
            speculative_config=self.speculative_config,
            enable_prefix_caching=self.enable_prefix_caching,
            source=self.source,
            from_replay=self.from_replay,
            tokens_per_step=round(self.tokens_per_step, 3),
            typical=_load_section(self.typical),
            peak=_load_section(self.peak),
            speedup_typical=round(self.speedup_typical, 3),
            speedup_peak=round(self.speedup_peak, 3),
            notes=tuple(self.notes),
        )


def _load_section(point: LoadPoint) -> doc.LoadPoint:
    return doc.LoadPoint(
        batch=round(point.batch, 2),
        step_ms=round(point.step_ms, 3),
        tpot_ms=round(point.tpot_ms, 3),
        ttft_ms=round(point.ttft_ms, 2),
        output_tps=round(point.output_tps, 1),
        prefill_tokens_per_step=round(point.prefill_tokens_per_step, 1),
        saturated=point.saturated,
    )


# ---------------------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------------------


def _resolve_target(report: Report, assumptions: list[str]) -> tuple[ModelSpec, bool]:
    """The target model: the option, else the tokenizer the profile used when the table knows it."""
    if report.options.model:
        return resolve_model(report.options.model), True
    tokenizer = report.tokenizer.name if report.tokenizer else None
    if tokenizer and tokenizer.lower() in MODELS:
        assumptions.append(f"target model taken from the tokenizer used for profiling: {tokenizer} (pass --model)")
        return MODELS[tokenizer.lower()], False
    assumptions.append(f"target model not given: assumed {DEFAULT_MODEL} (pass --model)")
    return MODELS[DEFAULT_MODEL.lower()], False


def _workload(report: Report, cost: CostModel, max_batch: int, assumptions: list[str]) -> Workload:
    options = report.options
    lengths = report.lengths
    input_len = float(lengths.input.mean or 512)
    output_len = float((lengths.output.mean if lengths.output else None) or 256)
    cached = report.cached_share

    def rate_for_batch(batch: float) -> float:
        """The arrival rate whose steady state (no speculation) runs `batch` requests: Little's law inverted."""
        rate = 1.0
        for _ in range(30):
            running = cost.open_loop(rate, input_len, output_len, async_scheduling=True, cached_share=cached,
                                     max_batch=max_batch).batch
            rate *= batch / max(running, 1e-6)
        return rate

    # The logged traffic is spread over the replicas (report.routing): one server sees the busiest one's share.
    share = report.routing.busiest_share if report.routing is not None and report.routing.replicas > 1 else 1.0
    if share < 1.0:
        assumptions.append(f"load per server: the busiest of {report.routing.replicas} replicas takes {share:.1%} "
                           f"of the requests ({report.routing.source}); rates and logged concurrency scaled alike")
    arrivals = report.arrivals
    if arrivals and arrivals.mean_rate_rps:
        typical = float(options.request_rate or arrivals.mean_rate_rps) * share
        peak = max(peak_rate(arrivals) * share, typical)
        source = "observed arrivals" if options.request_rate is None else "--request-rate (peak from the logs)"
        concurrency = arrivals.concurrency
        if options.request_rate is None and concurrency and concurrency.mean:
            # The logging servers held this many requests in flight: never assume a lighter load than that
            # (conservative for speculation, whose gain shrinks with batch).
            observed_typical = min(float(concurrency.mean) * share, max_batch)
            observed_peak = min(float(concurrency.p99 or concurrency.mean) * share, max_batch)
            if cost.open_loop(typical, input_len, output_len, async_scheduling=True, cached_share=cached,
                              max_batch=max_batch).batch < observed_typical:
                typical = rate_for_batch(observed_typical)
                source = "observed arrivals and logged concurrency"
            if cost.open_loop(peak, input_len, output_len, async_scheduling=True, cached_share=cached,
                              max_batch=max_batch).batch < observed_peak:
                peak = rate_for_batch(observed_peak)
        return Workload(typical, max(peak, typical), input_len, output_len, cached, source)
    if options.request_rate:
        rate = float(options.request_rate) * share
        assumptions.append("no timestamps in the logs: load from --request-rate; peak assumed 2x")
        return Workload(rate, 2 * rate, input_len, output_len, cached, "--request-rate")
    assumptions.append(
        f"no timestamps in the logs: load assumed to keep {ASSUMED_TYPICAL_BATCH} requests running "
        f"(peak {ASSUMED_PEAK_BATCH}); pass --request-rate with your business load"
    )
    return Workload(rate_for_batch(ASSUMED_TYPICAL_BATCH), rate_for_batch(min(ASSUMED_PEAK_BATCH, max_batch)),
                    input_len, output_len, cached, "assumed")


def _history(report: Report, cost: CostModel, model_given: bool, gpu_given: bool,
             lines: list[str]) -> MeasuredCalibration | None:
    """The verify records of `--history` that match the deployment, with an evidence line for the baseline
    factor and for every record left out; None without a history (or when the target is only assumed)."""
    runs = report.verify_history
    if not runs:
        return None
    if not model_given or not gpu_given:
        lines.append(f"verify history ({len(runs)} records) not used: records match the model and GPU given with "
                     "--model and --gpu, and this target is assumed")
        return None
    options = report.options
    found = calibrate(runs, options.model or cost.model.name, cost.gpu, options.tp, cost)
    if found.baseline is not None:
        step = found.baseline
        lines.append(f"no speculation: step cost measured by advise verify in {step.source}: TPOT "
                     f"{step.measured_tpot_ms:.2f} ms against {step.model_tpot_ms:.2f} ms fitted at that run's load: "
                     f"steps without speculation x{step.factor:.3f}")
    lines.extend(f"verify record {reason}: not used" for reason in found.ignored)
    if not found.runs:
        lines.append(f"verify history: none of {len(runs)} records is for {options.model} on {cost.gpu.name} "
                     f"with tp {options.tp}: the fitted cost model prices every step")
    return found


def peak_rate(arrivals: doc.Arrivals) -> float:
    """The busiest sustained rate: the 60 s window when the log covers a minute, else the 10 s window.

    A window longer than the log only divides the log's requests by the window and understates the load.
    """
    duration = arrivals.duration_s or 0.0
    if duration >= PEAK_WINDOW_S and arrivals.peak_rate_60s_rps:
        return float(arrivals.peak_rate_60s_rps)
    if duration >= SHORT_PEAK_WINDOW_S and arrivals.peak_rate_10s_rps:
        return float(arrivals.peak_rate_10s_rps)
    return float(arrivals.mean_rate_rps or 0.0)


def measured_drafts(report: Report) -> set[tuple[str, str]]:
    """(method, model) of the drafts whose acceptance the profile measured (draft_model replays)."""
    return {(entry.method, entry.config.get("model")) for entry in report.replay if entry.draft is not None}


def _replay_groups(report: Report) -> dict[str, list[SpecPoint]]:
    """Replayed settings grouped by proposer settings other than k (one group = one deployable config)."""
    groups: dict[str, list[SpecPoint]] = {}
    seen: set[str] = set()
    for entry in report.replay + report.replay_sweep:
        point = point_from_replay(entry)
        if point is None:
            continue
        key = json.dumps(point.config, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        settings = {name: value for name, value in point.config.items() if name != "num_speculative_tokens"}
        groups.setdefault(json.dumps(settings, sort_keys=True), []).append(point)
    return groups


# ---------------------------------------------------------------------------------------------------------
# candidates
# ---------------------------------------------------------------------------------------------------------


def _zero_point(point: SpecPoint, baseline_scale: float = 1.0) -> SpecPoint:
    """k = 0 under a speculative server (a per-batch-size band that stops drafting)."""
    return SpecPoint(point.method, 0, point.config, 1.0, 1.0, point.source, point.from_replay, None,
                     step_scale=baseline_scale)


def _candidate_for_group(
    points: list[SpecPoint], cost: CostModel, workload: Workload, max_batch: int,
    baseline: tuple[LoadPoint, LoadPoint],
) -> Priced:
    """The best k of one proposer setting at typical load, with a per-batch-size table when load varies."""
    base_typical, base_peak = baseline

    def run(point: SpecPoint, rate: float) -> LoadPoint:
        return evaluate(cost, workload, rate, point, max_batch)

    best = min(points, key=lambda p: run(p, workload.typical_rate).tpot_ms)
    typical, peak = run(best, workload.typical_rate), run(best, workload.peak_rate)
    config = dict(best.config)
    notes: list[str] = []
    table: list[list[int]] | None = None
    if best.method in DYNAMIC_K_METHODS and len(points) > 1:
        bands = best_k_per_batch(cost, points, workload.mean_context, max_batch, workload.baseline_step_scale,
                                 workload.prefills())
        ks = {band[2] for band in bands if band[0] <= max(base_peak.batch, base_typical.batch) * 1.5}
        if len(ks) > 1 or 0 in ks:
            by_k = {p.k: p for p in points}

            def tabled(base: LoadPoint, rate: float) -> LoadPoint:
                k = k_for_batch(bands, base.batch)
                return run(by_k[k] if k in by_k else _zero_point(best, workload.baseline_step_scale), rate)

            table_typical, table_peak = tabled(base_typical, workload.typical_rate), tabled(base_peak, workload.peak_rate)
            better = table_peak.tpot_ms < peak.tpot_ms or table_typical.tpot_ms < typical.tpot_ms
            # No worse at the observed load is enough too: the table also covers loads the log did not show
            # (a saturated server's batch swings as queues drain), where the bands' k pays.
            no_worse = table_peak.tpot_ms <= peak.tpot_ms and table_typical.tpot_ms <= typical.tpot_ms
            if better or no_worse:
                config["num_speculative_tokens"] = max(band[2] for band in bands) or best.k
                config["num_speculative_tokens_per_batch_size"] = bands
                typical, peak = table_typical, table_peak
                table = bands
                notes.append("k per batch-size band: " + ", ".join(f"{s}-{e}: k={k}" for s, e, k in bands))
    speedup_peak = base_peak.tpot_ms / peak.tpot_ms if peak.tpot_ms > 0 else 0.0
    if speedup_peak < PEAK_TOLERANCE:
        notes.append(f"{1 / speedup_peak:.2f}x slower than no speculation at peak load")
    return Priced(
        name=best.label(),
        method=best.method,
        speculative_config=config,
        enable_prefix_caching=True,
        source=best.source,
        from_replay=best.from_replay,
        typical=typical,
        peak=peak,
        speedup_typical=base_typical.tpot_ms / typical.tpot_ms,
        speedup_peak=speedup_peak,
        tokens_per_step=best.tokens_per_step,
        notes=notes,
        point=best,
        points_by_k={p.k: p for p in points},
        bands=table,
        baseline_scale=workload.baseline_step_scale,
    )


def _rank_key(candidate: Priced) -> tuple:
    slower_at_peak = candidate.method is not None and candidate.speedup_peak < PEAK_TOLERANCE
    return (slower_at_peak, candidate.typical.tpot_ms, -candidate.typical.output_tps)


def _choose(candidates: list[Priced]) -> Priced | None:
    """The recommended speculative candidate, or None for no speculation.

    A measurement on these logs beats a prior measured on other prompts: a prior-based candidate (model
    drafts) wins only when no replayed candidate pays, and then with low confidence.
    """
    paying = [c for c in candidates if c.method is not None and c.speedup_peak >= PEAK_TOLERANCE
              and c.speedup_typical >= MIN_SPEEDUP]
    replayed = [c for c in paying if c.from_replay]
    pool = replayed or paying
    return min(pool, key=_rank_key) if pool else None


def tpot_by_concurrency(cost: CostModel, workload: Workload, candidates: list[Priced],
                        chosen: Priced | None, max_batch: int) -> doc.TpotCurve | None:
    """Predicted TPOT per concurrency (closed loop) without speculation and with the recommended candidate,
    or, when none is recommended, the best-ranked speculative one (to show where it stops paying).

    None when there is no speculative candidate at all (no replay and no prior for the model).
    """
    shown = chosen or next((c for c in candidates if c.method is not None), None)
    if shown is None:
        return None
    rows = []
    for level in (c for c in CURVE_CONCURRENCY if c <= max_batch):
        base = closed_loop_point(cost, workload, level, None)
        spec = closed_loop_point(cost, workload, level, shown.point_at(level))
        rows.append(doc.TpotAtConcurrency(level, round(base.tpot_ms, 3), round(spec.tpot_ms, 3)))
    return doc.TpotCurve(
        candidate=shown.name,
        recommended=chosen is not None,
        input_len=round(workload.input_len, 1),
        output_len=round(workload.output_len, 1),
        load="closed loop: C requests always in flight (vllm bench serve --max-concurrency C), mean lengths",
        rows=tuple(rows),
    )


# ---------------------------------------------------------------------------------------------------------
# evidence and confidence
# ---------------------------------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def _evidence(report: Report, workload: Workload, cost: CostModel, chosen: Priced | None,
              baseline: tuple[LoadPoint, LoadPoint], groups: dict[str, list[SpecPoint]],
              candidates: list[Priced]) -> list[str]:
    lines: list[str] = []
    overlap = report.overlap.in_prompt(4) if report.overlap else None
    if overlap is not None:
        lines.append(f"{_pct(overlap)} of output 4-grams occur in the prompt")
    decode_share = report.lengths.decode_share
    if decode_share is not None:
        lines.append(
            f"mean prompt {workload.input_len:.0f} tokens, mean output {workload.output_len:.0f} tokens; "
            f"decode is {_pct(decode_share)} of tokens"
        )
    base_typical, base_peak = baseline
    weights_ms = cost.weight_bytes(base_typical.batch) / (cost.gpu.bandwidth * cost.cal.bandwidth_efficiency) * 1e3
    lines.append(
        f"{workload.rate_source}: {workload.typical_rate:.2f} req/s typical, {workload.peak_rate:.2f} req/s at peak "
        f"-> running batch {base_typical.batch:.1f} typical and {base_peak.batch:.1f} at peak on {cost.gpu.name} "
        f"(Little's law); weight reads are {_pct(weights_ms / base_typical.step_ms)} of a typical step "
        + ("(decode bandwidth-bound)" if weights_ms / base_typical.step_ms > 0.4 else "(batch large: compute matters)")
    )
    if base_peak.saturated:
        lines.append(f"at peak the server saturates (batch pinned at {base_peak.batch:.0f}): requests queue")
    for points in groups.values():
        best = max(points, key=lambda p: p.tokens_per_step)
        if best.mean_acceptance_length is not None:
            lines.append(
                f"replayed {best.label()}: mean acceptance length {best.mean_acceptance_length:.2f} when drafting, "
                f"drafts on {_pct(best.draft_step_share or 0)} of steps, {best.tokens_per_step:.2f} tokens per step overall"
            )
    concurrency = report.arrivals.concurrency if report.arrivals else None
    if concurrency and concurrency.mean is not None:
        lines.append(
            f"logged latencies show {concurrency.mean:.1f} requests in flight on average (p99 {concurrency.p99}) "
            "on the server that wrote the logs"
        )
    apc, prefix = report.apc, report.prefix
    if apc and apc.at_capacity and apc.hit_rate is not None:
        lines.append(
            f"prefix-cache replay: {_pct(apc.hit_rate)} of prompt tokens hit with {apc.at_capacity.capacity_blocks} "
            f"blocks of {apc.at_capacity.block_size} (ceiling {_pct(apc.ceiling.hit_rate or 0)}); APC only shortens "
            "prefill"
        )
    elif prefix and prefix.ceiling is not None:
        lines.append(
            f"prefix sharing: {_pct(prefix.ceiling)} of prompt tokens hit the prefix cache with unlimited capacity "
            f"(blocks of {prefix.block_size}, {_pct(prefix.requests_with_hit_share or 0)} of requests hit); "
            "APC stays on; it only shortens prefill"
        )
    for draft in report.draft_replay:
        lines.append(
            f"draft_model {draft.model}: acceptance measured by a teacher-forced greedy replay of "
            f"{draft.requests_replayed} requests; its {draft.params / 1e6:.0f}M parameters cost k draft "
            "forwards per target step in the cost model"
            + ("" if draft.greedy else " (greedy figure: an upper bound if the traffic samples)")
        )
    heads = sorted({c.method for c in candidates if c.method in ("eagle3", "mtp", "dflash") and not c.from_replay})
    if heads:
        lines.append(
            f"{', '.join(heads)}: published priors, not measured (these heads read the target's hidden states, "
            "which a log does not hold); offered only where compatible: a head known for the target's family, "
            "native MTP layers in its config"
        )
    for candidate in candidates:
        if candidate is not chosen and not candidate.from_replay and candidate.speedup_typical >= MIN_SPEEDUP:
            lines.append(f"{candidate.name} would give {candidate.speedup_typical:.2f}x by a published prior "
                         f"({candidate.source}): worth its own A/B with `advise verify`")
    if chosen is None:
        lines.append(
            f"no speculation: no candidate cuts the typical TPOT by {_pct(MIN_SPEEDUP - 1)} or more without slowing "
            "the peak"
        )
    else:
        lines.append(
            f"{chosen.name}: predicted TPOT {chosen.typical.tpot_ms:.2f} ms vs {base_typical.tpot_ms:.2f} ms typical "
            f"({chosen.speedup_typical:.2f}x), {chosen.peak.tpot_ms:.2f} vs {base_peak.tpot_ms:.2f} ms at peak "
            f"({chosen.speedup_peak:.2f}x); source: {chosen.source}"
        )
    return lines


def _confidence(report: Report, chosen: Priced | None, assumptions: list[str],
                model_given: bool, gpu_given: bool, cost: CostModel, step_measured: bool) -> tuple[str, list[str]]:
    """high / medium / low with the reasons that lowered it (docs/engine.md defines the levels)."""
    order = {"high": 2, "medium": 1, "low": 0}
    level = "high"
    reasons: list[str] = []

    def lower(to: str, reason: str) -> None:
        nonlocal level
        reasons.append(reason)
        if order[to] < order[level]:
            level = to

    requests = report.ingest.requests
    if requests < LOW_CONFIDENCE_REQUESTS:
        lower("low", f"only {requests} requests (< {LOW_CONFIDENCE_REQUESTS})")
    elif requests < HIGH_CONFIDENCE_REQUESTS:
        lower("medium", f"{requests} requests (< {HIGH_CONFIDENCE_REQUESTS})")
    tokenizer = report.tokenizer
    if tokenizer and (tokenizer.warning or tokenizer.model_match is False):
        lower("medium", "the profiling tokenizer is not the target's: token counts and n-gram matches are approximate")
    sampling = report.sampling
    if (sampling.temperature_missing_share or 0) > 0.5:
        lower("medium", "sampling temperature not logged: the replay assumes the logged outputs are what the target emits")
    elif (sampling.greedy_share or 1.0) < 0.5:
        lower("medium", f"most requests sample (median temperature {sampling.temperature_p50}): live acceptance varies")
    if not report.arrivals:
        lower("medium", "no timestamps: the load is assumed")
    if not model_given or not gpu_given:
        lower("medium", "target model or GPU assumed")
    weights = weight_bytes_per_rank(cost.model, cost.tp)
    if weights < SMALLEST_CALIBRATED_WEIGHT_BYTES and not step_measured:
        lower("medium", f"{weights / 1e9:.1f} GB of weights per GPU, below the smallest calibrated shape "
                        f"({SMALLEST_CALIBRATED_WEIGHT_BYTES / 1e9:.1f} GB): its steps are mostly the engine's CPU "
                        "work, which runs of a 1.5B shape reproduced only within about 30%")
    if chosen is not None and not chosen.from_replay:
        lower("low", "the recommended method's acceptance is a published prior, not measured on these logs")
    if not reasons:
        reasons.append("replayed on enough requests with the target's tokenizer, greedy sampling and observed load")
    return level, reasons


# ---------------------------------------------------------------------------------------------------------
# segments
# ---------------------------------------------------------------------------------------------------------

SEGMENT_FEATURES = ("input_len", "output_len", "prompt_overlap_4", "prefix_hit_ratio")
MIN_SEGMENT_REQUESTS = 40
MIN_SEGMENT_SHARE = 0.05
MIN_SILHOUETTE = 0.35
SEGMENT_FIT_SAMPLE = 10_000  # requests the k-means fit sees at most (seeded sample)
LOOKUP_OVERLAP = 0.3  # mean output 4-gram overlap from which lookup speculation is worth replaying
NO_LOOKUP_OVERLAP = 0.1


SEGMENT_BLOCK_ROWS = 65_536  # rows scaled and labelled at once


@dataclass(frozen=True)
class _FeatureScale:
    """How the segmentation scales its features: the log of lengths (log1p), then minus the mean and over the
    population standard deviation (1 where it is 0) of the requests with every feature known. The sums run
    in row order (np.cumsum), which is how numpy reduces the columns of a row-major matrix (`axis=0`): the
    same figures as scaling the whole matrix at once, without holding it."""

    logs: tuple[bool, ...]
    center: np.ndarray
    divisor: np.ndarray

    @classmethod
    def of(cls, values: list[np.ndarray], known: np.ndarray, logs: list[bool]) -> _FeatureScale:
        count = int(known.sum())
        center, divisor = np.empty(len(values)), np.empty(len(values))
        for index, (column, log) in enumerate(zip(values, logs)):
            kept = column[known]
            if log:
                np.log1p(kept, out=kept)
            center[index] = np.cumsum(kept)[-1] / count
            kept -= center[index]
            kept *= kept
            spread = np.sqrt(np.cumsum(kept)[-1] / count)
            divisor[index] = spread if spread > 0 else 1.0
        return cls(tuple(logs), center, divisor)

    def rows(self, values: list[np.ndarray], positions: np.ndarray) -> np.ndarray:
        """The scaled features of the requests at `positions` (indices into the feature columns)."""
        matrix = np.column_stack([column[positions] for column in values])
        for index, log in enumerate(self.logs):
            if log:
                np.log1p(matrix[:, index], out=matrix[:, index])
        matrix -= self.center
        matrix /= self.divisor
        return matrix

    def predict(self, model: clustering.KMeansFit, values: list[np.ndarray], known: np.ndarray) -> np.ndarray:
        """`model`'s label of every request with its features known, in row order, a block at a time (int8: a
        few clusters)."""
        labels = np.empty(int(known.sum()), dtype=np.int8)
        done = 0
        for start in range(0, known.size, SEGMENT_BLOCK_ROWS):
            positions = start + np.flatnonzero(known[start : start + SEGMENT_BLOCK_ROWS])
            labels[done : done + positions.size] = model.predict(self.rows(values, positions))
            done += positions.size
        return labels


def segment_requests(features: dict[str, np.ndarray] | None, seed: int = 0) -> list[doc.Segment]:
    """Clusters requests (k-means over log lengths, prompt overlap and prefix hits) when traffic is mixed.

    The fit is advisor.engine.clustering's seeded numpy k-means (scikit-learn's algorithm without its import).

    Returns [] for homogeneous traffic: clusters count only when well separated (silhouette >=
    MIN_SILHOUETTE) and each holds at least MIN_SEGMENT_SHARE of the requests.
    """
    if not features:
        return []
    # Features unknown for every request (NaN: no text, no prefix analysis) are left out, not the requests.
    columns = [name for name in SEGMENT_FEATURES
               if name in features and np.isfinite(np.asarray(features[name], dtype=float)).any()]
    if "input_len" not in columns or "output_len" not in columns:
        return []
    # The requests with every feature known. Each is scaled (log for lengths, then centered and divided by
    # its spread) where it is used: the fit's and the silhouette's samples, and a block of rows at a time to
    # label them all. The per-request arrays stay the labels and the mask: this runs beside the profile's
    # analyses, at its peak memory, on every request of the log.
    values = [np.asarray(features[name], dtype=float) for name in columns]
    known = np.isfinite(values[0])
    for column in values[1:]:
        known &= np.isfinite(column)
    count = int(known.sum())
    if count < 2 * MIN_SEGMENT_REQUESTS:
        return []
    scale = _FeatureScale.of(values, known, [name.endswith("_len") for name in columns])
    rng = np.random.default_rng(seed)
    sample = rng.choice(count, size=min(count, 2000), replace=False)
    positions = np.flatnonzero(known)
    # Big logs: fit on a seeded sample, then label every request (cost independent of the log's size).
    fitted_all = count <= SEGMENT_FIT_SAMPLE
    fit_rows = scale.rows(values, positions if fitted_all else positions[
        np.sort(np.random.default_rng(seed).choice(count, SEGMENT_FIT_SAMPLE, replace=False))])
    sample_rows = scale.rows(values, positions[sample])
    del positions
    best: tuple[float, np.ndarray] | None = None
    distinct = len(np.unique(fit_rows, axis=0))  # more clusters than distinct points would leave some empty
    for clusters in (k for k in (2, 3, 4) if k <= distinct):
        model = clustering.kmeans(fit_rows, clusters, n_init=4, seed=seed)
        labels = model.labels if fitted_all else scale.predict(model, values, known)
        shares = np.bincount(labels, minlength=clusters) / len(labels)
        if shares.min() < MIN_SEGMENT_SHARE:
            continue
        score = clustering.silhouette_score(sample_rows, labels[sample])
        if score >= MIN_SILHOUETTE and (best is None or score > best[0]):
            best = (score, labels)
    if best is None:
        return []
    score, labels = best
    members = [labels == label for label in range(labels.max() + 1)]
    summaries: list[dict[str, float]] = [{} for _ in members]
    for name, column in zip(columns, values):
        known_values = column[known]
        for summary, rows in zip(summaries, members):
            summary[name] = float(np.mean(known_values[rows]))
    segments = []
    for label, (summary, rows) in enumerate(zip(summaries, members)):
        requests = int(rows.sum())
        overlap = summary.get("prompt_overlap_4")
        if overlap is None:
            advice = "no overlap feature: replay this segment separately"
        elif overlap >= LOOKUP_OVERLAP:
            advice = "output copies the prompt: lookup speculation (ngram/suffix) is promising for this segment"
        elif overlap < NO_LOOKUP_OVERLAP:
            advice = "output rarely copies the prompt: no lookup speculation for this segment"
        else:
            advice = "moderate prompt overlap: lookup speculation only at low batch"
        segments.append(
            doc.Segment(
                segment=label,
                requests=requests,
                share=round(requests / len(labels), 3),
                mean={name: round(value, 3) for name, value in summary.items()},
                advice=advice,
                silhouette=round(score, 3),
            )
        )
    return sorted(segments, key=lambda segment: -segment.share)


# ---------------------------------------------------------------------------------------------------------
# the decision
# ---------------------------------------------------------------------------------------------------------


def decide(report: Report, features: dict[str, np.ndarray] | None = None,
           segments: Sequence[doc.Segment] | None = None) -> doc.Recommendation:
    """Recommends APC and a speculative config for the profiled workload (see the module docstring).

    The deployment facts come from `report.options` (model, gpu, tp, max_num_seqs, request_rate); `features`
    are the profile's per-request arrays for segmentation (`advisor.profile.Profile.features`), or
    `segments` is what `segment_requests(features)` gave (the profile runs it beside its analyses). Returns
    the document's `recommendation` section without its `emitted` forms (`advisor.emit.configs.render_configs`).
    """
    options = report.options
    assumptions: list[str] = []
    model, model_given = _resolve_target(report, assumptions)
    gpu_given = bool(options.gpu)
    if not gpu_given:
        assumptions.append(f"GPU not given: assumed {DEFAULT_GPU} (pass --gpu)")
    gpu = resolve_gpu(options.gpu or DEFAULT_GPU)
    max_batch = options.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    if options.max_num_seqs is None:
        assumptions.append(f"--max-num-seqs assumed {DEFAULT_MAX_NUM_SEQS}")
    cost = CostModel(model, gpu, options.tp, max_num_seqs=max_batch)
    workload = _workload(report, cost, max_batch, assumptions)
    history_lines: list[str] = []
    measured_steps = _history(report, cost, model_given, gpu_given, history_lines)
    if measured_steps is not None and measured_steps.baseline is not None:
        workload = replace(workload, baseline_step_scale=measured_steps.baseline.factor)
    names = log_names(report.inputs)

    def with_history(points: list[SpecPoint]) -> list[SpecPoint]:
        """The points with the history's measurements of their setting (advisor.engine.history)."""
        if measured_steps is None:
            return points
        updated = []
        for point in points:
            point, notes = measured_steps.apply(point, cost, names)
            history_lines.extend(notes)
            updated.append(point)
        return updated

    base_typical = evaluate(cost, workload, workload.typical_rate, None, max_batch)
    base_peak = evaluate(cost, workload, workload.peak_rate, None, max_batch)
    baseline = (base_typical, base_peak)
    candidates = [
        Priced("no speculation", None, None, True, "cost model", False, base_typical, base_peak, 1.0, 1.0)
    ]
    replayed = _replay_groups(report)
    groups = {key: with_history(points) for key, points in replayed.items()}
    for points in groups.values():
        candidates.append(_candidate_for_group(points, cost, workload, max_batch, baseline))
    measured = measured_drafts(report)
    if model_given:
        for draft in drafts_for(model):
            prior = prior_for(draft.method, model)
            if prior is None or (draft.method, draft.model) in measured:
                continue  # a draft measured on these logs replaces its prior
            candidates.append(_candidate_for_group(with_history(points_from_prior(prior, draft)), cost, workload, max_batch,
                                                   baseline))
    apc_off_typical = evaluate(cost, workload, workload.typical_rate, None, max_batch, apc=False)
    apc_off_peak = evaluate(cost, workload, workload.peak_rate, None, max_batch, apc=False)
    candidates.append(
        Priced("no speculation, APC off", None, None, False, "cost model", False, apc_off_typical, apc_off_peak,
               base_typical.tpot_ms / apc_off_typical.tpot_ms, base_peak.tpot_ms / apc_off_peak.tpot_ms)
    )
    candidates.sort(key=_rank_key)
    chosen = _choose(candidates)
    level, reasons = _confidence(report, chosen, assumptions, model_given, gpu_given, cost,
                                 measured_steps is not None and measured_steps.baseline is not None)
    final = chosen or candidates[[c.name for c in candidates].index("no speculation")]
    predicted = doc.Predicted(
        tpot_ms=doc.BaselineVsCandidate(round(base_typical.tpot_ms, 3), round(final.typical.tpot_ms, 3)),
        tpot_ms_peak=doc.BaselineVsCandidate(round(base_peak.tpot_ms, 3), round(final.peak.tpot_ms, 3)),
        output_tps=doc.BaselineVsCandidate(round(base_typical.output_tps, 1), round(final.typical.output_tps, 1)),
        speedup=doc.TypicalPeak(round(final.speedup_typical, 3), round(final.speedup_peak, 3)),
        ttft_ms=doc.TtftPrediction(
            apc_on=round(base_typical.ttft_ms, 2),
            apc_off=round(apc_off_typical.ttft_ms, 2),
            apc_saving=round(apc_off_typical.ttft_ms - base_typical.ttft_ms, 2),
        ),
        batch=doc.TypicalPeak(round(base_typical.batch, 2), round(base_peak.batch, 2)),
        request_rate=doc.RatePrediction(round(workload.typical_rate, 4), round(workload.peak_rate, 4),
                                        workload.rate_source),
        calibration=cost.cal.source + (
            f"; measured steps from advise verify: {', '.join(run.source for run in measured_steps.runs)}"
            if measured_steps is not None and measured_steps.runs else ""),
    )
    config = chosen.speculative_config if chosen else None
    _validate_speculative_config(config)
    saturated = any(c.peak.saturated for c in candidates if c.method is None)
    peak_batch = math.ceil(base_peak.batch) if report.arrivals else None  # an assumed load sizes nothing
    flags = derive_flags(report, model, gpu, not gpu_given, options.tp, peak_batch, saturated,
                         int(config.get("num_speculative_tokens") or 0) if config else 0)
    return doc.Recommendation(
        speculative_config=config,
        enable_prefix_caching=True,
        evidence=tuple(_evidence(report, workload, cost, chosen, baseline, replayed, candidates)
                       + list(dict.fromkeys(history_lines))),
        confidence=doc.Confidence(level, tuple(reasons)),
        predicted=predicted,
        assumptions=tuple(assumptions),
        target=doc.Target(model=options.model or model.name, gpu=gpu.name, tp=options.tp, gpu_given=gpu_given),
        segments=tuple(segment_requests(features) if segments is None else segments),
        derived_flags=tuple(flags),
        candidates=tuple(c.section() for c in candidates),
        tpot_by_concurrency=tpot_by_concurrency(cost, workload, candidates, chosen, max_batch),
    )


def _validate_speculative_config(config: dict | None) -> None:
    """Raises ConfigError when the config would not pass vLLM's own validation (lint's rules)."""
    if config is None:
        return
    from advisor.lint import check_speculative_config

    errors = [finding for finding in check_speculative_config(config, line=0) if finding.severity == "error"]
    if errors:
        raise ConfigError("recommended speculative config is invalid: " + "; ".join(f.message for f in errors))
