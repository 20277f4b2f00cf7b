"""Load model: which batch the server runs at, and what each speculative setting yields there.

The gain of speculation depends on load (gpu-h200-measurements.md: AL 3.0 cuts TPOT 2.8x at concurrency 1
and nothing at 128), so every prediction is made at the batch the observed traffic produces: Little's law
over the observed request rate (typical: the mean; peak: the busiest 60 s) and lengths. Tokens per step per
method come from the exact replay of the logs (ngram, suffix) or from a cited prior (model drafts), and the
source travels with the number.
"""
from __future__ import annotations

from dataclasses import dataclass

from advisor.engine.cost import CostModel, LoadPoint, StepLoad
from advisor.engine.knowledge import AcceptancePrior, DraftSpec
from advisor.report import Replay
from advisor.vllm_vocab import ASYNC_INCOMPATIBLE_METHODS

# A new band starts only when another k beats the current band's k by more than this share of goodput:
# smaller differences are within the model's error and would only fragment the table.
BAND_SWITCH_GAIN = 0.03


@dataclass(frozen=True)
class SpecPoint:
    """One speculative setting with its expected tokens per step and verification cost."""

    method: str
    k: int
    config: dict  # the speculative-config JSON for this setting
    tokens_per_step: float  # tokens emitted per sequence per target step (end-to-end, incl. no-draft steps)
    verify_tokens_per_seq: float  # tokens verified per sequence per step: 1 + drafted tokens per step
    source: str
    from_replay: bool
    draft: DraftSpec | None = None
    mean_acceptance_length: float | None = None  # conditional on a draft (vLLM's metric)
    draft_step_share: float | None = None
    step_scale: float = 1.0  # measured over fitted step cost of this setting (advisor.engine.history); 1: the fit

    @property
    def async_scheduling(self) -> bool:
        """Whether the server keeps async scheduling with this method (lookup proposers switch it off)."""
        return self.method not in ASYNC_INCOMPATIBLE_METHODS

    def label(self) -> str:
        extras = []
        if "prompt_lookup_min" in self.config:
            extras.append(f"window {self.config['prompt_lookup_min']}-{self.config['prompt_lookup_max']}")
        if "suffix_decoding_max_tree_depth" in self.config:
            extras.append(f"tree depth {self.config['suffix_decoding_max_tree_depth']}")
        if self.config.get("model"):
            extras.append(str(self.config["model"]))
        return f"{self.method} k={self.k}" + (f" ({', '.join(extras)})" if extras else "")


def point_from_replay(entry: Replay) -> SpecPoint | None:
    """A replay result (the report's `replay` / `replay_sweep` entry) as a SpecPoint; None when it is empty."""
    if not entry.tokens_per_step or entry.num_output_tokens <= 0:
        return None
    config = dict(entry.config)
    steps = entry.num_output_tokens / entry.tokens_per_step
    k = int(config.get("num_speculative_tokens") or config.get("suffix_decoding_max_tree_depth") or 0)
    return SpecPoint(
        draft=measured_draft(entry),
        method=entry.method,
        k=k,
        config=config,
        tokens_per_step=float(entry.tokens_per_step),
        verify_tokens_per_seq=1.0 + entry.num_draft_tokens / steps,
        source=_replay_source(entry),
        from_replay=True,
        mean_acceptance_length=entry.mean_acceptance_length,
        draft_step_share=entry.draft_step_share,
    )


def _replay_source(entry: Replay) -> str:
    """Where a replayed point comes from, with the share of the log a sampled replay covered (a suffix window
    of a long log can be a few hundred of thousands of requests: the reader weighs the figure by it)."""
    if entry.num_requests < entry.population_requests:
        return (f"exact {entry.method} replay of {entry.num_requests:,} of {entry.population_requests:,} logged"
                f" requests ({entry.sampling.split(':')[0]})")
    return f"exact {entry.method} replay of {entry.num_requests:,} logged requests"


def measured_draft(entry: Replay) -> DraftSpec | None:
    """The draft of a measured draft_model replay (advisor.measure.draft), sized from its own weights, so the
    cost model counts its k forwards per target step (`CostModel.draft_ms`); None for lookup proposers."""
    draft = entry.draft
    if entry.method != "draft_model" or draft is None:
        return None
    return DraftSpec("draft_model", draft.model, (), float(draft.params), False,
                     f"{draft.model}: {draft.params:,} parameters counted from its weights")


def points_from_prior(prior: AcceptancePrior, draft: DraftSpec) -> list[SpecPoint]:
    """Points for a model draft from a published prior, for the k the prior measured (no extrapolation);
    model drafts propose k tokens at every step."""
    points = []
    for k in range(1, len(prior.per_position) + 1):
        config: dict = {"method": draft.method, "num_speculative_tokens": k}
        if draft.model:
            config["model"] = draft.model
        points.append(
            SpecPoint(
                method=draft.method,
                k=k,
                config=config,
                tokens_per_step=prior.tokens_per_step(k),
                verify_tokens_per_seq=k + 1.0,
                source=f"prior, needs verification: {prior.source}",
                from_replay=False,
                draft=draft,
            )
        )
    return points


@dataclass(frozen=True)
class Workload:
    """What the load model needs from the profile: rates (req/s) and mean lengths (tokens)."""

    typical_rate: float
    peak_rate: float
    input_len: float
    output_len: float
    cached_share: float  # share of prompt tokens served from the prefix cache (APC replay)
    rate_source: str
    baseline_step_scale: float = 1.0  # measured over fitted step cost without speculation (advisor.engine.history)

    @property
    def mean_context(self) -> float:
        return self.input_len + self.output_len / 2

    def prefills(self, max_batched_tokens: int = 8192) -> Prefills:
        """The prompt chunks this workload's sequences bring to each step in a steady state."""
        computed = self.input_len * (1.0 - self.cached_share)
        return Prefills(computed / max(self.output_len, 1.0), min(max(computed, 1.0), max_batched_tokens))


def evaluate(
    cost: CostModel,
    workload: Workload,
    rate: float,
    point: SpecPoint | None,
    max_batch: int,
    apc: bool = True,
) -> LoadPoint:
    """Steady state at `rate` with speculative setting `point` (None = no speculation, async scheduling on)."""
    cached = workload.cached_share if apc else 0.0
    if point is None:
        return cost.open_loop(rate, workload.input_len, workload.output_len, async_scheduling=True,
                              cached_share=cached, max_batch=max_batch, step_scale=workload.baseline_step_scale)
    draft = point.draft
    draft_for_batch = (
        (lambda batch: cost.draft_ms(draft, batch, point.k, workload.mean_context)) if draft is not None else None
    )
    return cost.open_loop(
        rate,
        workload.input_len,
        workload.output_len,
        tokens_per_seq=point.verify_tokens_per_seq,
        tokens_per_step=point.tokens_per_step,
        speculative=True,
        async_scheduling=point.async_scheduling,
        cached_share=cached,
        max_batch=max_batch,
        draft_for_batch=draft_for_batch,
        step_scale=point.step_scale,
    )


def closed_loop_point(cost: CostModel, workload: Workload, concurrency: int, point: SpecPoint | None) -> LoadPoint:
    """Steady state with `concurrency` requests always in flight (`vllm bench serve --max-concurrency C`) and
    speculative setting `point` (None = no speculation, async scheduling on), at the workload's mean lengths."""
    if point is None:
        return cost.closed_loop(concurrency, workload.input_len, workload.output_len, async_scheduling=True,
                                step_scale=workload.baseline_step_scale)
    draft_ms = cost.draft_ms(point.draft, concurrency, point.k, workload.mean_context) if point.draft else 0.0
    return cost.closed_loop(
        concurrency,
        workload.input_len,
        workload.output_len,
        tokens_per_seq=point.verify_tokens_per_seq,
        tokens_per_step=point.tokens_per_step,
        speculative=True,
        async_scheduling=point.async_scheduling,
        draft_ms=draft_ms,
        step_scale=point.step_scale,
    )


@dataclass(frozen=True)
class Prefills:
    """The prompts a batch's sequences bring in a steady state: `prompt_per_output` prompt tokens computed per
    output token (prompt not served by the prefix cache / output length), arriving as chunks of `chunk` tokens."""

    prompt_per_output: float = 0.0
    chunk: float = 0.0

    def load(self, batch: float, tokens_per_step: float) -> dict[str, float]:
        """StepLoad fields: each of `batch` sequences emits `tokens_per_step` and is replaced when it ends."""
        return {"prefill_tokens": batch * tokens_per_step * self.prompt_per_output, "prefill_chunk": self.chunk}


def goodput(cost: CostModel, batch: int, point: SpecPoint | None, mean_context: float,
            speculative_server: bool = False, baseline_scale: float = 1.0, prefills: Prefills = Prefills()) -> float:
    """Output tokens per ms at a fixed batch: batch * E(k) / T_step(batch, k) (SmartSpec, priors.md).

    `speculative_server`: the server runs a lookup proposer, so even k = 0 steps lose async scheduling.
    `baseline_scale`: the measured factor on steps without speculation (`Workload.baseline_step_scale`).
    `prefills`: the prompts that share the steps (a faster setting brings them faster).
    """
    if point is None:
        load = StepLoad(batch, 1.0, mean_context, async_scheduling=not speculative_server, scale=baseline_scale,
                        **prefills.load(batch, 1.0))
        return batch / cost.step_ms(load)
    draft = cost.draft_ms(point.draft, batch, point.k, mean_context) if point.draft else 0.0
    load = StepLoad(batch, point.verify_tokens_per_seq, mean_context, speculative=True,
                    async_scheduling=point.async_scheduling, draft_ms=draft, scale=point.step_scale,
                    **prefills.load(batch, point.tokens_per_step))
    return batch * point.tokens_per_step / cost.step_ms(load)


def best_k_per_batch(
    cost: CostModel, points: list[SpecPoint], mean_context: float, max_batch: int, baseline_scale: float = 1.0,
    prefills: Prefills = Prefills(),
) -> list[list[int]]:
    """The k (0 = no drafts) with the highest goodput for every batch size, as vLLM's
    `num_speculative_tokens_per_batch_size` bands `[start, end, k]` (inclusive, covering 1..max_batch).

    All points must share one method and proposer settings except k: a server has one config.
    """
    by_k = {point.k: point for point in points}
    speculative_server = bool(points) and not points[0].async_scheduling
    bands: list[list[int]] = []
    for batch in range(1, max_batch + 1):
        values = {0: goodput(cost, batch, None, mean_context, speculative_server, baseline_scale, prefills)}
        values.update({k: goodput(cost, batch, point, mean_context, prefills=prefills) for k, point in by_k.items()})
        best_k = max(values, key=values.__getitem__)
        if bands and values[bands[-1][2]] >= values[best_k] * (1 - BAND_SWITCH_GAIN):
            bands[-1][1] = batch
        else:
            bands.append([batch, batch, best_k])
    return bands


def k_for_batch(bands: list[list[int]], batch: float) -> int:
    """The k a `num_speculative_tokens_per_batch_size` table applies at `batch` (vLLM: inclusive ranges)."""
    size = max(1, round(batch))
    for start, end, k in bands:
        if start <= size <= end:
            return k
    return bands[-1][2]
