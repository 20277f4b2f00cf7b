"""`advise --ray`: shards of a real log collected on a real local Ray cluster (a head with 2 worker CPUs, in its
own process group, always stopped) give the single-process report field by field.

Needs the `advise[ray]` extra; skips without it, and fails instead when ADVISOR_RAY_REQUIRED is set (.ci/run).
"""
from __future__ import annotations

import gzip
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from advisor.cli import cli

from advisor.profile import ProfileOptions, build_profile
from test_stream import _chat_log, assert_same

STARTUP_S = 120


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """The address of a Ray head started with `ray start --head --block` (2 CPUs, 127.0.0.1)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = tmp_path_factory.mktemp("ray")
    log = folder / "head.log"
    # Token authentication with a token of this test's own, for the head and this driver alike: Ray 2.60 reads
    # ~/.ray/auth_token otherwise, which an earlier local `ray.init()` may have written.
    token = folder / "auth_token"
    token.write_text(secrets.token_hex(32))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {name: os.environ.get(name) for name in auth}
    os.environ.update(auth)  # before ray is imported: it reads the mode once
    if not _has_ray():
        _restore(saved)
        if os.environ.get("ADVISOR_RAY_REQUIRED"):
            pytest.fail("ray is not installed and ADVISOR_RAY_REQUIRED is set: pip install -e '.[ray]'")
        pytest.skip("needs the advise[ray] extra")
    env = dict(os.environ)
    ray = Path(sys.executable).with_name("ray")
    with open(log, "wb") as out:
        head = subprocess.Popen(
            [str(ray), "start", "--head", "--block", "--num-cpus=2", f"--port={port}",
             "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
             f"--object-store-memory={300 * 2**20}", f"--temp-dir={tmp_path_factory.mktemp('ray-temp')}"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while b"Ray runtime started" not in log.read_bytes():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start failed (exit {head.poll()}):\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(head)
        _restore(saved)


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _has_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _stop(process: subprocess.Popen) -> None:
    """Stops the head and everything it started (raylet, GCS, workers: one process group). SIGINT is what
    `ray start --block` stops its processes on (about 2 s here; it outlasts a SIGTERM); SIGKILL if not."""
    for sig, wait_s in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The group may outlive its leader: make sure nothing of it is left.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def _write_lines(path: Path, lines: list[bytes]) -> None:
    data = b"".join(line + b"\n" for line in lines)
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)


def _same_reports(paths: list[str], ray_paths: list[str], address: str, **options) -> dict:
    """The report of one process over `paths` and of the Ray shards of `ray_paths` (the same files), compared
    field by field once the inputs are named alike; returns the single-process report."""
    single = build_profile(ProfileOptions(paths=tuple(paths), **options)).report.to_dict()
    sharded = build_profile(ProfileOptions(paths=tuple(ray_paths), **options), ray_address=address).report.to_dict()
    assert [entry["path"] for entry in sharded["inputs"]] == [entry["path"] for entry in single["inputs"]]
    assert_same(single, sharded)
    return single


def test_sharded_sharegpt_equals_one_process(ray_head, real_file, tmp_path):
    """Multi-turn chats tokenized with the default tokenizer: lengths, overlap with the conversation's earlier
    outputs, prefix sharing, APC, the ngram and suffix replays and the recommendation; three shards, one of
    them gzip, found by a file:// glob."""
    records = orjson.loads(real_file("sharegpt_v3_subset.json").read_bytes())[:900]
    lines = [orjson.dumps(record) for record in records]
    names = ["part-0.jsonl", "part-1.jsonl.gz", "part-2.jsonl"]
    for index, name in enumerate(names):
        _write_lines(tmp_path / name, lines[index * 300:(index + 1) * 300])
    urls = [f"file://{tmp_path / name}" for name in names]
    report = _same_reports(urls, [f"file://{tmp_path}/part-*.jsonl*"], ray_head, sweep=False)
    assert report["ingest"]["requests"] > 900 and report["overlap"]["context_requests"] > 0
    assert report["replay"] and report["apc"] is not None and report["recommendation"] is not None


def test_sharded_timed_trace_equals_one_process(ray_head, real_file, tmp_path):
    """A token-free Mooncake trace with timestamps: arrivals, prefix sharing from hash ids and the timed APC
    replay, one cache per replica of 3 under consistent_hash routing, in two local shards (one gzip) given as
    plain paths."""
    lines = real_file("mooncake_conversation_trace.jsonl").read_bytes().splitlines()
    half = len(lines) // 2
    paths = [str(tmp_path / "trace-0.jsonl"), str(tmp_path / "trace-1.jsonl.gz")]
    _write_lines(Path(paths[0]), lines[:half])
    _write_lines(Path(paths[1]), lines[half:])
    report = _same_reports(paths, paths, ray_head, replicas=3, routing="consistent_hash")
    assert report["arrivals"] is not None and report["apc"] is not None
    assert report["routing"]["replicas"] == 3 and min(report["routing"]["requests"]) > 0


def test_sharded_replicas_named_by_the_log_equal_one_process(ray_head, real_file, tmp_path):
    """Multi-turn chats (ShareGPT as OpenAI records) whose records name their replica, met in another order in
    each shard: the shards' replica names merge into the one-process numbering, and the per-replica APC and
    suffix replays agree."""
    whole = tmp_path / "chat.jsonl"
    _chat_log(real_file, whole, {})
    lines = whole.read_bytes().splitlines()
    conversations = [orjson.loads(line)["conversation_id"] for line in lines]
    cut = next(i for i in range(450, len(lines)) if conversations[i] != conversations[i - 1])  # shards keep them whole
    paths = []
    for part, pods in enumerate((["pod-a", "pod-b", "pod-c"], ["pod-c", "pod-d", "pod-a"])):
        chunk = lines[:cut] if part == 0 else lines[cut:]
        path = tmp_path / f"part-{part}.jsonl"
        _write_lines(path, [orjson.dumps({**orjson.loads(line), "replica": pods[index % 3]})
                            for index, line in enumerate(chunk)])
        paths.append(str(path))
    report = _same_reports(paths, paths, ray_head, sweep=False)
    assert report["routing"]["policy"] == "log"
    assert report["routing"]["names"] == ["pod-a", "pod-b", "pod-c", "pod-d"]
    assert report["apc"] is not None and any("per replica" in r["sampling"] for r in report["replay"])


def test_ray_cli_takes_a_path_after_bare_ray(real_file, tmp_path):
    """`advise --ray LOGS` reads the value click gives --ray as the first log, not as an address; stdin is
    refused with a usage error before Ray starts."""
    from advisor.shards import is_address

    assert is_address("127.0.0.1:6379") and is_address("auto") and is_address("ray://head:10001")
    assert not is_address("s3://bucket/logs/*.jsonl.gz") and not is_address(str(real_file("aider_chat_history.md")))
    result = CliRunner().invoke(cli, ["--ray", "-"], input="")
    assert result.exit_code == 2 and "stdin" in result.stderr
