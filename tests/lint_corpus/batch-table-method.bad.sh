vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{"method": "suffix", "num_speculative_tokens_per_batch_size": [[1, 16, 8], [17, 1024, 0]]}'
