#!/usr/bin/env bash
# One calibration wave on the lent H200, from the project's root there, after ../shared/gpu's setup.sh has
# unpacked the vLLM 0.26 bundle (~/site, ~/tok; the kit's scripts, fixedk.py among them, in .gpu/scripts):
#     bash scripts/gpu_wave.sh scripts/gpu_plans/w4a.json 520
# Runs scripts/gpu_calibrate.py with the environment vLLM needs there (../shared/gpu/README.md) and leaves
# $OUT/<wave>.tar.gz: runs.json, the bench result JSONs, the nvidia-smi trace, the server logs and their key
# lines (what advisor/data/measurements/ keeps).
set -u
plan=$1; deadline=${2:-520}
name=$(basename "$plan" .json)
export PYTHONPATH="$HOME/site:$PWD/.gpu/scripts" TVM_FFI_DISABLE_TORCH_C_DLPACK=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false \
    VLLM_LOGGING_LEVEL=INFO VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_V2_MODEL_RUNNER=0
python3 scripts/gpu_calibrate.py "$plan" "/tmp/$name" --deadline-s "$deadline"
status=$?
grep -HE "KV cache|Graph capturing|max_num_batched_tokens|cudagraph_capture_sizes|Error|out of memory" \
    /tmp/"$name"/logs/*.log | cut -c1-600 > "/tmp/$name/server_key_lines.txt"
tar -C /tmp -czf "$OUT/$name.tar.gz" "$name"
ls -la "$OUT"
exit $status
