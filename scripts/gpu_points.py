"""Rows of the cost model's measurement table from the records of GPU calibration waves.

    python scripts/gpu_points.py RUN_NAME runs.json [runs.json ...] >> advisor/data/measurements/h200_vllm0.26/points.csv
    python scripts/gpu_points.py --open-loop RUN_NAME runs.json ... >> advisor/data/measurements/h200_vllm0.26/open_loop.csv

Reads the `runs.json` files scripts/gpu_calibrate.py writes (one record per `vllm bench serve` run, skipped
and failed runs marked as such) and prints one CSV row per completed closed-loop run in points.csv's columns
(advisor/engine/calibration_data.py reads them), tagged RUN_NAME. Repeats of a cell stay separate rows:
their spread is part of what the table records. With --open-loop it prints the Poisson-arrival runs instead,
in open_loop.csv's columns (the offered rate, the achieved request rate and mean requests in flight, by
Little's law from the mean end-to-end latency, and the server's KV cache bytes, which cap its running batch):
the steady states the engine prices.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


OPEN_LOOP_COLUMNS = ("shape,gpu,k,acceptance_length,input_len,output_len,request_rate,num_prompts,request_throughput,"
                     "mean_in_flight,median_tpot_ms,mean_tpot_ms,median_ttft_ms,kv_cache_bytes,run")


def open_loop_rows(run_name: str, paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        runs = json.loads(path.read_text())
        for record in runs["records"]:
            if "skipped" in record or "failed" in record or "request_rate" not in record:
                continue
            acceptance = f"{record['acceptance_length']:.4f}" if record["k"] else 1
            in_flight = record["request_throughput"] * record["mean_e2el_ms"] / 1000
            out.append(",".join(str(value) for value in (
                record["shape"], "H200", record["k"], acceptance, record["input_len"], record["output_len"],
                record["request_rate"], record["prompts"], f"{record['request_throughput']:.4f}", f"{in_flight:.2f}",
                f"{record['median_tpot_ms']:.4f}", f"{record['mean_tpot_ms']:.4f}", f"{record['median_ttft_ms']:.4f}",
                runs["servers"][record["server"]]["kv_cache_bytes"], run_name)))
    return out


def rows(run_name: str, paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        for record in json.loads(path.read_text())["records"]:
            if "skipped" in record or "failed" in record or "request_rate" in record:
                continue
            acceptance = record["acceptance_length"] if record["k"] else 1
            out.append(",".join(str(value) for value in (
                record["shape"], "H200", record["k"], f"{acceptance:.4f}" if record["k"] else 1,
                record["input_len"], record["output_len"], record["concurrency"], record["prompts"],
                f"{record['median_tpot_ms']:.4f}", f"{record['median_itl_ms']:.4f}",
                f"{record['median_ttft_ms']:.4f}", f"{record['output_throughput']:.4f}", run_name, 0)))
    return out


if __name__ == "__main__":
    arguments = sys.argv[1:]
    open_loop = arguments[:1] == ["--open-loop"]
    arguments = arguments[1:] if open_loop else arguments
    if len(arguments) < 2:
        sys.exit(__doc__)
    print("\n".join((open_loop_rows if open_loop else rows)(arguments[0], [Path(p) for p in arguments[1:]])))
