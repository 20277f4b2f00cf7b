"""The record of a verify run (one JSON document), its history file and its Markdown summary.

The record keeps, per run, the raw files' names and the bench figures copied from them, so that a reader (or
the engine, learning from past runs) can audit every ratio back to `vllm bench serve`'s own output. The
history file is JSON Lines: one record appended per run, never rewritten.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import orjson

from advisor import __version__
from advisor.report import VERIFY_RECORD_SCHEMA
from advisor.verify.dataset import BenchDataset
from advisor.verify.plan import VerifyPlan
from advisor.verify.runner import StepResult

SCHEMA = VERIFY_RECORD_SCHEMA
# Copied from each bench JSON into the record (summary figures; per-request lists stay in the raw file).
BENCH_KEYS = (
    "num_prompts", "completed", "failed", "duration", "request_rate", "burstiness", "max_concurrency",
    "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
    "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
)


def build_record(plan: VerifyPlan, results: list[StepResult], verdict: dict, *, logs: list[str],
                 tokenizer: str, prediction_source: str | None, hardware: dict | None = None) -> dict:
    """The complete record of one verify run (JSON-ready). `hardware`: {"gpus": [names]} of the host that
    served (empty list: a CPU build), which the engine matches with a GPU when it learns from history.

    An arm whose config has `"rejection_sample_method": "synthetic"` measured COST only: vLLM accepted drafts
    at the configured per-position rates, not by comparing them with the model's tokens; the record says so.
    """
    dataset: BenchDataset = plan.dataset
    return {
        "schema": SCHEMA,
        "advise_version": __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": {"logs": logs, "model": plan.model, "served_model_name": plan.served_model_name,
                   "tokenizer": tokenizer, "prediction_source": prediction_source},
        "dataset": dataset.to_dict(),
        "hardware": hardware,
        "vllm": {"command": list(plan.vllm_cmd), "version": plan.vllm_version},
        "protocol": {
            "mode": plan.mode,
            "trials": plan.trials,
            "order": [f"trial{step.trial}-{step.arm.name}" for step in plan.steps],
            "seed": plan.seed,
            "serve_args": list(plan.serve_args),
            "fresh_server_per_run": all(arm.url is None for arm in plan.arms),
            "arms": {
                arm.name: {"speculative_config": arm.speculative_config, "flags": list(arm.flags), "url": arm.url,
                           "synthetic_acceptance": bool(arm.speculative_config)
                           and arm.speculative_config.get("rejection_sample_method") == "synthetic",
                           "serve_argv": None if arm.url else plan.serve_argv(arm, "PORT")}
                for arm in plan.arms
            },
            "bench_argv": plan.bench_argv(plan.steps[0], "BASE_URL"),
        },
        "runs": [
            {
                "trial": r.trial,
                "arm": r.arm,
                "result_file": r.result_file.name,
                "server_startup_s": r.server_startup_s,
                "bench_wall_s": r.bench_wall_s,
                "bench": {key: r.bench.get(key) for key in BENCH_KEYS if key in r.bench},
                "metrics": r.metrics.to_dict(),
            }
            for r in results
        ],
        "verdict": verdict,
    }


def save_record(record: dict, out_dir: Path, history: Path | None) -> tuple[Path, Path]:
    """Write record.json and summary.md into `out_dir`, append the record to `history`; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    record_path = out_dir / "record.json"
    record_path.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    summary_path = out_dir / "summary.md"
    summary_path.write_text(render_markdown(record))
    if history is not None:
        history.parent.mkdir(parents=True, exist_ok=True)
        with history.open("ab") as handle:
            handle.write(orjson.dumps(record) + b"\n")
    return record_path, summary_path


def _num(value: object, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _arms_sentence(protocol: dict) -> str:
    if protocol.get("mode") == "apc":
        return "Candidate: automatic prefix caching on; baseline: the same server with `--no-enable-prefix-caching`"
    config = json.dumps(protocol["arms"]["candidate"]["speculative_config"])
    return f"Candidate `--speculative-config '{config}'` against the same server without it"


def render_markdown(record: dict) -> str:
    """A human summary of the record: verdict and rule first, then ratios, controls, predictions, runs."""
    verdict = record["verdict"]
    protocol = record["protocol"]
    dataset = record["dataset"]
    load = dataset["load"]
    lines = [
        f"# advise verify: {verdict['verdict'].upper()}",
        "",
        f"{verdict['reason']}.",
        "",
        f"Rule: {verdict['rule']}.",
        "",
        f"{_arms_sentence(protocol)}; model `{record['inputs']['served_model_name']}`; {protocol['trials']} trial(s), order "
        f"{' '.join(protocol['order'])}; {dataset['rows']} requests from the logs "
        f"({dataset['input_tokens']} prompt and {dataset['output_tokens']} output tokens per run) at "
        f"{_num(load['request_rate'], 2) if load['request_rate'] else 'inf'} req/s, burstiness {_num(load['burstiness'], 2)}, "
        f"max concurrency {load['max_concurrency'] or 'none'}, temperature {dataset['temperature']:g}.",
        "",
        "## Ratios (candidate / baseline, 95% interval)",
        "",
        "| metric | baseline | candidate | ratio | 95% interval |",
        "|---|---:|---:|---:|---|",
    ]
    units = {"tpot": "ms", "ttft": "ms", "e2el": "ms", "itl": "ms", "output_throughput": "tok/s"}
    for name, ratio in verdict["ratios"].items():
        label = f"{name.upper() if name != 'output_throughput' else 'output throughput'} ({units[name]})"
        lines.append(f"| {label} | {_num(ratio['baseline'], 2)} | {_num(ratio['candidate'], 2)} | "
                     f"{_num(ratio['ratio'])} | [{_num(ratio['ci95'][0])}, {_num(ratio['ci95'][1])}] |")
    caveat = f" {verdict['itl_caveat']}." if verdict.get("itl_caveat") else ""
    lines += ["", f"Below 1 is better for latencies, above 1 for throughput.{caveat}", "", "## Controls", ""]
    for check in verdict["controls"]:
        lines.append(f"- [{'x' if check['ok'] else ' '}] {check['name']}: {check['detail']}")
    lines += ["", "## Predicted versus measured", "", "| figure | predicted | measured |", "|---|---:|---:|"]
    for row in verdict["predicted_vs_measured"]:
        lines.append(f"| {row['figure']} | {_num(row['predicted'])} | {_num(row['measured'])} |")
    if not record["inputs"]["prediction_source"]:
        lines += ["", "No predictions: pass `--recommendation report.json` (from `advise LOGS --json`) to compare."]
    lines += ["", "## Runs", "", "| run | server start (s) | bench (s) | mean TPOT (ms) | mean E2EL (ms) | "
              "output tok/s | accepted / draft tokens | raw result |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for run in record["runs"]:
        bench, metrics = run["bench"], run["metrics"]
        spec = (f"{metrics['spec_accepted_tokens']:g} / {metrics['spec_draft_tokens']:g}"
                if metrics["has_spec_decode"] else "-")
        lines.append(
            f"| trial {run['trial']} {run['arm']} | {_num(run['server_startup_s'], 1)} | {_num(run['bench_wall_s'], 1)} | "
            f"{_num(bench.get('mean_tpot_ms'), 2)} | {_num(bench.get('mean_e2el_ms'), 1)} | "
            f"{_num(bench.get('output_throughput'), 1)} | {spec} | `{run['result_file']}` |"
        )
    return "\n".join(lines) + "\n"
