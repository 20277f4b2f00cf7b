"""N-gram self-overlap (advisor/measure/overlap.py), checked against a naive set implementation."""
from __future__ import annotations

import numpy as np
import orjson
import pytest

from advisor.measure import overlap
from advisor.measure.overlap import MAX_N, RequestOverlap, request_overlap, summarize_overlap


def naive_overlap(
    prompt: list[int], output: list[int], context: list[list[int]] | None, max_n: int
) -> RequestOverlap:
    """Plain Python sets of n-gram tuples; context n-grams never span two earlier outputs."""

    def grams(seq: list[int], n: int) -> list[tuple[int, ...]]:
        return [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]

    ngrams, in_prompt, in_context = [], [], []
    for n in range(1, max_n + 1):
        out = grams(output, n)
        prompt_set = set(grams(prompt, n))
        ngrams.append(len(out))
        in_prompt.append(sum(g in prompt_set for g in out))
        if context is not None:
            context_set = {g for segment in context for g in grams(segment, n)}
            in_context.append(sum(g in context_set for g in out))
    return RequestOverlap(tuple(ngrams), tuple(in_prompt), tuple(in_context) if context is not None else None)


def test_copied_sentence_by_hand() -> None:
    prompt = np.arange(1, 11)  # 1..10
    output = np.array([3, 4, 5, 6, 99])  # copies 3..6, then a new token
    r = request_overlap(prompt, output)
    assert r.ngrams == (5, 4, 3, 2, 1)
    assert r.in_prompt == (4, 3, 2, 1, 0)
    assert r.in_context is None


def test_repeats_count_by_position() -> None:
    # The output n-gram (7, 7) occurs at three positions; each counts once as a position.
    r = request_overlap(np.array([7, 7]), np.array([7, 7, 7, 7]), max_n=3)
    assert r.ngrams == (4, 3, 2) and r.in_prompt == (4, 3, 0)


def test_context_ngrams_do_not_span_two_earlier_outputs() -> None:
    context = [np.array([1, 2]), np.array([3, 4])]
    r = request_overlap(np.array([]), np.array([2, 3]), context=context)
    assert r.in_context == (2, 0, 0, 0, 0)  # (2, 3) exists only across the boundary
    assert r.in_prompt == (0, 0, 0, 0, 0)
    first_turn = request_overlap(np.array([1]), np.array([1, 2]), context=[])
    assert first_turn.in_context == (0, 0, 0, 0, 0) and first_turn.in_prompt == (1, 0, 0, 0, 0)


def test_empty_and_short_outputs() -> None:
    assert request_overlap(np.array([1, 2, 3]), np.array([])).ngrams == (0, 0, 0, 0, 0)
    r = request_overlap(np.array([]), np.array([5, 6]), context=[np.array([])])
    assert r.ngrams == (2, 1, 0, 0, 0) and r.in_prompt == (0, 0, 0, 0, 0) and r.in_context == (0, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        request_overlap(np.array([1]), np.array([1]), max_n=0)


@pytest.mark.parametrize("id_offset", [0, 1 << 23])  # vocabulary-sized and very large token ids
def test_equals_naive_sets_on_random_data(id_offset: int) -> None:
    rng = np.random.default_rng(5)
    for case in range(150):
        vocabulary = int(rng.choice([3, 8, 50]))  # small vocabularies: many partial matches
        prompt = rng.integers(0, vocabulary, int(rng.integers(0, 60))) + id_offset
        output = rng.integers(0, vocabulary, int(rng.integers(0, 40))) + id_offset
        if case % 3 == 0 and prompt.size > 10:  # copy a stretch of the prompt, as real outputs do
            output = np.concatenate((output, prompt[2:9], output))
        context = None
        if case % 4:
            sizes = rng.integers(0, 20, case % 3)
            context = [rng.integers(0, vocabulary, int(size)) + id_offset for size in sizes]
        max_n = int(rng.integers(1, 7))
        got = request_overlap(prompt, output, context, max_n)
        context_lists = None if context is None else [c.tolist() for c in context]
        expected = naive_overlap(prompt.tolist(), output.tolist(), context_lists, max_n)
        assert got == expected, f"case {case}"


def test_summary_weights_by_ngram_count() -> None:
    requests = [
        RequestOverlap((10, 9, 8, 7, 6), (10, 9, 8, 7, 6), None),  # fully copied
        RequestOverlap((2, 1, 0, 0, 0), (0, 0, 0, 0, 0), (2, 1, 0, 0, 0)),
    ]
    s = summarize_overlap(requests)
    assert s.n == (1, 2, 3, 4, 5) and s.requests == 2
    assert s.output_ngrams == (12, 10, 8, 7, 6)
    assert s.prompt_share == (10 / 12, 9 / 10, 1.0, 1.0, 1.0)
    # Only the second request has conversation context.
    assert s.context_requests == 1 and s.context_share == (1.0, 1.0, None, None, None)
    # Per-request medians: n = 1, 2 over both requests (1.0 and 0.0), n >= 3 over the first only (the
    # second has no such n-grams); the context's over the second request only.
    assert s.prompt_share_request_p50 == (0.5, 0.5, 1.0, 1.0, 1.0)
    assert s.context_share_request_p50 == (1.0, 1.0, None, None, None)
    d = orjson.loads(orjson.dumps(s.to_dict()))
    assert d["prompt_share_request_p50"] == [0.5, 0.5, 1.0, 1.0, 1.0]
    assert d["context_share_request_p50"] == [1.0, 1.0, None, None, None]


def test_summary_of_nothing_and_mismatched_n() -> None:
    s = summarize_overlap([])
    assert s.requests == 0 and s.prompt_share == (None,) * MAX_N and s.context_share is None
    assert s.to_dict()["prompt_share_request_p50"] == [None] * MAX_N
    with pytest.raises(ValueError):
        summarize_overlap([RequestOverlap((1,), (1,), None)])


def test_long_outputs_take_wide_table_keys() -> None:
    """Past 46,340 output tokens the n-gram keys no longer fit int32: the int64 table gives the same counts."""
    rng = np.random.default_rng(11)
    output = rng.integers(0, 400, 50_000)
    prompt = np.concatenate((rng.integers(0, 400, 3_000), output[100:2_000]))
    context = [output[:500], rng.integers(0, 400, 700)]
    got = request_overlap(prompt, output, context, 4)
    assert got == naive_overlap(prompt.tolist(), output.tolist(), [c.tolist() for c in context], 4)


def test_packed_counts_equal_one_request_at_a_time() -> None:
    """One compiled call over a batch's packed ids gives each request's `overlap_counts`."""
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 30, int(rng.integers(0, 80))) for _ in range(40)]
    outputs = [rng.integers(0, 30, int(rng.integers(1, 50))) for _ in range(40)]
    contexts = [None if i % 5 == 0 else [rng.integers(0, 30, int(s)) for s in rng.integers(0, 30, i % 4)]
                for i in range(40)]
    ids = np.concatenate([part for pair in zip(prompts, outputs) for part in pair]).astype(np.int32)
    prompt_lens = np.array([p.size for p in prompts])
    output_lens = np.array([o.size for o in outputs])
    starts = np.concatenate(([0], np.cumsum(prompt_lens + output_lens)[:-1]))
    rows = np.arange(1, 40, 2)  # every other request
    packed = overlap.overlap_counts_packed(ids, starts, prompt_lens, output_lens, rows, [contexts[r] for r in rows])
    for k, r in enumerate(rows):
        np.testing.assert_array_equal(packed[k], overlap.overlap_counts(prompts[r], outputs[r], contexts[r]))


def test_scratch_tables_are_left_empty() -> None:
    """Calls share their thread's n-gram tables without clearing them whole: each call must reset what it
    set, or the next output would find the last one's n-grams (and a full table would never end a probe)."""
    rng = np.random.default_rng(8)
    for size in (1, 5, 300, 2_000):
        output = rng.integers(0, 40, size)
        overlap.overlap_counts(rng.integers(0, 40, 500), output, [output[: size // 2]])
        assert (overlap._scratch.levels == -1).all()
        assert (overlap._scratch.table == -1).all()


@pytest.mark.parametrize(
    ("prompt", "output"),
    [
        ([6, 7, 8], [5, 6, 7]),  # the unique 2-gram (6, 7) ends the output: nothing extends it
        ([1, 2, 3, 5, 2, 3, 4], [1, 2, 3, 4]),  # unique prefixes extended by a wrong token, then the right one
        ([1, 2, 4, 1, 2, 3, 9], [1, 2, 3, 1, 2, 4, 1, 2, 3]),  # repeated prefix (1, 2), several extensions
        ([1, 2, 8, 7, 6], [1, 2, 9, 1, 2, 8, 7, 6]),  # repeated (1, 2), unique (1, 2, 8) then unnumbered
        ([3, 3, 3, 4, 3, 3], [3, 3, 3, 3, 4, 3, 3, 4]),  # runs: repeated n-grams overlapping themselves
        ([9, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 7]),  # unique only from n = 7 on
    ],
)
def test_unique_and_repeated_prefixes_equal_naive_sets(prompt: list[int], output: list[int]) -> None:
    """Repeated n-grams extend through the tables; an n-gram with a unique prefix only by the output's next
    token (and not at all at the output's end). Each case mixes both, in the prompt and as context."""
    for max_n in (2, 3, 5, 8):
        context = [prompt[::-1], prompt]
        got = request_overlap(np.array(prompt), np.array(output), [np.array(c) for c in context], max_n)
        assert got == naive_overlap(prompt, output, context, max_n), max_n


def test_copied_spans_with_mutations_equal_naive_sets() -> None:
    """Outputs of repeated motifs and prompts of their stretches with single tokens changed: prompt walks run
    deep into both repeated and unique n-grams and leave them at the changed token."""
    rng = np.random.default_rng(21)
    for case in range(60):
        motifs = [rng.integers(0, 12, int(rng.integers(2, 7))) for _ in range(3)]
        parts = rng.integers(0, 5, 8)  # a motif, or 4 fresh tokens
        output = np.concatenate([motifs[k] if k < 3 else rng.integers(0, 12, 4) for k in parts])
        pieces = []
        for _ in range(4):
            start = int(rng.integers(0, output.size))
            piece = output[start:start + int(rng.integers(1, 9))].copy()
            piece[int(rng.integers(0, piece.size))] = rng.integers(0, 14)
            pieces.append(piece)
        prompt = np.concatenate(pieces)
        context = [pieces[0], output[: output.size // 3]]
        max_n = int(rng.integers(2, 9))
        got = request_overlap(prompt, output, context, max_n)
        expected = naive_overlap(prompt.tolist(), output.tolist(), [c.tolist() for c in context], max_n)
        assert got == expected, case


def test_overlap_totals_give_the_summary_of_the_rows():
    """The exact totals, accumulated in parts (one taken away and added again, as a recount does), give the
    summary the rows give; beside a sample of the rows, the weighted shares stay the whole's."""
    rng = np.random.default_rng(5)
    ngrams = rng.integers(0, 60, (400, overlap.MAX_N))
    prompt_hits, context_hits = rng.integers(0, 30, (2, 400, overlap.MAX_N)) % (ngrams + 1)
    with_context = rng.random(400) < 0.6
    counts = np.stack([ngrams, prompt_hits, context_hits], axis=1)
    totals = overlap.OverlapTotals()
    for part in np.array_split(np.arange(400), 6):
        totals.add(counts[part], with_context[part])
    totals.add(counts[:50], with_context[:50], -1)
    totals.add(counts[:50], with_context[:50])
    whole = overlap.summarize_counts(ngrams, prompt_hits, context_hits, with_context)
    summary = overlap.summarize_counts(ngrams, prompt_hits, context_hits, with_context, totals)
    assert summary.to_dict() == whole.to_dict()
    kept = rng.random(400) < 0.3
    sampled = overlap.summarize_counts(ngrams[kept], prompt_hits[kept], context_hits[kept], with_context[kept], totals)
    assert (sampled.requests, sampled.output_ngrams, sampled.prompt_share, sampled.context_share) == (
        whole.requests, whole.output_ngrams, whole.prompt_share, whole.context_share)
    assert sampled.prompt_share_request_p50 != whole.prompt_share_request_p50
