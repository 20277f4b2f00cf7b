"""The default `advise` run (ngram/suffix replays and the sweep included) against the tokenization floor of
the same log, measured in the same run (scripts/bench_profile.py; issue target: ratio >= 0.5).

    python scripts/bench_replay.py ../shared/data/sharegpt_v3_subset.json
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_profile import main  # noqa: E402

if __name__ == "__main__":
    if not any(arg.startswith("--runs") for arg in sys.argv[1:]):
        sys.argv[1:1] = ["--runs", "default"]
    main()
