"""The one way readers validate records: typed, range-checked fields and per-format schemas.

Every reader converts a parsed record (a JSON value, a CSV row, a transcript reply) through the checkers
here, and every failure is a `BadRecord` (kind + field + reason, never the value, which may be private)
that `convert_each` turns into a skipped record with file:line. Numbers are range-checked where they enter
(docs/input.md states the ranges): a value outside them would overflow numpy's int64, allocate without
bound in the prefix and APC replays, or make a time axis of centuries. Types are coerced only where a
format documents it: numeric text in CSV cells and OTLP `intValue`s, integral floats for counts.

A `Schema` declares a format's scalar fields (name, kind, required); `Schema.check` validates them all at
once, before the reader's conversion reads them, so a reader's conversion code only sees checked values.
New readers port by declaring their schema and calling `convert_each`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, TypeVar

from advisor.ingest._io import BadRecord, Sink, parse_iso, type_name
from advisor.record import Request

T = TypeVar("T")

# --- the accepted ranges (docs/input.md, "Accepted ranges") ----------------------------------------------
# Tokens in one request: above the longest context of any released model (10M, Llama 4 Scout) and within
# what a vLLM max_model_len can hold on any GPU; bounds every per-token array.
MAX_TOKENS = 1 << 24
# Entries of a trace's hash_ids: MAX_TOKENS at the smallest hash block of 16 tokens.
MAX_BLOCK_IDS = MAX_TOKENS // 16
# Block ids are stored as numpy int64.
MAX_BLOCK_ID = 2**63 - 1
# Arrival times: epoch seconds up to 2100-01-01, or seconds from a trace start (>= 0, so 0 .. that too).
MAX_EPOCH_S = 4_102_444_800.0
# One request's latency or TTFT: a week (vLLM has no request timeout by default; longer is a logging error).
MAX_DURATION_S = 7 * 86_400.0
# Sampling parameters: the ranges vLLM's SamplingParams accepts (vllm/sampling_params.py, _verify_args),
# temperature capped where vLLM's own docs stop (2.0 for OpenAI; vLLM accepts more, 100 is beyond any use).
MAX_TEMPERATURE = 100.0
MAX_SEED = 2**64 - 1
# Requests from one record (a completions prompt list, a ShareGPT conversation, an OTLP export).
MAX_REQUESTS_PER_RECORD = 4096
# Messages in one chat request.
MAX_MESSAGES = 100_000
# Text of one request, in characters: MAX_TOKENS at 1 char/token would be 16M; real prompts average ~4
# chars/token, so 8M characters is ~2M tokens, the bound on what the tokenizer is asked to hold at once.
MAX_TEXT_CHARS = 8 * 2**20


def _number(value: Any, where: str, *, text: bool, kind: str = "a number") -> float | int:
    """A JSON number (or numeric text when the format documents it) as int or finite float."""
    if isinstance(value, bool) or value is None:
        raise BadRecord("wrong type", f"{where} must be {kind}, got {type_name(value)}")
    if isinstance(value, str):
        if not text:
            raise BadRecord("wrong type", f"{where} must be {kind}, got str")
        stripped = value.strip()
        if len(stripped) > 40:
            raise BadRecord("out of range", f"{where} has {len(stripped)} digits")
        try:
            value = int(stripped)
        except ValueError:
            try:
                value = float(stripped)
            except ValueError:
                raise BadRecord("wrong type", f"{where} must be {kind}, got str") from None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRecord("wrong type", f"{where} must be a finite number")
        return value
    raise BadRecord("wrong type", f"{where} must be {kind}, got {type_name(value)}")


def integer(value: Any, where: str, low: int, high: int, *, text: bool = False) -> int:
    """An integer in [low, high]; integral floats count (JSON writers emit 3.0), `text` admits numeric text."""
    number = _number(value, where, text=text, kind="an integer")
    if isinstance(number, float):
        if not number.is_integer():
            raise BadRecord("wrong type", f"{where} must be an integer, got a fraction")
        if abs(number) > 2**63:
            raise BadRecord("out of range", f"{where} must be in [{low}, {high}]")
        number = int(number)
    if not low <= number <= high:
        raise BadRecord("out of range", f"{where} must be in [{low}, {high}]")
    return number


def real(value: Any, where: str, low: float, high: float, *, text: bool = False) -> float:
    number = _number(value, where, text=text)
    if isinstance(number, int) and abs(number) > 2**63:
        raise BadRecord("out of range", f"{where} must be in [{low:g}, {high:g}]")
    number = float(number)
    if not low <= number <= high:
        raise BadRecord("out of range", f"{where} must be in [{low:g}, {high:g}]")
    return number


def token_count(value: Any, where: str, *, text: bool = False) -> int:
    return integer(value, where, 0, MAX_TOKENS, text=text)


def duration_s(value: Any, where: str, scale: float = 1.0, *, text: bool = False) -> float:
    """A latency or TTFT (given in 1/scale seconds) as seconds in [0, MAX_DURATION_S]."""
    number = real(value, where, 0.0, MAX_DURATION_S / scale, text=text)
    return number * scale


def check_time(seconds: float, where: str) -> float:
    if not 0.0 <= seconds <= MAX_EPOCH_S:
        raise BadRecord("out of range", f"{where} must be a time between 1970 and 2100 "
                                        f"(or seconds from the trace start)")
    return seconds


def epoch_time(value: Any, where: str, *, text: bool = True) -> float:
    """A logged time as epoch seconds: ISO 8601 text, or a number in s, ms, us or ns (told by magnitude:
    above 1e11 cannot be seconds (year 5138), so ms; above 1e14 us; above 1e17 ns); in [0, MAX_EPOCH_S]."""
    if isinstance(value, str) and not _looks_numeric(value):
        seconds = parse_iso(value)
        if seconds is None:
            raise BadRecord("wrong type", f"{where} must be ISO 8601 text or epoch seconds/ms, got str")
        return check_time(seconds, where)
    number = _number(value, where, text=text)
    if abs(number) > 1e21:
        raise BadRecord("out of range", f"{where} must be a time between 1970 and 2100")
    number = float(number)
    for limit, scale in ((1e17, 1e9), (1e14, 1e6), (1e11, 1e3)):
        if abs(number) > limit:
            number /= scale
            break
    return check_time(number, where)


def _looks_numeric(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and stripped.lstrip("+-")[:1].isdigit() and "-" not in stripped.lstrip("+-")[1:] and ":" not in stripped


def block_ids(value: Any, where: str) -> tuple[int, ...]:
    """A trace's prefix-block ids: a list of at most MAX_BLOCK_IDS integers in [0, MAX_BLOCK_ID]."""
    if not isinstance(value, list):
        raise BadRecord("wrong type", f"{where} must be a list, got {type_name(value)}")
    if len(value) > MAX_BLOCK_IDS:
        raise BadRecord("out of range", f"{where} has {len(value)} entries, limit {MAX_BLOCK_IDS}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise BadRecord("wrong type", f"{where} must hold integers only")
        if not 0 <= item <= MAX_BLOCK_ID:
            raise BadRecord("out of range", f"{where} holds an id outside [0, 2^63 - 1]")
    return tuple(value)


def text_size(total_chars: int, where: str) -> None:
    if total_chars > MAX_TEXT_CHARS:
        raise BadRecord("too large", f"{where} holds {total_chars} characters, limit {MAX_TEXT_CHARS}")


# --- declarative schemas ---------------------------------------------------------------------------------

Check = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Field:
    """One scalar field of a format: its key, how it is checked, and whether a record must have it."""

    key: str
    check: Check
    required: bool = False


@dataclass(frozen=True)
class Schema:
    """The checked scalar fields of one format's record (or of one layer of it)."""

    name: str
    fields: tuple[Field, ...]
    # For the quick test that a record holds none of the fields (most records hold few of them).
    _keys: frozenset[str] = field(init=False, repr=False, compare=False)
    _required: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keys", frozenset(spec.key for spec in self.fields))
        object.__setattr__(self, "_required", any(spec.required for spec in self.fields))

    def check(self, record: dict[str, Any], *, where: str = "") -> dict[str, Any]:
        """The checked values of the fields present in `record` (None-valued fields count as absent)."""
        if not self._required and record.keys().isdisjoint(self._keys):
            return {}
        found: dict[str, Any] = {}
        for spec in self.fields:
            value = record.get(spec.key)
            if value is None:
                if spec.required:
                    raise BadRecord("missing field", f"expected '{where}{spec.key}'")
                continue
            found[spec.key] = spec.check(value, f"field '{where}{spec.key}'")
        return found


def tokens(value: Any, where: str) -> int:
    return token_count(value, where)


def tokens_or_text(value: Any, where: str) -> int:
    return token_count(value, where, text=True)


def temperature(value: Any, where: str) -> float:
    return real(value, where, 0.0, MAX_TEMPERATURE, text=True)


def top_p(value: Any, where: str) -> float:
    return real(value, where, 0.0, 1.0, text=True)


def top_k(value: Any, where: str) -> int:
    return integer(value, where, -1, MAX_TOKENS, text=True)  # vLLM: -1 (or 0) disables top-k


def seed(value: Any, where: str) -> int:
    return integer(value, where, -(2**63), MAX_SEED, text=True)


def small_count(value: Any, where: str) -> int:
    return integer(value, where, 0, MAX_REQUESTS_PER_RECORD, text=True)


def turn_index(value: Any, where: str) -> int:
    return integer(value, where, 0, MAX_MESSAGES, text=True)


# --- the record loop ---------------------------------------------------------------------------------------

# What malformed values raise inside a conversion that the schema did not anticipate: turned into a skipped
# record ("malformed record") instead of a traceback. Deliberately not Exception: a bug elsewhere (an
# AssertionError, a MemoryError) must still surface.
MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError, RecursionError)


def convert_each(records: Iterable[tuple[int, T]], convert: Callable[[int, T], Iterable[Request]], sink: Sink
                 ) -> Iterator[Request]:
    """The results of `convert(line, record)` per (line, record); each failure is a skipped record at that line.

    `convert` returns the record's requests; all of them are produced before any is yielded, so a record
    fails or is used whole. A record that gives no request, or one too large to tokenize, is skipped too,
    unless `convert` counted it as used itself (`sink.used`: a history message that later requests hold).
    """
    for line, record in records:
        try:
            results = list(convert(line, record))
        except BadRecord as problem:
            sink.bad(line, problem)
            continue
        except MALFORMED as error:
            sink.bad(line, BadRecord("malformed record", f"{type(error).__name__} while reading it"))
            continue
        if not results:
            if not sink.reported(line) and not sink.was_used(line):  # every record is used or reported
                sink.bad(line, BadRecord("no request", "the record holds nothing to send to a model"))
            continue
        if len(results) > MAX_REQUESTS_PER_RECORD:
            sink.bad(line, BadRecord("too large", f"{len(results)} requests in one record, limit "
                                                  f"{MAX_REQUESTS_PER_RECORD}"))
            continue
        chars = max(_request_chars(result) for result in results)
        if chars > MAX_TEXT_CHARS:
            sink.bad(line, BadRecord("too large", f"a request of {chars} characters, limit {MAX_TEXT_CHARS}"))
            continue
        yield from results


def _request_chars(request: Request) -> int:
    """Characters of text the tokenizer would be handed for one request."""
    size = len(request.prompt or "") + len(request.completion or "")
    return size + sum(len(message.content) for message in request.messages or ())
