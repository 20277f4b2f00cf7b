"""vLLM `bench serve --dataset-name custom` JSONL: `{"prompt": "...", "output_tokens": N}` per line.

`output_tokens` is optional (vLLM uses it only with `--custom-output-len -1`); the prompt is the raw text
that vLLM wraps as one user message unless `--skip-chat-template`, so it is kept as a completions prompt.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, iter_json_lines, type_name
from advisor.ingest._schema import Field, Schema
from advisor.record import Request

NAME = "bench-custom"
SCHEMA = Schema(NAME, (Field("output_tokens", _schema.tokens),))


def looks_like(record: dict[str, Any]) -> bool:
    return "prompt" in record and "output_tokens" in record and not record.keys() & {"messages", "completion"}


def convert(record: Any, source: str) -> Request:
    record = expect_object(record, "the record")
    fields = SCHEMA.check(record)
    prompt = record.get("prompt")
    if prompt is None:
        raise BadRecord("missing field", "expected 'prompt'")
    if not isinstance(prompt, str):
        raise BadRecord("wrong type", f"field 'prompt' must be a string, got {type_name(prompt)}")
    _schema.text_size(len(prompt), "field 'prompt'")
    return Request(source=source, prompt=prompt, completion_tokens=fields.get("output_tokens"))


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    return read_records(iter_json_lines(source, sink), source.name, sink, hash_block_size)


def read_records(records: Iterable[tuple[int, Any]], name: str, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    """The requests of (line, parsed record) pairs of the file `name` (`read` without the file: a chunk)."""
    return _schema.convert_each(records, lambda line, record: [convert(record, f"{name}:{line}")], sink)
