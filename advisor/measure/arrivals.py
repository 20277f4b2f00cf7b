"""Arrival process and concurrency: how fast and how bursty requests come, and how many are in flight.

These set `vllm bench serve --request-rate/--burstiness/--max-concurrency` for a faithful replay, and tell
whether the server sees steady load or bursts (which speculative decoding helps less: it pays off at low
batch sizes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from advisor.measure.stats import Distribution, as_float_array, distribution, json_float

# Rate-over-time bin widths, seconds: the smallest that gives at most MAX_BINS bins is used.
BIN_LADDER_S = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)
MAX_BINS = 120
PEAK_WINDOWS_S = (1.0, 10.0)


@dataclass(frozen=True, slots=True)
class ArrivalProfile:
    """Arrival statistics of one log (timestamps in seconds).

    mean_rate_rps = (count - 1) / duration_s: n arrivals bound n - 1 gaps, and the log ends at the last
    arrival, so count / duration_s would overstate the rate (by 1/duration_s).
    interarrival_cv = std/mean of the gaps between sorted arrivals (population std): 1 for Poisson
    arrivals, above 1 for bursts, 0 for a metronome. gamma_burstiness = 1 / cv**2 is the shape that
    `vllm bench serve --burstiness` uses to draw gaps from gamma(shape, scale=1/(rate*shape)), which has
    exactly this CV; None when cv is 0 or undefined (bench takes a finite positive value).
    """

    count: int
    duration_s: float | None
    mean_rate_rps: float | None
    bin_s: float | None
    counts_per_bin: tuple[int, ...]
    peak_bin_rate_rps: float | None
    peak_rate_1s_rps: float | None
    peak_rate_10s_rps: float | None
    interarrival: Distribution
    zero_gap_share: float | None
    smallest_positive_gap_s: float | None
    interarrival_cv: float | None
    gamma_burstiness: float | None

    def to_dict(self) -> dict:
        return {
            "count": self.count,
            "duration_s": json_float(self.duration_s),
            "mean_rate_rps": json_float(self.mean_rate_rps),
            "bin_s": json_float(self.bin_s),
            "counts_per_bin": list(self.counts_per_bin),
            "peak_bin_rate_rps": json_float(self.peak_bin_rate_rps),
            "peak_rate_1s_rps": json_float(self.peak_rate_1s_rps),
            "peak_rate_10s_rps": json_float(self.peak_rate_10s_rps),
            "interarrival_s": self.interarrival.to_dict(),
            "zero_gap_share": json_float(self.zero_gap_share),
            "smallest_positive_gap_s": json_float(self.smallest_positive_gap_s),
            "interarrival_cv": json_float(self.interarrival_cv),
            "gamma_burstiness": json_float(self.gamma_burstiness),
        }


def rate_bin_seconds(duration_s: float) -> float:
    """Smallest ladder width giving at most MAX_BINS bins (an hour -> 60 s); whole days beyond the ladder."""
    for width in BIN_LADDER_S:
        if duration_s / width <= MAX_BINS:
            return width
    return 86400.0 * float(np.ceil(duration_s / 86400.0 / MAX_BINS))


def peak_window_count(sorted_times: np.ndarray, window_s: float) -> int:
    """Most arrivals in any half-open window [t, t + window_s); the best window starts at an arrival."""
    ends = np.searchsorted(sorted_times, sorted_times + window_s, side="left")
    return int((ends - np.arange(sorted_times.size)).max())


def arrival_profile(timestamps: np.ndarray) -> ArrivalProfile:
    """Rate, rate over time, peaks and burstiness of arrivals (seconds, any order, duplicates allowed).

    Equal timestamps (logs with millisecond or coarser clocks) are zero gaps: they count as a burst.
    `zero_gap_share` and `smallest_positive_gap_s` expose the clock's resolution: a log stamped in whole
    seconds has many zero gaps, which inflate the CV and make 1 s peaks meaningless.
    """
    times = np.sort(as_float_array(timestamps, "timestamps"))
    count = int(times.size)
    gaps = np.diff(times)
    if count == 0:
        return ArrivalProfile(
            0, None, None, None, (), None, None, None, distribution(gaps), None, None, None, None
        )
    duration = float(times[-1] - times[0])
    bin_s = rate_bin_seconds(duration)
    counts = np.bincount(((times - times[0]) // bin_s).astype(np.int64))
    mean_gap = float(gaps.mean()) if gaps.size else 0.0
    cv = float(gaps.std()) / mean_gap if mean_gap > 0 else None
    return ArrivalProfile(
        count=count,
        duration_s=duration,
        mean_rate_rps=(count - 1) / duration if duration > 0 else None,
        bin_s=bin_s,
        counts_per_bin=tuple(int(c) for c in counts),
        peak_bin_rate_rps=float(counts.max()) / bin_s,
        peak_rate_1s_rps=peak_window_count(times, PEAK_WINDOWS_S[0]) / PEAK_WINDOWS_S[0],
        peak_rate_10s_rps=peak_window_count(times, PEAK_WINDOWS_S[1]) / PEAK_WINDOWS_S[1],
        interarrival=distribution(gaps),
        zero_gap_share=float((gaps == 0).mean()) if gaps.size else None,
        smallest_positive_gap_s=float(gaps[gaps > 0].min()) if (gaps > 0).any() else None,
        interarrival_cv=cv,
        gamma_burstiness=1.0 / cv**2 if cv else None,
    )


@dataclass(frozen=True, slots=True)
class Concurrency:
    """Requests in flight over [first start, last end], from logged start times and latencies.

    Each request occupies the half-open interval [start, start + latency). Statistics are time-weighted:
    p50 is the smallest in-flight count k such that at least half of the span has <= k in flight. The mean
    equals sum(latency) / span (Little's law). Zero-latency requests occupy no time and are not counted.
    """

    requests: int
    span_s: float | None
    mean: float | None
    p50: int | None
    p99: int | None
    max: int | None

    def to_dict(self) -> dict:
        return {
            "requests": self.requests,
            "span_s": json_float(self.span_s),
            "mean": json_float(self.mean),
            "p50": self.p50,
            "p99": self.p99,
            "max": self.max,
        }


def concurrency(starts: np.ndarray, latencies: np.ndarray) -> Concurrency:
    """Time-weighted in-flight request counts by a sweep line over [start, start + latency) intervals.

    Ends sort before starts at equal times (half-open intervals), as in vLLM bench's
    `max_concurrent_requests` (vllm/benchmarks/serve.py, calculate_metrics), so back-to-back requests do
    not overlap.
    """
    start = as_float_array(starts, "starts")
    latency = as_float_array(latencies, "latencies")
    if start.shape != latency.shape:
        raise ValueError(f"starts ({start.size}) and latencies ({latency.size}) differ in length")
    if (latency < 0).any():
        raise ValueError("latencies must be non-negative")
    busy = latency > 0
    if not busy.all():
        start, latency = start[busy], latency[busy]
    if start.size == 0:
        return Concurrency(0, None, None, None, None, None)
    # The starts and the ends each sorted (16 bytes a request; the merged events, their order and levels
    # took about 110 here: this runs on the whole log beside the profile's other analyses, at its peak).
    ends = start + latency
    ends.sort()
    ordered = np.sort(start)
    time_at_level, top = _sweep(ordered, ends)
    span = float(ends[-1] - ordered[0])
    del ordered, ends
    seconds_at_or_below = np.cumsum(time_at_level)

    def quantile(q: float) -> int:
        # Smallest count k with time(level <= k) >= q * span; the relative slack absorbs rounding in the
        # float sums, which would otherwise push an exact boundary (e.g. half the span) one level up.
        return int(np.searchsorted(seconds_at_or_below, q * span * (1 - 1e-9), side="left"))

    return Concurrency(
        requests=int(start.size),
        span_s=span,
        mean=float(latency.sum()) / span,
        p50=quantile(0.5),
        p99=quantile(0.99),
        max=top,
    )


@njit(cache=True)
def _sweep(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, int]:
    """Seconds spent at each in-flight count (index 0 up to the highest count that holds for a while) and the
    highest count, over the sorted starts and ends merged, ends first at equal times. The time between two
    consecutive events adds to the count after the first, event by event in time order: the float sums of
    `np.bincount(levels, weights=held)` over the merged events, which this replaced (the same seconds)."""
    seconds = np.zeros(min(starts.size, 1024) + 1)
    level = top = held_top = 0
    previous = 0.0
    i = j = 0
    while j < ends.size:
        if i < starts.size and starts[i] < ends[j]:
            now, step = starts[i], 1
            i += 1
        else:
            now, step = ends[j], -1
            j += 1
        if i + j > 1:
            if level >= seconds.size:
                grown = np.zeros(2 * seconds.size)
                grown[: seconds.size] = seconds
                seconds = grown
            seconds[level] += now - previous
            held_top = max(held_top, level)
        level += step
        top = max(top, level)
        previous = now
    return seconds[: held_top + 1], top
