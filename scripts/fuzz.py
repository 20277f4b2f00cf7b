"""Fuzz campaign: N seeded cases over every log format through the real CLI in-process (tests/fuzzing.py).

    python scripts/fuzz.py --cases 10000            # the long run of .ci/run
    python scripts/fuzz.py --cases 200000 --start 10000 --format otel   # a longer campaign on one format

Prints the case count, the time, outcomes per format and exit code, and every failing case (its seed
rebuilds it: `tests/fuzzing.case(seed, fmt)`); exits 1 if any case broke an invariant, 0 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fuzzing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--format", choices=fuzzing.FORMAT_NAMES, help="only this format (default: all, at random)")
    parser.add_argument("--slow-s", type=float, default=30.0, help="report cases slower than this")
    options = parser.parse_args()

    codes: collections.Counter = collections.Counter()
    slow: list[tuple[float, str]] = []
    start = time.perf_counter()

    def on_case(case: fuzzing.Case, outcome: fuzzing.Outcome, broken: list[str]) -> None:
        codes[(case.fmt, outcome.code)] += 1
        if outcome.seconds > options.slow_s:
            slow.append((outcome.seconds, case.describe()))
        if broken:
            print(f"FAIL {case.describe()}\n  " + "\n  ".join(broken), flush=True)
        done = sum(codes.values())
        if done % 1000 == 0:
            print(f"... {done} cases, {time.perf_counter() - start:.0f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="advise-fuzz-") as workdir:
        failures = fuzzing.run_cases(range(options.start, options.start + options.cases), Path(workdir),
                                     options.format, on_case)
    elapsed = time.perf_counter() - start
    per_format: dict[str, dict[int, int]] = collections.defaultdict(dict)
    for (fmt, code), count in sorted(codes.items()):
        per_format[fmt][code] = count
    for fmt, by_code in per_format.items():
        print(f"{fmt:>13}: " + ", ".join(f"exit {code}: {count}" for code, count in by_code.items()))
    for seconds, description in slow:
        print(f"SLOW {seconds:.1f} s {description}")
    print(f"fuzz: {options.cases} cases in {elapsed:.0f} s, {len(failures)} failing, {len(slow)} slow "
          f"(> {options.slow_s:g} s)")
    return 1 if failures or slow else 0


if __name__ == "__main__":
    sys.exit(main())
