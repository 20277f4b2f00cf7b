"""SWE-agent trajectories (`.traj`, one JSON document): the `history` list of messages the agent sent.

Every assistant message is one request: its messages are the whole history before it, its completion the
assistant's text followed by its tool calls rendered as JSON (the model generated them). Tool results keep
the role "tool", as the agent sent them to the model with function calling; a chat template without a tool
role must map them (the tokenize stage decides). The number after "file:" is the message's position in
`history` (1-based); the conversation id is the file name without extension. A trajectory has no
timestamps.
"""
from __future__ import annotations

from typing import Any, Iterator

import orjson

from advisor.errors import InputError
from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, type_name
from advisor.ingest._messages import ROLE_ALIASES, content_text, with_tool_calls
from advisor.record import Message, Request

NAME = "swe-agent"


def looks_like(record: dict[str, Any]) -> bool:
    return isinstance(record.get("history"), list) and ("trajectory" in record or "info" in record)


def _message(item: Any, at: str) -> Message:
    item = expect_object(item, f"field '{at}'")
    role = item.get("role")
    if not isinstance(role, str):
        raise BadRecord("missing field" if role is None else "wrong type", f"expected a string '{at}.role'")
    text = content_text(item.get("content"), f"{at}.content")
    if role == "assistant":
        text = with_tool_calls(text, item.get("tool_calls"), f"{at}.tool_calls")
    return Message(ROLE_ALIASES.get(role, role), text)


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    try:
        document = orjson.loads(source.read_all())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{source.name}: not a valid JSON document ({exc.msg} at line {exc.lineno}, "
                         f"column {exc.colno}); a SWE-agent .traj is one JSON object") from None
    history = document.get("history") if isinstance(document, dict) else None
    if not isinstance(history, list):
        found = type_name(history) if isinstance(document, dict) else type_name(document)
        raise InputError(f"{source.name}: expected a SWE-agent trajectory with a 'history' list, got {found}")
    conversation_id = source.stem
    sink.stats.conversations += 1
    sink.stats.turns += len(history)
    messages: list[Message] = []
    answered = 0

    def items() -> Iterator[tuple[int, Any]]:
        for position, item in enumerate(history, 1):
            sink.stats.records_read += 1
            yield position, item

    def message_request(position: int, item: Any) -> list[Request]:
        """The request of an assistant message (none for other roles, which only extend the history)."""
        nonlocal answered
        message = _message(item, f"history[{position - 1}]")
        request = []
        if message.role == "assistant":
            if not messages:
                raise BadRecord("malformed turn", f"history[{position - 1}] is an assistant message with no "
                                                  f"message before it")
            request = [Request(source=f"{source.name}:{position}", conversation_id=conversation_id,
                               turn=answered, messages=tuple(messages), completion=message.content)]
            answered += 1
        else:
            sink.used(position)  # history of the requests that follow
        messages.append(message)
        return request

    for request in _schema.convert_each(items(), message_request, sink):
        yield request
