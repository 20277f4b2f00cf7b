"""Plain-Python port of arctic-inference 0.1.1's suffix tree (csrc/suffix_decoding/suffix_tree.cc) and of
SuffixDecodingCache (suffix_decoding/cache.py) as vLLM drives it (vllm/v1/spec_decode/suffix_decoding.py).

The readable reference for the compiled port in advisor/measure/suffix_tree.py: tests/test_suffix.py checks
the two against each other, tests/test_replay_vllm.py checks this one against the real extension step by
step. Bookkeeping that cannot change a draft is left out (endpoints, reference re-targeting on removal:
removed sequences' tokens are kept, so references stay valid).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from advisor.measure.ngram import (
    ACCEPTED, COUNTER_COLUMNS, DECODE_STEPS, DRAFT_TOKENS, DRAFTS, LAST_CONTEXT, MAX_SLOTS, NO_LIMIT,
    OUTPUT_TOKENS, TAIL_AT, TAIL_LEN,
)

_F32 = np.float32


class _Group:
    """A run of equal-count siblings; `head` is its first member (suffix_tree.h, struct Group)."""

    __slots__ = ("head", "next", "prev")

    def __init__(self, head: _Node):
        self.head = head
        self.next: _Group | None = None
        self.prev: _Group | None = None


class _Node:
    """A path-compressed run of `length` tokens, read from sequence `ref_seq` at `ref_idx`."""

    __slots__ = (
        "count", "token", "length", "ref_seq", "ref_idx", "parent", "children",
        "head_child", "tail_child", "next_sibling", "prev_sibling", "group",
    )

    def __init__(self, count: int = 0, token: int = 0, length: int = 0, ref_seq: int = 0, ref_idx: int = -1):
        self.count = count
        self.token = token
        self.length = length
        self.ref_seq = ref_seq
        self.ref_idx = ref_idx
        self.parent: _Node | None = None
        self.children: dict[int, _Node] = {}
        self.head_child: _Node | None = None
        self.tail_child: _Node | None = None
        self.next_sibling: _Node | None = None
        self.prev_sibling: _Node | None = None
        self.group: _Group | None = None


def _remove_from_siblings(node: _Node) -> None:
    group = node.group
    if group.head is node:
        if node.next_sibling is not None and node.next_sibling.count == node.count:
            group.head = node.next_sibling
            node.group = None
        else:
            if group.prev is not None:
                group.prev.next = group.next
            if group.next is not None:
                group.next.prev = group.prev
            group.prev = group.next = None
    else:
        node.group = None
    if node.next_sibling is not None:
        node.next_sibling.prev_sibling = node.prev_sibling
    else:
        node.parent.tail_child = node.prev_sibling
    if node.prev_sibling is not None:
        node.prev_sibling.next_sibling = node.next_sibling
    else:
        node.parent.head_child = node.next_sibling
    node.prev_sibling = node.next_sibling = None


def _insert_into_siblings_before(node: _Node, other: _Node) -> None:
    if other.prev_sibling is not None:
        other.prev_sibling.next_sibling = node
    else:
        node.parent.head_child = node
    node.next_sibling = other
    node.prev_sibling = other.prev_sibling
    other.prev_sibling = node
    prev_sibling = node.prev_sibling
    if prev_sibling is not None and node.count == prev_sibling.count:
        node.group = prev_sibling.group
    elif node.count == other.count:
        node.group = other.group
        node.group.head = node
    else:
        group = node.group
        if group is None:
            group = node.group = _Group(node)
        if prev_sibling is not None:
            group.prev = prev_sibling.group
            group.prev.next = group
        group.next = other.group
        group.next.prev = group


def _insert_into_siblings_after(node: _Node, other: _Node) -> None:
    if other.next_sibling is not None:
        other.next_sibling.prev_sibling = node
    else:
        node.parent.tail_child = node
    node.prev_sibling = other
    node.next_sibling = other.next_sibling
    other.next_sibling = node
    next_sibling = node.next_sibling
    if next_sibling is not None and node.count == next_sibling.count:
        node.group = next_sibling.group
        if node.group.head is next_sibling:
            node.group.head = node
    elif node.count == other.count:
        node.group = other.group
    else:
        group = node.group
        if group is None:
            group = node.group = _Group(node)
        if next_sibling is not None:
            group.next = next_sibling.group
            group.next.prev = group
        group.prev = other.group
        group.prev.next = group


def _replace_in_siblings(old: _Node, new: _Node) -> None:
    if old.next_sibling is not None:
        old.next_sibling.prev_sibling = new
    else:
        old.parent.tail_child = new
    if old.prev_sibling is not None:
        old.prev_sibling.next_sibling = new
    else:
        old.parent.head_child = new
    new.prev_sibling = old.prev_sibling
    new.next_sibling = old.next_sibling
    old.prev_sibling = old.next_sibling = None
    group = old.group
    if group.head is old:
        group.head = new
    new.group = group
    old.group = None


def _increment_count(node: _Node) -> None:
    if node.parent is None:
        node.count += 1
        return
    if node.prev_sibling is None or node.prev_sibling.count > node.count + 1:
        if node.next_sibling is None or node.next_sibling.count < node.count:
            node.count += 1
        else:
            orig = node.group
            orig.head = node.next_sibling
            new = _Group(node)
            new.next = orig
            if orig.prev is not None:
                new.prev = orig.prev
                new.prev.next = new
            orig.prev = new
            node.group = new
            node.count += 1
    else:
        other = node.prev_sibling.group.head
        _remove_from_siblings(node)
        node.count += 1
        _insert_into_siblings_before(node, other)


def _decrement_count(node: _Node) -> None:
    if node.parent is None:
        node.count -= 1
        return
    if node.next_sibling is None or node.next_sibling.count < node.count - 1:
        if node.prev_sibling is None or node.prev_sibling.count > node.count:
            node.count -= 1
        else:
            orig = node.group
            new = _Group(node)
            new.prev = orig
            if orig.next is not None:
                new.next = orig.next
                new.next.prev = new
            orig.next = new
            node.group = new
            node.count -= 1
    elif node.next_sibling.count == node.count - 1:
        node.next_sibling.group.head = node
        if node.group.head is node:
            group = node.group
            if group.prev is not None:
                group.prev.next = group.next
            group.next.prev = group.prev
        node.group = node.next_sibling.group
        node.count -= 1
    else:
        other_group = node.group.next
        _remove_from_siblings(node)
        node.count -= 1
        if other_group is None:
            _insert_into_siblings_after(node, node.parent.tail_child)
        else:
            _insert_into_siblings_before(node, other_group.head)


class SuffixTree:
    """arctic-inference's SuffixTree (suffix_tree.cc): suffixes of several sequences up to `max_depth`."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = _Node()
        self.seqs: dict[int, list[int]] = {}  # kept after `remove` so that node references stay readable
        self.active: dict[int, list[_Node]] = {}
        self.live: set[int] = set()

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(seq_id, int(token))

    def append(self, seq_id: int, token: int) -> None:
        """suffix_tree.cc `SuffixTree::append`: extend every active suffix of the sequence by `token`."""
        if seq_id not in self.live:
            self.live.add(seq_id)
            self.seqs[seq_id] = []
            self.active[seq_id] = []
        seq = self.seqs[seq_id]
        active = self.active[seq_id]
        root = self.root
        active.append(root)
        root.count += 1
        if len(active) > self.max_depth:
            del active[0]
        seq.append(token)
        seq_len = len(seq)
        for position, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                if node.count == 1 and node is not root:
                    node.length += 1  # case 1a: a leaf only this suffix reaches grows
                else:
                    new_child = _Node(1, token, 1, seq_id, seq_len - 1)
                    new_child.parent = node
                    node.children[token] = new_child
                    if len(node.children) == 1:
                        node.head_child = node.tail_child = new_child
                        new_child.group = _Group(new_child)
                    else:
                        _insert_into_siblings_after(new_child, node.tail_child)
                    active[position] = new_child
            elif node.count == child.count + 1 and node is not root:
                if child.length == 1:
                    # case 2a: fuse the node with its only child
                    child.count += 1
                    child.token = node.token
                    child.length = node.length + 1
                    child.ref_seq = seq_id
                    child.ref_idx = seq_len - child.length
                    child.parent = node.parent
                    _replace_in_siblings(node, child)
                    node.parent.children[child.token] = child
                    active[position] = child
                else:
                    # case 2b: the node grows by one token into its only child
                    node.length += 1
                    node.ref_seq = seq_id
                    node.ref_idx = seq_len - node.length
                    child.length -= 1
                    child.ref_idx += 1
                    child.token = self.seqs[child.ref_seq][child.ref_idx]
                    if child.token != token:
                        del node.children[token]
                        node.children[child.token] = child
            elif child.length == 1:
                _increment_count(child)  # case 3a
                active[position] = child
            else:
                # case 3b: split the child after its first token
                new_node = _Node(child.count, token, 1, seq_id, seq_len - 1)
                new_node.parent = node
                _replace_in_siblings(child, new_node)
                node.children[token] = new_node
                child.length -= 1
                child.ref_idx += 1
                child.token = self.seqs[child.ref_seq][child.ref_idx]
                new_node.children[child.token] = child
                child.parent = new_node
                new_node.head_child = new_node.tail_child = child
                child.group = _Group(child)
                _increment_count(new_node)
                active[position] = new_node

    def remove(self, seq_id: int) -> None:
        """suffix_tree.cc `SuffixTree::remove`: drop every suffix of the sequence (counts, empty nodes)."""
        seq = self.seqs[seq_id]
        root = self.root
        for start in range(len(seq)):
            node = root
            node.count -= 1
            idx = start
            while idx < len(seq):
                child = node.children.get(seq[idx])
                if child is None:
                    break
                if child.count > 1:
                    _decrement_count(child)
                else:
                    _remove_from_siblings(child)
                    del node.children[seq[idx]]
                    break
                idx += child.length
                node = child
            if node is not root and len(node.children) == 1:
                only = next(iter(node.children.values()))
                if node.count == only.count:
                    only.token = node.token
                    only.length += node.length
                    only.ref_idx -= node.length
                    only.parent = node.parent
                    _replace_in_siblings(node, only)
                    node.parent.children[only.token] = only
        self.live.discard(seq_id)
        del self.active[seq_id]

    def _match(self, context: Sequence[int]) -> tuple[_Node | None, int]:
        node = self.root
        idx = 0
        ref: list[int] = []
        ref_idx = 0
        for token in context:
            if idx >= node.length:
                node = node.children.get(token)
                if node is None:
                    return None, -1
                ref = self.seqs[node.ref_seq]
                ref_idx = node.ref_idx
                idx = 0
            if ref[ref_idx + idx] != token:
                return None, -1
            idx += 1
        return node, idx

    def _path(self, node: _Node, idx: int, max_tokens: int, min_prob: np.float32) -> tuple[list[int], np.float32]:
        tokens: list[int] = []
        score = _F32(0.0)
        prob = _F32(1.0)
        ref = self.seqs[node.ref_seq]
        ref_idx = node.ref_idx
        while len(tokens) < max_tokens and prob >= min_prob:
            if idx < node.length:
                tokens.append(ref[ref_idx + idx])
                score = _F32(score + prob)
                idx += 1
            else:
                child = node.head_child
                if child is None:
                    break
                prob = _F32(prob * _F32(_F32(child.count) / _F32(node.count)))
                node = child
                ref = self.seqs[node.ref_seq]
                ref_idx = node.ref_idx
                idx = 0
        return tokens, score

    def speculate(
        self, context: Sequence[int], max_spec_tokens: int, max_spec_factor: float, min_token_prob: float
    ) -> tuple[list[int], np.float32, int]:
        """(draft tokens, float32 score, match length) as `SuffixTree::speculate` with use_tree_spec=False."""
        best: list[int] = []
        best_score = _F32(0.0)
        best_match = 0
        factor = _F32(max_spec_factor)
        min_prob = _F32(min_token_prob)
        for match_len in range(1, len(context)):
            node, idx = self._match(context[len(context) - match_len :])
            if node is None:
                break
            limit = int(float(_F32(_F32(match_len) * factor)) + 1e-6)
            max_tokens = max(min(max_spec_tokens, limit), 0)
            tokens, score = self._path(node, idx, max_tokens, min_prob)
            if score >= best_score:
                best, best_score, best_match = tokens, score, match_len
        return best, best_score, best_match


class SuffixCache:
    """arctic-inference's SuffixDecodingCache as vLLM drives it: per-request trees and a FIFO global tree."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int):
        self.max_tree_depth = max_tree_depth
        self.max_cached_requests = max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.cached: OrderedDict[int, None] = OrderedDict()  # seq ids in the global tree, oldest first
        self.next_seq_id = 0

    def start(self, prompt: Sequence[int]) -> tuple[SuffixTree, int | None]:
        """A request's local tree over its prompt, and its slot in the global tree (evicting the oldest)."""
        local = SuffixTree(self.max_tree_depth)
        local.extend(0, prompt)
        if self.max_cached_requests == 0:
            return local, None
        seq_id = self.next_seq_id
        self.next_seq_id += 1
        self.cached[seq_id] = None
        while len(self.cached) > self.max_cached_requests:
            oldest, _ = self.cached.popitem(last=False)
            self.global_tree.remove(oldest)
        return local, seq_id

    def add(self, local: SuffixTree | None, seq_id: int | None, tokens: Sequence[int]) -> None:
        if local is not None:
            local.extend(0, tokens)
        if seq_id is not None and seq_id in self.cached:
            self.global_tree.extend(seq_id, tokens)

    def speculate(
        self, local: SuffixTree, pattern: Sequence[int], max_spec_tokens: int, max_spec_factor: float,
        min_token_prob: float,
    ) -> list[int]:
        """cache.py `speculate`: the per-request draft unless the global one scores strictly higher."""
        mine, my_score, _ = local.speculate(pattern, max_spec_tokens, max_spec_factor, min_token_prob)
        theirs, their_score, _ = self.global_tree.speculate(pattern, max_spec_tokens, max_spec_factor, min_token_prob)
        return mine if my_score >= their_score else theirs


def reference_replay(
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
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"need k >= 1, got {ks}")
    limit = NO_LIMIT if max_model_len is None else int(max_model_len)
    cache = SuffixCache(max_tree_depth, max_cached_requests)
    wanted = np.zeros(len(requests), dtype=bool)
    wanted[np.arange(len(requests)) if speculate_for is None else speculate_for] = True
    counters = np.zeros((len(requests), len(ks), COUNTER_COLUMNS), dtype=np.int64)
    per_pos = np.zeros((len(ks), max(ks)), dtype=np.int64)
    for r, (prompt_ids, output_ids) in enumerate(requests):
        prompt = [int(v) for v in prompt_ids]
        output = [int(v) for v in output_ids]
        if not output:
            continue
        counters[r, :, OUTPUT_TOKENS] = len(output)
        counters[r, :, LAST_CONTEXT] = len(prompt)
        counters[r, :, MAX_SLOTS] = len(prompt)
        if not wanted[r]:
            _, seq_id = cache.start(())
            cache.add(None, seq_id, output)
            continue
        local, seq_id = cache.start(prompt)
        context = prompt + output
        # next_step[ki]: output tokens emitted when k's next decode step runs (1: the prefill's token).
        next_step = [1] * len(ks)
        for emitted in range(1, len(output)):
            cache.add(local, seq_id, output[emitted - 1 : emitted])
            t = len(prompt) + emitted
            for ki, k in enumerate(ks):
                if next_step[ki] != emitted:
                    continue
                row = counters[r, ki]
                row[DECODE_STEPS] += 1
                row[LAST_CONTEXT] = t
                row[MAX_SLOTS] = max(row[MAX_SLOTS], t)
                accepted = 0
                if t < limit:
                    pattern = context[max(0, t - max_tree_depth) : t]
                    draft = cache.speculate(local, pattern, min(k, limit - t - 1), max_spec_factor, min_token_prob)
                    if draft:
                        while (accepted < len(draft) and t + accepted < len(context)
                               and draft[accepted] == context[t + accepted]):
                            accepted += 1
                        if accepted == len(context) - t and len(draft) > accepted:
                            row[TAIL_AT] = accepted
                            row[TAIL_LEN] = len(draft)
                        row[MAX_SLOTS] = max(row[MAX_SLOTS], t + len(draft))
                        row[DRAFTS] += 1
                        row[DRAFT_TOKENS] += len(draft)
                        row[ACCEPTED] += accepted
                        per_pos[ki, :accepted] += 1
                next_step[ki] = emitted + accepted + 1
        cache.add(local, seq_id, output[-1:])
    return counters, per_pos
