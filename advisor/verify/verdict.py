"""The verdict of an A/B: candidate/baseline ratios with bootstrap intervals, controls, predicted vs measured.

Per-request values come from the bench's detailed JSON: TTFT, E2EL (`latencies`; TTFT + the chunk gaps `itls`
where an older bench saves no latencies), TPOT = (E2EL - TTFT) /
(output tokens - 1) as vLLM's bench defines it (vllm/benchmarks/serve.py, calculate_metrics), and the
inter-chunk gaps (ITL). Both arms replay the same rows in the same order (`--disable-shuffle`), so request i
of a trial is the same prompt with the same output length in both arms: the bootstrap resamples request
indices jointly for the two arms (paired) and separately within each trial (stratified), and the ratio is of
the resampled means. Output throughput exists once per run, so its interval comes from resampling trials.

Rule (stated in every summary), with a primary metric per mode: TPOT for speculative decoding (it exists to
cut the time between tokens), TTFT for prefix caching (it only shortens prefill):
- confirmed: the 95% interval of the primary ratio lies below 1 - min_effect AND the E2EL ratio's below 1;
- refuted: the primary ratio's interval lies entirely above 1 - min_effect (an improvement of min_effect or
  more is excluded), or the E2EL ratio's lies entirely above 1 (requests got slower end to end);
- inconclusive: anything else, or a failed control (more trials or requests narrow the intervals).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from advisor.errors import VllmError
from advisor.verify.metrics import MetricsSnapshot
from advisor.verify.plan import APC, BASELINE, CANDIDATE, SPECULATIVE
from advisor.verify.runner import StepResult

CONFIRMED, REFUTED, INCONCLUSIVE = "confirmed", "refuted", "inconclusive"
METRICS = ("tpot", "ttft", "e2el", "itl")
PRIMARY = {SPECULATIVE: "tpot", APC: "ttft"}
ITL_CAVEAT = (
    "ITL is the gap between streamed chunks; with speculation one chunk carries several tokens, so ITL is "
    "not comparable between the arms: judge by TPOT and E2EL"
)


def rule_text(min_effect: float, primary: str = "tpot") -> str:
    name = primary.upper()
    return (
        f"confirmed if the 95% interval of the {name} ratio (candidate/baseline) lies below {1 - min_effect:.2f} and "
        f"that of the E2EL ratio below 1; refuted if the {name} interval lies above {1 - min_effect:.2f} or the E2EL "
        "interval above 1; otherwise inconclusive"
    )


@dataclass(frozen=True)
class Ratio:
    """Candidate/baseline ratio of a mean (below 1 = the candidate is faster), with its 95% interval."""

    metric: str
    baseline: float
    candidate: float
    ratio: float
    low: float
    high: float
    method: str

    def to_dict(self) -> dict:
        return {
            "metric": self.metric, "baseline": self.baseline, "candidate": self.candidate,
            "ratio": self.ratio, "ci95": [self.low, self.high], "method": self.method,
        }


def per_request(bench: dict, metric: str) -> np.ndarray:
    """Per-request values in ms of `metric` from a detailed bench result (ITL: every gap, pooled)."""
    try:
        ttfts = np.asarray(bench["ttfts"], dtype=float)
        if "latencies" in bench:
            e2els = np.asarray(bench["latencies"], dtype=float)
        else:  # vLLM <= 0.26 saves no latencies: the last token came TTFT plus every chunk gap after the start
            e2els = ttfts + np.asarray([sum(gaps) for gaps in bench["itls"]], dtype=float)
        outs = np.asarray(bench["output_lens"], dtype=float)
    except KeyError as exc:
        raise VllmError(f"bench result lacks {exc} (was --save-detailed passed?)") from exc
    if metric == "ttft":
        return ttfts * 1000
    if metric == "e2el":
        return e2els * 1000
    if metric == "tpot":
        values = np.full(ttfts.shape, np.nan)
        many = outs > 1
        values[many] = (e2els[many] - ttfts[many]) / (outs[many] - 1) * 1000
        return values
    if metric == "itl":
        return np.asarray([gap for gaps in bench["itls"] for gap in gaps], dtype=float) * 1000
    raise ValueError(metric)


def _paired(base: Sequence[dict], cand: Sequence[dict]) -> bool:
    """Whether request i is the same request in both arms of every trial (same input and output lengths)."""
    return all(
        b.get("input_lens") == c.get("input_lens") and b.get("output_lens") == c.get("output_lens")
        for b, c in zip(base, cand)
    )


def bootstrap_ratio(metric: str, base: Sequence[dict], cand: Sequence[dict], *, resamples: int, seed: int) -> Ratio:
    """Ratio of means with a percentile interval, resampling requests within each trial (paired if possible)."""
    rng = np.random.default_rng(seed)
    b_trials = [per_request(bench, metric) for bench in base]
    c_trials = [per_request(bench, metric) for bench in cand]
    paired = metric != "itl" and _paired(base, cand)
    if paired:  # drop requests without a value (TPOT of 1-token outputs) from both arms alike
        keep = [~(np.isnan(b) | np.isnan(c)) for b, c in zip(b_trials, c_trials)]
        b_trials = [b[k] for b, k in zip(b_trials, keep)]
        c_trials = [c[k] for c, k in zip(c_trials, keep)]
    else:
        b_trials = [b[~np.isnan(b)] for b in b_trials]
        c_trials = [c[~np.isnan(c)] for c in c_trials]
    if not all(len(x) for x in b_trials + c_trials):
        raise VllmError(f"no {metric.upper()} values in a bench result (all requests had one output token?)")
    b_all, c_all = np.concatenate(b_trials), np.concatenate(c_trials)
    ratios = np.empty(resamples)
    for i in range(resamples):
        b_sum = c_sum = 0.0
        b_n = c_n = 0
        for b, c in zip(b_trials, c_trials):
            b_idx = rng.integers(0, len(b), len(b))
            c_idx = b_idx if paired else rng.integers(0, len(c), len(c))
            b_sum += b[b_idx].sum()
            c_sum += c[c_idx].sum()
            b_n += len(b_idx)
            c_n += len(c_idx)
        ratios[i] = (c_sum / c_n) / (b_sum / b_n)
    low, high = np.percentile(ratios, [2.5, 97.5])
    method = "paired bootstrap over requests, stratified by trial" if paired else "bootstrap over requests, stratified by trial"
    return Ratio(metric, float(b_all.mean()), float(c_all.mean()), float(c_all.mean() / b_all.mean()),
                 float(low), float(high), f"{method}, {resamples} resamples")


def throughput_ratio(base: Sequence[dict], cand: Sequence[dict], *, resamples: int, seed: int) -> Ratio:
    """Output tokens/s ratio (above 1 = the candidate is faster); the interval resamples whole trials."""
    b = np.array([bench["output_throughput"] for bench in base], dtype=float)
    c = np.array([bench["output_throughput"] for bench in cand], dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(b), (resamples, len(b)))
    ratios = c[idx].mean(axis=1) / b[idx].mean(axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return Ratio("output_throughput", float(b.mean()), float(c.mean()), float(c.mean() / b.mean()), float(low),
                 float(high), f"bootstrap over {len(b)} trials (few trials: the interval is about their range)")


def _sum(snapshots: Sequence[MetricsSnapshot]) -> MetricsSnapshot:
    total = MetricsSnapshot()
    for snap in snapshots:
        total = total + snap
    return total


def measured_figures(metrics: MetricsSnapshot) -> dict:
    """Speculation and prefix-cache figures of one arm over all its trials, from /metrics differences."""
    gen, acc = metrics.generation_tokens, metrics.spec_accepted_tokens
    return {
        "acceptance_rate": metrics.acceptance_rate,
        "mean_acceptance_length": metrics.mean_acceptance_length,
        "tokens_per_step": gen / (gen - acc) if metrics.has_spec_decode and gen > acc else None,
        "per_position_acceptance": list(metrics.per_position_acceptance),
        "apc_hit_rate": metrics.prefix_cache_hit_rate,
        "block_size": metrics.block_size,
        "counters": metrics.to_dict(),
    }


def controls(results: Sequence[StepResult], mode: str = SPECULATIVE) -> list[dict]:
    """Checks that the A/B was fair and exercised what it tests; each is {name, ok, detail}. A failed check
    makes the verdict inconclusive."""
    checks = []
    by_trial: dict[int, dict[str, StepResult]] = {}
    for result in results:
        by_trial.setdefault(result.trial, {})[result.arm] = result
    same_tokens = all(
        arms[BASELINE].bench.get("total_output_tokens") == arms[CANDIDATE].bench.get("total_output_tokens")
        for arms in by_trial.values()
    )
    checks.append({"name": "same output tokens in both arms", "ok": same_tokens,
                   "detail": "--ignore-eos with the logged lengths makes both arms generate the same tokens"})
    completed = all(r.bench.get("completed") == r.bench.get("num_prompts") and not r.bench.get("failed") for r in results)
    checks.append({"name": "every request completed", "ok": completed, "detail": "no failed requests in any run"})
    base_spec = any(r.metrics.spec_drafts for r in results if r.arm == BASELINE)
    checks.append({"name": "baseline does not speculate", "ok": not base_spec,
                   "detail": "the baseline server's spec-decode counters stayed at zero"})
    if mode == APC:
        base_hits = any(r.metrics.prefix_cache_hits for r in results if r.arm == BASELINE)
        checks.append({"name": "baseline reads no prefix cache", "ok": not base_hits,
                       "detail": "the baseline server (--no-enable-prefix-caching) counted no prefix-cache hits"})
        cand_hits = all(r.metrics.prefix_cache_hits > 0 for r in results if r.arm == CANDIDATE)
        checks.append({"name": "candidate hit the prefix cache", "ok": cand_hits,
                       "detail": "the candidate's /metrics counted prefix-cache hits in every trial (only full "
                                 "KV blocks hit: prompts must share a prefix of at least one block)"})
    else:
        cand_drafts = all(r.metrics.spec_drafts > 0 for r in results if r.arm == CANDIDATE)
        checks.append({"name": "candidate proposed drafts", "ok": cand_drafts,
                       "detail": "the candidate's /metrics counted drafts in every trial (else nothing was tested)"})
    counted = all(r.metrics.generation_tokens >= r.bench.get("total_output_tokens", 0) for r in results)
    checks.append({"name": "server counted the bench's tokens", "ok": counted,
                   "detail": "/metrics generation tokens between the scrapes >= the bench's output tokens"})
    return checks


def decide(primary: Ratio, e2el: Ratio, checks: list[dict], min_effect: float) -> tuple[str, str]:
    """Apply the rule (module docstring) with `primary` (TPOT or TTFT); returns (verdict, reason)."""
    failed = [check["name"] for check in checks if not check["ok"]]
    if failed:
        return INCONCLUSIVE, "control failed: " + "; ".join(failed)
    bar, name = 1 - min_effect, primary.metric.upper()
    shown = f"{name} ratio {primary.ratio:.3f} [{primary.low:.3f}, {primary.high:.3f}]"
    if primary.high < bar and e2el.high < 1:
        return CONFIRMED, f"{shown} < {bar:.2f}, E2EL also lower"
    if primary.low > bar:
        return REFUTED, f"{shown} excludes a gain of {min_effect:.0%}"
    if e2el.low > 1:
        return REFUTED, f"E2EL ratio {e2el.ratio:.3f} [{e2el.low:.3f}, {e2el.high:.3f}]: requests got slower end to end"
    return INCONCLUSIVE, (
        f"{shown}, E2EL ratio {e2el.ratio:.3f} [{e2el.low:.3f}, {e2el.high:.3f}]: the intervals do not settle it; "
        "add trials or requests"
    )


def compare_predictions(predicted: dict, measured: dict, ratios: dict[str, Ratio], mode: str) -> list[dict]:
    """Rows of predicted versus measured for the figures the engine predicts (absent predictions: None)."""
    figures = [("apc_hit_rate", "APC hit rate")]
    if mode == SPECULATIVE:
        figures = [("acceptance_rate", "acceptance rate"), ("mean_acceptance_length", "mean acceptance length"),
                   ("tokens_per_step", "tokens per target step"), *figures]
    rows = [{"figure": label, "key": key, "predicted": predicted.get(key), "measured": measured.get(key)}
            for key, label in figures]
    primary = PRIMARY[mode]
    rows.append({"figure": f"{primary.upper()} ratio (candidate/baseline)", "key": f"{primary}_ratio",
                 "predicted": predicted.get(f"{primary}_ratio"), "measured": ratios[primary].ratio})
    return rows


def build_verdict(results: Sequence[StepResult], *, mode: str = SPECULATIVE, predicted: dict | None = None,
                  min_effect: float = 0.02, resamples: int = 2000, seed: int = 0) -> dict:
    """The verdict section of the record: ratios, controls, verdict and reason, predicted vs measured."""
    base = [r.bench for r in results if r.arm == BASELINE]
    cand = [r.bench for r in results if r.arm == CANDIDATE]
    if not base or len(base) != len(cand):
        raise VllmError(f"need the same number of baseline and candidate runs, got {len(base)} and {len(cand)}")
    ratios = {m: bootstrap_ratio(m, base, cand, resamples=resamples, seed=seed) for m in METRICS}
    ratios["output_throughput"] = throughput_ratio(base, cand, resamples=resamples, seed=seed)
    checks = controls(results, mode)
    verdict, reason = decide(ratios[PRIMARY[mode]], ratios["e2el"], checks, min_effect)
    measured = {
        BASELINE: measured_figures(_sum([r.metrics for r in results if r.arm == BASELINE])),
        CANDIDATE: measured_figures(_sum([r.metrics for r in results if r.arm == CANDIDATE])),
    }
    # Predictions compare with the candidate's figures; in the speculative A/B both arms run APC alike and the
    # baseline's hit rate is the one without speculation's look-ahead effects.
    measured_view = dict(measured[CANDIDATE])
    if mode == SPECULATIVE:
        measured_view["apc_hit_rate"] = measured[BASELINE]["apc_hit_rate"]
    return {
        "mode": mode,
        "primary_metric": PRIMARY[mode],
        "verdict": verdict,
        "reason": reason,
        "rule": rule_text(min_effect, PRIMARY[mode]),
        "min_effect": min_effect,
        "ratios": {name: ratio.to_dict() for name, ratio in ratios.items()},
        "itl_caveat": ITL_CAVEAT if mode == SPECULATIVE else None,
        "controls": checks,
        "measured": measured,
        "predicted_vs_measured": compare_predictions(predicted or {}, measured_view, ratios, mode),
    }
