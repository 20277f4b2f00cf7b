"""Shared prefixes at KV-block granularity: the most automatic prefix caching (APC) could ever save.

Blocks are identified like vLLM identifies them (vllm/v1/core/kv_cache_utils.py, `hash_block_tokens` and
`get_request_block_hasher`): only FULL blocks, each hashed together with its parent block's hash, so two
blocks share a hash only when they and everything before them are identical. The ceiling assumes an
infinite cache (nothing is ever evicted); `advisor.measure.apc` replays a finite LRU cache.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from advisor.measure.stats import json_float
from advisor.record import pickled_by_fields

# Parent of every first block. vLLM uses a random or PYTHONHASHSEED-derived NONE_HASH; only equality
# between hashes matters here, so any constant will do.
ROOT_HASH = 0
GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads small token ids over the word
TOP_PREFIXES = 10


def canonical_tokens(token_ids: np.ndarray) -> np.ndarray:
    """Token ids as little-endian int32, so equal ids hash equally whatever integer dtype they came in."""
    ids = np.asarray(token_ids).ravel()
    if ids.size and ids.dtype != np.int32:
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token ids must be integers, got {ids.dtype}")
        if ids.min() < 0 or ids.max() >= 2**31:
            raise ValueError("token ids must lie in [0, 2**31)")
    return np.ascontiguousarray(ids, dtype="<i4")


@njit(cache=True)
def _mix(value: np.uint64) -> np.uint64:
    """splitmix64's finalizer: a bijection of 64-bit words that spreads every input bit."""
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))


@njit(cache=True)
def _chain(ids: np.ndarray, block_size: int, out: np.ndarray) -> None:
    state = np.uint64(ROOT_HASH)
    for block in range(out.size):
        for token in ids[block * block_size : (block + 1) * block_size]:
            state = _mix(state + (np.uint64(token) + np.uint64(1)) * np.uint64(GOLDEN))
        out[block] = state


def block_hashes(token_ids: np.ndarray, block_size: int) -> np.ndarray:
    """Chained 64-bit hashes of the full blocks of `token_ids` (a partial last block is not hashed).

    The state runs through the tokens, s = mix(s + (token + 1) * GOLDEN) with splitmix64's bijective
    finalizer, starting from ROOT_HASH; each block's hash is the state after its last token, so it covers
    the block and its whole prefix: the chain of vLLM's `hash_block_tokens` with a cheaper function than its
    sha256 (no extra keys: LoRA, multimodal and cache_salt are not in logs). Equal prefixes give equal
    hashes exactly; two different prefixes collide with probability about 2**-64 per pair, about 3e-6 for
    any collision among 10 million blocks.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    ids = canonical_tokens(token_ids)
    out = np.empty(ids.size // block_size, dtype=np.uint64)
    _chain(ids, block_size, out)
    return out


@njit(cache=True)
def _chains_packed(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, block_size: int,
                   offsets: np.ndarray, out: np.ndarray) -> None:
    for r in range(starts.size):
        _chain(ids[starts[r]:starts[r] + lengths[r]], block_size, out[offsets[r]:offsets[r + 1]])


def block_hashes_packed(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                        block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """`block_hashes` of many token runs ids[starts[i] : starts[i] + lengths[i]] of one int32 array, in one
    compiled call (the streaming profile's batches): (the chains one after another, offsets[i] where run
    i's chain starts; offsets[-1] is the total)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    ids = canonical_tokens(ids)
    offsets = np.zeros(starts.size + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64) // block_size, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint64)
    _chains_packed(ids, np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64), block_size,
                   offsets, out)
    return out, offsets


@pickled_by_fields
@dataclass(frozen=True, slots=True, eq=False)
class PrefixBlocks:
    """One request's block chain, in the form the ceiling needs.

    `chain` lists the ids of the blocks this request leaves in the cache, in order; its first
    `prompt_blocks` entries are the prompt's blocks. With outputs the chain continues over the generated
    tokens: vLLM caches blocks filled during decode, and the KV of all but the last output token is
    computed (the last sampled token is never fed back), so the cached tokens are prompt + output[:-1].
    """

    prompt_tokens: int
    prompt_blocks: int
    chain: np.ndarray  # uint64

    @classmethod
    def from_tokens(
        cls, prompt_ids: np.ndarray, block_size: int, output_ids: np.ndarray | None = None
    ) -> PrefixBlocks:
        """Chain of a tokenized request; pass `output_ids` to let later requests hit its decode blocks."""
        prompt = canonical_tokens(prompt_ids)
        cached = prompt
        if output_ids is not None and len(output_ids) > 1:
            cached = np.concatenate((prompt, canonical_tokens(output_ids)[:-1]))
        return cls(int(prompt.size), int(prompt.size) // block_size, block_hashes(cached, block_size))

    @classmethod
    def from_block_ids(cls, block_ids: Sequence[int] | np.ndarray, prompt_tokens: int) -> PrefixBlocks:
        """Chain of a trace that logs prefix-block ids (Mooncake `hash_ids`: equal id = equal prefix).

        Such traces also give an id to a partial last block; the last-block rule of the ceiling never
        lets it hit.
        """
        ids = np.asarray(block_ids, dtype=np.uint64).ravel()
        return cls(int(prompt_tokens), int(ids.size), ids)


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """A prefix where requests branch apart: shared by `requests` requests, none of its extensions by all.

    `token_volume` = length_tokens * (requests - 1), the prefill an infinite cache saves on this prefix
    (before the last-block rule). Volumes of nested prefixes overlap: a system prompt and a conversation
    that starts with it are both listed.
    """

    hash_hex: str
    length_tokens: int
    requests: int
    token_volume: int

    def to_dict(self) -> dict:
        return {
            "hash": self.hash_hex,
            "length_tokens": self.length_tokens,
            "requests": self.requests,
            "token_volume": self.token_volume,
        }


@dataclass(frozen=True, slots=True, eq=False)
class PrefixSharing:
    """Infinite-cache prefix-hit ceiling of a request sequence, in arrival order.

    Per request: hit = B * floor(min(LCP, n - 1) / B), where n = prompt tokens and LCP = min(n, B * number
    of leading prompt blocks already cached by an earlier request). vLLM recomputes at least the last
    prompt token, so a prompt of exactly one block never hits. ceiling = sum(hit) / sum(n).
    """

    block_size: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    ceiling: float | None
    requests_with_hit_share: float | None
    outputs_cached: bool
    top_prefixes: tuple[SharedPrefix, ...]
    per_request_hit_tokens: np.ndarray  # int64, one per request, for per-request features

    def to_dict(self) -> dict:
        return {
            "block_size": self.block_size,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "ceiling": json_float(self.ceiling),
            "requests_with_hit_share": json_float(self.requests_with_hit_share),
            "outputs_cached": self.outputs_cached,
            "top_prefixes": [p.to_dict() for p in self.top_prefixes],
        }


def prefix_sharing(
    requests: Sequence[PrefixBlocks], block_size: int, cache_outputs: bool = False, top: int = TOP_PREFIXES
) -> PrefixSharing:
    """Ceiling, hit share and top shared prefixes of `requests` (in arrival order) for an infinite cache.

    A request's blocks become visible to the requests after it. With `cache_outputs`, a request's whole
    chain (decode blocks too) is visible; otherwise only its prompt blocks, as when outputs are unknown.
    Vectorised: a block hits when the first request that cached it comes earlier than the asking request.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    count = len(requests)
    prompt_lens = np.array([r.prompt_tokens for r in requests], dtype=np.int64)
    prompt_chains = [r.chain[: r.prompt_blocks] for r in requests]
    block_counts = np.array([c.size for c in prompt_chains], dtype=np.int64)
    queries = np.concatenate(prompt_chains) if count else np.zeros(0, np.uint64)
    # Request numbers and block ids in int32 (a big log's chains are sampled to a few million blocks): this
    # runs beside the other analyses, and its arrays were most of a 1 GB log's peak RSS.
    query_owner = np.repeat(np.arange(count, dtype=np.int32), block_counts)
    cached_chains = [r.chain for r in requests] if cache_outputs else prompt_chains
    inserted_owner = np.repeat(np.arange(count, dtype=np.int32), [c.size for c in cached_chains])
    # One numbering of the cached blocks and the asked ones: a block hits when the first request that
    # cached it (positions are in arrival order) comes before the asking one; an id first seen among the
    # queries was never cached.
    ids, _, first_position = factorize(np.concatenate(cached_chains + [queries]) if count else queries)
    query_ids = ids[inserted_owner.size:]
    del ids
    cached_first = first_position < inserted_owner.size
    first_owner = np.full(first_position.size, count, dtype=np.int32)
    first_owner[cached_first] = inserted_owner[first_position[cached_first]]
    seen_before = first_owner[query_ids] < query_owner
    del query_ids, first_owner, cached_first, first_position, inserted_owner
    leading = leading_true_counts(seen_before, block_counts)
    lcp = np.minimum(leading * block_size, prompt_lens)
    hits = block_size * (np.minimum(lcp, np.maximum(prompt_lens - 1, 0)) // block_size)
    total = int(prompt_lens.sum())
    return PrefixSharing(
        block_size=block_size,
        requests=count,
        prompt_tokens=total,
        hit_tokens=int(hits.sum()),
        ceiling=float(hits.sum()) / total if total else None,
        requests_with_hit_share=float((hits > 0).mean()) if count else None,
        outputs_cached=cache_outputs,
        top_prefixes=top_shared_prefixes(queries, query_owner, block_counts, prompt_lens, block_size, top),
        per_request_hit_tokens=hits,
    )


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, distinct values, first position of each) of uint64 `values`, ids numbered in order of first
    appearance: `distinct[ids] == values`. What np.unique's inverse, values and first indices say, in an
    order that differs from np.unique's (sorted) but in linear time: the block chains of a big log hold
    millions of hashes, and a stable sort of them took most of the prefix analysis. The ids and positions
    are int32 below 2**31 values (always, for sampled chains), int64 beyond."""
    values = np.ascontiguousarray(values, dtype=np.uint64)
    kind = np.int32 if values.size < 2**31 else np.int64
    ids = np.empty(values.size, kind)
    first = np.empty(values.size, kind)
    bits = 1
    while (1 << bits) < 2 * values.size:
        bits += 1
    count = _factorize(values, ids, first, np.full(1 << bits, -1, kind), bits)
    first = first[:count].copy()
    return ids, values[first], first


@njit(cache=True, nogil=True)
def _factorize(values: np.ndarray, ids: np.ndarray, first: np.ndarray, table: np.ndarray, bits: int) -> int:
    """Open addressing over `table` (slot -> id, all -1, 2**bits slots, at least twice as many as values;
    Fibonacci hashing: the values are hashes already, but a trace's block ids may be small integers);
    returns the distinct count."""
    mask = (1 << bits) - 1
    count = 0
    for i in range(values.size):
        value = values[i]
        slot = np.int64((value * np.uint64(GOLDEN)) >> np.uint64(64 - bits))
        while True:
            found = table[slot]
            if found < 0:
                table[slot] = count
                first[count] = i
                ids[i] = count
                count += 1
                break
            if values[first[found]] == value:
                ids[i] = found
                break
            slot = (slot + 1) & mask
    return count


def leading_true_counts(flags: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per segment of `flags` (segments of the given lengths, in order), the number of leading Trues."""
    starts = np.cumsum(lengths) - lengths
    depth = np.arange(flags.size) - np.repeat(starts, lengths)
    # A miss at depth d caps the run at d; a segment without misses runs its whole length.
    first_miss = np.where(flags, np.iinfo(np.int64).max, depth)
    result = lengths.copy()
    nonempty = lengths > 0
    if flags.size:
        result[nonempty] = np.minimum(lengths[nonempty], np.minimum.reduceat(first_miss, starts[nonempty]))
    return result


def top_shared_prefixes(
    queries: np.ndarray,
    owner: np.ndarray,
    block_counts: np.ndarray,
    prompt_lens: np.ndarray,
    block_size: int,
    top: int,
) -> tuple[SharedPrefix, ...]:
    """The `top` branch points by token volume: prefixes shared by >= 2 prompts whose every extension is
    shared by fewer prompts (the deepest block of each group of requests that agree up to there)."""
    if queries.size == 0:
        return ()
    starts = np.cumsum(block_counts) - block_counts
    depth = np.arange(queries.size) - np.repeat(starts, block_counts)
    inverse, nodes, first = factorize(queries)
    sharing = np.bincount(inverse, minlength=nodes.size)
    # Each node's parent is the block before it in its chain (chains are prefix-closed, so any occurrence
    # gives the same parent); roots have none.
    has_parent = depth > 0
    child_node = inverse[has_parent]
    parent_node = inverse[np.flatnonzero(has_parent) - 1]
    widest_child = np.zeros(nodes.size, np.int64)
    np.maximum.at(widest_child, parent_node, sharing[child_node])
    branch = np.flatnonzero((sharing >= 2) & (widest_child < sharing))
    length = np.minimum((depth[first[branch]] + 1) * block_size, prompt_lens[owner[first[branch]]])
    volume = length * (sharing[branch] - 1)
    order = np.lexsort((nodes[branch], -volume))[:top]  # ties broken by hash, for stable reports
    return tuple(
        SharedPrefix(f"{int(nodes[branch[i]]):016x}", int(length[i]), int(sharing[branch[i]]), int(volume[i]))
        for i in order
    )
