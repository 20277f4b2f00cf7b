"""Fixtures for tests that run a real vLLM: the tiny model, built once per venv by scripts/make_tiny_model.py.

Import the fixtures into a test module (`from _vllm_fixtures import tiny_model`); they depend on the
`vllm_python` fixture of conftest.py, so they skip or fail exactly as it does.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _build(vllm_python: Path, name: str, draft: bool = False) -> Path:
    """Build (or reuse: the script skips an up-to-date folder) the tiny model under the venv's models/."""
    models = Path(vllm_python).parent.parent / "models"
    out = models / name
    argv = [str(vllm_python), str(REPO / "scripts" / "make_tiny_model.py"), str(out)]
    if draft:
        argv += ["--draft", str(models / f"{name}-draft")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"make_tiny_model.py failed:\n{done.stderr[-3000:]}")
    return out


@pytest.fixture(scope="session")
def tiny_model(vllm_python: Path) -> Path:
    """Folder of the tiny Llama (4 layers, hidden 256, bf16) with its chat-template tokenizer."""
    return _build(vllm_python, "tiny")


def _run_builder(argv: list[str], what: str) -> Path:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        pytest.fail(f"{what} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def smollm2_with_draft(vllm_python: Path) -> tuple[Path, Path]:
    """(target, draft): the real SmolLM2-135M-Instruct (scripts/make_smollm2.py) and its first 20 of 30
    layers with the final norm and head (scripts/make_draft.py), both under the venv's models/."""
    models = Path(vllm_python).parent.parent / "models"
    target = _run_builder([str(vllm_python), str(REPO / "scripts" / "make_smollm2.py"),
                           str(models / "smollm2-135m-instruct")], "make_smollm2.py")
    draft = _run_builder([str(vllm_python), str(REPO / "scripts" / "make_draft.py"), str(target),
                          str(models / "smollm2-135m-instruct-draft20"), "--layers", "20"], "make_draft.py")
    return target, draft
