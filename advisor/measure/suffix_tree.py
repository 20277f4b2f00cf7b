"""Compiled (numba) port of arctic-inference 0.1.1's suffix tree and of the replay loop that drives it.

Line-for-line the same operations as `advisor.measure.suffix` (itself a literal port of
csrc/suffix_decoding/suffix_tree.cc), with nodes and count groups stored in int64 arrays (field x id, -1 for
null), children in one typed dict keyed by (parent << 32) | token, free lists for removed nodes and groups,
and sequences read from the caller's token array. tests/test_suffix.py checks it against the Python port,
which tests/test_replay_vllm.py checks against the real extension.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

from advisor.measure.ngram import ACCEPTED, DECODE_STEPS, DRAFT_TOKENS, DRAFTS, OUTPUT_TOKENS, TAIL_AT, TAIL_LEN

COUNT, TOKEN, LENGTH, REF_SEQ, REF_IDX, PARENT, HEAD, TAIL, NEXT, PREV, GROUP, NCHILD = range(12)
NODE_FIELDS = 12
G_HEAD, G_NEXT, G_PREV, G_REFS = range(4)
# meta: node high-water mark, free-node stack size, group high-water mark, free-group stack size,
# active sequence, start and size of the active-node ring.
M_NODES, M_NFREE, M_GROUPS, M_GFREE, M_SEQ, M_ASTART, M_ASIZE = range(7)
KEY_SHIFT = 32


@njit(cache=True)
def _lookup(children, key):
    """children[key], or -1 (typed dicts' get() returns an optional)."""
    if key in children:
        return children[key]
    return -1


@njit(cache=True)
def _make_tree(node_capacity, num_seqs, max_depth):
    nodes = np.full((NODE_FIELDS, node_capacity), -1, np.int64)
    groups = np.full((4, 2 * node_capacity), -1, np.int64)
    meta = np.zeros(8, np.int64)
    meta[M_SEQ] = -1
    children = Dict.empty(key_type=types.int64, value_type=types.int64)
    free_nodes = np.empty(node_capacity, np.int64)
    free_groups = np.empty(2 * node_capacity, np.int64)
    seq_base = np.zeros(num_seqs, np.int64)
    seq_len = np.zeros(num_seqs, np.int64)
    active = np.empty(max_depth, np.int64)
    nodes[COUNT, 0] = 0  # the root: id 0, length 0
    nodes[LENGTH, 0] = 0
    nodes[NCHILD, 0] = 0
    nodes[REF_SEQ, 0] = 0
    meta[M_NODES] = 1
    return (nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active)


@njit(cache=True)
def _reserve(tree, room):
    """The tree with space for `room` more nodes and 2 * room more groups (arrays doubled when short)."""
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    if meta[M_NODES] + room <= nodes.shape[1] and meta[M_GROUPS] + 2 * room <= groups.shape[1]:
        return tree
    size = max(2 * nodes.shape[1], meta[M_NODES] + room + 16)
    new_nodes = np.full((NODE_FIELDS, size), -1, np.int64)
    new_nodes[:, : nodes.shape[1]] = nodes
    new_free = np.empty(size, np.int64)
    new_free[: free_nodes.shape[0]] = free_nodes
    gsize = max(2 * groups.shape[1], meta[M_GROUPS] + 2 * room + 16)
    new_groups = np.full((4, gsize), -1, np.int64)
    new_groups[:, : groups.shape[1]] = groups
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
    nodes[:, node] = -1
    nodes[COUNT, node] = count
    nodes[TOKEN, node] = token
    nodes[LENGTH, node] = length
    nodes[REF_SEQ, node] = ref_seq
    nodes[REF_IDX, node] = ref_idx
    nodes[NCHILD, node] = 0
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
    groups[G_HEAD, group] = head
    groups[G_NEXT, group] = -1
    groups[G_PREV, group] = -1
    groups[G_REFS, group] = 0
    return group


@njit(cache=True)
def _set_group(tree, node, group):
    """node.group = group with shared_ptr semantics: a group no node points to any more is freed."""
    nodes, groups, meta, children, free_nodes, free_groups, seq_base, seq_len, active = tree
    old = nodes[GROUP, node]
    if old == group:
        return
    if group >= 0:
        groups[G_REFS, group] += 1
    nodes[GROUP, node] = group
    if old >= 0:
        groups[G_REFS, old] -= 1
        if groups[G_REFS, old] == 0:
            free_groups[meta[M_GFREE]] = old
            meta[M_GFREE] += 1


@njit(cache=True)
def _remove_from_siblings(tree, node):
    nodes, groups = tree[0], tree[1]
    group = nodes[GROUP, node]
    nxt, prv, parent = nodes[NEXT, node], nodes[PREV, node], nodes[PARENT, node]
    if groups[G_HEAD, group] == node:
        if nxt >= 0 and nodes[COUNT, nxt] == nodes[COUNT, node]:
            groups[G_HEAD, group] = nxt
            _set_group(tree, node, -1)
        else:
            if groups[G_PREV, group] >= 0:
                groups[G_NEXT, groups[G_PREV, group]] = groups[G_NEXT, group]
            if groups[G_NEXT, group] >= 0:
                groups[G_PREV, groups[G_NEXT, group]] = groups[G_PREV, group]
            groups[G_PREV, group] = -1
            groups[G_NEXT, group] = -1
    else:
        _set_group(tree, node, -1)
    if nxt >= 0:
        nodes[PREV, nxt] = prv
    else:
        nodes[TAIL, parent] = prv
    if prv >= 0:
        nodes[NEXT, prv] = nxt
    else:
        nodes[HEAD, parent] = nxt
    nodes[PREV, node] = -1
    nodes[NEXT, node] = -1


@njit(cache=True)
def _insert_before(tree, node, other):
    nodes, groups = tree[0], tree[1]
    parent = nodes[PARENT, node]
    if nodes[PREV, other] >= 0:
        nodes[NEXT, nodes[PREV, other]] = node
    else:
        nodes[HEAD, parent] = node
    nodes[NEXT, node] = other
    nodes[PREV, node] = nodes[PREV, other]
    nodes[PREV, other] = node
    prv = nodes[PREV, node]
    if prv >= 0 and nodes[COUNT, node] == nodes[COUNT, prv]:
        _set_group(tree, node, nodes[GROUP, prv])
    elif nodes[COUNT, node] == nodes[COUNT, other]:
        _set_group(tree, node, nodes[GROUP, other])
        groups[G_HEAD, nodes[GROUP, node]] = node
    else:
        group = nodes[GROUP, node]
        if group < 0:
            group = _new_group(tree, node)
            _set_group(tree, node, group)
        if prv >= 0:
            groups[G_PREV, group] = nodes[GROUP, prv]
            groups[G_NEXT, groups[G_PREV, group]] = group
        groups[G_NEXT, group] = nodes[GROUP, other]
        groups[G_PREV, groups[G_NEXT, group]] = group


@njit(cache=True)
def _insert_after(tree, node, other):
    nodes, groups = tree[0], tree[1]
    parent = nodes[PARENT, node]
    if nodes[NEXT, other] >= 0:
        nodes[PREV, nodes[NEXT, other]] = node
    else:
        nodes[TAIL, parent] = node
    nodes[PREV, node] = other
    nodes[NEXT, node] = nodes[NEXT, other]
    nodes[NEXT, other] = node
    nxt = nodes[NEXT, node]
    if nxt >= 0 and nodes[COUNT, node] == nodes[COUNT, nxt]:
        _set_group(tree, node, nodes[GROUP, nxt])
        if groups[G_HEAD, nodes[GROUP, node]] == nxt:
            groups[G_HEAD, nodes[GROUP, node]] = node
    elif nodes[COUNT, node] == nodes[COUNT, other]:
        _set_group(tree, node, nodes[GROUP, other])
    else:
        group = nodes[GROUP, node]
        if group < 0:
            group = _new_group(tree, node)
            _set_group(tree, node, group)
        if nxt >= 0:
            groups[G_NEXT, group] = nodes[GROUP, nxt]
            groups[G_PREV, groups[G_NEXT, group]] = group
        groups[G_PREV, group] = nodes[GROUP, other]
        groups[G_NEXT, groups[G_PREV, group]] = group


@njit(cache=True)
def _replace_in_siblings(tree, old, new):
    nodes, groups = tree[0], tree[1]
    parent = nodes[PARENT, old]
    if nodes[NEXT, old] >= 0:
        nodes[PREV, nodes[NEXT, old]] = new
    else:
        nodes[TAIL, parent] = new
    if nodes[PREV, old] >= 0:
        nodes[NEXT, nodes[PREV, old]] = new
    else:
        nodes[HEAD, parent] = new
    nodes[PREV, new] = nodes[PREV, old]
    nodes[NEXT, new] = nodes[NEXT, old]
    nodes[PREV, old] = -1
    nodes[NEXT, old] = -1
    group = nodes[GROUP, old]
    if groups[G_HEAD, group] == old:
        groups[G_HEAD, group] = new
    _set_group(tree, new, group)
    _set_group(tree, old, -1)


@njit(cache=True)
def _increment(tree, node):
    nodes, groups = tree[0], tree[1]
    if nodes[PARENT, node] < 0:
        nodes[COUNT, node] += 1
        return
    prv, nxt, count = nodes[PREV, node], nodes[NEXT, node], nodes[COUNT, node]
    if prv < 0 or nodes[COUNT, prv] > count + 1:
        if nxt < 0 or nodes[COUNT, nxt] < count:
            nodes[COUNT, node] += 1
        else:
            orig = nodes[GROUP, node]
            groups[G_HEAD, orig] = nxt
            new = _new_group(tree, node)
            groups[G_NEXT, new] = orig
            if groups[G_PREV, orig] >= 0:
                groups[G_PREV, new] = groups[G_PREV, orig]
                groups[G_NEXT, groups[G_PREV, new]] = new
            groups[G_PREV, orig] = new
            _set_group(tree, node, new)
            nodes[COUNT, node] += 1
    else:
        other = groups[G_HEAD, nodes[GROUP, prv]]
        _remove_from_siblings(tree, node)
        nodes[COUNT, node] += 1
        _insert_before(tree, node, other)


@njit(cache=True)
def _decrement(tree, node):
    nodes, groups = tree[0], tree[1]
    if nodes[PARENT, node] < 0:
        nodes[COUNT, node] -= 1
        return
    prv, nxt, count = nodes[PREV, node], nodes[NEXT, node], nodes[COUNT, node]
    if nxt < 0 or nodes[COUNT, nxt] < count - 1:
        if prv < 0 or nodes[COUNT, prv] > count:
            nodes[COUNT, node] -= 1
        else:
            orig = nodes[GROUP, node]
            new = _new_group(tree, node)
            groups[G_PREV, new] = orig
            if groups[G_NEXT, orig] >= 0:
                groups[G_NEXT, new] = groups[G_NEXT, orig]
                groups[G_PREV, groups[G_NEXT, new]] = new
            groups[G_NEXT, orig] = new
            _set_group(tree, node, new)
            nodes[COUNT, node] -= 1
    elif nodes[COUNT, nxt] == count - 1:
        groups[G_HEAD, nodes[GROUP, nxt]] = node
        group = nodes[GROUP, node]
        if groups[G_HEAD, group] == node:
            if groups[G_PREV, group] >= 0:
                groups[G_NEXT, groups[G_PREV, group]] = groups[G_NEXT, group]
            groups[G_PREV, groups[G_NEXT, group]] = groups[G_PREV, group]
        _set_group(tree, node, nodes[GROUP, nxt])
        nodes[COUNT, node] -= 1
    else:
        other_group = groups[G_NEXT, nodes[GROUP, node]]
        _remove_from_siblings(tree, node)
        nodes[COUNT, node] -= 1
        if other_group < 0:
            _insert_after(tree, node, nodes[TAIL, nodes[PARENT, node]])
        else:
            _insert_before(tree, node, groups[G_HEAD, other_group])


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
        child = nodes[HEAD, node]
        while child >= 0:
            children.pop((node << KEY_SHIFT) | nodes[TOKEN, child], -1)
            stack.append(child)
            child = nodes[NEXT, child]
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
    nodes[COUNT, 0] += 1
    seq_len[seq_id] += 1
    length = seq_len[seq_id]
    for a in range(meta[M_ASIZE]):
        slot = (meta[M_ASTART] + a) % max_depth
        node = active[slot]
        child = _lookup(children, (node << KEY_SHIFT) | token)
        if child < 0:
            if nodes[COUNT, node] == 1 and node != 0:
                nodes[LENGTH, node] += 1
            else:
                new_child = _new_node(tree, 1, token, 1, seq_id, length - 1)
                nodes[PARENT, new_child] = node
                children[(node << KEY_SHIFT) | token] = new_child
                nodes[NCHILD, node] += 1
                if nodes[NCHILD, node] == 1:
                    nodes[HEAD, node] = new_child
                    nodes[TAIL, node] = new_child
                    _set_group(tree, new_child, _new_group(tree, new_child))
                else:
                    _insert_after(tree, new_child, nodes[TAIL, node])
                active[slot] = new_child
        elif nodes[COUNT, node] == nodes[COUNT, child] + 1 and node != 0:
            if nodes[LENGTH, child] == 1:
                parent = nodes[PARENT, node]
                nodes[COUNT, child] += 1
                nodes[TOKEN, child] = nodes[TOKEN, node]
                nodes[LENGTH, child] = nodes[LENGTH, node] + 1
                nodes[REF_SEQ, child] = seq_id
                nodes[REF_IDX, child] = length - nodes[LENGTH, child]
                nodes[PARENT, child] = parent
                _replace_in_siblings(tree, node, child)
                children[(parent << KEY_SHIFT) | nodes[TOKEN, child]] = child
                children.pop((node << KEY_SHIFT) | token, -1)
                free_nodes[meta[M_NFREE]] = node
                meta[M_NFREE] += 1
                active[slot] = child
            else:
                nodes[LENGTH, node] += 1
                nodes[REF_SEQ, node] = seq_id
                nodes[REF_IDX, node] = length - nodes[LENGTH, node]
                nodes[LENGTH, child] -= 1
                nodes[REF_IDX, child] += 1
                nodes[TOKEN, child] = _token_at(tree, tokens, nodes[REF_SEQ, child], nodes[REF_IDX, child])
                if nodes[TOKEN, child] != token:
                    children.pop((node << KEY_SHIFT) | token, -1)
                    children[(node << KEY_SHIFT) | nodes[TOKEN, child]] = child
        elif nodes[LENGTH, child] == 1:
            _increment(tree, child)
            active[slot] = child
        else:
            new_node = _new_node(tree, nodes[COUNT, child], token, 1, seq_id, length - 1)
            nodes[PARENT, new_node] = node
            _replace_in_siblings(tree, child, new_node)
            children[(node << KEY_SHIFT) | token] = new_node
            nodes[LENGTH, child] -= 1
            nodes[REF_IDX, child] += 1
            nodes[TOKEN, child] = _token_at(tree, tokens, nodes[REF_SEQ, child], nodes[REF_IDX, child])
            children[(new_node << KEY_SHIFT) | nodes[TOKEN, child]] = child
            nodes[NCHILD, new_node] = 1
            nodes[PARENT, child] = new_node
            nodes[HEAD, new_node] = child
            nodes[TAIL, new_node] = child
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
        nodes[COUNT, 0] -= 1
        idx = start
        while idx < size:
            token = tokens[base + idx]
            child = _lookup(children, (node << KEY_SHIFT) | token)
            if child < 0:
                break
            if nodes[COUNT, child] > 1:
                _decrement(tree, child)
            else:
                _remove_from_siblings(tree, child)
                children.pop((node << KEY_SHIFT) | token, -1)
                nodes[NCHILD, node] -= 1
                _free_subtree(tree, child)
                break
            idx += nodes[LENGTH, child]
            node = child
        if node != 0 and nodes[NCHILD, node] == 1:
            only = nodes[HEAD, node]
            if nodes[COUNT, node] == nodes[COUNT, only]:
                parent = nodes[PARENT, node]
                children.pop((node << KEY_SHIFT) | nodes[TOKEN, only], -1)
                nodes[TOKEN, only] = nodes[TOKEN, node]
                nodes[LENGTH, only] += nodes[LENGTH, node]
                nodes[REF_IDX, only] -= nodes[LENGTH, node]
                nodes[PARENT, only] = parent
                _replace_in_siblings(tree, node, only)
                children[(parent << KEY_SHIFT) | nodes[TOKEN, only]] = only
                free_nodes[meta[M_NFREE]] = node
                meta[M_NFREE] += 1
    if meta[M_SEQ] == seq_id:
        meta[M_SEQ] = -1


@njit(cache=True)
def _speculate(tree, tokens, ctx, cstart, cend, max_spec_tokens, factor, min_prob, out, scratch):
    """Best draft into `out`; returns (length, float32 score). Pattern = ctx[cstart:cend]."""
    nodes, children = tree[0], tree[3]
    best_len = 0
    best_score = np.float32(0.0)
    size = cend - cstart
    for match_len in range(1, size):
        node = 0
        idx = 0
        found = True
        for p in range(cend - match_len, cend):
            token = ctx[p]
            if idx >= nodes[LENGTH, node]:
                node = _lookup(children, (node << KEY_SHIFT) | token)
                if node < 0:
                    found = False
                    break
                idx = 0
            if _token_at(tree, tokens, nodes[REF_SEQ, node], nodes[REF_IDX, node] + idx) != token:
                found = False
                break
            idx += 1
        if not found:
            break
        limit = int(np.float64(np.float32(np.float32(match_len) * factor)) + 1e-6)
        max_tokens = max(min(max_spec_tokens, limit), 0)
        count = 0
        score = np.float32(0.0)
        prob = np.float32(1.0)
        while count < max_tokens and prob >= min_prob:
            if idx < nodes[LENGTH, node]:
                scratch[count] = _token_at(tree, tokens, nodes[REF_SEQ, node], nodes[REF_IDX, node] + idx)
                count += 1
                score = np.float32(score + prob)
                idx += 1
            else:
                child = nodes[HEAD, node]
                if child < 0:
                    break
                prob = np.float32(prob * np.float32(np.float32(nodes[COUNT, child]) / np.float32(nodes[COUNT, node])))
                node = child
                idx = 0
        if score >= best_score:
            best_score = score
            best_len = count
            out[:count] = scratch[:count]
    return best_len, best_score


@njit(cache=True)
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
    out = np.empty(max(top_k, 1), np.int64)
    other = np.empty(max(top_k, 1), np.int64)
    scratch = np.empty(max(top_k, 1), np.int64)
    next_step = np.empty(ks.shape[0], np.int64)
    for r in range(count):
        prompt = prompt_lens[r]
        start = offsets[r]
        outputs = offsets[r + 1] - start - prompt
        if outputs <= 0:
            continue
        for ki in range(ks.shape[0]):
            counters[r, ki, OUTPUT_TOKENS] = outputs
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
            for ki in range(ks.shape[0]):
                if next_step[ki] != emitted:
                    continue
                k = ks[ki]
                counters[r, ki, DECODE_STEPS] += 1
                accepted = 0
                if t < limit:
                    budget = min(k, limit - t - 1)
                    pstart = max(start, end - max_depth)
                    mine, my_score = _speculate(local, tokens, tokens, pstart, end, budget, factor, min_prob,
                                                out, scratch)
                    theirs, their_score = _speculate(global_tree, tokens, tokens, pstart, end, budget, factor,
                                                     min_prob, other, scratch)
                    length = mine
                    draft = out
                    if my_score < their_score:
                        length = theirs
                        draft = other
                    if length > 0:
                        remaining = outputs - emitted
                        while (accepted < length and accepted < remaining
                               and draft[accepted] == tokens[end + accepted]):
                            accepted += 1
                        if accepted == remaining and length > accepted:
                            counters[r, ki, TAIL_AT] = accepted
                            counters[r, ki, TAIL_LEN] = length
                        counters[r, ki, DRAFTS] += 1
                        counters[r, ki, DRAFT_TOKENS] += length
                        counters[r, ki, ACCEPTED] += accepted
                        for pos in range(accepted):
                            per_pos[ki, pos] += 1
                next_step[ki] = emitted + accepted + 1
