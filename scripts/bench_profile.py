"""Throughput of the profile against pure tokenization of the same log, measured in one run.

The baseline renders every request (chat template) and encodes prompts and completions in whole with the
same tokenizer, in batches, without the piece cache: what any tool must pay to count tokens. The profile
is then run end to end on the same log (ingest, tokenize with the cache, all measurements; with
--replay also the ngram/suffix replays and the sweep). Figures are tokens per second and the ratio
profile / baseline, so they compare across machines.

    python scripts/bench_profile.py ../shared/data/sharegpt_v3_subset.json
    python scripts/bench_profile.py ../shared/data/sharegpt_v3_subset.json --replay
"""
from __future__ import annotations

import argparse
import resource
import time

from advisor.ingest import read_requests
from advisor.profile import ProfileOptions, build_profile
from advisor.tokenize import load_tokenizer

BATCH = 256


def tokenization_baseline(path: str, tokenizer_spec: str | None) -> tuple[int, float]:
    """(tokens, seconds) to read the log and encode every prompt and completion in whole."""
    tokenizer = load_tokenizer(tokenizer_spec)
    start = time.perf_counter()
    tokens = 0
    prompts: list[str] = []
    outputs: list[str] = []

    def flush() -> int:
        count = sum(len(ids) for ids in tokenizer.encode_texts(prompts, special=True))
        count += sum(len(ids) for ids in tokenizer.encode_texts(outputs, special=True))
        prompts.clear()
        outputs.clear()
        return count

    for request in read_requests([path]):
        if request.messages is not None:
            prompts.append(tokenizer.render_chat(request.messages))
        elif request.prompt is not None:
            prompts.append(request.prompt)
        if request.completion:
            outputs.append(request.completion)
        if len(prompts) >= BATCH:
            tokens += flush()
    tokens += flush()
    return tokens, time.perf_counter() - start


def profile_run(path: str, tokenizer_spec: str | None, replay: bool) -> tuple[float, dict]:
    """(seconds, report) of the full profile (measure only: the engine is not the subject)."""
    options = ProfileOptions(paths=(path,), tokenizer=tokenizer_spec, recommend=False, replay=replay, sweep=replay)
    start = time.perf_counter()
    report = build_profile(options).report
    return time.perf_counter() - start, report


def main(default_replay: bool = False) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--tokenizer", default=None, help="as advise --tokenizer (default: the built-in default)")
    parser.add_argument("--replay", action="store_true", default=default_replay, help="include replays and the sweep")
    args = parser.parse_args()

    base_tokens, base_s = tokenization_baseline(args.log, args.tokenizer)
    prof_s, report = profile_run(args.log, args.tokenizer, args.replay)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    base_tps = base_tokens / base_s
    prof_tps = base_tokens / prof_s  # the same log, so the same tokens
    print(f"log: {args.log} ({report.ingest.requests:,} requests)")
    print(f"tokenization baseline: {base_tokens:,} tokens in {base_s:.2f} s = {base_tps:,.0f} tokens/s")
    label = "profile + replays + sweep" if args.replay else "profile (no replays)"
    print(f"{label}: the same tokens in {prof_s:.2f} s = {prof_tps:,.0f} tokens/s")
    print(f"ratio profile / tokenization: {prof_tps / base_tps:.2f}")
    print(f"peak RSS: {peak_mb:,.0f} MB")


if __name__ == "__main__":
    main()
