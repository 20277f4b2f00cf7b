"""Each format reader on tiny hand-written inputs and on the generated fixtures."""
from __future__ import annotations

import calendar
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import orjson
import pytest

from advisor.errors import InputError
from advisor.ingest import IngestStats, read_requests
from advisor.record import Message, SamplingParams

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def jsonl(tmp_path: Path, *records, name: str = "log.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


def read(path: str, fmt: str | None = None, **kwargs):
    stats = IngestStats()
    return list(read_requests([path], fmt, stats=stats, **kwargs)), stats


# --- openai ---------------------------------------------------------------------------------------------

def test_openai_request_response_nesting(tmp_path):
    path = jsonl(tmp_path, {
        "timestamp": "2025-03-04T09:00:00.250Z", "latency_ms": 1500, "conversation_id": "c1",
        "request": {"model": "m", "messages": [{"role": "developer", "content": "be brief"},
                                               {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                            {"type": "image_url", "image_url": {}},
                                                                            {"type": "text", "text": "b"}]}],
                    "temperature": 0.2, "top_p": 0.9, "top_k": 40, "max_completion_tokens": 64, "seed": 7},
        "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "answer"}}],
                     "usage": {"prompt_tokens": 12, "completion_tokens": 3,
                               "prompt_tokens_details": {"cached_tokens": 8}}},
    })
    [request], _ = read(path)
    assert request.messages == (Message("system", "be brief"), Message("user", "a\nb"))
    assert request.completion == "answer" and request.model == "m"
    assert request.sampling == SamplingParams(temperature=0.2, top_p=0.9, top_k=40, max_tokens=64, seed=7)
    assert (request.prompt_tokens, request.completion_tokens, request.cached_tokens) == (12, 3, 8)
    assert request.timestamp == calendar.timegm((2025, 3, 4, 9, 0, 0)) + 0.25
    assert request.latency_s == 1.5 and request.conversation_id == "c1" and request.turn == 0


def test_openai_trailing_assistant_message_is_history_not_completion(tmp_path):
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "earlier"}]
    [request], _ = read(jsonl(tmp_path, {"messages": messages}))
    assert request.completion is None and request.messages[-1] == Message("assistant", "earlier")


def test_openai_batch_body_and_json_text_body(tmp_path):
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    path = jsonl(tmp_path,
                 {"custom_id": "1", "method": "POST", "body": body},
                 {"request": {"body": orjson.dumps(body).decode()},
                  "response": {"status_code": 200, "body": {"choices": [{"message": {"content": "r"}}]}}})
    first, second = read(path, "openai")[0]  # detected, a batch request line opens an openai-batch file
    assert first.messages == second.messages == (Message("user", "q"),)
    assert first.completion is None and second.completion == "r"


def test_openai_input_output_and_responses_api(tmp_path):
    path = jsonl(tmp_path,
                 {"input": "plain prompt", "output": "plain answer", "time": 1741078800},
                 {"model": "m", "instructions": "sys", "input": [{"role": "user", "content": [
                     {"type": "input_text", "text": "hi"}]}],
                  "output": [{"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": "yo"}]},
                             {"type": "function_call", "name": "f", "arguments": "{\"x\": 1}"}]})
    first, second = read(path, "openai")[0]
    assert first.messages == (Message("user", "plain prompt"),) and first.completion == "plain answer"
    assert first.timestamp == 1741078800.0
    assert second.messages == (Message("system", "sys"), Message("user", "hi"))
    assert second.completion == 'yo\n{"name": "f", "arguments": {"x": 1}}'


def test_openai_flat_completions_with_epoch_ms_and_end_time(tmp_path):
    path = jsonl(tmp_path, {"prompt": "p", "completion": "c", "created": 1741078800123,
                            "end_time": 1741078802.123, "user": "u-9", "prompt_tokens": 5, "output_tokens": 2})
    [request], _ = read(path)
    assert request.prompt == "p" and request.completion == "c" and request.messages is None
    assert request.timestamp == pytest.approx(1741078800.123) and request.latency_s == pytest.approx(2.0)
    assert request.conversation_id == "u-9" and (request.prompt_tokens, request.completion_tokens) == (5, 2)


def test_openai_prompt_list_gives_one_request_per_prompt(tmp_path):
    path = jsonl(tmp_path, {"request": {"prompt": ["a", "b"], "n": 2},
                            "response": {"choices": [{"index": i, "text": f"t{i}"} for i in range(4)],
                                         "usage": {"prompt_tokens": 9}}},
                 {"prompt": [1, 2, 3], "response": {"choices": [{"text": "x"}]}})
    requests, _ = read(path)
    assert [(r.source.rsplit(":", 1)[1], r.prompt, r.completion, r.prompt_tokens) for r in requests] == [
        ("1#0", "a", "t0", None), ("1#1", "b", "t2", None), ("2", None, "x", 3)]


def test_openai_tool_calls_are_rendered(tmp_path):
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}
    path = jsonl(tmp_path, {"messages": [{"role": "user", "content": "list"},
                                         {"role": "assistant", "content": None, "tool_calls": [call]},
                                         {"role": "tool", "content": "a.txt"}],
                            "response": {"choices": [{"message": {"content": "done"}}]}})
    [request], _ = read(path)
    assert request.messages[1] == Message("assistant", '{"name": "bash", "arguments": {"cmd": "ls"}}')
    assert request.messages[2].role == "tool"


def test_openai_turns_count_per_conversation(tmp_path):
    records = [{"session_id": s, "prompt": "x"} for s in ("a", "b", "a", "a", "b")]
    requests, _ = read(jsonl(tmp_path, *records))
    assert [(r.conversation_id, r.turn) for r in requests] == [("a", 0), ("b", 0), ("a", 1), ("a", 2), ("b", 1)]


# --- bench-custom, mooncake -----------------------------------------------------------------------------

def test_bench_custom(tmp_path):
    path = jsonl(tmp_path, {"prompt": "hello", "output_tokens": 12}, {"output_tokens": 3}, {"prompt": "x"})
    requests, stats = read(path)
    assert stats.formats[path] == "bench-custom"
    assert [(r.prompt, r.completion_tokens) for r in requests] == [("hello", 12), ("x", None)]
    assert stats.problems == [f"{path}:2: missing field: expected 'prompt'"]


def test_mooncake_rows(tmp_path):
    path = jsonl(tmp_path, {"timestamp": 1500, "input_length": 1000, "output_length": 7, "hash_ids": [4, 5]},
                 {"timestamp": 2000, "input_length": "many", "output_length": 1, "hash_ids": []},
                 {"timestamp": 2500, "output_length": 1, "hash_ids": [1]})
    requests, stats = read(path, hash_block_size=16)
    [request] = requests
    assert (request.timestamp, request.prompt_tokens, request.completion_tokens) == (1.5, 1000, 7)
    assert request.block_hashes == (4, 5) and request.hash_block_size == 16 and not request.has_text
    assert stats.problems == [f"{path}:2: wrong type: field 'input_length' must be an integer, got str",
                              f"{path}:3: missing field: expected 'input_length'"]


# --- CSV traces -----------------------------------------------------------------------------------------

def test_azure_seven_fractional_digits_are_exact(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
                    "2023-11-16 18:17:04.0000001,3180,x\n2023-11-16 18:17:05.1234567,1,2,3\n"
                    "2023-11-16 18:17:06.1234567,5,6\n")
    requests, stats = read(str(path))
    expected = calendar.timegm(datetime(2023, 11, 16, 18, 17, 3).timetuple()) + Decimal("0.9799600")
    assert requests[0].timestamp == float(expected)
    assert requests[1].timestamp == float(Decimal(calendar.timegm((2023, 11, 16, 18, 17, 6))) + Decimal("0.1234567"))
    assert [(r.prompt_tokens, r.completion_tokens) for r in requests] == [(4808, 10), (5, 6)]
    assert stats.problems == [
        f"{path}:3: wrong type: column 'GeneratedTokens' must be an integer, got str",
        f"{path}:4: wrong column count: expected 3 columns, got 4",
    ]


def test_azure_fixture_timestamps_match_an_independent_parse():
    path = FIXTURES / "azure_trace.csv"
    rows = path.read_text().splitlines()[1:]
    requests, _ = read(str(path))
    assert len(requests) == len(rows) == 500
    for row, request in zip(rows, requests):
        nanos = np.datetime64(row.split(",")[0].replace(" ", "T"), "ns").astype(np.int64)
        assert request.timestamp == pytest.approx(int(nanos) / 1e9, abs=1e-6)


def test_burstgpt(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n45.5,GPT-4,1087,0,1087,API log\n")
    requests, stats = read(str(path))
    assert stats.formats[str(path)] == "burstgpt"
    assert [(r.timestamp, r.model, r.prompt_tokens, r.completion_tokens) for r in requests] == [
        (5.0, "ChatGPT", 472, 18), (45.5, "GPT-4", 1087, 0)]


def test_csv_with_wrong_header_for_forced_format(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n1,m,2,3\n")
    with pytest.raises(InputError, match="expected a azure CSV header"):
        read(str(path), "azure")


# --- ShareGPT -------------------------------------------------------------------------------------------

def test_sharegpt_turns_history_and_malformed_turns(tmp_path):
    path = tmp_path / "s.json"
    path.write_bytes(orjson.dumps([
        {"id": "a", "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "q1"},
                                      {"from": "gpt", "value": "r1"}, {"from": "human", "value": "q2"},
                                      {"from": "chatgpt", "value": "r2"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "hello"}, {"role": "user", "content": "q"},
                                      {"role": "assistant", "content": ""}, {"from": "robot", "value": "?"},
                                      {"from": "human", "value": "again"}, {"from": "bard", "value": "r"}]},
        {"id": "c", "conversations": "nope"},
    ]))
    requests, stats = read(str(path))
    assert [(r.conversation_id, r.turn, r.source.rsplit(":", 1)[1]) for r in requests] == [
        ("a", 0, "1#0"), ("a", 1, "1#1"), ("b", 0, "2#0")]
    first, second, third = requests
    assert first.messages == (Message("system", "sys"), Message("user", "q1")) and first.completion == "r1"
    assert second.messages[:2] == first.messages and second.messages[2:] == (
        Message("assistant", "r1"), Message("user", "q2"))
    assert second.messages[0] is first.messages[0]  # history is shared, not copied
    # the leading greeting is history, not a problem; the empty answer is history but no request
    assert third.messages == (Message("assistant", "hello"), Message("user", "q"), Message("assistant", ""),
                              Message("user", "again"))
    assert stats.skipped_by_reason == {"malformed turn": 1, "unknown role": 1, "wrong type": 1}
    assert stats.problems[0] == f"{path}:2: malformed turn: conversations[2] is an empty assistant turn"
    assert stats.problems[-1] == f"{path}:3: wrong type: field 'conversations' must be a list, got str"
    assert (stats.conversations, stats.turns, stats.requests) == (2, 11, 3)


def test_sharegpt_jsonl(tmp_path):
    path = jsonl(tmp_path, {"id": 1, "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "r"}]})
    [request], stats = read(path)
    assert stats.formats[path] == "sharegpt" and request.conversation_id == "1" and request.source == f"{path}:1#0"


def test_sharegpt_fixture_is_the_chat_fixture_workload():
    chat, _ = read(str(FIXTURES / "chat_multiturn.jsonl"))
    shared, _ = read(str(FIXTURES / "chat_sharegpt.json"))
    def key(r):
        return r.conversation_id, r.turn
    assert sorted((key(r), r.completion, r.messages[1:]) for r in chat) == sorted(
        (key(r), r.completion, r.messages) for r in shared)


# --- SWE-agent ------------------------------------------------------------------------------------------

def test_swe_agent_trajectory(tmp_path):
    call = {"id": "1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "fix"}]},
               {"role": "assistant", "content": "look", "tool_calls": [call]},
               {"role": "tool", "content": "a.py", "tool_call_ids": ["1"]}, {"content": "no role"},
               {"role": "assistant", "content": "done"}]
    path = tmp_path / "run_42.traj"
    path.write_bytes(orjson.dumps({"trajectory": [], "history": history, "info": {}}))
    requests, stats = read(str(path))
    assert stats.formats[str(path)] == "swe-agent"
    first, second = requests
    assert first.messages == (Message("system", "sys"), Message("user", "fix"))
    assert first.completion == 'look\n{"name": "bash", "arguments": {"command":"ls"}}'
    assert second.messages[2] == Message("assistant", first.completion) and second.messages[3].role == "tool"
    assert (first.conversation_id, first.turn, second.turn) == ("run_42", 0, 1)
    assert second.source == f"{path}:6"
    assert stats.problems == [f"{path}:5: missing field: expected a string 'history[4].role'"]


def test_swe_agent_without_history(tmp_path):
    path = tmp_path / "x.traj"
    path.write_bytes(b'{"trajectory": []}')
    with pytest.raises(InputError, match="'history' list"):
        read(str(path))


# --- OpenTelemetry --------------------------------------------------------------------------------------

def test_otel_flat_span_with_dict_attributes(tmp_path):
    span = {"name": "chat m", "start_time": "2025-03-04T09:00:00Z", "end_time": "2025-03-04T09:00:02.5Z",
            "attributes": {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.request.temperature": 0.5,
                "gen_ai.request.max_tokens": 100, "gen_ai.conversation.id": "conv",
                "gen_ai.system_instructions": [{"type": "text", "content": "sys"}],
                "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "q"}]}],
                "gen_ai.output.messages": orjson.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "r"},
                    {"type": "tool_call", "name": "f", "arguments": {"a": 1}}]}]).decode(),
                "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 4}}
    [request], _ = read(jsonl(tmp_path, span))
    assert request.messages == (Message("system", "sys"), Message("user", "q"))
    assert request.completion == 'r\n{"name": "f", "arguments": {"a":1}}'
    assert request.timestamp == calendar.timegm((2025, 3, 4, 9, 0, 0)) and request.latency_s == 2.5
    assert request.sampling == SamplingParams(temperature=0.5, max_tokens=100)
    assert (request.model, request.conversation_id, request.turn) == ("m", "conv", 0)
    assert (request.prompt_tokens, request.completion_tokens) == (10, 4)


def test_otel_export_skips_agent_and_plain_spans(tmp_path):
    def attrs(key, value):
        return [{"key": key, "value": value}]
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"name": "http", "attributes": attrs("http.method", {"stringValue": "POST"})},
        {"name": "agent", "attributes": attrs("gen_ai.operation.name", {"stringValue": "invoke_agent"})},
        {"name": "llm", "startTimeUnixNano": "1741078800000000000", "endTimeUnixNano": "1741078801000000000",
         "attributes": attrs("gen_ai.usage.input_tokens", {"intValue": "42"})},
        {"name": "legacy", "attributes": [
            {"key": "gen_ai.prompt.0.role", "value": {"stringValue": "user"}},
            {"key": "gen_ai.prompt.0.content", "value": {"stringValue": "hi"}},
            {"key": "gen_ai.completion.0.content", "value": {"stringValue": "hello"}}]},
    ]}]}]}
    path = jsonl(tmp_path, export, {"attributes": {"gen_ai.operation.name": "chat"}})
    requests, stats = read(path)
    assert [r.source for r in requests] == [f"{path}:1#0", f"{path}:1#1"]
    assert requests[0].prompt_tokens == 42 and requests[0].timestamp == 1741078800.0 and requests[0].latency_s == 1.0
    assert requests[1].messages == (Message("user", "hi"),) and requests[1].completion == "hello"
    assert stats.problems == [
        f"{path}:2: missing field: expected 'gen_ai.input.messages' or 'gen_ai.usage.input_tokens'"]


def test_otel_fixture_turns():
    requests, _ = read(str(FIXTURES / "otel_spans.jsonl"))
    by_conversation: dict[str, list[int]] = {}
    for request in requests:
        by_conversation.setdefault(request.conversation_id, []).append(request.turn)
        assert len(request.messages) == 2 * request.turn + 1 and request.latency_s > 0
    assert all(turns == list(range(len(turns))) for turns in by_conversation.values()) and len(by_conversation) == 20


# --- aider ----------------------------------------------------------------------------------------------

AIDER = "\n".join([  # aider ends its writes with two spaces: they are part of the format
    "# aider chat started at 2024-08-05 19:33:02",
    "",
    "> aider --model x  ",
    "> Aider v0.47  ",
    "",
    "#### make it faster  ",
    "#### please  ",
    "",
    "Sure. Here is the edit:",
    "",
    "```python",
    "x = 1",
    "```",
    "",
    "> Tokens: 5,244 sent, 1.2k cached, 604 received. Cost: $0.02 request.  ",
    "> Applied edit to a.py  ",
    "> Running lint",
    "E1 bad",
    "E2 worse  ",
    "",
    "Fixing the lint error now.",
    "",
    "> Tokens: 2k sent, 10 received.  ",
    "",
    "#### /diff  ",
    "",
    "# aider chat started at 2024-08-05 20:00:00",
    "",
    "#### hi  ",
    "",
    "Hello!",
    "",
])


def test_aider_sessions_replies_and_token_lines(tmp_path):
    path = tmp_path / "chat.md"
    path.write_text(AIDER)
    requests, stats = read(str(path))
    assert stats.formats[str(path)] == "aider" and stats.records_read == 3
    first, retry, hello = requests
    assert first.messages == (Message("user", "make it faster\nplease"),)
    assert first.completion == "Sure. Here is the edit:\n\n```python\nx = 1\n```"
    assert (first.prompt_tokens, first.cached_tokens, first.completion_tokens) == (6444, 1200, 604)
    assert first.source == f"{path}:9" and first.timestamp == calendar.timegm((2024, 8, 5, 19, 33, 2))
    # the automatic retry's prompt is the tool output aider sent back
    assert retry.messages[:2] == (first.messages[0], Message("assistant", first.completion))
    assert retry.messages[2].content.splitlines()[-2:] == ["E1 bad", "E2 worse"]
    assert retry.completion == "Fixing the lint error now." and retry.turn == 1
    assert (retry.prompt_tokens, retry.completion_tokens) == (2000, 10)
    second_session = AIDER.splitlines().index("# aider chat started at 2024-08-05 20:00:00") + 1
    assert hello.conversation_id == f"chat:{second_session}"
    assert hello.turn == 0 and hello.messages == (Message("user", "hi"),) and hello.completion == "Hello!"


# --- fixtures: the shapes they were generated to have ---------------------------------------------------

def test_rag_fixture_answers_copy_from_documents():
    requests, _ = read(str(FIXTURES / "rag_summarization.jsonl"))
    assert len(requests) == 190 and len({r.messages[0] for r in requests}) == 1
    for request in requests:
        body = request.completion.removeprefix("According to the documents: ")
        copied = [part.strip() for part in re.split(r"\(doc \d+\)", body) if part.strip()]
        assert len(copied) == 3 and all(sentence.rstrip(".") in request.messages[1].content for sentence in copied)
    span = requests[-1].timestamp - requests[0].timestamp
    assert 1.5 < (len(requests) - 1) / span < 2.5


def test_code_fixtures_copy_the_file_and_high_rate_has_latencies():
    for name, count, rate in (("code_editing.jsonl", 150, 1.0), ("copy_heavy_high_rate.jsonl", 180, 300.0)):
        requests, _ = read(str(FIXTURES / name))
        assert len(requests) == count
        for request in requests:
            search = request.completion.split("<<<<<<< SEARCH\n")[1].split("\n=======")[0]
            assert search in request.messages[1].content and request.latency_s > 0
        span = requests[-1].timestamp - requests[0].timestamp
        assert 0.7 * rate < (count - 1) / span < 1.3 * rate


def test_no_overlap_fixture_is_completions():
    requests, _ = read(str(FIXTURES / "no_overlap.jsonl"))
    assert len(requests) == 200 and all(r.prompt and r.completion and r.messages is None for r in requests)
    assert len({r.prompt[:40] for r in requests}) == 200


def test_mooncake_fixture_shares_prefix_blocks():
    requests, _ = read(str(FIXTURES / "mooncake_trace.jsonl"))
    assert len(requests) == 300 and all(r.prompt_tokens <= len(r.block_hashes) * 512 for r in requests)
    assert sum(r.block_hashes[:1] == (0,) for r in requests) > 30


def test_aider_reply_without_input_is_history_not_a_problem(tmp_path):
    path = tmp_path / "chat.md"
    path.write_text("# aider chat started at 2024-08-09 08:07:07\n\n\nOrphan reply.\n\n"
                    "#### hi  \n\nHello!\n")
    requests, stats = read(str(path))
    assert [r.completion for r in requests] == ["Hello!"]
    assert requests[0].messages == (Message("assistant", "Orphan reply."), Message("user", "hi"))
    assert stats.problems == [] and stats.skipped == 0


def test_non_finite_numbers_are_wrong_types(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "nan,m,1,2,3,x\n1,m,inf,2,3,x\n2,m,1,2,3,x\n")
    requests, stats = read(str(path))
    assert len(requests) == 1 and [p.split(": ", 1)[1] for p in stats.problems] == [
        "wrong type: column 'Timestamp' (seconds) must be a finite number",
        "wrong type: column 'Request tokens' must be a finite number"]
