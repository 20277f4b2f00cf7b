vllm bench serve --backend vllm --model meta-llama/Llama-3.1-8B-Instruct --endpoint /v1/completions \
  --dataset-name random --random-input-len 512 --random-output-len 256 --temperature 0 \
  --request-rate 2.5 --max-concurrency 16
