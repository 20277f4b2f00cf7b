"""The fuzz suite's short run: seeded structured mutations of every format's fixtures through the real CLI.

tests/fuzzing.py builds the cases and checks the invariants (exit code in the README's table, no traceback
or warning, read = used + skipped with file:line for every skipped record, no prompt text in any output).
The long run (>= 10,000 cases) is `scripts/fuzz.py` in .ci/run.
"""
from __future__ import annotations

import pytest

import fuzzing

CASES_PER_FORMAT = 36  # x 11 formats: a few hundred cases in the fast suite


@pytest.mark.parametrize("fmt", fuzzing.FORMAT_NAMES)
def test_fuzz_format(tmp_path, fmt):
    start = 1_000_000 + fuzzing.FORMAT_NAMES.index(fmt) * CASES_PER_FORMAT
    failures = fuzzing.run_cases(range(start, start + CASES_PER_FORMAT), tmp_path, fmt)
    assert not failures, "\n".join(f"{case.describe()}\n  " + "\n  ".join(broken) for case, broken in failures[:5])


def test_every_format_is_fuzzed():
    """A new format cannot slip past the fuzz suite unnoticed."""
    from advisor.ingest import FORMATS

    assert set(fuzzing.FORMAT_NAMES) == set(FORMATS)


def test_the_invariants_catch_what_they_guard(tmp_path):
    """The checker itself fails on a traceback, an unreported record and leaked prompt text."""
    case = fuzzing.Case(seed=0, fmt="openai", name="log.jsonl", data=b"", args=[])
    crashed = fuzzing.Outcome(1, "", "Traceback (most recent call last):", b"", ValueError("x"), [], 0.0)
    assert any("uncaught ValueError" in b for b in fuzzing.check(case, crashed, tmp_path))
    report = ('{"ingest": {"records_read": 3, "records_used": 1, "records_skipped": 1, "skipped": 1, '
              '"problems": []}, "x": "%s"}' % fuzzing.CANARY)
    leaked = fuzzing.Outcome(0, report, "", report.encode(), None, [], 0.0)
    broken = fuzzing.check(case, leaked, tmp_path)
    assert any("records read 3 != used 1 + skipped 1" in b for b in broken)
    assert any("canary" in b for b in broken)
