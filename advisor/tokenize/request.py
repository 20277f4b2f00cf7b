"""Requests -> token ids as vLLM's server would produce them, with each distinct text piece encoded once.

Multi-turn logs repeat every earlier turn in each later request, so encoding whole prompts costs O(turns^2)
tokenizer work. The rendered prompt is cut at special-token strings (`Tokenizer.split_special`); each piece is
looked up in an LRU cache (text -> ids, bounded by bytes) and the misses of a whole batch are encoded in one
batched call. Special tokens are atomic in tiktoken and HF tokenizers, so the concatenation is exactly the
ids of the whole text (docs/tokenizers.md; tests/test_tokenize.py checks it on real ShareGPT chats).
Tokenizers that are not split-invariant (SentencePiece prefix space) are cached by whole text instead.
Where the chat template is known to render message by message (`Tokenizer.segments`: the Llama 3.1 template),
a second LRU maps each message (and the system header) to its ids, so a conversation's history is rendered,
cut and looked up once, not once per later turn; the ids are the same (segments start and end at special
tokens, so their pieces are the whole prompt's pieces). Where the tokenizer provably encodes "\n\n" + text as
"\n\n" then text (`Tokenizer.blank_line_ids`: Llama 3's split pattern), a message body "\n\n" + content whose
content was encoded anyway (usually the completion an assistant message repeats) is not encoded again.

What vLLM does (cited from its source):
- chat: `apply_chat_template(..., tokenize=False, add_generation_prompt=True)` then `encode(text,
  add_special_tokens=False)` (vllm/renderers/hf.py `safe_apply_chat_template`; vllm/renderers/base.py
  `default_chat_tok_params`, `_tokenize_prompt`; vllm/entrypoints/openai/chat_completion/protocol.py
  `ChatCompletionRequest.add_special_tokens` default False, `add_generation_prompt` default True);
- completions: `encode(prompt, add_special_tokens=True)`, e.g. BOS for Llama (vllm/renderers/base.py
  `default_cmpl_tok_params`; completion/protocol.py `CompletionRequest.add_special_tokens` default True);
- outputs: the generated text encoded without added special tokens, as `vllm bench serve` counts them.
Token ids the server logged (`Request.prompt_token_ids` / `output_token_ids`, vLLM's request log) are its own
tokenization: they pass through unchanged, checked against the vocabulary when a tokenizer is loaded anyway.
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field

import numpy as np

from advisor.errors import TokenizerError
from advisor.record import Request
from advisor.tokenize.base import BLANK_LINE, Tokenizer

_ENTRY_OVERHEAD = 200  # bytes per cache entry beyond the str and the ids' data (dict slot, ndarray object)
DEFAULT_CACHE_BYTES = 96 << 20  # holds the live conversations of a log; the profile's memory bound counts it
SEGMENT_CACHE_SHARE = 2 / 3  # of the cache bytes, for message segments when the template has them


@dataclass(slots=True)
class TokenizedRequest:
    """A request with the token ids vLLM would see; ids are None when the log has no text for them."""

    request: Request
    prompt_ids: np.ndarray | None  # int32
    output_ids: np.ndarray | None  # int32

    @property
    def prompt_len(self) -> int | None:
        """Tokens in the prompt: from the ids, else as logged (token-free traces)."""
        return len(self.prompt_ids) if self.prompt_ids is not None else self.request.prompt_tokens

    @property
    def output_len(self) -> int | None:
        """Tokens in the completion: from the ids, else as logged."""
        return len(self.output_ids) if self.output_ids is not None else self.request.completion_tokens


@dataclass(slots=True)
class PackedIds:
    """The token ids of a batch of requests in one int32 array, without an array object per request:
    request i's prompt ids, then its output ids, from `starts[i]`. `prompt_lens[i]` / `output_lens[i]` are
    -1 where the request has no such ids (no text for them)."""

    ids: np.ndarray  # int32
    starts: np.ndarray  # int64
    prompt_lens: np.ndarray  # int64
    output_lens: np.ndarray  # int64

    def prompt(self, index: int) -> np.ndarray | None:
        """Request `index`'s prompt ids (a view), or None."""
        length = int(self.prompt_lens[index])
        start = int(self.starts[index])
        return None if length < 0 else self.ids[start:start + length]

    def output(self, index: int) -> np.ndarray | None:
        """Request `index`'s output ids (a view), or None."""
        length = int(self.output_lens[index])
        start = int(self.starts[index]) + max(0, int(self.prompt_lens[index]))
        return None if length < 0 else self.ids[start:start + length]


@dataclass
class TokenizeStats:
    """Work done so far, for benchmarks and the report's performance notes."""

    pieces: int = 0  # text pieces looked up
    cache_hits: int = 0
    encoded_texts: int = 0  # distinct texts sent to the tokenizer
    encoded_chars: int = 0
    derived_texts: int = 0  # distinct texts "\n\n" + rest whose ids were built from rest's (no encoding)
    tokens: int = 0  # prompt + output tokens produced
    evictions: int = 0
    segment_hits: int = 0  # chat messages (and system headers) served whole: from the segment cache, or
    # rendered earlier in the same batch (or the one before, while it is unfinished)


def _key_bytes(key: Hashable) -> int:
    """Memory of a cache key: its strings as Python stores them (1 to 4 bytes a character)."""
    if isinstance(key, str):
        return sys.getsizeof(key)
    return sum(sys.getsizeof(part) for part in key if isinstance(part, str))  # type: ignore[union-attr]


class _PieceCache:
    """LRU map key (a text piece, or a chat segment's key) -> int32 ids, bounded by an estimate of its memory."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, tuple[np.ndarray, int]] = OrderedDict()

    def get(self, key: Hashable) -> np.ndarray | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, ids: np.ndarray) -> int:
        """Insert; returns how many entries were evicted to stay within the budget."""
        if key in self._entries:
            return 0
        size = _key_bytes(key) + ids.nbytes + _ENTRY_OVERHEAD
        if size > self.max_bytes:
            return 0
        self._entries[key] = (ids, size)
        self.bytes += size
        evicted = 0
        while self.bytes > self.max_bytes:
            _, (_, old_size) = self._entries.popitem(last=False)
            self.bytes -= old_size
            evicted += 1
        return evicted

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(slots=True, eq=False)
class _Segment:
    """A chat segment missing from the segment cache: its pieces, and its ids once the batch is encoded."""

    key: Hashable
    pieces: list
    ids: np.ndarray | None = field(default=None)


def _ids(ids: tuple[int, ...] | None) -> np.ndarray | None:
    return None if ids is None else np.asarray(ids, dtype=np.int32)


def logged_ids(request: Request) -> TokenizedRequest:
    """The request with the token ids its log carries, for requests that need no tokenizer."""
    return TokenizedRequest(request, _ids(request.prompt_token_ids), _ids(request.output_token_ids))


class RequestTokenizer:
    """Turns Requests into token ids with the per-piece cache (one instance per run; not thread-safe)."""

    def __init__(self, tokenizer: Tokenizer, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.tokenizer = tokenizer
        self.stats = TokenizeStats()
        self._segmenter = tokenizer.segments if tokenizer.split_invariant else None
        segment_bytes = int(cache_bytes * SEGMENT_CACHE_SHARE) if self._segmenter is not None else 0
        self._cache = _PieceCache(cache_bytes - segment_bytes)
        self._segments = _PieceCache(segment_bytes)
        self._pending: dict[Hashable, _Segment] = {}  # this batch's segment misses, each rendered once
        self._earlier: dict[Hashable, _Segment] = {}  # those of the unfinished batch before it, while planning
        self._texts: list[str] = []  # the text pieces of the batch being planned, as `_arrays` meets them
        self._unfinished: StartedBatch | None = None  # the batch begun last, while it is not finished
        self._special: dict[int, np.ndarray] = {}  # special id -> 1-element array, reused
        self._prefix = np.asarray(tokenizer.completion_prefix, dtype=np.int32)
        self._blank_line = tokenizer.blank_line_ids if tokenizer.split_invariant else None
        self._suffix = np.asarray(tokenizer.completion_suffix, dtype=np.int32)

    def clear_cache(self) -> None:
        """Drops the piece cache (its memory goes back): for when no more requests will come."""
        self._cache = _PieceCache(self._cache.max_bytes)
        self._segments = _PieceCache(self._segments.max_bytes)

    def tokenize(self, requests: Sequence[Request]) -> list[TokenizedRequest]:
        """Token ids for one batch of requests; all cache misses of the batch are encoded in one call."""
        packed = self.tokenize_packed(requests)
        return [TokenizedRequest(request, _own(packed.prompt(i)), _own(packed.output(i)))
                for i, request in enumerate(requests)]

    def tokenize_packed(self, requests: Sequence[Request]) -> PackedIds:
        """`tokenize` into one array for the whole batch (the streaming profile's form: one concatenation and
        no array object per request)."""
        return self.finish(self.begin(requests))

    def begin(self, requests: Sequence[Request], executor: Executor | None = None) -> StartedBatch:
        """The first half of `tokenize_packed`: plans the batch, looks its pieces up and starts encoding the
        misses, on `executor` when given (the encoders release the GIL: the caller's Python work goes on
        meanwhile). One batch begun before may still be unfinished (its misses still being encoded): the
        pieces and segments this batch shares with it are taken from it at `finish`, not encoded again.
        Batches finish in the order they began."""
        previous = self._unfinished
        plans: list[tuple[list | None, list | None]] = []
        self._pending, self._texts = {}, []  # (a batch that failed may have left some)
        self._earlier = previous.segments if previous is not None else {}
        for request in requests:
            try:
                output = ([self._logged(request.output_token_ids)] if request.output_token_ids is not None
                          else self._split(request.completion))
                plans.append((self._prompt_plan(request), output))
            except TokenizerError as exc:
                raise TokenizerError(f"{request.source}: {exc}") from exc
        in_flight = previous.missed if previous is not None else set()
        found, texts, deferred, derived = self._look_up(in_flight)
        encoded: Future | list[np.ndarray] = []
        if texts:
            encoded = executor.submit(self._encode, texts) if executor is not None else self._encode(texts)
        self._unfinished = StartedBatch(plans, found, texts, encoded, {*texts, *derived}, self._pending,
                                        previous if deferred else None, deferred, derived)
        self._pending, self._earlier, self._texts = {}, {}, []
        return self._unfinished

    def finish(self, started: StartedBatch) -> PackedIds:
        """The packed ids of a batch `begin` started."""
        found = started.found
        if started.previous is not None:  # finished before this one: its misses are in its found ids
            found.update((text, started.previous.found[text]) for text in started.deferred)
            started.previous = None
        encoded = started.encoded.result() if isinstance(started.encoded, Future) else started.encoded
        stats = self.stats
        stats.encoded_texts += len(started.texts)
        stats.encoded_chars += sum(map(len, started.texts))
        for text, array in zip(started.texts, encoded):
            found[text] = array
            stats.evictions += self._cache.put(text, array)
        if started.derived:
            stats.derived_texts += len(started.derived)
            blank_line = self._blank_line
            for text, rest in started.derived.items():
                found[text] = array = np.concatenate((blank_line, found[rest]))
                stats.evictions += self._cache.put(text, array)
        plans = started.plans
        count = len(plans)
        lengths = np.full((2, count), -1, dtype=np.int64)
        arrays: list[np.ndarray] = []
        for index, plan in enumerate(plans):
            for side in (0, 1):
                parts = plan[side]
                if parts is None:
                    continue
                size = 0
                for part in parts:
                    kind = type(part)
                    if kind is str:
                        array = found[part]
                    elif kind is _Segment:
                        array = part.ids if part.ids is not None else self._segment_ids(part, found)
                    else:
                        array = part
                    arrays.append(array)
                    size += array.size
                lengths[side, index] = size
        if self._unfinished is started:
            self._unfinished = None
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
        self.stats.tokens += ids.size
        starts = np.zeros(count, dtype=np.int64)
        np.cumsum(np.maximum(lengths, 0).sum(axis=0)[:-1], out=starts[1:])
        return PackedIds(ids, starts, lengths[0], lengths[1])

    def _logged(self, ids: tuple[int, ...]) -> np.ndarray:
        """Logged ids as they are; an id outside the vocabulary means this is not the server's tokenizer."""
        array = np.asarray(ids, dtype=np.int32)
        vocab = self.tokenizer.info.vocab_size
        if self.tokenizer.info.is_default or not array.size:
            return array
        worst = int(array.max()) if int(array.max()) >= vocab else int(array.min())
        if worst >= vocab or worst < 0:
            raise TokenizerError(f"the log holds token id {worst} but tokenizer {self.tokenizer.info.name} has "
                                 f"{vocab} ids: it is not the served model's tokenizer")
        return array

    def _prompt_plan(self, request: Request) -> list | None:
        if request.prompt_token_ids is not None:
            return [self._logged(request.prompt_token_ids)]
        if request.messages is not None:
            keys = self._segmenter.keys(request.messages) if self._segmenter is not None else None
            if keys is None:
                return self._split(self.tokenizer.render_chat(request.messages))
            return [self._segment(key) for key in keys]
        if request.prompt is not None:
            return [self._prefix, *self._split(request.prompt), self._suffix]
        return None

    def _segment(self, key: Hashable) -> np.ndarray | _Segment:
        """A chat segment's ids from the segment cache, else its pieces (rendered once per batch)."""
        ids = self._segments.get(key)
        if ids is not None:
            self.stats.segment_hits += 1
            return ids
        pending = self._pending.get(key) or self._earlier.get(key)
        if pending is not None:
            self.stats.segment_hits += 1
            return pending
        pieces = self._segmenter.pieces(key)
        parts = self._split(self._segmenter.render(key)) if pieces is None else self._arrays(pieces)
        pending = self._pending[key] = _Segment(key, parts)
        return pending

    def _split(self, text: str | None) -> list | None:
        """Pieces of `text`: str (to look up / encode) or int32 arrays (special tokens, affixes)."""
        if text is None:
            return None
        if not self.tokenizer.split_invariant:
            if not text:
                return []
            self._texts.append(text)
            return [text]
        return self._arrays(self.tokenizer.split_special(text))

    def _arrays(self, pieces: list[str | int]) -> list:
        """`split_special` pieces with each special-token id as its (reused) 1-element int32 array; the text
        pieces are also noted for the batch's look-up (a segment's once, when the batch first meets it)."""
        out: list = []
        texts = self._texts
        for piece in pieces:
            if type(piece) is str:
                out.append(piece)
                texts.append(piece)
            else:
                array = self._special.get(piece)
                if array is None:
                    array = self._special[piece] = np.array([piece], dtype=np.int32)
                out.append(array)
        return out

    def _look_up(self, in_flight: set[str]) -> tuple[dict[str, np.ndarray], list[str], list[str], dict[str, str]]:
        """The batch's text pieces (`_texts`) found in the cache, its distinct misses to encode in order, the
        pieces that the batch before encodes (`in_flight`: its misses, not in the cache until it finishes), and
        the misses whose ids are "\n\n"'s then those of a text found or encoded with them (`_derivable`):
        miss -> text.

        The found ids are a dict local to the batch so that evictions during insertion cannot lose a piece.
        """
        found: dict[str, np.ndarray] = {}
        misses: dict[str, None] = {}
        deferred: dict[str, None] = {}
        texts = self._texts
        get = self._cache.get
        for piece in texts:
            if piece in found or piece in misses or piece in deferred:
                continue  # seen earlier in this batch: encoded once
            ids = get(piece)
            if ids is not None:
                found[piece] = ids
            elif piece in in_flight:
                deferred[piece] = None
            else:
                misses[piece] = None
        stats = self.stats
        stats.pieces += len(texts)
        stats.cache_hits += len(texts) - len(misses)
        derived = self._derivable(misses, found, deferred, in_flight) if self._blank_line is not None else {}
        return found, [text for text in misses if text not in derived], list(deferred), derived

    def _derivable(self, misses: dict[str, None], found: dict[str, np.ndarray], deferred: dict[str, None],
                   in_flight: set[str]) -> dict[str, str]:
        """The misses "\n\n" + rest (rest starting with a non-whitespace character: `Tokenizer.blank_line_ids`)
        whose rest this batch has ids for anyway: found, encoded, or taken from the batch before (added to
        `found` and `deferred` here). In a multi-turn log that is every assistant message that repeats the
        completion of an earlier request: its template body is "\n\n" + the completion, stripped."""
        derived: dict[str, str] = {}
        get = self._cache.get
        cut = len(BLANK_LINE)
        for text in misses:
            if not text.startswith(BLANK_LINE) or len(text) <= cut or text[cut].isspace():
                continue
            rest = text[cut:]
            if rest in misses or rest in found or rest in deferred:
                derived[text] = rest
            elif (ids := get(rest)) is not None:
                found[rest] = ids
                derived[text] = rest
            elif rest in in_flight:
                deferred[rest] = None
                derived[text] = rest
        return derived

    def _encode(self, texts: list[str]) -> list[np.ndarray]:
        """The ids of a batch's missed pieces, in one batched call (GIL-free in the encoders: on a thread)."""
        if self.tokenizer.split_invariant:
            return self.tokenizer.encode_ordinary_arrays(texts)
        return [np.asarray(ids, dtype=np.int32) for ids in self.tokenizer.encode_texts(texts, special=True)]

    def _segment_ids(self, segment: _Segment, found: dict[str, np.ndarray]) -> np.ndarray:
        """A missed segment's ids from its pieces, stored in the segment cache (the first time the batch needs
        them)."""
        arrays = [found[part] if type(part) is str else part for part in segment.pieces]
        segment.ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
        self.stats.evictions += self._segments.put(segment.key, segment.ids)
        return segment.ids


@dataclass(slots=True, eq=False)
class StartedBatch:
    """A batch between `RequestTokenizer.begin` and `finish`: its plans, the pieces found in the cache, the
    missed pieces being encoded (`texts`: their ids a Future when on an executor), its missed chat segments,
    the pieces `deferred` to the batch begun before it, `previous`, and the missed pieces built from the ids
    of another (`derived`: "\n\n" + rest -> rest). `missed` holds the encoded and the derived pieces: a batch
    begun before this one finishes takes them from it."""

    plans: list[tuple[list | None, list | None]]
    found: dict[str, np.ndarray]
    texts: list[str]
    encoded: Future | list[np.ndarray]
    missed: set[str]
    segments: dict[Hashable, _Segment]
    previous: StartedBatch | None
    deferred: list[str]
    derived: dict[str, str]


def _own(ids: np.ndarray | None) -> np.ndarray | None:
    """A request's ids in an array of their own (not a view that keeps a whole batch's ids alive)."""
    return None if ids is None else ids.copy()
