"""Builds a large OpenAI-style JSONL log from the real text logs, for the benchmarks and the memory test.

The requests of the real logs (default: ../shared/data ShareGPT subset and Aider history) are read with
advise's own readers and written again as chat requests with their completions, copy after copy, until the
file reaches --size. Each copy gets distinct conversation ids, timestamps that continue after the previous
copy's (the real inter-arrival gaps are not in these logs: Poisson arrivals at --rate req/s, seeded), and
distinct text: every message of copy c starts with a short copy marker, so the per-piece cache cannot
serve copy c from copy c - 1 and the tokenization floor grows with the log as it would for real traffic.

Write it outside the repository (never commit it):

    python scripts/make_big_log.py /tmp/big.jsonl --size 1G
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson

from advisor.ingest import read_requests
from advisor.record import Request

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
DEFAULT_SOURCES = ("sharegpt_v3_subset.json", "aider_chat_history.md")
START_EPOCH_S = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def parse_size(text: str) -> int:
    """'1G', '300M', '5000000' -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def chat_requests(paths: list[str]) -> list[Request]:
    """The chat requests with a completion (the ones every measurement uses)."""
    return [r for r in read_requests(paths) if r.messages is not None and r.completion is not None]


def records(requests: list[Request], copy: int, clock: float, rng: np.random.Generator, rate: float) -> Iterator[tuple[bytes, float]]:
    """One copy of the requests as JSONL lines, with the arrival clock after each."""
    marker = f"[{copy}] "
    for index, request in enumerate(requests):
        clock += float(rng.exponential(1.0 / rate))
        conversation = request.conversation_id or f"r{index}"
        record = {
            "id": f"req-{copy}-{index}",
            "timestamp": round(clock, 6),
            "conversation_id": f"{copy}-{conversation}",
            "messages": [{"role": m.role, "content": marker + m.content} for m in request.messages],
            "completion": marker + request.completion,
        }
        yield orjson.dumps(record) + b"\n", clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="output .jsonl (outside the repository)")
    parser.add_argument("--size", default="1G", help="target size, e.g. 1G, 300M (default 1G)")
    parser.add_argument("--rate", type=float, default=20.0, help="mean arrival rate, requests/s (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("sources", nargs="*", help=f"real logs (default: {', '.join(DEFAULT_SOURCES)} in ../shared/data)")
    args = parser.parse_intermixed_args()
    target = parse_size(args.size)
    sources = args.sources or [str(DATA / name) for name in DEFAULT_SOURCES]
    requests = chat_requests(sources)
    if not requests:
        raise SystemExit(f"no chat requests with completions in {sources}")
    rng = np.random.default_rng(args.seed)
    written = 0
    lines = 0
    copy = 0
    clock = START_EPOCH_S
    with open(args.out, "wb") as out:
        while written < target:
            for line, clock in records(requests, copy, clock, rng, args.rate):
                out.write(line)
                written += len(line)
                lines += 1
                if written >= target:
                    break
            copy += 1
    print(f"{args.out}: {lines:,} requests, {copy} copies of {len(requests):,}, {written / (1 << 20):,.0f} MiB")


if __name__ == "__main__":
    main()
