"""Mooncake traces / vLLM `timed_trace` JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.

Token-free: no text, only lengths and the ids of the prompt's prefix blocks (equal id = identical block
with an identical prefix), each covering `hash_block_size` tokens (512 in the published Mooncake traces).
Timestamps are milliseconds from the trace start and become seconds. The hash ids must cover the prompt no
more than one block beyond it (a trace writer hashes ceil(input_length / block) blocks): a longer list
would claim cached blocks the prompt does not have.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, iter_json_lines
from advisor.ingest._schema import Field, Schema
from advisor.record import Request

NAME = "mooncake"
SCHEMA = Schema(NAME, (
    Field("timestamp", lambda v, at: _schema.real(v, at, 0.0, _schema.MAX_EPOCH_S * 1000)),
    Field("input_length", _schema.tokens, required=True),
    Field("output_length", _schema.tokens, required=True),
    Field("hash_ids", _schema.block_ids),
))


def looks_like(record: dict[str, Any]) -> bool:
    return "hash_ids" in record or {"input_length", "output_length"} <= record.keys()


def convert(record: Any, source: str, hash_block_size: int) -> Request:
    fields = SCHEMA.check(expect_object(record, "the record"))
    hash_ids = fields.get("hash_ids")
    if hash_ids is not None and len(hash_ids) > fields["input_length"] // hash_block_size + 1:
        raise BadRecord("out of range", f"field 'hash_ids' has {len(hash_ids)} blocks of {hash_block_size} "
                                        f"tokens for an input of {fields['input_length']} tokens")
    milliseconds = fields.get("timestamp")
    return Request(
        source=source,
        timestamp=milliseconds / 1000.0 if milliseconds is not None else None,
        prompt_tokens=fields["input_length"],
        completion_tokens=fields["output_length"],
        block_hashes=hash_ids,
        hash_block_size=hash_block_size if hash_ids is not None else None,
    )


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    return read_records(iter_json_lines(source, sink), source.name, sink, hash_block_size)


def read_records(records: Iterable[tuple[int, Any]], name: str, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    """The requests of (line, parsed record) pairs of the file `name`: `read` without the file, for a worker
    process that parses a chunk of its lines (advisor.ingest.parse_chunk)."""
    return _schema.convert_each(records, lambda line, record: [convert(record, f"{name}:{line}", hash_block_size)], sink)
