"""Throughput of the whole profile with the ngram/suffix replays and the sweep, against pure tokenization
of the same log in the same run (issue target: at least 50% of tokenization throughput).

    python scripts/bench_replay.py ../shared/data/sharegpt_v3_subset.json
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_profile import main  # noqa: E402

if __name__ == "__main__":
    main(default_replay=True)
