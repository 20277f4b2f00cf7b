"""The engine's numpy k-means and silhouette (advisor.engine.clustering), on hand-checkable cases.

The silhouette was checked against scikit-learn's `silhouette_score` on the real logs' feature arrays
(ShareGPT, Mooncake, Aider, Azure, the labels of each k: within 6e-17) before scikit-learn was dropped;
these tests pin the values by hand instead.
"""
from __future__ import annotations

import numpy as np
import pytest

from advisor.engine import clustering


def test_silhouette_of_two_pairs_by_hand() -> None:
    rows = np.array([[0.0], [1.0], [10.0], [11.0]])
    # Points 0 and 11: a = 1, b = 10.5; points 1 and 10: a = 1, b = 9.5.
    expected = (9.5 / 10.5 + 8.5 / 9.5) / 2
    assert clustering.silhouette_score(rows, np.array([0, 0, 1, 1])) == pytest.approx(expected, abs=1e-15)


def test_silhouette_of_a_singleton_cluster_is_zero_for_it() -> None:
    rows = np.array([[0.0], [1.0], [5.0]])
    # Point 0: a = 1, b = 5; point 1: a = 1, b = 4; point 5 is alone in its cluster: 0.
    expected = (4 / 5 + 3 / 4 + 0) / 3
    assert clustering.silhouette_score(rows, np.array([7, 7, 3])) == pytest.approx(expected, abs=1e-15)


def test_silhouette_invariants() -> None:
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(300, 3))
    labels = rng.integers(0, 3, 300)
    score = clustering.silhouette_score(rows, labels)
    assert -1 <= score <= 1
    assert clustering.silhouette_score(rows, (labels + 1) % 3) == pytest.approx(score, abs=1e-12)  # names
    assert clustering.silhouette_score(rows * 7.5 + 2.0, labels) == pytest.approx(score, abs=1e-12)  # scale, shift
    # Blocks of rows (bounded memory) give the one-block result: more rows than one block holds.
    many = rng.normal(size=(700, 4))
    many_labels = (many[:, 0] > 0).astype(int)
    full = np.sqrt(((many[:, None] - many[None]) ** 2).sum(axis=2))
    same = many_labels[:, None] == many_labels[None]
    a = (full * same).sum(axis=1) / (same.sum(axis=1) - 1)
    b = (full * ~same).sum(axis=1) / (~same).sum(axis=1)
    assert clustering.silhouette_score(many, many_labels) == pytest.approx(np.mean((b - a) / np.maximum(a, b)), abs=1e-12)
    with pytest.raises(ValueError):
        clustering.silhouette_score(rows, np.zeros(300, dtype=int))


def test_kmeans_recovers_separated_blobs_and_is_seeded() -> None:
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    truth = np.repeat(np.arange(3), 100)
    rows = centers[truth] + rng.normal(scale=0.5, size=(300, 2))
    fit = clustering.kmeans(rows, 3, n_init=4, seed=0)
    # The same partition as the truth, whatever the label numbering.
    assert len({(int(t), int(f)) for t, f in zip(truth, fit.labels)}) == 3
    assert np.array_equal(fit.predict(rows), fit.labels)
    squared = ((rows - fit.centers[fit.labels]) ** 2).sum()
    assert fit.inertia == pytest.approx(squared, rel=1e-12)
    again = clustering.kmeans(rows, 3, n_init=4, seed=0)
    assert np.array_equal(again.labels, fit.labels) and np.array_equal(again.centers, fit.centers)
    # More seedings never give a worse fit than their first one.
    assert clustering.kmeans(rows, 3, n_init=8, seed=0).inertia <= clustering.kmeans(rows, 3, n_init=1, seed=0).inertia
    with pytest.raises(ValueError):
        clustering.kmeans(rows[:2], 3, n_init=1, seed=0)


def test_kmeans_on_duplicate_rows() -> None:
    rows = np.array([[1.0, 1.0]] * 5 + [[4.0, 4.0]] * 5)
    fit = clustering.kmeans(rows, 2, n_init=2, seed=1)
    assert sorted(np.bincount(fit.labels)) == [5, 5]
    assert fit.inertia == 0.0
