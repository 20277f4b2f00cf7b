"""Sampling settings as logged: how much traffic is greedy, which matters for speculative decoding.

Draft tokens are accepted more often under greedy decoding (the target's argmax must match the draft);
at high temperature rejection sampling accepts fewer, so the expected speedup shrinks.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from advisor.measure.stats import json_float
from advisor.record import SamplingParams

# vLLM treats temperature below this as greedy (vllm/sampling_params.py, _SAMPLING_EPS).
GREEDY_TEMPERATURE = 1e-5


@dataclass(frozen=True, slots=True)
class SamplingSummary:
    """Shares of requests by sampling setting.

    greedy_share = requests with temperature < 1e-5 or top_k == 1, divided by the requests whose log says
    either (a request without temperature gets the server's default, which is not known here); None when
    no request says. Temperature figures cover the requests that log one.
    """

    requests: int
    temperature_missing_share: float | None
    greedy_share: float | None
    temperature_p50: float | None
    temperature_max: float | None
    top_p_present_share: float | None

    def to_dict(self) -> dict:
        return {
            "requests": self.requests,
            "temperature_missing_share": json_float(self.temperature_missing_share),
            "greedy_share": json_float(self.greedy_share),
            "temperature_p50": json_float(self.temperature_p50),
            "temperature_max": json_float(self.temperature_max),
            "top_p_present_share": json_float(self.top_p_present_share),
        }


def sampling_summary(params: Iterable[SamplingParams]) -> SamplingSummary:
    """Greedy share, missing-temperature share, temperature p50/max and top_p presence."""
    return summary_from_counts(Counter((s.temperature, s.top_k, s.top_p is not None) for s in params))


def summary_from_counts(counts: Mapping[tuple[float | None, int | None, bool], int]) -> SamplingSummary:
    """The same summary from exact counts of (temperature, top_k, top_p present): streaming-friendly."""
    count = sum(counts.values())
    temperature_counts: Counter[float] = Counter()
    known = greedy = top_p_present = 0
    for (temperature, top_k, has_top_p), n in counts.items():
        top_p_present += n if has_top_p else 0
        if temperature is not None:
            temperature_counts[float(temperature)] += n
        if temperature is not None or top_k is not None:
            known += n
            if (temperature is not None and temperature < GREEDY_TEMPERATURE) or top_k == 1:
                greedy += n
    values = np.array(sorted(temperature_counts), dtype=np.float64)
    cumulative = np.cumsum([temperature_counts[v] for v in values]) if values.size else np.zeros(0, np.int64)
    measured = int(cumulative[-1]) if values.size else 0
    return SamplingSummary(
        requests=count,
        temperature_missing_share=(count - measured) / count if count else None,
        greedy_share=greedy / known if known else None,
        temperature_p50=_median(values, cumulative) if values.size else None,
        temperature_max=float(values[-1]) if values.size else None,
        top_p_present_share=top_p_present / count if count else None,
    )


def _median(values: np.ndarray, cumulative: np.ndarray) -> float:
    """np.percentile(all values, 50) from sorted distinct values and their cumulative counts."""
    total = int(cumulative[-1])
    low, high = (values[np.searchsorted(cumulative, index, side="right")] for index in ((total - 1) // 2, total // 2))
    return float(np.percentile([low, high], 50))
