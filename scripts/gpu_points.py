"""Rows of the cost model's measurement table from the records of GPU calibration waves.

    python scripts/gpu_points.py RUN_NAME runs.json [runs.json ...] >> advisor/data/measurements/h200_vllm0.26/points.csv

Reads the `runs.json` files scripts/gpu_calibrate.py writes (one record per `vllm bench serve` run, skipped
and failed runs marked as such) and prints one CSV row per completed run in points.csv's columns
(advisor/engine/calibration_data.py reads them), tagged RUN_NAME. Repeats of a cell stay separate rows:
their spread is part of what the table records.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(run_name: str, paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        for record in json.loads(path.read_text())["records"]:
            if "skipped" in record or "failed" in record:
                continue
            acceptance = record["acceptance_length"] if record["k"] else 1
            out.append(",".join(str(value) for value in (
                record["shape"], "H200", record["k"], f"{acceptance:.4f}" if record["k"] else 1,
                record["input_len"], record["output_len"], record["concurrency"], record["prompts"],
                f"{record['median_tpot_ms']:.4f}", f"{record['median_itl_ms']:.4f}",
                f"{record['median_ttft_ms']:.4f}", f"{record['output_throughput']:.4f}", run_name, 0)))
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    print("\n".join(rows(sys.argv[1], [Path(p) for p in sys.argv[2:]])))
