"""Roofline cost model of one vLLM engine step, calibrated on real H200 measurements.

A decode step streams every weight once and every sequence's KV cache once (memory time), multiplies each
scheduled token through the weights (compute time), and pays a fixed per-step overhead (scheduler, sampler,
kernel launches). On the H200 the extra cost of verifying 4 more tokens per sequence is +12% at
concurrency 1 and x2.6 at 128 (gpu-h200-measurements.md): a pure max(memory, compute) roofline would call
those tokens free below about 150 tokens per step, so the model ADDS compute time to memory time (little
overlap at decode-sized GEMMs, which the measurements confirm). Prefills of newly arrived requests share the
step with running decodes: that interference is why the measured TPOT (15.9 ms) exceeds the ITL (13.28 ms)
at concurrency 128.

step_ms = t0 + t_spec[speculating] + t_eager[tokens > graph capture]
        + (weight bytes + KV bytes) / (bandwidth * e_bw)
        + decode tokens * FLOPs/token / (peak * e_decode)
        + prefill tokens * FLOPs/token / (peak * e_prefill)

TPOT = step_ms / tokens emitted per sequence per step (1 without speculation, the acceptance length with).
docs/engine.md derives every term; the constants below are fitted once to the measurement table.
"""
from __future__ import annotations

from dataclasses import dataclass

from advisor.engine.knowledge import DraftSpec
from advisor.hardware import GpuSpec, ModelSpec, kv_bytes_per_token_per_rank, weight_bytes_per_rank


@dataclass(frozen=True)
class Calibration:
    """Efficiency factors and overheads; GPU-independent, applied to any GPU's spec-sheet figures."""

    step_overhead_ms: float  # t0: CPU-side cost of one step (V1 runner, async scheduling off)
    bandwidth_efficiency: float  # e_bw: achieved share of spec-sheet HBM bandwidth
    decode_compute_efficiency: float  # e_decode: achieved share of dense bf16 peak for decode-sized GEMMs
    prefill_compute_efficiency: float  # e_prefill: same for prefill chunks (large GEMMs)
    speculation_overhead_ms: float  # t_spec: proposer bookkeeping + rejection sampler per step
    eager_penalty_ms: float  # t_eager: a step above the largest captured CUDA graph runs without graphs
    cuda_graph_max_tokens: int  # largest captured graph (tokens per step)
    async_scheduling_saving_ms: float  # what async scheduling saves per step (methods that keep it)
    draft_forward_overhead_ms: float  # launch cost of one captured draft forward (not calibrated here)
    source: str


# Fitted by least squares (relative error) to the 8 median-TPOT cells of gpu-h200-measurements.md
# (vLLM 0.26.0, H200, Llama-3.1-8B shape with vocabulary 151,669, input 512, output 256, k=4 at AL 3.0),
# with e_bw bounded to <= 0.90 and e_prefill to <= 0.80 (what HBM and large bf16 GEMMs reach in practice).
# Worst cell error 4.5% (concurrency 32 without speculation); tests/test_engine_cost.py pins all eight.
# async_scheduling_saving_ms = 6.66 - 4.97 ms, the "Readings" note (V1 without async vs MRv2 with async).
H200_CALIBRATION = Calibration(
    step_overhead_ms=2.83,
    bandwidth_efficiency=0.90,
    decode_compute_efficiency=0.68,
    prefill_compute_efficiency=0.80,
    speculation_overhead_ms=0.99,
    eager_penalty_ms=7.3,
    cuda_graph_max_tokens=500,
    async_scheduling_saving_ms=1.69,
    draft_forward_overhead_ms=0.15,
    source="gpu-h200-measurements.md (vLLM 0.26.0 on one H200, 2026-12-02)",
)


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

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int = 1, calibration: Calibration = H200_CALIBRATION):
        if tp < 1:
            raise ValueError("tp must be >= 1")
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.cal = calibration

    # -- per-token quantities ----------------------------------------------------------------------------
    def weight_bytes(self, tokens_in_step: float) -> float:
        """Weight bytes one GPU streams per step. MoE experts are read when any token routes to them."""
        model = self.model
        active = model.matmul_params
        total = max(model.total_params - (0 if model.tie_word_embeddings else model.lm_head_params), active)
        if total > active:
            untouched = (1.0 - active / total) ** max(tokens_in_step, 1.0)
            params_read = active + (total - active) * (1.0 - untouched)
        else:
            params_read = active
        return weight_bytes_per_rank(model, self.tp, params_read)

    def kv_bytes_per_token(self, context: float) -> float:
        """KV bytes one GPU reads per token of context (sliding-window layers read at most their window)."""
        model = self.model
        per_token = kv_bytes_per_token_per_rank(model, self.tp)
        if model.sliding_window and context > 0:
            windowed = min(context, model.sliding_window) / context
            per_token *= (1 - model.sliding_window_share) + model.sliding_window_share * windowed
        return per_token

    def flops_per_token(self, context: float, with_lm_head: bool = True) -> float:
        """2 FLOPs per active weight + attention (QK^T and PV: 4 * heads * head_dim * context per layer)."""
        model = self.model
        params = model.matmul_params - (0.0 if with_lm_head else model.lm_head_params)
        attention = 4.0 * model.num_layers * model.num_heads * model.head_dim * context
        return (2.0 * params + attention) / self.tp

    # -- steps ---------------------------------------------------------------------------------------------
    def step_ms(self, load: StepLoad) -> float:
        """Mean time of one engine step carrying `load` (see the module docstring for the formula)."""
        cal = self.cal
        batch = max(load.batch, 1.0)
        decode_tokens = batch * load.tokens_per_seq
        memory_bytes = self.weight_bytes(decode_tokens) + batch * load.mean_context * self.kv_bytes_per_token(
            load.mean_context
        )
        memory_ms = memory_bytes / (self.gpu.bandwidth * cal.bandwidth_efficiency) * 1e3
        decode_ms = decode_tokens * self.flops_per_token(load.mean_context) / (
            self.gpu.bf16_flops * cal.decode_compute_efficiency
        ) * 1e3
        prefill_ms = load.prefill_tokens * self.flops_per_token(load.mean_context / 2, with_lm_head=False) / (
            self.gpu.bf16_flops * cal.prefill_compute_efficiency
        ) * 1e3
        overhead = cal.step_overhead_ms
        if load.async_scheduling:
            overhead -= cal.async_scheduling_saving_ms
        if load.speculative:
            overhead += cal.speculation_overhead_ms
        if decode_tokens > cal.cuda_graph_max_tokens:
            overhead += cal.eager_penalty_ms
        return overhead + memory_ms + decode_ms + prefill_ms + load.draft_ms

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
    ) -> LoadPoint:
        """`vllm bench serve --max-concurrency C --request-rate inf`: C requests always in flight.

        Each sequence emits `tokens_per_step` tokens per step, so a request lives output_len / AL steps and
        the other C - 1 requests bring (C - 1) * AL / output_len new prefills of input_len tokens per step.
        """
        prefill_tokens = (concurrency - 1) * tokens_per_step / output_len * input_len
        load = StepLoad(
            batch=concurrency,
            tokens_per_seq=tokens_per_seq,
            mean_context=input_len + output_len / 2,
            prefill_tokens=prefill_tokens,
            speculative=speculative,
            async_scheduling=async_scheduling,
            draft_ms=draft_ms,
        )
        step = self.step_ms(load)
        tpot = step / tokens_per_step
        ttft = self.prefill_ms(input_len) + step
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
        max_batch: int = 256,
        max_batched_tokens: int = 8192,
        draft_for_batch=None,
    ) -> LoadPoint:
        """Steady state under Poisson-like arrivals at `request_rate` (Little's law: batch = rate x time).

        The running batch B solves B = rate * (TTFT + (output_len - 1) * TPOT(B)), where TPOT(B) is the step
        time at batch B (with the prefills that arrive during a step) over AL. APC hits (`cached_share` of
        prompt tokens) remove their prefill compute. When even `max_batch` sequences cannot keep up, the
        server saturates: the batch pins at `max_batch` and requests queue (`saturated`); a full batch admits
        new requests only as fast as running ones finish. Prefills share each step's `max_batched_tokens`
        budget with the decodes.
        `draft_for_batch(batch) -> ms` gives model-draft time per step.
        """
        output_len = max(output_len, 1.0)  # a request decodes at least the token that ends it (no 0 division)
        computed_prompt = input_len * (1.0 - cached_share)

        def point(batch: float, rate: float) -> tuple[float, float, float]:
            draft = draft_for_batch(batch) if draft_for_batch else 0.0
            base = StepLoad(batch, tokens_per_seq, input_len + output_len / 2, 0.0, speculative, async_scheduling, draft)
            without_prefill = self.step_ms(base)
            per_prefill_token = (
                self.step_ms(StepLoad(batch, tokens_per_seq, base.mean_context, 1000.0, speculative, async_scheduling, draft))
                - without_prefill
            ) / 1000.0
            # Prefill tokens per step = rate * step * computed prompt, so step = a / (1 - share). vLLM schedules
            # running decodes first and fills the rest of the token budget with prefills: at most that many.
            budget = max(max_batched_tokens - max(batch, 1.0) * tokens_per_seq, 0.0)
            share = per_prefill_token * rate * computed_prompt / 1e3
            step = without_prefill / (1.0 - share) if share < 1.0 else float("inf")
            prefill_tokens = rate * computed_prompt * step / 1e3
            if prefill_tokens > budget:
                prefill_tokens = budget
                step = without_prefill + per_prefill_token * budget
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
