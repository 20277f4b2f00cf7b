"""Hugging Face tokenizers: a local tokenizer directory, a bare tokenizer.json, or a model id in the local cache.

vLLM loads the served model's tokenizer with `AutoTokenizer.from_pretrained` and renders chats with its
`apply_chat_template`; we do the same, offline only (`local_files_only=True`, HF_HUB_OFFLINE=1), and encode
with the Rust backend (`backend_tokenizer`) in batches. transformers is imported here only, lazily: it takes
about two seconds to import and `import advisor` must stay light.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.errors import TokenizerError
from advisor.record import Message
from advisor.tokenize import chat
from advisor.tokenize.base import Tokenizer, TokenizerInfo

# Pre-tokenizer / normalizer steps that treat the start of each input specially (SentencePiece's "▁" prefix):
# a piece encoded alone would get a prefix it does not get inside the whole text.
_PREFIX_DEPENDENT = {"Metaspace", "Prepend"}
_PROBE = "Hi there,\n\n  a  b\tc! 12345 don't"


def _step_types(state: Any) -> set[str]:
    """Every "type" named in a serialized normalizer / pre-tokenizer, nested sequences included."""
    found: set[str] = set()
    stack = [state]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                found.add(node["type"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


class HfTokenizer(Tokenizer):
    """A `tokenizers.Tokenizer` (Rust) with, when loaded through transformers, its chat template."""

    def __init__(self, backend: Any, info: TokenizerInfo, *, hf_tokenizer: Any | None, eos_token_ids: tuple[int, ...]):
        self.backend = backend
        self.info = info
        self.eos_token_ids = eos_token_ids
        self._hf = hf_tokenizer
        self._template = hf_tokenizer.get_chat_template() if info.chat_template else None
        self._content_format = chat.content_format(self._template) if self._template else "string"
        added = backend.get_added_tokens_decoder()
        # Every added token, special or not, is matched atomically in input text by the backend.
        self.special_ids = {token.content: token_id for token_id, token in added.items()}
        self.split_invariant, self.split_note = self._check_split_invariance(added.values())
        self.completion_prefix, self.completion_suffix = self._completion_affixes()

    def encode_texts(self, texts: Sequence[str], *, special: bool) -> list[list[int]]:
        if special:
            return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]
        previous = self.backend.encode_special_tokens
        self.backend.encode_special_tokens = True  # special-token strings become ordinary text
        try:
            return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]
        finally:
            self.backend.encode_special_tokens = previous

    def encode_ordinary(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def render_chat(self, messages: Sequence[Message]) -> str:
        if self._template is None:
            return chat.render_fallback(messages)
        from jinja2 import TemplateError

        try:
            return self._hf.apply_chat_template(
                chat.message_dicts(messages, self._content_format), tokenize=False, add_generation_prompt=True
            )
        except (TemplateError, ValueError) as exc:
            raise TokenizerError(
                f"{self.info.name}: chat template failed on a conversation of {len(messages)} messages: {exc}"
            ) from exc

    def _check_split_invariance(self, added: Any) -> tuple[bool, str | None]:
        """Whether pieces cut at added tokens tokenize exactly as inside the whole text (docs/tokenizers.md)."""
        for token in added:
            if token.lstrip or token.rstrip or token.single_word:
                return False, f"added token {token.content!r} strips or matches whole words"
        steps: set[str] = set()
        for part in (self.backend.normalizer, self.backend.pre_tokenizer):
            if part is not None:
                steps |= _step_types(json.loads(part.__getstate__()))
        if steps & _PREFIX_DEPENDENT:
            return False, f"{'/'.join(sorted(steps & _PREFIX_DEPENDENT))} adds a prefix at the start of each input"
        if self.backend.normalizer is not None and any(token.normalized for token in added):
            return False, "added tokens are matched after normalization"
        # A probe across special tokens confirms what the rules above allow.
        names = list(self.special_ids)[:3]
        probe = _PROBE.join([""] + names + [""]) if names else _PROBE
        whole = self.encode_texts([probe], special=True)[0]
        pieces: list[int] = []
        for piece in self.split_special(probe):
            pieces.extend([piece] if isinstance(piece, int) else self.encode_ordinary([piece])[0])
        if pieces != whole:
            return False, "a probe text tokenized differently in pieces"
        return True, None

    def _completion_affixes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Ids added with add_special_tokens=True (e.g. BOS), found by encoding a probe.

        Through transformers when it loaded the tokenizer: vLLM calls its `encode`, which may add tokens the
        Rust post-processor does not (it differs between transformers versions for some tokenizers).
        """
        plain = self.backend.encode(_PROBE, add_special_tokens=False).ids
        if self._hf is not None:
            full = list(self._hf.encode(_PROBE, add_special_tokens=True))
        else:
            full = self.backend.encode(_PROBE, add_special_tokens=True).ids
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                return tuple(full[:start]), tuple(full[start + len(plain) :])
        raise TokenizerError(f"{self.info.name}: the post-processor changes the text's tokens; unsupported tokenizer")


def _vocab_size(backend: Any) -> int:
    return backend.get_vocab_size(with_added_tokens=True)


def load_tokenizer_json(path: Path) -> HfTokenizer:
    """A bare tokenizer.json: encoding only, no chat template (messages use the documented fallback)."""
    from tokenizers import Tokenizer as RustTokenizer

    try:
        backend = RustTokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed files
        raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json ({exc})") from exc
    info = TokenizerInfo(
        name=str(path),
        source=str(path),
        kind="hf",
        vocab_size=_vocab_size(backend),
        is_default=False,
        chat_template=False,
        model_match=None,
        warning=(
            "tokenizer.json has no chat template: messages are rendered as 'role: content' blocks, so prompt "
            "lengths are approximate (point --tokenizer at the directory with tokenizer_config.json instead)"
        ),
    )
    return HfTokenizer(backend, info, hf_tokenizer=None, eos_token_ids=())


def find_local(name: str) -> Path | None:
    """A model/tokenizer directory for `name`: an existing directory, or a snapshot in the local HF cache."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name.count("/") > 1 or name.startswith((".", "/", "~")):
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never touch the network from here on
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        return None


def load_pretrained(directory: Path, label: str, *, model_match: bool | None) -> HfTokenizer:
    """A tokenizer as vLLM loads it (AutoTokenizer), from a local directory, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # its import prints "PyTorch was not found"
    import transformers

    transformers.logging.set_verbosity_error()  # no prints from library code
    try:
        hf = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for unusable folders
        raise TokenizerError(f"{directory}: AutoTokenizer could not load a tokenizer offline ({exc})") from exc
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerError(f"{directory}: only a slow (Python) tokenizer is available; advise needs tokenizer.json")
    try:
        has_template = hf.get_chat_template() is not None
    except ValueError:  # transformers: "Cannot use chat template functions because tokenizer.chat_template is not set"
        has_template = False
    eos = hf.eos_token_id
    info = TokenizerInfo(
        name=label,
        source=str(directory),
        kind="hf",
        vocab_size=_vocab_size(backend),
        is_default=False,
        chat_template=has_template,
        model_match=model_match,
        warning=None if has_template else (
            f"{label} has no chat template: messages are rendered as 'role: content' blocks, so prompt lengths "
            "are approximate"
        ),
    )
    return HfTokenizer(backend, info, hf_tokenizer=hf, eos_token_ids=(eos,) if eos is not None else ())
