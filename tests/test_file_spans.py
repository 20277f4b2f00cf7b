"""Spans of a plain file (what workers read themselves) give exactly the lines and chunks one reader gives."""
import random

import numpy as np
import pytest

from advisor.errors import InputError
from advisor.ingest import CHUNK_LINES, LineChunk, _io, read_parts
from advisor.ingest._io import Source, file_spans, raw_lines, span_lines


def _expected_chunks(lines: list, per: int) -> list[tuple[list, bool]]:
    """`raw_lines` in lists of `per`, each with its last flag (an empty file: one empty chunk)."""
    if not lines:
        return [([], True)]
    return [(lines[start:start + per], start + per >= len(lines)) for start in range(0, len(lines), per)]


def test_spans_read_back_as_the_readers_lines_and_chunks(tmp_path, monkeypatch):
    """Random files of blank, CRLF, over-long and unterminated lines, a BOM, cut at any line count and read in
    blocks of any size, their line ends found either way (`sparse_line_bytes` 0: one by one from the second
    block on; huge: every byte compared; between: switching as the mean line length crosses it): the spans'
    lines are raw_lines' (numbers, bytes, LongLine sizes), chunked alike."""
    monkeypatch.setattr(_io, "MAX_LINE_BYTES", 50)
    rng = random.Random(1)
    path = tmp_path / "log.jsonl"
    for _ in range(1500):
        parts = [bytes(rng.choice(b'ab {}\r') for _ in range(rng.choice([0, 1, 3, 49, 50, 51, 120])))
                 for _ in range(rng.choice([0, 1, 2, 3, 8, 16, 17, 40]))]
        data = b"\n".join(parts) + (b"\n" if parts and rng.random() < 0.5 else b"")
        if rng.random() < 0.1:
            data = b"\xef\xbb\xbf" + data
        path.write_bytes(data)
        per, block = rng.choice([1, 2, 3, 8]), rng.choice([1, 2, 7, 64, 1 << 20])
        sparse = rng.choice([0, 1, 20, 60, 1 << 40])
        expected = _expected_chunks(list(raw_lines(Source(str(path)))), per)
        got = [(list(span_lines(span)), last) for span, last in file_spans(Source(str(path)), per, block, sparse)]
        assert got == expected, (data, per, block, sparse)


def test_line_ends_agree_either_way():
    """The two searches of `_line_ends` give the same offsets, within the block's first `size` bytes only."""
    rng = random.Random(2)
    for _ in range(300):
        data = bytes(rng.choice(b"ab\n\r") for _ in range(rng.randrange(0, 200)))
        buffer = bytearray(data + b"\n\n\n")  # bytes past `size` that must not count
        scratch = np.empty(len(buffer), dtype=bool)
        expected = [i for i, byte in enumerate(data) if byte == 10]
        for sparse in (False, True):
            assert _io._line_ends(buffer, len(data), scratch, sparse).tolist() == expected


def test_read_parts_cuts_plain_files_and_reads_compressed_ones(tmp_path):
    """A plain JSON Lines file goes out as spans, a .gz as its lines; both chunk as CHUNK_LINES lines."""
    import gzip

    data = b"".join(b'{"prompt": "p%d", "output_tokens": 3}\n' % i for i in range(CHUNK_LINES * 2 + 5))
    plain, packed = tmp_path / "log.jsonl", tmp_path / "log.jsonl.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    spans, lines = list(read_parts([str(plain)])), list(read_parts([str(packed)]))
    assert all(isinstance(part, LineChunk) for part in spans + lines)
    assert all(not isinstance(part.lines, list) for part in spans) and all(isinstance(part.lines, list) for part in lines)
    assert [(p.first, p.last) for p in spans] == [(p.first, p.last) for p in lines] == [(True, False), (False, False), (False, True)]
    assert [list(p.raw_lines()) for p in spans] == [p.lines for p in lines]


def test_a_file_that_shrinks_after_it_was_cut_is_an_error(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 10)
    (span, _), = file_spans(Source(str(path)), 100)
    path.write_bytes(b'{"a": 1}\n' * 3)  # rotated or rewritten meanwhile
    with pytest.raises(InputError, match=r"log.jsonl:4: the file got shorter while it was read"):
        list(span_lines(span))


def test_chunk_lines_grow_while_every_worker_keeps_its_share():
    """CHUNK_LINES doubles up to MAX_CHUNK_LINES only while each worker still gets MIN_CHUNKS_PER_WORKER."""
    from advisor.ingest import MAX_CHUNK_LINES, MIN_CHUNKS_PER_WORKER, chunk_lines

    share = MIN_CHUNKS_PER_WORKER
    assert chunk_lines(0, 2) == chunk_lines(2 * CHUNK_LINES * 2 * share - 1, 2) == CHUNK_LINES
    assert chunk_lines(2 * CHUNK_LINES * 2 * share, 2) == 2 * CHUNK_LINES
    assert chunk_lines(190_559, 2) == MAX_CHUNK_LINES == 4 * CHUNK_LINES  # the 1 GB log on 2 workers
    assert chunk_lines(190_559, 16) == CHUNK_LINES and chunk_lines(1_521_967, 16) == MAX_CHUNK_LINES
    assert chunk_lines(10**12, 1) == MAX_CHUNK_LINES


def test_a_big_file_is_cut_in_longer_spans_from_its_estimated_line_count(tmp_path):
    """`lines_per_span` as a function gets the file's line count estimated from its first block, once: the
    spans then hold that many lines each, numbered on, and give back every line."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"".join(b'{"prompt": "p%04d"}\n' % i for i in range(1000)))  # 20-byte lines
    asked: list[float] = []

    def per_span(lines: float) -> int:
        asked.append(lines)
        return 300

    spans = list(file_spans(Source(str(path)), per_span, block_bytes=4000))  # 200 lines a block
    assert asked == [1000.0]
    assert [(span.first_line, last) for span, last in spans] == [(1, False), (301, False), (601, False), (901, True)]
    assert [len(list(span_lines(span))) for span, _ in spans] == [300, 300, 300, 100]


def test_read_parts_sizes_chunks_for_the_workers(tmp_path, monkeypatch):
    """read_parts cuts a plain file and a ShareGPT array by chunk_lines for its worker count."""
    import json

    from advisor import ingest

    monkeypatch.setattr(ingest, "MIN_CHUNKS_PER_WORKER", 2)
    plain = tmp_path / "log.jsonl"
    plain.write_bytes(b"".join(b'{"prompt": "p%d", "output_tokens": 3}\n' % i for i in range(CHUNK_LINES * 8)))
    array = tmp_path / "sharegpt.json"
    array.write_text(json.dumps([{"id": str(i), "conversations": [{"from": "human", "value": "hi"},
                                                                   {"from": "gpt", "value": "yes"}]}
                                 for i in range(CHUNK_LINES * 8)]))
    for path in (plain, array):
        for workers, size in ((1, 4 * CHUNK_LINES), (2, 2 * CHUNK_LINES), (4, CHUNK_LINES)):
            chunks = list(read_parts([str(path)], workers=workers))
            assert [len(list(chunk.raw_lines())) for chunk in chunks] == [size] * (8 * CHUNK_LINES // size)
