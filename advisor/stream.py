"""Streaming collection for the profile: requests in, compact per-request state out, on one or N processes.

The log is read one batch at a time. Per request, the heavy part (tokenization with the per-piece cache,
the block-hash chain, the n-gram overlap counts, the samples' keyed hashes) is `measure_batch`; the light
part (`collect_batch`, in file order in the main process) appends the results, packed arrays, to
`Collected`: columns, the chain store and the replay reservoir (advisor.measure.state). Nothing keeps a
Python object per request. On one process, a
batch's cache misses are encoded on a second thread (the encoders release the GIL) while the main thread
plans the next batch (its pieces that this batch encodes are taken from it), measures and collects the
batch before and parses the one after.

With `workers` > 1 the heavy part runs in worker processes (tokenization holds the GIL). Files in a JSON
Lines format (`advisor.ingest.LINE_READERS`: openai, bench-custom, mooncake, ShareGPT; a ShareGPT JSON array's
conversations written back one per line) go to the workers as chunks of raw lines (`ingest.read_parts`; a
plain file's as byte ranges that the worker reads itself), one chunk to one worker in turn, so reading and
parsing leave the main process too:
a worker decodes and parses its chunk (`ingest.parse_chunk`: the problems with their line numbers), and
measures it with the earlier outputs of the chunk's own conversations and sends back the ids the main
process reads (`MeasuredBatch.slimmed`); the main process absorbs the chunks' ingest stats in file order
and has the chunk's worker count again the overlaps of the requests whose conversation had other
outputs before them in the serial run (`_Crossings`), so the counts are the serial run's. Requests of the other
formats are batched and routed by conversation, so a conversation's turns meet its earlier outputs (the
overlap's context) and its cached pieces in the same worker. Results come back per job and are collected
in file order, so the report is the serial run's exactly (tests/test_stream.py). Memory per worker: its
tokenizer and piece cache, its share of the context budget, the ids of the few chunks whose recounts are
still to be asked.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import multiprocessing
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from advisor import ingest, pipes
from advisor.errors import AdvisorError
from advisor.measure import overlap, prefix, routing, state, stats
from advisor.record import Request, SamplingParams, pickled_by_fields

if TYPE_CHECKING:
    from advisor.tokenize import PackedIds

BATCH_REQUESTS = 256
OVERLAP_MAX_N = 5
OVERLAP_VALUES = 3 * OVERLAP_MAX_N  # per counted request, see overlap.overlap_counts
# Replays keep token ids in memory; beyond this many tokens the replay inputs are sampled (seeded reservoir).
REPLAY_TOKEN_BUDGET = 12_000_000
# Block chains kept for the prefix analysis and the APC replay (8 bytes a block; the analyses' working
# arrays take about 30 bytes a block more); past it, a seeded sample of conversations (advisor.measure.state).
PREFIX_BLOCK_BUDGET = 3_000_000
# Earlier outputs of live conversations kept for the overlap's conversation context (4 bytes a token).
CONTEXT_TOKEN_BUDGET = 4_000_000
# Requests whose per-request numbers are kept (165 bytes each with the overlap counts); past 3/4 of it
# (375,000 requests: state.SAMPLE_SHARE) a seeded uniform sample of that many requests
# (advisor.measure.state.RowSample; it fills up to the budget between compactions), so that the profile's
# memory stays bounded whatever the log's size, and the report names what comes from the sample. 1 M peaked
# at 929 MiB on the 8 GB log in one process on a 16-core host; 500,000 at 775 MiB (docs/development.md).
ROW_BUDGET = 500_000
# The per-request values, one record a request, as the row sample keeps them. The chain store and the replay
# sample carry the same records for their requests (arrival order, the APC replay's hold times, replica):
# they never look into the row sample, which drops other rows.
ROW_DTYPE = np.dtype([
    ("timestamp", np.float64), ("input_len", np.float64), ("output_len", np.float64), ("latency", np.float64),
    ("logged_prompt_tokens", np.float64), ("overlap4", np.float64),
    # Routing (advisor.measure.routing): the log's replica name of each request (an index into
    # Collected.replica_names, -1: none), and the hash that consistent_hash routes its conversation by.
    ("replica_label", np.int32), ("affinity", np.uint32),
])
# Per counted request: its packed counts (int32: a count is at most an output's length, which a line's
# 64 MiB bounds; sums widen to int64), and whether it had a conversation context.
OVERLAP_DTYPE = np.dtype([("counts", np.int32, (OVERLAP_VALUES,)), ("with_context", np.bool_)])
IN_FLIGHT_PER_WORKER = 2  # batches sent ahead of the one being collected
# The cyclic collector's first threshold while streaming (Python's default: 700), see _fewer_collections.
STREAM_GC_THRESHOLD = 100_000

Progress = Callable[[int], None]


@dataclass(frozen=True)
class StreamOptions:
    """What the collection needs of the profile's options."""

    tokenizer: str | None
    model: str | None
    block_size: int
    hash_block_size: int
    seed: int


@pickled_by_fields
@dataclass(slots=True)
class MeasuredBatch:
    """The results of one batch of requests, in packed arrays (no object per request: a batch's results
    pickle as a few arrays when they come back from a worker), and its requests' `facts`.

    Request i's token ids (the tokenizer's, or the log's): `prompt_lens[i]` prompt ids from `starts[i]` and
    `output_lens_ids[i]` output ids from `output_starts[i]` in `ids` (length -1: none). A worker sends back
    only the ids the main process reads (`slimmed`). Its block chain is hashed from them where the batch is
    measured when the chain sample may keep it (`hashed_rows`: most of a big log's chains are not kept); a
    token-free trace's chain comes from its logged block ids (`traced`). The overlap counts are those of the
    requests with a prompt and a non-empty output, `counted`, in order.
    """

    input_lens: np.ndarray  # float64, NaN where unknown
    output_lens: np.ndarray  # float64
    text_prompt: np.ndarray  # bool: the prompt was tokenized (text), not taken from logged counts
    ids: np.ndarray  # int32
    starts: np.ndarray  # int64: of each prompt's ids in `ids`
    output_starts: np.ndarray  # int64: of each output's ids
    prompt_lens: np.ndarray  # int64
    output_lens_ids: np.ndarray  # int64
    block_size: int  # of the chains hashed from token ids
    traced: list[tuple[int, prefix.PrefixBlocks, int]]  # (request, chain, its block size) from block ids
    counted: np.ndarray  # int64: the requests with overlap counts
    overlap_counts: np.ndarray  # int64, len(counted) x 3 x OVERLAP_MAX_N, see overlap.overlap_counts
    with_context: np.ndarray  # bool, per counted request
    facts: Facts
    # The chains hashed ahead of the collection: those of tokenized requests whose sample priority was below
    # the store's bound when the batch was sent (a superset of what it keeps when it collects them).
    hashed_rows: np.ndarray  # int64: the requests, in order
    hashed_blocks: np.ndarray  # uint64: their chains, one after another
    hashed_offsets: np.ndarray  # int64: hashed_rows[k]'s chain is hashed_blocks[offsets[k]:offsets[k + 1]]

    @property
    def size(self) -> int:
        """The batch's requests."""
        return self.input_lens.size

    def prompt(self, index: int) -> np.ndarray:
        """Request `index`'s prompt ids (a view into the batch's ids; it has some, and they were kept)."""
        start = int(self.starts[index])
        return self.ids[start:start + int(self.prompt_lens[index])]

    def output(self, index: int) -> np.ndarray:
        """Request `index`'s output ids (a view; it has a prompt and an output, and they were kept)."""
        start = int(self.output_starts[index])
        return self.ids[start:start + int(self.output_lens_ids[index])]

    def slimmed(self, prompts: np.ndarray, outputs: np.ndarray) -> MeasuredBatch:
        """This batch with the ids of the prompts of requests `prompts` and the outputs of `outputs` (indices)
        only, the others' starts -1: what a worker sends back. The prompts are about three quarters of a chat
        log's ids (each turn repeats the history), and receiving every id was a quarter of the main
        process's stream work on 16 workers; it reads the outputs of conversations (the overlap's context)
        and the ids of the replay sample's candidates only."""
        keep = np.zeros((2, self.size), dtype=bool)
        keep[0, prompts], keep[1, outputs] = True, True
        starts = np.full((2, self.size), -1, dtype=np.int64)
        pieces: list[np.ndarray] = []
        offset = 0
        for index in np.flatnonzero(keep.any(axis=0)).tolist():
            for side, piece in ((0, self.prompt), (1, self.output)):
                if keep[side, index]:
                    ids = piece(index)
                    starts[side, index] = offset
                    pieces.append(ids)
                    offset += ids.size
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        return replace(self, ids=ids, starts=starts[0], output_starts=starts[1])

    @classmethod
    def merged(cls, size: int, parts: list[tuple[list[int], MeasuredBatch]]) -> MeasuredBatch:
        """One batch of `size` requests from the results of its parts (the batch's indices of each part's
        requests, in order): what one process measuring the whole batch gives."""
        floats = np.empty((2, size))
        flags = np.empty(size, dtype=bool)
        lengths = np.empty((4, size), dtype=np.int64)
        traced, counted, with_context = [], [], []
        counts: list[np.ndarray] = []
        hashed_rows, hashed_blocks, hashed_offsets = [], [], []
        offset = blocks = 0
        for indices, part in parts:
            where = np.asarray(indices, dtype=np.int64)
            floats[0, where], floats[1, where] = part.input_lens, part.output_lens
            flags[where] = part.text_prompt
            lengths[:, where] = (np.where(part.starts >= 0, part.starts + offset, -1),
                                 np.where(part.output_starts >= 0, part.output_starts + offset, -1),
                                 part.prompt_lens, part.output_lens_ids)
            offset += part.ids.size
            traced.extend((indices[i], chain, block_size) for i, chain, block_size in part.traced)
            counted.append(where[part.counted])
            counts.append(part.overlap_counts)
            with_context.append(part.with_context)
            hashed_rows.append(where[part.hashed_rows])
            hashed_blocks.append(part.hashed_blocks)
            hashed_offsets.append(part.hashed_offsets[:-1] + blocks)
            blocks += part.hashed_blocks.size
        order = np.argsort(np.concatenate(counted), kind="stable")
        return cls(floats[0], floats[1], flags, np.concatenate([part.ids for _, part in parts]), lengths[0],
                   lengths[1], lengths[2], lengths[3], parts[0][1].block_size, sorted(traced, key=lambda item: item[0]),
                   np.concatenate(counted)[order], np.concatenate(counts)[order],
                   np.concatenate(with_context)[order], Facts.merged(size, parts, order),
                   np.concatenate(hashed_rows), np.concatenate(hashed_blocks),
                   np.concatenate([*hashed_offsets, np.array([blocks], dtype=np.int64)]))


@pickled_by_fields
@dataclass(slots=True)
class Facts:
    """What the collection reads of a batch's requests besides their measurements, packed, and computed where
    the batch is measured (a worker): the keyed hashes (the samples' priorities, the routing affinity) and
    the conversions from the requests' fields, so that the main process only appends arrays."""

    timestamps: np.ndarray  # float64, NaN where unknown
    latencies: np.ndarray  # float64
    logged_prompt_tokens: np.ndarray  # float64: the log's prompt token count (NaN: none)
    sampling: state.SamplingCounts
    replica_names: list[str]  # the replicas the batch's log names, in order of first appearance
    replica_labels: np.ndarray  # int32: index into replica_names, -1 where the log names none
    affinities: np.ndarray  # uint32: routing.affinity of the sample key
    chain_priorities: np.ndarray  # int64: the chain sample's priority of the sample key
    request_priorities: np.ndarray  # int64: the row and replay samples' priority of the request's source
    conversations: list[str | None]  # per counted request (the main process's context for chunks)

    @classmethod
    def of(cls, batch: Sequence[Request], seed: int, counted: np.ndarray) -> Facts:
        keys = [sample_key(request) for request in batch]
        names: dict[str, int] = {}
        labels = [-1 if r.replica is None else names.setdefault(r.replica, len(names)) for r in batch]
        chosen = [batch[i] for i in counted.tolist()]
        return cls(
            np.array([_nan(r.timestamp) for r in batch], dtype=np.float64),
            np.array([_nan(r.latency_s) for r in batch], dtype=np.float64),
            np.array([_nan(r.prompt_tokens) for r in batch], dtype=np.float64),
            state.SamplingCounts.of(r.sampling for r in batch),
            list(names),
            np.array(labels, dtype=np.int32),
            np.array([routing.affinity(key) for key in keys], dtype=np.uint32),
            np.array([state.conversation_priority(key, seed) for key in keys], dtype=np.int64),
            np.array([state.request_priority(source_key(r.source), seed) for r in batch], dtype=np.int64),
            [r.conversation_id for r in chosen],
        )

    @classmethod
    def merged(cls, size: int, parts: list[tuple[list[int], MeasuredBatch]], order: np.ndarray) -> Facts:
        """`MeasuredBatch.merged`'s part: the facts of the whole batch (`order`: of its parts' counted
        requests, concatenated, into the batch's order)."""
        floats = np.empty((3, size))
        keys = np.empty((3, size), dtype=np.int64)
        sampling = state.SamplingCounts()
        named: list[str | None] = [None] * size
        for indices, part in parts:
            facts = part.facts
            where = np.asarray(indices, dtype=np.int64)
            floats[:, where] = facts.timestamps, facts.latencies, facts.logged_prompt_tokens
            keys[:, where] = facts.affinities, facts.chain_priorities, facts.request_priorities
            sampling.absorb(facts.sampling)
            for index, label in zip(indices, facts.replica_labels.tolist()):
                named[index] = None if label < 0 else facts.replica_names[label]
        names: dict[str, int] = {}
        labels = [-1 if name is None else names.setdefault(name, len(names)) for name in named]
        conversations = [c for _, part in parts for c in part.facts.conversations]
        return cls(floats[0], floats[1], floats[2], sampling, list(names), np.array(labels, dtype=np.int32),
                   keys[0].astype(np.uint32), keys[1], keys[2], [conversations[i] for i in order.tolist()])


@dataclass
class MeasuredChunk:
    """A worker's results for one chunk of raw lines: its requests' measurements, the chunk's ingest stats and
    bad-record count (ingest.ParsedChunk without the requests), and whether the worker holds a tokenizer it
    loaded for text (then the report names it, as after a serial run)."""

    measured: MeasuredBatch
    stats: ingest.IngestStats
    bad_records: int
    tokenizer_used: bool
    worker: int = -1  # which worker measured it (set by the main process: where its recounts go)
    number: int = -1  # the chunk's number in the run (the worker keeps its ids under it for the recounts)


class Collected:
    """What the profile keeps of the requests, in file order, in bounded state.

    Per request, a few numbers (165 bytes: ROW_DTYPE, the overlap counts) within ROW_BUDGET requests (a
    seeded uniform sample of requests past it, with exact totals beside it: the overlap's sums,
    the count and span of the timestamps); the block chains within PREFIX_BLOCK_BUDGET (a seeded sample of
    conversations past it); token ids for the replays within REPLAY_TOKEN_BUDGET (a seeded sample of requests
    past it). Every sample depends only on the set of requests offered, so the Collected of consecutive
    parts of a log merge (`absorb`) into the one a single pass over the whole gives.
    """

    def __init__(self, seed: int) -> None:
        self.rows = 0
        self.sample = state.RowSample(ROW_BUDGET, seed, ROW_DTYPE)
        self.overlap = state.RowSample(ROW_BUDGET, seed, OVERLAP_DTYPE)
        self.overlap_totals = overlap.OverlapTotals(OVERLAP_MAX_N)
        self.store = state.ChainStore(PREFIX_BLOCK_BUDGET, seed, ROW_DTYPE)
        self.sampling = state.SamplingCounts()
        self.replay = state.ReplaySample(REPLAY_TOKEN_BUDGET, seed, ROW_DTYPE)
        self.replica_names: dict[str, int] = {}
        # Exact over the whole log, beside the sampled columns: the lengths' count, sum, extremes and
        # histogram (total: of the requests with both lengths), the token sums of the decode share.
        self.lengths = {name: stats.ExactSummary() for name in ("input", "output", "total")}
        self.decode_sums = np.zeros(2)  # prompt and output tokens of the requests with both lengths
        # And for the arrival rate: timestamped requests, span.
        self.timed = 0
        self.first_time = np.inf
        self.last_time = -np.inf

    timestamps = property(lambda self: self.sample.carried("timestamp"))
    input_lens = property(lambda self: self.sample.carried("input_len"))
    output_lens = property(lambda self: self.sample.carried("output_len"))
    latencies = property(lambda self: self.sample.carried("latency"))
    logged_prompt_tokens = property(lambda self: self.sample.carried("logged_prompt_tokens"))
    overlap4 = property(lambda self: self.sample.carried("overlap4"))
    replica_labels = property(lambda self: self.sample.carried("replica_label"))
    affinities = property(lambda self: self.sample.carried("affinity"))
    overlap_counts = property(lambda self: self.overlap.carried("counts"))  # k x OVERLAP_VALUES
    overlap_with_context = property(lambda self: self.overlap.carried("with_context"))
    chain_sizes = property(lambda self: self.store.block_sizes)
    replay_inputs = property(lambda self: self.replay.inputs)  # (prompt ids, output ids), in row order
    replay_rows = property(lambda self: self.replay.rows)  # request index of each replay input
    replay_seen = property(lambda self: self.replay.seen)

    def absorb(self, other: Collected) -> None:
        """Appends `other` (consumed: its replica labels are renumbered), the collection of the requests that
        follow this one's in file order (another shard of the same paths, collected with the same seed): the
        result equals one pass over both, field by field, given that `other` was measured with the earlier
        outputs of its conversations (a shard keeps its conversations whole)."""
        offset = self.rows
        # The other's replica names take this one's numbers (new names numbered in order of first appearance).
        renumber = np.array([self.replica_names.setdefault(name, len(self.replica_names))
                             for name in other.replica_names] + [-1], dtype=np.int32)
        for mine, theirs in ((self.sample, other.sample), (self.store, other.store), (self.replay, other.replay)):
            theirs.relabel("replica_label", renumber)
            mine.absorb(theirs, offset)
        self.overlap.absorb(other.overlap, offset)
        self.overlap_totals.absorb(other.overlap_totals)
        for name, summary in self.lengths.items():
            summary.absorb(other.lengths[name])
        self.decode_sums += other.decode_sums
        self.sampling.absorb(other.sampling)
        self.timed += other.timed
        self.first_time = min(self.first_time, other.first_time)
        self.last_time = max(self.last_time, other.last_time)
        self.rows += other.rows

    @property
    def row_share(self) -> float:
        """The share of the log's requests the per-request columns hold (1.0: all of them)."""
        return self.sample.rows.size / self.rows if self.rows else 1.0

    def overlap_summary(self) -> overlap.OverlapSummary | None:
        if not self.overlap_totals.requests:
            return None
        counts = self.overlap_counts.reshape(-1, 3, OVERLAP_MAX_N)
        return overlap.summarize_counts(counts[:, 0], counts[:, 1], counts[:, 2], self.overlap_with_context,
                                        self.overlap_totals)


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def conversation_key(request: Request, row: int) -> str:
    """The routing key: the conversation, or the request itself when it has none."""
    return request.conversation_id if request.conversation_id is not None else f"#{row}"


def sample_key(request: Request) -> str:
    """The chain sample's and the routing's key: the conversation, or the request's `source_key` when it has
    none (not its row, as in `conversation_key`: a shard of the log does not know its rows in the whole)."""
    return request.conversation_id if request.conversation_id is not None else f"#{source_key(request.source)}"


def source_key(source: str) -> str:
    """A request's source ("file:line", "file:line#turn") without the folders of the file's path: what the
    samples and the routing key on, so that the same log read from another folder, by a relative path or
    from a bucket samples and routes its requests alike (a report made in CI from a checkout is the one
    made locally). Two files of one name in different folders share keys line by line: their requests are
    kept or dropped together, each still with the sample's chance."""
    line = source.rfind(":")
    return source[source.rfind("/", 0, line) + 1:] if line > 0 else source


def load_request_tokenizer(options: StreamOptions, tokenizer_state: dict[str, Any]):
    """Loads the tokenizer at the first request with text: token-free traces never need one. One loaded
    already for the purpose (a worker's, inherited through fork) waits under "preloaded" until then."""
    if "request_tokenizer" not in tokenizer_state:
        from advisor.tokenize import RequestTokenizer, load_tokenizer

        tokenizer = tokenizer_state.pop("preloaded", None) or load_tokenizer(options.tokenizer, options.model)
        tokenizer_state["tokenizer"] = tokenizer
        tokenizer_state["request_tokenizer"] = RequestTokenizer(tokenizer)
    return tokenizer_state["request_tokenizer"]


def _has_ids(request: Request) -> bool:
    return request.prompt_token_ids is not None or request.output_token_ids is not None


def _begin_ids(batch: list[Request], options: StreamOptions, tokenizer_state: dict[str, Any],
               executor: Executor | None = None) -> Callable[[], PackedIds]:
    """Starts tokenizing the batch (its encoding on `executor` when given) and returns what finishes it: the
    batch's token ids packed, the tokenizer's for the requests with text, the log's for the others that
    carry ids, none for the rest. Batches finish in the order they began, at most two unfinished
    (`RequestTokenizer.begin`)."""
    # Logged token ids need no tokenizer; one named with --tokenizer checks them against its vocabulary.
    named = options.tokenizer is not None
    text = [i for i, r in enumerate(batch) if r.needs_tokenizer or (named and _has_ids(r))]
    if not text:
        return lambda: _with_logged_ids(batch, text, None)
    tokenizer = load_request_tokenizer(options, tokenizer_state)
    started = tokenizer.begin(batch if len(text) == len(batch) else [batch[i] for i in text], executor)
    return lambda: _with_logged_ids(batch, text, tokenizer.finish(started))


def _with_logged_ids(batch: list[Request], text: list[int], tokenized: PackedIds | None) -> PackedIds:
    """The ids of the requests `text` (indices), `tokenized`, with the log's ids of the others."""
    from advisor.tokenize import PackedIds, logged_ids

    size = len(batch)
    if tokenized is not None and len(text) == size:
        return tokenized
    starts = np.zeros(size, dtype=np.int64)
    lengths = np.full((2, size), -1, dtype=np.int64)
    arrays: list[np.ndarray] = []
    offset = 0
    if tokenized is not None:
        where = np.asarray(text, dtype=np.int64)
        starts[where], lengths[0, where], lengths[1, where] = (tokenized.starts, tokenized.prompt_lens,
                                                               tokenized.output_lens)
        arrays.append(tokenized.ids)
        offset = tokenized.ids.size
    chosen = set(text)
    for index, request in enumerate(batch):
        if index in chosen or not _has_ids(request):
            continue
        item = logged_ids(request)
        starts[index] = offset
        for side, ids in enumerate((item.prompt_ids, item.output_ids)):
            if ids is not None:
                lengths[side, index] = ids.size
                arrays.append(ids)
                offset += ids.size
    ids = np.concatenate(arrays).astype(np.int32, copy=False) if arrays else np.zeros(0, dtype=np.int32)
    return PackedIds(ids, starts, lengths[0], lengths[1])


def measure_batch(batch: list[Request], options: StreamOptions, tokenizer_state: dict[str, Any],
                  context: state.ContextOutputs, bound: int) -> MeasuredBatch:
    """Tokenization, overlap counts and the block chains of priority below `bound` (the chain store's, see
    state.ChainStore.bound) of each request (in order; updates `context`), in packed arrays."""
    return measure_ids(batch, _begin_ids(batch, options, tokenizer_state)(), options, context, bound)


def measure_ids(batch: list[Request], packed: PackedIds, options: StreamOptions,
                context: state.ContextOutputs, bound: int) -> MeasuredBatch:
    """`measure_batch` once the batch's ids are packed."""
    prompt_lens, output_lens = packed.prompt_lens, packed.output_lens
    traced = []
    for index in np.flatnonzero(prompt_lens < 0).tolist():
        request = batch[index]
        if request.block_hashes is not None and request.prompt_tokens is not None:
            traced.append((index, prefix.PrefixBlocks.from_block_ids(request.block_hashes, request.prompt_tokens),
                           request.hash_block_size or options.hash_block_size))
    # Only requests with a prompt and an output have overlap counts and feed the replays.
    counted = np.flatnonzero((prompt_lens >= 0) & (output_lens > 0))
    contexts: list[list[np.ndarray] | None] = []
    output_starts = (packed.starts + prompt_lens)[counted].tolist()
    output_ends = (packed.starts + prompt_lens + output_lens)[counted].tolist()
    for index, start, end in zip(counted.tolist(), output_starts, output_ends):
        conversation = batch[index].conversation_id
        if conversation is None:
            contexts.append(None)
            continue
        # A copy: a view would keep the whole batch's ids alive as long as the conversation's context.
        contexts.append(context.push(conversation, packed.ids[start:end].copy()))
    counts = overlap.overlap_counts_packed(packed.ids, packed.starts, prompt_lens, output_lens, counted, contexts,
                                           OVERLAP_MAX_N)
    with_context = np.array([c is not None for c in contexts], dtype=bool)
    facts = Facts.of(batch, options.seed, counted)
    logged_out = np.array([_nan(r.completion_tokens) for r in batch])
    # A chain is hashed from the prompt and all but the last output token (prefix.PrefixBlocks).
    tokenized = np.flatnonzero(prompt_lens >= 0)
    hashed = tokenized[facts.chain_priorities[tokenized] < bound]
    blocks, offsets = prefix.block_hashes_packed(packed.ids, packed.starts[hashed],
                                                 prompt_lens[hashed] + np.maximum(output_lens[hashed] - 1, 0),
                                                 options.block_size)
    return MeasuredBatch(np.where(prompt_lens >= 0, prompt_lens, facts.logged_prompt_tokens),
                         np.where(output_lens >= 0, output_lens, logged_out), prompt_lens >= 0, packed.ids,
                         packed.starts, packed.starts + np.maximum(prompt_lens, 0), prompt_lens, output_lens,
                         options.block_size, traced, counted, counts, with_context, facts, hashed, blocks, offsets)


def collect_batch(measured: MeasuredBatch, out: Collected) -> None:
    """Appends one batch's results to `out`, in file order."""
    first = out.rows
    facts = measured.facts
    out.sampling.absorb(facts.sampling)
    names = out.replica_names
    renumber = np.array([names.setdefault(name, len(names)) for name in facts.replica_names] + [-1], dtype=np.int32)
    values = np.empty(measured.size, dtype=ROW_DTYPE)
    values["timestamp"], values["latency"] = facts.timestamps, facts.latencies
    values["input_len"], values["output_len"] = measured.input_lens, measured.output_lens
    values["logged_prompt_tokens"] = np.where(measured.text_prompt, facts.logged_prompt_tokens, np.nan)
    values["overlap4"] = np.nan
    values["replica_label"], values["affinity"] = renumber[facts.replica_labels], facts.affinities
    rows = np.arange(first, first + measured.size, dtype=np.int64)
    counted = measured.counted
    if counted.size:
        counts = measured.overlap_counts
        out.overlap_totals.add(counts, measured.with_context)
        priorities = facts.request_priorities[counted]
        records = np.empty(counted.size, dtype=OVERLAP_DTYPE)
        records["counts"], records["with_context"] = counts.reshape(counted.size, -1), measured.with_context
        out.overlap.add(rows[counted], priorities, records)
        values["overlap4"][counted] = _shares4(counts)
        candidate = priorities < out.replay.bound  # the others are never kept
        indices = counted[candidate]
        out.replay.add_many((first + indices).tolist(), priorities[candidate].tolist(),
                            [(measured.prompt(index), measured.output(index)) for index in indices.tolist()],
                            counted.size, values[indices])
    _collect_chains(measured, out.store, first, values)
    out.sample.add(rows, facts.request_priorities, values)
    inputs, outputs = measured.input_lens, measured.output_lens
    both = ~np.isnan(inputs) & ~np.isnan(outputs)
    out.lengths["input"].add(inputs[~np.isnan(inputs)])
    out.lengths["output"].add(outputs[~np.isnan(outputs)])
    out.lengths["total"].add(inputs[both] + outputs[both])
    out.decode_sums += inputs[both].sum(), outputs[both].sum()
    timed = facts.timestamps[~np.isnan(facts.timestamps)]
    if timed.size:
        out.timed += timed.size
        out.first_time = min(out.first_time, float(timed.min()))
        out.last_time = max(out.last_time, float(timed.max()))
    out.rows += measured.size


def _shares4(counts: np.ndarray) -> np.ndarray:
    """Per request of `counts` (k x 3 x OVERLAP_MAX_N): the share of its output's 4-grams found in the
    prompt (NaN for an output shorter than 4 tokens)."""
    positions, hits = counts[:, 0, 3], counts[:, 1, 3]
    return np.divide(hits, positions, out=np.full(positions.size, np.nan), where=positions != 0)


def _collect_chains(measured: MeasuredBatch, store: state.ChainStore, first: int, values: np.ndarray) -> None:
    """Offers the batch's block chains to the store at once, with their requests' records (`values`, the
    batch's, ROW_DTYPE): those hashed ahead (`measured.hashed_rows`, of which it
    keeps those below its bound now) and a trace's logged ones; the others only count as offered."""
    block_size = measured.block_size
    rows = measured.hashed_rows
    prompt_tokens = measured.prompt_lens[rows]
    tokenized = int(np.count_nonzero(measured.prompt_lens >= 0))
    block_sizes = {block_size} if tokenized else set()
    offered = tokenized + len(measured.traced)
    priorities = measured.facts.chain_priorities
    if not measured.traced:
        store.add_packed(first + rows, priorities[rows], measured.hashed_blocks, measured.hashed_offsets,
                         prompt_tokens, prompt_tokens // block_size, offered, block_sizes, values[rows])
        return
    # A token-free trace's chains come from its logged block ids as chains of their own: offered with the
    # hashed ones (a log of both formats), in row order.
    offsets = measured.hashed_offsets.tolist()
    chains = [(index, prefix.PrefixBlocks(tokens, tokens // block_size,
                                          measured.hashed_blocks[offsets[k]:offsets[k + 1]]))
              for k, (index, tokens) in enumerate(zip(rows.tolist(), prompt_tokens.tolist()))]
    chains = sorted(chains + [(index, chain) for index, chain, _ in measured.traced], key=lambda item: item[0])
    block_sizes.update(size for _, _, size in measured.traced)
    indices = np.array([index for index, _ in chains], dtype=np.int64)
    store.add_many((first + indices).tolist(), priorities[indices].tolist(), [chain for _, chain in chains],
                   offered, block_sizes, values[indices])


Job = list[Request] | ingest.LineChunk  # a batch of requests, or a chunk of a file's raw lines


def _batches(parts: Iterable[Request | ingest.LineChunk]) -> Iterator[Job]:
    """Requests in batches of BATCH_REQUESTS; a chunk of lines as it is (the batch before it cut short)."""
    batch: list[Request] = []
    for part in parts:
        if isinstance(part, ingest.LineChunk):
            if batch:
                yield batch
                batch = []
            yield part
            continue
        batch.append(part)
        if len(batch) >= BATCH_REQUESTS:
            yield batch
            batch = []
    if batch:
        yield batch


def collect(parts: Iterable[Request | ingest.LineChunk], options: StreamOptions, tokenizer_state: dict[str, Any],
            workers: int = 1, progress: Progress | None = None, *, stats: ingest.IngestStats | None = None,
            strict: bool = False) -> Collected:
    """Streams `parts` into a Collected, measuring on `workers` processes (1: in this process).

    `parts`: requests (`ingest.read_requests`), or with workers `ingest.read_parts`, whose chunks of raw lines
    the workers parse (under `strict`): their ingest stats are absorbed into `stats` in file order.
    """
    with _fewer_collections():
        out = _collect(parts, options, tokenizer_state, workers, progress, stats, strict)
    # The whole-log analyses that follow need the memory more than the piece cache does.
    if "request_tokenizer" in tokenizer_state:
        tokenizer_state["request_tokenizer"].clear_cache()
    return out


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cyclic garbage collector, rarely, while the stream runs (its workers fork inside, so they
    inherit it). Records, their dicts and the plans are freed by reference counting as each batch ends,
    but with the default threshold every 700 net allocations start a collection, and the older generations'
    scan the caches' and the imports' long-lived objects: 1,173 collections, 0.71 s of a 15 s one-core run
    on the 200 MB log (4.7%), against 210 and 0.11 s with this threshold (all after the stream), the same
    peak RSS."""
    thresholds = gc.get_threshold()
    gc.set_threshold(STREAM_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one, else all)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _collect(parts: Iterable[Request | ingest.LineChunk], options: StreamOptions, tokenizer_state: dict[str, Any],
             workers: int, progress: Progress | None, stats: ingest.IngestStats | None, strict: bool) -> Collected:
    """`collect` under `_fewer_collections`."""
    out = Collected(options.seed)
    if workers <= 1:
        context = state.ContextOutputs(CONTEXT_TOKEN_BUDGET)
        # The encoders release the GIL: with a second core, a batch's misses are encoded on a second thread
        # while this one plans the next batch, then measures and collects this one and parses the one
        # after. On one core the thread only takes turns with this one (and the GIL with it): inline.
        encoder = ThreadPoolExecutor(max_workers=1) if usable_cores() > 1 else None
        previous: tuple[list[Request], Callable[[], PackedIds]] | None = None
        try:
            for batch in _batches(parts):
                assert not isinstance(batch, ingest.LineChunk), "chunks of lines are parsed by workers"
                started = _begin_ids(batch, options, tokenizer_state, encoder)
                if previous is not None:
                    _measure_and_collect(previous[0], previous[1](), options, context, out, progress)
                previous = batch, started
            if previous is not None:
                _measure_and_collect(previous[0], previous[1](), options, context, out, progress)
        finally:
            if encoder is not None:
                encoder.shutdown(cancel_futures=True)
    else:
        with _WorkerPool(workers, options, tokenizer_state, strict) as pool:
            crossings = _Crossings(ingest.IngestStats() if stats is None else stats, out, pool)
            for job, result in pool.map(_batches(parts), lambda: (out.store.bound, out.replay.bound)):
                if isinstance(result, MeasuredChunk):
                    crossings.absorb(job, result)  # type: ignore[arg-type]
                    measured = result.measured
                else:
                    measured = result
                collect_batch(measured, out)
                if progress:
                    progress(measured.size)
            pool.drain()
    return out


def _measure_and_collect(batch: list[Request], packed: PackedIds, options: StreamOptions,
                         context: state.ContextOutputs, out: Collected, progress: Progress | None) -> None:
    collect_batch(measure_ids(batch, packed, options, context, out.store.bound), out)
    if progress:
        progress(len(batch))


class _Crossings:
    """The main process's side of the chunks of lines, absorbed in file order: their ingest stats, each file's
    check that it gave a request, and the overlap counts of conversations that cross chunks.

    A worker measures a chunk with the earlier outputs of the chunk's conversations only (an unbounded
    context: the chunk's results hold those outputs anyway). This keeps the serial run's context (the same
    LRU, the same budget, the same calls in the same order): where its earlier outputs of a conversation are
    not exactly the ones the chunk had before the request (more: the conversation began before the chunk;
    fewer: the LRU dropped it), the counts are computed again with the serial context's outputs by the
    worker that measured the chunk (it kept the chunk's ids: the main process receives the conversations'
    outputs but not their prompts, see MeasuredBatch.slimmed), and written into the collection when they
    come back (`recounted`), after the chunk's own collection. The context only grows from chunks: with
    other formats in the same run, their conversations stay in the workers' own contexts (a conversation id
    is taken to belong to one file's format).
    """

    def __init__(self, stats: ingest.IngestStats, out: Collected, pool: _WorkerPool):
        self.stats = stats
        self.out = out
        self.pool = pool
        pool.recounted = self.recounted
        self.context = state.ContextOutputs(CONTEXT_TOKEN_BUDGET)
        self._file_first_problem = 0
        self._file_requests = 0
        self._file_bad = 0
        # Per chunk number, the rows of the recounts asked, with the counts and context flags collected.
        self._asked: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def absorb(self, chunk: ingest.LineChunk, result: MeasuredChunk) -> None:
        """Takes the chunk's stats and context before `collect_batch` collects it, and asks its worker for
        the recounts it needs (the worker then drops the chunk's ids)."""
        out = self.out
        if chunk.first:
            self._file_first_problem = len(self.stats.problems)
            self._file_requests = self._file_bad = 0
        self.stats.absorb(result.stats)
        self._file_requests += result.measured.size
        self._file_bad += result.bad_records
        if chunk.last and not self._file_requests:
            first = self._file_first_problem
            raise ingest.no_request_error(chunk.name, chunk.fmt, self._file_bad,
                                          self.stats.problems[first:first + ingest.MAX_SHOWN])
        measured = result.measured
        counted = measured.counted
        differ = self.context.push_run(measured.facts.conversations, measured.ids,
                                       measured.output_starts[counted].tolist(),
                                       measured.output_lens_ids[counted].tolist())
        indices = counted.tolist()
        if differ:
            places = np.array([k for k, _ in differ], dtype=np.int64)
            self._asked[result.number] = (out.rows + counted[places], measured.overlap_counts[places],
                                          measured.with_context[places])
        self.pool.recount(result.worker, result.number, [(indices[k], earlier) for k, earlier in differ])

    def recounted(self, number: int, counts: np.ndarray) -> None:
        """Writes chunk `number`'s recomputed counts (k x 3 x OVERLAP_MAX_N, in the order asked) into the
        collection, which holds the chunk: its exact totals, and the samples where they kept the rows (which
        rows they keep depends on the rows' priorities only, not on the counts)."""
        out = self.out
        rows, collected, with_context = self._asked.pop(number)
        out.overlap_totals.add(collected, with_context, -1)
        out.overlap_totals.add(counts, with_context)
        out.overlap.overwrite(rows, "counts", counts.reshape(rows.size, -1))
        out.sample.overwrite(rows, "overlap4", _shares4(counts))


def _measure_chunk(chunk: ingest.LineChunk, options: StreamOptions, strict: bool,
                   tokenizer_state: dict[str, Any], bound: int) -> MeasuredChunk:
    """A worker's job for a chunk of raw lines: parse it, measure its requests with the chunk's own context."""
    parsed = ingest.parse_chunk(chunk, strict, options.hash_block_size)
    measured = measure_batch(parsed.requests, options, tokenizer_state, state.ContextOutputs(sys.maxsize), bound)
    return MeasuredChunk(measured, parsed.stats, parsed.bad_records, "tokenizer" in tokenizer_state)


def _worker_main(inbox: Any, results: Any, options: StreamOptions, strict: bool, context_budget: int,
                 tokenizer: Any) -> None:
    """A worker: runs the messages it is sent, in order, until it receives None; sends each job's result (or
    the error that stops it) on `results`, the sending end of its pipe. A message (`_WorkerPool`) is
    (recounts, job): first the recounts of chunks it measured before, a list of (chunk number, [(index,
    earlier outputs), ...]): the overlap counts of the chunk's requests `index` again with the main process's
    context, sent back as one array per chunk that has any; then the chunk's kept ids are dropped. They ride
    with the worker's next job (one message, not two, per chunk), or alone (job None) at the end. The job:

    ("chunk", number, chunk, bounds): a chunk of lines, measured with its own context; its ids are kept under
        `number` until its recounts;
    ("batch", requests, bounds): a shard of a batch of requests, measured with this worker's context.

    `bounds`: the chain store's and the replay sample's bounds when the job was sent: the chains it hashes
    and the replay candidates whose ids it sends back (with the outputs of a chunk's conversations, the
    main process's context; MeasuredBatch.slimmed).

    `tokenizer`: the main process's, inherited through fork (None: the worker loads its own when needed);
    taken up at the first request with text, as in one process.
    """
    tokenizer_state: dict[str, Any] = {} if tokenizer is None else {"preloaded": tokenizer}
    context = state.ContextOutputs(context_budget)
    kept: dict[int, MeasuredBatch] = {}  # the chunks' whole ids, until their recounts
    sender = pipes.Sender(results)
    try:
        while (message := inbox.get()) is not None:
            recounts, job = message
            try:
                for number, requests in recounts:
                    measured = kept.pop(number)
                    if requests:
                        sender.send(("ok", np.stack([
                            overlap.overlap_counts(measured.prompt(index), measured.output(index), earlier,
                                                   OVERLAP_MAX_N)
                            for index, earlier in requests])))
                if job is None:
                    continue
                if job[0] == "chunk":
                    _, number, chunk, (chain_bound, replay_bound) = job
                    result = _measure_chunk(chunk, options, strict, tokenizer_state, chain_bound)
                    kept[number] = measured = result.measured
                    conversations = measured.counted[[c is not None for c in measured.facts.conversations]]
                    candidates = _replay_candidates(measured, replay_bound)
                    result.measured = measured.slimmed(candidates, np.union1d(candidates, conversations))
                    result.number = number
                    sender.send(("ok", result))
                else:
                    _, batch, (chain_bound, replay_bound) = job
                    measured = measure_batch(batch, options, tokenizer_state, context, chain_bound)
                    candidates = _replay_candidates(measured, replay_bound)
                    sender.send(("ok", measured.slimmed(candidates, candidates)))
            except BaseException as error:  # noqa: BLE001 - re-raised in the main process
                sender.send(("error", error))
                return
    finally:
        sender.close()


def _replay_candidates(measured: MeasuredBatch, bound: int) -> np.ndarray:
    """The batch's requests the replay sample may keep: of priority below its `bound` (the sample's as the
    job was sent: it only falls, so these are a superset of what `collect_batch` offers it)."""
    counted = measured.counted
    return counted[measured.facts.request_priorities[counted] < bound]


class _WorkerPool:
    """N processes, each owning the conversations whose key hashes to it (so their context stays whole), and
    taking the chunks of lines in turn."""

    def __init__(self, workers: int, options: StreamOptions, tokenizer_state: dict[str, Any], strict: bool):
        self.workers = workers
        self.options = options
        self.tokenizer_state = tokenizer_state
        self.strict = strict
        self.preloaded: Any = None  # a tokenizer loaded before the fork for the workers' chunks of text
        self.inboxes: list[Any] = []
        self.outboxes: list[pipes.Receiver] = []
        self.processes: list[Any] = []
        self._turn = itertools.cycle(range(workers))
        self._chunks = 0  # chunks sent: the next one's number
        # Per worker, what it will send back, in order: None for a job's result, a chunk number for its recounts.
        self._expected: list[collections.deque[int | None]] = [collections.deque() for _ in range(workers)]
        # Per worker, the recounts asked and not yet sent (they go with its next message, `_put`).
        self._recounts: list[list[tuple[int, list[tuple[int, list[np.ndarray]]]]]] = [[] for _ in range(workers)]
        # Where a chunk's recomputed counts go (_Crossings.recounted): (chunk number, counts).
        self.recounted: Callable[[int, np.ndarray], None] | None = None
    def _start(self, first: Job) -> None:
        """Starts the workers (at the first job, so that a fork inherits the tokenizer loaded for it: by the
        main process for a batch with text, here for a chunk of a format with text)."""
        fork = "fork" in multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if fork else "spawn")
        tokenizer = self.tokenizer_state.get("tokenizer")
        if tokenizer is None and fork and isinstance(first, ingest.LineChunk) and first.fmt not in ingest.TOKEN_FREE:
            from advisor.tokenize import load_tokenizer

            try:
                self.preloaded = tokenizer = load_tokenizer(self.options.tokenizer, self.options.model)
            except AdvisorError:
                pass  # the workers load it when a request needs it, and fail there as one process would
        if fork:  # token-free traces too: their chunks run the same chain and overlap kernels
            _load_kernels(self.options)
        # Jobs go in Queues, whose feeder threads buffer, so sending ahead never blocks on a worker that is
        # itself blocked sending a result; results come back on pipes that carry their arrays out of band
        # (advisor.pipes), written by a thread in the worker for the same reason.
        self.inboxes = [context.Queue() for _ in range(self.workers)]
        for inbox in self.inboxes:
            ends = context.Pipe(duplex=False)
            process = context.Process(target=_worker_main, daemon=True, args=(
                inbox, ends[1], self.options, self.strict, CONTEXT_TOKEN_BUDGET // self.workers,
                tokenizer if fork else None))
            process.start()
            # Closed before the next worker starts, so that only this worker holds the sending end: the
            # pipe then ends (PipeClosed) if it dies.
            ends[1].close()
            self.outboxes.append(pipes.Receiver(ends[0]))
            self.processes.append(process)

    def __enter__(self) -> _WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        for inbox, process in zip(self.inboxes, self.processes):
            if process.is_alive():
                inbox.put(None)
        for outbox in self.outboxes:  # a worker still sending (the run stopped early) gets EPIPE, not a hang
            outbox.close()
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()

    def _route(self, batch: list[Request], first_row: int) -> list[list[int]]:
        """Indices of the batch's requests per worker, by a stable hash of the conversation key."""
        shards: list[list[int]] = [[] for _ in range(self.workers)]
        for index, request in enumerate(batch):
            key = conversation_key(request, first_row + index)
            shards[zlib.crc32(key.encode("utf-8", "surrogatepass")) % len(shards)].append(index)
        return shards

    def _send(self, job: Job, next_row: int, bounds: tuple[int, int]) -> list[list[int]] | int:
        """Sends a job with the chain store's and the replay sample's `bounds`: a chunk to the next worker in
        turn (returns the worker), a batch's requests to their conversations' workers (returns the batch's
        indices per worker)."""
        if isinstance(job, ingest.LineChunk):
            if not self.processes:
                self._start(job)
            worker = next(self._turn)
            self._put(worker, ("chunk", self._chunks, job, bounds))
            self._chunks += 1
            return worker
        if "tokenizer" not in self.tokenizer_state and any(
            r.needs_tokenizer or (self.options.tokenizer is not None and _has_ids(r)) for r in job
        ):
            load_request_tokenizer(self.options, self.tokenizer_state)  # the report names it
        if not self.processes:
            self._start(job)
        shards = self._route(job, next_row)
        for worker, indices in enumerate(shards):
            if indices:
                self._put(worker, ("batch", [job[i] for i in indices], bounds))
        return shards

    def _put(self, worker: int, job: tuple | None) -> None:
        """Sends `worker` the recounts asked of it since its last message, then `job` (None: the recounts
        alone), and notes the results it will send back in that order."""
        recounts, self._recounts[worker] = self._recounts[worker], []
        self.inboxes[worker].put((recounts, job))
        self._expected[worker].extend(chunk for chunk, requests in recounts if requests)
        if job is not None:
            self._expected[worker].append(None)

    def recount(self, worker: int, number: int, recounts: list[tuple[int, list[np.ndarray]]]) -> None:
        """Asks `worker` for chunk `number`'s `recounts` (its request, the earlier outputs to count with),
        none to let it drop the chunk's ids, with its next message; the counts come back to `recounted` as
        the worker's results are read."""
        self._recounts[worker].append((number, recounts))

    def map(self, jobs: Iterator[Job],
            bounds: Callable[[], tuple[int, int]]) -> Iterator[tuple[Job, MeasuredBatch | MeasuredChunk]]:
        """(job, its results) in order; up to IN_FLIGHT_PER_WORKER jobs per worker ahead are being measured.
        `bounds()`: the chain store's and the replay sample's bounds as each job is sent (they only fall, so
        the workers hash a superset of the chains the store keeps when it collects their results, and send
        back the ids of a superset of the requests the sample keeps)."""
        pending: list[tuple[Job, list[list[int]] | int]] = []
        next_row = 0  # requests of the batches sent (the routing key of requests without a conversation)
        limit = IN_FLIGHT_PER_WORKER * self.workers
        exhausted = False
        while True:
            while not exhausted and len(pending) < limit:
                job = next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                pending.append((job, self._send(job, next_row, bounds())))
                if not isinstance(job, ingest.LineChunk):
                    next_row += len(job)
            if not pending:
                return
            job, shards = pending.pop(0)
            if isinstance(shards, int):
                yield job, self._chunk_result(shards)
                continue
            parts = [(indices, self._result(worker)) for worker, indices in enumerate(shards) if indices]
            yield job, MeasuredBatch.merged(len(job), parts)  # type: ignore[arg-type]

    def drain(self) -> None:
        """Sends the recounts not yet sent and reads those still to come (every job's results are in)."""
        for worker, recounts in enumerate(self._recounts):
            if recounts:
                self._put(worker, None)
        for worker in range(self.workers):
            while self._expected[worker]:
                self._result(worker)

    def _result(self, worker: int) -> Any:
        """`worker`'s next job result, handing the recounts it sends before it to `recounted` (None when only
        recounts were left to read)."""
        expected = self._expected[worker]
        while expected:
            chunk = expected.popleft()
            status, payload = _receive(self.outboxes[worker], self.processes[worker])
            if status == "error":
                raise payload
            if chunk is None:
                return payload
            assert self.recounted is not None, "recounts are asked by _Crossings, which takes them"
            self.recounted(chunk, payload)
        return None

    def _chunk_result(self, worker: int) -> MeasuredChunk:
        """A chunk's results from its worker; the tokenizer it used is then the run's (the report names it)."""
        payload = self._result(worker)
        payload.worker = worker
        if payload.tokenizer_used and "request_tokenizer" not in self.tokenizer_state:
            if self.preloaded is not None:
                self.tokenizer_state["preloaded"] = self.preloaded
            load_request_tokenizer(self.options, self.tokenizer_state)
        return payload


def _load_kernels(options: StreamOptions) -> None:
    """Measures a made-up request, so that the compiled kernels a worker runs (on text and on a token-free
    trace's block ids alike) are loaded before the workers fork. Each worker loaded them from numba's cache
    at its first chunk otherwise: 0.4-0.5 s here, 1-1.3 s on 16 cores with 16 workers loading at once, before
    any result (a Mooncake trace on 16 workers ran slower than on one core)."""
    from advisor.record import Message
    from advisor.tokenize import PackedIds

    ids = (np.arange(80, dtype=np.int32) % 5).astype(np.int32)  # repeats, so that the counts find n-grams
    packed = PackedIds(ids, np.zeros(1, dtype=np.int64), np.array([64]), np.array([16]))
    request = Request(source="(kernel warm-up)", messages=(Message("user", ""),), completion="")
    measure_ids([request], packed, options, state.ContextOutputs(CONTEXT_TOKEN_BUDGET), sys.maxsize)


def _receive(outbox: pipes.Receiver, process: Any) -> tuple[str, Any]:
    """The worker's next result; an error if the worker died without sending one (killed, out of memory)."""
    try:
        return outbox.receive()
    except pipes.PipeClosed:
        process.join(timeout=10)
        raise RuntimeError(f"a profile worker process exited with code {process.exitcode}") from None
