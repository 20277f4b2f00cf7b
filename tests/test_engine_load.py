"""Load model: replay entries to tokens per step and verification cost, goodput, k per batch band."""
from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.engine.cost import CostModel
from advisor.engine.load import best_k_per_batch, goodput, k_for_batch, point_from_replay
from advisor.hardware import H200_MEASURED_MODEL, resolve_gpu
from advisor.report import Replay, section
from engine_reports import replay_entry as _entry


def replay_entry(*args, **kwargs) -> Replay:
    return section(Replay, _entry(*args, **kwargs))

COST = CostModel(H200_MEASURED_MODEL, resolve_gpu("H200"))


def test_replay_entry_to_point() -> None:
    entry = replay_entry("ngram", 4, 0.8, 0.5, {"prompt_lookup_min": 2, "prompt_lookup_max": 5})
    point = point_from_replay(entry)
    assert point.k == 4 and point.from_replay and not point.async_scheduling
    assert point.tokens_per_step == pytest.approx(1 + 0.5 * (0.8 + 0.64 + 0.512 + 0.4096))
    assert point.verify_tokens_per_seq == pytest.approx(1 + 0.5 * 4)  # drafts on half the steps
    assert point_from_replay(replace(entry, num_output_tokens=0)) is None
    assert point.source == "exact ngram replay of 600 logged requests"


def test_a_sampled_replay_names_its_share_of_the_log_in_the_source() -> None:
    """A suffix window of a long log covers a few hundred of its requests: the evidence says how many of how
    many, and how they were chosen, not "of 184 logged requests" alone."""
    entry = replace(replay_entry("suffix", 24, 0.5, 0.8, requests=184), population_requests=7_737, sampled=True,
                    sampling="arrival-order window: requests 6581..6825 replayed, 6642..6825 measured")
    assert point_from_replay(entry).source == (
        "exact suffix replay of 184 of 7,737 logged requests (arrival-order window)")


def test_goodput_gain_shrinks_with_batch() -> None:
    point = point_from_replay(replay_entry("ngram", 4, 0.8, 0.9))
    gains = [goodput(COST, b, point, 640) / goodput(COST, b, None, 640, True) for b in (1, 32, 128)]
    assert gains[0] > gains[1] > gains[2]


def test_weak_acceptance_turns_drafting_off_at_high_batch() -> None:
    points = [point_from_replay(replay_entry("ngram", k, 0.4, 0.4)) for k in (1, 2, 4)]
    bands = best_k_per_batch(COST, points, 640, 256)
    assert bands[0][0] == 1 and bands[-1][1] == 256
    # k falls as the batch grows; whether it reaches 0 by batch 256 lies beyond the measured range (concurrency
    # <= 128, where the refit charges a full batch's verify tokens less than the old 8-cell fit did)
    assert bands[0][2] > 0 and bands[-1][2] < bands[0][2]
    assert k_for_batch(bands, 1) == bands[0][2] and k_for_batch(bands, 256) == bands[-1][2]
