"""The openai-batch reader: a Batch API request file and its output file, joined by custom_id.

Output lines have the shape of vLLM's `BatchRequestOutput` (vllm/entrypoints/launchers/run_batch.py in
0.32: {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}; a failure has `error`
set, a status code and no body), which is also OpenAI's output/error file shape.
"""
from __future__ import annotations

from pathlib import Path

import orjson

from advisor.ingest import IngestStats, detect_format, read_requests
from advisor.record import Message


def jsonl(path: Path, *records: object) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def read(*paths: Path):
    stats = IngestStats()
    return list(read_requests([str(p) for p in paths], stats=stats)), stats


def chat_input(custom_id: str, question: str, **body: object) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": question}], **body}}


def output(custom_id: str, body: dict | None, status: int = 200, error: object = None) -> dict:
    return {"id": f"vllm-{custom_id}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": f"vllm-batch-{custom_id}", "body": body},
            "error": error}


def chat_body(text: str, prompt_tokens: int, completion_tokens: int) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1733000000, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def test_requests_and_outputs_joined_by_custom_id(tmp_path):
    requests_file = jsonl(tmp_path / "requests.jsonl",
                          chat_input("a", "first?", temperature=0.2, max_tokens=9),
                          chat_input("b", "second?"),
                          {"custom_id": "c", "method": "POST", "url": "/v1/completions",
                           "body": {"model": "m", "prompt": "Once upon", "max_tokens": 5}},
                          chat_input("d", "never answered"))
    outputs_file = jsonl(tmp_path / "outputs.jsonl",
                         output("b", chat_body("two", 5, 1)),
                         output("c", {"object": "text_completion", "choices": [{"index": 0, "text": " a time"}]}),
                         output("a", chat_body("one", 4, 1)),
                         output("x", None, 400, "Request must not be sent in stream mode"))
    assert detect_format(str(requests_file)) == detect_format(str(outputs_file)) == "openai-batch"
    requests, stats = read(outputs_file, requests_file)  # either order
    b, c, a, d = requests
    assert (b.messages, b.completion, b.prompt_tokens, b.completion_tokens) == ((Message("user", "second?"),), "two", 5, 1)
    assert (c.prompt, c.completion) == ("Once upon", " a time")
    assert (a.sampling.temperature, a.sampling.max_tokens, a.source) == (0.2, 9, f"{requests_file}:1")
    assert d.completion is None and stats.unfinished == 1
    assert all(r.timestamp is None for r in requests)  # offline traffic: `created` is no arrival time
    assert stats.skipped_by_reason == {"batch error": 1}
    assert stats.problems == [f"{outputs_file}:4: batch error: the request failed (status 400)"]
    assert stats.requests == 4 and any("offline traffic" in note for note in stats.notes)


def test_broken_lines_are_reported_with_file_and_line(tmp_path):
    requests_file = jsonl(tmp_path / "requests.jsonl", chat_input("a", "q"),
                          {"custom_id": 7, "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}},
                          {"custom_id": "e", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
                          chat_input("a", "again"))
    outputs_file = jsonl(tmp_path / "outputs.jsonl", output("a", chat_body("r", 1, 1)),
                         {"custom_id": "z", "response": {"status_code": "200", "body": {}}, "error": None})
    requests, stats = read(requests_file, outputs_file)
    assert [r.completion for r in requests] == ["r"]
    assert stats.problems == [
        f"{requests_file}:2: wrong type: field 'custom_id' must be a string, got int",
        f"{requests_file}:3: missing field: expected 'body.messages' or 'body.prompt' (chat or completions)",
        f"{requests_file}:4: duplicate custom_id: an earlier request line has the same custom_id",
        f"{outputs_file}:2: wrong type: field 'response.status_code' must be an integer, got str",
    ]


def test_output_file_alone_gives_completions(tmp_path):
    outputs_file = jsonl(tmp_path / "outputs.jsonl", output("a", chat_body("only the answer", 3, 4)))
    [request], stats = read(outputs_file)
    assert (request.messages, request.completion, request.prompt_tokens, request.completion_tokens) == (
        None, "only the answer", 3, 4)


def test_a_record_with_its_response_stays_an_openai_log(tmp_path):
    path = jsonl(tmp_path / "log.jsonl", {**chat_input("a", "q"), "response": {"body": chat_body("r", 1, 1)}})
    assert detect_format(str(path)) == "openai"


# --- a real `vllm run-batch` output ------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def check_run_batch(requests_file: Path, outputs_file: Path) -> None:
    """The reader against the raw files: every successful line joined, ids and usage as vLLM wrote them."""
    requests, stats = read(requests_file, outputs_file)
    inputs = {r["custom_id"]: r["body"] for r in map(orjson.loads, requests_file.read_bytes().splitlines())}
    outputs = [orjson.loads(x) for x in outputs_file.read_bytes().splitlines()]
    answered = [o for o in outputs if o["error"] is None]
    assert len(requests) == len(answered) == 3 and stats.unfinished == 0
    for request, line in zip(requests, answered):
        body, response = inputs[line["custom_id"]], line["response"]["body"]
        choice = response["choices"][0]
        assert request.completion == choice["message"]["content"]
        assert request.output_token_ids == tuple(choice["token_ids"])
        assert request.prompt_token_ids == tuple(response["prompt_token_ids"])
        assert len(request.prompt_token_ids) == request.prompt_tokens == response["usage"]["prompt_tokens"]
        assert (request.sampling.temperature, request.sampling.seed, request.sampling.max_tokens,
                request.sampling.n) == (body["temperature"], body["seed"], body["max_tokens"], body.get("n"))
        assert request.messages[0].role == body["messages"][0]["role"] and request.timestamp is None
    [streamed] = [o for o in outputs if o["error"] is not None]
    failed_line = list(inputs).index(streamed["custom_id"]) + 1  # its request line is reported too: read = used + skipped
    output_line = outputs.index(streamed) + 1
    assert stats.problems == [
        f"{requests_file}:{failed_line}: batch error: the request failed (status 400; output line {outputs_file}:{output_line})",
        f"{outputs_file}:{output_line}: batch error: the request failed (status 400)"]
    assert stats.records_read == stats.records_used + stats.records_skipped == 8 and stats.records_skipped == 2
    assert streamed["error"] == "Request must not be sent in stream mode"  # vLLM's run-batch refuses streams


def test_real_vllm_run_batch_files():
    check_run_batch(FIXTURES / "vllm_batch_requests.jsonl", FIXTURES / "vllm_batch_outputs.jsonl")
