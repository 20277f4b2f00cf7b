"""Hand-built profile reports modelled on the fixture workloads, for engine tests.

They are complete documents of the report schema (`advisor.report.Report`, what `advise LOGS --json`
writes), read with `Report.from_dict`; the deployment options (model, gpu, ...) sit in `options` as the
profile records them. Replay entries are generated from a geometric acceptance model: a draft exists on
`draft_share` of steps and its j-th token is accepted with probability p**j.
"""
from __future__ import annotations

from dataclasses import replace

from advisor.report import SCHEMA_VERSION, Report


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
        "method": method, "config": config, "num_drafts": round(drafts), "num_draft_tokens": round(drafts * k),
        "num_accepted_tokens": round(drafts * accepted_per_draft), "num_accepted_past_end": 0.0,
        "num_accepted_tokens_per_pos": [round(drafts * p ** j) for j in range(1, k + 1)],
        "acceptance_rate": accepted_per_draft / k, "mean_acceptance_length": 1 + accepted_per_draft,
        "draft_step_share": draft_share, "tokens_per_step": tokens_per_step,
        "num_requests": requests, "population_requests": requests, "num_output_tokens": output_tokens,
        "decode_steps": round(steps) - requests, "sampled": False, "sampling": "all requests", "confidence_95": {},
        "token_budget_sampled": False,
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


def _arrivals(rate: float, peak: float, requests: int) -> dict:
    return {"count": requests, "duration_s": requests / rate, "mean_rate_rps": rate, "bin_s": 60.0,
            "counts_per_bin": [], "peak_bin_rate_rps": peak, "peak_rate_1s_rps": peak * 3,
            "peak_rate_10s_rps": peak * 1.5, "interarrival_s": distribution(1 / rate, 5 / rate),
            "zero_gap_share": 0.0, "smallest_positive_gap_s": 0.001, "interarrival_cv": 1.3,
            "gamma_burstiness": 0.6, "peak_rate_60s_rps": peak, "concurrency": None}


def _apc_result(hit: float, prompt_tokens: int, capacity: int | None, requests: int) -> dict:
    return {"block_size": 16, "capacity_blocks": capacity, "requests": requests, "prompt_tokens": prompt_tokens,
            "hit_tokens": int(hit * prompt_tokens), "hit_rate": hit, "queued_requests": 0, "unserved_requests": 0}


def report(*, input_mean: float, output_mean: float, overlap4: float, rate: float | None, peak: float | None,
           replay: list[dict], apc_hit: float = 0.05, requests: int = 800, greedy: float = 1.0,
           model: str | None = None, gpu: str | None = "H100", **options) -> Report:
    """A complete report; `model`, `gpu` and other keyword arguments are the recorded ProfileOptions."""
    total = input_mean + output_mean
    prompt_tokens = int(input_mean * requests)
    shares = [min(1.0, overlap4 * (1.3 - 0.1 * n)) for n in range(1, 6)]
    data = {
        "schema_version": SCHEMA_VERSION,
        "advise_version": "test",
        "inputs": [{"path": "synthetic.jsonl", "format": "openai"}],
        "options": {"paths": ["synthetic.jsonl"], "model": model, "gpu": gpu, **options},
        "tokenizer": {"name": "meta-llama/Llama-3.1-8B-Instruct", "source": "test", "kind": "hf", "vocab_size": 128256,
                      "is_default": True, "chat_template": True, "model_match": True, "warning": None},
        "ingest": {"records_read": requests, "requests": requests, "skipped": 0, "skipped_by_reason": {}, "problems": []},
        "lengths": {"input": distribution(input_mean, input_mean * 3), "output": distribution(output_mean, output_mean * 3),
                    "total": distribution(total, total * 3, total * 3.5),
                    "decode_share": output_mean / total},
        "arrivals": _arrivals(rate, peak, requests) if rate is not None else None,
        "prefix": {"block_size": 16, "requests": requests, "prompt_tokens": prompt_tokens,
                   "hit_tokens": int(apc_hit * 1.1 * prompt_tokens), "ceiling": apc_hit * 1.1,
                   "requests_with_hit_share": 0.5, "outputs_cached": True, "top_prefixes": []},
        "apc": {"at_capacity": _apc_result(apc_hit, prompt_tokens, 50_000, requests),
                "ceiling": _apc_result(apc_hit * 1.1, prompt_tokens, None, requests), "blocks_for_ceiling": 40_000,
                "curve": [], "prefill_tokens_saved": int(apc_hit * prompt_tokens), "capacity_source": "test",
                "kv_bytes_per_token": 131072.0, "assumptions": []},
        "overlap": {"n": [1, 2, 3, 4, 5], "requests": requests, "output_ngrams": [1000] * 5, "prompt_share": shares,
                    "prompt_share_request_p50": shares, "context_requests": 0, "context_share": None,
                    "context_share_request_p50": [None] * 5},
        "sampling": {"requests": requests, "temperature_missing_share": 0.0, "greedy_share": greedy,
                     "temperature_p50": 0.0 if greedy > 0.5 else 0.7, "temperature_max": 1.0,
                     "top_p_present_share": 0.0},
        "replay": replay[:1],
        "replay_sweep": replay,
        "disabled_analyses": [],
    }
    return Report.from_dict(data, "engine_reports")


def with_options(report: Report, **options) -> Report:
    """The same measurements under other deployment options (model, gpu, tp, ...)."""
    return replace(report, options=replace(report.options, **options))


CODE_EDITING = dict(input_mean=3000, output_mean=450, overlap4=0.72, rate=0.3, peak=0.8, replay=sweep(0.85, 0.7, 0.88))
RAG_SUMMARIZATION = dict(input_mean=4000, output_mean=250, overlap4=0.55, rate=1.0, peak=3.0, replay=sweep(0.75, 0.6, 0.78))
CHAT_MULTITURN = dict(input_mean=1500, output_mean=300, overlap4=0.08, rate=2.0, peak=5.0, replay=sweep(0.35, 0.15, 0.4),
                      apc_hit=0.62)
NO_OVERLAP = dict(input_mean=300, output_mean=300, overlap4=0.01, rate=1.0, peak=2.0, replay=sweep(0.2, 0.02, 0.2))
COPY_HEAVY_HIGH_RATE = dict(input_mean=200, output_mean=120, overlap4=0.8, rate=150.0, peak=220.0,
                            replay=sweep(0.85, 0.75))
