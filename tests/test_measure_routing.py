"""Per-replica replays: which replica serves each request (advisor.measure.routing), and the APC and suffix
replays run once per replica with their counters added (a vLLM server's prefix cache and global suffix tree
see only the requests routed to it)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from advisor import stream
from advisor.measure import routing, specreplay
from advisor.measure.apc import apc_report
from advisor.measure.prefix import PrefixBlocks
from advisor.profile import ProfileOptions, build_profile
from advisor.record import Request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NO_LABELS = ()


def _no_labels(count: int) -> np.ndarray:
    return np.full(count, -1, dtype=np.int32)


def test_round_robin_follows_arrival_order():
    order = np.array([3, 0, 4, 1, 2])  # request 3 arrived first, then 0, ...
    replica, split = routing.assign(_no_labels(5), NO_LABELS, np.zeros(5, np.uint32), order, 2, "round_robin")
    assert replica[order].tolist() == [0, 1, 0, 1, 0]
    assert split.requests == (3, 2) and split.policy == "round_robin" and split.busiest_share == pytest.approx(0.6)


def test_consistent_hash_keeps_a_conversation_on_one_replica_and_spreads_them():
    keys = [f"conversation-{i // 3}" for i in range(30_000)]  # 10,000 conversations of 3 requests
    affinities = np.array([routing.affinity(key) for key in keys], dtype=np.uint32)
    replica, split = routing.assign(_no_labels(len(keys)), NO_LABELS, affinities, np.arange(len(keys)), 4,
                                    "consistent_hash")
    assert (replica.reshape(-1, 3) == replica.reshape(-1, 3)[:, :1]).all()
    assert split.busiest_share < 0.26  # 10,000 sessions over 4 replicas: within a few percent of even


def test_the_logs_replica_names_win_and_unnamed_requests_form_their_own():
    labels = np.array([1, 0, -1, 1], dtype=np.int32)
    replica, split = routing.assign(labels, ("pod-a", "pod-b"), np.zeros(4, np.uint32), np.arange(4), 8,
                                    "consistent_hash")
    assert replica.tolist() == [1, 0, 2, 1]
    assert split.policy == "log" and split.names == ("pod-a", "pod-b", routing.UNNAMED)
    assert split.requests == (1, 2, 1)


def test_bad_routing_arguments_are_refused():
    with pytest.raises(ValueError, match="replicas"):
        routing.assign(_no_labels(2), NO_LABELS, np.zeros(2, np.uint32), np.arange(2), 0, "round_robin")
    with pytest.raises(ValueError, match="random"):
        routing.assign(_no_labels(2), NO_LABELS, np.zeros(2, np.uint32), np.arange(2), 2, "random")


def _conversations(seed: int, count: int = 60) -> tuple[list[PrefixBlocks], np.ndarray, np.ndarray]:
    """Multi-turn requests whose prompts extend their conversation's earlier prompt and output, over a shared
    system prompt: (chains, output lengths, conversation of each)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, 1000, 48)
    history: dict[int, np.ndarray] = {}
    chains, outputs, conversation = [], [], []
    for _ in range(count):
        c = int(rng.integers(0, 12))
        prompt = np.concatenate([history.get(c, system), rng.integers(0, 1000, int(rng.integers(5, 40)))])
        output = rng.integers(0, 1000, int(rng.integers(1, 30)))
        chains.append(PrefixBlocks.from_tokens(prompt, 16, output))
        history[c] = np.concatenate([prompt, output])
        outputs.append(output.size)
        conversation.append(c)
    return chains, np.array(outputs), np.array(conversation)


@pytest.mark.parametrize("seed", range(4))
def test_apc_per_replica_adds_the_replays_of_each_replica_alone(seed):
    """Counters at capacity and at the ceiling are the sums of each replica's own replay, per-request hits
    come back in request order, and the ceiling needs the blocks of the replica that needs most."""
    chains, outputs, conversation = _conversations(seed)
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(0.3, len(chains)))
    durations = outputs * 0.05
    replicas = conversation % 3
    capacity = 40
    together = apc_report(chains, 16, capacity, outputs, arrivals, durations, replicas=replicas)
    alone = []
    for r in range(3):
        rows = np.flatnonzero(replicas == r)
        alone.append((rows, apc_report([chains[i] for i in rows], 16, capacity, outputs[rows], arrivals[rows],
                                       durations[rows])))
    for name in ("at_capacity", "ceiling"):
        mine = getattr(together, name)
        for counter in ("requests", "prompt_tokens", "hit_tokens", "queued_requests", "unserved_requests"):
            assert getattr(mine, counter) == sum(getattr(getattr(report, name), counter) for _, report in alone)
        hits = np.zeros(len(chains), np.int64)
        for rows, report in alone:
            hits[rows] = getattr(report, name).per_request_hit_tokens
        np.testing.assert_array_equal(mine.per_request_hit_tokens, hits)
    assert together.blocks_for_ceiling == max(report.blocks_for_ceiling for _, report in alone)
    # The cache of one replica serving all: more sharing (the same conversations meet their history).
    one = apc_report(chains, 16, capacity, outputs, arrivals, durations, replicas=np.zeros(len(chains), np.int64))
    assert one.to_dict() == apc_report(chains, 16, capacity, outputs, arrivals, durations).to_dict()
    assert one.ceiling.hit_tokens >= together.ceiling.hit_tokens


def _tokenized(seed: int, count: int = 40) -> list[tuple[np.ndarray, np.ndarray]]:
    """Requests whose outputs repeat earlier outputs (what the global suffix tree learns from)."""
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, 50, 12, dtype=np.int64) for _ in range(5)]
    requests = []
    for _ in range(count):
        prompt = rng.integers(0, 50, 20, dtype=np.int64)
        output = np.concatenate([phrases[int(i)] for i in rng.integers(0, 5, 3)])
        requests.append((prompt, output))
    return requests


@pytest.mark.parametrize("seed", range(3))
def test_suffix_per_replica_adds_the_replays_of_each_replica_alone(seed):
    requests = _tokenized(seed)
    replicas = np.arange(len(requests)) % 2
    config = {"method": "suffix", "num_speculative_tokens": 8}
    together = specreplay.replay_config(config, requests, replicas=replicas)
    alone = [specreplay.replay_config(config, [r for r, k in zip(requests, replicas) if k == replica])
             for replica in (0, 1)]
    for counter in ("num_output_tokens", "decode_steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert getattr(together, counter) == sum(getattr(result, counter) for result in alone)
    assert together.num_accepted_tokens_per_pos == tuple(
        a + b for a, b in zip(alone[0].num_accepted_tokens_per_pos, alone[1].num_accepted_tokens_per_pos))
    assert "one global suffix tree per replica (2 replicas)" in together.sampling
    # One tree over everything learns from twice the outputs: it accepts more here.
    assert specreplay.replay_config(config, requests).num_accepted_tokens > together.num_accepted_tokens


def test_collected_absorb_renumbers_the_replica_names():
    """Two parts that meet the replica names in different orders merge into the one-pass labels."""
    options = stream.StreamOptions(tokenizer=None, model=None, block_size=16, hash_block_size=512, seed=0)
    names = ["b", None, "a", "b", "c", "a", None, "c"]
    requests = [Request(source=f"log:{i}", prompt_tokens=10 + i, completion_tokens=5, replica=name,
                        conversation_id=f"c{i % 3}") for i, name in enumerate(names)]
    whole = stream.collect(requests, options, {})
    merged = stream.collect(requests[:3], options, {})
    merged.absorb(stream.collect(requests[3:], options, {}))
    assert list(whole.replica_names) == ["b", "a", "c"]
    assert list(merged.replica_names) == list(whole.replica_names)
    np.testing.assert_array_equal(merged.replica_labels, whole.replica_labels)
    np.testing.assert_array_equal(merged.affinities, whole.affinities)
    assert whole.replica_labels.tolist() == [0, -1, 1, 0, 2, 1, -1, 2]


def test_profile_per_replica_routing_of_a_multi_turn_log():
    """On the multi-turn fixture, round_robin over 4 replicas splits conversations from their history (the
    APC hit rate falls), consistent_hash keeps them whole (it stays near one replica's); the engine sizes
    one server's load by the busiest replica's share."""
    path = str(FIXTURES / "chat_multiturn.jsonl")
    reports = {}
    for replicas, policy in ((1, "round_robin"), (4, "round_robin"), (4, "consistent_hash")):
        options = ProfileOptions(paths=(path,), replicas=replicas, routing=policy, sweep=False)
        reports[replicas, policy] = build_profile(options).report
    one, spread, sticky = reports[1, "round_robin"], reports[4, "round_robin"], reports[4, "consistent_hash"]
    assert one.routing.replicas == 1 and spread.routing.replicas == 4 and sum(spread.routing.requests) == 266
    assert spread.apc.hit_rate < sticky.apc.hit_rate - 0.2
    assert sticky.apc.hit_rate <= one.apc.hit_rate
    assert any("busiest of 4 replicas" in line for line in spread.recommendation.assumptions)
    assert not any("replicas" in line for line in one.recommendation.assumptions)


def test_profile_reads_the_replica_from_the_log(tmp_path):
    """A log whose records name their replica (`instance_id`, also under `metadata`) is replayed per named
    replica, whatever --replicas says."""
    lines = []
    for index, record in enumerate(FIXTURES.joinpath("chat_multiturn.jsonl").read_bytes().splitlines()):
        data = orjson.loads(record)
        if index % 2:
            data["instance_id"] = f"vllm-{index % 3}"
        else:
            data.setdefault("metadata", {})["instance_id"] = f"vllm-{index % 3}"
        lines.append(orjson.dumps(data))
    path = tmp_path / "labelled.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = build_profile(ProfileOptions(paths=(str(path),), replicas=7, sweep=False)).report
    assert report.routing.policy == "log" and sorted(report.routing.names) == ["vllm-0", "vllm-1", "vllm-2"]
    assert sum(report.routing.requests) == report.ingest.requests
