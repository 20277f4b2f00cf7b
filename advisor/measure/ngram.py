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
module computes it for every t in one pass, O(max_n) per token, from the first occurrence of every n-gram
ending at each position: an n-gram is its (n-1)-gram prefix plus one token, so when the prefix first occurred
ending at p, the n-gram either first occurred ending at p + 1 (when tokens[p + 1] is its last token: no
lookup) or is found in a hash table keyed by (prefix, last token) (exact: keys are compared, not hashes).
Existence of an earlier occurrence is monotone in n (an earlier occurrence of the last n-gram contains one
of the last (n-1)-gram), so the longest n for a window with a smaller max_n is min(longest, max_n). A step
then accepts the common prefix of the draft and the logged continuation and emits accepted + 1 tokens.

One replay pass handles several windows and several k at once: proposals depend on the window only, the
step sequence on k. A window's walks (one per k) are advanced in turn and counted in bulk, as `count_step`
counts each step: each walk is a chain of dependent loads, and interleaving independent chains overlaps
them. tests/test_ngram.py checks equivalence against a straight port of vLLM's function and `count_step`.
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


@njit(cache=True, inline="always")
def count_step(counters: np.ndarray, per_pos: np.ndarray, t: int, total: int, length: int, matched: int) -> int:
    """Counts one target step at context length t (of `total` tokens) with a draft of `length` tokens whose
    first `matched` tokens equal the logged continuation; returns the accepted tokens (the step emits
    accepted + 1). vLLM's per-step counting for the suffix and draft-model replays (the ngram replay's
    `_walk` counts the same in bulk): `counters` is one request's row of the columns above, `per_pos` its
    per-position counts.

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


@njit(cache=True, inline="always")
def _slot(node: int, token: int, shift: int) -> int:
    """Home slot of the n-gram (prefix node, last token) in a table of 2**(64 - shift) slots (top bits of a
    multiplicative hash)."""
    key = (np.uint64(node) << np.uint64(32)) ^ np.uint64(np.uint32(token))
    return np.int64((key * _MIX) >> np.uint64(shift))


@njit(cache=True, inline="always")
def _find_or_add(table: np.ndarray, tokens: np.ndarray, node: int, token: int, j: int, shift: int) -> int:
    """End of the first occurrence of the n-gram (prefix node, last token), from `table`; j, added to it, when
    the n-gram is new. An entry is (node << 32) | end: exact, as its last token is tokens[end]."""
    mask = table.shape[0] - 1
    slot = _slot(node, token, shift)
    while table[slot] >= 0:
        entry = table[slot]
        if entry >> 32 == node and tokens[entry & 0xFFFFFFFF] == token:
            return entry & 0xFFFFFFFF
        slot = (slot + 1) & mask
    table[slot] = (node << 32) | j
    return j


@njit(cache=True)
def _drafts(
    tokens: np.ndarray, prompt_len: int, min_ns: np.ndarray, max_ns: np.ndarray, top_k: int, max_model_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(length, matched), each [window, t - prompt_len] for context lengths t in [prompt_len + 1, total - 1]:
    the most draft tokens the window's proposal allows at t (the context's end, top_k and the scheduler's
    max_model_len trim: at most max_model_len - t - 1; 0: no draft) and how many of them match the log."""
    total = tokens.shape[0]
    windows = min_ns.shape[0]
    top_n = 0
    for w in range(windows):
        top_n = max(top_n, max_ns[w])

    # first_end[n]: end of the first occurrence of the n-gram ending at position j (j when it is new or does
    # not fit), previous[n] the same at j - 1. The n-gram is its (n-1)-gram prefix plus tokens[j]; when the
    # prefix first ended at p (previous[n - 1]) and tokens[p + 1] == tokens[j], the n-gram first ended at
    # p + 1, else `table` holds it under the prefix's node (n - 1) * total + p + 1 (node 0: empty prefix).
    # The table never holds total entries (at most half its slots): with a(j) the smallest n new at j, j
    # adds at most a(j - 1) - a(j) + 1 (levels a(j) .. a(j - 1)), a sum that telescopes.
    first_end = np.empty(top_n + 1, dtype=np.int64)
    previous = np.full(top_n + 1, -1, dtype=np.int64)
    shift = 60
    while (1 << (64 - shift)) < 2 * total:
        shift -= 1
    table = np.full(1 << (64 - shift), -1, dtype=np.int64)

    steps = total - prompt_len
    length = np.zeros((windows, steps), dtype=np.int32)
    matched = np.zeros((windows, steps), dtype=np.int32)
    for j in range(total - 1):
        token = tokens[j]
        longest = 0  # the largest n whose n-gram ending at j occurred before
        for n in range(1, top_n + 1):
            if n == 1:
                node = 0
            else:
                prefix_end = previous[n - 1]
                if prefix_end == j - 1:  # a new prefix: this n-gram and every longer one are new
                    first_end[n:] = j
                    break
                if tokens[prefix_end + 1] == token:
                    first_end[n] = prefix_end + 1
                    longest = n
                    continue
                node = (n - 1) * total + prefix_end + 1
            found = _find_or_add(table, tokens, node, token, j, shift)
            if found < j:
                longest = n
            first_end[n] = found
        previous, first_end = first_end, previous
        if j < prompt_len:
            continue
        # Context length t = j + 1; previous now holds the first ends at j. Windows with the same n share
        # the draft.
        t = j + 1
        cap = min(top_k, total - t, max_model_len - t - 1)
        last_n = -1
        room = 0
        run = 0
        for w in range(windows):
            n = min(longest, max_ns[w])
            if n < min_ns[w]:
                continue
            if n != last_n:
                last_n = n
                start = previous[n] + 1
                room = t - start
                run = 0
                while run < min(room, cap) and tokens[start + run] == tokens[t + run]:
                    run += 1
            length[w, t - prompt_len] = max(0, min(room, top_k, max_model_len - t - 1))
            matched[w, t - prompt_len] = run
    return length, matched


@njit(cache=True)
def _walk(
    length: np.ndarray, matched: np.ndarray, ks: np.ndarray, prompt_len: int, counters: np.ndarray, per_pos: np.ndarray
) -> None:
    """Walks one window's decode steps for every k, adding to counters[ki] and per_pos[ki] what `count_step`
    would (tests/test_ngram.py checks it), in bulk: the walks of the ks are independent chains (each step's
    position depends on the previous step's acceptance), advanced in turn so their loads overlap."""
    steps = length.shape[0]
    count = ks.shape[0]
    top_k = 0
    for ki in range(count):
        top_k = max(top_k, ks[ki])
    position = np.full(count, 1, dtype=np.int64)  # t - prompt_len of each walk's next step
    last = np.zeros(count, dtype=np.int64)  # t - prompt_len of each walk's last step
    drafts = np.zeros(count, dtype=np.int64)
    draft_tokens = np.zeros(count, dtype=np.int64)
    reserved = np.zeros(count, dtype=np.int64)  # the most t - prompt_len + draft tokens
    histogram = np.zeros((count, top_k + 1), dtype=np.int64)  # steps by accepted tokens
    running = count
    while running > 0:
        running = 0
        for ki in range(count):
            step = position[ki]
            if step >= steps:
                continue
            running += 1
            drafted = min(ks[ki], length[step])
            accepted = min(drafted, matched[step])
            drafts[ki] += drafted > 0
            draft_tokens[ki] += drafted
            reserved[ki] = max(reserved[ki], step + drafted)
            histogram[ki, accepted] += 1
            last[ki] = step
            position[ki] = step + accepted + 1
    for ki in range(count):
        row = counters[ki]
        # The prefill step emits the first output token without a draft.
        row[LAST_CONTEXT] = prompt_len
        row[MAX_SLOTS] = prompt_len
        row[OUTPUT_TOKENS] += steps
        if last[ki] == 0:
            continue
        row[DRAFTS] += drafts[ki]
        row[DRAFT_TOKENS] += draft_tokens[ki]
        row[LAST_CONTEXT] = prompt_len + last[ki]
        row[MAX_SLOTS] = prompt_len + reserved[ki]
        # Only the last step can take every remaining logged token.
        drafted = min(ks[ki], length[last[ki]])
        accepted = position[ki] - last[ki] - 1
        if accepted == steps - last[ki] and drafted > accepted:
            row[TAIL_AT] = accepted
            row[TAIL_LEN] = drafted
        row[DECODE_STEPS] += histogram[ki, 0]
        reached = 0
        for accepted in range(ks[ki], 0, -1):
            reached += histogram[ki, accepted]
            per_pos[ki, accepted - 1] += reached
            row[ACCEPTED] += accepted * histogram[ki, accepted]
        row[DECODE_STEPS] += reached


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
    if tokens.shape[0] - prompt_len <= 0:
        return
    top_k = 0
    for ki in range(ks.shape[0]):
        top_k = max(top_k, ks[ki])
    length, matched = _drafts(tokens, prompt_len, min_ns, max_ns, top_k, max_model_len)
    for w in range(min_ns.shape[0]):
        _walk(length[w], matched[w], ks, prompt_len, counters[w], per_pos[w])


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
    if max(high for _, high in windows) * int(np.diff(offsets).max(initial=0)) >= 2**31:
        raise ValueError("requests too long for the ngram replay's 31-bit n-gram keys")
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
