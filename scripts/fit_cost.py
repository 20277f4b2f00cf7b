"""Fit the cost model's coefficients (advisor/engine/cost.py, Calibration) to measured GPU points.

usage: python scripts/fit_cost.py [POINTS.csv] [--holdout] [--hold-out-shape TEXT] [--hold-out-input N]
                                  [--hold-out-run RUN] [--markdown]

Reads the measurement table (advisor/data/measurements/h200_vllm0.26/points.csv), replays each run's
schedule step by step (`MeasuredPoint.request_features`: every step priced by `CostModel.step_terms`, the
same function the model predicts with; each request's TPOT from its own steps), and solves for the
non-negative coefficients that minimise the squared RELATIVE error of the predicted median TPOT. Points
marked `holdout=1` (with --holdout), of a shape whose name contains --hold-out-shape, of prompt length
--hold-out-input, or of run --hold-out-run are left out of the fit and reported separately: they test that the fit carries to shapes
and prompt lengths it was not fitted on. Prints the coefficients as Calibration fields and
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

from advisor.engine.calibration_data import DEFAULT_POINTS, load_points  # noqa: E402
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


def fit(points, held_out):
    """NNLS on the relative error of each point's median request. The median request is the one whose
    TPOT is the median under the coefficients, so the fit alternates: fit, re-pick medians, until stable."""
    rows = [p for p in points if not held_out(p)]
    names = list(FIELDS)
    tables = []
    for p in rows:
        order, features = p.request_features()
        tables.append(features[:, [order.index(n) for n in names]])
    measured = np.array([p.median_tpot_ms for p in rows])
    picked = [table[len(table) // 2] for table in tables]
    for _ in range(10):
        design = np.array(picked) / measured[:, None]
        coefficients, _ = nnls(design, np.ones(len(rows)))
        repicked = [table[np.argsort(table @ coefficients)[len(table) // 2]] for table in tables]
        if all(np.array_equal(a, b) for a, b in zip(picked, repicked)):
            break
        picked = repicked
    # a zero coefficient of an efficiency term means the term is free: efficiency infinite
    values = {FIELDS[n][0]: ((1 / c if c > 0 else float("inf")) if FIELDS[n][1] else float(c))
              for n, c in zip(names, coefficients)}
    return replace(H200_CALIBRATION, **values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("points", nargs="?", type=Path, default=DEFAULT_POINTS)
    parser.add_argument("--holdout", action="store_true", help="leave points marked holdout=1 out of the fit")
    parser.add_argument("--hold-out-shape", action="append", default=[], help="leave out shapes containing this")
    parser.add_argument("--hold-out-input", action="append", type=int, default=[], help="leave out this input length")
    parser.add_argument("--hold-out-run", action="append", default=[], help="leave out the points of this run")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    points = load_points(args.points)

    def held_out(p) -> bool:
        return ((args.holdout and p.holdout) or any(text in p.shape for text in args.hold_out_shape)
                or p.input_len in args.hold_out_input or p.run in args.hold_out_run)

    calibration = fit(points, held_out)
    for name, _ in FIELDS.values():
        print(f"{name}={getattr(calibration, name):.4g},")
    worst = {"fit": 0.0, "holdout": 0.0}
    if args.markdown:
        print("\n| shape | k | input | concurrency | requests | run | measured TPOT ms | model ms | residual | set |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|---|")
    for p in points:
        predicted = p.predict(calibration)
        residual = predicted / p.median_tpot_ms - 1
        kind = "holdout" if held_out(p) else "fit"
        worst[kind] = max(worst[kind], abs(residual))
        if args.markdown:
            print(f"| {p.shape} | {p.k} | {p.input_len} | {p.concurrency} | {p.num_prompts} | {p.run.split('-')[0]} | "
                  f"{p.median_tpot_ms:.2f} | "
                  f"{predicted:.2f} | {residual:+.1%} | {kind} |")
        else:
            print(f"{p.shape:<36} k={p.k} in={p.input_len:<5} c={p.concurrency:<4} measured={p.median_tpot_ms:7.2f} "
                  f"model={predicted:7.2f} {residual:+7.1%} {kind}")
    print(f"worst |residual|: fitted points {worst['fit']:.1%}, held-out points {worst['holdout']:.1%}")


if __name__ == "__main__":
    main()
