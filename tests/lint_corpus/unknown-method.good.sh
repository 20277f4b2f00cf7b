vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{"method": "suffix"}'
