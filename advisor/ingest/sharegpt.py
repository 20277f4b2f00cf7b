"""ShareGPT conversations: a JSON array (or JSONL) of `{"id", "conversations": [{"from", "value"}]}`.

`role`/`content` keys and the speaker names human/user, gpt/chatgpt/bard/bing/assistant/model and system
are accepted. Every assistant turn is one request whose messages are the whole history before it and whose
completion is that turn; history `Message`s are shared between the turns of a conversation, not copied.
An assistant (or system) turn before any user turn (a chat UI's greeting; common in ShareGPT) is ordinary
history: it is in the prompt of every later request, and is no request itself (nothing asked for it).
Only broken turns are skipped and counted (unknown speaker, missing or non-text value); an empty assistant
turn stays in the history but is no request (its text was lost). Conversations and turns are counted in
the ingest stats. ShareGPT has no timestamps.
In a JSON array the number after "file:" is the conversation's position in the array (1-based), since the
document has no line structure; in JSONL it is the line.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import orjson

from advisor.errors import InputError
from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, iter_json_lines, type_name
from advisor.ingest._messages import content_text
from advisor.record import Message, Request

NAME = "sharegpt"
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
         "bing": "assistant", "assistant": "assistant", "model": "assistant", "system": "system"}


def looks_like(record: dict[str, Any]) -> bool:
    return isinstance(record.get("conversations"), list)


def _turn(item: Any, at: str) -> Message:
    item = expect_object(item, f"field '{at}'")
    speaker = item.get("from", item.get("role"))
    if speaker is None:
        raise BadRecord("missing field", f"expected '{at}.from' or '{at}.role'")
    role = ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
    if role is None:
        raise BadRecord("unknown role", f"'{at}.from' must be one of {', '.join(sorted(ROLES))}")
    if "value" not in item and "content" not in item:
        raise BadRecord("missing field", f"expected '{at}.value' or '{at}.content'")
    return Message(role, content_text(item.get("value", item.get("content")), f"{at}.value"))


def conversation_requests(record: Any, line: int, source: str, sink: Sink) -> Iterator[Request]:
    """One request per assistant turn of one conversation; malformed turns are reported to `sink`."""
    record = expect_object(record, "the record")
    turns = record.get("conversations", record.get("messages"))
    if turns is None:
        raise BadRecord("missing field", "expected 'conversations'")
    if not isinstance(turns, list):
        raise BadRecord("wrong type", f"field 'conversations' must be a list, got {type_name(turns)}")
    conversation_id = record.get("id")
    conversation_id = str(conversation_id) if conversation_id is not None else f"{source}:{line}"
    sink.stats.conversations += 1
    sink.stats.turns += len(turns)
    history: list[Message] = []
    has_user = False
    answered = 0
    for index, item in enumerate(turns):
        at = f"conversations[{index}]"
        try:
            message = _turn(item, at)
        except BadRecord as problem:
            sink.bad(line, problem)
            continue
        if message.role == "assistant" and has_user:
            if message.content.strip():
                yield Request(source=f"{source}:{line}#{answered}", conversation_id=conversation_id,
                              turn=answered, messages=tuple(history), completion=message.content)
                answered += 1
            else:
                sink.bad(line, BadRecord("malformed turn", f"{at} is an empty assistant turn"))
        has_user = has_user or message.role == "user"
        history.append(message)


def _records(source: Source, sink: Sink) -> Iterator[tuple[int, Any]]:
    """(position, conversation) pairs of a JSON array (loaded whole) or of JSONL (streamed)."""
    if not is_array(source):
        yield from iter_json_lines(source, sink)
        return
    for position, record in enumerate(load_array(source), 1):
        sink.stats.records_read += 1
        yield position, record


def is_array(source: Source) -> bool:
    """Whether the file is one JSON array (else JSON Lines)."""
    return source.head().lstrip().startswith(b"[")


def load_array(source: Source) -> list[Any]:
    """The conversations of a file that is one JSON array; InputError when it is not valid JSON or no array."""
    try:
        document = orjson.loads(source.read_all())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{source.name}: not a valid JSON array ({exc.msg} at line {exc.lineno}, "
                         f"column {exc.colno}); a ShareGPT file is one JSON array or JSONL") from None
    if not isinstance(document, list):
        raise InputError(f"{source.name}: expected a JSON array of conversations, got {type_name(document)}")
    return document


def read_records(records: Iterable[tuple[int, Any]], name: str, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    """The requests of (position or line, conversation) records: a file's, or a chunk's in a worker."""
    return _schema.convert_each(records, lambda position, record: conversation_requests(record, position, name, sink),
                                sink)


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    return read_records(_records(source, sink), source.name, sink, hash_block_size)
