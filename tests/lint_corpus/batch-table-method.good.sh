vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{"method": "suffix", "suffix_decoding_max_tree_depth": 16}'
