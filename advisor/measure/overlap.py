"""N-gram self-overlap: how much of each output already appears in its prompt or earlier outputs.

This is what prompt-lookup speculation (vLLM's ngram and suffix proposers) feeds on: an output that
copies from its context can be drafted from that context. The exact proposer replay lives in
`advisor.measure.ngram`/`suffix`; this is the cheap, proposer-independent signal per request.

N-grams are compared exactly, without sorting the (long) prompt: the output's distinct n-grams are
numbered level by level in order of first appearance (an n-gram's key is the pair (number of its first n-1
tokens, number of its last token), an exact integer). A compiled walk from each prompt or context position numbers its tokens through
a dense token table, looks the n-gram keys up in a per-level open-addressing table of the output's keys
(exact keys stored, so no collision can miscount), and stops at the first n-gram the output does not have.
Cost O(P + M + O) for a prompt of P tokens, M matched extensions and an output of O (no sorting).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from numba import njit

from advisor.measure.stats import json_float

MAX_N = 5


@dataclass(frozen=True, slots=True)
class RequestOverlap:
    """Counts for one request, index k for n = k + 1.

    `ngrams[k]` = number of n-gram positions in the output (max(0, len - n + 1)); `in_prompt[k]` = how
    many of them occur somewhere in the prompt; `in_context[k]` = in some earlier output of the same
    conversation (None when the caller gave no conversation context).
    """

    ngrams: tuple[int, ...]
    in_prompt: tuple[int, ...]
    in_context: tuple[int, ...] | None


_EMPTY = -1


@njit(cache=True, inline="always")
def _slot(key: int, mask: int) -> int:
    """Start slot of `key` in an open-addressing table of mask + 1 slots (Fibonacci hashing)."""
    return np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask


@njit(cache=True, inline="always")
def _probe(keys: np.ndarray, numbers: np.ndarray, level: int, key: int, new_number: int) -> int:
    """The number of `key` in row `level` of an open-addressing table; a missing key is inserted with
    `new_number` when that is >= 0, and `new_number` returned (-1: look up only, not found)."""
    mask = keys.shape[1] - 1
    slot = _slot(key, mask)
    while True:
        stored = keys[level, slot]
        if stored == key:
            return numbers[level, slot]
        if stored == _EMPTY:
            if new_number >= 0:
                keys[level, slot] = key
                numbers[level, slot] = new_number
            return new_number
        slot = (slot + 1) & mask


@njit(cache=True)
def _lookup(table: np.ndarray, token: int) -> int:
    """The output-vocabulary number of `token`, or -1 (tokens beyond the table are not in the output)."""
    if token < 0 or token >= table.size:
        return -1
    return table[token]


@njit(cache=True)
def _mark_found(pool: np.ndarray, bounds: np.ndarray, table: np.ndarray, slot_keys: np.ndarray,
                slot_numbers: np.ndarray, level_offsets: np.ndarray, base: int, max_n: int, found: np.ndarray) -> None:
    """Marks found[level_offsets[n-1] + j] for every output n-gram number j that occurs in a pool segment.

    From each pool position, follow n = 1, 2, ... while the n-gram is one of the output's (its (n-1)-prefix
    must be, so the walk stops at the first miss); segments [bounds[s], bounds[s+1]) never join. Single
    tokens are numbered through `table` (token id -> number), longer n-grams through their level's table.
    """
    for segment in range(bounds.size - 1):
        end = bounds[segment + 1]
        for start in range(bounds[segment], end):
            number = _lookup(table, pool[start])
            if number < 0:
                continue
            found[number] = True
            for n in range(2, max_n + 1):
                position = start + n - 1
                if position >= end:
                    break
                last = _lookup(table, pool[position])
                if last < 0:
                    break
                number = _probe(slot_keys, slot_numbers, n - 1, number * base + last, -1)
                if number < 0:
                    break
                found[level_offsets[n - 1] + number] = True


@njit(cache=True, nogil=True)  # releases the GIL: replays run side by side in threads
def _count(output: np.ndarray, pools: np.ndarray, bounds: np.ndarray, max_n: int, table: np.ndarray) -> np.ndarray:
    """Row 0: the output's n-gram positions per n; row 1 + p: how many occur in pool p.

    `pools` concatenates the pools; pool p is segments bounds[p][0..] (a row of segment boundaries,
    padded with its last value), so a conversation's earlier outputs stay separate segments. `table` is
    scratch (token id -> number, -1 elsewhere, longer than the output's largest id): set for the output's
    vocabulary here and reset before returning, so no call pays for clearing a vocabulary-sized array.
    The output's distinct n-grams are numbered in order of first appearance, level by level, in one
    open-addressing table per level with at least twice as many slots as the output has positions.
    """
    size = output.size
    numbers = np.empty((max_n, size), dtype=np.int64)  # numbers[n-1, i]: the n-gram at i, numbered
    offsets = np.zeros(max_n + 1, dtype=np.int64)  # found[offsets[n-1] + number]: level n's numbers
    distinct = 0
    for i in range(size):
        if table[output[i]] < 0:
            table[output[i]] = distinct
            distinct += 1
        numbers[0, i] = table[output[i]]
    base = distinct + 1
    offsets[1] = distinct
    slots = 2
    while slots < 2 * size:
        slots *= 2
    slot_keys = np.full((max_n, slots), _EMPTY, dtype=np.int64)  # row n-1: level n (row 0 unused)
    slot_numbers = np.empty((max_n, slots), dtype=np.int64)
    for n in range(2, max_n + 1):
        distinct = 0
        for i in range(max(0, size - n + 1)):
            number = _probe(slot_keys, slot_numbers, n - 1, numbers[n - 2, i] * base + numbers[0, i + n - 1], distinct)
            if number == distinct:
                distinct += 1
            numbers[n - 1, i] = number
        offsets[n] = offsets[n - 1] + distinct
    counts = np.zeros((1 + bounds.shape[0], max_n), dtype=np.int64)
    for n in range(1, max_n + 1):
        counts[0, n - 1] = max(0, size - n + 1)
    found = np.zeros(offsets[max_n], dtype=np.bool_)
    for p in range(bounds.shape[0]):
        found[:] = False
        _mark_found(pools, bounds[p], table, slot_keys, slot_numbers, offsets, base, max_n, found)
        for n in range(1, max_n + 1):
            hits = 0
            for i in range(max(0, size - n + 1)):
                if found[offsets[n - 1] + numbers[n - 1, i]]:
                    hits += 1
            counts[1 + p, n - 1] = hits
    for i in range(size):
        table[output[i]] = -1
    return counts


_scratch = threading.local()


def _scratch_table(output: np.ndarray) -> np.ndarray:
    """This thread's token table for `_count`, all -1, grown to cover the output's token ids."""
    table = getattr(_scratch, "table", None)
    needed = int(output.max()) + 1 if output.size else 0
    if table is None or table.size < needed:
        table = _scratch.table = np.full(max(needed, 1 << 17), -1, dtype=np.int32)
    return table


def _token_array(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Token ids as a flat int32 or int64 array, without a copy when they already are one (the tokenizer's)."""
    array = np.asarray(ids).ravel()
    return array if array.dtype in (np.int32, np.int64) else array.astype(np.int64)


def request_overlap(
    prompt_ids: np.ndarray,
    output_ids: np.ndarray,
    context: Sequence[np.ndarray] | None = None,
    max_n: int = MAX_N,
) -> RequestOverlap:
    """Counts of the output's n-grams (n = 1..max_n) found in the prompt and in `context`.

    `context` holds the earlier outputs of the conversation as separate arrays: an n-gram never spans two
    of them (an empty sequence means "first turn", None means "unknown").
    """
    counts = overlap_counts(prompt_ids, output_ids, context, max_n)
    return RequestOverlap(
        ngrams=tuple(int(v) for v in counts[0]),
        in_prompt=tuple(int(v) for v in counts[1]),
        in_context=tuple(int(v) for v in counts[2]) if context is not None else None,
    )


def overlap_counts(
    prompt_ids: np.ndarray,
    output_ids: np.ndarray,
    context: Sequence[np.ndarray] | None = None,
    max_n: int = MAX_N,
) -> np.ndarray:
    """`request_overlap` as a 3 x max_n int64 array (rows: ngrams, in_prompt, in_context; the last is 0
    without a context), for callers that pack counts instead of keeping an object per request."""
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    output = _token_array(output_ids)
    if output.size and output.min() < 0:
        raise ValueError("token ids must be >= 0")
    prompt = _token_array(prompt_ids)
    earlier = [_token_array(pool) for pool in context or ()]
    # Row 0: the prompt as one segment; row 1: the earlier outputs, each its own segment (rows padded).
    context_bounds = prompt.size + np.cumsum([0] + [pool.size for pool in earlier])
    bounds = np.empty((2, max(2, context_bounds.size)), dtype=np.int64)
    bounds[0, :] = prompt.size
    bounds[0, 0] = 0
    bounds[1, :] = context_bounds[-1]
    bounds[1, : context_bounds.size] = context_bounds
    counts = _count(output, np.concatenate([prompt, *earlier]), bounds, max_n, _scratch_table(output))
    if context is None:
        counts[2] = 0
    return counts


@dataclass(frozen=True, slots=True, eq=False)
class OverlapSummary:
    """Overlap over many requests, index k for n = k + 1.

    Aggregate shares weight each request by its n-gram count: share = sum(hits) / sum(ngrams), the chance
    that a random output n-gram was already in its context (what a proposer sees per token). The
    per-request arrays (rows = requests, NaN where a request has no n-grams or no context) carry the
    unweighted view: the engine clusters on them, and the report gives their medians.
    """

    n: tuple[int, ...]
    requests: int
    output_ngrams: tuple[int, ...]
    prompt_share: tuple[float | None, ...]
    context_requests: int
    context_share: tuple[float | None, ...] | None
    per_request_prompt: np.ndarray
    per_request_context: np.ndarray

    def to_dict(self) -> dict:
        return {
            "n": list(self.n),
            "requests": self.requests,
            "output_ngrams": list(self.output_ngrams),
            "prompt_share": [json_float(s) for s in self.prompt_share],
            "prompt_share_request_p50": _column_medians(self.per_request_prompt),
            "context_requests": self.context_requests,
            "context_share": (
                None if self.context_share is None else [json_float(s) for s in self.context_share]
            ),
            "context_share_request_p50": _column_medians(self.per_request_context),
        }


def _column_medians(shares: np.ndarray) -> list[float | None]:
    """Median of each column over the rows where it is defined (None for an all-NaN column)."""
    defined = [column[~np.isnan(column)] for column in shares.T]
    return [json_float(float(np.median(values))) if values.size else None for values in defined]


def _ratios(hits: np.ndarray, totals: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(totals > 0, hits / np.maximum(totals, 1), np.nan)


def summarize_overlap(per_request: Sequence[RequestOverlap], max_n: int = MAX_N) -> OverlapSummary:
    """Weighted aggregate and per-request share arrays of `request_overlap` results (same max_n)."""
    if any(len(r.ngrams) != max_n for r in per_request):
        raise ValueError(f"every request must be measured with max_n={max_n}")
    ngrams = np.array([r.ngrams for r in per_request], dtype=np.int64).reshape(-1, max_n)
    prompt_hits = np.array([r.in_prompt for r in per_request], dtype=np.int64).reshape(-1, max_n)
    with_context = np.array([r.in_context is not None for r in per_request], dtype=bool)
    context_hits = np.array(
        [r.in_context if r.in_context is not None else (0,) * max_n for r in per_request], dtype=np.int64
    ).reshape(-1, max_n)
    return summarize_counts(ngrams, prompt_hits, context_hits, with_context)


def summarize_counts(ngrams: np.ndarray, prompt_hits: np.ndarray, context_hits: np.ndarray,
                     with_context: np.ndarray) -> OverlapSummary:
    """`summarize_overlap` from packed counts (rows = requests, columns n = 1..max_n; context rows of
    requests without a context are ignored), so a streaming caller keeps 3 x max_n integers a request."""
    max_n = ngrams.shape[1]
    per_request_context = _ratios(context_hits, ngrams)
    per_request_context[~with_context] = np.nan
    totals = ngrams.sum(axis=0)
    context_totals = ngrams[with_context].sum(axis=0)

    def shares(hits: np.ndarray, denominators: np.ndarray) -> tuple[float | None, ...]:
        return tuple(float(h) / float(d) if d else None for h, d in zip(hits, denominators))

    return OverlapSummary(
        n=tuple(range(1, max_n + 1)),
        requests=int(ngrams.shape[0]),
        output_ngrams=tuple(int(t) for t in totals),
        prompt_share=shares(prompt_hits.sum(axis=0), totals),
        context_requests=int(with_context.sum()),
        context_share=(
            shares(context_hits[with_context].sum(axis=0), context_totals) if with_context.any() else None
        ),
        per_request_prompt=_ratios(prompt_hits, ngrams),
        per_request_context=per_request_context,
    )
