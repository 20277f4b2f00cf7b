vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{"method": "medusa", "model": "FasterDecoding/medusa-vicuna-7b-v1.3", "num_speculative_tokens": 3}'
