"""Replay a speculative config over tokenized requests and report what vLLM's counters would report.

The figures are exactly vLLM's (vllm/v1/spec_decode/metrics.py, `SpecDecodingStats.observe_draft`; a step
without a draft is not counted): acceptance_rate = accepted / draft tokens, mean_acceptance_length =
1 + accepted / drafts, per-position counts. Beyond them: draft_step_share = steps with a draft / decode
steps (ngram and suffix propose nothing when the context has no match) and tokens_per_step = output tokens
/ target steps (decode steps plus the prefill step), the end-to-end gain.

Accepted tokens are counted against the logged continuation. At a request's last step a draft may run past
the logged end, and vLLM counts what the model would accept there; those tokens are estimated from the
acceptance measured at the same draft positions (`expected_past_end`). Large logs are sampled (seeded):
ngram by a uniform sample of requests, suffix (whose global tree depends on every earlier output) by a
window of consecutive requests; the result says how and carries 95% bootstrap intervals over requests.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from advisor import limits
from advisor.errors import ConfigError
from advisor.measure import ngram, suffix
from advisor.measure.stats import json_float
from advisor.vllm_vocab import SPECULATIVE_KEYS

DEFAULT_MAX_REQUESTS = 20000
# Suffix trees are slow to build (0.15 M tokens/s here, arctic-inference's C++ 0.35 M; docs/replay.md): a log
# with more tokens than this is replayed over one arrival-order window that fits (seeded start).
SUFFIX_TOKEN_BUDGET = 300_000
WINDOW_WARMUP_SHARE = 0.25  # of a window's requests only feed the trees, so later ones see a warm global tree
BOOTSTRAP_RESAMPLES = 400
SWEEP_KS = tuple(range(1, 9))
# At most this many pieces of one replica's suffix replay run at once (`_suffix_cuts`): each holds its own
# trees (about 40 MiB on a full window), and more pieces feed the same outputs more often.
MAX_SUFFIX_PARTS = 4
SWEEP_WINDOWS = ((1, 3), (2, 4), (3, 5), (5, 5))
# Defaults of vLLM's SpeculativeConfig (vllm/config/speculative.py).
SUFFIX_DEFAULTS = {
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_max_cached_requests": 10000,
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
}
NGRAM_DEFAULT_LOOKUP = 5
# ngram_gpu applies the same rule in tensors (vllm/v1/spec_decode/ngram_proposer_gpu.py: earliest occurrence
# leaving room for a draft token, longest n with a match).
REPLAYABLE = ("ngram", "ngram_gpu", "suffix")
# Replayed by advisor.measure.draft with the draft model itself (torch; the `advise[draft]` extra).
DRAFT_METHOD = "draft_model"

TokenizedRequest = tuple[np.ndarray, np.ndarray]  # (prompt token ids, output token ids)


@dataclass(frozen=True, slots=True)
class Interval:
    """A 95% confidence interval."""

    low: float
    high: float

    def to_dict(self) -> dict:
        return {"low": json_float(self.low), "high": json_float(self.high)}


@dataclass(frozen=True, slots=True, eq=False)
class SpecReplay:
    """Counters of one replayed speculative config, as vLLM's /metrics would show them for this traffic.

    `config` is the normalised speculative config (vLLM's defaults filled in). `num_accepted_tokens` counts
    draft tokens that match the logged output; `num_accepted_past_end` is the expected number vLLM also
    accepts beyond the logged end at requests' last steps (`expected_past_end`); acceptance_rate and
    mean_acceptance_length include it. Ratios are None when their denominator is 0. `sampled` says whether
    only `num_requests` of `population_requests` were measured and `sampling` how; then `intervals` holds
    95% bootstrap intervals for the ratios.
    """

    method: str
    config: dict
    num_requests: int
    population_requests: int
    num_output_tokens: int
    decode_steps: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_past_end: float
    num_accepted_tokens_per_pos: tuple[int, ...]
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    draft_step_share: float | None
    tokens_per_step: float | None
    sampled: bool
    sampling: str = "all requests"
    intervals: dict[str, Interval] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "config": dict(self.config),
            "num_requests": self.num_requests,
            "population_requests": self.population_requests,
            "num_output_tokens": self.num_output_tokens,
            "decode_steps": self.decode_steps,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_past_end": json_float(self.num_accepted_past_end),
            "num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
            "acceptance_rate": json_float(self.acceptance_rate),
            "mean_acceptance_length": json_float(self.mean_acceptance_length),
            "draft_step_share": json_float(self.draft_step_share),
            "tokens_per_step": json_float(self.tokens_per_step),
            "sampled": self.sampled,
            "sampling": self.sampling,
            "confidence_95": {name: value.to_dict() for name, value in self.intervals.items()},
        }


@dataclass(frozen=True, slots=True, eq=False)
class ReplaySweep:
    """Replays of every swept config: ngram windows x k, and suffix x k."""

    replays: tuple[SpecReplay, ...]

    def to_dict(self) -> dict:
        return {"replays": [r.to_dict() for r in self.replays]}


def normalize_config(spec_config: dict) -> dict:
    """The config as vLLM would complete it, restricted to the methods a log can replay (ngram, suffix, and
    draft_model, which needs its draft: advisor.measure.draft).

    Mirrors vllm/config/speculative.py: dashes become underscores, unknown keys are an error, a missing
    method is `ngram` only when `model` says "ngram", prompt_lookup_min/max default to 5 and one copies the
    other, suffix's k defaults to its max tree depth. Raises ConfigError naming the key.
    """
    if not isinstance(spec_config, dict):
        raise ConfigError(f"speculative config must be a JSON object, got {type(spec_config).__name__}")
    config = {str(key).replace("-", "_"): value for key, value in spec_config.items()}
    unknown = sorted(set(config) - SPECULATIVE_KEYS)
    if unknown:
        raise ConfigError(f"speculative config: unknown key(s) {', '.join(unknown)} (vLLM rejects them)")
    method = config.get("method")
    if method is None and config.get("model") in ("ngram", "[ngram]"):
        method = "ngram"
    if method == "[ngram]":
        method = "ngram"
    if method not in (*REPLAYABLE, DRAFT_METHOD):
        raise ConfigError(
            f"speculative config: method {method!r} cannot be replayed from logs (its proposer reads the "
            f"target's hidden states); replayable methods: {', '.join((*REPLAYABLE, DRAFT_METHOD))}"
        )
    if config.get("num_speculative_tokens_per_batch_size") is not None:
        raise ConfigError(
            "speculative config: num_speculative_tokens_per_batch_size changes k with the live batch size, "
            "which a log replay does not know; replay each k separately"
        )
    config["method"] = method
    if method == DRAFT_METHOD:
        if not isinstance(config.get("model"), str) or not config["model"]:
            raise ConfigError("speculative config: draft_model needs \"model\" (the draft's folder or HF id)")
    elif method == "suffix":
        for key, default in SUFFIX_DEFAULTS.items():
            config.setdefault(key, default)
        config.setdefault("num_speculative_tokens", config["suffix_decoding_max_tree_depth"])
        limits.check_int(config, "suffix_decoding_max_tree_depth", 1, limits.MAX_SUFFIX_TREE_DEPTH)
        limits.check_int(config, "suffix_decoding_max_cached_requests", 0, limits.MAX_SUFFIX_CACHED_REQUESTS)
        for key, (low, high) in limits.SPECULATIVE_FRACTIONS.items():
            limits.check_number(config, key, low, high)
    else:
        low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
        if low is None and high is None:
            low = high = NGRAM_DEFAULT_LOOKUP
        config["prompt_lookup_min"] = high if low is None else low
        config["prompt_lookup_max"] = low if high is None else high
        limits.check_int(config, "prompt_lookup_min", 1, limits.MAX_PROMPT_LOOKUP)
        limits.check_int(config, "prompt_lookup_max", 1, limits.MAX_PROMPT_LOOKUP)
        if config["prompt_lookup_min"] > config["prompt_lookup_max"]:
            raise ConfigError(
                f"speculative config: prompt_lookup_min={config['prompt_lookup_min']} must be <= "
                f"prompt_lookup_max={config['prompt_lookup_max']}"
            )
    if config.get("num_speculative_tokens") is None:
        raise ConfigError(f"speculative config: num_speculative_tokens is required for {method}")
    limits.check_int(config, "num_speculative_tokens", 1, limits.MAX_SPECULATIVE_TOKENS)
    return config


def _lookup_config(spec_config: dict) -> dict:
    """normalize_config for the proposers replayed from the logs alone (not draft_model)."""
    config = normalize_config(spec_config)
    if config["method"] == DRAFT_METHOD:
        raise ConfigError("a draft_model config is replayed with its draft (advisor.measure.draft, `--draft`)")
    return config


def draft_replays(measurement, ks: Iterable[int], seed: int = 0, greedy: bool = True) -> list[SpecReplay]:
    """SpecReplay per k of a draft measurement (`advisor.measure.draft.measure_draft`): the same counters
    and ratios as the ngram replay, over the uniform sample of requests the draft was run on."""
    replays = []
    sampling = _uniform_note(len(measurement.chosen), measurement.fitting_requests)
    if not greedy:
        sampling += "; the log samples (temperature > 0): greedy acceptance, an upper-bound estimate"
    for k in ks:
        ki = measurement.ks.index(int(k))
        config = normalize_config({"method": DRAFT_METHOD, "model": measurement.info.name, "num_speculative_tokens": int(k)})
        replays.append(summarize(config, measurement.counters[:, ki], measurement.per_pos[ki, : int(k)],
                                 measurement.fitting_requests, seed, sampling))
    return replays


def replay_config(
    spec_config: dict,
    requests: Sequence[TokenizedRequest],
    max_model_len: int | None = None,
    max_requests: int | None = DEFAULT_MAX_REQUESTS,
    seed: int = 0,
    suffix_token_budget: int | None = SUFFIX_TOKEN_BUDGET,
    threads: int = 1,
    replicas: np.ndarray | None = None,
) -> SpecReplay:
    """Replays exactly this `--speculative-config` over `requests` (in arrival order; ngram, and suffix's
    replicas, on `threads`).

    ngram: at most `max_requests` requests, a seeded uniform sample (requests are independent).
    suffix: requests depend on earlier outputs (the global tree), so a log above `suffix_token_budget`
    tokens is replayed over one arrival-order window that fits (`suffix_window`), one global tree per
    replica (`replicas[i]`: the replica of request i; None: one).
    """
    config = _lookup_config(spec_config)
    k = config["num_speculative_tokens"]
    if config["method"] == "suffix":
        all_counters, all_per_pos, sampling = _suffix_counters(config, [k], requests, max_model_len,
                                                               suffix_token_budget, seed, replicas, threads)
        counters, per_pos = all_counters[:, 0], all_per_pos[0]
    else:
        chosen = sample_indices(len(requests), max_requests, seed)
        window = (config["prompt_lookup_min"], config["prompt_lookup_max"])
        picked = [requests[i] for i in chosen]
        all_counters, all_per_pos = ngram.replay_ngram(picked, [window], [k], max_model_len, threads)
        counters, per_pos = all_counters[:, 0, 0], all_per_pos[0, 0]
        sampling = _uniform_note(len(chosen), len(requests))
    return summarize(config, counters, per_pos[:k], len(requests), seed, sampling)


def sweep(
    requests: Sequence[TokenizedRequest],
    ks: Iterable[int] = SWEEP_KS,
    windows: Iterable[tuple[int, int]] = SWEEP_WINDOWS,
    include_suffix: bool = True,
    max_model_len: int | None = None,
    max_requests: int | None = DEFAULT_MAX_REQUESTS,
    seed: int = 0,
    suffix_token_budget: int | None = SUFFIX_TOKEN_BUDGET,
    suffix_ks: Iterable[int] | None = None,
    threads: int = 1,
    replicas: np.ndarray | None = None,
) -> ReplaySweep:
    """ngram for every window x k (one replay pass, on `threads` threads) and suffix (vLLM defaults) for
    every k of `suffix_ks` (default: `ks`; one pass, so adding vLLM's default k=24 here costs little more
    than one k; one global tree per replica of `replicas`, as in `replay_config`, the replicas on `threads`
    threads)."""
    ks = tuple(ks)
    windows = tuple(windows)
    chosen = sample_indices(len(requests), max_requests, seed)
    picked = [requests[i] for i in chosen]
    replays = []
    # The compiled kernels release the GIL: the suffix pass runs on the second core beside the ngram pass.
    with ThreadPoolExecutor(max_workers=1) as worker:
        if include_suffix:
            base = normalize_config({"method": "suffix"})
            chosen_ks = ks if suffix_ks is None else tuple(suffix_ks)
            suffix_job = worker.submit(_suffix_counters, base, chosen_ks, requests, max_model_len,
                                       suffix_token_budget, seed, replicas, threads)
        counters, per_pos = ngram.replay_ngram(picked, windows, ks, max_model_len, threads)
        for w, (low, high) in enumerate(windows):
            for ki, k in enumerate(ks):
                config = normalize_config(
                    {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": low, "prompt_lookup_max": high}
                )
                replays.append(summarize(config, counters[:, w, ki], per_pos[w, ki, :k], len(requests), seed,
                                         _uniform_note(len(chosen), len(requests))))
        if include_suffix:
            counters, per_pos, sampling = suffix_job.result()
            for ki, k in enumerate(chosen_ks):
                config = {**base, "num_speculative_tokens": k}
                replays.append(summarize(config, counters[:, ki], per_pos[ki, :k], len(requests), seed, sampling))
    return ReplaySweep(tuple(replays))


def kv_footprint(
    spec_config: dict, requests: Sequence[TokenizedRequest], max_model_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per request, under this speculative config: (tokens whose full blocks vLLM caches, KV slots reserved).

    vLLM hashes a request's full blocks up to its token count when it schedules a step
    (vllm/v1/core/kv_cache_manager.py `allocate_slots` -> `cache_blocks`), so the tokens its last step emits
    are never cached: prompt + output - 1 without speculation, fewer when the last step accepts drafts. Each
    step reserves slots for its draft tokens too. `advisor.measure.apc.simulate_apc(footprint=...)` uses
    both. Replays every request (suffix over the whole log, in order).
    """
    config = _lookup_config(spec_config)
    k = config["num_speculative_tokens"]
    if config["method"] == "suffix":
        counters, _, _ = _suffix_counters(config, [k], requests, max_model_len, None, 0)
        rows = counters[:, 0]
    else:
        window = (config["prompt_lookup_min"], config["prompt_lookup_max"])
        rows = ngram.replay_ngram(list(requests), [window], [k], max_model_len)[0][:, 0, 0]
    return rows[:, ngram.LAST_CONTEXT].copy(), rows[:, ngram.MAX_SLOTS].copy()


def _suffix_counters(
    config: dict, ks: Sequence[int], requests: Sequence[TokenizedRequest], max_model_len: int | None,
    token_budget: int | None, seed: int, replicas: np.ndarray | None = None, threads: int = 1,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Suffix replay over `suffix_window`; counters of the requests it speculates for, and a note.

    `replicas[i]`: the replica serving request i (advisor.measure.routing; None: one). Each replica has its
    own global tree of its own requests' outputs, so the window's requests replay per replica (on `threads`
    threads: the compiled replay releases the GIL) and the counters add (rows stay in request order)."""
    start, stop, first = suffix_window(requests, token_budget, seed)
    window = np.arange(start, stop)
    groups = [window] if replicas is None else [window[replicas[start:stop] == r]
                                               for r in np.unique(replicas[start:stop])]
    counters = np.zeros((stop - start, len(ks), ngram.COUNTER_COLUMNS), dtype=np.int64)
    per_pos = np.zeros((len(ks), max(ks)), dtype=np.int64)
    sizes = np.array([len(prompt) + len(output) for prompt, output in requests[start:stop]], dtype=np.int64)
    parts = max(1, min(threads // len(groups), MAX_SUFFIX_PARTS))
    jobs = [(rows, cut) for rows in groups for cut in _suffix_cuts(rows, sizes[rows - start], rows >= first, parts)]

    def replay(job: tuple[np.ndarray, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        rows, (begin, end) = job
        return suffix.replay_suffix(
            [requests[i] for i in rows[:end]],
            ks,
            max_tree_depth=config["suffix_decoding_max_tree_depth"],
            max_cached_requests=config["suffix_decoding_max_cached_requests"],
            max_spec_factor=float(config["suffix_decoding_max_spec_factor"]),
            min_token_prob=float(config["suffix_decoding_min_token_prob"]),
            max_model_len=max_model_len,
            speculate_for=begin + np.flatnonzero(rows[begin:end] >= first),
        )

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(jobs)))) as pool:
        results = list(pool.map(replay, jobs))
    for (rows, (begin, end)), (part_counters, part_per_pos) in zip(jobs, results):
        counters[rows[begin:end] - start] = part_counters[begin:end]
        per_pos += part_per_pos
    if stop - start == len(requests):
        note = "all requests"
    else:
        note = (f"arrival-order window: requests {start}..{stop - 1} replayed, {first}..{stop - 1} measured; "
                f"the global suffix tree holds only the window's earlier outputs")
    if len(groups) > 1:
        note += f"; one global suffix tree per replica ({len(groups)} replicas)"
    return counters[first - start :], per_pos, note


def _suffix_cuts(rows: np.ndarray, sizes: np.ndarray, measured: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """[begin, end) positions in `rows` (one replica's requests, in order) of up to `parts` pieces of about
    equal measured tokens, each replayed on its own: a piece's replay feeds the outputs of every request
    before it to the global tree without speculating (what the kernel does for a request it does not
    measure, the same tree operations in the same order), so the global tree each measured request sees,
    and its counters, are those of one replay of all the rows. The feeding costs about a tenth of a full
    replay, which the pieces pay again and again: hence a few pieces, not one per core."""
    weights = np.where(measured, sizes, 0).cumsum()
    if parts <= 1 or weights[-1] == 0:
        return [(0, rows.size)]
    ends = np.searchsorted(weights, weights[-1] * np.arange(1, parts) / parts, side="left") + 1
    cuts = np.unique(np.concatenate(([0], ends, [rows.size])))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def suffix_window(requests: Sequence[TokenizedRequest], token_budget: int | None, seed: int) -> tuple[int, int, int]:
    """(start, stop, first measured) of the requests a suffix replay covers.

    All of them when their tokens fit `token_budget`; else a window of consecutive requests (seeded random
    start) that fits, whose first WINDOW_WARMUP_SHARE only feed the trees. Requests sampled one by one would
    be exact only if every earlier output were still fed to the global tree, which costs as much as the
    whole replay.
    """
    count = len(requests)
    sizes = np.array([len(p) + len(o) for p, o in requests], dtype=np.int64)
    if token_budget is None or sizes.sum() <= token_budget:
        return 0, count, 0
    ends = np.cumsum(sizes)
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, count))
    base = ends[start - 1] if start else 0
    stop = int(np.searchsorted(ends, base + token_budget, side="right"))
    stop = max(stop, start + 1)
    if stop >= count:  # too close to the end: take the window that ends with the log instead
        stop = count
        start = int(np.searchsorted(ends, ends[-1] - token_budget, side="left")) + 1
        start = min(start, count - 1)
    first = start + int((stop - start) * WINDOW_WARMUP_SHARE)
    return start, stop, first


def _uniform_note(chosen: int, population: int) -> str:
    return "all requests" if chosen == population else f"uniform random sample of {chosen} requests"


def sample_indices(count: int, max_requests: int | None, seed: int) -> np.ndarray:
    """All indices, or a seeded uniform sample of `max_requests` of them in arrival order."""
    if max_requests is None or count <= max_requests:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, size=max_requests, replace=False))


def summarize(
    config: dict, counters: np.ndarray, per_pos: np.ndarray, population: int, seed: int = 0,
    sampling: str = "all requests",
) -> SpecReplay:
    """SpecReplay from per-request counters (the columns of `advisor.measure.ngram`) and per-position
    accepted counts."""
    counters = np.asarray(counters, dtype=np.int64).reshape(-1, ngram.COUNTER_COLUMNS)
    totals = counters.sum(axis=0)
    past_end = expected_past_end(counters, per_pos)
    # Extra columns for the ratios: prefill steps (requests with output) and expected tokens past the end.
    table = np.column_stack((counters, counters[:, ngram.OUTPUT_TOKENS] > 0, past_end)).astype(np.float64)
    ratios = _ratios(table.sum(axis=0)[None, :])
    sampled = counters.shape[0] < population
    intervals: dict[str, Interval] = {}
    if sampled and counters.shape[0] > 1:
        resampled = _ratios(_bootstrap_weights(counters.shape[0], seed) @ table)
        for name, values in resampled.items():
            finite = values[np.isfinite(values)]
            if finite.size:
                intervals[name] = Interval(float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5)))
    return SpecReplay(
        method=config["method"],
        config=config,
        num_requests=int(counters.shape[0]),
        population_requests=population,
        num_output_tokens=int(totals[ngram.OUTPUT_TOKENS]),
        decode_steps=int(totals[ngram.DECODE_STEPS]),
        num_drafts=int(totals[ngram.DRAFTS]),
        num_draft_tokens=int(totals[ngram.DRAFT_TOKENS]),
        num_accepted_tokens=int(totals[ngram.ACCEPTED]),
        num_accepted_past_end=float(past_end.sum()),
        num_accepted_tokens_per_pos=tuple(int(v) for v in per_pos),
        acceptance_rate=_single(ratios["acceptance_rate"]),
        mean_acceptance_length=_single(ratios["mean_acceptance_length"]),
        draft_step_share=_single(ratios["draft_step_share"]),
        tokens_per_step=_single(ratios["tokens_per_step"]),
        sampled=sampled,
        sampling=sampling,
        intervals=intervals,
    )


@lru_cache(maxsize=1)
def _bootstrap_weights(count: int, seed: int) -> np.ndarray:
    """BOOTSTRAP_RESAMPLES x count resampling weights (multinomial counts, as float64), read-only.

    Cached: a sweep summarizes dozens of configs over the same sampled requests, and drawing the weights
    (count binomials per resample) costs far more than applying them. Float64, because the product with
    the float64 table would cast integer weights again at every call (the counts are exact in float64, so
    the product is the same).
    """
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(count, np.full(count, 1 / count), size=BOOTSTRAP_RESAMPLES).astype(np.float64)
    weights.flags.writeable = False
    return weights


def expected_past_end(counters: np.ndarray, per_pos: np.ndarray) -> np.ndarray:
    """Per request, the expected number of accepted draft tokens beyond the logged end of its output.

    When the last step's draft matched all TAIL_AT remaining logged tokens and held TAIL_LEN > TAIL_AT
    tokens, vLLM verifies the rest against what the model would have generated next and counts what it
    accepts (vllm/v1/core/sched/scheduler.py: num_accepted = len(generated) - 1, before the stop check). The
    log does not hold those tokens, so each is counted as accepted with the conditional acceptance rate the
    replay measured at that draft position: P(pos i accepted | pos i-1 accepted) = per_pos[i] / per_pos[i-1].
    """
    drafts = counters[:, ngram.DRAFTS].sum()
    previous = np.concatenate(([drafts], per_pos[:-1])).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        conditional = np.where(previous > 0, per_pos / previous, 0.0)
    expected = np.zeros(counters.shape[0], dtype=np.float64)
    rows = np.flatnonzero(counters[:, ngram.TAIL_LEN] > 0)
    if rows.size == 0:
        return expected
    first, stop = counters[rows, ngram.TAIL_AT], counters[rows, ngram.TAIL_LEN]
    survive = np.ones(rows.size, dtype=np.float64)
    tail = np.zeros(rows.size, dtype=np.float64)
    # Position by position over all tail rows at once: the same products and sums, in the same order.
    for position in range(int(first.min()), int(stop.max())):
        active = (first <= position) & (position < stop)
        survive = np.where(active, survive * conditional[position], survive)
        tail = np.where(active, tail + survive, tail)
    expected[rows] = tail
    return expected


def _ratios(totals: np.ndarray) -> dict[str, np.ndarray]:
    """The four ratios for each row of summed counters (NaN where a denominator is 0); the row holds the
    counter columns, then prefill steps, then expected accepted tokens past the logged end."""
    drafts = totals[:, ngram.DRAFTS]
    draft_tokens = totals[:, ngram.DRAFT_TOKENS]
    accepted = totals[:, ngram.ACCEPTED] + totals[:, ngram.COUNTER_COLUMNS + 1]
    steps = totals[:, ngram.DECODE_STEPS]
    outputs = totals[:, ngram.OUTPUT_TOKENS]
    prefills = totals[:, ngram.COUNTER_COLUMNS]
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "acceptance_rate": accepted / draft_tokens,
            "mean_acceptance_length": 1 + accepted / drafts,
            "draft_step_share": drafts / steps,
            "tokens_per_step": outputs / (steps + prefills),
        }


def _single(values: np.ndarray) -> float | None:
    value = float(values[0])
    return value if np.isfinite(value) else None
