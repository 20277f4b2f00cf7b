"""Process-group handling of advisor/verify/server.py, with plain `sleep` processes instead of vLLM (fast).

The real-vLLM versions of these checks are in tests/test_vllm_server.py; here a child that starts a
grandchild stands for the API server and its engine core.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from advisor.verify.server import group_members, log_tail, short_tmp_dir, start_process, stop_group

TREE = ["bash", "-c", "sleep 300 & sleep 300 & wait"]


def _gone(pgid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return group_members(pgid) == []


def _members(pgid: int, count: int, within_s: float = 10.0) -> list[int]:
    """The group's members once `count` have started (bash forks its sleeps when it gets the CPU: a fixed
    wait failed on a loaded machine), or as many as there are at the deadline."""
    deadline = time.monotonic() + within_s
    while len(members := group_members(pgid)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


def test_started_process_has_its_own_group_and_stop_kills_the_tree(tmp_path):
    proc = start_process(TREE, tmp_path / "log.txt", os.environ)
    assert len(_members(proc.pid, 3)) == 3
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    stop_group(proc, grace_s=5)
    assert proc.returncode is not None
    assert _gone(proc.pid)


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    proc = start_process(["bash", "-c", "trap '' TERM; sleep 300 & wait"], tmp_path / "log.txt", os.environ)
    assert len(_members(proc.pid, 2)) == 2  # the sleep started, so the trap is set
    began = time.monotonic()
    stop_group(proc, grace_s=1)
    assert time.monotonic() - began >= 1
    assert _gone(proc.pid)


DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from advisor.verify.server import start_process, stop_group, terminate_on_signals
    proc = start_process(["bash", "-c", "sleep 300 & sleep 300 & wait"], Path(sys.argv[1]), os.environ)
    with terminate_on_signals():
        try:
            print(proc.pid, flush=True)
            time.sleep(300)
        finally:
            stop_group(proc, grace_s=5)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_to_the_owner_stop_the_group(tmp_path, sig):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "log.txt")], stdout=subprocess.PIPE, text=True)
    pgid = int(driver.stdout.readline())
    assert len(_members(pgid, 3)) == 3  # the whole tree is up before the signal
    driver.send_signal(sig)
    driver.wait(timeout=30)
    assert driver.returncode != 0
    assert _gone(pgid)


def test_deep_scratch_dirs_get_a_short_tmpdir_for_ipc_sockets(tmp_path):
    """vLLM binds ZeroMQ sockets at TMPDIR/<36-char uuid>; a Unix socket path holds at most 107 bytes."""
    tmp, owned = short_tmp_dir(tmp_path / ("x" * 80))
    try:
        assert owned and len(str(tmp)) + 37 <= 107 and tmp.is_dir()
    finally:
        tmp.rmdir()
    shallow, owned = short_tmp_dir(Path("/tmp") / f"advise-test-{os.getpid()}")
    try:
        assert not owned and shallow.is_dir()
    finally:
        shutil.rmtree(shallow.parent)


def test_log_tail_keeps_the_last_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log, 3) == "line 97\nline 98\nline 99\n"
    assert "no log" in log_tail(tmp_path / "missing.log")
