"""Arrival rate, burstiness and concurrency (advisor/measure/arrivals.py).

The burstiness relation is pinned to vLLM bench: vllm/benchmarks/serve.py `get_request` draws each gap
from np.random.gamma(shape=burstiness, scale=1 / (request_rate * burstiness)), whose coefficient of
variation is 1 / sqrt(burstiness). The concurrency peak follows the same file's `calculate_metrics`
sweep line over half-open [start, start + latency) intervals, departures before arrivals at equal times.
"""
from __future__ import annotations

import csv
from datetime import datetime

import numpy as np
import orjson
import pytest

from advisor.measure.arrivals import _sweep, arrival_profile, concurrency, peak_window_count, rate_bin_seconds


def test_hand_computed_profile() -> None:
    # Gaps 1 and 2: mean 1.5, population std 0.5, CV 1/3, gamma shape 9; 2 gaps over 3 s.
    p = arrival_profile(np.array([3.0, 0.0, 1.0]))  # unsorted on purpose
    assert p.count == 3 and p.duration_s == 3.0
    assert p.mean_rate_rps == pytest.approx(2 / 3)
    assert p.interarrival_cv == pytest.approx(1 / 3)
    assert p.gamma_burstiness == pytest.approx(9.0)
    assert p.bin_s == 1.0 and p.counts_per_bin == (1, 1, 0, 1)
    assert p.peak_bin_rate_rps == 1.0 and p.peak_rate_1s_rps == 1.0
    assert p.zero_gap_share == 0.0
    assert orjson.loads(orjson.dumps(p.to_dict()))["interarrival_cv"] == 0.333333


def test_duplicate_timestamps_are_zero_gaps() -> None:
    # Mooncake-style: several requests in the same millisecond. Gaps 0, 0, 1: mean 1/3, std sqrt(2)/3.
    p = arrival_profile(np.array([0.0, 0.0, 0.0, 1.0]))
    assert p.zero_gap_share == pytest.approx(2 / 3)
    assert p.smallest_positive_gap_s == 1.0
    assert p.interarrival_cv == pytest.approx(np.sqrt(2))
    assert p.gamma_burstiness == pytest.approx(0.5)
    assert p.peak_rate_1s_rps == 3.0  # [0, 1) holds three; the arrival at 1.0 is outside


def test_all_at_once_and_single_and_empty() -> None:
    same = arrival_profile(np.full(5, 7.0))
    assert same.duration_s == 0.0 and same.mean_rate_rps is None
    assert same.interarrival_cv is None and same.gamma_burstiness is None
    assert same.zero_gap_share == 1.0 and same.counts_per_bin == (5,) and same.peak_rate_1s_rps == 5.0
    assert same.smallest_positive_gap_s is None
    single = arrival_profile(np.array([42.0]))
    assert single.count == 1 and single.mean_rate_rps is None and single.interarrival.count == 0
    assert single.zero_gap_share is None
    empty = arrival_profile(np.array([]))
    assert empty.count == 0 and empty.to_dict()["duration_s"] is None


def test_metronome_has_cv_zero_and_no_gamma_shape() -> None:
    p = arrival_profile(np.arange(10.0))
    assert p.interarrival_cv == 0.0 and p.gamma_burstiness is None
    assert p.mean_rate_rps == 1.0


def test_peak_window_count_is_the_best_half_open_window() -> None:
    times = np.array([0.0, 0.5, 0.9, 1.0, 1.2, 5.0])
    assert peak_window_count(times, 1.0) == 4  # [0.5, 1.5) holds 0.5, 0.9, 1.0, 1.2
    assert peak_window_count(times, 0.1) == 1
    assert peak_window_count(times, 10.0) == 6


def test_rate_bins_follow_the_duration() -> None:
    assert rate_bin_seconds(0.0) == 1.0
    assert rate_bin_seconds(100.0) == 1.0
    assert rate_bin_seconds(1000.0) == 10.0
    assert rate_bin_seconds(3600.0) == 60.0
    assert rate_bin_seconds(86400.0) == 900.0
    assert rate_bin_seconds(200 * 86400.0) == 2 * 86400.0


def test_gamma_shape_recovers_vllm_bench_burstiness() -> None:
    """Gaps drawn exactly as vLLM bench draws them give back its --burstiness and --request-rate."""
    rng = np.random.default_rng(7)
    for burstiness, rate in ((0.25, 4.0), (1.0, 10.0), (4.0, 2.0)):
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=200_000)
        p = arrival_profile(np.cumsum(gaps))
        assert p.gamma_burstiness == pytest.approx(burstiness, rel=0.03)
        assert p.mean_rate_rps == pytest.approx(rate, rel=0.02)


def test_azure_rate_and_cv_match_numpy(real_file) -> None:
    """The Azure code trace: rate, CV and gap percentiles equal an independent numpy computation."""
    with real_file("azure_llm_inference_2023_code.csv").open(newline="") as f:
        # 7 fractional digits ('18:17:03.9799600'): datetime takes 6.
        stamps = [datetime.fromisoformat(row["TIMESTAMP"][:26]).timestamp() for row in csv.DictReader(f)]
    t = np.sort(np.array(stamps))
    gaps = np.diff(t)
    p = arrival_profile(np.array(stamps))
    assert p.count == 8819
    assert p.duration_s == pytest.approx(t[-1] - t[0])
    assert p.mean_rate_rps == pytest.approx((t.size - 1) / (t[-1] - t[0]))
    assert p.interarrival_cv == pytest.approx(gaps.std() / gaps.mean())
    assert p.interarrival.p99 == pytest.approx(np.percentile(gaps, 99))
    assert p.bin_s == 60.0 and sum(p.counts_per_bin) == 8819
    seconds = np.floor(t - t[0]).astype(int)
    assert p.peak_rate_1s_rps >= np.bincount(seconds).max()  # a sliding window beats fixed seconds


def vllm_bench_peak(starts: np.ndarray, latencies: np.ndarray) -> int:
    """The peak loop of vllm/benchmarks/serve.py calculate_metrics, transcribed."""
    events = [(s, 1) for s in starts] + [(s + l, -1) for s, l in zip(starts, latencies)]
    events.sort(key=lambda x: (x[0], x[1]))
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def test_hand_computed_concurrency() -> None:
    # [0,2) [1,3) [3,4): one in flight for 3 s, two for 1 s.
    c = concurrency(np.array([0.0, 1.0, 3.0]), np.array([2.0, 2.0, 1.0]))
    assert c.span_s == 4.0 and c.mean == pytest.approx(5 / 4)
    assert (c.p50, c.p99, c.max) == (1, 2, 2)


def test_back_to_back_requests_do_not_overlap() -> None:
    c = concurrency(np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 1.0]))
    assert (c.mean, c.p50, c.max) == (1.0, 1, 1)


def test_gaps_and_zero_latencies() -> None:
    # Busy 2 s of 10: p50 is 0, p99 is 1. A zero-latency request occupies no time.
    c = concurrency(np.array([0.0, 9.0, 5.0]), np.array([1.0, 1.0, 0.0]))
    assert c.requests == 2 and c.span_s == 10.0 and c.mean == pytest.approx(0.2)
    assert (c.p50, c.p99, c.max) == (0, 1, 1)
    assert concurrency(np.array([1.0]), np.array([0.0])).to_dict()["mean"] is None
    with pytest.raises(ValueError):
        concurrency(np.array([0.0]), np.array([-1.0]))


def test_concurrency_matches_vllm_bench_peak_and_littles_law() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        starts = np.round(rng.uniform(0, 20, 60), 1)  # rounded: many ties
        latencies = np.round(rng.uniform(0.1, 5, 60), 1)
        c = concurrency(starts, latencies)
        assert c.max == vllm_bench_peak(starts, latencies)
        span = (starts + latencies).max() - starts.min()
        assert c.mean == pytest.approx(latencies.sum() / span)
        assert c.p50 <= c.p99 <= c.max


def _sweep_by_sorting_events(starts: np.ndarray, latencies: np.ndarray) -> tuple[np.ndarray, int]:
    """The time at each in-flight count by sorting all starts and ends together (ends first at equal times)
    and weighting each event's level by the time to the next event: the formulation `_sweep` replaced."""
    times = np.concatenate((starts, starts + latencies))
    deltas = np.concatenate((np.ones(starts.size, np.int64), -np.ones(starts.size, np.int64)))
    order = np.lexsort((deltas, times))
    times, levels = times[order], np.cumsum(deltas[order])
    return np.bincount(levels[:-1], weights=np.diff(times)), int(levels.max())


def test_sweep_equals_sorting_all_events() -> None:
    """The merge of sorted starts and ends adds the same float seconds to the same counts, in the same order,
    as the sort of all events (ties of starts, ends and both; up to 3,000 in flight: its array grows)."""
    rng = np.random.default_rng(7)
    cases = [(np.round(rng.uniform(0, 20, 300), 1), np.round(rng.uniform(0.1, 5, 300), 1)),
             (rng.integers(0, 30, 500).astype(float), rng.integers(1, 4, 500).astype(float)),
             (rng.uniform(1e9, 1e9 + 60, 4000), rng.uniform(100, 200, 4000)),
             (np.zeros(5), np.ones(5))]
    for starts, latencies in cases:
        expected, top = _sweep_by_sorting_events(starts, latencies)
        seconds, got_top = _sweep(np.sort(starts), np.sort(starts + latencies))
        assert got_top == top
        assert seconds.tolist() == expected.tolist()  # exactly: the same sums in the same order
