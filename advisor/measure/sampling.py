"""Sampling settings as logged: how much traffic is greedy, which matters for speculative decoding.

Draft tokens are accepted more often under greedy decoding (the target's argmax must match the draft);
at high temperature rejection sampling accepts fewer, so the expected speedup shrinks.
"""
from __future__ import annotations

from collections.abc import Iterable
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
    settings = list(params)
    count = len(settings)
    temperatures = np.array([s.temperature for s in settings if s.temperature is not None], dtype=np.float64)
    known = [s for s in settings if s.temperature is not None or s.top_k is not None]
    greedy = sum(
        1
        for s in known
        if (s.temperature is not None and s.temperature < GREEDY_TEMPERATURE) or s.top_k == 1
    )
    return SamplingSummary(
        requests=count,
        temperature_missing_share=(count - temperatures.size) / count if count else None,
        greedy_share=greedy / len(known) if known else None,
        temperature_p50=float(np.percentile(temperatures, 50)) if temperatures.size else None,
        temperature_max=float(temperatures.max()) if temperatures.size else None,
        top_p_present_share=sum(s.top_p is not None for s in settings) / count if count else None,
    )
