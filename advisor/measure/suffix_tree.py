"""Compiled (numba) port of arctic-inference 0.1.1's suffix tree and of the replay loop that drives it.

The same operations as tests/suffix_reference.py (itself a literal port of csrc/suffix_decoding/
suffix_tree.cc): nodes and count groups live in int64 arrays, one row per id so that a node's fields share
cache lines (-1 for null); children in one open-addressing hash table keyed by (parent << 32) | token
(linear probing, backward-shift deletion: faster than numba's typed dict); free lists recycle removed nodes
and groups; sequences are read from the caller's token array. Speculation differs in form only: one walk
per tree and step serves every k due there (`_speculate_paths`, `_pick`), with speculate's drafts and
scores. tests/test_suffix.py checks it against the Python port, tests/test_replay_vllm.py against the real
extension.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from advisor.measure.ngram import (
    LAST_CONTEXT, MAX_SLOTS, OUTPUT_TOKENS, count_step,
)

COUNT, TOKEN, LENGTH, REF_SEQ, REF_IDX, PARENT, HEAD, TAIL, NEXT, PREV, GROUP, NCHILD = range(12)
NODE_FIELDS = 12
G_HEAD, G_NEXT, G_PREV, G_REFS = range(4)
# meta: node high-water mark, free-node stack size, group high-water mark, free-group stack size,
# active sequence, start and size of the active-node ring.
M_NODES, M_NFREE, M_GROUPS, M_GFREE, M_SEQ, M_ASTART, M_ASIZE, M_ENTRIES = range(8)
KEY_SHIFT = 32


_MIX = np.uint64(0xFF51AFD7ED558CCD)  # MurmurHash3's 64-bit finalizer constant
_SHIFT = np.uint64(33)


@njit(cache=True)
def _slot(key, mask):
    """Home slot of a key: every key bit must reach the low bits (parent and token both vary)."""
    x = np.uint64(key)
    x = (x ^ (x >> _SHIFT)) * _MIX
    x = x ^ (x >> _SHIFT)
    return np.int64(x & np.uint64(mask))


@njit(cache=True)
def _lookup(table, key):
    """The child stored under `key`, or -1."""
    mask = table.shape[0] - 1
    i = _slot(key, mask)
    while table[i, 0] != -1:
        if table[i, 0] == key:
            return table[i, 1]
        i = (i + 1) & mask
    return -1


@njit(cache=True)
def _put(tree, key, value):
    table, meta = tree[3], tree[2]
    mask = table.shape[0] - 1
    i = _slot(key, mask)
    while table[i, 0] != -1:
        if table[i, 0] == key:
            table[i, 1] = value
            return
        i = (i + 1) & mask
    table[i, 0] = key
    table[i, 1] = value
    meta[M_ENTRIES] += 1


@njit(cache=True)
def _pop(tree, key):
    """Delete `key` if present, shifting later entries of its probe run back (no tombstones)."""
    table, meta = tree[3], tree[2]
    mask = table.shape[0] - 1
    i = _slot(key, mask)
    while table[i, 0] != key:
        if table[i, 0] == -1:
            return
        i = (i + 1) & mask
    table[i, 0] = -1
    meta[M_ENTRIES] -= 1
    j = i
    while True:
        j = (j + 1) & mask
        if table[j, 0] == -1:
            return
        home = _slot(table[j, 0], mask)
        # Move the entry at j into the hole at i unless its home lies cyclically in (i, j].
        if (i <= j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            table[i, 0] = table[j, 0]
            table[i, 1] = table[j, 1]
            table[j, 0] = -1
            i = j


@njit(cache=True)
def _new_table(entries):
    size = 16
    while size < 2 * entries:
        size *= 2
    return np.full((size, 2), -1, np.int64)


@njit(cache=True)
def _make_tree(node_capacity, num_seqs, max_depth):
    nodes = np.full((node_capacity, NODE_FIELDS), -1, np.int64)
    groups = np.full((2 * node_capacity, 4), -1, np.int64)
    meta = np.zeros(8, np.int64)
    meta[M_SEQ] = -1
    children = _new_table(node_capacity)
    free_nodes = np.empty(node_capacity, np.int64)
    free_groups = np.empty(2 * node_capacity, np.int64)
    seq_base = np.zeros(num_seqs, np.int64)
    seq_len = np.zeros(num_seqs, np.int64)
    active = np.empty(max_depth, np.int64)
    nodes[0, COUNT] = 0  # the root: id 0, length 0
    nodes[0, LENGTH] = 0
    nodes[0, NCHILD] = 0
    nodes[0, REF_SEQ] = 0
    meta[M_NODES] = 1
    return (nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active)


@njit(cache=True)
def _reserve(tree, room):
    """The tree with space for `room` more nodes and 2 * room more groups (arrays doubled when short)."""
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    if 2 * (meta[M_ENTRIES] + room) > children.shape[0]:
        table = _new_table(2 * (meta[M_ENTRIES] + room))
        mask = table.shape[0] - 1
        for i in range(children.shape[0]):
            key = children[i, 0]
            if key != -1:
                j = _slot(key, mask)
                while table[j, 0] != -1:
                    j = (j + 1) & mask
                table[j, 0] = key
                table[j, 1] = children[i, 1]
        children = table
        tree = (nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active)
    if meta[M_NODES] + room <= nodes.shape[0] and meta[M_GROUPS] + 2 * room <= groups.shape[0]:
        return tree
    size = max(2 * nodes.shape[0], meta[M_NODES] + room + 16)
    new_nodes = np.full((size, NODE_FIELDS), -1, np.int64)
    new_nodes[: nodes.shape[0]] = nodes
    new_free = np.empty(size, np.int64)
    new_free[: free_nodes.shape[0]] = free_nodes
    gsize = max(2 * groups.shape[0], meta[M_GROUPS] + 2 * room + 16)
    new_groups = np.full((gsize, 4), -1, np.int64)
    new_groups[: groups.shape[0]] = groups
    new_gfree = np.empty(gsize, np.int64)
    new_gfree[: free_groups.shape[0]] = free_groups
    return (new_nodes, new_groups, meta, children, new_free, new_gfree, seq_base, seq_len, active)


@njit(cache=True)
def _new_node(tree, count, token, length, ref_seq, ref_idx):
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    if meta[M_NFREE] > 0:
        meta[M_NFREE] -= 1
        node = free_nodes[meta[M_NFREE]]
    else:
        node = meta[M_NODES]
        meta[M_NODES] += 1
    nodes[node, :] = -1
    nodes[node, COUNT] = count
    nodes[node, TOKEN] = token
    nodes[node, LENGTH] = length
    nodes[node, REF_SEQ] = ref_seq
    nodes[node, REF_IDX] = ref_idx
    nodes[node, NCHILD] = 0
    return node


@njit(cache=True)
def _new_group(tree, head):
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    if meta[M_GFREE] > 0:
        meta[M_GFREE] -= 1
        group = free_groups[meta[M_GFREE]]
    else:
        group = meta[M_GROUPS]
        meta[M_GROUPS] += 1
    groups[group, G_HEAD] = head
    groups[group, G_NEXT] = -1
    groups[group, G_PREV] = -1
    groups[group, G_REFS] = 0
    return group


@njit(cache=True)
def _set_group(tree, node, group):
    """node.group = group with shared_ptr semantics: a group no node points to any more is freed."""
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    old = nodes[node, GROUP]
    if old == group:
        return
    if group >= 0:
        groups[group, G_REFS] += 1
    nodes[node, GROUP] = group
    if old >= 0:
        groups[old, G_REFS] -= 1
        if groups[old, G_REFS] == 0:
            free_groups[meta[M_GFREE]] = old
            meta[M_GFREE] += 1


@njit(cache=True)
def _remove_from_siblings(tree, node):
    nodes, groups = tree[0], tree[1]
    group = nodes[node, GROUP]
    nxt, prv, parent = nodes[node, NEXT], nodes[node, PREV], nodes[node, PARENT]
    if groups[group, G_HEAD] == node:
        if nxt >= 0 and nodes[nxt, COUNT] == nodes[node, COUNT]:
            groups[group, G_HEAD] = nxt
            _set_group(tree, node, -1)
        else:
            if groups[group, G_PREV] >= 0:
                groups[groups[group, G_PREV], G_NEXT] = groups[group, G_NEXT]
            if groups[group, G_NEXT] >= 0:
                groups[groups[group, G_NEXT], G_PREV] = groups[group, G_PREV]
            groups[group, G_PREV] = -1
            groups[group, G_NEXT] = -1
    else:
        _set_group(tree, node, -1)
    if nxt >= 0:
        nodes[nxt, PREV] = prv
    else:
        nodes[parent, TAIL] = prv
    if prv >= 0:
        nodes[prv, NEXT] = nxt
    else:
        nodes[parent, HEAD] = nxt
    nodes[node, PREV] = -1
    nodes[node, NEXT] = -1


@njit(cache=True)
def _insert_before(tree, node, other):
    nodes, groups = tree[0], tree[1]
    parent = nodes[node, PARENT]
    if nodes[other, PREV] >= 0:
        nodes[nodes[other, PREV], NEXT] = node
    else:
        nodes[parent, HEAD] = node
    nodes[node, NEXT] = other
    nodes[node, PREV] = nodes[other, PREV]
    nodes[other, PREV] = node
    prv = nodes[node, PREV]
    if prv >= 0 and nodes[node, COUNT] == nodes[prv, COUNT]:
        _set_group(tree, node, nodes[prv, GROUP])
    elif nodes[node, COUNT] == nodes[other, COUNT]:
        _set_group(tree, node, nodes[other, GROUP])
        groups[nodes[node, GROUP], G_HEAD] = node
    else:
        group = nodes[node, GROUP]
        if group < 0:
            group = _new_group(tree, node)
            _set_group(tree, node, group)
        if prv >= 0:
            groups[group, G_PREV] = nodes[prv, GROUP]
            groups[groups[group, G_PREV], G_NEXT] = group
        groups[group, G_NEXT] = nodes[other, GROUP]
        groups[groups[group, G_NEXT], G_PREV] = group


@njit(cache=True)
def _insert_after(tree, node, other):
    nodes, groups = tree[0], tree[1]
    parent = nodes[node, PARENT]
    if nodes[other, NEXT] >= 0:
        nodes[nodes[other, NEXT], PREV] = node
    else:
        nodes[parent, TAIL] = node
    nodes[node, PREV] = other
    nodes[node, NEXT] = nodes[other, NEXT]
    nodes[other, NEXT] = node
    nxt = nodes[node, NEXT]
    if nxt >= 0 and nodes[node, COUNT] == nodes[nxt, COUNT]:
        _set_group(tree, node, nodes[nxt, GROUP])
        if groups[nodes[node, GROUP], G_HEAD] == nxt:
            groups[nodes[node, GROUP], G_HEAD] = node
    elif nodes[node, COUNT] == nodes[other, COUNT]:
        _set_group(tree, node, nodes[other, GROUP])
    else:
        group = nodes[node, GROUP]
        if group < 0:
            group = _new_group(tree, node)
            _set_group(tree, node, group)
        if nxt >= 0:
            groups[group, G_NEXT] = nodes[nxt, GROUP]
            groups[groups[group, G_NEXT], G_PREV] = group
        groups[group, G_PREV] = nodes[other, GROUP]
        groups[groups[group, G_PREV], G_NEXT] = group


@njit(cache=True)
def _replace_in_siblings(tree, old, new):
    nodes, groups = tree[0], tree[1]
    parent = nodes[old, PARENT]
    if nodes[old, NEXT] >= 0:
        nodes[nodes[old, NEXT], PREV] = new
    else:
        nodes[parent, TAIL] = new
    if nodes[old, PREV] >= 0:
        nodes[nodes[old, PREV], NEXT] = new
    else:
        nodes[parent, HEAD] = new
    nodes[new, PREV] = nodes[old, PREV]
    nodes[new, NEXT] = nodes[old, NEXT]
    nodes[old, PREV] = -1
    nodes[old, NEXT] = -1
    group = nodes[old, GROUP]
    if groups[group, G_HEAD] == old:
        groups[group, G_HEAD] = new
    _set_group(tree, new, group)
    _set_group(tree, old, -1)


@njit(cache=True)
def _increment(tree, node):
    nodes, groups = tree[0], tree[1]
    if nodes[node, PARENT] < 0:
        nodes[node, COUNT] += 1
        return
    prv, nxt, count = nodes[node, PREV], nodes[node, NEXT], nodes[node, COUNT]
    if prv < 0 or nodes[prv, COUNT] > count + 1:
        if nxt < 0 or nodes[nxt, COUNT] < count:
            nodes[node, COUNT] += 1
        else:
            orig = nodes[node, GROUP]
            groups[orig, G_HEAD] = nxt
            new = _new_group(tree, node)
            groups[new, G_NEXT] = orig
            if groups[orig, G_PREV] >= 0:
                groups[new, G_PREV] = groups[orig, G_PREV]
                groups[groups[new, G_PREV], G_NEXT] = new
            groups[orig, G_PREV] = new
            _set_group(tree, node, new)
            nodes[node, COUNT] += 1
    else:
        other = groups[nodes[prv, GROUP], G_HEAD]
        _remove_from_siblings(tree, node)
        nodes[node, COUNT] += 1
        _insert_before(tree, node, other)


@njit(cache=True)
def _decrement(tree, node):
    nodes, groups = tree[0], tree[1]
    if nodes[node, PARENT] < 0:
        nodes[node, COUNT] -= 1
        return
    prv, nxt, count = nodes[node, PREV], nodes[node, NEXT], nodes[node, COUNT]
    if nxt < 0 or nodes[nxt, COUNT] < count - 1:
        if prv < 0 or nodes[prv, COUNT] > count:
            nodes[node, COUNT] -= 1
        else:
            orig = nodes[node, GROUP]
            new = _new_group(tree, node)
            groups[new, G_PREV] = orig
            if groups[orig, G_NEXT] >= 0:
                groups[new, G_NEXT] = groups[orig, G_NEXT]
                groups[groups[new, G_NEXT], G_PREV] = new
            groups[orig, G_NEXT] = new
            _set_group(tree, node, new)
            nodes[node, COUNT] -= 1
    elif nodes[nxt, COUNT] == count - 1:
        groups[nodes[nxt, GROUP], G_HEAD] = node
        group = nodes[node, GROUP]
        if groups[group, G_HEAD] == node:
            if groups[group, G_PREV] >= 0:
                groups[groups[group, G_PREV], G_NEXT] = groups[group, G_NEXT]
            groups[groups[group, G_NEXT], G_PREV] = groups[group, G_PREV]
        _set_group(tree, node, nodes[nxt, GROUP])
        nodes[node, COUNT] -= 1
    else:
        other_group = groups[nodes[node, GROUP], G_NEXT]
        _remove_from_siblings(tree, node)
        nodes[node, COUNT] -= 1
        if other_group < 0:
            _insert_after(tree, node, nodes[nodes[node, PARENT], TAIL])
        else:
            _insert_before(tree, node, groups[other_group, G_HEAD])


@njit(cache=True)
def _token_at(tree, tokens, seq, idx):
    return tokens[tree[6][seq] + idx]


@njit(cache=True)
def _free_subtree(tree, root):
    """Release a removed child and everything below it (nodes, groups, children entries)."""
    nodes, groups, meta, children, free_nodes = tree[0], tree[1], tree[2], tree[3], tree[4]
    stack = [root]
    while len(stack) > 0:
        node = stack.pop()
        child = nodes[node, HEAD]
        while child >= 0:
            _pop(tree, (node << KEY_SHIFT) | nodes[child, TOKEN])
            stack.append(child)
            child = nodes[child, NEXT]
        _set_group(tree, node, -1)
        free_nodes[meta[M_NFREE]] = node
        meta[M_NFREE] += 1


@njit(cache=True)
def _append(tree, tokens, seq_id, token, max_depth):
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    if meta[M_SEQ] != seq_id:
        meta[M_SEQ] = seq_id
        meta[M_ASTART] = 0
        meta[M_ASIZE] = 0
    # push the root as a new active suffix; keep at most max_depth
    pos = (meta[M_ASTART] + meta[M_ASIZE]) % max_depth
    if meta[M_ASIZE] == max_depth:
        meta[M_ASTART] = (meta[M_ASTART] + 1) % max_depth
    else:
        meta[M_ASIZE] += 1
    active[pos] = 0
    nodes[0, COUNT] += 1
    seq_len[seq_id] += 1
    length = seq_len[seq_id]
    for a in range(meta[M_ASIZE]):
        slot = (meta[M_ASTART] + a) % max_depth
        node = active[slot]
        child = _lookup(children, (node << KEY_SHIFT) | token)
        if child < 0:
            if nodes[node, COUNT] == 1 and node != 0:
                nodes[node, LENGTH] += 1
            else:
                new_child = _new_node(tree, 1, token, 1, seq_id, length - 1)
                nodes[new_child, PARENT] = node
                _put(tree, (node << KEY_SHIFT) | token, new_child)
                nodes[node, NCHILD] += 1
                if nodes[node, NCHILD] == 1:
                    nodes[node, HEAD] = new_child
                    nodes[node, TAIL] = new_child
                    _set_group(tree, new_child, _new_group(tree, new_child))
                else:
                    _insert_after(tree, new_child, nodes[node, TAIL])
                active[slot] = new_child
        elif nodes[node, COUNT] == nodes[child, COUNT] + 1 and node != 0:
            if nodes[child, LENGTH] == 1:
                parent = nodes[node, PARENT]
                nodes[child, COUNT] += 1
                nodes[child, TOKEN] = nodes[node, TOKEN]
                nodes[child, LENGTH] = nodes[node, LENGTH] + 1
                nodes[child, REF_SEQ] = seq_id
                nodes[child, REF_IDX] = length - nodes[child, LENGTH]
                nodes[child, PARENT] = parent
                _replace_in_siblings(tree, node, child)
                _put(tree, (parent << KEY_SHIFT) | nodes[child, TOKEN], child)
                _pop(tree, (node << KEY_SHIFT) | token)
                free_nodes[meta[M_NFREE]] = node
                meta[M_NFREE] += 1
                active[slot] = child
            else:
                nodes[node, LENGTH] += 1
                nodes[node, REF_SEQ] = seq_id
                nodes[node, REF_IDX] = length - nodes[node, LENGTH]
                nodes[child, LENGTH] -= 1
                nodes[child, REF_IDX] += 1
                nodes[child, TOKEN] = _token_at(tree, tokens, nodes[child, REF_SEQ], nodes[child, REF_IDX])
                if nodes[child, TOKEN] != token:
                    _pop(tree, (node << KEY_SHIFT) | token)
                    _put(tree, (node << KEY_SHIFT) | nodes[child, TOKEN], child)
        elif nodes[child, LENGTH] == 1:
            _increment(tree, child)
            active[slot] = child
        else:
            new_node = _new_node(tree, nodes[child, COUNT], token, 1, seq_id, length - 1)
            nodes[new_node, PARENT] = node
            _replace_in_siblings(tree, child, new_node)
            _put(tree, (node << KEY_SHIFT) | token, new_node)
            nodes[child, LENGTH] -= 1
            nodes[child, REF_IDX] += 1
            nodes[child, TOKEN] = _token_at(tree, tokens, nodes[child, REF_SEQ], nodes[child, REF_IDX])
            _put(tree, (new_node << KEY_SHIFT) | nodes[child, TOKEN], child)
            nodes[new_node, NCHILD] = 1
            nodes[child, PARENT] = new_node
            nodes[new_node, HEAD] = child
            nodes[new_node, TAIL] = child
            _set_group(tree, child, _new_group(tree, child))
            _increment(tree, new_node)
            active[slot] = new_node


@njit(cache=True)
def _remove(tree, tokens, seq_id):
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    base = seq_base[seq_id]
    size = seq_len[seq_id]
    for start in range(size):
        node = 0
        nodes[0, COUNT] -= 1
        idx = start
        while idx < size:
            token = tokens[base + idx]
            child = _lookup(children, (node << KEY_SHIFT) | token)
            if child < 0:
                break
            if nodes[child, COUNT] > 1:
                _decrement(tree, child)
            else:
                _remove_from_siblings(tree, child)
                _pop(tree, (node << KEY_SHIFT) | token)
                nodes[node, NCHILD] -= 1
                _free_subtree(tree, child)
                break
            idx += nodes[child, LENGTH]
            node = child
        if node != 0 and nodes[node, NCHILD] == 1:
            only = nodes[node, HEAD]
            if nodes[node, COUNT] == nodes[only, COUNT]:
                parent = nodes[node, PARENT]
                _pop(tree, (node << KEY_SHIFT) | nodes[only, TOKEN])
                nodes[only, TOKEN] = nodes[node, TOKEN]
                nodes[only, LENGTH] += nodes[node, LENGTH]
                nodes[only, REF_IDX] -= nodes[node, LENGTH]
                nodes[only, PARENT] = parent
                _replace_in_siblings(tree, node, only)
                _put(tree, (parent << KEY_SHIFT) | nodes[only, TOKEN], only)
                free_nodes[meta[M_NFREE]] = node
                meta[M_NFREE] += 1
    if meta[M_SEQ] == seq_id:
        meta[M_SEQ] = -1


@njit(cache=True)
def _speculate_paths(tree, tokens, ctx, cstart, cend, max_spec_tokens, factor, min_prob, paths, sums, counts):
    """arctic-inference's speculate (suffix_tree.cc), every candidate at once: for each match length m that
    matches (pattern = ctx[cend-m:cend], m = 1, 2, ... until one does not), the greedy draft in paths[m-1],
    its length in counts[m-1] and its running scores in sums[m-1] (sums[m-1, c] = score of its first c
    tokens, float32 added in the same order). Returns how many match lengths matched.

    A draft under a smaller budget b is the first min(b, counts[m-1]) tokens of the one under the largest
    (the walk only stops sooner), with the score at that length: so one call serves every k due at a
    step (`_pick`), where calling speculate per k walked the same tree again for each.
    """
    nodes, children = tree[0], tree[3]
    size = cend - cstart
    matched = 0
    for match_len in range(1, size):
        node = 0
        idx = 0
        found = True
        for p in range(cend - match_len, cend):
            token = ctx[p]
            if idx >= nodes[node, LENGTH]:
                node = _lookup(children, (node << KEY_SHIFT) | token)
                if node < 0:
                    found = False
                    break
                idx = 0
            if _token_at(tree, tokens, nodes[node, REF_SEQ], nodes[node, REF_IDX] + idx) != token:
                found = False
                break
            idx += 1
        if not found:
            break
        limit = int(np.float64(np.float32(np.float32(match_len) * factor)) + 1e-6)
        max_tokens = max(min(max_spec_tokens, limit), 0)
        row = match_len - 1
        count = 0
        score = np.float32(0.0)
        prob = np.float32(1.0)
        sums[row, 0] = score
        while count < max_tokens and prob >= min_prob:
            if idx < nodes[node, LENGTH]:
                paths[row, count] = _token_at(tree, tokens, nodes[node, REF_SEQ], nodes[node, REF_IDX] + idx)
                count += 1
                score = np.float32(score + prob)
                sums[row, count] = score
                idx += 1
            else:
                child = nodes[node, HEAD]
                if child < 0:
                    break
                prob = np.float32(prob * np.float32(np.float32(nodes[child, COUNT]) / np.float32(nodes[node, COUNT])))
                node = child
                idx = 0
        counts[row] = count
        matched = match_len
    return matched


@njit(cache=True)
def _pick(matched, counts, sums, budget):
    """(match length - 1 or -1, draft length, float32 score) of speculate's best draft under `budget`
    from `_speculate_paths`' candidates: the highest score, the longest match among equal ones."""
    best = -1
    best_len = 0
    best_score = np.float32(0.0)
    for row in range(matched):
        count = min(budget, counts[row])
        if sums[row, count] >= best_score:
            best_score = sums[row, count]
            best_len = count
            best = row
    return best, best_len, best_score


@njit(cache=True, nogil=True)  # releases the GIL: replays run side by side in threads
def _replay_kernel(tokens, offsets, prompt_lens, wanted, ks, max_depth, max_cached, factor, min_prob, limit,
                   counters, per_pos):
    count = prompt_lens.shape[0]
    global_tree = _make_tree(1024, count, max_depth)
    for r in range(count):
        global_tree[6][r] = offsets[r] + prompt_lens[r]
    fifo = np.empty(count, np.int64)
    fifo_start = 0
    fifo_end = 0
    cached = np.zeros(count, np.bool_)
    top_k = 0
    for k in ks:
        top_k = max(top_k, k)
    # Both trees' candidate drafts at a step (`_speculate_paths`), shared by every k due at it.
    mine_paths = np.empty((max(max_depth, 1), max(top_k, 1)), np.int64)
    their_paths = np.empty((max(max_depth, 1), max(top_k, 1)), np.int64)
    mine_sums = np.empty((max(max_depth, 1), max(top_k, 1) + 1), np.float32)
    their_sums = np.empty((max(max_depth, 1), max(top_k, 1) + 1), np.float32)
    mine_counts = np.empty(max(max_depth, 1), np.int64)
    their_counts = np.empty(max(max_depth, 1), np.int64)
    next_step = np.empty(ks.shape[0], np.int64)
    mine_matched = 0
    their_matched = 0
    for r in range(count):
        prompt = prompt_lens[r]
        start = offsets[r]
        outputs = offsets[r + 1] - start - prompt
        if outputs <= 0:
            continue
        for ki in range(ks.shape[0]):
            counters[r, ki, OUTPUT_TOKENS] = outputs
            counters[r, ki, LAST_CONTEXT] = prompt
            counters[r, ki, MAX_SLOTS] = prompt
        if max_cached != 0:
            fifo[fifo_end] = r
            fifo_end += 1
            cached[r] = True
            while fifo_end - fifo_start > max_cached:
                oldest = fifo[fifo_start]
                fifo_start += 1
                cached[oldest] = False
                _remove(global_tree, tokens, oldest)
        if not wanted[r]:
            if cached[r]:
                for e in range(outputs):
                    global_tree = _reserve(global_tree, max_depth + 2)
                    _append(global_tree, tokens, r, tokens[start + prompt + e], max_depth)
            continue
        local = _make_tree(2 * (prompt + outputs) + max_depth + 8, 1, max_depth)
        local[6][0] = start
        for e in range(prompt):
            local = _reserve(local, max_depth + 2)
            _append(local, tokens, 0, tokens[start + e], max_depth)
        next_step[:] = 1
        for emitted in range(1, outputs + 1):
            token = tokens[start + prompt + emitted - 1]
            local = _reserve(local, max_depth + 2)
            _append(local, tokens, 0, token, max_depth)
            if cached[r]:
                global_tree = _reserve(global_tree, max_depth + 2)
                _append(global_tree, tokens, r, token, max_depth)
            if emitted == outputs:
                break
            t = prompt + emitted
            end = start + t
            top_budget = -1  # the largest budget of the ks due at this step (-1: none speculates)
            if t < limit:
                for ki in range(ks.shape[0]):
                    if next_step[ki] == emitted:
                        top_budget = max(top_budget, min(ks[ki], limit - t - 1))
            if top_budget >= 0:
                pstart = max(start, end - max_depth)
                mine_matched = _speculate_paths(local, tokens, tokens, pstart, end, top_budget, factor, min_prob,
                                                mine_paths, mine_sums, mine_counts)
                their_matched = _speculate_paths(global_tree, tokens, tokens, pstart, end, top_budget, factor,
                                                 min_prob, their_paths, their_sums, their_counts)
            for ki in range(ks.shape[0]):
                if next_step[ki] != emitted:
                    continue
                length = 0
                draft = mine_paths[0]
                if t < limit:
                    budget = min(ks[ki], limit - t - 1)
                    mine, length, my_score = _pick(mine_matched, mine_counts, mine_sums, budget)
                    theirs, their_len, their_score = _pick(their_matched, their_counts, their_sums, budget)
                    if mine >= 0:
                        draft = mine_paths[mine]
                    if my_score < their_score:
                        length = their_len
                        draft = their_paths[theirs]
                remaining = outputs - emitted
                matched = 0
                while matched < length and matched < remaining and draft[matched] == tokens[end + matched]:
                    matched += 1
                accepted = count_step(counters[r, ki], per_pos[ki], t, prompt + outputs, length, matched)
                next_step[ki] = emitted + accepted + 1
