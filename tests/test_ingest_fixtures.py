"""The committed fixtures are exactly what scripts/make_fixtures.py generates (deterministic, seeded)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_generator_reproduces_committed_fixtures(tmp_path):
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_fixtures.py"), str(tmp_path)], check=True)
    generated = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in (REPO / "fixtures").iterdir() if p.name in generated)
    assert generated == committed and len(generated) == 10
    for name in generated:
        assert (tmp_path / name).read_bytes() == (REPO / "fixtures" / name).read_bytes(), name
        assert (tmp_path / name).stat().st_size < 300_000, name
