"""Length distributions and the decode share: what sizes the KV cache and the batch.

Percentiles use numpy's default "linear" method (type 7 of Hyndman & Fan), so they match a reader's own
`np.percentile` check. Histograms use log2-spaced edges because token lengths span four orders of magnitude.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
SIGNIFICANT_DIGITS = 6


def json_float(value: float | None, digits: int = SIGNIFICANT_DIGITS) -> float | None:
    """A float for JSON: rounded to `digits` significant digits; None for None, NaN and infinities.

    Reports compare runs by eye: six significant digits keep every figure exact enough and readable.
    """
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def as_float_array(values: np.ndarray, what: str) -> np.ndarray:
    """`values` as a 1-D float64 array; ValueError for NaN (callers drop missing values first)."""
    array = np.asarray(values, dtype=np.float64).ravel()
    if np.isnan(array).any():
        raise ValueError(f"{what} contains NaN: drop missing values before measuring")
    return array


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of one quantity over requests. Figures are None when `count` is 0.

    The histogram has right-open bins [edges[i], edges[i+1]); `edges` is empty when values are negative
    (log2 bins need non-negative values).
    """

    count: int
    mean: float | None
    min: float | None
    max: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    p99_9: float | None
    hist_edges: tuple[float, ...]
    hist_counts: tuple[int, ...]

    def to_dict(self) -> dict:
        return {
            "count": self.count,
            "mean": json_float(self.mean),
            "min": json_float(self.min),
            "max": json_float(self.max),
            "p50": json_float(self.p50),
            "p90": json_float(self.p90),
            "p99": json_float(self.p99),
            "p99_9": json_float(self.p99_9),
            "histogram": {
                "edges": [json_float(e) for e in self.hist_edges],
                "counts": list(self.hist_counts),
            },
        }


def log2_edges(values: np.ndarray) -> np.ndarray:
    """Bin edges 0 (only when zeros occur), then powers of two from min(1, smallest positive) past the max.

    Starting at 1 (or lower for fractional values such as seconds) keeps the edges of two token-length
    histograms identical, so they can be compared bin by bin.
    """
    positive = values[values > 0]
    if positive.size == 0:
        return np.array([0.0, 1.0])
    # frexp is exact: x = m * 2**e with 0.5 <= m < 1, so floor(log2 x) = e - 1 without rounding error.
    low = min(0, int(np.frexp(positive.min())[1]) - 1)
    high = int(np.frexp(positive.max())[1])  # 2**high > max
    edges = np.ldexp(1.0, np.arange(low, high + 1))
    return np.concatenate(([0.0], edges)) if (values == 0).any() else edges


def log2_histogram(values: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`log2_edges` of `values` (>= 0) and the count (or the summed `weights`) of the values in each bin."""
    edges = log2_edges(values)
    # side="right" puts a value equal to an edge into the bin that starts at that edge.
    bins = np.searchsorted(edges, values, side="right") - 1
    return edges, np.bincount(bins, weights=weights, minlength=edges.size - 1)


def distribution(values: np.ndarray) -> Distribution:
    """Count, mean, min, max, p50/p90/p99/p99.9 and a log2 histogram of `values` (NaN-free)."""
    array = as_float_array(values, "values")
    if array.size == 0:
        return Distribution(0, None, None, None, None, None, None, None, (), ())
    p50, p90, p99, p99_9 = (float(p) for p in np.percentile(array, PERCENTILES))
    if array.min() < 0:
        edges, counts = np.array([]), np.array([], dtype=np.int64)
    else:
        edges, counts = log2_histogram(array)
    return Distribution(
        count=int(array.size),
        mean=float(array.mean()),
        min=float(array.min()),
        max=float(array.max()),
        p50=p50,
        p90=p90,
        p99=p99,
        p99_9=p99_9,
        hist_edges=tuple(float(e) for e in edges),
        hist_counts=tuple(int(c) for c in counts),
    )


_EXPONENT_OFFSET = 1100  # float64's frexp exponents run from -1073 to 1024


class ExactSummary:
    """The parts of `distribution` that add up over batches and shards, exactly, in fixed size: count, sum,
    min, max and the log2 histogram's counts per power of two (for values >= 0; integers such as token
    counts keep the sum exact below 2**53). Beside a sample of the values, whose percentiles are estimates,
    these stay the whole log's."""

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.min = np.inf
        self.max = -np.inf
        self.zeros = 0
        # Count of values by frexp exponent e (2**(e-1) <= v < 2**e), e + _EXPONENT_OFFSET: float64's whole
        # range, one bincount a batch.
        self.exponents = np.zeros(2 * _EXPONENT_OFFSET, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        if not values.size:
            return
        self.count += int(values.size)
        self.sum += float(values.sum())
        self.min, self.max = min(self.min, float(values.min())), max(self.max, float(values.max()))
        positive = values[values > 0]
        self.zeros += int(values.size - positive.size)
        self.exponents += np.bincount(np.frexp(positive)[1] + _EXPONENT_OFFSET, minlength=self.exponents.size)

    def absorb(self, other: ExactSummary) -> None:
        self.count += other.count
        self.sum += other.sum
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self.zeros += other.zeros
        self.exponents += other.exponents

    def over(self, sample: Distribution) -> Distribution:
        """`sample` (the distribution of a sample of these values) with this whole's exact count, mean, min,
        max and histogram."""
        if not self.count or self.min < 0:
            return sample
        # One value of each exponent present, 2**(e-1), and 0 for the zeros, weighted by their counts: the
        # same edges and bins as `distribution` of the whole.
        present = np.flatnonzero(self.exponents)
        probes = np.append(np.ldexp(1.0, present - _EXPONENT_OFFSET - 1), [0.0] * bool(self.zeros))
        weights = np.append(self.exponents[present], [self.zeros] * bool(self.zeros))
        edges, counts = log2_histogram(probes, weights)
        return replace(sample, count=self.count, mean=self.sum / self.count, min=self.min, max=self.max,
                       hist_edges=tuple(float(e) for e in edges), hist_counts=tuple(int(c) for c in counts))


def decode_share(input_lens: np.ndarray, output_lens: np.ndarray) -> float | None:
    """Share of all tokens that are generated: sum(out) / (sum(in) + sum(out)); None without tokens.

    Decode-heavy workloads (share near 1) gain from speculative decoding; prefill-heavy ones from APC.
    """
    total_in = float(np.sum(as_float_array(input_lens, "input_lens")))
    total_out = float(np.sum(as_float_array(output_lens, "output_lens")))
    total = total_in + total_out
    return total_out / total if total > 0 else None
