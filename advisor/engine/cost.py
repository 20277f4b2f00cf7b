"""Roofline cost model of one vLLM engine step, calibrated on real H200 measurements.

A decode step streams every weight once and every sequence's KV cache once (memory time), multiplies each
scheduled token through the weights (compute time), and pays a fixed per-step overhead (scheduler, sampler,
kernel launches). On the H200 the extra cost of verifying 4 more tokens per sequence is +12% at
concurrency 1 and x2.6 at 128 (gpu-h200-measurements.md): a pure max(memory, compute) roofline would call
those tokens free below about 150 tokens per step, so the model ADDS compute time to memory time (little
overlap at decode-sized GEMMs, which the measurements confirm). Prefills of newly arrived requests share the
step with running decodes: that interference is why the measured TPOT (15.9 ms) exceeds the ITL (13.28 ms)
at concurrency 128.

step_ms = t0 + t_seq * batch + t_spec[speculating] + t_draft * draft tokens
        + t_eager * layers[tokens > graph capture]
        + weight bytes / (bandwidth * e_w) + KV bytes read / (bandwidth * e_kv)
        + decode tokens * FLOPs/token / (peak * e_decode)
        + prefill tokens * FLOPs/token / (peak * e_prefill)

TPOT = step_ms / tokens emitted per sequence per step (1 without speculation, the acceptance length with).
docs/engine.md derives every term; the constants below are fitted by scripts/fit_cost.py to the measured
points in advisor/data/measurements/ (CostModel.step_terms gives each point's features).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from advisor.engine.knowledge import DraftSpec
from advisor.hardware import GpuSpec, ModelSpec, kv_bytes_per_token_per_rank, weight_bytes_per_rank


@dataclass(frozen=True)
class Calibration:
    """Efficiency factors and overheads; GPU-independent, applied to any GPU's spec-sheet figures.

    Each is one physical term of a step (docs/engine.md, "Cost model"): fitted to measurements, never set by
    hand, except draft_forward_overhead_ms and async_scheduling_saving_ms (see their comments).
    """

    step_overhead_ms: float  # t0: CPU-side cost of one step (V1 runner, async scheduling off)
    bandwidth_efficiency: float  # e_w: achieved share of spec-sheet HBM bandwidth streaming the weights
    decode_compute_efficiency: float  # e_decode: achieved share of dense bf16 peak for decode-sized GEMMs
    prefill_compute_efficiency: float  # e_prefill: same for prefill chunks (large GEMMs)
    speculation_overhead_ms: float  # t_spec: proposer bookkeeping + rejection sampler per step
    eager_penalty_ms: float  # t_eager per layer: a step above the largest captured CUDA graph launches kernels
    cuda_graph_max_tokens: int  # vLLM's ceiling on captured graphs (tokens per step); see captured_graph_max
    async_scheduling_saving_ms: float  # what async scheduling saves per step (methods that keep it)
    draft_forward_overhead_ms: float  # launch cost of one captured draft forward (not calibrated here)
    source: str
    kv_bandwidth_efficiency: float = 0.90  # e_kv: achieved share of HBM bandwidth reading KV (paged attention)
    per_sequence_ms: float = 0.0  # t_seq: CPU cost per running sequence per step (input prep, output handling)
    per_draft_token_ms: float = 0.0  # t_draft: proposer + rejection-sampler bookkeeping per draft token per step


# Fitted by scripts/fit_cost.py (two linear programs: the smallest bound on every point's relative error, then
# the least total error within 2% of that bound) to the calibrated shapes' measurements in
# advisor/data/measurements/h200_vllm0.26: vLLM 0.26.0 on one H200, the Llama-3.2-3B, Llama-3.1-8B and
# Qwen2.5-14B shapes, k = 0, 1, 2, 4, 8, inputs 128 / 512 / 2048, concurrency 1 to 128 (points.csv: 89 cells of
# runs reference, w1, w3 and w4, a cell's figure the median of its repeats, each priced by replaying its bench
# run's schedule, advisor.engine.calibration_data) and six open-loop runs of the 8B shape at 10-45 requests/s
# (open_loop.csv, each priced by `open_loop`'s own steady state). Worst point 14.9%; the 1.5B shape's cells (not
# fitted: EXCLUDED_SHAPES) are within 33%; docs/engine.md lists every residual and the hold-out experiments. The
# compute and KV factors come out above 1: decode GEMMs and KV reads overlap the weight stream, which the
# additive form charges twice, so these are fitted factors, not achieved shares of peak.
# async_scheduling_saving_ms = 6.66 - 4.97 ms, the reference note (V1 without async vs MRv2 with async).
H200_CALIBRATION = Calibration(
    step_overhead_ms=2.527,
    bandwidth_efficiency=0.8836,
    decode_compute_efficiency=1.268,
    prefill_compute_efficiency=0.8654,
    speculation_overhead_ms=0.1673,
    eager_penalty_ms=0.1523,
    cuda_graph_max_tokens=512,
    async_scheduling_saving_ms=1.69,
    draft_forward_overhead_ms=0.15,
    source="H200 measurements, vLLM 0.26.0, 2026-12-02 to 04 (advisor/data/measurements/h200_vllm0.26)",
    kv_bandwidth_efficiency=1.685,
    per_sequence_ms=0.02305,
    per_draft_token_ms=0.009629,
)


@functools.lru_cache(maxsize=None)  # pure, and called for every priced step with a handful of distinct arguments
def captured_graph_max(ceiling: int, max_num_seqs: int, k: int) -> int:
    """The largest step (tokens) vLLM 0.26 runs as a captured CUDA graph. The capture maximum is
    min(max_num_seqs * (1 + k) * 2, ceiling) (VllmConfig._set_cudagraph_sizes, vllm/config/vllm.py), over the
    sizes 1, 2, 4, multiples of 8 below 256, then of 16; with k drafts each size is rounded up to a multiple
    of 1 + k and those above the maximum are dropped (CompilationConfig.adjust_cudagraph_sizes_for_spec_decode):
    512 without drafts at --max-num-seqs 256 but 256 at 128; 500 with k=4, 504 with k=8."""
    top = min(max_num_seqs * (1 + k) * 2, ceiling)
    sizes = [size for size in [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)] if size <= top]
    if k > 0:
        sizes = [size for size in (-(-size // (1 + k)) * (1 + k) for size in sizes) if size <= top] or [1 + k]
    return max(sizes)


# The --max-num-seqs the H200 measurements ran with: a deployment's running batch when it does not give one.
DEFAULT_MAX_NUM_SEQS = 256
# Weight bytes per GPU of the smallest shape the calibration is fitted to (the Llama-3.2-3B shape with the
# measurements' 151,669-token vocabulary, tied embeddings: 3.28 G parameters in bf16); tests pin it to the
# table. Below it a step is mostly the engine's CPU work, which the H200 runs of a 1.5B shape reproduced only
# within about 30% (advisor.engine.calibration_data.EXCLUDED_SHAPES), so predictions there are less certain.
SMALLEST_CALIBRATED_WEIGHT_BYTES = 6.569e9


@dataclass(frozen=True)
class StepLoad:
    """What one engine step carries, averaged over steps."""

    batch: float  # running sequences
    tokens_per_seq: float  # tokens verified per sequence (1 + drafted tokens)
    mean_context: float  # tokens of KV cache each sequence reads
    prefill_tokens: float = 0.0  # prompt tokens of newly arrived requests computed in the same step
    speculative: bool = False
    async_scheduling: bool = False
    draft_ms: float = 0.0
    scale: float = 1.0  # measured over fitted step time for this setting (advisor.engine.history); 1: the fit
    # Tokens of one prefill chunk (0: prefill_tokens, one concrete step). In a steady state the mean
    # prefill_tokens arrive as whole chunks on prefill_tokens / prefill_chunk of the steps; a step whose
    # decode and prefill tokens together exceed the largest captured CUDA graph runs without graphs.
    prefill_chunk: float = 0.0


@dataclass(frozen=True)
class LoadPoint:
    """The steady state at one load: batch, mean step, TPOT, throughput."""

    batch: float
    step_ms: float
    tpot_ms: float
    ttft_ms: float
    output_tps: float
    prefill_tokens_per_step: float
    saturated: bool = False

    def to_dict(self) -> dict:
        return {
            "batch": round(self.batch, 2),
            "step_ms": round(self.step_ms, 3),
            "tpot_ms": round(self.tpot_ms, 3),
            "ttft_ms": round(self.ttft_ms, 2),
            "output_tps": round(self.output_tps, 1),
            "prefill_tokens_per_step": round(self.prefill_tokens_per_step, 1),
            "saturated": self.saturated,
        }


class CostModel:
    """Step, prefill and draft times of one target model on one GPU type with tensor parallelism `tp`.

    Tensor parallelism divides weight bytes, KV heads and FLOPs across GPUs; all-reduce time is not modelled
    (it adds a little per layer, so TP predictions are optimistic).
    """

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int = 1, calibration: Calibration = H200_CALIBRATION,
                 max_num_seqs: int = DEFAULT_MAX_NUM_SEQS):
        if tp < 1:
            raise ValueError("tp must be >= 1")
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.cal = calibration
        self.max_num_seqs = max_num_seqs  # the server's --max-num-seqs: it sets the largest captured CUDA graph
        # The engine prices the same steps and steady states many times over (every candidate at two rates,
        # per batch size, per segment; about 24,000 steps, 17,000 of them distinct, for one ShareGPT run).
        # Step times and open-loop solves are pure functions of their inputs and of the fields above, which
        # are never reassigned: memoized per model, they return the very floats a fresh solve gives.
        self._coefficients = self._calibration_coefficients()
        self._steps: dict[StepLoad, float] = {}
        self._open_loops: dict[tuple, LoadPoint] = {}
        # The model's sizes, read once: ModelSpec's properties recompute them on every access (76,000 reads
        # for one ShareGPT run, a quarter of the engine's time); the same expressions, so the same floats.
        self._active_params = model.matmul_params
        self._lm_head_params = model.lm_head_params
        self._read_params = max(model.total_params - (0 if model.tie_word_embeddings else self._lm_head_params),
                                self._active_params)
        self._kv_bytes_per_token = kv_bytes_per_token_per_rank(model, tp)

    # -- per-token quantities ----------------------------------------------------------------------------
    def weight_bytes(self, tokens_in_step: float) -> float:
        """Weight bytes one GPU streams per step. MoE experts are read when any token routes to them."""
        active, total = self._active_params, self._read_params
        if total > active:
            untouched = (1.0 - active / total) ** max(tokens_in_step, 1.0)
            params_read = active + (total - active) * (1.0 - untouched)
        else:
            params_read = active
        return weight_bytes_per_rank(self.model, self.tp, params_read)

    def kv_bytes_per_token(self, context: float) -> float:
        """KV bytes one GPU reads per token of context (sliding-window layers read at most their window)."""
        model = self.model
        per_token = self._kv_bytes_per_token
        if model.sliding_window and context > 0:
            windowed = min(context, model.sliding_window) / context
            per_token *= (1 - model.sliding_window_share) + model.sliding_window_share * windowed
        return per_token

    def flops_per_token(self, context: float, with_lm_head: bool = True) -> float:
        """2 FLOPs per active weight + attention (QK^T and PV: 4 * heads * head_dim * context per layer)."""
        model = self.model
        params = self._active_params - (0.0 if with_lm_head else self._lm_head_params)
        attention = 4.0 * model.num_layers * model.num_heads * model.head_dim * context
        return (2.0 * params + attention) / self.tp

    # -- steps ---------------------------------------------------------------------------------------------
    def step_terms(self, load: StepLoad) -> dict[str, float]:
        """The physical features of one step, each multiplied by one calibration coefficient in `step_ms`:
        counts (fixed, per sequence, speculating, layers run without CUDA graphs: vLLM pads a step's tokens,
        decode and prefill together, to a captured size, and runs a larger step without graphs) and times at 100% of the
        spec sheet (weight bytes and KV bytes over bandwidth, FLOPs over dense bf16 peak). scripts/fit_cost.py
        fits the coefficients to measured points through this same function."""
        batch = max(load.batch, 1.0)
        decode_tokens = batch * load.tokens_per_seq
        chunk = load.prefill_chunk or load.prefill_tokens
        drafts = max(round(load.tokens_per_seq) - 1, 0) if load.speculative else 0  # the server's k
        graph_max = captured_graph_max(self.cal.cuda_graph_max_tokens, self.max_num_seqs, drafts)
        if decode_tokens > graph_max:
            eager_share = 1.0
        elif chunk > 0 and decode_tokens + chunk > graph_max:
            eager_share = min(load.prefill_tokens / chunk, 1.0)  # the steps that carry a prefill chunk
        else:
            eager_share = 0.0
        kv_bytes = batch * load.mean_context * self.kv_bytes_per_token(load.mean_context)
        return {
            "fixed": 1.0,
            "per_sequence": batch,
            "speculation": 1.0 if load.speculative else 0.0,
            "draft_tokens": batch * (load.tokens_per_seq - 1.0) if load.speculative else 0.0,
            "eager_layers": self.model.num_layers * eager_share,
            "weight_read": self.weight_bytes(decode_tokens) / self.gpu.bandwidth * 1e3,
            "kv_read": kv_bytes / self.gpu.bandwidth * 1e3,
            "decode_compute": decode_tokens * self.flops_per_token(load.mean_context) / self.gpu.bf16_flops * 1e3,
            "prefill_compute": load.prefill_tokens * self.flops_per_token(load.mean_context / 2, with_lm_head=False)
            / self.gpu.bf16_flops * 1e3,
        }

    def coefficients(self) -> dict[str, float]:
        """The calibration as one coefficient per `step_terms` feature (ms per count; 1 / efficiency)."""
        return dict(self._coefficients)

    def _calibration_coefficients(self) -> dict[str, float]:
        cal = self.cal
        return {
            "fixed": cal.step_overhead_ms,
            "per_sequence": cal.per_sequence_ms,
            "speculation": cal.speculation_overhead_ms,
            "draft_tokens": cal.per_draft_token_ms,
            "eager_layers": cal.eager_penalty_ms,
            "weight_read": 1.0 / cal.bandwidth_efficiency,
            "kv_read": 1.0 / cal.kv_bandwidth_efficiency,
            "decode_compute": 1.0 / cal.decode_compute_efficiency,
            "prefill_compute": 1.0 / cal.prefill_compute_efficiency,
        }

    def step_ms(self, load: StepLoad) -> float:
        """Mean time of one engine step carrying `load` (see the module docstring for the formula)."""
        step = self._steps.get(load)
        if step is None:
            step = sum(self._coefficients[name] * value for name, value in self.step_terms(load).items())
            if load.async_scheduling:
                step -= self.cal.async_scheduling_saving_ms
            step = (step + load.draft_ms) * load.scale
            self._steps[load] = step
        return step

    def prefill_ms(self, tokens: float, cached_tokens: float = 0.0) -> float:
        """One request's prefill alone (TTFT without queueing): APC hits skip their share of compute."""
        computed = max(tokens - cached_tokens, 1.0)
        flops = computed * self.flops_per_token(tokens / 2, with_lm_head=False)
        compute_ms = flops / (self.gpu.bf16_flops * self.cal.prefill_compute_efficiency) * 1e3
        memory_ms = self.weight_bytes(computed) / (self.gpu.bandwidth * self.cal.bandwidth_efficiency) * 1e3
        return self.cal.step_overhead_ms + memory_ms + compute_ms

    def draft_ms(self, draft: DraftSpec, batch: float, k: int, mean_context: float) -> float:
        """Drafting time per step: k sequential forwards of the draft (one for parallel drafts like dflash).

        A draft forward streams the draft's weights and computes its tokens; its launch overhead is an
        assumption (captured graphs), not a measurement, which is one reason model-draft candidates never
        get high confidence.
        """
        batch = max(batch, 1.0)
        forwards = 1 if draft.parallel else k
        tokens = batch * (k + 1 if draft.parallel else 1)
        bytes_read = draft.draft_params * 2.0 / self.tp
        memory_ms = bytes_read / (self.gpu.bandwidth * self.cal.bandwidth_efficiency) * 1e3
        compute_ms = tokens * 2.0 * draft.draft_params / self.tp / (
            self.gpu.bf16_flops * self.cal.decode_compute_efficiency
        ) * 1e3
        return forwards * (self.cal.draft_forward_overhead_ms + memory_ms + compute_ms)

    # -- steady states -------------------------------------------------------------------------------------
    def closed_loop(
        self,
        concurrency: int,
        input_len: float,
        output_len: float,
        tokens_per_seq: float = 1.0,
        tokens_per_step: float = 1.0,
        speculative: bool = False,
        async_scheduling: bool = False,
        draft_ms: float = 0.0,
        cached_share: float = 0.0,
        step_scale: float = 1.0,
        max_batched_tokens: int = 8192,
    ) -> LoadPoint:
        """`vllm bench serve --max-concurrency C --request-rate inf`: C requests always in flight.

        Each sequence emits `tokens_per_step` tokens per step, so a request lives output_len / AL steps and
        the other C - 1 requests bring (C - 1) * AL / output_len new prefills of input_len tokens per step,
        less the `cached_share` of prompt tokens the prefix cache serves; each arrives as one chunk of at most
        `max_batched_tokens`. `step_scale`: `StepLoad.scale`.
        """
        computed_prompt = input_len * (1.0 - cached_share)
        prefill_tokens = (concurrency - 1) * tokens_per_step / output_len * computed_prompt
        load = StepLoad(
            batch=concurrency,
            tokens_per_seq=tokens_per_seq,
            mean_context=input_len + output_len / 2,
            prefill_tokens=prefill_tokens,
            speculative=speculative,
            async_scheduling=async_scheduling,
            draft_ms=draft_ms,
            scale=step_scale,
            prefill_chunk=min(max(computed_prompt, 1.0), max_batched_tokens),
        )
        step = self.step_ms(load)
        tpot = step / tokens_per_step
        ttft = self.prefill_ms(input_len, input_len - computed_prompt) + step
        output_tps = concurrency * output_len / ((ttft + (output_len - 1) * tpot) / 1e3)
        return LoadPoint(concurrency, step, tpot, ttft, output_tps, prefill_tokens)

    def open_loop(
        self,
        request_rate: float,
        input_len: float,
        output_len: float,
        tokens_per_seq: float = 1.0,
        tokens_per_step: float = 1.0,
        speculative: bool = False,
        async_scheduling: bool = False,
        cached_share: float = 0.0,
        max_batch: int = DEFAULT_MAX_NUM_SEQS,
        max_batched_tokens: int = 8192,
        draft_for_batch=None,
        step_scale: float = 1.0,
    ) -> LoadPoint:
        """Steady state under Poisson-like arrivals at `request_rate` (Little's law: batch = rate x time).

        The running batch B solves B = rate * (TTFT + (output_len - 1) * TPOT(B)), where TPOT(B) is the step
        time at batch B (with the prefills that arrive during a step) over AL. APC hits (`cached_share` of
        prompt tokens) remove their prefill compute. When even `max_batch` sequences cannot keep up, the
        server saturates: the batch pins at `max_batch` and requests queue (`saturated`); a full batch admits
        new requests only as fast as running ones finish. Prefills share each step's `max_batched_tokens`
        budget with the decodes.
        `draft_for_batch(batch) -> ms` gives model-draft time per step; `step_scale`: `StepLoad.scale`.
        Solves without a draft function are memoized (the function is no key: two closures may differ).
        """
        key = (request_rate, input_len, output_len, tokens_per_seq, tokens_per_step, speculative, async_scheduling,
               cached_share, max_batch, max_batched_tokens, step_scale)
        if draft_for_batch is None and key in self._open_loops:
            return self._open_loops[key]
        solved = self._solve_open_loop(*key, draft_for_batch)
        if draft_for_batch is None:
            self._open_loops[key] = solved
        return solved

    def _solve_open_loop(self, request_rate: float, input_len: float, output_len: float, tokens_per_seq: float,
                         tokens_per_step: float, speculative: bool, async_scheduling: bool, cached_share: float,
                         max_batch: int, max_batched_tokens: int, step_scale: float, draft_for_batch) -> LoadPoint:
        """`open_loop`'s bisection (or the saturated fixed point), unmemoized."""
        output_len = max(output_len, 1.0)  # a request decodes at least the token that ends it (no 0 division)
        computed_prompt = input_len * (1.0 - cached_share)

        def point(batch: float, rate: float) -> tuple[float, float, float]:
            draft = draft_for_batch(batch) if draft_for_batch else 0.0
            chunk = min(max(computed_prompt, 1.0), max_batched_tokens)  # one arriving prompt's chunk
            base = StepLoad(batch, tokens_per_seq, input_len + output_len / 2, 0.0, speculative, async_scheduling, draft,
                            step_scale, chunk)
            without_prefill = self.step_ms(base)
            # A step's time is piecewise linear in its prefill tokens P: each token adds its compute, and up to
            # one chunk also its share of the launches of a step run without CUDA graphs (when decodes and a
            # chunk together exceed the largest graph), after which every step runs without graphs.
            at_chunk = self.step_ms(replace(base, prefill_tokens=chunk))
            below = (at_chunk - without_prefill) / chunk
            above = self.step_ms(replace(base, prefill_tokens=2.0 * chunk)) - at_chunk
            above /= chunk

            def step_with(prefill: float) -> float:
                if prefill <= chunk:
                    return without_prefill + below * prefill
                return at_chunk + above * (prefill - chunk)

            # Prefill tokens per step P = arrivals * step (the prompt tokens arriving during it), so the steady
            # step solves step = step_with(arrivals * step) on the piece it lands on. vLLM schedules running
            # decodes first and fills the rest of the token budget with prefills: P is at most that budget.
            arrivals = rate * computed_prompt / 1e3
            budget = max(max_batched_tokens - max(batch, 1.0) * tokens_per_seq, 0.0)
            step = without_prefill / (1.0 - below * arrivals) if below * arrivals < 1.0 else float("inf")
            if arrivals * step > chunk:
                slope = above * arrivals
                step = (at_chunk - above * chunk) / (1.0 - slope) if slope < 1.0 else float("inf")
            prefill_tokens = arrivals * step
            if prefill_tokens > budget:
                prefill_tokens = budget
                step = step_with(budget)
            ttft = self.prefill_ms(input_len, input_len - computed_prompt) + step
            return step, ttft, prefill_tokens

        def excess(batch: float) -> float:
            step, ttft, _ = point(batch, request_rate)
            return request_rate * (ttft + (output_len - 1) * step / tokens_per_step) / 1e3 - batch

        low, high = 0.0, float(max_batch)
        saturated = excess(high) > 0
        rate = request_rate
        if saturated:
            # Closed loop at max_batch: the admission rate solves rate = batch * AL / (output_len * step(rate)).
            batch = high
            rate = batch * tokens_per_step / output_len / (point(batch, 0.0)[0] / 1e3)
            for _ in range(50):
                step = point(batch, rate)[0]
                rate = 0.5 * rate + 0.5 * batch * tokens_per_step / output_len / (step / 1e3)
        else:
            for _ in range(60):
                middle = (low + high) / 2
                if excess(middle) > 0:
                    low = middle
                else:
                    high = middle
            batch = high
        step, ttft, prefill_tokens = point(batch, rate)
        tpot = step / tokens_per_step
        capacity_tps = max(batch, 1.0) * tokens_per_step / step * 1e3
        output_tps = min(capacity_tps, request_rate * output_len)
        return LoadPoint(batch, step, tpot, ttft, output_tps, prefill_tokens, saturated)
