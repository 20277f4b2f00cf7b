"""The tokenizer interface every backend implements, and what the report says about the tokenizer used.

A `Tokenizer` answers four questions the way vLLM's server would: how a chat renders (`render_chat`), how
text encodes with special tokens parsed and no BOS added (the chat endpoint, `add_special_tokens=False`),
which ids the completions endpoint adds around a raw prompt (`add_special_tokens=True`), and where text can
be cut so that pieces tokenize independently (`split_special`, used by the piece cache in
`advisor.tokenize.request`).
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from advisor.record import Message

BLANK_LINE = "\n\n"  # what the Llama 3.1 template puts before every message's content (`blank_line_ids`)


@dataclass(frozen=True)
class TokenizerInfo:
    """What the report prints about the tokenizer behind every token count."""

    name: str  # e.g. "Llama 3.1 (llama-models tokenizer.model, default)" or the HF id / path
    source: str  # where it came from (path or package)
    kind: str  # "hf" | "tiktoken" | "default"
    vocab_size: int
    is_default: bool
    chat_template: bool  # False: messages are rendered with the documented fallback
    model_match: bool | None  # True: known to be the target model's tokenizer; False: known not; None: unknown
    warning: str | None  # why counts may differ from the served model's, or None


class Tokenizer(ABC):
    """A loaded tokenizer plus its chat template, behaving like vLLM's tokenizer for the served model.

    Subclasses set `info`, `eos_token_ids`, `split_invariant`, `special_ids` (text of every token that is
    matched atomically in input text -> id) and `completion_prefix` / `completion_suffix` (ids the
    completions endpoint adds around an encoded prompt, e.g. BOS for Llama).
    """

    info: TokenizerInfo
    eos_token_ids: tuple[int, ...]
    special_ids: Mapping[str, int]
    split_invariant: bool
    completion_prefix: tuple[int, ...] = ()
    completion_suffix: tuple[int, ...] = ()
    # Per-message segments of the chat template (advisor.tokenize.chat.Llama31Segments) where the template
    # is known to render that way; None: every chat prompt is rendered whole.
    segments = None
    # The ids of BLANK_LINE where encoding BLANK_LINE + text gives them followed by text's own ids whenever text
    # starts with a character that is not whitespace (str.isspace); None where that is not known to hold.
    # The Llama 3.1 template puts "\n\n" before every message's content, and an assistant message is
    # usually an earlier request's completion: its ids are then taken from the completion's, not encoded
    # again (advisor.tokenize.request). A backend sets it only for a split pattern it has checked.
    blank_line_ids: np.ndarray | None = None

    @abstractmethod
    def encode_texts(self, texts: Sequence[str], *, special: bool) -> list[list[int]]:
        """Encode a batch in one call, never adding BOS/EOS.

        special=True parses special-token strings in the text into their ids (what vLLM's HF tokenizers do
        with every input); special=False encodes them as ordinary text.
        """

    @abstractmethod
    def encode_ordinary(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode a batch of texts that contain no special-token strings (the pieces of `split_special`)."""

    def encode_ordinary_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        """`encode_ordinary` as int32 arrays (the piece cache's form); a backend that can hand its ids over
        without a Python list per text overrides it."""
        return [np.asarray(ids, dtype=np.int32) for ids in self.encode_ordinary(texts)]

    @abstractmethod
    def render_chat(self, messages: Sequence[Message]) -> str:
        """The prompt text for a chat request, with the generation prompt, as vLLM's chat endpoint renders it."""

    def split_special(self, text: str) -> list[str | int]:
        """Cut `text` at special-token strings: ordinary text pieces (str) and special-token ids (int).

        Special tokens are matched before the pre-tokenizer runs, in tiktoken as in HF tokenizers, so no BPE
        merge crosses them: for a split-invariant tokenizer, encoding the pieces separately and concatenating
        equals encoding the whole text (docs/tokenizers.md, "Piece cache"). Empty pieces are dropped.
        """
        pattern = self._special_pattern
        firsts = self._special_firsts
        if pattern is None or not (firsts[0] in text if len(firsts) == 1 else any(first in text for first in firsts)):
            return [text] if text else []
        out: list[str | int] = []
        for index, part in enumerate(pattern.split(text)):
            if index % 2:
                out.append(self.special_ids[part])
            elif part:
                out.append(part)
        return out

    @cached_property
    def _special_firsts(self) -> tuple[str, ...]:
        # The first characters of the special-token names: a text with none of them holds no special token,
        # and one `in` test per character (one for Llama 3's "<|...|>") is far cheaper than the regex scan
        # (an empty name gives "", in every text: no shortcut).
        return tuple(sorted({name[:1] for name in self.special_ids}))

    @cached_property
    def _special_pattern(self) -> re.Pattern[str] | None:
        # Longest first: at one position the longest special token wins, as in the tokenizers' matchers.
        names = sorted(self.special_ids, key=len, reverse=True)
        return re.compile("(" + "|".join(map(re.escape, names)) + ")") if names else None
