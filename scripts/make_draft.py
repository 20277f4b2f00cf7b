#!/usr/bin/env python
"""Build a draft model from a target model folder, offline: its first layers, its final norm and its head.

The draft-model validation (scripts/validate_draft.py) needs a draft that is genuinely a different model yet
shares the target's vocabulary, and no hub is reachable. Cutting a decoder to its first N layers (keeping
the embeddings, the final RMSNorm and the tied or untied LM head) gives one: an early exit of the same
network, much weaker than the target, so its greedy tokens agree with the target's only part of the time.
The weights are copied bit for bit (no training, no noise), so the draft is fully determined by the target.
The tokenizer files are copied along, which lets `advise --draft` compare the two vocabularies.

Runs with any python that has torch and transformers (the vllm venv, or advise's `draft` extra). OUT_DIR is
rebuilt only when its stamp (sha256 of this script, the target's config and the layer count) differs.

Usage: make_draft.py TARGET_DIR OUT_DIR [--layers N]   (default: half of the target's layers)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

STAMP = ".advisor-model-stamp"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")


def stamp_for(target: Path, layers: int | None) -> dict:
    config = (target / "config.json").read_bytes()
    return {
        "script": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "target_config": hashlib.sha256(config).hexdigest(),
        "layers": layers,
    }


def build(target: Path, out: Path, layers: int | None) -> int:
    """Saves the truncated model to `out`; returns the number of layers kept."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    total = model.config.num_hidden_layers
    keep = layers if layers is not None else total // 2
    if not 1 <= keep < total:
        raise SystemExit(f"--layers must be in 1..{total - 1} for a {total}-layer target, got {keep}")
    model.model.layers = model.model.layers[:keep]
    model.config.num_hidden_layers = keep
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:keep]
    dtype = json.loads((target / "config.json").read_text()).get("dtype") or "bfloat16"
    model = model.to(getattr(torch, dtype))  # the target's own dtype: the kept weights are unchanged
    model.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (target / name).is_file():
            shutil.copy2(target / name, out / name)
    return keep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="target model folder (config.json + safetensors)")
    parser.add_argument("out", type=Path, help="folder for the draft (rebuilt only if stale)")
    parser.add_argument("--layers", type=int, help="decoder layers to keep (default: half)")
    args = parser.parse_args(argv)
    target, out = args.target.resolve(), args.out.resolve()
    wanted = stamp_for(target, args.layers)
    stamp = out / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        print(out)
        return 0
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build(target, tmp, args.layers)
    (tmp / STAMP).write_text(json.dumps(wanted))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
