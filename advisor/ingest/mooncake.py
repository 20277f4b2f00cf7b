"""Mooncake traces / vLLM `timed_trace` JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.

Token-free: no text, only lengths and the ids of the prompt's prefix blocks (equal id = identical block
with an identical prefix), each covering `hash_block_size` tokens (512 in the published Mooncake traces).
Timestamps are milliseconds from the trace start and become seconds.
"""
from __future__ import annotations

from typing import Any, Iterator

from advisor.ingest._io import BadRecord, Sink, Source, expect_object, get_int, iter_json_lines, to_number, type_name
from advisor.record import Request

NAME = "mooncake"


def looks_like(record: dict[str, Any]) -> bool:
    return "hash_ids" in record or {"input_length", "output_length"} <= record.keys()


def convert(record: Any, source: str, hash_block_size: int) -> Request:
    record = expect_object(record, "the record")
    timestamp = record.get("timestamp")
    milliseconds = to_number(timestamp)
    if timestamp is not None and milliseconds is None:
        raise BadRecord("wrong type", f"field 'timestamp' must be a number of milliseconds, got {type_name(timestamp)}")
    hash_ids = record.get("hash_ids")
    if hash_ids is not None:
        if not isinstance(hash_ids, list):
            raise BadRecord("wrong type", f"field 'hash_ids' must be a list, got {type_name(hash_ids)}")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in hash_ids):
            raise BadRecord("wrong type", "field 'hash_ids' must hold integers only")
    return Request(
        source=source,
        timestamp=milliseconds / 1000.0 if milliseconds is not None else None,
        prompt_tokens=get_int(record, "input_length", required=True),
        completion_tokens=get_int(record, "output_length", required=True),
        block_hashes=tuple(hash_ids) if hash_ids is not None else None,
        hash_block_size=hash_block_size if hash_ids is not None else None,
    )


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    for line, record in iter_json_lines(source, sink):
        try:
            yield convert(record, f"{source.name}:{line}", hash_block_size)
        except BadRecord as problem:
            sink.bad(line, problem)
