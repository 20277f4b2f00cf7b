"""Streaming collection: compact state with fixed budgets, and N worker processes giving the serial report."""
from __future__ import annotations

import itertools
import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest

from advisor import stream
from advisor.ingest import IngestStats
from advisor.measure import overlap, state
from advisor.measure.prefix import PrefixBlocks
from advisor.measure.sampling import sampling_summary, summary_from_counts
from advisor.profile import ProfileOptions, build_profile
from advisor.record import SamplingParams


def assert_same(a, b, path="report"):
    """Field-by-field equality of two report documents (NaN equals NaN), naming the first difference."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a.keys() ^ b.keys())}"
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for index, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{index}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), f"{path}: NaN != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.mark.parametrize("name", ["aider_chat_history.md", "mooncake_conversation_trace.jsonl"])
def test_workers_give_the_serial_report(real_file, name):
    options = ProfileOptions(paths=(str(real_file(name)),), sweep=False)
    serial = build_profile(options)
    parallel = build_profile(options, workers=2)
    assert_same(serial.report.to_dict(), parallel.report.to_dict())
    assert serial.features.keys() == parallel.features.keys()
    for key in serial.features:
        np.testing.assert_array_equal(serial.features[key], parallel.features[key])


def test_sharegpt_workers_route_conversations_whole(real_file):
    """Multi-turn chats: the conversation context (earlier outputs) must reach the same worker."""
    options = ProfileOptions(paths=(str(real_file("sharegpt_v3_subset.json")),), replay=False, recommend=False)
    serial = build_profile(options).report.to_dict()
    parallel = build_profile(options, workers=3).report.to_dict()
    assert serial["overlap"]["context_requests"] > 0
    assert_same(serial, parallel)


def test_one_core_encodes_inline_with_the_threaded_report(real_file, monkeypatch):
    """One process on one core encodes each batch inline, with a second core on a thread: the same report."""
    from concurrent import futures

    options = ProfileOptions(paths=(str(real_file("sharegpt_v3_subset.json")),), recommend=False, sweep=False)
    threads: list[int] = []
    real_executor = futures.ThreadPoolExecutor

    def counted(*args, **kwargs):
        threads.append(1)
        return real_executor(*args, **kwargs)

    monkeypatch.setattr(stream, "ThreadPoolExecutor", counted)
    monkeypatch.setattr(stream, "usable_cores", lambda: 1)
    inline = build_profile(options).report.to_dict()
    assert threads == []
    monkeypatch.setattr(stream, "usable_cores", lambda: 2)
    threaded = build_profile(options).report.to_dict()
    assert threads == [1]
    assert inline["overlap"]["context_requests"] > 0
    assert_same(inline, threaded)


@pytest.mark.parametrize("layout", ["array", "jsonl"])
def test_workers_parse_sharegpt_conversations_as_one_process(real_file, tmp_path, layout):
    """ShareGPT goes to the workers as chunks of conversations (a JSON array's written back one per line,
    numbered by position): the same report as one process, with bad elements and bad turns reported at the
    same positions, and the main process sends no request histories."""
    from advisor.ingest import LineChunk, read_parts

    records = orjson.loads(real_file("sharegpt_v3_subset.json").read_bytes())[:700]
    records[4] = "not a conversation"
    records[10] = {"id": "x", "conversations": [{"from": "robot", "value": "?"}, *records[10]["conversations"]]}
    records[600] = {"id": "big", "n": "BIG", "conversations": records[600]["conversations"]}
    path = tmp_path / f"sharegpt.{'json' if layout == 'array' else 'jsonl'}"
    if layout == "array":
        data = orjson.dumps(records, option=orjson.OPT_INDENT_2)
    else:
        data = b"\n".join(orjson.dumps(record) for record in records) + b"\n"
    path.write_bytes(data.replace(b'"BIG"', b"123456789012345678901234567890"))  # beyond 64 bits: read as a float
    parts = list(read_parts([str(path)]))
    assert parts and all(isinstance(part, LineChunk) for part in parts)
    assert [number for part in parts for number, _ in part.raw_lines()] == list(range(1, 701))
    options = ProfileOptions(paths=(str(path),), sweep=False)
    serial = build_profile(options).report.to_dict()
    assert_same(serial, build_profile(options, workers=2).report.to_dict())
    problems = serial["ingest"]["problems"]
    assert [problem.split(":")[1] for problem in problems[:3]] == ["5", "11", "72"], problems  # 72: the data's own


def _chat_log(real_file, path, bad_lines: dict[int, bytes], fmt: str = "openai") -> None:
    """A JSON Lines log (openai chat records or bench-custom prompts) from the real ShareGPT conversations,
    turns of a conversation on consecutive lines (so conversations cross the 256-line chunks), with the
    given raw lines put in at those line numbers (1-based)."""

    from advisor.ingest import read_requests

    requests = [r for r in read_requests([str(real_file("sharegpt_v3_subset.json"))])
                if r.messages is not None and r.completion is not None][:900]
    lines = []
    for index, request in enumerate(requests):
        if fmt == "openai":
            record = {"id": f"r{index}", "timestamp": 1_767_225_600 + index * 0.5,
                      "conversation_id": request.conversation_id, "replica": f"pod-{index * 7 % 3}",
                      "messages": [{"role": m.role, "content": m.content} for m in request.messages],
                      "completion": request.completion}
        else:
            record = {"prompt": request.messages[-1].content, "output_tokens": 10 + index % 50}
        lines.append(orjson.dumps(record))
    for number in sorted(bad_lines):
        lines.insert(number - 1, bad_lines[number])
    path.write_bytes(b"\n".join(lines) + b"\n")


BAD_LINES = {3: b'{"messages": [', 256: b"", 257: b'"a string"', 258: b'{"id": "x", "messages": 5}',
             513: b'{"completion": "\xff\xfe"}', 514: b"\xff\xfe not utf-8", 700: b"[1, 2]"}


@pytest.mark.parametrize("fmt", ["openai", "bench-custom"])
def test_workers_parse_json_lines_as_one_process(real_file, tmp_path, fmt):
    """JSON Lines go to the workers as chunks of raw lines: the same report, bad lines with the same file:line
    in the same order, and overlap counts of conversations that cross the chunks (recomputed in the main
    process) equal to one process's."""
    path = tmp_path / f"chat.{fmt}.jsonl"
    _chat_log(real_file, path, BAD_LINES, fmt)
    options = ProfileOptions(paths=(str(path),), fmt=fmt, replay=False, recommend=False)
    serial = build_profile(options).report.to_dict()
    problems = serial["inputs"]["problems"] if "problems" in serial["inputs"] else None
    for workers in (2, 3):
        assert_same(serial, build_profile(options, workers=workers).report.to_dict())
    text = str(serial)
    assert all(f"{path}:{line}:" in text for line in (3, 257, 258, 514, 700)), problems
    if fmt == "openai":
        assert serial["overlap"]["context_requests"] > 0
        assert serial["routing"]["policy"] == "log" and len(serial["routing"]["names"]) == 3


def _collected_both_ways(real_file, tmp_path):
    """(path, options, serial Collected, 2-worker Collected, the workers' ingest stats) of a real chat log."""
    from advisor.ingest import read_parts, read_requests

    path = tmp_path / "chat.jsonl"
    _chat_log(real_file, path, {})
    options = stream.StreamOptions(tokenizer=None, model=None, block_size=16, hash_block_size=512, seed=0)
    serial = stream.collect(read_requests([str(path)]), options, {})
    stats = IngestStats()
    parallel = stream.collect(read_parts([str(path)], stats=stats), options, {}, workers=2, stats=stats)
    return path, options, serial, parallel, stats


def test_workers_hash_the_chains_the_sampled_store_keeps(real_file, tmp_path, monkeypatch):
    """Past the budgets, workers hash the chains below the store's bound when each job was sent (a superset of
    what it keeps, the bound only falling) and the replay sample skips what it never keeps: the same samples
    as one process, whose bound is exact."""
    monkeypatch.setattr(stream, "PREFIX_BLOCK_BUDGET", 3_000)
    monkeypatch.setattr(stream, "REPLAY_TOKEN_BUDGET", 60_000)
    received = []  # token ids that came back from the workers, against the chunks' whole
    receive = stream._receive

    def counting(outbox, process):
        status, payload = receive(outbox, process)
        if isinstance(payload, stream.MeasuredChunk):
            measured = payload.measured
            whole = measured.prompt_lens[measured.prompt_lens > 0].sum() + measured.output_lens_ids[
                measured.output_lens_ids > 0].sum()
            received.append((measured.ids.size, whole))
        return status, payload

    monkeypatch.setattr(stream, "_receive", counting)
    monkeypatch.setattr(stream, "IN_FLIGHT_PER_WORKER", 1)  # the last chunks are sent after the first is in
    _, _, serial, parallel, _ = _collected_both_ways(real_file, tmp_path)
    assert serial.store.sampled and len(serial.replay_inputs) < serial.replay_seen == parallel.replay_seen
    # Once the replay sample is full, only the conversations' outputs and its candidates' ids come back.
    assert len(received) == 4 and received[0][0] == received[0][1], received
    assert all(0 < got < whole / 2 for got, whole in received[2:]), received
    for mine, theirs in ((parallel.store.rows, serial.store.rows), (parallel.store.blocks, serial.store.blocks)):
        np.testing.assert_array_equal(mine.values, theirs.values)
    np.testing.assert_array_equal(parallel.replay_rows, serial.replay_rows)
    assert parallel.store.offered == serial.store.offered
    np.testing.assert_array_equal(parallel.affinities, serial.affinities)


def test_workers_recompute_the_overlaps_that_cross_chunks(real_file, tmp_path):
    """The counts of requests whose conversation began in an earlier chunk are the serial ones (and differ
    from what the chunk alone gives: the test would catch counts left as the worker found them)."""
    from advisor.ingest import read_parts

    path, options, serial, parallel, stats = _collected_both_ways(real_file, tmp_path)
    np.testing.assert_array_equal(parallel.overlap_counts, serial.overlap_counts)
    np.testing.assert_array_equal(parallel.overlap4, serial.overlap4)
    np.testing.assert_array_equal(parallel.overlap_with_context, serial.overlap_with_context)
    assert stats.requests == serial.rows
    # Each chunk alone (one process per chunk, no earlier outputs) gives other counts at the chunks' seams.
    alone = [stream._measure_chunk(part, options, False, {}, 0) for part in read_parts([str(path)])]
    counts = np.concatenate([chunk.measured.overlap_counts.ravel() for chunk in alone])
    assert not np.array_equal(counts, serial.overlap_counts)


def test_workers_recount_with_the_serial_context_when_its_lru_drops_conversations(real_file, tmp_path, monkeypatch):
    """Conversations interleaved and a context budget so small that the LRU drops them between their turns:
    the workers' counts are computed again with the serial context's outputs (fewer than the chunk had) and
    equal one process's, which differ from the counts with the whole context (the test would catch a
    recount skipped)."""
    from advisor.ingest import read_parts, read_requests

    path = tmp_path / "chat.jsonl"
    _chat_log(real_file, path, {})
    turns: dict[str, list[bytes]] = {}
    for line in path.read_bytes().splitlines():
        turns.setdefault(orjson.loads(line)["conversation_id"], []).append(line)
    interleaved = [turn for group in itertools.zip_longest(*turns.values()) for turn in group if turn]
    path.write_bytes(b"\n".join(interleaved) + b"\n")
    options = stream.StreamOptions(tokenizer=None, model=None, block_size=16, hash_block_size=512, seed=0)
    whole = stream.collect(read_requests([str(path)]), options, {})
    monkeypatch.setattr(stream, "CONTEXT_TOKEN_BUDGET", 20_000)
    serial = stream.collect(read_requests([str(path)]), options, {})
    stats = IngestStats()
    parallel = stream.collect(read_parts([str(path)], stats=stats), options, {}, workers=2, stats=stats)
    np.testing.assert_array_equal(parallel.overlap_counts, serial.overlap_counts)
    np.testing.assert_array_equal(parallel.overlap4, serial.overlap4)
    assert not np.array_equal(serial.overlap_counts, whole.overlap_counts)


def test_workers_report_bad_json_lines_as_one_process(tmp_path):
    """A file without a usable line: the same error with workers; under --strict the first bad line's."""
    from advisor.errors import BadRecordError, InputError

    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"prompt": 5, "output_tokens": 3}\n\n{"prompt": \n' * 200)
    errors = []
    for workers in (1, 2):
        with pytest.raises(InputError) as caught:
            build_profile(ProfileOptions(paths=(str(path),), fmt="bench-custom"), workers=workers)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "400 bad records" in errors[0]
    good = tmp_path / "good.jsonl"
    good.write_bytes(b'{"prompt": "hi", "output_tokens": 3}\n' * 600 + b'{"prompt": 7, "output_tokens": 3}\n')
    strict = []
    for workers in (1, 2):
        with pytest.raises(BadRecordError) as caught:
            build_profile(ProfileOptions(paths=(str(good),), fmt="bench-custom", strict=True), workers=workers)
        strict.append((str(caught.value), caught.value.line))
    assert strict[0] == strict[1] and strict[0][1] == 601


def _chain(blocks: int, salt: int) -> PrefixBlocks:
    return PrefixBlocks(blocks * 16, blocks, np.arange(blocks, dtype=np.uint64) + np.uint64(salt << 20))


def test_chain_store_stays_within_budget_and_keeps_conversations_whole():
    store = state.ChainStore(block_budget=1_000, seed=3)
    conversation_of = {}
    for row in range(2_000):
        key = f"conv{row % 150}"
        conversation_of[row] = key
        store.add(row, store.priority(key), _chain(5, row), 16)
        assert store.blocks.size <= 1_000
    assert store.sampled and 0 < store.kept_share < 1
    kept_rows = set(store.rows.values.tolist())
    kept_conversations = {conversation_of[row] for row in kept_rows}
    # Whole conversations: every request of a kept conversation is kept, none of a dropped one.
    assert kept_rows == {row for row, key in conversation_of.items() if key in kept_conversations}
    rows, chains = store.kept_chains()
    assert set(rows.tolist()) == kept_rows and len(chains) == rows.size
    for row, chain in zip(rows.tolist(), chains):
        np.testing.assert_array_equal(chain.chain, _chain(5, row).chain)
    # Deterministic: the same stream gives the same sample.
    again = state.ChainStore(block_budget=1_000, seed=3)
    for row in range(2_000):
        again.add(row, again.priority(conversation_of[row]), _chain(5, row), 16)
    np.testing.assert_array_equal(again.rows.values, store.rows.values)


def test_chain_store_keeps_everything_under_budget():
    store = state.ChainStore(block_budget=10_000, seed=0)
    for row in range(100):
        store.add(row, store.priority(f"#{row}"), _chain(3, row), 16)
    assert not store.sampled and store.rows.size == 100 and store.blocks.size == 300


def test_context_outputs_bounded_lru():
    context = state.ContextOutputs(token_budget=100)
    for conversation in range(20):
        assert context.push(f"c{conversation}", np.arange(10, dtype=np.int32)) == []
        assert context.tokens <= 100
    assert context.evicted == 10
    assert context.push("c0", np.arange(5, dtype=np.int32)) == []  # evicted: it starts again
    assert len(context.push("c19", np.arange(5, dtype=np.int32))) == 1
    assert context.tokens == 100 and context.evicted == 11  # the oldest, c10, made room for c0


def test_context_push_run_is_push_one_by_one():
    """`push_run` (the main process's context, a chunk at a time) leaves the LRU as `push` one request at a
    time does, and names exactly the requests whose context is not their conversation's earlier outputs in
    the run: conversations that began in an earlier run, and ones the budget dropped within the run."""
    rng = np.random.default_rng(5)
    one, runs = state.ContextOutputs(token_budget=300), state.ContextOutputs(token_budget=300)
    expected_differ = found_differ = dropped_in_run = 0
    for _ in range(60):
        size = int(rng.integers(1, 12))
        conversations = [None if rng.random() < 0.1 else f"c{rng.integers(0, 8)}" for _ in range(size)]
        lengths = rng.integers(0, 60, size)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        ids = rng.integers(0, 1000, int(lengths.sum())).astype(np.int32)
        expected, in_run = [], {}
        for k, conversation in enumerate(conversations):
            if conversation is None:
                continue
            earlier = one.push(conversation, ids[starts[k]:starts[k] + lengths[k]].copy())
            if len(earlier) != in_run.get(conversation, 0):
                expected.append((k, earlier))
                dropped_in_run += len(earlier) < in_run.get(conversation, 0)
            in_run[conversation] = in_run.get(conversation, 0) + 1
        differ = runs.push_run(conversations, ids, starts.tolist(), lengths.tolist())
        assert [k for k, _ in differ] == [k for k, _ in expected]
        for (_, got), (_, want) in zip(differ, expected):
            assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
        assert list(runs._outputs) == list(one._outputs)
        assert (runs.tokens, runs.evicted) == (one.tokens, one.evicted)
        expected_differ += len(expected)
        found_differ += len(differ)
    assert found_differ == expected_differ > 0 and dropped_in_run > 0 and one.evicted > 0
    # the pushed outputs are copies: the run's ids may be reused
    context = state.ContextOutputs(token_budget=100)
    ids = np.arange(6, dtype=np.int32)
    context.push_run(["a", "a"], ids, [0, 3], [3, 3])
    ids[:] = -1
    assert [list(output) for output in context._outputs["a"]] == [[0, 1, 2], [3, 4, 5]]


def test_column_grows_and_compacts():
    import pickle

    column = state.Column(np.int64, capacity=2)
    column.extend(np.arange(5))
    column.extend([5, 6])
    np.testing.assert_array_equal(column.values, np.arange(7))
    column.keep(column.values % 2 == 0)
    np.testing.assert_array_equal(column.values, [0, 2, 4, 6])
    again = pickle.loads(pickle.dumps(column))  # what was appended travels, not the spare capacity
    assert again._data.size == 4 and again.values.tolist() == [0, 2, 4, 6]


def test_sampling_counts_give_the_list_summary():
    rng = random.Random(7)
    for _ in range(200):
        params = [
            SamplingParams(temperature=rng.choice([None, 0.0, 0.2, 0.7, 1.0, rng.random()]),
                           top_k=rng.choice([None, 1, 50]), top_p=rng.choice([None, 0.95]))
            for _ in range(rng.randint(0, 40))
        ]
        counts = state.SamplingCounts.of(params)
        assert summary_from_counts(counts.counts) == sampling_summary(params)
        temperatures = [p.temperature for p in params if p.temperature is not None]
        if temperatures:
            assert sampling_summary(params).temperature_p50 == float(np.percentile(temperatures, 50))


def test_packed_overlap_counts_give_the_object_summary():
    rng = np.random.default_rng(1)
    objects, packed, with_context = [], [], []
    for index in range(60):
        prompt = rng.integers(0, 30, size=rng.integers(0, 80))
        output = rng.integers(0, 30, size=rng.integers(1, 40))
        context = None if index % 3 == 0 else [rng.integers(0, 30, size=20)]
        objects.append(overlap.request_overlap(prompt, output, context))
        packed.append(overlap.overlap_counts(prompt, output, context))
        with_context.append(context is not None)
    counts = np.stack(packed)
    a = overlap.summarize_overlap(objects).to_dict()
    b = overlap.summarize_counts(counts[:, 0], counts[:, 1], counts[:, 2], np.array(with_context)).to_dict()
    assert_same(a, b)


def test_replay_sample_stays_within_budget():
    sample = state.ReplaySample(token_budget=1_000, seed=0)
    rng = np.random.default_rng(0)
    for row in range(500):
        size = int(rng.integers(5, 20))
        sample.add(row, sample.priority(f"log:{row}"), np.zeros(size, np.int32), np.zeros(size, np.int32))
        assert sample.tokens <= 1_000
    assert sample.seen == 500
    inputs = sample.inputs
    assert sum(len(p) + len(o) for p, o in inputs) == sample.tokens <= 750 and 0 < len(inputs) < 500
    assert list(sample.rows) == sorted(sample.rows)


def _offers(count: int, seed: int) -> list[tuple[int, str, int]]:
    """(row, conversation key, size) of a random log: conversations of several requests, interleaved."""
    rng = random.Random(seed)
    return [(row, f"conv{rng.randrange(count // 4)}", rng.randrange(1, 12)) for row in range(count)]


def _store(offers, budget: int, shift: int = 0) -> state.ChainStore:
    """The chain store of `offers`, its rows counted from `shift` (a shard's first row in the whole log)."""
    store = state.ChainStore(block_budget=budget, seed=5)
    for row, key, size in offers:
        store.add(row - shift, store.priority(key), _chain(size, row), 16)
    return store


def _sample(offers, budget: int, shift: int = 0) -> state.ReplaySample:
    sample = state.ReplaySample(token_budget=budget, seed=5)
    for row, key, size in offers:
        sample.add(row - shift, sample.priority(f"{key}:{row}"), np.full(size, row, np.int32), np.zeros(1, np.int32))
    return sample


@pytest.mark.parametrize("seed", range(6))
def test_samples_depend_on_the_set_of_requests_only(seed):
    """The chain and replay samples merge: cutting the log into consecutive shards, collecting each alone
    and absorbing them in order gives the single pass's sample (the shards' own samples may have dropped
    more than the whole's, or less), and offering the requests in another order keeps the same set."""
    offers = _offers(3_000, seed)
    cuts = sorted(random.Random(seed).sample(range(1, len(offers)), 3))
    parts = [offers[a:b] for a, b in zip([0, *cuts], [*cuts, len(offers)])]
    single_store, single_sample = _store(offers, 2_000), _sample(offers, 2_000)
    assert single_store.sampled and single_sample.threshold < 2**32
    merged_store, merged_sample = state.ChainStore(2_000, 5), state.ReplaySample(2_000, 5)
    for part in parts:
        shift = part[0][0]
        merged_store.absorb(_store(part, 2_000, shift), shift)
        merged_sample.absorb(_sample(part, 2_000, shift), shift)
    assert merged_store.threshold == single_store.threshold and merged_store.offered == single_store.offered
    for name in ("blocks", "lengths", "prompt_blocks", "prompt_tokens", "priorities"):
        np.testing.assert_array_equal(getattr(merged_store, name).values, getattr(single_store, name).values)
    np.testing.assert_array_equal(merged_store.rows.values, single_store.rows.values)
    assert merged_sample.threshold == single_sample.threshold and merged_sample.seen == single_sample.seen
    np.testing.assert_array_equal(merged_sample.rows, single_sample.rows)
    assert merged_sample.tokens == single_sample.tokens
    # The local rows were shifted back: the kept token ids (the row itself) are the single pass's.
    for (a, _), (b, _) in zip(merged_sample.inputs, single_sample.inputs):
        np.testing.assert_array_equal(a, b)
    shuffled = offers[:]
    random.Random(seed).shuffle(shuffled)
    assert set(_store(shuffled, 2_000).rows.values.tolist()) == set(single_store.rows.values.tolist())
    assert set(_sample(shuffled, 2_000).rows.tolist()) == set(single_sample.rows.tolist())
    # Offered a batch at a time (the threshold not lowered within a batch, the collection's way): the same.
    batched_store, batched_sample = state.ChainStore(2_000, 5), state.ReplaySample(2_000, 5)
    rng, start = random.Random(seed), 0
    while start < len(offers):
        batch = offers[start:start + rng.randrange(1, 300)]
        start += len(batch)
        batched_store.add_many([row for row, _, _ in batch], [batched_store.priority(key) for _, key, _ in batch],
                               [_chain(size, row) for row, _, size in batch], len(batch), {16})
        batched_sample.add_many([row for row, _, _ in batch],
                                [batched_sample.priority(f"{key}:{row}") for row, key, _ in batch],
                                [(np.full(size, row, np.int32), np.zeros(1, np.int32)) for row, _, size in batch],
                                len(batch))
    np.testing.assert_array_equal(batched_store.rows.values, single_store.rows.values)
    np.testing.assert_array_equal(batched_store.blocks.values, single_store.blocks.values)
    assert batched_store.offered == single_store.offered and batched_sample.seen == single_sample.seen
    np.testing.assert_array_equal(batched_sample.rows, single_sample.rows)


def test_collected_absorb_equals_one_pass(real_file):
    """Collected of consecutive parts of a real log, absorbed in order, is the one pass's Collected."""
    from advisor.ingest import read_requests

    options = stream.StreamOptions(tokenizer=None, model=None, block_size=16, hash_block_size=512, seed=0)
    requests = list(read_requests([str(real_file("aider_chat_history.md"))]))
    whole = stream.collect(requests, options, {})
    merged = stream.Collected(0)
    for start in range(0, len(requests), 97):  # the aider conversations are cut: context restarts per part
        merged.absorb(stream.collect(requests[start:start + 97], options, {}))
    assert merged.rows == whole.rows
    for name in ("timestamps", "input_lens", "output_lens", "latencies", "logged_prompt_tokens"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(whole, name))
    assert merged.sampling.counts == whole.sampling.counts
    np.testing.assert_array_equal(merged.replay_rows, whole.replay_rows)
    np.testing.assert_array_equal(merged.store.blocks.values, whole.store.blocks.values)
    counts = merged.overlap_counts.reshape(-1, 3, stream.OVERLAP_MAX_N)
    wholes = whole.overlap_counts.reshape(-1, 3, stream.OVERLAP_MAX_N)
    np.testing.assert_array_equal(counts[:, :2], wholes[:, :2])  # ngrams and prompt hits: per request


def test_slimmed_batches_keep_the_ids_asked_for():
    """What a worker sends back: the prompts and outputs asked for, read back as in the whole batch."""
    prompts, outputs = [np.arange(5) + 10 * i for i in range(3)], [np.arange(3) + 100 * i for i in range(3)]
    ids = np.concatenate([part for pair in zip(prompts, outputs) for part in pair]).astype(np.int32)
    starts = np.array([0, 8, 16])
    facts = stream.Facts(np.zeros(3), np.zeros(3), np.zeros(3), state.SamplingCounts(), [],
                         np.full(3, -1, dtype=np.int32), np.zeros(3, dtype=np.uint32), np.zeros(3, dtype=np.int64),
                         np.zeros(3, dtype=np.int64), [None] * 3)
    whole = stream.MeasuredBatch(np.full(3, 5.0), np.full(3, 3.0), np.ones(3, dtype=bool), ids, starts, starts + 5,
                                 np.full(3, 5), np.full(3, 3), 16, [], np.arange(3), np.zeros((3, 3, 5), np.int64),
                                 np.zeros(3, dtype=bool), facts, np.zeros(0, np.int64), np.zeros(0, np.uint64),
                                 np.zeros(1, np.int64))
    slim = whole.slimmed(np.array([2]), np.array([0, 2]))
    assert slim.ids.size == 3 + 5 + 3 and slim.starts.tolist() == [-1, -1, 3]
    for index in (0, 2):
        np.testing.assert_array_equal(slim.output(index), outputs[index])
    np.testing.assert_array_equal(slim.prompt(2), prompts[2])
    assert slim.prompt_lens.tolist() == whole.prompt_lens.tolist()  # the lengths stay whole
    merged = stream.MeasuredBatch.merged(6, [([0, 2, 4], whole), ([1, 3, 5], slim)])
    np.testing.assert_array_equal(merged.prompt(4), prompts[2])
    np.testing.assert_array_equal(merged.output(5), outputs[2])
    assert merged.starts[[1, 3]].tolist() == [-1, -1]


def test_records_sent_to_workers_pickle_by_field_values():
    """Requests go to the workers and results come back pickled (record.pickled_by_fields): every field survives."""
    import pickle

    from advisor.record import Message, Request, pickled_by_fields

    request = Request(source="f:1#2", timestamp=3.5, conversation_id="c", turn=2,
                      messages=(Message("system", "s"), Message("user", "u")), completion="a", prompt_tokens=7,
                      sampling=SamplingParams(temperature=0.2, top_k=5), latency_s=1.5, finish_reason="stop")
    assert pickle.loads(pickle.dumps(request)) == request
    chain = PrefixBlocks(40, 2, np.array([5, 9, 11], dtype=np.uint64))
    facts = stream.Facts(np.array([1.0, np.nan]), np.array([np.nan, 2.0]), np.array([38.0, 7.0]),
                         state.SamplingCounts.of([SamplingParams(temperature=0.5)] * 2), ["r1"],
                         np.array([-1, 0], dtype=np.int32), np.array([3, 4], dtype=np.uint32), np.array([5, 6]),
                         np.array([7]), ["c"])
    measured = stream.MeasuredBatch(
        np.array([40.0, 7.0]), np.array([3.0, np.nan]), np.array([True, False]), np.arange(43, dtype=np.int32),
        np.array([0, 43]), np.array([40, 43]), np.array([40, -1]), np.array([3, -1]), 16, [(1, chain, 512)],
        np.array([0]), np.arange(15).reshape(1, 3, 5), np.array([True]), facts, np.array([0]),
        np.array([8, 9], dtype=np.uint64), np.array([0, 2]))
    back = pickle.loads(pickle.dumps(measured))
    assert back.facts.replica_names == ["r1"] and back.facts.replica_labels.tolist() == [-1, 0]
    assert back.facts.sampling.counts == facts.sampling.counts and back.facts.conversations == ["c"]
    assert back.hashed_blocks.tolist() == [8, 9] and back.hashed_offsets.tolist() == [0, 2]
    assert back.input_lens.tolist() == [40.0, 7.0] and back.block_size == 16
    assert np.array_equal(back.prompt(0), np.arange(40)) and np.array_equal(back.output(0), [40, 41, 42])
    index, back_chain, block_size = back.traced[0]
    assert (index, back_chain.prompt_tokens, back_chain.prompt_blocks, block_size) == (1, 40, 2, 512)
    assert np.array_equal(back_chain.chain, chain.chain)
    assert np.array_equal(back.overlap_counts, measured.overlap_counts) and back.with_context.tolist() == [True]

    from dataclasses import dataclass, field

    with pytest.raises(TypeError, match="outside __init__"):
        @pickled_by_fields
        @dataclass
        class Derived:
            value: int
            twice: int = field(init=False, default=0)


def test_the_stream_collects_cycles_rarely_and_restores_the_collector(tmp_path):
    """The cyclic collector runs with STREAM_GC_THRESHOLD while requests stream (most of a one-core run's
    collections were there) and gets the caller's thresholds back, also when the stream fails."""
    import gc

    from advisor.ingest import read_requests

    path = tmp_path / "log.jsonl"
    line = {"prompt": "Say hi", "completion": "hi there", "timestamp": 1.0}
    path.write_bytes(b"\n".join(orjson.dumps(line) for _ in range(300)) + b"\n")
    before = gc.get_threshold()
    seen: list[int] = []
    stream.collect(read_requests([str(path)]), stream.StreamOptions(None, None, 16, 512, 0), {},
                   progress=lambda done: seen.append(gc.get_threshold()[0]))
    assert seen and set(seen) == {stream.STREAM_GC_THRESHOLD}
    assert gc.get_threshold() == before

    def failing():
        yield from read_requests([str(path)])
        raise RuntimeError("the log broke")

    with pytest.raises(RuntimeError):
        stream.collect(failing(), stream.StreamOptions(None, None, 16, 512, 0), {})
    assert gc.get_threshold() == before


def test_samples_do_not_depend_on_how_the_log_path_is_spelled(tmp_path, monkeypatch):
    """Past the budgets, the same log read from another directory or under a relative path keeps the same
    chain and replay samples: a report made in CI from a config repo's checkout is the one made locally
    (the samples are keyed by the file's name and line, not by the path as typed)."""
    monkeypatch.setattr(stream, "PREFIX_BLOCK_BUDGET", 400)
    monkeypatch.setattr(stream, "REPLAY_TOKEN_BUDGET", 20_000)
    source = Path(__file__).resolve().parents[1] / "fixtures" / "chat_multiturn.jsonl"
    here, there = tmp_path / "here", tmp_path / "elsewhere" / "deeper"
    for folder in (here, there):
        folder.mkdir(parents=True)
        shutil.copy(source, folder / "chat.jsonl")
    monkeypatch.chdir(here)
    reports = []
    for path in ("chat.jsonl", str(there / "chat.jsonl")):
        profiled = build_profile(ProfileOptions(paths=(path,), sweep=False))
        report = profiled.report.to_dict()
        assert report["inputs"][0]["path"] == report["options"]["paths"][0] == path
        report["inputs"][0]["path"] = report["options"]["paths"] = None
        reports.append(report)
    assert reports[0]["prefix"]["sample"] is not None
    assert all(replay["token_budget_sampled"] for replay in reports[0]["replay"])
    assert_same(*reports)


@pytest.mark.parametrize(("source", "key"), [
    ("logs/day1/chat.jsonl:12", "chat.jsonl:12"),
    ("/abs/logs/chat.jsonl:12#3", "chat.jsonl:12#3"),
    ("s3://bucket/logs/chat.jsonl.gz:7", "chat.jsonl.gz:7"),
    ("chat.jsonl:1", "chat.jsonl:1"),
    ("<stdin>:5", "<stdin>:5"),
])
def test_source_keys_drop_the_folders_only(source, key):
    assert stream.source_key(source) == key


def test_sampled_rows_in_arrival_order_as_in_the_whole_logs_order():
    """The replays order their sampled requests as the whole log's arrival order orders them (by timestamp,
    missing ones last, file order among equals), from the timestamps they carry, without that order: with
    timestamps, ties, NaNs, none; the rows in file order (a sample's) or not."""
    from advisor.profile import _arrival_order, _in_arrival_order

    rng = np.random.default_rng(11)
    for timestamps in (rng.integers(0, 20, 400).astype(float), np.full(400, np.nan), rng.uniform(0, 1, 400)):
        timestamps[rng.random(400) < 0.2] = np.nan
        rank = np.empty(400, dtype=np.int64)
        rank[_arrival_order(timestamps)] = np.arange(400)
        for rows in (np.sort(rng.choice(400, 90, replace=False)), rng.choice(400, 90, replace=False)):
            ordered = rows[_in_arrival_order(rows, timestamps[rows])]
            assert ordered.tolist() == sorted(rows.tolist(), key=lambda row: rank[row])


def _assert_same_state(mine, theirs) -> None:
    """Two accumulators (stats.ExactSummary, overlap.OverlapTotals) hold the same values."""
    assert vars(mine).keys() == vars(theirs).keys()
    for name, value in vars(theirs).items():
        np.testing.assert_array_equal(getattr(mine, name), value, err_msg=name)


def test_row_sample_past_its_budget_keeps_the_lowest_priorities_and_exact_totals(real_file, tmp_path, monkeypatch):
    """Past ROW_BUDGET the per-request columns hold the requests of lowest priority within the budget, with
    the values the whole collection has for them; two workers (conversations crossing chunks: their recounts
    go into the sample) collect what one process does; the exact totals beside the sample (lengths, overlap
    sums, timestamps' count and span) are the unsampled collection's."""
    from advisor.ingest import read_requests
    from advisor.measure import stats

    path, options, whole, _, _ = _collected_both_ways(real_file, tmp_path)
    monkeypatch.setattr(stream, "ROW_BUDGET", 400)
    _, _, serial, parallel, _ = _collected_both_ways(real_file, tmp_path)
    assert not whole.sample.sampled and whole.sample.rows.tolist() == list(range(whole.rows))
    assert serial.sample.sampled and serial.overlap.sampled and serial.rows == parallel.rows == whole.rows
    kept = serial.sample.rows
    assert 300 <= kept.size <= 400, kept.size
    priorities = np.array([state.request_priority(stream.source_key(r.source), 0)
                           for r in read_requests([str(path)])])
    assert sorted(priorities[kept].tolist()) == sorted(priorities.tolist())[:kept.size]
    for name in stream.ROW_DTYPE.names:
        np.testing.assert_array_equal(parallel.sample.carried(name), serial.sample.carried(name))
        np.testing.assert_array_equal(serial.sample.carried(name), whole.sample.carried(name)[kept])
    counted = np.searchsorted(whole.overlap.rows, serial.overlap.rows)
    np.testing.assert_array_equal(whole.overlap.rows[counted], serial.overlap.rows)
    np.testing.assert_array_equal(serial.overlap_counts, whole.overlap_counts[counted])
    np.testing.assert_array_equal(parallel.overlap_counts, serial.overlap_counts)
    for collected in (serial, parallel):
        _assert_same_state(collected.overlap_totals, whole.overlap_totals)
        for name, summary in whole.lengths.items():
            _assert_same_state(collected.lengths[name], summary)
        assert (collected.timed, collected.first_time, collected.last_time) == (
            whole.timed, whole.first_time, whole.last_time)
        np.testing.assert_array_equal(collected.decode_sums, whole.decode_sums)
    # Unsampled, the exact parts are the distribution's own.
    for name, values in (("input", whole.input_lens), ("output", whole.output_lens)):
        assert whole.lengths[name].over(stats.distribution(values)) == stats.distribution(values)
    # The chain store and the replay sample carry their requests' values, as the whole columns hold them.
    for sample, rows in ((serial.store, serial.store.rows.values), (serial.replay, serial.replay_rows)):
        for name in stream.ROW_DTYPE.names:
            np.testing.assert_array_equal(sample.carried(name), whole.sample.carried(name)[rows])


def test_sampled_collections_absorb_into_the_one_pass(real_file, monkeypatch):
    """Past the row budget, Collected of consecutive parts of a real log absorbed in order (what a Ray run's
    driver does) is the one pass's: the same sample, the same totals, replica labels renumbered."""
    from advisor.ingest import read_requests

    monkeypatch.setattr(stream, "ROW_BUDGET", 150)
    options = stream.StreamOptions(tokenizer=None, model=None, block_size=16, hash_block_size=512, seed=0)
    requests = [replace(request, replica=f"pod-{(index * 5) % 3}" if index % 4 else None)
                for index, request in enumerate(read_requests([str(real_file("aider_chat_history.md"))]))]
    whole = stream.collect(requests, options, {})
    merged = stream.Collected(0)
    for start in range(0, len(requests), 97):
        merged.absorb(stream.collect(requests[start:start + 97], options, {}))
    assert whole.sample.sampled and merged.rows == whole.rows
    assert merged.replica_names == whole.replica_names
    np.testing.assert_array_equal(merged.sample.rows, whole.sample.rows)
    for name in ("timestamp", "input_len", "output_len", "replica_label", "affinity"):
        np.testing.assert_array_equal(merged.sample.carried(name), whole.sample.carried(name))
    np.testing.assert_array_equal(merged.store.carried("replica_label"), whole.store.carried("replica_label"))
    for name, summary in whole.lengths.items():
        _assert_same_state(merged.lengths[name], summary)
    np.testing.assert_array_equal(merged.overlap_totals.ngrams, whole.overlap_totals.ngrams)


def test_a_sampled_report_is_the_same_on_workers_and_names_its_sample(real_file, tmp_path, monkeypatch):
    """Past the row budget, the report of two workers is one process's field by field; it names the
    sample, and keeps exact what the sample need not estimate (the lengths' counts, means, extremes and
    histograms, the decode share, the arrivals' count, span and mean rate, the overlap's weighted shares)."""
    from advisor.emit.html import render_html
    from advisor.emit.terminal import render_terminal

    path = tmp_path / "chat.jsonl"
    _chat_log(real_file, path, {})
    options = ProfileOptions(paths=(str(path),), sweep=False, replicas=2, routing="round_robin")
    unsampled = build_profile(options).report.to_dict()
    monkeypatch.setattr(stream, "ROW_BUDGET", 400)
    one = build_profile(options).report
    assert_same(build_profile(options, workers=2).report.to_dict(), one.to_dict())
    sampled = one.to_dict()
    assert unsampled["row_sample"] is None
    assert sampled["row_sample"]["population_requests"] == 900 and sampled["row_sample"]["requests"] <= 400
    for name in ("input", "output", "total"):
        for key in ("count", "mean", "min", "max", "histogram"):
            assert sampled["lengths"][name][key] == unsampled["lengths"][name][key], (name, key)
        assert sampled["lengths"][name]["p50"] != unsampled["lengths"][name]["p50"] or name == "output"
    assert sampled["lengths"]["decode_share"] == unsampled["lengths"]["decode_share"]
    for key in ("count", "duration_s", "mean_rate_rps", "bin_s"):
        assert sampled["arrivals"][key] == unsampled["arrivals"][key], key
    assert sum(sampled["arrivals"]["counts_per_bin"]) == pytest.approx(900, rel=0.05)
    for key in ("requests", "output_ngrams", "prompt_share", "context_requests", "context_share"):
        assert sampled["overlap"][key] == unsampled["overlap"][key], key
    assert sum(sampled["routing"]["requests"]) == pytest.approx(900, abs=2)
    kept = sampled["row_sample"]["requests"]
    assert f"per-request figures from a seeded sample of {kept:,} of 900 requests (p = {kept / 900:.3g})" in (
        render_terminal(one))
    assert f"seeded sample of {kept:,} of 900 requests (p = {kept / 900:.3g}); estimates: length percentiles" in (
        render_html(one))
