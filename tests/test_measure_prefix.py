"""Block hashing and the infinite-cache prefix ceiling (advisor/measure/prefix.py).

vLLM semantics pinned here (vLLM 0.33):
- vllm/v1/core/kv_cache_utils.py `hash_block_tokens`: hash(parent block hash, block token ids), so a block
  hash identifies the block AND everything before it; `get_request_block_hasher` hashes full blocks only,
  over all of a request's tokens (decode blocks too).
- Hit length B * floor(min(LCP, n - 1) / B): the last prompt token is always recomputed, so the last block
  of a fully cached prompt is not a hit (vllm/v1/core/kv_cache_manager.py get_computed_blocks caps the
  lookup at n - 1 tokens).
- vllm/v1/core/kv_cache_manager.py `allocate_slots` caches up to min(computed + new, request.num_tokens):
  the last sampled token is never computed, so prompt + output[:-1] is cached.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from advisor.measure.prefix import GOLDEN, ROOT_HASH, PrefixBlocks, block_hashes, factorize, prefix_sharing

B = 16
RNG = np.random.default_rng(11)


def tokens(count: int, low: int = 1000) -> np.ndarray:
    return RNG.integers(low, low + 50_000, count).astype(np.int32)


def reference_block_hashes(ids: list[int], block_size: int) -> list[int]:
    """The documented formula, written out with Python integers: s = mix(s + (t + 1) * GOLDEN) mod 2**64."""
    mask = (1 << 64) - 1

    def mix(value: int) -> int:
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & mask
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & mask
        return value ^ (value >> 31)

    state, out = ROOT_HASH, []
    for start in range(0, len(ids) - block_size + 1, block_size):
        for token in ids[start : start + block_size]:
            state = mix((state + (token + 1) * GOLDEN) & mask)
        out.append(state)
    return out


def test_block_hashes_follow_the_formula_and_ignore_a_partial_block() -> None:
    ids = tokens(3 * B + 5)
    got = block_hashes(ids, B)
    assert got.dtype == np.uint64 and got.size == 3
    assert [int(h) for h in got] == reference_block_hashes([int(t) for t in ids], B)
    assert block_hashes(ids[: B - 1], B).size == 0


def test_block_hashes_depend_on_tokens_and_whole_prefix_not_dtype() -> None:
    ids = tokens(4 * B)
    base = block_hashes(ids, B)
    assert np.array_equal(block_hashes(ids.astype(np.int64), B), base)
    assert np.array_equal(block_hashes(list(map(int, ids)), B), base)
    changed = ids.copy()
    changed[B + 3] += 1  # inside block 1: block 0 unchanged, every later block differs (chaining)
    other = block_hashes(changed, B)
    assert other[0] == base[0] and (other[1:] != base[1:]).all()
    # The same block content after a different prefix hashes differently.
    moved = np.concatenate((tokens(B), ids[B : 2 * B]))
    assert block_hashes(moved, B)[1] != base[1]


def test_block_hashes_refuse_bad_input() -> None:
    with pytest.raises(ValueError):
        block_hashes(tokens(32), 0)
    with pytest.raises(ValueError):
        block_hashes(np.array([-1] * 16), B)
    with pytest.raises(ValueError):
        block_hashes(np.array([0.5] * 16), B)


def test_three_request_ceiling_by_hand() -> None:
    shared = tokens(B)
    a = np.concatenate((shared, tokens(4)))  # 20 tokens: first request, nothing cached
    b = np.concatenate((shared, tokens(14)))  # 30 tokens: block 0 cached -> hit 16
    c = np.concatenate((shared, tokens(4)))  # 20 tokens: block 0 cached -> hit 16
    result = prefix_sharing([PrefixBlocks.from_tokens(x, B) for x in (a, b, c)], B)
    assert (result.prompt_tokens, result.hit_tokens) == (70, 32)
    assert result.ceiling == pytest.approx(32 / 70)
    assert result.requests_with_hit_share == pytest.approx(2 / 3)
    assert list(result.per_request_hit_tokens) == [0, 16, 16]


def test_last_block_rule() -> None:
    one_block = tokens(B)
    two_blocks = tokens(2 * B)
    requests = [one_block, one_block, two_blocks, two_blocks]
    result = prefix_sharing([PrefixBlocks.from_tokens(x, B) for x in requests], B)
    # A one-block prompt seen before: min(16, 15) -> 0. A two-block one: min(32, 31) -> one block.
    assert list(result.per_request_hit_tokens) == [0, 0, 0, B]


def test_decode_blocks_are_hit_by_the_next_turn_only_when_outputs_are_cached() -> None:
    prompt, output = tokens(20), tokens(30)
    # Turn 2 repeats turn 1 and its answer, then asks more: 60 tokens.
    follow_up = np.concatenate((prompt, output, tokens(10)))
    requests = [PrefixBlocks.from_tokens(prompt, B, output), PrefixBlocks.from_tokens(follow_up, B)]
    # Cached after turn 1: prompt + output[:-1] = 49 tokens = 3 full blocks.
    assert prefix_sharing(requests, B, cache_outputs=True).hit_tokens == 48
    assert prefix_sharing(requests, B, cache_outputs=False).hit_tokens == B


def test_the_last_sampled_token_is_not_cached() -> None:
    prompt, output = tokens(B), tokens(B)
    follow_up = np.concatenate((prompt, output, tokens(5)))
    requests = [PrefixBlocks.from_tokens(prompt, B, output), PrefixBlocks.from_tokens(follow_up, B)]
    # prompt + output[:-1] = 31 tokens: only the prompt's block is full, so only 16 tokens hit.
    assert prefix_sharing(requests, B, cache_outputs=True).hit_tokens == B


def test_top_shared_prefixes_are_branch_points() -> None:
    system = tokens(2 * B)
    conversation = np.concatenate((system, tokens(B)))
    prompts = [
        np.concatenate((conversation, tokens(5))),
        np.concatenate((conversation, tokens(20))),
        np.concatenate((system, tokens(B + 3))),
        np.concatenate((system, tokens(3))),
        tokens(40),
    ]
    result = prefix_sharing([PrefixBlocks.from_tokens(p, B) for p in prompts], B)
    found = [(p.length_tokens, p.requests, p.token_volume) for p in result.top_prefixes]
    # The system prompt (2 blocks, 4 requests) and the conversation (3 blocks, 2 requests).
    assert found == [(2 * B, 4, 3 * 2 * B), (3 * B, 2, 3 * B)]
    assert result.top_prefixes[0].hash_hex == f"{int(block_hashes(system, B)[-1]):016x}"
    first_only = prefix_sharing([PrefixBlocks.from_tokens(p, B) for p in prompts], B, top=1)
    assert [p.requests for p in first_only.top_prefixes] == [4]


def test_empty_and_single() -> None:
    empty = prefix_sharing([], B)
    assert empty.requests == 0 and empty.ceiling is None and empty.top_prefixes == ()
    assert empty.to_dict()["requests_with_hit_share"] is None
    single = prefix_sharing([PrefixBlocks.from_tokens(tokens(100), B)], B)
    assert single.ceiling == 0.0 and single.top_prefixes == ()
    short = prefix_sharing([PrefixBlocks.from_tokens(tokens(3), B)] * 2, B)
    assert short.hit_tokens == 0 and short.prompt_tokens == 6


def test_trace_block_ids_with_a_partial_last_block() -> None:
    # Two 1000-token prompts with B = 512: ids cover 2 blocks, the second partial. Identical prompts hit
    # one full block; a prompt extending the first shares block 0 only.
    requests = [
        PrefixBlocks.from_block_ids([1, 2], 1000),
        PrefixBlocks.from_block_ids([1, 2], 1000),
        PrefixBlocks.from_block_ids([1, 3, 4], 1300),
    ]
    result = prefix_sharing(requests, 512)
    assert list(result.per_request_hit_tokens) == [0, 512, 512]
    # Volumes: 512 * (3 - 1) = 1024 before 1000 * (2 - 1) = 1000.
    assert [(p.length_tokens, p.requests) for p in result.top_prefixes] == [(512, 3), (1000, 2)]


def test_mooncake_ceiling_equals_an_independent_computation(real_file) -> None:
    """The Mooncake conversation trace: hash_ids of 512-token blocks, file order = arrival order."""
    records = [json.loads(line) for line in real_file("mooncake_conversation_trace.jsonl").open()]
    seen: set[int] = set()
    expected_hits = 0
    for record in records:
        ids, n = record["hash_ids"], record["input_length"]
        leading = next((i for i, h in enumerate(ids) if h not in seen), len(ids))
        expected_hits += 512 * (min(leading * 512, n, n - 1) // 512)
        seen.update(ids)
    result = prefix_sharing(
        [PrefixBlocks.from_block_ids(r["hash_ids"], r["input_length"]) for r in records], 512
    )
    assert result.requests == len(records) == 12031
    assert result.prompt_tokens == sum(r["input_length"] for r in records)
    assert result.hit_tokens == expected_hits
    assert 0 < result.ceiling < 1


@pytest.mark.parametrize("values", [
    np.zeros(0, np.uint64),
    np.array([7, 7, 7], np.uint64),
    np.arange(50, dtype=np.uint64)[::-1] % 13,  # small ids, as a trace's block ids can be
    np.random.default_rng(1).integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True) | np.uint64(1 << 63),
    np.random.default_rng(2).choice(np.array([0, 2**64 - 1, 5, 2**63], np.uint64), 1000),
])
def test_factorize_numbers_values_in_order_of_first_appearance(values):
    """The same groups, values and first positions as np.unique, ids in first-appearance order."""
    ids, distinct, first = factorize(values)
    assert (distinct[ids] == values).all()
    assert (first == np.sort(first)).all() and (values[first] == distinct).all()
    known, unique_first, inverse, counts = np.unique(values, return_index=True, return_inverse=True,
                                                     return_counts=True)
    assert distinct.size == known.size and sorted(first.tolist()) == sorted(unique_first.tolist())
    assert (np.bincount(ids, minlength=distinct.size) == counts[np.searchsorted(known, distinct)]).all()
