"""Serve a model with vLLM's request logging on, send real chat and completions requests, keep both logs.

Writes into OUT: `server.log` (vLLM's own log: `--enable-log-requests --enable-log-outputs` at DEBUG, the
level at which vLLM 0.32 logs prompts and token ids) and `openai.jsonl` (one {"timestamp", "request",
"response"} record per request, the OpenAI-style log of the same traffic, with the token ids the server
returned: `return_token_ids`). Streamed responses are stored as the assembled response object (text and
token ids joined over the chunks), as a logging proxy would, plus `ids_of_chunks_with_text` (the ids of
the chunks that carried text: the ones vLLM logs a delta for).

Run with the advisor venv's python (it imports advisor.verify.server):
    capture_request_log.py VLLM_PYTHON MODEL_DIR OUT [--enforce-eager]
Used by tests/test_ingest_vllm_log.py and to refresh fixtures/vllm_server.log.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from advisor.verify.server import VllmServer  # noqa: E402

SERVED = "tiny"
MAX_LOG_LEN = 400  # the long prompt below exceeds it: its logged prompt and ids are cut
CONVERSATION = [
    "List three colors of the rainbow.",
    "Now repeat the same three colors in reverse order.",
]
LONG_PROMPT = " ".join(f"item {i} is number {i};" for i in range(120))


def _post(url: str, body: dict, stream: bool) -> dict:
    """One request; a stream is assembled into one response with the text and token ids of all chunks."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        if not stream:
            return json.loads(answer.read())
        chunks = [json.loads(line[6:]) for line in answer.read().decode().splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    chat = "chat" in url
    text, token_ids, with_text, finish, prompt_ids = [], [], [], None, None
    for chunk in chunks:
        prompt_ids = chunk.get("prompt_token_ids") or prompt_ids
        for choice in chunk.get("choices", []):
            prompt_ids = choice.get("prompt_token_ids") or prompt_ids
            piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
            text.append(piece or "")
            token_ids.extend(choice.get("token_ids") or [])
            if piece:  # vLLM logs a delta only for a chunk with text
                with_text.extend(choice.get("token_ids") or [])
            finish = choice.get("finish_reason") or finish
    joined = "".join(text)
    choice = {"index": 0, "finish_reason": finish, "token_ids": token_ids, "ids_of_chunks_with_text": with_text}
    choice.update({"message": {"role": "assistant", "content": joined}} if chat else {"text": joined})
    return {"id": chunks[0]["id"], "object": "assembled_stream", "prompt_token_ids": prompt_ids, "choices": [choice]}


def send_all(base: str) -> list[dict]:
    """The traffic: chat and completions, streamed and not, greedy and sampled, a two-turn conversation."""
    records = []

    def send(kind: str, body: dict) -> dict:
        body = {"model": SERVED, "return_token_ids": True, **body}
        started = time.time()
        response = _post(f"{base}/v1/{kind}", body, bool(body.get("stream")))
        records.append({"timestamp": started, "latency_s": time.time() - started, "request": body,
                        "response": response})
        return response

    history: list[dict] = []
    for turn, question in enumerate(CONVERSATION):
        history.append({"role": "user", "content": question})
        # Sampled: the tiny model's greedy choice is a token with no text, which vLLM does not log.
        answer = send("chat/completions", {"messages": list(history), "max_tokens": 24, "temperature": 0.8,
                                           "seed": turn, "stream": turn == 1})
        history.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
    send("chat/completions", {"messages": [{"role": "system", "content": "Answer briefly."},
                                           {"role": "user", "content": "What is a prefix cache?"}],
                              "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 7})
    for seed, topic in enumerate(("caching", "batching", "decoding")):
        send("chat/completions", {"messages": [{"role": "user", "content": f"Explain {topic} twice, word for word."}],
                                  "max_tokens": 32, "temperature": 0.3, "seed": 10 + seed})
    # Three likely tokens with text: outputs repeat themselves, so the ngram proposer drafts and is accepted.
    for seed in (20, 21):
        send("chat/completions", {"messages": [{"role": "user", "content": "Count with me: 746 421 Decode 746 421"}],
                                  "max_tokens": 40, "temperature": 1.0, "seed": seed,
                                  "logit_bias": {"1170": 12, "1311": 12, "620": 12}})
    send("chat/completions", {"messages": [{"role": "user", "content": "Two answers, please."}], "max_tokens": 8,
                              "temperature": 1.0, "seed": 5, "n": 2})
    # Greedy, the tiny model's first token has no text: vLLM logs no output line for an empty response.
    send("chat/completions", {"messages": [{"role": "user", "content": "List three colors of the rainbow."}],
                              "max_tokens": 4, "temperature": 0})
    send("completions", {"prompt": "The quick brown fox", "max_tokens": 20, "temperature": 0})
    send("completions", {"prompt": "def add(a, b):\n    return", "max_tokens": 12, "temperature": 0.5,
                         "seed": 3, "stream": True})
    send("completions", {"prompt": LONG_PROMPT, "max_tokens": 8, "temperature": 0})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vllm_python", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--enforce-eager", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    serve_args = ["--enable-log-requests", "--enable-log-outputs", "--max-log-len", str(MAX_LOG_LEN),
                  "--max-model-len", "2048", "--max-num-seqs", "4", "--seed", "0"]
    if args.enforce_eager:
        serve_args.append("--enforce-eager")
    server = VllmServer(args.vllm_python, str(args.model), args.out / "server.log", args.out, serve_args,
                        served_model_name=SERVED)
    server.env.update(VLLM_LOGGING_LEVEL="DEBUG", NO_COLOR="1")
    with server:
        records = send_all(server.url)
    with open(args.out / "openai.jsonl", "w", encoding="utf-8") as log:
        for record in records:
            log.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
