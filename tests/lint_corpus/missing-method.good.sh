vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}'
