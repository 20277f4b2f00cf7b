"""Suffix decoding replay: hand-built cases for each rule of arctic-inference 0.1.1 as vLLM drives it.

Rules from arctic_inference/csrc/suffix_decoding/suffix_tree.cc (`speculate`, `_speculate_path`,
`_increment_count`), arctic_inference/suffix_decoding/cache.py (`speculate`: per-request draft wins ties;
`_maybe_evict_requests`: FIFO) and vllm/v1/spec_decode/suffix_decoding.py (pattern = last max_tree_depth
tokens, max_spec_tokens = min(k, max_model_len - t - 1)). Tree-level rules are checked on the readable
Python port (tests/suffix_reference.py), replay-level ones on the compiled replay, and the two are checked
against each other on random traffic. The comparison with the real extension is in tests/test_replay_vllm.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from advisor.measure.ngram import ACCEPTED, DECODE_STEPS, DRAFT_TOKENS, DRAFTS
from advisor.measure.specreplay import _suffix_counters, _suffix_cuts, normalize_config, replay_config, suffix_window, sweep
from advisor.measure.suffix import replay_suffix
from suffix_reference import SuffixCache, SuffixTree, reference_replay


def tree(*sequences, depth=24):
    t = SuffixTree(depth)
    for seq_id, tokens in enumerate(sequences):
        t.extend(seq_id, tokens)
    return t


def test_draft_length_is_limited_by_spec_factor_times_match_length():
    t = tree([1, 2, 3, 4, 5, 6])
    assert t.speculate([0, 1, 2], 8, 1.0, 0.1)[0] == [3, 4]  # match 2 -> at most 2 tokens
    assert t.speculate([0, 1, 2], 8, 2.0, 0.1)[0] == [3, 4, 5, 6]
    assert t.speculate([0, 1, 2], 3, 2.0, 0.1)[0] == [3, 4, 5]  # k caps it
    assert t.speculate([9, 1, 2], 8, 1.0, 0.1)[2] == 2  # the unmatched 9 is ignored: longest match is 2


def test_pattern_never_matches_its_full_length():
    """`for (match_len = 1; match_len < context.size(); ...)`: the whole pattern is never tried."""
    t = tree([1, 2, 3, 4])
    assert t.speculate([2, 3], 4, 5.0, 0.1)[2] == 1  # only [3] is matched, drafting [4]


def test_probability_threshold_stops_at_a_branch():
    """After 7 come 1 (twice), 2 and 3: p(1) = 2/4 = 0.5."""
    t = tree([7, 1, 7, 2, 7, 3, 7, 1, 9])
    assert t.speculate([8, 7], 4, 4.0, 0.5)[0] == [1]
    assert t.speculate([8, 7], 4, 4.0, 0.6)[0] == []


def test_equal_counts_follow_insertion_order():
    """Children 1 and 2 of token 5 both have count 1: the head of the sibling list is the earlier one."""
    assert tree([5, 1, 5, 2, 5]).speculate([0, 5], 1, 1.0, 0.1)[0] == [1]
    assert tree([5, 2, 5, 1, 5]).speculate([0, 5], 1, 1.0, 0.1)[0] == [2]
    # A count rising past an equal sibling moves it to the front.
    assert tree([5, 2, 5, 1, 5, 1, 5]).speculate([0, 5], 1, 1.0, 0.1)[0] == [1]


def test_per_request_tree_wins_ties_with_the_global_tree():
    cache = SuffixCache(24, 10)
    first, seq = cache.start([4, 4])
    cache.add(first, seq, [1, 2, 8])  # global tree: 1 2 -> 8
    local, seq = cache.start([1, 2, 3])  # local tree: 1 2 -> 3
    cache.add(local, seq, [5])
    assert cache.speculate(local, [1, 2], 1, 1.0, 0.1) == [3]


def test_global_tree_is_fifo_over_requests():
    """Request C's output repeats A's. C's own slot counts: with max_cached_requests=2, starting C evicts A
    (the oldest); with 3 it is kept; 0 disables the global tree."""
    a = (np.array([10, 11]), np.array([1, 2, 3, 4, 5, 6]))
    b = (np.array([12, 13]), np.array([20, 21, 22]))
    c = (np.array([14, 15]), np.array([1, 2, 3, 4, 5, 6]))
    kept, _ = replay_suffix([a, b, c], [4], max_cached_requests=3)
    evicted, _ = replay_suffix([a, b, c], [4], max_cached_requests=2)
    disabled, _ = replay_suffix([a, b, c], [4], max_cached_requests=0)
    assert kept[2, 0, ACCEPTED] > 0
    assert evicted[2, 0, ACCEPTED] == 0 and disabled[2, 0, ACCEPTED] == 0


def test_replay_counts_steps_drafts_and_acceptance():
    """Prompt 1..6, output 1..7, no global tree.

    t=7, context ..6 1: [1] is followed by 2 once in two (p=0.5): draft [2], accepted, + bonus 3.
    t=9, context ..1 2 3: [1 2 3] (count 2) -> 4 5 6 at p=0.5 each, score 1.5, beats [2 3] -> [4 5] (1.0);
    accepted 3, + bonus 7: done in 2 decode steps.
    """
    counters, per_pos = replay_suffix([(np.arange(1, 7), np.arange(1, 8))], [8], max_cached_requests=0)
    row = counters[0, 0]
    assert (row[DRAFTS], row[DECODE_STEPS], row[DRAFT_TOKENS], row[ACCEPTED]) == (2, 2, 4, 4)
    assert per_pos[0].tolist()[:4] == [2, 1, 1, 0]


def test_large_logs_replay_a_window_of_consecutive_requests():
    """Above the token budget, suffix replays one arrival-order window; its first quarter only warms the trees."""
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 50, 30)
    requests = [(rng.integers(0, 50, 10), shared.copy()) for _ in range(40)]  # 40 tokens each
    start, stop, first = suffix_window(requests, 400, seed=3)
    assert stop - start == 10 and first == start + 2
    windowed = replay_config({"method": "suffix", "num_speculative_tokens": 4}, requests, suffix_token_budget=400, seed=3)
    assert windowed.sampled and windowed.num_requests == 8 and "window" in windowed.sampling
    # Every measured request sees an earlier copy of the shared output in the warm global tree.
    assert windowed.acceptance_rate is not None and windowed.acceptance_rate > 0.5
    whole = replay_config({"method": "suffix", "num_speculative_tokens": 4}, requests)
    assert not whole.sampled and whole.num_requests == 40 and whole.sampling == "all requests"


def test_one_pass_for_several_k_equals_separate_passes():
    rng = np.random.default_rng(4)
    requests = [(rng.integers(0, 4, 15), rng.integers(0, 4, 25)) for _ in range(8)]
    together, pos_together = replay_suffix(requests, [1, 3, 8], max_cached_requests=3)
    for ki, k in enumerate((1, 3, 8)):
        alone, pos_alone = replay_suffix(requests, [k], max_cached_requests=3)
        assert (together[:, ki] == alone[:, 0]).all()
        assert (pos_together[ki, :k] == pos_alone[0]).all()


@pytest.mark.parametrize("seed", range(3))
def test_compiled_replay_equals_the_reference_port(seed):
    """Small vocabularies (ties everywhere), shallow trees, a tiny FIFO (many removals), sampling, limits."""
    rng = np.random.default_rng(seed)
    for trial in range(12):
        depth, max_cached, vocab = int(rng.integers(2, 10)), int(rng.integers(0, 5)), int(rng.integers(2, 6))
        factor, min_prob = float(rng.choice([1.0, 0.5, 2.0, 1.3])), float(rng.choice([0.1, 0.0, 0.3, 0.5]))
        requests = [(rng.integers(0, vocab, int(rng.integers(0, 30))), rng.integers(0, vocab, int(rng.integers(0, 40))))
                    for _ in range(12)]
        chosen = np.sort(rng.choice(12, 8, replace=False)) if trial % 3 == 0 else None
        limit = 45 if trial % 4 == 0 else None
        args = ([1, 3, 8], depth, max_cached, factor, min_prob, limit, chosen)
        compiled, compiled_pos = replay_suffix(requests, *args)
        reference, reference_pos = reference_replay(requests, *args)
        assert (compiled == reference).all() and (compiled_pos == reference_pos).all(), trial


def test_sweep_suffix_ks_in_one_pass_match_single_configs():
    rng = np.random.default_rng(9)
    requests = [(rng.integers(0, 6, 20), rng.integers(0, 6, 30)) for _ in range(10)]
    result = sweep(requests, ks=(2,), windows=((1, 3),), suffix_ks=(2, 24))
    suffixes = [r for r in result.replays if r.method == "suffix"]
    assert [r.config["num_speculative_tokens"] for r in suffixes] == [2, 24]
    single = replay_config({"method": "suffix"}, requests)
    assert suffixes[1].to_dict() == single.to_dict()


@pytest.mark.parametrize("max_cached", [3, 10000, 0])
def test_suffix_replay_in_pieces_equals_one_pass(max_cached):
    """With threads, one replica's requests replay in pieces, each feeding the outputs before it to the
    global tree first: the counters equal one pass, with FIFO evictions across pieces (max_cached 3), a
    window whose first requests only warm the trees, and replicas."""
    rng = np.random.default_rng(11)
    requests = [(rng.integers(0, 5, int(rng.integers(1, 30))), rng.integers(0, 5, int(rng.integers(0, 40))))
                for _ in range(60)]
    config = normalize_config({"method": "suffix", "suffix_decoding_max_cached_requests": max_cached})
    replicas = rng.integers(0, 2, len(requests))
    for budget, groups in ((None, None), (1200, None), (1200, replicas)):
        one = _suffix_counters(config, [1, 3, 24], requests, None, budget, 5, groups, threads=1)
        assert one[0][:, :, ACCEPTED].sum() > 0
        for threads in (2, 3, 8):
            pieces = _suffix_counters(config, [1, 3, 24], requests, None, budget, 5, groups, threads=threads)
            assert (pieces[0] == one[0]).all() and (pieces[1] == one[1]).all() and pieces[2] == one[2]
    start, stop, first = suffix_window(requests, 1200, 5)
    rows = np.arange(start, stop)
    sizes = np.array([len(p) + len(o) for p, o in requests[start:stop]])
    cuts = _suffix_cuts(rows, sizes, rows >= first, 3)
    assert len(cuts) == 3 and cuts[0][0] == 0 and cuts[-1][1] == rows.size  # the test splits for real
