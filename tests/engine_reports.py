"""Hand-built profile reports modelled on the fixture workloads, for engine tests.

They follow the report schema `advise LOGS --json` produces (advisor/profile.py): the engine reads only
these keys. Replay entries are generated from a geometric acceptance model: a draft exists on
`draft_share` of steps and its j-th token is accepted with probability p**j.
"""
from __future__ import annotations


def distribution(mean: float, p99: float, p999: float | None = None) -> dict:
    return {"count": 1000, "mean": mean, "min": 1, "max": (p999 or p99 * 1.1) * 1.2, "p50": mean * 0.8,
            "p90": p99 * 0.7, "p99": p99, "p99_9": p999 or p99 * 1.1, "histogram": {"edges": [], "counts": []}}


def replay_entry(method: str, k: int, p: float, draft_share: float, extra: dict | None = None,
                 requests: int = 600, output_tokens: int = 200_000) -> dict:
    accepted_per_draft = sum(p ** j for j in range(1, k + 1))
    tokens_per_step = 1 + draft_share * accepted_per_draft
    steps = output_tokens / tokens_per_step
    drafts = steps * draft_share
    config = {"method": method, "num_speculative_tokens": k, **(extra or {})}
    return {
        "method": method, "config": config, "num_drafts": drafts, "num_draft_tokens": drafts * k,
        "num_accepted_tokens": drafts * accepted_per_draft,
        "num_accepted_tokens_per_pos": [drafts * p ** j for j in range(1, k + 1)],
        "acceptance_rate": accepted_per_draft / k, "mean_acceptance_length": 1 + accepted_per_draft,
        "draft_step_share": draft_share, "tokens_per_step": tokens_per_step,
        "num_requests": requests, "num_output_tokens": output_tokens,
    }


def sweep(p: float, draft_share: float, suffix_p: float | None = None) -> list[dict]:
    """ngram over k = 1..8 and two windows; suffix (k from its tree) when suffix_p is given."""
    entries = []
    for window, share in (((1, 3), draft_share), ((2, 5), draft_share * 0.9)):
        for k in range(1, 9):
            entries.append(replay_entry("ngram", k, p, share,
                                        {"prompt_lookup_min": window[0], "prompt_lookup_max": window[1]}))
    if suffix_p is not None:
        for depth in (16, 24):
            entries.append(replay_entry("suffix", depth, suffix_p, min(1.0, draft_share * 1.1),
                                        {"suffix_decoding_max_tree_depth": depth}))
            entries[-1]["config"].pop("num_speculative_tokens")
    return entries


def report(*, input_mean: float, output_mean: float, overlap4: float, rate: float | None, peak: float | None,
           replay: list[dict], apc_hit: float = 0.05, requests: int = 800, greedy: float = 1.0) -> dict:
    arrivals = None
    if rate is not None:
        arrivals = {"duration_s": requests / rate, "request_rate": rate, "peak_rate_1s": peak * 3,
                    "peak_rate_10s": peak * 1.5, "peak_rate_60s": peak, "interarrival_cv": 1.3,
                    "burstiness_gamma_shape": 0.6, "concurrency": None}
    total = input_mean + output_mean
    return {
        "tokenizer": {"name": "meta-llama/Llama-3.1-8B-Instruct", "is_default": True, "model_match": True,
                      "warning": None},
        "ingest": {"requests": requests, "skipped": 0},
        "lengths": {"input": distribution(input_mean, input_mean * 3), "output": distribution(output_mean, output_mean * 3),
                    "total": distribution(total, total * 3, total * 3.5),
                    "decode_share": output_mean / total},
        "arrivals": arrivals,
        "prefix": {"block_size": 16, "ceiling_hit_ratio": apc_hit * 1.1, "requests_with_hit_share": 0.5,
                   "prompt_tokens": int(input_mean * requests), "top_prefixes": []},
        "apc": {"block_size": 16, "capacity_blocks": 50_000, "hit_rate": apc_hit, "ceiling": apc_hit * 1.1,
                "prefill_tokens_saved": int(apc_hit * input_mean * requests), "curve": []},
        "overlap": {"prompt": {str(n): min(1.0, overlap4 * (1.3 - 0.1 * n)) for n in range(1, 6)}, "conversation": None},
        "sampling": {"temperature": {"greedy_share": greedy, "missing_share": 0.0, "p50": 0.0 if greedy > 0.5 else 0.7,
                                     "max": 1.0}},
        "replay": replay[:1],
        "replay_sweep": replay,
    }


CODE_EDITING = dict(input_mean=3000, output_mean=450, overlap4=0.72, rate=0.3, peak=0.8, replay=sweep(0.85, 0.7, 0.88))
RAG_SUMMARIZATION = dict(input_mean=4000, output_mean=250, overlap4=0.55, rate=1.0, peak=3.0, replay=sweep(0.75, 0.6, 0.78))
CHAT_MULTITURN = dict(input_mean=1500, output_mean=300, overlap4=0.08, rate=2.0, peak=5.0, replay=sweep(0.35, 0.15, 0.4),
                      apc_hit=0.62)
NO_OVERLAP = dict(input_mean=300, output_mean=300, overlap4=0.01, rate=1.0, peak=2.0, replay=sweep(0.2, 0.02, 0.2))
COPY_HEAVY_HIGH_RATE = dict(input_mean=200, output_mean=120, overlap4=0.8, rate=150.0, peak=220.0,
                            replay=sweep(0.85, 0.75))
