vllm serve deepseek-ai/DeepSeek-V3 --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'
