"""`--tokenizer` / `--model` resolution: which tokenizer counts the tokens, always offline."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from advisor.errors import TokenizerError
from advisor.tokenize import hf_backend, tiktoken_backend
from advisor.tokenize.base import Tokenizer

# Models whose served tokenizer AND chat template are the default's (Llama 3.1 / 3.3 Instruct share both;
# Llama 3.2 shares the tokenizer but its template writes today's date).
_DEFAULT_EXACT = re.compile(r"llama[-_ ]?3\.[13].*instruct", re.IGNORECASE)
_DEFAULT_FAMILY = re.compile(r"llama[-_ ]?3", re.IGNORECASE)


def load_tokenizer(spec: str | None = None, model: str | None = None) -> Tokenizer:
    """The tokenizer for `--tokenizer spec` / `--model model`, loaded without network.

    spec: a tokenizer directory, a tokenizer.json file, an HF model id present in the local HF cache, or
    `tiktoken:<encoding>[=<file>]`. Without spec, `model` (a model directory or cached id) supplies its own
    tokenizer when found locally; otherwise the default (Meta's Llama 3.1 tokenizer from llama-models) is
    used and `info.model_match`/`info.warning` say how far it is from the target model's.
    Raises TokenizerError when an explicitly named tokenizer cannot be loaded offline.
    """
    if spec:
        tokenizer = _load_spec(spec)
        if model and tokenizer.info.model_match is None and spec == model:
            tokenizer.info = replace(tokenizer.info, model_match=True)
        return tokenizer
    if model:
        directory = hf_backend.find_local(model)
        if directory is not None and _has_tokenizer_files(directory):
            return hf_backend.load_pretrained(directory, model, model_match=True)
    tokenizer = tiktoken_backend.load_default()
    if model:
        tokenizer.info = replace(tokenizer.info, model_match=_default_matches(model), warning=_default_warning(model))
    return tokenizer


def _load_spec(spec: str) -> Tokenizer:
    if spec.startswith("tiktoken:"):
        return tiktoken_backend.load_tiktoken(spec)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.name.endswith(".json"):
            return hf_backend.load_tokenizer_json(path)
        raise TokenizerError(
            f"--tokenizer {spec}: a file must be a Hugging Face tokenizer.json; for a tiktoken BPE file use "
            f"--tokenizer tiktoken:<encoding>={spec}"
        )
    directory = hf_backend.find_local(spec)
    if directory is None:
        raise TokenizerError(
            f"--tokenizer {spec}: no such directory or file, and no snapshot of {spec!r} in the local Hugging Face "
            "cache (advise never downloads). Download it where you have network (huggingface-cli download "
            f"{spec} --include 'tokenizer*' 'special_tokens_map.json' 'config.json') and copy the folder or "
            "the HF cache here, or point --tokenizer at a folder holding tokenizer.json and tokenizer_config.json"
        )
    if not _has_tokenizer_files(directory):
        raise TokenizerError(f"--tokenizer {spec}: {directory} holds no tokenizer.json or tokenizer_config.json")
    if not (directory / "tokenizer_config.json").is_file():
        return hf_backend.load_tokenizer_json(directory / "tokenizer.json")
    return hf_backend.load_pretrained(directory, spec, model_match=None)


def _has_tokenizer_files(directory: Path) -> bool:
    return (directory / "tokenizer.json").is_file() or (directory / "tokenizer_config.json").is_file()


def _default_matches(model: str) -> bool | None:
    if _DEFAULT_EXACT.search(model):
        return True
    if _DEFAULT_FAMILY.search(model):
        return None  # same tokenizer, chat template may differ
    return False


def _default_warning(model: str) -> str | None:
    match = _default_matches(model)
    if match:
        return None
    if match is None:
        return (
            f"tokenizer of {model} not found locally: counting with the default Llama 3.1 tokenizer and template "
            "(same token ids as Llama 3.x; the chat template may differ slightly)"
        )
    return (
        f"tokenizer of {model} not found locally: counting with the default Llama 3.1 tokenizer, so token "
        "counts are approximate (pass --tokenizer with the model's tokenizer folder for exact counts)"
    )
