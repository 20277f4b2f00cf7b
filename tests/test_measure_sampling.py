"""Sampling summary (advisor/measure/sampling.py).

Greedy threshold from vLLM: vllm/sampling_params.py treats temperature < _SAMPLING_EPS (1e-5) as greedy.
"""
from __future__ import annotations

from advisor.measure.sampling import sampling_summary
from advisor.record import SamplingParams


def test_hand_computed_summary() -> None:
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1e-6, top_p=0.9),  # below vLLM's epsilon: greedy
        SamplingParams(temperature=0.7, top_p=0.95),
        SamplingParams(temperature=1.0),
        SamplingParams(top_k=1),  # greedy without a temperature
        SamplingParams(),  # nothing logged: the server default applies, unknown here
    ]
    s = sampling_summary(params)
    assert s.requests == 6
    assert s.temperature_missing_share == 2 / 6
    assert s.greedy_share == 3 / 5
    assert s.temperature_p50 == (1e-6 + 0.7) / 2
    assert s.temperature_max == 1.0
    assert s.top_p_present_share == 2 / 6
    assert s.to_dict()["greedy_share"] == 0.6


def test_empty_and_unlogged() -> None:
    assert sampling_summary([]).to_dict() == {
        "requests": 0,
        "temperature_missing_share": None,
        "greedy_share": None,
        "temperature_p50": None,
        "temperature_max": None,
        "top_p_present_share": None,
    }
    s = sampling_summary([SamplingParams(), SamplingParams()])
    assert s.temperature_missing_share == 1.0 and s.greedy_share is None and s.temperature_p50 is None
