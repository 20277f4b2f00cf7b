"""Distributions and decode share (advisor/measure/stats.py), checked against hand computations."""
from __future__ import annotations

import csv

import numpy as np
import orjson
import pytest

from advisor.measure.stats import decode_share, distribution, json_float, log2_edges


def test_hand_computed_distribution() -> None:
    d = distribution(np.array([1, 2, 3, 4, 100]))
    assert (d.count, d.mean, d.min, d.max) == (5, 22.0, 1.0, 100.0)
    # numpy "linear": rank h = (n - 1) p = 4 * 0.9 = 3.6 -> 4 + 0.6 * (100 - 4)
    assert d.p50 == 3.0
    assert d.p90 == pytest.approx(61.6)
    assert d.p99 == pytest.approx(4 + 0.96 * 96)
    assert d.hist_edges == (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
    # [1,2): 1  [2,4): 2, 3  [4,8): 4  [64,128): 100
    assert d.hist_counts == (1, 2, 1, 0, 0, 0, 1)


def test_empty_distribution_has_no_figures() -> None:
    d = distribution(np.array([]))
    assert d.count == 0 and d.mean is None and d.p99_9 is None and d.hist_counts == ()
    assert orjson.loads(orjson.dumps(d.to_dict()))["p50"] is None


def test_histogram_edges_cover_zero_fractions_and_exact_powers() -> None:
    assert list(log2_edges(np.array([0.0, 0.0]))) == [0.0, 1.0]
    # 0.3 lies in [0.25, 0.5); a zero adds a leading 0 edge; 8 (an exact power) opens the last bin.
    edges = log2_edges(np.array([0.0, 0.3, 8.0]))
    assert list(edges) == [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    d = distribution(np.array([0.0, 0.3, 8.0]))
    assert d.hist_counts == (1, 1, 0, 0, 0, 0, 1)
    assert sum(d.hist_counts) == d.count


def test_negative_values_keep_figures_but_no_histogram() -> None:
    d = distribution(np.array([-1.0, 1.0]))
    assert d.mean == 0.0 and d.hist_edges == () and d.hist_counts == ()


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        distribution(np.array([1.0, np.nan]))


def test_decode_share() -> None:
    assert decode_share(np.array([100, 300]), np.array([50, 50])) == pytest.approx(100 / 500)
    assert decode_share(np.array([]), np.array([])) is None


def test_json_float_rounds_and_drops_non_finite() -> None:
    assert json_float(1 / 3) == 0.333333
    assert json_float(123456789.0) == 123457000.0
    assert json_float(float("nan")) is None and json_float(float("inf")) is None and json_float(None) is None


def test_azure_context_tokens_match_numpy(real_file) -> None:
    """Percentiles of the Azure code trace's ContextTokens equal numpy's own (default "linear")."""
    with real_file("azure_llm_inference_2023_code.csv").open(newline="") as f:
        context = np.array([int(row["ContextTokens"]) for row in csv.DictReader(f)], dtype=np.float64)
    d = distribution(context)
    assert d.count == 8819
    assert d.mean == pytest.approx(context.mean())
    for figure, p in ((d.p50, 50), (d.p90, 90), (d.p99, 99), (d.p99_9, 99.9)):
        assert figure == pytest.approx(np.percentile(context, p))
    assert sum(d.hist_counts) == 8819
    assert d.hist_edges[-1] > context.max()


def test_exact_summary_gives_the_distributions_exact_parts():
    """Added batch by batch and merged, the exact summary's count, mean, extremes and log2 histogram are
    `distribution`'s own (token counts: integers, zeros or not, one value, wide ranges); over a sample's
    distribution it keeps the sample's percentiles."""
    from advisor.measure.stats import ExactSummary

    rng = np.random.default_rng(3)
    cases = [rng.integers(0, 5000, 3000).astype(float), rng.integers(1, 70, 999).astype(float), np.zeros(10),
             np.array([7.0]), np.array([0.0, 1.0, 2.0, 3.0, 4.0, 1024.0]),
             np.floor(rng.lognormal(5, 2, 5000)) + 1]
    for values in cases:
        first, second = ExactSummary(), ExactSummary()
        for part in np.array_split(values[: values.size // 2], 5):
            first.add(part)
        second.add(values[values.size // 2:])
        first.absorb(second)
        whole = distribution(values)
        assert first.over(whole) == whole
        sample = distribution(values[::3])
        over = first.over(sample)
        assert (over.count, over.max, over.min, over.p50, over.p99) == (
            values.size, values.max(), values.min(), sample.p50, sample.p99)
