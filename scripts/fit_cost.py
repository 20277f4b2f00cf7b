"""Fit the cost model's coefficients (advisor/engine/cost.py, Calibration) to measured GPU points.

usage: python scripts/fit_cost.py [POINTS.csv] [--holdout] [--markdown]

Reads the measurement table (advisor/data/measurements/h200_vllm0.26/points.csv), computes each point's
step features with `CostModel.step_terms` (the same function the model predicts with), and solves for the
non-negative coefficients that minimise the squared RELATIVE error of the predicted median TPOT. Points
marked `holdout=1` are left out of the fit with --holdout and reported separately: they test that the fit
carries to shapes and prompt lengths it was not fitted on. Prints the coefficients as Calibration fields and
every point's residual (--markdown: the table docs/engine.md shows).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from advisor.engine.calibration_data import DEFAULT_POINTS, load_points, point_features  # noqa: E402
from advisor.engine.cost import H200_CALIBRATION  # noqa: E402

FIELDS = {  # feature -> (Calibration field, whether the field is 1 / coefficient: an efficiency)
    "fixed": ("step_overhead_ms", False),
    "per_sequence": ("per_sequence_ms", False),
    "speculation": ("speculation_overhead_ms", False),
    "draft_tokens": ("per_draft_token_ms", False),
    "eager_layers": ("eager_penalty_ms", False),
    "weight_read": ("bandwidth_efficiency", True),
    "kv_read": ("kv_bandwidth_efficiency", True),
    "decode_compute": ("decode_compute_efficiency", True),
    "prefill_compute": ("prefill_compute_efficiency", True),
}


def fit(points, use_holdout: bool):
    rows = [p for p in points if not (use_holdout and p.holdout)]
    names = list(FIELDS)
    features = np.array([[point_features(p)[0][n] for n in names] for p in rows])
    scale = np.array([point_features(p)[1] for p in rows])  # 1 / tokens per step: TPOT = step / AL
    measured = np.array([p.median_tpot_ms for p in rows])
    design = features * scale[:, None] / measured[:, None]
    coefficients, _ = nnls(design, np.ones(len(rows)))
    # a zero coefficient of an efficiency term means the term is free: efficiency infinite
    values = {FIELDS[n][0]: ((1 / c if c > 0 else float("inf")) if FIELDS[n][1] else float(c))
              for n, c in zip(names, coefficients)}
    return replace(H200_CALIBRATION, **values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("points", nargs="?", type=Path, default=DEFAULT_POINTS)
    parser.add_argument("--holdout", action="store_true", help="leave points marked holdout=1 out of the fit")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    points = load_points(args.points)
    calibration = fit(points, args.holdout)
    for name, _ in FIELDS.values():
        print(f"{name}={getattr(calibration, name):.4g},")
    worst = {"fit": 0.0, "holdout": 0.0}
    if args.markdown:
        print("\n| shape | k | input | concurrency | measured TPOT ms | model ms | residual | set |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
    for p in points:
        predicted = p.predict(calibration)
        residual = predicted / p.median_tpot_ms - 1
        kind = "holdout" if args.holdout and p.holdout else "fit"
        worst[kind] = max(worst[kind], abs(residual))
        if args.markdown:
            print(f"| {p.shape} | {p.k} | {p.input_len} | {p.concurrency} | {p.median_tpot_ms:.2f} | "
                  f"{predicted:.2f} | {residual:+.1%} | {kind} |")
        else:
            print(f"{p.shape:<36} k={p.k} in={p.input_len:<5} c={p.concurrency:<4} measured={p.median_tpot_ms:7.2f} "
                  f"model={predicted:7.2f} {residual:+7.1%} {kind}")
    print(f"worst |residual|: fitted points {worst['fit']:.1%}, held-out points {worst['holdout']:.1%}")


if __name__ == "__main__":
    main()
