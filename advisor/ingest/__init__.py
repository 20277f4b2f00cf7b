"""Ingest: request logs of many formats -> a stream of `Request`s. This is the public API of the stage.

One reader module per format, registered in `READERS` by the name `--format` accepts. Line formats (JSONL,
CSV) are streamed with constant memory; whole-document formats (a ShareGPT JSON array, a SWE-agent .traj)
are loaded. Formats whose records span files (a server log rotated into several files, a batch request file
and its output file) are read as one group of consecutive paths of that format, joined across them.
Inputs may be gzip-compressed (told by their magic bytes) and "-" is stdin. Bad records are
skipped and counted in `IngestStats` (messages "file:line: reason", never quoting record text), or raise
`BadRecordError` under `strict`; a file that yields no request raises `InputError`.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import orjson

from advisor.errors import InputError
from advisor.ingest import (aider, bench_custom, csv_traces, mooncake, openai, openai_batch, otel, sharegpt, swe_agent,
                            vllm_log)
from advisor.ingest._io import (SNIFF_BYTES, UTF8_BOM, FileSpan, IngestStats, RawLine, Sink, Source, file_spans,
                                head_records, import_fsspec, is_url, raw_json_records, raw_lines, span_lines)
from advisor.record import Request

# Skipped-record messages shown with the error of a file that gave no request.
MAX_SHOWN = 5

__all__ = ["FORMATS", "IngestStats", "LineChunk", "ParsedChunk", "detect_format", "expand_paths", "no_request_error",
           "parse_chunk", "read_parts", "read_requests", "shard_paths"]

Reader = Callable[[Source, Sink, int], Iterator[Request]]
READERS: dict[str, Reader] = {
    openai.NAME: openai.read,
    bench_custom.NAME: bench_custom.read,
    sharegpt.NAME: sharegpt.read,
    mooncake.NAME: mooncake.read,
    csv_traces.AZURE: csv_traces.read_azure,
    csv_traces.BURSTGPT: csv_traces.read_burstgpt,
    swe_agent.NAME: swe_agent.read,
    otel.NAME: otel.read,
    aider.NAME: aider.read,
}
# JSON Lines formats whose every record is one line and reads alone: `read_parts` hands their files on as chunks
# of raw lines, which worker processes decode and parse (`parse_chunk`). A ShareGPT JSON array is loaded here
# and handed on as chunks of its conversations, each written back as one line (`_array_chunks`).
LINE_READERS: dict[str, Callable[[Iterable[tuple[int, Any]], str, Sink, int], Iterator[Request]]] = {
    openai.NAME: openai.read_records,
    bench_custom.NAME: bench_custom.read_records,
    mooncake.NAME: mooncake.read_records,
    sharegpt.NAME: sharegpt.read_records,
}
# Formats without text to tokenize (so a pool of workers need not load a tokenizer before it forks).
TOKEN_FREE = frozenset({mooncake.NAME, csv_traces.AZURE, csv_traces.BURSTGPT})
CHUNK_LINES = 256
# A big file's chunks grow up to this many lines while every worker still gets MIN_CHUNKS_PER_WORKER of them
# (`chunk_lines`).
MAX_CHUNK_LINES = 1024
MIN_CHUNKS_PER_WORKER = 32
# Formats read as a group of files: (sources, sinks) -> (index of the file, request) pairs.
GroupReader = Callable[[Sequence[Source], Sequence[Sink]], Iterator[tuple[int, Request]]]
GROUP_READERS: dict[str, GroupReader] = {
    vllm_log.NAME: vllm_log.read_group,
    openai_batch.NAME: openai_batch.read_group,
}
FORMATS: tuple[str, ...] = tuple(READERS) + tuple(GROUP_READERS)
# Readers whose requests join several records (vLLM's log lines; a batch request line and its output line in
# another file): they count each used record themselves.
COUNTS_OWN_RECORDS = frozenset({vllm_log.NAME, openai_batch.NAME})
# Record sniffers for JSON inputs, most specific first: bench-custom records are also valid completions
# requests, and batch lines, ShareGPT, trace and span records must not be mistaken for OpenAI logs.
SNIFFERS = (
    (openai_batch.NAME, openai_batch.looks_like),
    (mooncake.NAME, mooncake.looks_like),
    (sharegpt.NAME, sharegpt.looks_like),
    (swe_agent.NAME, swe_agent.looks_like),
    (otel.NAME, otel.looks_like),
    (bench_custom.NAME, bench_custom.looks_like),
    (openai.NAME, openai.looks_like),
)
# A SWE-agent trajectory as SWE-agent writes it (indented, "trajectory" first): told by its opening when the
# document is too long to parse from the sniffed head.
TRAJECTORY_START = re.compile(rb'\{\s*"(?:trajectory|history)"\s*:\s*\[')


# Stdin can be read once: a Source made by `detect_format("-")` keeps its sniffed head for the next
# `read_requests(["-"])`, which takes it over.
_stdin_source: Source | None = None


def _source(path: str) -> Source:
    global _stdin_source
    if path != "-":
        return Source(path)
    if _stdin_source is None:
        _stdin_source = Source(path)
    return _stdin_source


def _unknown(source: Source, found: str) -> InputError:
    return InputError(f"{source.name}: cannot tell the log format ({found}); pass --format with one of: "
                      f"{', '.join(FORMATS)}")


def _vote(records: list[dict]) -> str | None:
    """The format most of the sniffed records have (ties: the one seen first), None when none has one.

    One record does not decide: the first line of a real log may be a record of another system (a mixed
    file) or a damaged one whose keys point elsewhere, and the file's other records then settle it."""
    counts: dict[str, int] = {}
    for record in records:
        for name, looks_like in SNIFFERS:
            if looks_like(record):
                counts[name] = counts.get(name, 0) + 1
                break
    return max(counts, key=counts.__getitem__) if counts else None


def _whole_document(head: bytes) -> dict | None:
    """A small file holding one JSON object over many lines (nothing in it parses line by line)."""
    if len(head) >= SNIFF_BYTES:
        return None
    try:
        document = orjson.loads(head)
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None


def _first_line_parses(head: bytes) -> bool:
    """Whether the first line is a JSON value by itself: JSON Lines, not one document over many lines."""
    try:
        orjson.loads(head.split(b"\n", 1)[0])
    except orjson.JSONDecodeError:
        return False
    return True


def _detect(source: Source) -> str:
    try:
        return _detect_open(source)
    except InputError:
        source.close()
        raise


def _detect_open(source: Source) -> str:
    suffix = source.suffix
    if suffix == ".traj":
        return swe_agent.NAME
    head = source.head().removeprefix(UTF8_BOM)
    if not head.strip():
        raise InputError(f"{source.name}: the file is empty")
    if suffix == ".md" or aider.looks_like(head):
        return aider.NAME
    if not head.lstrip().startswith((b"{", b"[")) and vllm_log.looks_like(head):
        return vllm_log.NAME
    if suffix == ".csv":
        header = head.split(b"\n", 1)[0].decode("utf-8", "replace")
        fmt = csv_traces.header_format(header)
        if fmt is None:
            raise _unknown(source, "a CSV without the Azure or BurstGPT header")
        return fmt
    stripped = head.lstrip()
    records = head_records(head)
    if stripped.startswith(b"[") and not (records and _first_line_parses(stripped)):
        if b'"conversations"' in head:
            return sharegpt.NAME
        raise _unknown(source, "a JSON array whose elements have no 'conversations'")
    if not records:
        document = _whole_document(head)
        if document is not None:
            records = [document]
        elif TRAJECTORY_START.match(stripped):  # a .traj under another name, longer than the sniff window
            return swe_agent.NAME
        else:
            raise _unknown(source, "no JSON object in the first lines")
    name = _vote(records)
    if name is None:
        raise _unknown(source, f"first record has keys {', '.join(sorted(records[0])[:12])}")
    return name


def _count_used(sink: Sink, request_source: str) -> None:
    """Counts the record of a request's source "file:line" or "file:line#i" (the convention of `Request`) as
    used by `sink`'s file (a source naming another file is not this file's record; readers whose requests
    join records of several files count their own, COUNTS_OWN_RECORDS)."""
    if not request_source.startswith(sink.name + ":"):
        return
    line = request_source[len(sink.name) + 1:].split("#", 1)[0]
    if line.isdigit():
        sink.used(int(line))


def detect_format(path: str) -> str:
    """The format of a log, from its extension and its first bytes/records; InputError if unknown."""
    return _detect(_source(path))


def expand_paths(paths: Sequence[str]) -> list[str]:
    """`paths` with each glob pattern (`*`, `?`, `[`) replaced by the files it matches, sorted: local globs,
    and fsspec URLs (s3://bucket/logs/*.jsonl.gz) matched by their filesystem. A path that exists as it is
    written, and "-", stay as they are. InputError for a pattern that matches nothing."""
    out: list[str] = []
    for path in paths:
        if path == "-" or not any(char in path for char in "*?[") or os.path.exists(path):
            out.append(path)
            continue
        if is_url(path):
            fsspec = import_fsspec(path)
            try:
                filesystem, _, found = fsspec.get_fs_token_paths(path)
            except (ImportError, ValueError) as exc:
                raise InputError(f"{path}: cannot be listed: {exc}") from None
            matches = sorted(filesystem.unstrip_protocol(name) for name in found)
        else:
            matches = sorted(glob.glob(path))
        if not matches:
            raise InputError(f"{path}: no file matches the pattern")
        out.extend(matches)
    return out


def shard_paths(paths: Sequence[str], fmt: str | None = None) -> list[tuple[str, ...]]:
    """`paths` cut into consecutive parts that read independently: one file each, except the files that
    `read_requests` reads as one group (a rotated server log, a batch file and its outputs), kept together."""
    shards: list[tuple[str, ...]] = []
    previous = None
    for path in paths:
        name = fmt
        if name is None:
            source = Source(path)
            name = _detect(source)
            source.close()
        if name in GROUP_READERS and name == previous:
            shards[-1] += (path,)
        else:
            shards.append((path,))
        previous = name
    return shards


@dataclass(frozen=True)
class LineChunk:
    """Consecutive raw lines of one file in a LINE_READERS format (CHUNK_LINES, more in a big file:
    `chunk_lines`), for `parse_chunk`: the lines themselves, or where they lie in a plain file (then the
    parser reads them, and the process that cuts the file sends a few numbers instead of the lines). `first`
    and `last` mark the file's first and last chunk (an empty file is one chunk, both): whoever absorbs the
    parsed chunks in order checks at the last that the file gave a request (`no_request_error`)."""

    fmt: str
    name: str
    lines: list[RawLine] | FileSpan
    first: bool
    last: bool

    def raw_lines(self) -> Iterable[RawLine]:
        """The chunk's raw lines (read from the file for a span)."""
        return self.lines if isinstance(self.lines, list) else span_lines(self.lines)


@dataclass
class ParsedChunk:
    """What `parse_chunk` makes of a LineChunk: its requests, and the stats of reading it (to absorb in file
    order: then they are one reader's stats), with the count of its bad records."""

    requests: list[Request]
    stats: IngestStats
    bad_records: int


def parse_chunk(chunk: LineChunk, strict: bool, hash_block_size: int) -> ParsedChunk:
    """Decodes and parses a LineChunk as its format's reader would (the same requests, the same problems with
    the same line numbers); under `strict` the first bad record raises BadRecordError."""
    stats = IngestStats()
    sink = Sink(chunk.name, stats, strict)
    requests = []
    records = raw_json_records(chunk.raw_lines(), sink)
    for request in LINE_READERS[chunk.fmt](records, chunk.name, sink, hash_block_size):
        stats.requests += 1
        _count_used(sink, request.source)
        requests.append(request)
    return ParsedChunk(requests, stats, sink.bad_records)


def read_requests(
    paths: Sequence[str],
    fmt: str | None = None,
    *,
    strict: bool = False,
    hash_block_size: int = 512,
    stats: IngestStats | None = None,
) -> Iterator[Request]:
    """Requests of all `paths` in file order, each file in its detected (or the given) format.

    `hash_block_size` is the tokens per block id of token-free traces (Mooncake: 512). Bad records are
    skipped and counted in `stats`, or raise `BadRecordError` when `strict`. A file that yields no request
    raises `InputError` naming it and its count of bad records.
    """
    return _read(paths, fmt, strict, hash_block_size, stats, chunked=False)  # type: ignore[return-value]


def read_parts(
    paths: Sequence[str],
    fmt: str | None = None,
    *,
    strict: bool = False,
    hash_block_size: int = 512,
    stats: IngestStats | None = None,
    workers: int = 1,
) -> Iterator[Request | LineChunk]:
    """`read_requests`, except that each file in a LINE_READERS format comes as LineChunks of raw lines, read
    here (a plain file's only cut into spans: their parser reads them) and parsed elsewhere (`parse_chunk`, on
    `workers` processes, for which a big file's chunks are sized: `chunk_lines`): the caller absorbs their
    ParsedChunks into `stats` in order and checks each file's end; only `stats.formats` is filled here for
    those files. Reading
    runs ahead of the parsing, so an error reading a later file (missing, cut) can be raised before a
    --strict bad record or a no-request error of chunks still being parsed: the run fails either way."""
    return _read(paths, fmt, strict, hash_block_size, stats, chunked=True, workers=workers)


def chunk_lines(lines: float, workers: int) -> int:
    """Lines per chunk for a file of about `lines` lines on `workers` processes: CHUNK_LINES, doubled up to
    MAX_CHUNK_LINES while every worker still gets MIN_CHUNKS_PER_WORKER chunks. The main process pays a part
    of its work per chunk (receiving a result, collecting it, the context's run, the samples' appends), which
    bounds how many workers it keeps busy: on the 1 GB log with 2 workers, 1,024-line chunks took its stream
    work from 2.7-2.8 s to 2.1-2.2 s of CPU and the stream from 21.3-22.1 s to 19.7-20.4 s (fewer conversations
    cross chunks, too). More chunks a worker keep the last round short: a worker idles at most about
    1/MIN_CHUNKS_PER_WORKER of its time there."""
    size = CHUNK_LINES
    while size * 2 <= MAX_CHUNK_LINES and lines >= size * 2 * workers * MIN_CHUNKS_PER_WORKER:
        size *= 2
    return size


def _read(paths: Sequence[str], fmt: str | None, strict: bool, hash_block_size: int, stats: IngestStats | None,
          chunked: bool, workers: int = 1) -> Iterator[Request | LineChunk]:
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"unknown format '{fmt}'; expected one of: {', '.join(FORMATS)}")
    stats = stats if stats is not None else IngestStats()
    global _stdin_source
    index = 0
    while index < len(paths):
        path = paths[index]
        source = _source(path)
        if path == "-":
            _stdin_source = None
        name = fmt or _detect(source)
        stats.formats[path] = name
        if name in GROUP_READERS:
            group = [(path, source)]
            while index + 1 < len(paths) and paths[index + 1] != "-":
                following = _source(paths[index + 1])
                if (fmt or _detect(following)) != name:
                    break
                index += 1
                stats.formats[paths[index]] = name
                group.append((paths[index], following))
            yield from _read_group(name, group, stats, strict)
        elif chunked and name == sharegpt.NAME and sharegpt.is_array(source):
            yield from _array_chunks(name, source, workers)
        elif chunked and name in LINE_READERS and source.is_plain_file():
            for span, last in file_spans(source, lambda lines: chunk_lines(lines, workers)):
                yield LineChunk(name, source.name, span, span.first_line == 1, last)
        elif chunked and name in LINE_READERS:
            yield from _chunks(name, source)
        else:
            yield from _read_one(name, source, stats, strict, hash_block_size)
        index += 1


def _chunks(name: str, source: Source) -> Iterator[LineChunk]:
    """The file's raw lines in LineChunks of CHUNK_LINES (the lines themselves: blank ones too, so that the
    chunk's parser sees the line numbers and the stream's end as one reader does)."""
    lines: list[RawLine] = []
    first = True
    for line in raw_lines(source):
        if len(lines) == CHUNK_LINES:
            yield LineChunk(name, source.name, lines, first, False)
            lines, first = [], False
        lines.append(line)
    yield LineChunk(name, source.name, lines, first, True)


def _array_chunks(name: str, source: Source, workers: int) -> Iterator[LineChunk]:
    """A ShareGPT JSON array's conversations in LineChunks (`chunk_lines` of them for `workers`), each
    conversation written back as one JSON line numbered by its position (the reader's numbering): workers
    parse them as JSON Lines, and the main process sends compact bytes instead of each request's whole
    history. orjson reads back exactly what it
    writes (it reads integers beyond 64 bits as floats, which it writes again), so the records are the same."""
    document = sharegpt.load_array(source)
    if not document:
        yield LineChunk(name, source.name, [], True, True)
    size = chunk_lines(len(document), workers)
    for start in range(0, len(document), size):
        lines: list[RawLine] = [(start + offset + 1, orjson.dumps(record))
                                for offset, record in enumerate(document[start:start + size])]
        yield LineChunk(name, source.name, lines, start == 0, start + size >= len(document))


def _read_one(name: str, source: Source, stats: IngestStats, strict: bool, hash_block_size: int) -> Iterator[Request]:
    sink = Sink(source.name, stats, strict)
    first_problem = len(stats.problems)
    yielded = 0
    for request in READERS[name](source, sink, hash_block_size):
        yielded += 1
        stats.requests += 1
        _count_used(sink, request.source)
        yield request
    if yielded == 0:
        raise no_request_error(source.name, name, sink.bad_records, stats.problems[first_problem:first_problem + MAX_SHOWN])


def _read_group(name: str, group: list[tuple[str, Source]], stats: IngestStats, strict: bool) -> Iterator[Request]:
    """The files of one group: a file may yield nothing of its own (its requests finish in the next file)."""
    sinks = [Sink(source.name, stats, strict) for _, source in group]
    first_problem = len(stats.problems)
    yielded = 0
    for index, request in GROUP_READERS[name]([source for _, source in group], sinks):
        yielded += 1
        stats.requests += 1
        if name not in COUNTS_OWN_RECORDS:
            _count_used(sinks[index], request.source)
        yield request
    if yielded == 0:
        names = ", ".join(source.name for _, source in group)
        raise no_request_error(names, name, sum(sink.bad_records for sink in sinks),
                       stats.problems[first_problem:first_problem + MAX_SHOWN])


def no_request_error(name: str, fmt: str, bad_records: int, shown: list[str]) -> InputError:
    """The error of a file that gave no request; it prints the first skipped-record messages itself."""
    if bad_records:
        more = bad_records - len(shown)
        return InputError(f"{name}: no usable request in the file ({bad_records} bad records, read as {fmt}); "
                          f"see the skipped-record messages below or try --format:\n  " + "\n  ".join(shown)
                          + (f"\n  ... and {more} more" if more > 0 else ""))
    return InputError(f"{name}: no request in the file (read as {fmt}); the file is empty or holds no records "
                      f"of that format")
