"""The one typed request record that flows from ingest through tokenize to measure.

Every log format is read into `Request`. What a format does not carry is None, and the report names the
analyses that this disables (see `advisor.profile`). Text fields hold private data: never print them in a
report unless the user asks.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

_Class = TypeVar("_Class", bound=type)


def pickled_by_fields(cls: _Class) -> _Class:
    """Pickles a slots dataclass as (class, field values): the generated __getstate__ calls fields() for
    every object, which made pickling the requests sent to `--workers` processes several times slower."""
    if any(not f.init for f in fields(cls)):
        raise TypeError(f"{cls.__name__}: a field outside __init__ cannot be pickled by position")
    values = operator.attrgetter(*(f.name for f in fields(cls)))

    def __reduce__(self: Any) -> tuple[type, tuple]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[attr-defined]
    return cls


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Message:
    """One chat message. `content` is plain text (multi-part contents are joined by the reader)."""

    role: str
    content: str


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings as logged; None when the log does not say."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    n: int | None = None  # completions per request (vLLM's SamplingParams.n)


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Request:
    """One request to the model, as the server received it, with its logged outcome.

    `messages` (chat) and `prompt` (completions) are exclusive; token-free traces (Mooncake, Azure) have
    neither and carry `prompt_tokens`/`completion_tokens` and possibly `block_hashes` instead.
    """

    source: str  # "file:line" (or "file:line#turn" for several requests per record): for error messages
    timestamp: float | None = None  # arrival, epoch seconds (or seconds from trace start)
    conversation_id: str | None = None
    turn: int | None = None  # index of this request within its conversation, 0-based
    messages: tuple[Message, ...] | None = None
    prompt: str | None = None
    completion: str | None = None
    prompt_tokens: int | None = None  # as logged (usage, trace lengths)
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens when logged
    model: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    latency_s: float | None = None  # end-to-end latency when logged (for concurrency)
    ttft_s: float | None = None
    block_hashes: tuple[int, ...] | None = None  # trace prefix-block ids (Mooncake hash_ids)
    hash_block_size: int | None = None  # tokens per entry of block_hashes
    # The server's own token ids when the log has them (vLLM's request log): used as they are, no tokenizer.
    prompt_token_ids: tuple[int, ...] | None = None
    output_token_ids: tuple[int, ...] | None = None
    finish_reason: str | None = None  # as logged ("stop", "length", ...)
    # The vLLM replica (server instance) that served it, when the log says: each has its own prefix cache.
    replica: str | None = None

    @property
    def has_text(self) -> bool:
        return self.messages is not None or self.prompt is not None

    @property
    def needs_tokenizer(self) -> bool:
        """Whether some text of the request has no logged token ids (and must be tokenized)."""
        return (self.has_text and self.prompt_token_ids is None) or (
            self.completion is not None and self.output_token_ids is None)

    def extra(self) -> dict[str, Any]:
        """Non-text fields for debugging output (never the prompt or completion text)."""
        return {
            "source": self.source,
            "timestamp": self.timestamp,
            "conversation_id": self.conversation_id,
            "turn": self.turn,
            "replica": self.replica,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
