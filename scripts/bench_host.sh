#!/bin/bash
# The many-core and one-core figures of docs/development.md, on a lent GPU host (16 cores, no network; see
# ../shared/gpu/README.md). What advise needs that the host's image lacks travels as wheels in .whl/
# (orjson, llama_models: `pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 orjson==3.13.0 llama_models==0.3.0 -d .whl`), the real logs as
# .benchdata/*.xz (xz -c ../shared/data/NAME > .benchdata/NAME.xz); both are ignored paths the call carries.
#
# Usage (from the repository root): bash scripts/bench_host.sh STEP [STEP...], steps run in order:
#   setup            install .whl into /tmp/site (unless the Python has them), unpack .benchdata into /tmp/data, compile numba's cache
#                    with one small run (the first run of a fresh machine pays the compilation)
#   make:SIZE        /tmp/big_SIZE.jsonl from the real logs (scripts/make_big_log.py --size SIZE)
#   cores:LOG:W      scripts/bench_profile.py LOG --runs default --workers W (W: a comma list)
#   one:LOG          the same on one core (taskset -c 0: the floor and advise pinned alike), one process
#   timeline:LOG:N   scripts/bench_timeline.py LOG N: where a run on N workers spends its time
# LOG is a path, or big_SIZE for a generated log. Output: printed, and kept in $OUT (or ./out) per step.
set -euo pipefail
out=${OUT:-out}
mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD
python=${PYTHON:-python3}  # the host image's Python 3.12

log_path() { case $1 in big_*) echo "/tmp/$1.jsonl" ;; *) echo "$1" ;; esac; }

for step in "$@"; do
    IFS=: read -r name arg1 arg2 <<<"$step"
    echo "== $step ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores)" | tee -a "$out/bench_host.txt"
    case $name in
        setup)
            $python -c 'import orjson, llama_models' 2>/dev/null ||
                $python -m pip install --quiet --no-index --no-deps --target /tmp/site .whl/*.whl
            mkdir -p /tmp/data
            for packed in .benchdata/*.xz; do xz -dc "$packed" > "/tmp/data/$(basename "$packed" .xz)"; done
            for warm in sharegpt_v3_subset.json mooncake_conversation_trace.jsonl; do
                $python -c 'import sys; from advisor.cli import main; sys.exit(main())' "/tmp/data/$warm" \
                    --no-progress -o /tmp/warm.json > /dev/null
            done
            ;;
        make)
            $python scripts/make_big_log.py "/tmp/big_$arg1.jsonl" --size "$arg1" \
                /tmp/data/sharegpt_v3_subset.json /tmp/data/aider_chat_history.md
            ;;
        cores)
            $python scripts/bench_profile.py "$(log_path "$arg1")" --runs default --workers "$arg2" \
                2>&1 | tee -a "$out/bench_host.txt"
            ;;
        one)
            taskset -c 0 $python scripts/bench_profile.py "$(log_path "$arg1")" --runs default \
                2>&1 | tee -a "$out/bench_host.txt"
            ;;
        timeline)
            $python scripts/bench_timeline.py "$(log_path "$arg1")" "$arg2" 2>&1 | tee -a "$out/bench_host.txt"
            ;;
        *)
            echo "unknown step $step" >&2
            exit 2
            ;;
    esac
done
