vllm serve meta-llama/Llama-3.1-8B-Instruct --config data/serve.yaml
