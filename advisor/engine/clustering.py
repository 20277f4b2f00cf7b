"""Seeded k-means and the exact silhouette score, in numpy.

The engine's segmentation (`advisor.engine.decide.segment_requests`) fits at most 10,000 rows of four
features for k = 2, 3, 4; scikit-learn did that in milliseconds but cost 1.3-2.6 s to import on every run
(and an OpenMP runtime whose threads spin on a busy machine). This is the same algorithm as scikit-learn's
`KMeans(init="k-means++", algorithm="lloyd")`: greedy k-means++ seeding with 2 + int(log k) local trials,
Lloyd iterations until the labels stop changing or the centers move less than a tolerance relative to the
data's variance, the best of `n_init` seedings by inertia. Everything is drawn from one numpy Generator
seeded by the caller, so a run is reproducible. The draws differ from scikit-learn's, so a fit can stop at a
slightly different local optimum: on the real logs' features (ShareGPT, Mooncake, Aider, Azure; k = 2, 3, 4)
the partitions agreed with scikit-learn's to an adjusted Rand index of 0.93-1.0 (0.995-1.0 at the k each log
chooses), and every log chose the same k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_ITER = 300
TOLERANCE = 1e-4  # of the mean per-feature variance, as scikit-learn's `tol`

SILHOUETTE_BLOCK_ENTRIES = 1_000_000  # distances computed at once (8 bytes each)


@dataclass(frozen=True)
class KMeansFit:
    """A fitted k-means: `centers` (k x features), the fit rows' `labels`, and their `inertia`."""

    centers: np.ndarray
    labels: np.ndarray
    inertia: float

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """The nearest center of each row (ties to the lowest label, as in the fit)."""
        return _nearest(rows, self.centers)[0]


def _squared_distances(rows: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """rows x centers squared Euclidean distances, clipped at 0 (the expanded form can round below it)."""
    distances = (
        np.einsum("ij,ij->i", rows, rows)[:, None]
        - 2.0 * rows @ centers.T
        + np.einsum("ij,ij->i", centers, centers)[None, :]
    )
    return np.maximum(distances, 0.0)


def _nearest(rows: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest center and the squared distance to it."""
    distances = _squared_distances(rows, centers)
    labels = distances.argmin(axis=1)
    return labels, distances[np.arange(len(rows)), labels]


def _kmeans_plus_plus(rows: np.ndarray, clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeding: each new center is the best of 2 + int(log k) candidates drawn by D^2."""
    trials = 2 + int(np.log(clusters))
    centers = np.empty((clusters, rows.shape[1]))
    centers[0] = rows[rng.integers(len(rows))]
    closest = _squared_distances(rows, centers[:1])[:, 0]
    for index in range(1, clusters):
        total = closest.sum()
        if total <= 0:  # every row sits on a center already: any row will do
            candidates = rng.integers(len(rows), size=trials)
        else:
            candidates = np.searchsorted(np.cumsum(closest), rng.random(trials) * total)
            candidates = np.minimum(candidates, len(rows) - 1)
        candidate_closest = np.minimum(closest[None, :], _squared_distances(rows, rows[candidates]).T)
        best = int(candidate_closest.sum(axis=1).argmin())
        centers[index] = rows[candidates[best]]
        closest = candidate_closest[best]
    return centers


def _lloyd(rows: np.ndarray, centers: np.ndarray, tolerance: float) -> KMeansFit:
    """Lloyd iterations from `centers`; an emptied cluster keeps its previous center."""
    labels, closest = _nearest(rows, centers)
    for _ in range(MAX_ITER):
        counts = np.bincount(labels, minlength=len(centers))
        sums = np.column_stack([np.bincount(labels, weights=column, minlength=len(centers)) for column in rows.T])
        moved = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centers)
        shift = float(((moved - centers) ** 2).sum())
        centers = moved
        new_labels, closest = _nearest(rows, centers)
        if np.array_equal(new_labels, labels) or shift <= tolerance:
            labels = new_labels
            break
        labels = new_labels
    return KMeansFit(centers=centers, labels=labels, inertia=float(closest.sum()))


def kmeans(rows: np.ndarray, clusters: int, n_init: int, seed: int) -> KMeansFit:
    """The best (lowest inertia) of `n_init` seeded k-means++ + Lloyd fits of `rows` into `clusters`."""
    rows = np.asarray(rows, dtype=float)
    if not 1 <= clusters <= len(rows):
        raise ValueError(f"{clusters} clusters for {len(rows)} rows")
    rng = np.random.default_rng(seed)
    tolerance = TOLERANCE * float(np.var(rows, axis=0).mean())
    best: KMeansFit | None = None
    for _ in range(n_init):
        fit = _lloyd(rows, _kmeans_plus_plus(rows, clusters, rng), tolerance)
        if best is None or fit.inertia < best.inertia:
            best = fit
    assert best is not None  # n_init >= 1
    return best


def silhouette_score(rows: np.ndarray, labels: np.ndarray) -> float:
    """The mean silhouette (b - a) / max(a, b) over all rows, with Euclidean distances.

    a is a row's mean distance to the other rows of its cluster, b the smallest mean distance to another
    cluster's rows; a row alone in its cluster scores 0 (Rousseeuw's convention, as scikit-learn's). Needs
    2 <= clusters < rows. Distances come from the Gram matrix as in scikit-learn's `euclidean_distances`
    (a row's distance to itself set to 0), and each row's sum per cluster is one matrix product, in blocks
    of rows to bound the working memory: on the real logs' features this gave scikit-learn's score to 6e-17.
    A block holds SILHOUETTE_BLOCK_ENTRIES distances (two such arrays at a time, 16 MB): the profile runs
    this beside its analyses with workers, where 4 M entries a block (64 MB) raised the main process's peak
    RSS on the 1 GB log by about 70 MiB.
    """
    rows = np.asarray(rows, dtype=float)
    names, labels = np.unique(np.asarray(labels), return_inverse=True)
    if not 2 <= len(names) < len(rows):
        raise ValueError(f"the silhouette needs 2 to {len(rows) - 1} clusters, got {len(names)}")
    counts = np.bincount(labels)
    members = np.zeros((len(rows), len(names)))
    members[np.arange(len(rows)), labels] = 1.0
    squares = np.einsum("ij,ij->i", rows, rows)
    sums = np.empty((len(rows), len(names)))
    block = max(1, SILHOUETTE_BLOCK_ENTRIES // len(rows))
    for start in range(0, len(rows), block):
        stop = min(start + block, len(rows))
        distances = squares[start:stop, None] - 2.0 * rows[start:stop] @ rows.T + squares[None, :]
        np.maximum(distances, 0.0, out=distances)
        distances[np.arange(stop - start), np.arange(start, stop)] = 0.0
        np.sqrt(distances, out=distances)
        sums[start:stop] = distances @ members
    own = counts[labels]
    intra = sums[np.arange(len(rows)), labels] / np.maximum(own - 1, 1)
    means = sums / counts[None, :]
    means[np.arange(len(rows)), labels] = np.inf
    inter = means.min(axis=1)
    scores = np.where(own > 1, (inter - intra) / np.maximum(np.maximum(intra, inter), np.finfo(float).tiny), 0.0)
    return float(scores.mean())
