"""Readers on the real third-party logs in ../shared/data, checked against independent parses."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from advisor.ingest import IngestStats, read_requests
from advisor.record import Message

pytestmark = pytest.mark.real_data


def read(path: Path):
    stats = IngestStats()
    return list(read_requests([str(path)], stats=stats)), stats


def test_mooncake_trace(real_file):
    path = real_file("mooncake_conversation_trace.jsonl")
    requests, stats = read(path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(requests) == len(rows) == 12031 and stats.skipped == 0 and stats.formats[str(path)] == "mooncake"
    for row, request in zip(rows, requests):
        assert request.block_hashes == tuple(row["hash_ids"]) and request.hash_block_size == 512
        assert (request.prompt_tokens, request.completion_tokens) == (row["input_length"], row["output_length"])
        assert request.timestamp == row["timestamp"] / 1000


def test_azure_code_trace(real_file):
    path = real_file("azure_llm_inference_2023_code.csv")
    requests, stats = read(path)
    rows = path.read_text().splitlines()[1:]
    assert len(requests) == len(rows) == 8819 and stats.skipped == 0 and stats.formats[str(path)] == "azure"
    for row, request in ((rows[0], requests[0]), (rows[-1], requests[-1])):
        stamp, context, generated = row.split(",")
        nanos = int(np.datetime64(stamp.replace(" ", "T"), "ns").astype(np.int64))
        assert request.timestamp == pytest.approx(nanos / 1e9, abs=1e-6)
        assert (request.prompt_tokens, request.completion_tokens) == (int(context), int(generated))
    assert requests[0].timestamp == pytest.approx(1700158623.97996, abs=1e-6)
    assert all(a.timestamp <= b.timestamp for a, b in zip(requests, requests[1:]))


def test_sharegpt_one_request_per_answerable_assistant_turn(real_file):
    """Counted from the raw JSON: a request per assistant turn with a user turn anywhere before it; turns
    before the first user turn (greetings, system prompts) are history of the later requests, not problems."""
    path = real_file("sharegpt_v3_subset.json")
    requests, stats = read(path)
    conversations = json.loads(path.read_text())
    expected = leading = empty = turns = 0
    with_leading_answer = []  # (conversation index, the leading assistant text)
    for index, conversation in enumerate(conversations):
        seen_user = False
        turns += len(conversation["conversations"])
        for turn in conversation["conversations"]:
            if turn["from"] in ("human", "user"):
                seen_user = True
            elif turn["from"] in ("gpt", "bing", "chatgpt", "bard"):
                if not seen_user:
                    leading += 1
                    if not with_leading_answer or with_leading_answer[-1][0] != index:
                        with_leading_answer.append((index, turn["value"]))
                elif turn["value"].strip():
                    expected += 1
                else:
                    empty += 1
    assert len(requests) == expected == 10085 and leading > 1000 and empty == 0
    # Conversations with nothing to send (empty, or a system turn only) are reported, not silently dropped
    # (issue 11: every record is used or reported with its file:line).
    assert stats.skipped_by_reason == {"no request": 51} and stats.records_read == 3000
    assert stats.records_used + stats.records_skipped == stats.records_read
    assert (stats.conversations, stats.turns, stats.requests) == (3000, turns, expected)
    first = conversations[0]["conversations"]
    assert requests[0].messages[-1].content == first[0]["value"] and requests[0].completion == first[1]["value"]
    assert requests[1].conversation_id == requests[0].conversation_id
    assert requests[1].messages[:2] == requests[0].messages + (Message("assistant", requests[0].completion),)
    by_conversation: dict[str, list] = {}
    for request in requests:
        by_conversation.setdefault(request.conversation_id, []).append(request)
    checked = 0
    for index, greeting in with_leading_answer:
        later = by_conversation.get(str(conversations[index]["id"]), [])
        for request in later:  # every later request's history opens with the leading assistant turn
            assert request.messages[0] == Message("assistant", greeting)
            checked += 1
    assert checked > 1000


def test_sharegpt_leading_assistant_turn_is_in_the_prompt_tokens(real_file):
    """Through the whole pipeline: the greeting's tokens are in the rendered prompt ids of the next request."""
    from advisor.tokenize import RequestTokenizer, load_tokenizer

    path = real_file("sharegpt_v3_subset.json")
    requests, _ = read(path)
    leading = [r for r in requests if r.messages[0].role == "assistant" and r.turn == 0][:50]
    tokenizer = load_tokenizer()
    tokenized = RequestTokenizer(tokenizer).tokenize(leading)
    for item in tokenized:
        greeting = item.request.messages[0].content.strip()
        greeting_ids = tokenizer.encode_texts([greeting], special=False)[0]
        prompt = item.prompt_ids.tolist()
        window = greeting_ids[1:-1] or greeting_ids  # inner tokens: the edges may merge with the template
        assert any(prompt[i:i + len(window)] == window for i in range(len(prompt) - len(window) + 1))
    assert len(tokenized) == 50


def test_swe_agent_trajectory(real_file):
    path = real_file("swe_agent_marshmallow_1867.traj")
    requests, stats = read(path)
    history = json.loads(path.read_text())["history"]
    assistant = [i for i, m in enumerate(history) if m["role"] == "assistant"]
    assert len(history) == 28 and len(requests) == len(assistant) == 13 and stats.skipped == 0
    assert (stats.conversations, stats.turns) == (1, 28)
    for index, request in zip(assistant, requests):
        assert len(request.messages) == index and request.source.endswith(f":{index + 1}")
        assert request.completion.startswith(history[index]["content"])
        assert history[index]["tool_calls"][0]["function"]["name"] in request.completion
    assert requests[0].messages[0].role == "system" and requests[-1].turn == 12
    assert {m.role for m in requests[-1].messages} == {"system", "user", "assistant", "tool"}


def test_aider_transcript(real_file):
    """Counts pinned to what the reader finds; plausibility against grep-style counts of the file."""
    path = real_file("aider_chat_history.md")
    requests, stats = read(path)
    text = path.read_bytes().decode("utf-8")  # not read_text(): it would turn stray "\r" into line breaks
    sessions = len(re.findall(r"^# aider chat started at ", text, flags=re.M))
    received = len(re.findall(r"^> Tokens: .* [1-9][\d.,]*k? received", text, flags=re.M))
    assert sessions == 1133
    assert len(requests) == 883 and stats.records_read == 884
    # one reply opens its session (two aider processes wrote the file at once): it has no prompt
    # one reply opens its session (two aider processes wrote the file at once): history only, no request
    assert stats.problems == []
    conversations = {r.conversation_id for r in requests}
    assert len(conversations) == 460 < sessions
    with_counts = [r for r in requests if r.completion_tokens is not None]
    # every reply with a nonzero "received" count is found, and carries that count
    assert len([r for r in with_counts if r.completion_tokens > 0]) + 1 == received == 825
    assert all(r.timestamp is not None and r.completion and r.messages for r in requests)
    assert all(r.source.startswith(f"{path}:") for r in requests)
