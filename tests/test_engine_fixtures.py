"""Decisions on the real fixture logs (fixtures/*.jsonl), through the whole profile (advisor.profile).

Same rules as tests/test_engine_decide.py, now from measured reports: code editing and summarization get a
lookup method with k from the replay; multi-turn chat keeps APC with its measured sharing and gets no
lookup speculation that does not pay; no-overlap traffic gets none; copy-heavy traffic at a rate that loads
the GPU heavily gets none or a table lowering k at high batch.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from advisor.profile import ProfileOptions, build_profile

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOOKUP = {"ngram", "suffix"}


@pytest.fixture(scope="module")
def profiled():
    cache: dict[tuple[str, str], object] = {}

    def get(name: str, gpu: str = "H100"):
        key = (name, gpu)
        if key not in cache:
            cache[key] = build_profile(ProfileOptions(paths=(str(FIXTURES / f"{name}.jsonl"),), gpu=gpu))
        return cache[key]

    return get


@pytest.mark.parametrize("name", ["code_editing", "rag_summarization"])
def test_copying_fixtures_get_lookup_speculation_from_the_replay(profiled, name: str) -> None:
    profile = profiled(name)
    config = profile.report.recommendation.speculative_config
    assert config is not None and config["method"] in LOOKUP
    replayed = [entry.config for entry in profile.report.replay + profile.report.replay_sweep]
    assert {k: v for k, v in config.items() if k != "num_speculative_tokens_per_batch_size"} in replayed
    assert profile.report.recommendation.candidates[0].from_replay


def test_chat_fixture_keeps_apc_and_skips_unpaid_speculation(profiled) -> None:
    report = profiled("chat_multiturn").report
    recommendation = report.recommendation
    assert recommendation.enable_prefix_caching is True
    assert any("prefix" in line and "%" in line for line in recommendation.evidence)
    lookups = [c for c in recommendation.candidates if c.method in LOOKUP]
    if recommendation.speculative_config is None:
        assert all(c.speedup_typical < 1.10 or c.speedup_peak < 0.95 for c in lookups)
    else:
        assert recommendation.predicted.speedup.peak >= 0.95


def test_no_overlap_fixture_gets_no_lookup_speculation(profiled) -> None:
    config = profiled("no_overlap").report.recommendation.speculative_config
    assert config is None or config["method"] not in LOOKUP


@pytest.mark.parametrize("gpu", ["H100", "A10G"])
def test_copy_heavy_fixture_on_a_loaded_gpu_gets_none_or_a_k_table(profiled, gpu: str) -> None:
    """About 260 req/s of short copy-heavy requests pins the batch at max-num-seqs on either GPU."""
    report = profiled("copy_heavy_high_rate", gpu).report
    recommendation = report.recommendation
    assert recommendation.predicted.batch.typical >= 200
    config = recommendation.speculative_config
    if config is not None and "num_speculative_tokens_per_batch_size" in config:
        table = config["num_speculative_tokens_per_batch_size"]
        assert table[-1][2] < table[0][2]
    elif config is not None:  # a fixed k at a full batch may gain a little, never much (H200 measurements)
        assert recommendation.predicted.speedup.typical < 1.5
