#!/usr/bin/env python
"""Build a tiny Llama and its tokenizer offline, deterministically, for tests against a real vLLM.

No model hub is reachable here, so `vllm serve` needs a model made on the spot. This one is a 4-layer Llama
(hidden 256, bf16, about 1.5M parameters) with a byte-level BPE tokenizer trained with `tokenizers` on text
this script generates from a fixed seed, wrapped as a PreTrainedTokenizerFast with a Llama-3-style chat
template, all written with save_pretrained (safetensors). The weights are random: greedy decoding of such a
model falls into loops, so its outputs repeat themselves and an ngram proposer gets drafts accepted, which is
what the verify tests need to see non-zero acceptance.

`--draft DIR` also writes a draft model for `method: draft_model`: the same tokenizer and the target's
weights plus small noise (a draft with unrelated random weights would never be accepted).

Run it with the vllm venv's python (it has torch and transformers). OUT_DIR is rebuilt only when its stamp
(the sha256 of this script) differs, so CI can call it every run for free.

Usage: make_tiny_model.py OUT_DIR [--draft DRAFT_DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
from pathlib import Path

SEED = 20240607
VOCAB_SIZE = 2048
STAMP = ".advisor-model-stamp"
DRAFT_NOISE = 0.1  # relative to each tensor's std: enough to differ, little enough to be accepted often

SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]

# Llama 3's template, without the date/tools preamble. The template writes the BOS text itself, so the
# tokenizer adds no BOS of its own: a prompt rendered here and sent to /v1/completions (as verify does with
# --skip-chat-template) tokenizes to exactly what the chat endpoint would have used.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

_WORDS = (
    "the of and to in is that it for on with as was be by this are from at or an have not they which one you "
    "were all we can there has more when will if would their about what been so some other into time only its "
    "model request token cache prefix server latency throughput batch prompt output decode draft accept "
    "verify speculative config block hash memory queue user assistant system answer question document "
    "function return value list string number file line error result data table column index query update "
    "please explain summarize translate write code test example step first second next then finally"
).split()
_CODE = [
    "def {w}(x):\n    return x + {n}\n",
    "for i in range({n}):\n    print(i, '{w}')\n",
    '{{"{w}": {n}, "ok": true}}\n',
    "SELECT {w} FROM t WHERE id = {n};\n",
]


def training_text(seed: int = SEED, lines: int = 6000) -> list[str]:
    """Seeded pseudo-English, code and JSON lines: enough variety for a 2k-token byte-level BPE."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        if rng.random() < 0.2:
            out.append(rng.choice(_CODE).format(w=rng.choice(_WORDS), n=rng.randrange(1000)))
            continue
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 18))]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice([".", "?", "!", ",", ":"]) + "\n")
    return out


def build_tokenizer(out: Path):
    """Train the BPE and save it as a PreTrainedTokenizerFast with the chat template and special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
        clean_up_tokenization_spaces=False,
        model_max_length=8192,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    # transformers 5 writes the template to chat_template.jinja and names its own backend class; readers
    # that only look at tokenizer_config.json (older transformers, other tools) need both spelled out there.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return fast


def build_model(out: Path, tokenizer, noise_from: Path | None = None) -> None:
    """Write the Llama weights (random, seeded) or, with noise_from, that model's weights plus noise."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    if noise_from is not None:
        model = LlamaForCausalLM.from_pretrained(noise_from, dtype=torch.float32)
        generator = torch.Generator().manual_seed(SEED + 1)
        with torch.no_grad():
            for param in model.parameters():
                scale = DRAFT_NOISE * float(param.std()) if param.numel() > 1 else 0.0
                param.add_(torch.randn(param.shape, generator=generator) * scale)
    else:
        eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=8192,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=eot,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|end_of_text|>")]
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(out)


def script_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def is_current(out: Path, role: str) -> bool:
    stamp = out / STAMP
    return stamp.is_file() and json.loads(stamp.read_text()) == {"script": script_hash(), "role": role}


def write_fresh(out: Path, role: str, build) -> None:
    """Build into a temporary sibling and rename it into place, so an interrupted build leaves no half model."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    (tmp / STAMP).write_text(json.dumps({"script": script_hash(), "role": role}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the target model (rebuilt only if stale)")
    parser.add_argument("--draft", type=Path, help="also write a draft model (target + noise) here")
    args = parser.parse_args(argv)
    out = args.out.resolve()

    if not is_current(out, "target"):
        def build_target(path: Path) -> None:
            build_model(path, build_tokenizer(path))

        write_fresh(out, "target", build_target)
    if args.draft is not None:
        draft = args.draft.resolve()
        if not is_current(draft, "draft") or (draft / STAMP).stat().st_mtime < (out / STAMP).stat().st_mtime:
            def build_draft(path: Path) -> None:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(out)
                tokenizer.save_pretrained(path)
                build_model(path, tokenizer, noise_from=out)

            write_fresh(draft, "draft", build_draft)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
