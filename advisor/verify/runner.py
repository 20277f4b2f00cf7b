"""Carry out a `VerifyPlan`: per step a fresh server, a warm-up, /metrics, the bench, /metrics, stop.

The warm-up requests run before the first /metrics scrape and before the bench, so neither the bench's
figures nor the counters include it; its prompt is shorter than a KV block, so it leaves no cached block
that a replayed prompt could hit. The bench runs in its own process group like the server, and both are
stopped on error, timeout and Ctrl-C (advisor.verify.server).
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from advisor.errors import VllmError
from advisor.verify.metrics import MetricsSnapshot, parse_metrics
from advisor.verify.plan import WARMUP_PROMPT, WARMUP_REQUESTS, WARMUP_TOKENS, Step, VerifyPlan
from advisor.verify.server import (
    VllmServer, group_members, http_get, log_tail, start_process, stop_group, terminate_on_signals, vllm_env,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class StepResult:
    """The raw outcome of one (trial, arm): the bench JSON as saved, and the /metrics difference."""

    trial: int
    arm: str
    result_file: Path
    bench: dict
    metrics: MetricsSnapshot
    server_startup_s: float | None
    bench_wall_s: float


def warm_up(base_url: str, model: str, timeout_s: float = 300.0, requests: int = WARMUP_REQUESTS) -> None:
    """A few short greedy completions, so first-request costs (lazy init, allocator growth, a GPU's first
    kernel launches) are not measured."""
    body = json.dumps({
        "model": model, "prompt": WARMUP_PROMPT, "max_tokens": WARMUP_TOKENS, "temperature": 0, "ignore_eos": True,
    }).encode()
    for _ in range(requests):
        request = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (local server)
                response.read()
        except OSError as exc:
            raise VllmError(f"{base_url}: the warm-up request failed ({exc})") from exc


def run_bench(argv: list[str], log_path: Path, env: dict[str, str], timeout_s: float) -> float:
    """Run `vllm bench serve` in its own process group; VllmError with its log tail if it fails or hangs."""
    began = time.monotonic()
    proc = start_process(argv, log_path, env)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        raise VllmError(
            f"vllm bench serve did not finish in {timeout_s:.0f} s; last lines of {log_path}:\n{log_tail(log_path)}"
        ) from None
    except BaseException:
        stop_group(proc)
        raise
    if group_members(proc.pid):  # helpers of the bench that outlived it
        stop_group(proc)
    if proc.returncode != 0:
        raise VllmError(
            f"vllm bench serve exited with code {proc.returncode}; last lines of {log_path}:\n{log_tail(log_path)}"
        )
    return time.monotonic() - began


def _load_result(step: Step) -> dict:
    try:
        bench = json.loads(step.result_file.read_text())
    except (OSError, ValueError) as exc:
        raise VllmError(f"{step.result_file}: no readable bench result ({exc}); see {step.bench_log}") from exc
    if bench.get("failed"):
        raise VllmError(
            f"{step.result_file}: {bench['failed']} of {bench.get('num_prompts')} requests failed in {step.stem}; "
            f"see {step.bench_log} and {step.server_log}"
        )
    return bench


def run_step(plan: VerifyPlan, step: Step, scratch: Path, *, ready_timeout_s: float,
             bench_timeout_s: float, progress: Progress | None = None) -> StepResult:
    """One (trial, arm), against a fresh server or the arm's URL."""
    say = progress or (lambda message: None)
    if step.arm.url is not None:
        env = vllm_env(scratch, scratch, plan.kv_cache_gib)
        return _measure(plan, step, step.arm.url.rstrip("/"), env, None, bench_timeout_s, say)
    server = VllmServer(
        plan.vllm_cmd, plan.model, step.server_log, scratch, args=plan.server_flags(step.arm),
        served_model_name=plan.served_model_name, kv_cache_gib=plan.kv_cache_gib, ready_timeout_s=ready_timeout_s,
    )
    say(f"{step.stem}: starting vllm serve (log {step.server_log})")
    with server:
        say(f"{step.stem}: server ready in {server.startup_s:.0f} s")
        return _measure(plan, step, server.url, server.env, server.startup_s, bench_timeout_s, say)


def _measure(plan: VerifyPlan, step: Step, url: str, env: dict[str, str], startup_s: float | None,
             bench_timeout_s: float, say: Progress) -> StepResult:
    warm_up(url, plan.served_model_name)
    before_text = _scrape_raw(url, step.metrics_file("before"))
    say(f"{step.stem}: bench of {plan.dataset.rows} requests")
    wall = run_bench(plan.bench_argv(step, url), step.bench_log, env, bench_timeout_s)
    after_text = _scrape_raw(url, step.metrics_file("after"))
    delta = parse_metrics(after_text) - parse_metrics(before_text)
    return StepResult(step.trial, step.arm.name, step.result_file, _load_result(step), delta, startup_s, wall)


def _scrape_raw(url: str, path: Path) -> str:
    """Scrape /metrics, keep the raw text next to the results (for audits), return it."""
    status, text = http_get(f"{url}/metrics", timeout=30)
    if status != 200:
        raise VllmError(f"{url}/metrics: HTTP status {status or 'no answer'}")
    path.write_text(text)
    return text


def run_plan(plan: VerifyPlan, *, ready_timeout_s: float = 900.0,
             bench_timeout_s: float = 3600.0, progress: Progress | None = None) -> list[StepResult]:
    """All steps in plan order. SIGTERM/SIGHUP act like Ctrl-C: the running server and bench are stopped."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    scratch = plan.out_dir / "scratch"
    results = []
    with terminate_on_signals():
        for step in plan.steps:
            results.append(run_step(plan, step, scratch, ready_timeout_s=ready_timeout_s,
                                    bench_timeout_s=bench_timeout_s, progress=progress))
    return results
