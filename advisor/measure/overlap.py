"""N-gram self-overlap: how much of each output already appears in its prompt or earlier outputs.

This is what prompt-lookup speculation (vLLM's ngram and suffix proposers) feeds on: an output that
copies from its context can be drafted from that context. The exact proposer replay lives in
`advisor.measure.ngram`/`suffix`; this is the cheap, proposer-independent signal per request.

N-grams are compared exactly, without sorting the (long) prompt. The output's tokens are numbered through a
dense token table; its repeated n-grams are numbered level by level (an n-gram's key is the pair (number of
its first n-1 tokens, number of its last token), an exact integer, in a per-level open-addressing table).
A unique n-gram is known by its position p, and its only extension is the (n+1)-gram at p: an n-gram with a
unique (n-1)-prefix needs no number (most longer ones), so a level only numbers the positions whose
(n-1)-gram repeats. A compiled walk from each prompt or context position extends the n-grams ending at the
previous position by its token, through the table for a repeated one or by one compare with the output for
a unique one, and stops at the first n-gram the output does not have. Each output n-gram carries its count
of positions, taken once when the walk first meets it. Cost O(P + M + O + R) for a prompt of P tokens, M
matched extensions, an output of O and R table lookups while numbering (the positions whose (n-1)-gram
repeats, summed over n; about 1.7 O on real outputs for n up to 5), no sorting.
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
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


# Keys below (size + 1)**2 fit int32 up to this many output tokens (the scratch tables' dtype); longer
# outputs take an int64 table of their own.
NARROW_KEYS_MAX_OUTPUT = 46_339


@njit(cache=True)
def _table_bits(size: int) -> int:
    """The n-gram tables' bits for an output of `size` tokens: the fewest with 2**bits >= 2 * size, so a
    level is at most half full. Compiled, and called from Python too: the scratch is sized by it."""
    bits = 1
    while (1 << bits) < 2 * size:
        bits += 1
    return bits


@njit(cache=True, inline="always")
def _slot(table: np.ndarray, level: int, bits: int, key: int) -> np.uint64:
    """Where `key` is in level `level` of an open-addressing table of 2**bits slots per level, stored as
    (key, number) pairs side by side (one cache line per probe), or the empty slot it would take. Fibonacci
    hashing: the top `bits` bits of key x 2**64/phi. Unsigned, so numba indexes with it without the
    negative-index wraparound a signed index costs."""
    mask = np.uint64((1 << bits) - 1)
    slot = (np.uint64(key) * _GOLDEN) >> np.uint64(64 - bits)
    base = np.uint64(level << bits)
    while True:
        at = (base + slot) << np.uint64(1)
        stored = table[at]
        if stored == key or stored == _EMPTY:
            return at
        slot = (slot + np.uint64(1)) & mask


@njit(cache=True, inline="always")
def _find(table: np.ndarray, level: int, bits: int, key: int) -> int:
    """The number of `key` in level `level` of the table, -1 when it is not there."""
    at = _slot(table, level, bits, key)
    return table[at + np.uint64(1)] if table[at] == key else -1


@njit(cache=True)
def _mark_found(pool: np.ndarray, bounds: np.ndarray, vocabulary: np.ndarray, tokens: np.ndarray,
                table: np.ndarray, bits: int, base: int, offsets: np.ndarray, states: np.ndarray, max_n: int,
                unfound: np.ndarray, ends: np.ndarray, hits: np.ndarray) -> None:
    """Adds to hits[n-1] the output positions of every output n-gram that occurs in a pool segment, taking
    them out of `unfound` (see `_count_levels`) so that each n-gram counts once, without a branch.

    One pass over each segment [bounds[s], bounds[s+1]) (segments never join): the n-grams ending at a
    position are the (n-1)-grams ending at the one before, extended by its token, so `ends[n-1]` carries
    the states of those ending at the previous position, for n up to `depth` (the output has no longer
    one there: an n-gram of the output has its (n-1)-prefix and suffix in the output too). A repeated
    (n-1)-gram extends through level n-1 of `table`; a unique one, ~p, only by the output's token after
    it, so its state carries over unchanged.
    """
    size = tokens.size - 1  # `tokens` ends in -1
    implied = offsets[max_n] - 2 * size  # unfound[implied + n * size + p]: the unnumbered n-gram at p
    for segment in range(bounds.size - 1):
        depth = 0
        for position in range(bounds[segment], bounds[segment + 1]):
            token = pool[position]
            last = vocabulary[token] if 0 <= token < vocabulary.size else -1
            if last < 0:
                depth = 0
                continue
            hits[0] += unfound[last]
            unfound[last] = 0
            carried = ends[0]
            ends[0] = states[last]
            reach = 1
            for n in range(2, min(depth + 1, max_n) + 1):
                if carried >= 0:
                    number = _find(table, n - 1, bits, carried * base + last)
                    if number < 0:
                        break
                    at = offsets[n - 1] + number
                    state = states[at]
                elif tokens[~carried + n - 1] == last:
                    state = carried
                    at = implied + n * size + ~carried
                else:
                    break
                hits[n - 1] += unfound[at]
                unfound[at] = 0
                carried = ends[n - 1]
                ends[n - 1] = state
                reach = n
            depth = reach


@njit(cache=True, nogil=True)
def _count_pools(output: np.ndarray, prompt: np.ndarray, prompt_bounds: np.ndarray, context: np.ndarray,
                 context_bounds: np.ndarray, max_n: int, vocabulary: np.ndarray, levels: np.ndarray,
                 counts: np.ndarray) -> None:
    """counts[0]: the output's n-gram positions per n; counts[1]: how many occur in the prompt's segments
    (`prompt_bounds` into `prompt`), counts[2]: in the context's (`context_bounds` into `context`; a
    conversation's earlier outputs stay separate segments).

    `vocabulary` and `levels` are scratch, all -1, left so: `vocabulary` maps token id -> number (longer
    than the output's largest id), `levels` holds the n-gram tables (int32, at least 2 * max_n * 2**bits
    slots for this output's bits). Only the entries set are reset before returning, so no call pays for
    clearing a vocabulary-sized array or its tables (filling them was most of the cost of short outputs).
    """
    size = output.size
    # The output's tokens numbered in order of first appearance, then -1: the output's last n-gram has no
    # next token, so the walk's one-token extension of it never matches.
    tokens = np.empty(size + 1, dtype=np.int32)
    tokens[size] = -1
    distinct = 0
    for i in range(size):
        if vocabulary[output[i]] < 0:
            vocabulary[output[i]] = distinct
            distinct += 1
        tokens[i] = vocabulary[output[i]]
    bits = _table_bits(size)
    if size <= NARROW_KEYS_MAX_OUTPUT:
        _count_levels(tokens, distinct, levels, bits, prompt, prompt_bounds, context, context_bounds, max_n,
                      vocabulary, counts)
    else:
        wide = np.full(2 * max_n << bits, _EMPTY, dtype=np.int64)
        _count_levels(tokens, distinct, wide, bits, prompt, prompt_bounds, context, context_bounds, max_n,
                      vocabulary, counts)
    for i in range(size):
        vocabulary[output[i]] = -1


@njit(cache=True, nogil=True)
def _count_levels(tokens: np.ndarray, distinct: int, table: np.ndarray, bits: int, prompt: np.ndarray,
                  prompt_bounds: np.ndarray, context: np.ndarray, context_bounds: np.ndarray, max_n: int,
                  vocabulary: np.ndarray, counts: np.ndarray) -> None:
    """`_count_pools` once the output's tokens are numbered (`tokens`, `distinct` of them, then -1).

    Only repeated n-grams need numbers. An n-gram whose (n-1)-prefix occurs once in the output occurs once
    too, at the prefix's position p, and that prefix's only extension is the output's next token: the walk
    follows it by one compare, so such n-grams (most of the longer ones) are never looked at while
    building. Level n numbers the n-grams at the positions whose (n-1)-gram repeats, in order of first
    appearance, through level n-1 of the open-addressing `table` (key: number of the prefix x
    (distinct + 1) + number of the last token, exact, so no collision can miscount); the positions whose
    n-gram repeats in turn go on to level n+1. Numbered n-gram j of level n is entry offsets[n-1] + j of
    `multiplicity` (how many positions hold it) and `states` (j when it repeats, else ~p).
    """
    size = tokens.size - 1
    capacity = max_n * size  # numbered n-grams of all levels, at most
    multiplicity = np.zeros(capacity, dtype=np.int32)
    states = np.empty(capacity, dtype=np.int32)
    offsets = np.zeros(max_n + 1, dtype=np.int64)
    offsets[1] = distinct
    for i in range(size):
        multiplicity[tokens[i]] += 1
    base = distinct + 1
    numbers = tokens.copy()  # numbers[p]: the n-gram at p of the level last numbered (for repeated p)
    repeated = np.empty(size, dtype=np.int64)  # the positions whose n-gram of that level repeats, in order
    count = 0
    for i in range(size):
        number = tokens[i]
        several = multiplicity[number] > 1
        states[number] = number if several else ~i
        repeated[count] = i
        count += several
    taken = np.empty(max(0, (max_n - 1) * size), dtype=np.uint64)  # the table slots set, to reset at the end
    used = 0
    for n in range(2, max_n + 1):
        first = offsets[n - 1]
        if count and repeated[count - 1] > size - n:  # the (n-1)-gram that ends the output has no extension
            count -= 1
        distinct = 0
        for j in range(count):
            i = repeated[j]
            key = numbers[i] * base + tokens[i + n - 1]
            at = _slot(table, n - 1, bits, key)
            new = table[at] == _EMPTY
            number = distinct if new else table[at + np.uint64(1)]
            table[at] = key
            table[at + np.uint64(1)] = number
            taken[used] = at
            used += new
            distinct += new
            numbers[i] = number
            multiplicity[first + number] += 1
        kept = 0
        for j in range(count):
            i = repeated[j]
            number = numbers[i]
            several = multiplicity[first + number] > 1
            states[first + number] = number if several else ~i
            repeated[kept] = i
            kept += several
        count = kept
        offsets[n] = first + distinct
    for n in range(1, max_n + 1):
        counts[0, n - 1] = max(0, size - n + 1)
    # Per numbered n-gram its positions not counted yet, then 1 per unnumbered one (level n >= 2, position p),
    # set again for each pool: its walk takes them out as it counts them. A pool without segments (no
    # context) finds nothing.
    numbered = offsets[max_n]
    unfound = np.empty(numbered + (max_n - 1) * size, dtype=np.int32)
    ends = np.empty(max_n, dtype=np.int64)
    for row in range(1, 3):
        pool, bounds = (prompt, prompt_bounds) if row == 1 else (context, context_bounds)
        if bounds.size < 2:
            continue
        unfound[:numbered] = multiplicity[:numbered]
        unfound[numbered:] = 1
        _mark_found(pool, bounds, vocabulary, tokens, table, bits, base, offsets, states, max_n, unfound, ends,
                    counts[row])
    for j in range(used):
        table[taken[j]] = _EMPTY
        table[taken[j] + np.uint64(1)] = _EMPTY


@njit(cache=True, nogil=True)
def _count_packed(ids: np.ndarray, starts: np.ndarray, prompt_lens: np.ndarray, output_lens: np.ndarray,
                  rows: np.ndarray, context: np.ndarray, context_bounds: np.ndarray, bound_starts: np.ndarray,
                  max_n: int, vocabulary: np.ndarray, levels: np.ndarray, counts: np.ndarray) -> None:
    prompt_bounds = np.zeros(2, dtype=np.int64)
    for k in range(rows.size):
        r = rows[k]
        start = starts[r]
        middle = start + prompt_lens[r]
        prompt_bounds[1] = prompt_lens[r]
        _count_pools(ids[middle:middle + output_lens[r]], ids[start:middle], prompt_bounds, context,
                     context_bounds[bound_starts[k]:bound_starts[k + 1]], max_n, vocabulary, levels, counts[k])


_scratch = threading.local()


def _scratch_tables(largest: int, longest: int, max_n: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's scratch for `_count_pools`, all -1: the token table, grown to cover token ids up to
    `largest`, and the n-gram tables, grown to fit an output of `longest` tokens."""
    table = getattr(_scratch, "table", None)
    if table is None or table.size <= largest:
        table = _scratch.table = np.full(max(largest + 1, 1 << 17), -1, dtype=np.int32)
    slots = 2 * max_n << _table_bits(min(longest, NARROW_KEYS_MAX_OUTPUT))  # longer ones have their own
    levels = getattr(_scratch, "levels", None)
    if levels is None or levels.size < slots:
        levels = _scratch.levels = np.full(slots, _EMPTY, dtype=np.int32)
    return table, levels


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
    pool = np.concatenate(earlier) if earlier else prompt[:0]
    if pool.dtype != prompt.dtype:  # one compiled signature: both pools int64 when the dtypes differ
        pool, prompt = pool.astype(np.int64), prompt.astype(np.int64)
    context_bounds = np.cumsum([0] + [segment.size for segment in earlier], dtype=np.int64)
    counts = np.zeros((3, max_n), dtype=np.int64)
    _count_pools(output, prompt, np.array([0, prompt.size], dtype=np.int64), pool, context_bounds, max_n,
                 *_scratch_tables(int(output.max()) if output.size else 0, output.size, max_n), counts)
    return counts


def overlap_counts_packed(ids: np.ndarray, starts: np.ndarray, prompt_lens: np.ndarray, output_lens: np.ndarray,
                          rows: np.ndarray, contexts: Sequence[Sequence[np.ndarray] | None],
                          max_n: int = MAX_N) -> np.ndarray:
    """`overlap_counts` of many requests in one compiled call (the streaming profile's batches): request
    rows[k] has its prompt at ids[starts[r] : starts[r] + prompt_lens[r]] and its output right after it
    (output_lens[r] tokens), and `contexts[k]` as its context. Returns counts[k] as `overlap_counts`."""
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    if ids.size and ids.min() < 0:
        raise ValueError("token ids must be >= 0")
    earlier = [segment for context in contexts for segment in context or ()]
    pool = np.concatenate(earlier).astype(np.int32, copy=False) if earlier else ids[:0]
    sizes = [segment.size for segment in earlier]
    # Request k's boundaries: its segments' start offsets in `pool` and the end of its last.
    bounds: list[int] = []
    bound_starts = np.zeros(len(contexts) + 1, dtype=np.int64)
    offset = 0
    segment = 0
    for k, context in enumerate(contexts):
        bounds.append(offset)
        for _ in context or ():
            offset += sizes[segment]
            segment += 1
            bounds.append(offset)
        bound_starts[k + 1] = len(bounds)
    counts = np.zeros((len(contexts), 3, max_n), dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    output_lens = np.asarray(output_lens, dtype=np.int64)
    longest = int(output_lens[rows].max()) if rows.size else 0
    _count_packed(ids, np.asarray(starts, dtype=np.int64), np.asarray(prompt_lens, dtype=np.int64),
                  output_lens, rows, pool,
                  np.array(bounds, dtype=np.int64), bound_starts, max_n,
                  *_scratch_tables(int(ids.max()) if ids.size else 0, longest, max_n), counts)
    return counts


@dataclass(frozen=True, slots=True, eq=False)
class OverlapSummary:
    """Overlap over many requests, index k for n = k + 1.

    Aggregate shares weight each request by its n-gram count: share = sum(hits) / sum(ngrams), the chance
    that a random output n-gram was already in its context (what a proposer sees per token). The
    per-request medians give the unweighted view: the median over the requests with n-grams (and a
    context) of each request's share.
    """

    n: tuple[int, ...]
    requests: int
    output_ngrams: tuple[int, ...]
    prompt_share: tuple[float | None, ...]
    context_requests: int
    context_share: tuple[float | None, ...] | None
    prompt_share_request_p50: tuple[float | None, ...]
    context_share_request_p50: tuple[float | None, ...]

    def to_dict(self) -> dict:
        return {
            "n": list(self.n),
            "requests": self.requests,
            "output_ngrams": list(self.output_ngrams),
            "prompt_share": [json_float(s) for s in self.prompt_share],
            "prompt_share_request_p50": [json_float(m) for m in self.prompt_share_request_p50],
            "context_requests": self.context_requests,
            "context_share": (
                None if self.context_share is None else [json_float(s) for s in self.context_share]
            ),
            "context_share_request_p50": [json_float(m) for m in self.context_share_request_p50],
        }


def _median_shares(hits: np.ndarray, ngrams: np.ndarray, rows: np.ndarray | None = None) -> tuple[float | None, ...]:
    """Per column n: the median of hits / ngrams over the requests (of `rows`, a mask, when given) with
    n-grams (None where none has). One column at a time: these arrays are a streaming profile's whole log."""
    medians: list[float | None] = []
    for n in range(ngrams.shape[1]):
        totals, found = ngrams[:, n], hits[:, n]
        defined = totals > 0 if rows is None else (totals > 0) & rows
        shares = found[defined] / totals[defined]
        medians.append(float(np.median(shares)) if shares.size else None)
    return tuple(medians)


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


class OverlapTotals:
    """The exact sums `summarize_counts` weighs the shares by, accumulated over batches (and merged across
    shards): 4 x max_n integers and two counts, whatever the log's size, while the per-request counts that the
    medians read may be a sample of it."""

    def __init__(self, max_n: int = MAX_N) -> None:
        self.ngrams = np.zeros(max_n, dtype=np.int64)
        self.prompt_hits = np.zeros(max_n, dtype=np.int64)
        self.context_ngrams = np.zeros(max_n, dtype=np.int64)
        self.context_hits = np.zeros(max_n, dtype=np.int64)
        self.requests = 0
        self.context_requests = 0

    def add(self, counts: np.ndarray, with_context: np.ndarray, sign: int = 1) -> None:
        """Adds (sign 1) or takes away (-1: counts computed again) requests' packed counts (k x 3 x max_n, as
        `overlap_counts`) with their context flags."""
        ngrams, hits = counts[:, 0].astype(np.int64), counts[:, 1:].astype(np.int64)
        self.ngrams += sign * ngrams.sum(axis=0)
        self.prompt_hits += sign * hits[:, 0].sum(axis=0)
        self.context_ngrams += sign * ngrams[with_context].sum(axis=0)
        self.context_hits += sign * hits[with_context, 1].sum(axis=0)
        self.requests += sign * int(counts.shape[0])
        self.context_requests += sign * int(np.count_nonzero(with_context))

    def absorb(self, other: OverlapTotals) -> None:
        self.ngrams += other.ngrams
        self.prompt_hits += other.prompt_hits
        self.context_ngrams += other.context_ngrams
        self.context_hits += other.context_hits
        self.requests += other.requests
        self.context_requests += other.context_requests


def summarize_counts(ngrams: np.ndarray, prompt_hits: np.ndarray, context_hits: np.ndarray,
                     with_context: np.ndarray, totals: OverlapTotals | None = None) -> OverlapSummary:
    """`summarize_overlap` from packed counts (rows = requests, columns n = 1..max_n; context rows of
    requests without a context are ignored), so a streaming caller keeps 3 x max_n integers a request.
    With `totals` (the exact sums of the whole log), the rows may be a sample of it: the weighted shares and
    counts come from the totals, the per-request medians from the rows."""
    max_n = ngrams.shape[1]
    if totals is None:
        totals = OverlapTotals(max_n)
        totals.add(np.stack([ngrams, prompt_hits, context_hits], axis=1), with_context)

    def shares(hits: np.ndarray, denominators: np.ndarray) -> tuple[float | None, ...]:
        return tuple(float(h) / float(d) if d else None for h, d in zip(hits, denominators))

    return OverlapSummary(
        n=tuple(range(1, max_n + 1)),
        requests=totals.requests,
        output_ngrams=tuple(int(t) for t in totals.ngrams),
        prompt_share=shares(totals.prompt_hits, totals.ngrams),
        context_requests=totals.context_requests,
        context_share=shares(totals.context_hits, totals.context_ngrams) if totals.context_requests else None,
        prompt_share_request_p50=_median_shares(prompt_hits, ngrams),
        context_share_request_p50=_median_shares(context_hits, ngrams, with_context),
    )
