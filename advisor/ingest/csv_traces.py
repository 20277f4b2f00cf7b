"""Token-count CSV traces: the Azure LLM inference trace and BurstGPT.

Azure (`TIMESTAMP,ContextTokens,GeneratedTokens`): timestamps like `2023-11-16 18:17:03.9799600`, UTC,
with 7 fractional digits that `datetime` cannot hold, parsed digit-exactly to epoch seconds.
BurstGPT (`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`): seconds from the trace
start; failed requests are logged with 0 response tokens and kept as such.
Both are token-free. Columns are found by header name, so column order and extra columns do not matter.
"""
from __future__ import annotations

import csv
from typing import Callable, Iterator

from advisor.errors import InputError
from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, iter_lines, parse_iso
from advisor.record import Request

AZURE = "azure"
BURSTGPT = "burstgpt"
AZURE_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")
BURSTGPT_COLUMNS = ("timestamp", "model", "request tokens", "response tokens")


def _cells(text: str) -> list[str]:
    """The cells of one CSV line; BadRecord when the csv module cannot split it (a stray quote, a NUL)."""
    try:
        return next(csv.reader([text]), [])
    except csv.Error as error:
        raise BadRecord("malformed CSV row", str(error)) from None


def header_format(header_line: str) -> str | None:
    """`azure`, `burstgpt` or None for a CSV header line."""
    try:
        names = {name.strip().lower() for name in _cells(header_line)}
    except BadRecord:
        return None
    if set(AZURE_COLUMNS) <= names:
        return AZURE
    if set(BURSTGPT_COLUMNS) <= names:
        return BURSTGPT
    return None


def _integer(row: list[str], column: int, name: str) -> int:
    return _schema.token_count(row[column], f"column '{name}'", text=True)


def _azure_row(row: list[str], columns: dict[str, int], source: str) -> Request:
    timestamp = parse_iso(row[columns["timestamp"]])
    if timestamp is None:
        raise BadRecord("wrong type", "column 'TIMESTAMP' must be a date-time like 2023-11-16 18:17:03.9799600")
    return Request(
        source=source,
        timestamp=_schema.check_time(timestamp, "column 'TIMESTAMP'"),
        prompt_tokens=_integer(row, columns["contexttokens"], "ContextTokens"),
        completion_tokens=_integer(row, columns["generatedtokens"], "GeneratedTokens"),
    )


def _burstgpt_row(row: list[str], columns: dict[str, int], source: str) -> Request:
    timestamp = _schema.real(row[columns["timestamp"]], "column 'Timestamp' (seconds)", 0.0, _schema.MAX_EPOCH_S,
                             text=True)
    return Request(
        source=source,
        timestamp=timestamp,
        model=row[columns["model"]].strip() or None,
        prompt_tokens=_integer(row, columns["request tokens"], "Request tokens"),
        completion_tokens=_integer(row, columns["response tokens"], "Response tokens"),
    )


def _read(source: Source, sink: Sink, fmt: str, convert: Callable[[list[str], dict[str, int], str], Request]
          ) -> Iterator[Request]:
    lines = iter_lines(source, sink)
    first = next(lines, None)
    if first is None:
        return
    header_number, header = first
    try:
        names = [name.strip().lower() for name in _cells(header)]
    except BadRecord as problem:
        raise InputError(f"{source.name}:{header_number}: the CSV header cannot be read ({problem.detail}); "
                         f"no record was read") from None
    if header_format(header) != fmt:
        expected = AZURE_COLUMNS if fmt == AZURE else BURSTGPT_COLUMNS
        raise InputError(f"{source.name}:{header_number}: expected a {fmt} CSV header with columns "
                         f"{', '.join(expected)} (any case); try another --format")
    columns = {name: index for index, name in enumerate(names)}

    def row_request(number: int, text: str) -> list[Request]:
        row = _cells(text)
        if len(row) != len(names):
            raise BadRecord("wrong column count", f"expected {len(names)} columns, got {len(row)}")
        return [convert(row, columns, f"{source.name}:{number}")]

    def counted() -> Iterator[tuple[int, str]]:
        for number, text in lines:
            sink.stats.records_read += 1
            yield number, text

    yield from _schema.convert_each(counted(), row_request, sink)


def read_azure(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    return _read(source, sink, AZURE, _azure_row)


def read_burstgpt(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    return _read(source, sink, BURSTGPT, _burstgpt_row)
