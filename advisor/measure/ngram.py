"""Exact offline replay of vLLM's ngram (prompt-lookup) proposer over logged outputs.

vLLM (vllm/v1/spec_decode/ngram_proposer.py, `_find_longest_matched_ngram_and_propose_tokens`) proposes,
from the context c = prompt + tokens emitted so far (length t):
- nothing when t < prompt_lookup_min;
- else the largest n <= prompt_lookup_max such that the last n tokens of c also occur earlier in c (an
  occurrence that ends before the last token), and among those occurrences the EARLIEST one (its KMP over
  the reversed context keeps the last match position in reversed order); nothing when n < prompt_lookup_min;
- the tokens that follow that occurrence: min(k, max_model_len - t) of them, fewer when c ends first.
The scheduler (vllm/v1/core/sched/scheduler.py) then trims the draft so that the step's tokens stay within
max_model_len (at most max_model_len - t - 1 draft tokens) and counts a draft only when it keeps a token.

vLLM rescans the whole context every step (O(t) per step, O(n^2) per request). Offline the context at every
step is a prefix of prompt + logged output, so the proposal at context length t depends on t alone. This
module computes it for every t in one pass: a hash table per n from n-gram to its first start position
(exact: a hit compares the tokens), updated as the context grows, O(max_n) per token. Existence of an
earlier occurrence is monotone in n (an earlier occurrence of the last n-gram contains one of the last
(n-1)-gram), so the longest n for a window with a smaller max_n is min(longest, max_n). A step then accepts
the common prefix of the draft and the logged continuation and emits accepted + 1 tokens.

One replay pass handles several windows and several k at once: proposals depend on the window only, the
step sequence on k. tests/test_ngram.py checks equivalence against a straight port of vLLM's function.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

# Columns of the per-request counter array returned by `replay_ngram` (and `suffix.replay_suffix`).
# TAIL_AT/TAIL_LEN: when the last step's draft matched every remaining logged token (TAIL_AT of them) and
# was longer (TAIL_LEN tokens), vLLM verifies the rest against tokens the log does not hold.
# LAST_CONTEXT: context length at the request's last scheduled step (vLLM hashes the full blocks of that many
# tokens: the tokens the last step emits are never cached); MAX_SLOTS: the most KV slots a step reserved
# (context + draft tokens), which sets how many blocks the request holds. Both feed the APC replay.
DRAFTS, DRAFT_TOKENS, ACCEPTED, DECODE_STEPS, OUTPUT_TOKENS, TAIL_AT, TAIL_LEN, LAST_CONTEXT, MAX_SLOTS = range(9)
COUNTER_COLUMNS = 9
NO_LIMIT = np.iinfo(np.int64).max // 4  # max_model_len when the caller gives none

_MIX = np.uint64(0x9E3779B97F4A7C15)
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)


@njit(cache=True, inline="always")
def count_step(counters: np.ndarray, per_pos: np.ndarray, t: int, total: int, length: int, matched: int) -> int:
    """Counts one target step at context length t (of `total` tokens) with a draft of `length` tokens whose
    first `matched` tokens equal the logged continuation; returns the accepted tokens (the step emits
    accepted + 1). The one copy of vLLM's per-step counting for every proposer replay (ngram, suffix,
    draft model): `counters` is one request's row of the columns above, `per_pos` its per-position counts.

    A step without draft tokens (length 0) is a decode step but not a draft (vLLM's observe_draft skips
    it). When the draft matched every remaining logged token and was longer, TAIL_AT/TAIL_LEN record it.
    """
    counters[DECODE_STEPS] += 1
    counters[LAST_CONTEXT] = t
    counters[MAX_SLOTS] = max(counters[MAX_SLOTS], t)
    if length <= 0:
        return 0
    accepted = min(length, matched, total - t)
    if accepted == total - t and length > accepted:
        counters[TAIL_AT] = accepted
        counters[TAIL_LEN] = length
    counters[MAX_SLOTS] = max(counters[MAX_SLOTS], t + length)
    counters[DRAFTS] += 1
    counters[DRAFT_TOKENS] += length
    counters[ACCEPTED] += accepted
    for pos in range(accepted):
        per_pos[pos] += 1
    return accepted


@njit(cache=True)
def _first_starts(tokens: np.ndarray, max_n: int) -> np.ndarray:
    """first[j, n-1] = start of the first occurrence of the n-gram tokens[j-n+1 : j+1] (-1 when j < n-1).

    Open-addressing tables (one per n) keyed by n-gram content: a probe compares the stored 64-bit hash
    first and then the tokens themselves, so hash collisions never merge different n-grams.
    """
    size = tokens.shape[0]
    first = np.full((size, max_n), -1, dtype=np.int32)
    capacity = 16
    while capacity < 2 * size:
        capacity *= 2
    mask = np.int64(capacity - 1)
    umask = np.uint64(capacity - 1)
    starts = np.full((max_n, capacity), -1, dtype=np.int32)
    hashes = np.zeros((max_n, capacity), dtype=np.uint64)
    for j in range(size):
        h = np.uint64(0)
        for n in range(1, min(max_n, j + 1) + 1):
            start = j - n + 1
            h = (h ^ (np.uint64(tokens[start]) + _MIX + (h << np.uint64(6)) + (h >> np.uint64(2)))) * _MIX2
            slot = np.int64(h & umask)
            found = -1
            while starts[n - 1, slot] != -1:
                other = starts[n - 1, slot]
                if hashes[n - 1, slot] == h:
                    same = True
                    for i in range(n):
                        if tokens[other + i] != tokens[start + i]:
                            same = False
                            break
                    if same:
                        found = other
                        break
                slot = (slot + np.int64(1)) & mask
            if found == -1:
                starts[n - 1, slot] = start
                hashes[n - 1, slot] = h
                found = start
            first[j, n - 1] = found
    return first


@njit(cache=True)
def _replay_one(
    tokens: np.ndarray,
    prompt_len: int,
    min_ns: np.ndarray,
    max_ns: np.ndarray,
    ks: np.ndarray,
    max_model_len: int,
    counters: np.ndarray,
    per_pos: np.ndarray,
) -> None:
    """Adds one request's counters for every (window w, k index) to counters[w, ki] and per_pos[w, ki]."""
    total = tokens.shape[0]
    if total - prompt_len <= 0:
        return
    windows = min_ns.shape[0]
    top_n = 0
    for w in range(windows):
        top_n = max(top_n, max_ns[w])
    top_k = 0
    for ki in range(ks.shape[0]):
        top_k = max(top_k, ks[ki])
    first = _first_starts(tokens, top_n)

    # For each context length t in [prompt_len + 1, total - 1] and window: where the draft starts (-1: no
    # draft), how many tokens it may hold before the context ends, and how many of them match the log.
    steps = total - prompt_len
    draft_start = np.full((windows, steps), -1, dtype=np.int64)
    available = np.zeros((windows, steps), dtype=np.int64)
    matched = np.zeros((windows, steps), dtype=np.int64)
    for t in range(prompt_len + 1, total):
        longest = 0
        for n in range(1, min(top_n, t - 1) + 1):
            if first[t - 1, n - 1] < t - n:
                longest = n
            else:
                break
        for w in range(windows):
            n = min(longest, max_ns[w])
            if t < min_ns[w] or n < min_ns[w]:
                continue
            start = first[t - 1, n - 1] + n
            room = t - start
            cap = min(room, top_k, total - t)
            run = 0
            while run < cap and tokens[start + run] == tokens[t + run]:
                run += 1
            draft_start[w, t - prompt_len] = start
            available[w, t - prompt_len] = room
            matched[w, t - prompt_len] = run

    for w in range(windows):
        for ki in range(ks.shape[0]):
            k = ks[ki]
            # The prefill step emits the first output token without a draft.
            counters[w, ki, LAST_CONTEXT] = prompt_len
            counters[w, ki, MAX_SLOTS] = prompt_len
            t = prompt_len + 1
            while t < total:
                step = t - prompt_len
                length = 0
                if draft_start[w, step] >= 0 and t < max_model_len:
                    length = min(k, max_model_len - t, available[w, step])
                    length = min(length, max_model_len - t - 1)  # scheduler trim
                accepted = count_step(counters[w, ki], per_pos[w, ki], t, total, length, matched[w, step])
                t += accepted + 1
            counters[w, ki, OUTPUT_TOKENS] += total - prompt_len


@njit(cache=True, nogil=True)  # releases the GIL: replays run side by side in threads
def _replay_batch(
    tokens: np.ndarray,
    offsets: np.ndarray,
    prompt_lens: np.ndarray,
    min_ns: np.ndarray,
    max_ns: np.ndarray,
    ks: np.ndarray,
    max_model_len: int,
    counters: np.ndarray,
    per_pos: np.ndarray,
) -> None:
    for r in range(prompt_lens.shape[0]):
        _replay_one(
            tokens[offsets[r] : offsets[r + 1]],
            prompt_lens[r],
            min_ns,
            max_ns,
            ks,
            max_model_len,
            counters[r],
            per_pos,
        )


def pack_requests(requests: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, offsets, prompt_lens) for the compiled replays: request r is tokens[offsets[r]:offsets[r + 1]],
    its prompt the first prompt_lens[r] of them, its output the rest."""
    lengths = np.zeros(len(requests) + 1, dtype=np.int64)
    prompt_lens = np.zeros(len(requests), dtype=np.int64)
    for r, (prompt, output) in enumerate(requests):
        prompt_lens[r] = len(prompt)
        lengths[r + 1] = len(prompt) + len(output)
    offsets = np.cumsum(lengths)
    # Filled in place: no copy of every request before the concatenation (half the peak memory); int32 as
    # the streaming profile's ids are (token ids < 2**31), half the memory of int64 and its page faults.
    tokens = np.empty(int(offsets[-1]), dtype=np.int32)
    for r, (prompt, output) in enumerate(requests):
        middle = offsets[r] + prompt_lens[r]
        tokens[offsets[r] : middle] = prompt
        tokens[middle : offsets[r + 1]] = output
    return tokens, offsets, prompt_lens


def replay_ngram(
    requests: Sequence[tuple[np.ndarray, np.ndarray]],
    windows: Sequence[tuple[int, int]],
    ks: Sequence[int],
    max_model_len: int | None = None,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Replays every (prompt_ids, output_ids) request for every window (min_n, max_n) and every k.

    Returns (counters, per_pos): counters[r, w, ki, :] holds request r's DRAFTS, DRAFT_TOKENS, ACCEPTED,
    DECODE_STEPS, OUTPUT_TOKENS, TAIL_AT, TAIL_LEN, LAST_CONTEXT and MAX_SLOTS; per_pos[w, ki, i] = drafts whose first i + 1 tokens were accepted
    (vLLM's num_accepted_tokens_per_pos). Requests are independent for ngram, so order does not matter:
    with `threads` > 1 the kernel (which releases the GIL) runs on that many runs of requests of about equal
    tokens at once, each with its own per_pos, summed after (integers: the same result).
    """
    if not windows or not ks:
        raise ValueError("need at least one window and one k")
    for low, high in windows:
        if not 1 <= low <= high:
            raise ValueError(f"window (prompt_lookup_min={low}, prompt_lookup_max={high}) needs 1 <= min <= max")
    if min(ks) < 1:
        raise ValueError(f"num_speculative_tokens must be >= 1, got {min(ks)}")
    count = len(requests)
    tokens, offsets, prompt_lens = pack_requests(requests)
    counters = np.zeros((count, len(windows), len(ks), COUNTER_COLUMNS), dtype=np.int64)
    min_ns = np.array([w[0] for w in windows], dtype=np.int64)
    max_ns = np.array([w[1] for w in windows], dtype=np.int64)
    ks_array = np.asarray(ks, dtype=np.int64)
    limit = NO_LIMIT if max_model_len is None else int(max_model_len)
    # Run r covers requests [cuts[r], cuts[r + 1]), cut where the packed tokens pass r / threads of the total.
    runs = max(1, min(threads, count))
    inner = np.searchsorted(offsets[1:], np.arange(1, runs) * (offsets[-1] / runs), side="left")
    cuts = np.unique(np.concatenate(([0], inner, [count])))
    per_pos = np.zeros((cuts.size - 1, len(windows), len(ks), max(ks)), dtype=np.int64)

    def replay(run: int) -> None:
        low, high = cuts[run], cuts[run + 1]
        _replay_batch(tokens, offsets[low : high + 1], prompt_lens[low:high], min_ns, max_ns, ks_array, limit,
                      counters[low:high], per_pos[run])

    if cuts.size > 2:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=cuts.size - 1) as pool:
            list(pool.map(replay, range(cuts.size - 1)))
    elif cuts.size == 2:
        replay(0)
    return counters, per_pos.sum(axis=0)
