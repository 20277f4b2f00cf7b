vllm serve meta-llama/Llama-3.1-8B-Instruct --spec-method ngram --speculative-config '{"num_speculative_tokens": 4, "prompt_lookup_max": 4}'
