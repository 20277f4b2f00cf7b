#!/usr/bin/env python3
"""Writes the sample logs in fixtures/: small, deterministic, generated from templates with a seeded RNG.

Each file is a workload with a known shape, so tests and demos can check what the profiler finds:
RAG summaries that copy sentences from the prompt, multi-turn chat with growing shared prefixes, code edits
that copy most of the file, unrelated random text (no overlap), and the token-free trace formats.
Usage: python scripts/make_fixtures.py [OUTPUT_DIR]   (default: fixtures/ next to this script's parent)
Re-running must reproduce the committed files byte for byte (tests/test_ingest_fixtures.py checks it).
"""
from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

WORDS = (
    "account action answer area article balance batch budget cache change channel check client cluster "
    "code column config cost count customer data date delay detail device disk document error event field "
    "file filter flow format group guide history host index input issue item job key label layer level "
    "limit line list load log market memory message method metric model module network node note number "
    "order output owner page partner payment plan policy pool price process product queue rate record "
    "region release report request result review risk route rule sample schema score search server "
    "service session signal source stage state status step storage stream summary support system table "
    "target task team test ticket time token trace traffic update usage user value vendor version volume "
    "warning window worker"
).split()
VERBS = "adds blocks builds checks clears counts drops fixes holds keeps limits loads moves opens reads " \
        "resets sends shows sorts splits stores tracks updates writes".split()
TOPICS = ("billing", "deployment", "onboarding", "security", "latency", "storage", "pricing", "support")
BASE_TIME = datetime(2025, 3, 4, 9, 0, 0, tzinfo=timezone.utc)
SYSTEM_RAG = (
    "You are a careful assistant for the operations team. Answer only from the retrieved documents below. "
    "Summarize the documents in a few sentences, reuse their wording where possible, keep numbers exact, "
    "and say which document each statement comes from. If the documents do not answer the question, say so."
)
SYSTEM_CHAT = "You are a friendly assistant. Keep answers short and concrete."
SYSTEM_CODE = ("You are an expert software engineer. Reply with SEARCH/REPLACE blocks that edit the given file; "
               "the SEARCH part must copy the existing lines exactly.")


def sentence(rng: random.Random, words: int = 9) -> str:
    body = [rng.choice(WORDS) for _ in range(words)]
    body.insert(2, rng.choice(VERBS))
    return " ".join(body).capitalize() + "."


def paragraph(rng: random.Random, sentences: int, words: int = 9) -> str:
    return " ".join(sentence(rng, words) for _ in range(sentences))


def iso(seconds: float) -> str:
    return (BASE_TIME + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch(seconds: float) -> float:
    return round(BASE_TIME.timestamp() + seconds, 3)


def arrivals(rng: random.Random, count: int, rate: float) -> list[float]:
    """Poisson arrival offsets in seconds at `rate` requests per second."""
    now, times = 0.0, []
    for _ in range(count):
        now += rng.expovariate(rate)
        times.append(round(now, 3))
    return times


def usage(prompt: str, completion: str, cached: int = 0) -> dict:
    """Rough token counts (4 characters per token) as a server would log them."""
    return {"prompt_tokens": len(prompt) // 4 + 4, "completion_tokens": len(completion) // 4 + 1,
            "prompt_tokens_details": {"cached_tokens": cached}}


def chat_record(messages: list[dict], answer: str, at: float, rng: random.Random, model: str, **extra) -> dict:
    prompt_chars = "".join(m["content"] for m in messages)
    latency = round(0.3 + len(answer) / 400 + rng.random() * 0.2, 3)
    return {
        "timestamp": iso(at), **extra,
        "request": {"model": model, "messages": messages, "temperature": 0.0, "max_tokens": 512},
        "response": {"created": int(epoch(at + latency)), "model": model,
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                  "finish_reason": "stop"}],
                     "usage": usage(prompt_chars, answer)},
        "latency_ms": round(latency * 1000, 1),
    }


def rag_summarization(rng: random.Random) -> list[dict]:
    pool = [paragraph(rng, 3, 6) for _ in range(40)]
    records = []
    for at in arrivals(rng, 190, 2.0):
        picked = rng.sample(range(len(pool)), 3)
        docs = "\n".join(f"[doc {i}] {pool[i]}" for i in picked)
        question = f"What do the documents say about {rng.choice(TOPICS)} {rng.choice(WORDS)}?"
        copied = [rng.choice(pool[i].split(". ")).rstrip(".") + f". (doc {i})" for i in picked]
        answer = "According to the documents: " + " ".join(copied)
        messages = [{"role": "system", "content": SYSTEM_RAG},
                    {"role": "user", "content": f"Documents:\n{docs}\n\nQuestion: {question}"}]
        records.append(chat_record(messages, answer, at, rng, "llama-3.1-8b-instruct"))
    return records


def conversations(rng: random.Random, count: int) -> list[tuple[str, list[tuple[str, str]]]]:
    """`count` conversations of 3-5 (user, assistant) exchanges; replies sometimes repeat the question."""
    result = []
    for index in range(count):
        exchanges = []
        for _ in range(rng.randint(3, 5)):
            question = sentence(rng, 6).rstrip(".") + "?"
            reply = (f"Good question. {question[:-1]}: " if rng.random() < 0.5 else "") + sentence(rng, 12)
            exchanges.append((question, reply))
        result.append((f"conv-{index:04d}", exchanges))
    return result


def chat_multiturn(rng: random.Random, chats: list[tuple[str, list[tuple[str, str]]]]) -> list[dict]:
    """Interleaved conversations: each turn's request carries the full history, ~10 s of thinking between turns."""
    starts = arrivals(rng, len(chats), 0.25)
    events = []
    for (conversation, exchanges), start in zip(chats, starts):
        at = start
        for turn in range(len(exchanges)):
            events.append((at, conversation, turn, exchanges))
            at = round(at + 4 + rng.expovariate(0.15), 3)
    records = []
    for at, conversation, turn, exchanges in sorted(events):
        messages = [{"role": "system", "content": SYSTEM_CHAT}]
        for question, reply in exchanges[:turn]:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
        messages.append({"role": "user", "content": exchanges[turn][0]})
        records.append(chat_record(messages, exchanges[turn][1], at, rng, "llama-3.1-8b-instruct",
                                   conversation_id=conversation))
    return records


def chat_sharegpt(chats: list[tuple[str, list[tuple[str, str]]]]) -> list[dict]:
    return [{"id": conversation,
             "conversations": [turn for q, r in exchanges
                               for turn in ({"from": "human", "value": q}, {"from": "gpt", "value": r})]}
            for conversation, exchanges in chats]


def code_file(rng: random.Random, functions: int) -> list[str]:
    lines = ["import os", "import sys", ""]
    for _ in range(functions):
        name, arg, other = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
        lines += [f"def {rng.choice(VERBS).rstrip('s')}_{name}({arg}, {other}=None):",
                  f"    \"\"\"{sentence(rng, 5)}\"\"\"",
                  f"    if {other} is None:",
                  f"        {other} = len({arg})",
                  f"    return {arg}[:{other}]", ""]
    return lines


def code_edit(rng: random.Random, functions: int) -> tuple[str, str]:
    """(prompt, answer): a file and an edit that copies a function and changes one of its lines."""
    lines = code_file(rng, functions)
    path = f"src/{rng.choice(WORDS)}_{rng.choice(WORDS)}.py"
    start = 3 + 6 * rng.randrange(functions)
    search = lines[start:start + 5]
    replace = search[:4] + [search[4].replace("return ", f"return sorted({rng.choice(WORDS)}) + ")]
    prompt = f"{path}\n```python\n" + "\n".join(lines) + f"\n```\n\nPlease {rng.choice(VERBS).rstrip('s')} " \
             f"the {rng.choice(WORDS)} handling in {path}."
    answer = (f"Here is the change to {path}:\n\n{path}\n```python\n<<<<<<< SEARCH\n" + "\n".join(search)
              + "\n=======\n" + "\n".join(replace) + "\n>>>>>>> REPLACE\n```\n")
    return prompt, answer


def code_editing(rng: random.Random, count: int, rate: float, functions: int) -> list[dict]:
    records = []
    for at in arrivals(rng, count, rate):
        prompt, answer = code_edit(rng, functions)
        messages = [{"role": "system", "content": SYSTEM_CODE}, {"role": "user", "content": prompt}]
        records.append(chat_record(messages, answer, at, rng, "qwen2.5-coder-7b-instruct"))
    return records


def no_overlap(rng: random.Random) -> list[dict]:
    """Completions with random-word prompts and unrelated random-word answers, flat fields, epoch times."""
    records = []
    for at in arrivals(rng, 200, 1.0):
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
        completion = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 50)))
        records.append({"created": epoch(at), "model": "llama-3.1-8b", "prompt": prompt,
                        "completion": completion, "max_tokens": 128, "temperature": 1.0,
                        "usage": usage(prompt, completion)})
    return records


def otel_spans(rng: random.Random, chats: list[tuple[str, list[tuple[str, str]]]]) -> list[dict]:
    """OTLP JSON exports, one per line: an agent span wrapping one chat span per conversation turn."""
    lines = []
    for (conversation, exchanges), start in zip(chats, arrivals(rng, len(chats), 0.5)):
        history: list[dict] = []
        spans = [{"name": "invoke_agent helper", "startTimeUnixNano": str(int(epoch(start) * 1e9)),
                  "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}]}]
        at = start
        for question, reply in exchanges:
            history.append({"role": "user", "parts": [{"type": "text", "content": question}]})
            latency = 0.4 + len(reply) / 500
            attributes = {
                "gen_ai.operation.name": {"stringValue": "chat"},
                "gen_ai.request.model": {"stringValue": "llama-3.1-8b-instruct"},
                "gen_ai.request.temperature": {"doubleValue": 0.7},
                "gen_ai.request.max_tokens": {"intValue": "256"},
                "gen_ai.conversation.id": {"stringValue": conversation},
                "gen_ai.input.messages": {"stringValue": orjson.dumps(history).decode()},
                "gen_ai.output.messages": {"stringValue": orjson.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": reply}],
                      "finish_reason": "stop"}]).decode()},
                "gen_ai.usage.input_tokens": {"intValue": str(sum(len(str(m)) for m in history) // 4)},
                "gen_ai.usage.output_tokens": {"intValue": str(len(reply) // 4)},
            }
            spans.append({"name": "chat llama-3.1-8b-instruct", "kind": 3,
                          "startTimeUnixNano": str(int(epoch(at) * 1e9)),
                          "endTimeUnixNano": str(int(epoch(at + latency) * 1e9)),
                          "attributes": [{"key": k, "value": v} for k, v in attributes.items()]})
            history.append({"role": "assistant", "parts": [{"type": "text", "content": reply}]})
            at = round(at + latency + rng.uniform(2, 20), 3)
        lines.append({"resourceSpans": [{"resource": {"attributes": []},
                                         "scopeSpans": [{"scope": {"name": "fixture"}, "spans": spans}]}]})
    return lines


def mooncake_trace(rng: random.Random) -> list[dict]:
    """Sessions whose requests extend the previous request's blocks (growing shared prefixes), in ms."""
    next_id, rows, sessions = 0, [], []
    for at in arrivals(rng, 300, 3.0):
        if sessions and rng.random() < 0.6:
            blocks = rng.choice(sessions)
        else:
            blocks = [0] if rng.random() < 0.5 else []  # block 0: a system prompt shared by half the traffic
            sessions.append(blocks)
        for _ in range(rng.randint(1, 4)):
            next_id += 1
            blocks.append(next_id)
        rows.append({"timestamp": int(at * 1000), "input_length": len(blocks) * 512 - rng.randrange(512),
                     "output_length": rng.randint(5, 600), "hash_ids": list(blocks)})
    return rows


def azure_csv(rng: random.Random) -> str:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    start = datetime(2023, 11, 16, 18, 0, 0)
    now = 0.0
    for _ in range(500):
        now += rng.expovariate(4.0)
        ticks = round(now * 1e7)  # Azure logs 7 fractional digits (100 ns ticks)
        moment = start + timedelta(seconds=ticks // 10**7)
        lines.append(f"{moment:%Y-%m-%d %H:%M:%S}.{ticks % 10**7:07d},{rng.randint(50, 8000)},{rng.randint(1, 400)}")
    return "\n".join(lines) + "\n"


def bad_lines() -> bytes:
    """A few good requests and one bad line of each class the reader reports."""
    good = {"timestamp": "2025-03-04T09:00:00Z", "messages": [{"role": "user", "content": "Hello there"}],
            "response": {"choices": [{"message": {"role": "assistant", "content": "Hi! How can I help?"}}]}}
    lines = [
        orjson.dumps(good),
        b'{"messages": [{"role": "user", "content": "cut short"}',  # truncated JSON
        orjson.dumps({"messages": "not a list"}),  # wrong type
        b'{"prompt": "caf\xe9 au lait"}',  # invalid UTF-8 (Latin-1 byte)
        orjson.dumps({"model": "llama", "temperature": 0.5}),  # missing field
        orjson.dumps({"prompt": "Write a haiku", "completion": "Quiet logs at night", "max_tokens": "many"}),
        b"[1, 2, 3]",  # not an object
        orjson.dumps({**good, "timestamp": "2025-03-04T09:00:01Z"}),
    ]
    return b"\n".join(lines) + b"\n"


def jsonl(records: list[dict]) -> bytes:
    return b"".join(orjson.dumps(record) + b"\n" for record in records)


def main(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    chats = conversations(random.Random(2), 68)
    files = {
        "rag_summarization.jsonl": jsonl(rag_summarization(random.Random(1))),
        "chat_multiturn.jsonl": jsonl(chat_multiturn(random.Random(3), chats)),
        "chat_sharegpt.json": orjson.dumps(chat_sharegpt(chats), option=orjson.OPT_INDENT_2) + b"\n",
        "code_editing.jsonl": jsonl(code_editing(random.Random(4), 150, 1.0, functions=3)),
        "copy_heavy_high_rate.jsonl": jsonl(code_editing(random.Random(5), 180, 300.0, functions=2)),
        "no_overlap.jsonl": jsonl(no_overlap(random.Random(6))),
        "otel_spans.jsonl": jsonl(otel_spans(random.Random(7), chats[:20])),
        "mooncake_trace.jsonl": jsonl(mooncake_trace(random.Random(8))),
        "azure_trace.csv": azure_csv(random.Random(9)).encode(),
        "bad_lines.jsonl": bad_lines(),
    }
    for name, content in files.items():
        (output / name).write_bytes(content)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "fixtures")
