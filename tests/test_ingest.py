"""Ingest API: detection, bad-record handling with line numbers, strict mode, gzip, stdin, huge lines."""
from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import orjson
import pytest

import advisor.ingest._io as ingest_io
from advisor.errors import BadRecordError, InputError
from advisor.ingest import FORMATS, IngestStats, detect_format, read_requests

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
GOOD = orjson.dumps({"messages": [{"role": "user", "content": "hi"}],
                     "response": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}})


def write(path: Path, *lines: bytes) -> str:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def read(paths, **kwargs):
    stats = IngestStats()
    return list(read_requests(paths if isinstance(paths, list) else [paths], stats=stats, **kwargs)), stats


def test_formats_are_the_documented_names():
    assert FORMATS == ("openai", "bench-custom", "sharegpt", "mooncake", "azure", "burstgpt", "swe-agent",
                       "otel", "aider", "vllm-log", "openai-batch")


@pytest.mark.parametrize("name, expected", [
    ("rag_summarization.jsonl", "openai"),
    ("chat_multiturn.jsonl", "openai"),
    ("no_overlap.jsonl", "openai"),
    ("chat_sharegpt.json", "sharegpt"),
    ("otel_spans.jsonl", "otel"),
    ("mooncake_trace.jsonl", "mooncake"),
    ("azure_trace.csv", "azure"),
    ("bad_lines.jsonl", "openai"),
])
def test_detect_fixtures(name, expected):
    assert detect_format(str(FIXTURES / name)) == expected


@pytest.mark.parametrize("content, suffix, expected", [
    (b'{"prompt": "a", "output_tokens": 3}\n', ".jsonl", "bench-custom"),
    (b'{"prompt": "a", "completion": "b"}\n', ".jsonl", "openai"),
    (b'{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [1]}\n', ".jsonl", "mooncake"),
    (b'{"id": "x", "conversations": []}\n', ".jsonl", "sharegpt"),
    (b'{"attributes": {"gen_ai.operation.name": "chat"}}\n', ".jsonl", "otel"),
    (b'{"history": [], "trajectory": [], "info": {}}', ".json", "swe-agent"),
    (b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n", ".csv", "burstgpt"),
    (b"# aider chat started at 2024-08-05 19:33:02\n", ".txt", "aider"),
    (b"not json at all\n" + GOOD + b"\n", ".log", "openai"),  # a bad first line does not hide the format
])
def test_detect_by_sniffing(tmp_path, content, suffix, expected):
    path = tmp_path / f"log{suffix}"
    path.write_bytes(content)
    assert detect_format(str(path)) == expected


def test_detect_unknown_lists_formats(tmp_path):
    path = write(tmp_path / "x.jsonl", b'{"question_id": 1, "turns": ["a"]}')
    with pytest.raises(InputError) as error:
        detect_format(path)
    assert "--format" in str(error.value) and "bench-custom" in str(error.value) and path in str(error.value)


def test_unknown_format_name_lists_formats(tmp_path):
    with pytest.raises(InputError, match="expected one of: openai"):
        read(write(tmp_path / "a.jsonl", GOOD), fmt="json")


def test_missing_path_and_empty_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read(str(tmp_path / "missing.jsonl"))
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        read(str(empty))
    with pytest.raises(InputError, match="no request in the file"):
        read(str(empty), fmt="openai")


def test_bad_lines_fixture_reports_each_class_with_its_line():
    requests, stats = read(str(FIXTURES / "bad_lines.jsonl"))
    assert [r.source.rsplit(":", 1)[1] for r in requests] == ["1", "8"]
    assert stats.records_read == 8 and stats.requests == 2 and stats.skipped == 6
    assert stats.skipped_by_reason == {"invalid JSON": 1, "wrong type": 3, "invalid UTF-8": 1, "missing field": 1}
    name = str(FIXTURES / "bad_lines.jsonl")
    assert stats.problems == [
        f"{name}:2: invalid JSON: unexpected end of data at column 55",
        f"{name}:3: wrong type: field 'messages' must be a list, got str",
        f"{name}:4: invalid UTF-8: at byte 15 of the line",
        f"{name}:5: missing field: expected 'prompt' or 'messages'",
        f"{name}:6: wrong type: field 'max_tokens' must be an integer, got str",
        f"{name}:7: wrong type: the record must be an object, got list",
    ]
    assert not any("cut short" in problem or "caf" in problem for problem in stats.problems)


@pytest.mark.parametrize("bad, line, reason", [
    (b'{"messages": [1]}', 2, "wrong type: field 'messages[0]' must be an object, got int"),
    (b'{"messages": [{"content": "x"}]}', 2, "missing field: expected 'messages[0].role'"),
    (b'{"messages": [{"role": "user", "content": 5}]}', 2,
     "wrong type: field 'messages[0].content' must be a string or a list of parts, got int"),
    (b'{"prompt": "x", "timestamp": "yesterday"}', 2,
     "wrong type: field 'timestamp' must be ISO 8601 text or epoch seconds/ms, got str"),
    (b'{"prompt": "x", "temperature": "hot"}', 2, "wrong type: field 'temperature' must be a number, got str"),
    (b'{"a": 1,,}', 2, "invalid JSON: unexpected character, expected a string key at column 9"),
])
def test_strict_raises_with_the_right_line(tmp_path, bad, line, reason):
    path = write(tmp_path / "log.jsonl", GOOD, bad, GOOD)
    with pytest.raises(BadRecordError) as error:
        read(path, fmt="openai", strict=True)
    assert (error.value.source, error.value.line, error.value.reason) == (path, line, reason)
    requests, stats = read(path, fmt="openai")
    assert len(requests) == 2 and stats.problems == [f"{path}:{line}: {reason}"]


def test_nothing_usable_names_file_and_bad_count(tmp_path):
    path = write(tmp_path / "log.jsonl", b"{", b'{"messages": 3}', b"\xff")
    with pytest.raises(InputError) as error:
        read(path, fmt="openai")
    assert path in str(error.value) and "3 bad records" in str(error.value)


def test_blank_lines_are_not_records_but_keep_line_numbers(tmp_path):
    path = write(tmp_path / "log.jsonl", b"", GOOD, b"   ", GOOD)
    requests, stats = read(path)
    assert [r.source for r in requests] == [f"{path}:2", f"{path}:4"] and stats.records_read == 2


def test_gzip_input(tmp_path):
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(gzip.compress(GOOD + b"\n" + b"{oops\n" + GOOD + b"\n"))
    assert detect_format(str(path)) == "openai"
    requests, stats = read(str(path))
    assert [r.completion for r in requests] == ["hello", "hello"]
    assert stats.problems[0].startswith(f"{path}:2: invalid JSON")


def test_corrupt_gzip_is_an_input_error(tmp_path):
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(gzip.compress(GOOD * 100)[:40])
    with pytest.raises(InputError, match="cannot be read"):
        read(str(path), fmt="openai")


def _fake_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_stdin_is_sniffed_and_replayed(monkeypatch):
    lines = [orjson.dumps({"timestamp": i * 1000, "input_length": 10 + i, "output_length": 5, "hash_ids": [i]})
             for i in range(3000)]  # larger than the sniffed head, so the replay is exercised
    _fake_stdin(monkeypatch, b"\n".join(lines) + b"\n")
    requests, stats = read("-")
    assert stats.formats == {"-": "mooncake"}
    assert [r.prompt_tokens for r in requests] == [10 + i for i in range(3000)]
    assert requests[2999].source == "<stdin>:3000" and requests[2999].timestamp == 2999.0


def test_gzip_on_stdin(monkeypatch):
    _fake_stdin(monkeypatch, gzip.compress(b'{"prompt": "p", "output_tokens": 7}\n'))
    requests, _ = read("-")
    assert requests[0].completion_tokens == 7 and requests[0].prompt == "p"


def test_large_line_is_parsed_and_a_50_mb_record_is_skipped(tmp_path):
    """A 5 MiB prompt is read; a 50 MiB one (which took ~6 GB to tokenize) is skipped as too large."""
    large, huge = "word " * 2**20, "word " * (10 * 2**20)
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as out:
        for prompt in (large, huge):
            out.write(GOOD + b"\n")
            out.write(orjson.dumps({"prompt": prompt, "completion": "ok"}) + b"\n")
    requests, stats = read(str(path))
    assert len(requests) == 3 and len(requests[1].prompt) == len(large)
    assert stats.problems == [f"{path}:4: too large: a request of {len(huge) + 2} characters, limit {8 * 2**20}"]


def test_line_over_the_limit_is_skipped_without_buffering(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_io, "MAX_LINE_BYTES", 1000)
    long_line = orjson.dumps({"prompt": "x" * 5000})
    path = write(tmp_path / "log.jsonl", GOOD, long_line, GOOD)
    requests, stats = read(path, fmt="openai")
    assert len(requests) == 2 and requests[1].source == f"{path}:3"
    assert stats.problems == [f"{path}:2: line too long: {len(long_line)} bytes, limit 1000"]
    with pytest.raises(BadRecordError) as error:
        read(path, fmt="openai", strict=True)
    assert error.value.line == 2


def test_several_files_in_order_with_formats(tmp_path):
    first = write(tmp_path / "a.jsonl", GOOD)
    second = write(tmp_path / "b.jsonl", b'{"prompt": "q", "output_tokens": 1}')
    requests, stats = read([first, second])
    assert [r.source for r in requests] == [f"{first}:1", f"{second}:1"]
    assert stats.formats == {first: "openai", second: "bench-custom"} and stats.requests == 2


def test_problems_are_capped_at_20(tmp_path):
    path = write(tmp_path / "log.jsonl", *([b"{"] * 30 + [GOOD]))
    _, stats = read(path)
    assert stats.skipped == 30 and len(stats.problems) == 20 and stats.problems[-1].startswith(f"{path}:20:")


def test_detect_then_read_stdin_keeps_the_sniffed_head(monkeypatch):
    _fake_stdin(monkeypatch, GOOD + b"\n" + GOOD + b"\n")
    assert detect_format("-") == "openai"
    requests, _ = read("-")
    assert [r.source for r in requests] == ["<stdin>:1", "<stdin>:2"]


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD + b"\n")
    csv_path = tmp_path / "trace.csv"
    csv_path.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.5,1,2\n")
    assert len(read(str(path))[0]) == 1 and read(str(csv_path))[0][0].timestamp % 1 == 0.5


def test_urls_and_globs_read_like_local_paths(tmp_path):
    """fsspec URLs (file:// here; s3:// is the same call with s3fs) and glob patterns give the requests of the
    local paths; a gzip file behind a URL is told by its magic bytes; ingest stats of consecutive parts
    absorbed in order are those of one pass."""
    pytest.importorskip("fsspec")
    from advisor.ingest import expand_paths, shard_paths

    lines = (FIXTURES / "code_editing.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines[:10]) + b"{broken\n")
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[10:]) + b"[1]\n"))
    local = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl.gz")]
    urls = expand_paths([f"file://{tmp_path}/*.jsonl*"])
    assert urls == [f"file://{path}" for path in local] and expand_paths([str(tmp_path / "*.jsonl*")]) == local
    assert shard_paths(urls) == [(urls[0],), (urls[1],)]
    whole = IngestStats()
    by_path = [(r.prompt_token_ids, r.messages, r.completion) for r in read_requests(local, stats=whole)]
    absorbed = IngestStats()
    by_url = []
    for url in urls:
        part = IngestStats()
        by_url += [(r.prompt_token_ids, r.messages, r.completion) for r in read_requests([url], stats=part)]
        absorbed.absorb(part)
    assert by_url == by_path and len(by_path) == len(lines)
    assert absorbed.skipped == whole.skipped == 2 and absorbed.records_read == whole.records_read
    assert [p.split(":", 2)[-1] for p in absorbed.problems] == [p.split(":", 1)[-1] for p in whole.problems]
    with pytest.raises(InputError, match="no file matches"):
        expand_paths([f"file://{tmp_path}/*.csv"])
    with pytest.raises(InputError, match="no such file"):
        list(read_requests([f"file://{tmp_path}/missing.jsonl"]))
    with pytest.raises(InputError, match="cannot be read"):
        list(read_requests(["nosuchprotocol://bucket/x.jsonl"]))


def test_raw_json_records_match_the_decoding_path() -> None:
    """The bytes fast path (orjson on the raw line) gives the records, counts and problems of decoding
    each line first, on every kind of line the reader meets."""
    lines = [
        b'\xef\xbb\xbf{"first": "with a byte-order mark"}\n',
        b'{"a": 1}\n', b"\n", b"   \t\r\n", b"\x0b\x0c\n", b"",
        b'\xef\xbb\xbf{"bom": "not on line 1"}\n',
        b'{"text": "caf\xc3\xa9 \xe2\x82\xac"}\n',
        b'{"bad": "\xff\xfe"}\n',
        b'{"surrogate": "\xed\xa0\x80"}\n',
        b'{"escaped": "\\ud800"}\n',
        b'{"caf\xc3\xa9": 1,,}\n',
        b'{"nan": NaN}\n',
        b"[1, 2, 3]\r\n",
        b'"a string"',
        ingest_io.LongLine(5_000_000),
        b'{"after": "the long line"}\n',
        ingest_io.StreamCut("cut after line 17"),
    ]
    numbered = list(enumerate(lines, start=1))

    def run(read) -> tuple[list, IngestStats]:
        stats = IngestStats()
        sink = ingest_io.Sink("log.jsonl", stats, False)
        return list(read(numbered, sink)), stats

    fast, fast_stats = run(ingest_io.raw_json_records)
    slow, slow_stats = run(lambda raw, sink: ingest_io.json_records(ingest_io.decoded_lines(raw, sink), sink))
    assert fast == slow
    assert fast_stats == slow_stats
    assert slow_stats.records_read == 13 and len(slow) == 6  # the test would be empty if the lines were not read
