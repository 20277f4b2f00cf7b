"""Exact offline replay of vLLM's suffix decoding proposer (arctic-inference 0.1.1's SuffixDecodingCache).

vLLM (vllm/v1/spec_decode/suffix_decoding.py) keeps one suffix tree per running request over its prompt and
output, and one global tree over the outputs of up to `suffix_decoding_max_cached_requests` requests (FIFO;
0 disables it), a request's output being added as it is generated. At each step it takes the last
`max_tree_depth` tokens of the context as the pattern and asks both trees (arctic_inference/suffix_decoding/
cache.py, `speculate`) for a draft of at most min(k, max_model_len - t - 1) tokens; the per-request draft
wins ties of score. In one tree (csrc/suffix_decoding/suffix_tree.cc, `SuffixTree::speculate`), for every
match length m = 1 .. len(pattern) - 1 whose last m pattern tokens are a path from the root, a greedy path
walk from there follows the child with the highest count (ties: sibling-list order, see below), multiplying
a float32 probability by child count / parent count and stopping below `min_token_prob`, for at most
min(max_spec_tokens, int(m * max_spec_factor + 1e-6)) tokens; the draft with the highest float32 sum of
probabilities wins, a longer match on ties.

The draft depends on the order of equal-count siblings, which the C++ code maintains in a linked list with
count groups (a node whose count rises joins the front or the back of its new count group depending on
where it stood). advisor/measure/suffix_tree.py ports the tree and those list operations literally to numba;
tests/suffix_reference.py is the same port in plain Python. tests/test_suffix.py checks the two against each
other, tests/test_replay_vllm.py checks drafts and replay counters against the real arctic_inference
extension.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.measure.ngram import COUNTER_COLUMNS, NO_LIMIT, pack_requests
from advisor.measure.suffix_tree import _replay_kernel


def replay_suffix(
    requests: Sequence[tuple[np.ndarray, np.ndarray]],
    ks: Sequence[int],
    max_tree_depth: int = 24,
    max_cached_requests: int = 10000,
    max_spec_factor: float = 1.0,
    min_token_prob: float = 0.1,
    max_model_len: int | None = None,
    speculate_for: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Replays (prompt_ids, output_ids) requests one after another in the given (arrival) order, for every
    k in `ks` in one pass.

    The trees' state when the context holds t tokens does not depend on k (tokens are appended one by one,
    whatever the step sizes), so the trees are built once and each k keeps its own step positions.
    Returns (counters[r, ki, :] with the columns of `advisor.measure.ngram`, per_pos[ki, i]). Requests not
    in `speculate_for` (default: all) only feed their output to the global tree, which keeps a sampled
    replay exact for the sampled requests. Requests overlapping in time would also see each other's
    partial outputs in vLLM; a sequential replay does not model that.
    """
    ks = np.asarray([int(k) for k in ks], dtype=np.int64)
    if ks.size == 0 or ks.min() < 1:
        raise ValueError(f"need k >= 1, got {ks.tolist()}")
    if max_tree_depth < 1 or max_cached_requests < 0:
        raise ValueError("need max_tree_depth >= 1 and max_cached_requests >= 0")
    count = len(requests)
    tokens, offsets, prompt_lens = pack_requests(requests)
    wanted = np.zeros(count, dtype=np.bool_)
    wanted[np.arange(count) if speculate_for is None else speculate_for] = True
    counters = np.zeros((count, ks.size, COUNTER_COLUMNS), dtype=np.int64)
    per_pos = np.zeros((ks.size, int(ks.max())), dtype=np.int64)
    _replay_kernel(
        tokens, offsets, prompt_lens, wanted, ks, int(max_tree_depth), int(max_cached_requests),
        np.float32(max_spec_factor), np.float32(min_token_prob),
        NO_LIMIT if max_model_len is None else int(max_model_len), counters, per_pos,
    )
    return counters, per_pos
