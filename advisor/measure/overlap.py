"""N-gram self-overlap: how much of each output already appears in its prompt or earlier outputs.

This is what prompt-lookup speculation (vLLM's ngram and suffix proposers) feeds on: an output that
copies from its context can be drafted from that context. The exact proposer replay lives in
`advisor.measure.ngram`/`suffix`; this is the cheap, proposer-independent signal per request.

N-grams are compared exactly, without hashing and without sorting the (long) prompt: the output's
distinct n-grams are numbered level by level (an n-gram's key is the pair (number of its first n-1 tokens,
number of its last token)). Prompt and context positions are looked up in a table of the output's tokens,
then, for n > 1, only positions whose (n-1)-gram matched are looked up in the output's sorted n-gram keys
by binary search. Cost O(P + M log O) for a prompt of P tokens, M candidate positions, an output of O.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from advisor.measure.stats import json_float

MAX_N = 5
TABLE_LIMIT = 1 << 23  # token ids below this are looked up in a table (int64: 64 MiB at most, ~1 MiB usually)


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


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index of each of `keys` in `sorted_keys` (distinct, ascending), or -1 where absent."""
    if sorted_keys.size == 0:
        return np.full(keys.shape, -1, dtype=np.int64)
    index = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return np.where(sorted_keys[index] == keys, index, -1)


def _token_lookup(vocabulary: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """`_lookup` for single tokens: a direct table, faster than binary search, for vocabulary-sized ids."""
    if vocabulary.size == 0 or vocabulary[0] < 0 or vocabulary[-1] >= TABLE_LIMIT:
        return lambda tokens: _lookup(vocabulary, tokens)
    top = int(vocabulary[-1])
    table = np.full(top + 1, -1, dtype=np.int64)
    table[vocabulary] = np.arange(vocabulary.size)
    return lambda tokens: np.where((tokens >= 0) & (tokens <= top), table[np.clip(tokens, 0, top)], -1)


def _pair_keys(prefix: np.ndarray, last: np.ndarray, base: int) -> np.ndarray:
    """Key of (prefix number, last-token number); -1 where either is -1 (not an n-gram of the output).

    Numbers are below `base` (the output's distinct token count + 1), so keys are below base**2.
    """
    known = (prefix >= 0) & (last >= 0)
    return np.where(known, prefix * base + last, -1)


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
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    output = np.asarray(output_ids, dtype=np.int64).ravel()
    vocabulary = np.unique(output)
    base = int(vocabulary.size) + 1
    # Level by level: the sorted distinct keys of the output's n-grams, and each output position's number.
    level_keys = [vocabulary]
    output_numbers = [np.searchsorted(vocabulary, output)]
    token_numbers = _token_lookup(vocabulary)
    for n in range(2, max_n + 1):
        width = max(0, output.size - n + 1)
        keys = _pair_keys(output_numbers[-1][:width], output_numbers[0][n - 1 : n - 1 + width], base)
        level_keys.append(np.unique(keys))
        output_numbers.append(np.searchsorted(level_keys[-1], keys))

    def found_in(pools: Sequence[np.ndarray]) -> tuple[int, ...]:
        found = [np.zeros(keys.size, dtype=bool) for keys in level_keys]
        for pool in pools:
            tokens = token_numbers(np.asarray(pool, dtype=np.int64).ravel())
            # Only n-grams whose (n-1)-prefix is an output n-gram can match: follow those start positions.
            starts = np.flatnonzero(tokens >= 0)
            numbers = tokens[starts]
            for n in range(1, max_n + 1):
                if n > 1:
                    starts_in = starts[starts + n - 1 < tokens.size]
                    keys = _pair_keys(numbers[: starts_in.size], tokens[starts_in + n - 1], base)
                    numbers = _lookup(level_keys[n - 1], keys)
                    starts, numbers = starts_in[numbers >= 0], numbers[numbers >= 0]
                found[n - 1][numbers] = True
        return tuple(int(f[numbers_n].sum()) for f, numbers_n in zip(found, output_numbers))

    return RequestOverlap(
        ngrams=tuple(int(numbers.size) for numbers in output_numbers),
        in_prompt=found_in([prompt_ids]),
        in_context=found_in(context) if context is not None else None,
    )


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
    per_request_context = _ratios(context_hits, ngrams)
    per_request_context[~with_context] = np.nan
    totals = ngrams.sum(axis=0)
    context_totals = ngrams[with_context].sum(axis=0)

    def shares(hits: np.ndarray, denominators: np.ndarray) -> tuple[float | None, ...]:
        return tuple(float(h) / float(d) if d else None for h, d in zip(hits, denominators))

    return OverlapSummary(
        n=tuple(range(1, max_n + 1)),
        requests=len(per_request),
        output_ngrams=tuple(int(t) for t in totals),
        prompt_share=shares(prompt_hits.sum(axis=0), totals),
        context_requests=int(with_context.sum()),
        context_share=(
            shares(context_hits[with_context].sum(axis=0), context_totals) if with_context.any() else None
        ),
        per_request_prompt=_ratios(prompt_hits, ngrams),
        per_request_context=per_request_context,
    )
