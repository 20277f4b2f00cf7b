vllm serve Qwen/Qwen2.5-7B-Instruct --speculative-config '{"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", "num_speculative_tokens": 4}'
