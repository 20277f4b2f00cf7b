"""`advise` end to end against the floor any tool must pay, measured in the same run, with peak RSS.

The floor: the same tokenizer encoding each DISTINCT piece of text of the log once, a piece being what
advise's per-piece cache looks up (the rendered chat prompt cut at special tokens, each completion). The
log is read and the pieces collected first, untimed (only a 16-byte digest per distinct piece is kept, so
the floor's own memory stays small on big logs); then only the encoding is timed. Multi-turn logs repeat
earlier turns in every request, so this floor is far below encoding every prompt in whole.

Then `advise` runs end to end as a child process (CLI, engine included, JSON report to a temporary file):
the default run and `--no-replay`, and with --workers N also the default run on N worker processes. With
--workers every run is pinned (sched_setaffinity) to as many cores as it has processes: a one-process run to
one core, a run on N workers to N cores, so that the speed-up printed is the N-core run's against one core
(unpinned, one process already spreads its encoder and replay threads over idle cores). For
each: wall seconds, ratio floor / advise (1.0 = as fast as the tokenizer alone on distinct text; higher is
impossible), the child's peak RSS (os.wait4) and its CPU seconds with the CPU ratio (floor CPU / advise CPU,
steadier than wall time when other work shares the cores; with workers it counts every process, and the
main process's own CPU seconds and share of the total are printed too: the part that does not spread over
the workers). For a token-free trace (nothing to encode) the floor is reading the log. Check `uptime` first: the ratio compares two runs on the same
machine, so a load change between them moves it.

    python scripts/bench_profile.py ../shared/data/sharegpt_v3_subset.json
    python scripts/bench_profile.py /tmp/big.jsonl --workers 2      # scripts/make_big_log.py makes it
    python scripts/bench_profile.py ../shared/data/sharegpt_v3_subset.json --workers 2,4,8 --runs default
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from advisor.ingest import read_requests
from advisor.tokenize import load_tokenizer

ENCODE_BATCH = 4096  # pieces per timed encode call
RUNS = {"default": [], "no-replay": ["--no-replay"]}


@dataclass(frozen=True)
class Floor:
    pieces: int  # distinct text pieces
    tokens: int
    encode_s: float  # the floor: encoding the distinct pieces once
    encode_cpu_s: float  # its CPU seconds: on a shared machine the steadier figure
    read_s: float  # reading the log and splitting it into pieces (untimed in the floor, shown apart)


def tokenization_floor(paths: list[str], tokenizer_spec: str | None) -> Floor:
    """Encodes every distinct piece of text of the logs once with the tokenizer advise uses."""
    tokenizer = load_tokenizer(tokenizer_spec)
    seen: set[bytes] = set()
    pending: list[str] = []
    tokens = 0
    encode_s = 0.0
    encode_cpu_s = 0.0
    start = time.perf_counter()

    def add(text: str | None) -> None:
        if not text:
            return
        pieces = tokenizer.split_special(text) if tokenizer.split_invariant else [text]
        for piece in pieces:
            if isinstance(piece, str) and piece:
                digest = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                if digest not in seen:
                    seen.add(digest)
                    pending.append(piece)

    def flush() -> None:
        nonlocal tokens, encode_s, encode_cpu_s
        began = time.perf_counter()
        began_cpu = time.process_time()
        if tokenizer.split_invariant:
            encoded = tokenizer.encode_ordinary(pending)
        else:
            encoded = tokenizer.encode_texts(pending, special=True)
        encode_s += time.perf_counter() - began
        encode_cpu_s += time.process_time() - began_cpu
        tokens += sum(map(len, encoded))
        pending.clear()

    for request in read_requests(paths):
        if request.messages is not None:
            add(tokenizer.render_chat(request.messages))
        else:
            add(request.prompt)
        add(request.completion)
        if len(pending) >= ENCODE_BATCH:
            flush()
    flush()
    return Floor(len(seen), tokens, encode_s, encode_cpu_s, time.perf_counter() - start - encode_s)


# The child runs the CLI and, as it ends, writes its own CPU seconds (RUSAGE_SELF: the main process and its
# threads, not the worker processes, which leave through os._exit without running this `finally`).
CHILD = """import os, resource
from advisor.cli import main
try:
    main()
finally:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["BENCH_MAIN_CPU"], "w") as out:
        out.write(repr(usage.ru_utime + usage.ru_stime))
"""


@dataclass(frozen=True)
class Run:
    seconds: float  # wall
    peak_mib: float  # peak RSS of the child or of any of its worker processes
    cpu_s: float  # the child's CPU seconds with its worker processes'
    main_cpu_s: float  # the child's own (with --workers: what is left of the work in the main process)


def run_advise(paths: list[str], extra: list[str], tokenizer_spec: str | None, cores: set[int] | None = None) -> Run:
    """`advise` end to end in a child process (with its worker processes: Linux's wait4 counts the reaped
    descendants too), on `cores` only when given (its workers inherit the affinity)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-c", CHILD, "profile", *paths, "--no-progress",
                   "-o", os.path.join(scratch, "report.json"), *extra]
        if tokenizer_spec:
            command += ["--tokenizer", tokenizer_spec]
        main_cpu_file = os.path.join(scratch, "main_cpu")
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, env={**os.environ, "BENCH_MAIN_CPU": main_cpu_file},
                                 preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores))
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"advise {' '.join(extra)} failed with exit code {os.waitstatus_to_exitcode(status)}")
        with open(main_cpu_file) as handle:
            main_cpu_s = float(handle.read())
    return Run(elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, main_cpu_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--tokenizer", default=None, help="as advise --tokenizer (default: the built-in default)")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"which advise runs, of {', '.join(RUNS)}")
    parser.add_argument("--workers", default=None,
                        help="also run the default profile on these many worker processes, e.g. 2 or 2,4,8 "
                             "(advise --workers), each pinned to as many cores; prints the speed-up of each against "
                             "the default run on one core")
    args = parser.parse_args()
    runs = {name: RUNS[name] for name in args.runs.split(",")}
    worker_counts = [int(n) for n in args.workers.split(",")] if args.workers else []
    available = sorted(os.sched_getaffinity(0))
    pinned: dict[str, set[int]] = {}
    if worker_counts:
        if max(worker_counts) > len(available):
            parser.error(f"--workers {max(worker_counts)}: only {len(available)} cores are available here")
        runs = {f"{name}, 1 core": [*extra, "--workers", "1"] for name, extra in {"default": [], **runs}.items()}
        pinned = dict.fromkeys(runs, set(available[:1]))
        for count in worker_counts:
            runs[f"default, {count} workers on {count} cores"] = ["--workers", str(count)]
            pinned[f"default, {count} workers on {count} cores"] = set(available[:count])

    print(f"load before: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    floor = tokenization_floor(args.logs, args.tokenizer)
    print(f"logs: {' '.join(args.logs)}")
    floor_s, floor_cpu_s = floor.encode_s, floor.encode_cpu_s
    if floor.pieces:
        print(f"floor: {floor.pieces:,} distinct pieces, {floor.tokens:,} tokens encoded once in {floor.encode_s:.2f} s"
              f" (CPU {floor.encode_cpu_s:.2f} s) = {floor.tokens / floor.encode_s:,.0f} tokens/s"
              f" (reading and splitting apart: {floor.read_s:.2f} s)")
    else:  # a token-free trace: nothing to encode, so the floor is reading it
        floor_s = floor_cpu_s = floor.read_s
        print(f"floor: no text in the log; reading it takes {floor_s:.2f} s")
    timings: dict[str, float] = {}
    for name, extra in runs.items():
        run = run_advise(args.logs, extra, args.tokenizer, pinned.get(name))
        timings[name] = run.seconds
        print(f"advise {name}: {run.seconds:.2f} s, ratio floor / advise {floor_s / run.seconds:.3f},"
              f" peak RSS {run.peak_mib:,.0f} MiB, CPU {run.cpu_s:.1f} s (CPU ratio {floor_cpu_s / run.cpu_s:.3f})"
              + (f", main process {run.main_cpu_s:.1f} s CPU ({run.main_cpu_s / run.cpu_s:.0%} of it)"
                 if "workers" in name else ""))
    for count in worker_counts:
        one, many = timings["default, 1 core"], timings[f"default, {count} workers on {count} cores"]
        print(f"speed-up on {count} cores ({count} workers) against one core: {one / many:.2f}x")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
