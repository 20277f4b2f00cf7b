"""Where one `advise` run's wall time goes, with --workers: a timeline of the main process and each worker.

bench_profile.py says how fast a run is against the floor; this says why a many-core run is not N times
faster. It runs `build_profile` in this process (no CLI, no report written) with marks around its stages,
wrapping the stream's own functions: when the pool started, when the stream ended, each analysis after it
(its own seconds: they overlap on threads; the replays' ngram and suffix passes apart), the engine; how
long the main process waited on the workers, and the CPU seconds of its main thread in each part of its
per-chunk work (receiving a result, the context's run, collecting it, finding line ends: the work that
bounds how many workers it keeps busy); and for each worker when it started, its first and last job,
its busy seconds over how many chunks. Wall seconds and the main process's CPU seconds (its threads
included) at each mark, with its peak RSS so far (where the peak is reached), and its peak RSS at the end.

    python scripts/bench_timeline.py /tmp/big_1G.jsonl 16     # the log, the worker count
    python scripts/bench_timeline.py LOG 16 --in-flight 4       # stream.IN_FLIGHT_PER_WORKER for this run
    python scripts/bench_timeline.py LOG 2 --row-budget 50000   # stream.ROW_BUDGET: the peak past it

Workers report through files in a scratch directory (they are forked and leave through os._exit).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

START = time.perf_counter()
import advisor.cli  # noqa: E402,F401  the CLI's process settings: OpenBLAS on one thread, 2 malloc arenas

from advisor import profile, stream  # noqa: E402  (the import is part of the timeline)
from advisor.ingest import _io  # noqa: E402
from advisor.measure import ngram, specreplay, state  # noqa: E402
from advisor.report import ProfileOptions  # noqa: E402

# (label, wall seconds since start, main-process CPU seconds, its peak RSS so far in MiB: where the peak is reached)
marks: list[tuple[str, float, float, int]] = []
# The main thread's CPU seconds (time.thread_time) in each part of its per-chunk work, and that part's calls.
main_thread: dict[str, float] = {}
main_calls: dict[str, int] = {}


def mark(label: str) -> None:
    marks.append((label, time.perf_counter() - START, time.process_time(),
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))


def timed(owner: Any, name: str, label: Callable[[float], str], before: str | None = None) -> None:
    """Replaces owner.name by a wrapper that marks its end, labelled with its own seconds (and its start,
    labelled `before`, when given)."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            mark(before)
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            mark(label(time.perf_counter() - began))

    setattr(owner, name, wrapper)


def thread_timed(owner: Any, name: str, part: str) -> None:
    """Replaces owner.name by a wrapper that adds its thread CPU seconds to main_thread[part] and counts its
    calls in main_calls[part]."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            main_thread[part] = main_thread.get(part, 0.0) + time.thread_time() - began
            main_calls[part] = main_calls.get(part, 0) + 1

    setattr(owner, name, wrapper)


def instrument_workers(scratch: str) -> None:
    """Each worker counts its busy time per chunk and writes it to `scratch` as it ends."""
    measure_chunk, worker_main = stream._measure_chunk, stream._worker_main
    busy: dict[str, Any] = {"seconds": 0.0, "chunks": 0, "first": None, "last": None}

    def chunk(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        busy["first"] = busy["first"] if busy["first"] is not None else began - START
        try:
            return measure_chunk(*args, **kwargs)
        finally:
            busy["seconds"] += time.perf_counter() - began
            busy["chunks"] += 1
            busy["last"] = time.perf_counter() - START

    def main(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter() - START
        try:
            worker_main(*args, **kwargs)
        finally:
            with open(os.path.join(scratch, f"worker-{os.getpid()}.json"), "w") as out:
                json.dump({"start": started, "end": time.perf_counter() - START, "cpu": time.process_time(),
                           **busy}, out)

    stream._measure_chunk, stream._worker_main = chunk, main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("workers", type=int)
    parser.add_argument("--in-flight", type=int, default=stream.IN_FLIGHT_PER_WORKER,
                        help="chunks sent ahead to each worker (stream.IN_FLIGHT_PER_WORKER)")
    parser.add_argument("--row-budget", type=int, default=stream.ROW_BUDGET,
                        help="requests whose per-request numbers are kept (stream.ROW_BUDGET): a lower one shows"
                             " the peak past it on a log of a size at hand")
    args = parser.parse_args()
    stream.IN_FLIGHT_PER_WORKER = args.in_flight
    stream.ROW_BUDGET = args.row_budget
    mark("imported")

    waited = {"seconds": 0.0, "first": None}
    receive = stream._receive

    def receive_timed(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        result = receive(*a, **k)
        waited["seconds"] += time.perf_counter() - began
        waited["first"] = waited["first"] if waited["first"] is not None else time.perf_counter() - START
        return result

    stream._receive = receive_timed
    thread_timed(stream, "_receive", "receiving results")
    thread_timed(state.ContextOutputs, "push_run", "the context's runs")
    thread_timed(stream, "collect_batch", "collecting")
    thread_timed(_io, "_line_ends", "finding line ends")
    timed(stream._WorkerPool, "_start", lambda seconds: "pool started", before="pool start")
    timed(profile, "_assemble", lambda seconds: "analyses done", before="stream done")
    for name in ("_prefix", "_apc", "_replays", "_features", "_segments"):
        timed(profile, name, lambda seconds, name=name: f"  {name} ended ({seconds:.2f} s)")
    timed(ngram, "replay_ngram", lambda seconds: f"    ngram pass ended ({seconds:.2f} s)")
    timed(specreplay, "_suffix_counters", lambda seconds: f"    suffix pass ended ({seconds:.2f} s)")
    with tempfile.TemporaryDirectory() as scratch:
        instrument_workers(scratch)
        profile.build_profile(ProfileOptions(paths=(args.log,)), workers=args.workers)
        mark("recommended")
        workers = [json.loads(Path(scratch, name).read_text()) for name in os.listdir(scratch)]

    if waited["first"] is not None:
        print(f"main process waited on the workers {waited['seconds']:.2f} s; first result at {waited['first']:.2f} s")
        chunks = main_calls.get("collecting", 0)  # one collect_batch a chunk
        count = max(chunks, 1)
        print(f"main thread CPU over {chunks} chunks: " + ", ".join(
            f"{part} {seconds:.2f} s ({1000 * seconds / count:.2f} ms a chunk)" for part, seconds in main_thread.items()))
    for label, wall, cpu, peak in marks:
        print(f"{wall:8.2f} s  main CPU {cpu:6.2f} s  peak RSS {peak:5d} MiB  {label}")
    for worker in sorted(workers, key=lambda w: w["start"]):
        print(f"worker: start {worker['start']:.2f} s, first job {worker['first'] or 0:.2f} s, last job ended"
              f" {worker['last'] or 0:.2f} s, end {worker['end']:.2f} s; busy {worker['seconds']:.2f} s over"
              f" {worker['chunks']} chunks, CPU {worker['cpu']:.2f} s")
    print(f"peak RSS of the main process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")


if __name__ == "__main__":
    main()
