"""Streaming collection for the profile: requests in, compact per-request state out, on one or N processes.

The log is read one batch at a time. Per request, the heavy part (tokenization with the per-piece cache,
the block-hash chain, the n-gram overlap counts) is `measure_batch`; the light part (`collect_batch`, in
file order in the main process) appends the results to `Collected`: packed columns, the chain store and
the replay reservoir (advisor.measure.state). Nothing keeps a Python object per request.

With `workers` > 1 the heavy part runs in worker processes (tokenization holds the GIL). Files in a JSON
Lines format (`advisor.ingest.LINE_READERS`: openai, bench-custom, mooncake) go to the workers as chunks of
raw lines (`ingest.read_parts`), one chunk to one worker in turn, so parsing leaves the main process too:
a worker decodes and parses its chunk (`ingest.parse_chunk`: the problems with their line numbers), and
measures it with the earlier outputs of the chunk's own conversations; the main process absorbs the
chunks' ingest stats in file order and recomputes the overlap counts of the requests whose conversation
had outputs before the chunk (`_Crossings`), so the counts are the serial run's. Requests of the other
formats are batched and routed by conversation, so a conversation's turns meet its earlier outputs (the
overlap's context) and its cached pieces in the same worker. Results come back per job and are collected
in file order, so the report is the serial run's exactly (tests/test_stream.py). Memory per worker: its
tokenizer and piece cache, its share of the context budget, one chunk's outputs.
"""
from __future__ import annotations

import itertools
import multiprocessing
import queue
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from advisor import ingest
from advisor.errors import AdvisorError
from advisor.measure import overlap, prefix, routing, state
from advisor.record import Request, SamplingParams, pickled_by_fields

BATCH_REQUESTS = 256
OVERLAP_MAX_N = 5
# Replays keep token ids in memory; beyond this many tokens the replay inputs are sampled (seeded reservoir).
REPLAY_TOKEN_BUDGET = 12_000_000
# Block chains kept for the prefix analysis and the APC replay (8 bytes a block; the analyses' working
# arrays take about 30 bytes a block more); past it, a seeded sample of conversations (advisor.measure.state).
PREFIX_BLOCK_BUDGET = 3_000_000
# Earlier outputs of live conversations kept for the overlap's conversation context (4 bytes a token).
CONTEXT_TOKEN_BUDGET = 4_000_000
IN_FLIGHT_PER_WORKER = 2  # batches sent ahead of the one being collected

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
class Measured:
    """The heavy results of one request (None where the log lacks what they need)."""

    input_len: float
    output_len: float
    text_prompt: bool  # the prompt was tokenized (text), not taken from logged counts
    chain: prefix.PrefixBlocks | None
    chain_block_size: int
    overlap_counts: np.ndarray | None  # 3 x OVERLAP_MAX_N, see overlap.overlap_counts
    with_context: bool
    prompt_ids: np.ndarray | None
    output_ids: np.ndarray | None


@pickled_by_fields
@dataclass(slots=True)
class Facts:
    """The fields of a Request that the collection reads (`collect_batch`), under the same names: what a worker
    that parsed the request itself sends back instead of the request with all its text."""

    source: str
    timestamp: float | None
    latency_s: float | None
    prompt_tokens: int | None
    sampling: SamplingParams
    conversation_id: str | None
    replica: str | None

    @classmethod
    def of(cls, request: Request) -> Facts:
        return cls(request.source, request.timestamp, request.latency_s, request.prompt_tokens, request.sampling,
                   request.conversation_id, request.replica)


@dataclass
class MeasuredChunk:
    """A worker's results for one chunk of raw lines: its requests' facts and measurements, the chunk's ingest
    stats and bad-record count (ingest.ParsedChunk without the requests), and whether the worker holds a
    tokenizer it loaded for text (then the report names it, as after a serial run)."""

    facts: list[Facts]
    measured: list[Measured]
    stats: ingest.IngestStats
    bad_records: int
    tokenizer_used: bool


class Collected:
    """What the profile keeps of the requests, in file order, in compact state.

    Per request: a few numbers in packed columns (about 140 bytes); the block chains within
    PREFIX_BLOCK_BUDGET (a seeded sample of conversations past it); token ids for the replays within
    REPLAY_TOKEN_BUDGET (a seeded sample of requests past it). Both samples depend only on the set of
    requests offered, so the Collected of consecutive parts of a log merge (`absorb`) into the one a single
    pass over the whole gives.
    """

    def __init__(self, seed: int) -> None:
        self.rows = 0
        self._timestamps = state.Column()
        self._input_lens = state.Column()
        self._output_lens = state.Column()
        self._latencies = state.Column()
        self._logged_prompt_tokens = state.Column()
        self._overlap4 = state.Column()
        self.store = state.ChainStore(PREFIX_BLOCK_BUDGET, seed)
        self.overlap_counts = state.Column(np.int64)  # 3 x OVERLAP_MAX_N per request with an overlap
        self.overlap_with_context = state.Column(np.bool_)
        self.sampling = state.SamplingCounts()
        self.replay = state.ReplaySample(REPLAY_TOKEN_BUDGET, seed)
        # Routing (advisor.measure.routing): the log's replica name of each request (an index into
        # replica_names, -1: none), and the hash that consistent_hash routes its conversation by.
        self.replica_names: dict[str, int] = {}
        self._replica_labels = state.Column(np.int32)
        self._affinities = state.Column(np.uint32)
        self._chains: list[prefix.PrefixBlocks | None] | None = None

    timestamps = property(lambda self: self._timestamps.values)
    input_lens = property(lambda self: self._input_lens.values)
    output_lens = property(lambda self: self._output_lens.values)
    latencies = property(lambda self: self._latencies.values)
    logged_prompt_tokens = property(lambda self: self._logged_prompt_tokens.values)
    overlap4 = property(lambda self: self._overlap4.values)
    replica_labels = property(lambda self: self._replica_labels.values)
    affinities = property(lambda self: self._affinities.values)
    chain_sizes = property(lambda self: self.store.block_sizes)
    replay_inputs = property(lambda self: self.replay.inputs)  # (prompt ids, output ids), in row order
    replay_rows = property(lambda self: self.replay.rows)  # request index of each replay input
    replay_seen = property(lambda self: self.replay.seen)

    @property
    def chains(self) -> list[prefix.PrefixBlocks | None]:
        """One entry per request: its chain (a view into the store), None without one or out of the sample."""
        if self._chains is None:
            self._chains = self.store.chains_by_row(self.rows)
        return self._chains

    def absorb(self, other: Collected) -> None:
        """Appends `other`, the collection of the requests that follow this one's in file order (another shard
        of the same paths, collected with the same seed): the result equals one pass over both, field by
        field, given that `other` was measured with the earlier outputs of its conversations (a shard keeps
        its conversations whole)."""
        offset = self.rows
        for mine, theirs in ((self._timestamps, other._timestamps), (self._input_lens, other._input_lens),
                             (self._output_lens, other._output_lens), (self._latencies, other._latencies),
                             (self._logged_prompt_tokens, other._logged_prompt_tokens),
                             (self._overlap4, other._overlap4), (self.overlap_counts, other.overlap_counts),
                             (self.overlap_with_context, other.overlap_with_context)):
            mine.extend(theirs.values)
        self._affinities.extend(other._affinities.values)
        # The other's replica names take this one's numbers (new names numbered in order of first appearance).
        renumber = np.array([self.replica_names.setdefault(name, len(self.replica_names))
                             for name in other.replica_names] + [-1], dtype=np.int32)
        self._replica_labels.extend(renumber[other._replica_labels.values])
        self.store.absorb(other.store, offset)
        self.sampling.absorb(other.sampling)
        self.replay.absorb(other.replay, offset)
        self.rows += other.rows
        self._chains = None

    def overlap_summary(self) -> overlap.OverlapSummary | None:
        if not self.overlap_with_context.size:
            return None
        counts = self.overlap_counts.values.reshape(-1, 3, OVERLAP_MAX_N)
        return overlap.summarize_counts(counts[:, 0], counts[:, 1], counts[:, 2], self.overlap_with_context.values)


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def conversation_key(request: Request, row: int) -> str:
    """The routing key: the conversation, or the request itself when it has none."""
    return request.conversation_id if request.conversation_id is not None else f"#{row}"


def sample_key(request: Request) -> str:
    """The chain sample's key: the conversation, or the request's source "file:line" when it has none (not
    its row, as in `conversation_key`: a shard of the log does not know its rows in the whole)."""
    return request.conversation_id if request.conversation_id is not None else f"#{request.source}"


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


def measure_batch(batch: list[Request], options: StreamOptions, tokenizer_state: dict[str, Any],
                  context: state.ContextOutputs) -> list[Measured]:
    """Tokenization, block chain and overlap counts of each request (in order; updates `context`)."""
    # Logged token ids need no tokenizer; one named with --tokenizer checks them against its vocabulary.
    named = options.tokenizer is not None
    text = [r for r in batch if r.needs_tokenizer or (named and _has_ids(r))]
    tokenized = {}
    if text:
        for item in load_request_tokenizer(options, tokenizer_state).tokenize(text):
            tokenized[id(item.request)] = item
    results = []
    for request in batch:
        item = tokenized.get(id(request))
        if item is None and _has_ids(request):
            from advisor.tokenize import logged_ids

            item = logged_ids(request)
        prompt_ids = item.prompt_ids if item is not None else None
        output_ids = item.output_ids if item is not None else None
        input_len = len(prompt_ids) if prompt_ids is not None else request.prompt_tokens
        output_len = len(output_ids) if output_ids is not None else request.completion_tokens
        chain, chain_block_size = None, options.block_size
        if prompt_ids is not None:
            chain = prefix.PrefixBlocks.from_tokens(prompt_ids, options.block_size, output_ids)
        elif request.block_hashes is not None and request.prompt_tokens is not None:
            chain = prefix.PrefixBlocks.from_block_ids(request.block_hashes, request.prompt_tokens)
            chain_block_size = request.hash_block_size or options.hash_block_size
        counts, with_context = None, False
        if prompt_ids is not None and output_ids is not None and len(output_ids):
            earlier = context.earlier(request.conversation_id) if request.conversation_id is not None else None
            counts = overlap.overlap_counts(prompt_ids, output_ids, earlier, OVERLAP_MAX_N)
            with_context = earlier is not None
            if request.conversation_id is not None:
                context.add(request.conversation_id, output_ids)
        else:
            prompt_ids = output_ids = None  # only requests with both feed the replays
        results.append(Measured(_nan(input_len), _nan(output_len), item is not None and item.prompt_ids is not None,
                                chain, chain_block_size, counts, with_context, prompt_ids, output_ids))
    return results


def collect_batch(batch: Sequence[Request | Facts], measured: list[Measured], out: Collected) -> None:
    """Appends one batch's results to `out`, in file order."""
    timestamps, latencies, logged, shares4, labels, affinities = [], [], [], [], [], []
    names = out.replica_names
    for index, (request, result) in enumerate(zip(batch, measured)):
        row = out.rows + index
        labels.append(-1 if request.replica is None else names.setdefault(request.replica, len(names)))
        affinities.append(routing.affinity(sample_key(request)))
        timestamps.append(_nan(request.timestamp))
        latencies.append(_nan(request.latency_s))
        logged.append(_nan(request.prompt_tokens if result.text_prompt else None))
        out.sampling.add(request.sampling)
        if result.chain is not None:
            out.store.add(row, sample_key(request), result.chain, result.chain_block_size)
        share4 = float("nan")
        if result.overlap_counts is not None:
            counts = result.overlap_counts
            out.overlap_counts.extend(counts.ravel())
            out.overlap_with_context.extend([result.with_context])
            if counts[0, 3]:
                share4 = counts[1, 3] / counts[0, 3]
            out.replay.add(row, request.source, result.prompt_ids, result.output_ids)
        shares4.append(float(share4))
    out._timestamps.extend(timestamps)
    out._input_lens.extend([r.input_len for r in measured])
    out._output_lens.extend([r.output_len for r in measured])
    out._latencies.extend(latencies)
    out._logged_prompt_tokens.extend(logged)
    out._overlap4.extend(shares4)
    out._replica_labels.extend(labels)
    out._affinities.extend(affinities)
    out.rows += len(batch)


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
    out = Collected(options.seed)
    if workers <= 1:
        context = state.ContextOutputs(CONTEXT_TOKEN_BUDGET)
        for batch in _batches(parts):
            assert not isinstance(batch, ingest.LineChunk), "chunks of lines are parsed by workers"
            collect_batch(batch, measure_batch(batch, options, tokenizer_state, context), out)
            if progress:
                progress(len(batch))
    else:
        crossings = _Crossings(ingest.IngestStats() if stats is None else stats)
        with _WorkerPool(workers, options, tokenizer_state, strict) as pool:
            for job, result in pool.map(_batches(parts)):
                if isinstance(result, MeasuredChunk):
                    crossings.absorb(job, result)  # type: ignore[arg-type]
                    batch: Sequence[Request | Facts] = result.facts
                    measured = result.measured
                else:
                    batch, measured = job, result  # type: ignore[assignment]
                collect_batch(batch, measured, out)
                if progress:
                    progress(len(batch))
    # The whole-log analyses that follow need the memory more than the piece cache does.
    if "request_tokenizer" in tokenizer_state:
        tokenizer_state["request_tokenizer"].clear_cache()
    return out


class _Crossings:
    """The main process's side of the chunks of lines, absorbed in file order: their ingest stats, each file's
    check that it gave a request, and the overlap counts of conversations that cross chunks.

    A worker measures a chunk with the earlier outputs of the chunk's conversations only (an unbounded
    context: the chunk's results hold those outputs anyway). This keeps the serial run's context (the same
    LRU, the same budget, the same calls in the same order): where its earlier outputs of a conversation are
    not exactly the ones the chunk had before the request (more: the conversation began before the chunk;
    fewer: the LRU dropped it), the counts are computed again here with the serial context's outputs. The
    context only grows from chunks: with other formats in the same run, their conversations stay in the
    workers' own contexts (a conversation id is taken to belong to one file's format).
    """

    def __init__(self, stats: ingest.IngestStats):
        self.stats = stats
        self.context = state.ContextOutputs(CONTEXT_TOKEN_BUDGET)
        self.recomputed = 0
        self._file_first_problem = 0
        self._file_requests = 0
        self._file_bad = 0

    def absorb(self, chunk: ingest.LineChunk, result: MeasuredChunk) -> None:
        if chunk.first:
            self._file_first_problem = len(self.stats.problems)
            self._file_requests = self._file_bad = 0
        self.stats.absorb(result.stats)
        self._file_requests += len(result.facts)
        self._file_bad += result.bad_records
        if chunk.last and not self._file_requests:
            first = self._file_first_problem
            raise ingest.no_request_error(chunk.name, chunk.fmt, self._file_bad,
                                          self.stats.problems[first:first + ingest.MAX_SHOWN])
        in_chunk: dict[str, int] = {}
        for facts, measured in zip(result.facts, result.measured):
            conversation = facts.conversation_id
            if measured.overlap_counts is None or conversation is None:
                continue
            earlier = self.context.earlier(conversation)
            seen = in_chunk.get(conversation, 0)
            if len(earlier) != seen:
                measured.overlap_counts = overlap.overlap_counts(measured.prompt_ids, measured.output_ids, earlier,
                                                                 OVERLAP_MAX_N)
                self.recomputed += 1
            in_chunk[conversation] = seen + 1
            self.context.add(conversation, measured.output_ids)


def _measure_chunk(chunk: ingest.LineChunk, options: StreamOptions, strict: bool,
                   tokenizer_state: dict[str, Any]) -> MeasuredChunk:
    """A worker's job for a chunk of raw lines: parse it, measure its requests with the chunk's own context."""
    parsed = ingest.parse_chunk(chunk, strict, options.hash_block_size)
    measured = measure_batch(parsed.requests, options, tokenizer_state, state.ContextOutputs(sys.maxsize))
    return MeasuredChunk([Facts.of(request) for request in parsed.requests], measured, parsed.stats,
                         parsed.bad_records, "tokenizer" in tokenizer_state)


def _worker_main(inbox: Any, outbox: Any, options: StreamOptions, strict: bool, context_budget: int,
                 tokenizer: Any) -> None:
    """A worker: measures the jobs it is sent (a shard of a batch of requests, or a chunk of lines), in order,
    until it receives None.

    `tokenizer`: the main process's, inherited through fork (None: the worker loads its own when needed);
    taken up at the first request with text, as in one process.
    """
    tokenizer_state: dict[str, Any] = {} if tokenizer is None else {"preloaded": tokenizer}
    context = state.ContextOutputs(context_budget)
    while True:
        job = inbox.get()
        if job is None:
            return
        try:
            if isinstance(job, ingest.LineChunk):
                outbox.put(("ok", _measure_chunk(job, options, strict, tokenizer_state)))
            else:
                outbox.put(("ok", measure_batch(job, options, tokenizer_state, context)))
        except BaseException as error:  # noqa: BLE001 - re-raised in the main process
            outbox.put(("error", error))
            return


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
        self.outboxes: list[Any] = []
        self.processes: list[Any] = []
        self._turn = itertools.cycle(range(workers))

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
        # Queues, not bare pipes: their feeder threads buffer, so sending ahead never blocks on a worker
        # that is itself blocked sending a result.
        self.inboxes = [context.Queue() for _ in range(self.workers)]
        self.outboxes = [context.Queue() for _ in range(self.workers)]
        self.processes = [
            context.Process(target=_worker_main, daemon=True, args=(
                inbox, outbox, self.options, self.strict, CONTEXT_TOKEN_BUDGET // self.workers,
                tokenizer if fork else None))
            for inbox, outbox in zip(self.inboxes, self.outboxes)
        ]
        for process in self.processes:
            process.start()

    def __enter__(self) -> _WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        for inbox, process in zip(self.inboxes, self.processes):
            if process.is_alive():
                inbox.put(None)
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

    def _send(self, job: Job, next_row: int) -> list[list[int]] | int:
        """Sends a job: a chunk to the next worker in turn (returns the worker), a batch's requests to their
        conversations' workers (returns the batch's indices per worker)."""
        if isinstance(job, ingest.LineChunk):
            if not self.processes:
                self._start(job)
            worker = next(self._turn)
            self.inboxes[worker].put(job)
            return worker
        if "tokenizer" not in self.tokenizer_state and any(
            r.needs_tokenizer or (self.options.tokenizer is not None and _has_ids(r)) for r in job
        ):
            load_request_tokenizer(self.options, self.tokenizer_state)  # the report names it
        if not self.processes:
            self._start(job)
        shards = self._route(job, next_row)
        for inbox, indices in zip(self.inboxes, shards):
            if indices:
                inbox.put([job[i] for i in indices])
        return shards

    def map(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, list[Measured] | MeasuredChunk]]:
        """(job, its results) in order; up to IN_FLIGHT_PER_WORKER jobs per worker ahead are being measured."""
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
                pending.append((job, self._send(job, next_row)))
                if not isinstance(job, ingest.LineChunk):
                    next_row += len(job)
            if not pending:
                return
            job, shards = pending.pop(0)
            if isinstance(shards, int):
                yield job, self._chunk_result(shards)
                continue
            measured: list[Measured | None] = [None] * len(job)
            for outbox, process, indices in zip(self.outboxes, self.processes, shards):
                if not indices:
                    continue
                status, payload = _receive(outbox, process)
                if status == "error":
                    raise payload
                for index, result in zip(indices, payload):
                    measured[index] = result
            yield job, measured  # type: ignore[misc]

    def _chunk_result(self, worker: int) -> MeasuredChunk:
        """A chunk's results from its worker; the tokenizer it used is then the run's (the report names it)."""
        status, payload = _receive(self.outboxes[worker], self.processes[worker])
        if status == "error":
            raise payload
        if payload.tokenizer_used and "request_tokenizer" not in self.tokenizer_state:
            if self.preloaded is not None:
                self.tokenizer_state["preloaded"] = self.preloaded
            load_request_tokenizer(self.options, self.tokenizer_state)
        return payload


def _receive(outbox: Any, process: Any) -> tuple[str, Any]:
    """The worker's next result; an error if the worker died without sending one (killed, out of memory)."""
    while True:
        try:
            return outbox.get(timeout=1.0)
        except queue.Empty:
            if not process.is_alive():
                raise RuntimeError(f"a profile worker process exited with code {process.exitcode}") from None
