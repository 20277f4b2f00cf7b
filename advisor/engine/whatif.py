"""What-if: TPOT, step time and output throughput with and without speculation per concurrency.

Closed-loop load, as `vllm bench serve --max-concurrency C --request-rate inf` produces it, with the same
arm setup as the calibration table (async scheduling off in both arms, drafts of k tokens at every step),
so people can see where speculation stops paying on their hardware.
"""
from __future__ import annotations

from advisor.engine.cost import CostModel
from advisor.errors import ConfigError
from advisor.hardware import resolve_gpu, resolve_model


def whatif(model: str, gpu: str, k: int, acceptance_length: float, concurrency: list[int],
           input_len: int = 512, output_len: int = 256, tp: int = 1) -> dict:
    """Rows per concurrency and the assumptions behind them (the `advise whatif --json` document)."""
    if k < 1:
        raise ConfigError(f"--k must be >= 1, got {k}")
    if not 1.0 <= acceptance_length <= k + 1:
        raise ConfigError(f"--acceptance-length must be within [1, k+1] = [1, {k + 1}], got {acceptance_length}")
    if not concurrency or min(concurrency) < 1:
        raise ConfigError("--concurrency needs positive integers, e.g. 1,8,32,128")
    cost = CostModel(resolve_model(model), resolve_gpu(gpu), tp)
    rows = []
    for level in concurrency:
        base = cost.closed_loop(level, input_len, output_len)
        spec = cost.closed_loop(level, input_len, output_len, tokens_per_seq=k + 1,
                                tokens_per_step=acceptance_length, speculative=True)
        rows.append(
            {
                "concurrency": level,
                "baseline_tpot_ms": round(base.tpot_ms, 3),
                "speculative_tpot_ms": round(spec.tpot_ms, 3),
                "baseline_step_ms": round(base.step_ms, 3),
                "speculative_step_ms": round(spec.step_ms, 3),
                "baseline_output_tps": round(base.output_tps, 1),
                "speculative_output_tps": round(spec.output_tps, 1),
                "speedup": round(base.tpot_ms / spec.tpot_ms, 3),
            }
        )
    return {
        "rows": rows,
        "assumptions": {
            "model": cost.model.name,
            "model_source": cost.model.source,
            "gpu": cost.gpu.name,
            "gpu_source": cost.gpu.source,
            "tp": tp,
            "k": k,
            "acceptance_length": acceptance_length,
            "input_len": input_len,
            "output_len": output_len,
            "load": "closed loop: C requests always in flight (vllm bench serve --max-concurrency C)",
            "drafts": "k tokens drafted at every step (a lookup proposer that finds no match drafts fewer)",
            "async_scheduling": "off in both arms, as in the calibration runs",
            "calibration": cost.cal.source,
        },
    }
