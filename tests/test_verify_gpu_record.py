"""The record of a real `advise verify` run on an NVIDIA H200 (vLLM 0.26.0, 2026-12-02), kept as test data.

tests/data/gpu/h200_verify/ holds what came back from the GPU host: record.json, summary.md, every run's bench
JSON (generated texts removed) and /metrics scrapes, and the servers' key log lines. The model was the
Llama-3.1-8B shape with random weights (`--load-format dummy`), so the candidate (ngram k=4) ran with
synthetic acceptance at the per-position rates the profile's replay measured: a cost-only arm. These tests
re-derive the record's figures from the raw files, so the record cannot drift from what vLLM measured.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.verify.metrics import parse_metrics
from advisor.verify.runner import StepResult
from advisor.verify.verdict import build_verdict

RUN = Path(__file__).parent / "data" / "gpu" / "h200_verify"
RECORD = json.loads((RUN / "record.json").read_text())


def _results() -> list[StepResult]:
    results = []
    for run in RECORD["runs"]:
        stem = f"trial{run['trial']}-{run['arm']}"
        before = parse_metrics((RUN / f"{stem}.metrics.before.txt").read_text())
        after = parse_metrics((RUN / f"{stem}.metrics.after.txt").read_text())
        bench = json.loads((RUN / run["result_file"]).read_text())
        results.append(StepResult(run["trial"], run["arm"], RUN / run["result_file"], bench, after - before,
                                  run["server_startup_s"], run["bench_wall_s"]))
    return results


def test_record_is_a_gpu_run_of_vllm_026_with_a_synthetic_cost_arm() -> None:
    assert RECORD["hardware"] == {"gpus": ["NVIDIA H200"]}
    assert RECORD["vllm"]["version"] == "0.26.0"
    assert "VLLM_CPU_KVCACHE_SPACE" not in json.dumps(RECORD)
    arms = RECORD["protocol"]["arms"]
    assert arms["baseline"]["synthetic_acceptance"] is False and arms["candidate"]["synthetic_acceptance"] is True
    base, cand = arms["baseline"]["serve_argv"], arms["candidate"]["serve_argv"]
    assert cand[: len(base)] == base and cand[len(base)] == "--speculative-config" and len(cand) == len(base) + 2
    assert {"--load-format", "dummy", "--gpu-memory-utilization", "0.85"} <= set(base)
    assert RECORD["protocol"]["order"] == ["trial1-baseline", "trial1-candidate", "trial2-baseline", "trial2-candidate"]


def test_measured_acceptance_matches_the_configured_synthetic_rates() -> None:
    """vLLM accepted drafts at the replay's per-position rates: the arm measured cost at that acceptance."""
    rates = json.loads(RECORD["protocol"]["arms"]["candidate"]["serve_argv"][-1])["synthetic_acceptance_rates"]
    for result in _results():
        if result.arm == "candidate":
            assert result.metrics.spec_drafts > 0
            per_position = [a / result.metrics.spec_drafts for a in result.metrics.spec_accepted_per_pos]
            assert per_position == pytest.approx(rates, abs=0.03)


def test_verdict_re_derived_from_the_raw_bench_files_equals_the_record() -> None:
    verdict = RECORD["verdict"]
    again = build_verdict(_results(), mode="speculative", predicted={}, min_effect=verdict["min_effect"], seed=0)
    assert again["verdict"] == verdict["verdict"] == "confirmed"
    for metric in ("tpot", "e2el", "ttft"):
        assert again["ratios"][metric]["ratio"] == pytest.approx(verdict["ratios"][metric]["ratio"], rel=1e-9)
    assert verdict["ratios"]["tpot"]["ci95"][1] < 0.6  # speculation halved TPOT at concurrency 8


def test_server_logs_show_the_gpu_path() -> None:
    """Key lines of the servers' logs: dummy weights loaded, CUDA graphs captured, the speculative config."""
    candidate = (RUN / "trial1-candidate.server.log.key").read_text()
    baseline = (RUN / "trial1-baseline.server.log.key").read_text()
    assert "'load_format': 'dummy'" in baseline and "speculative_config" not in baseline.split("non-default args")[1][:400]
    assert "'speculative_config'" in candidate and "Model loading took" in candidate and "CUDA graph" in candidate
