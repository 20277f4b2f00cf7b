"""Turning logged chat messages (OpenAI, SWE-agent, OpenTelemetry shapes) into `Message` tuples.

Multi-part contents are joined the way vLLM flattens them for a "string" chat template
(vllm/entrypoints/chat_utils.py, `_parse_chat_message_content_parts`: text parts joined with "\\n"; images
and audio carry no text and are dropped). Tool calls the model produced are rendered as one JSON object per
call, `{"name": ..., "arguments": ...}` on its own line, the shape most open-weight templates (Hermes,
Qwen, Llama 3.1) emit: the model generated those tokens, so n-gram overlap must see them.
"""
from __future__ import annotations

from typing import Any

import orjson

from advisor.ingest._io import BadRecord, type_name
from advisor.ingest._schema import MAX_MESSAGES
from advisor.record import Message

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
# Roles open-weight chat templates know; OpenAI's "developer" is its "system", and legacy "function"
# results are tool results.
ROLE_ALIASES = {"developer": "system", "function": "tool"}


def content_text(content: Any, where: str) -> str:
    """The text of a message content: a string, null, or a list of parts (strings or typed objects)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise BadRecord("wrong type", f"field '{where}' must be a string or a list of parts, got {type_name(content)}")
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise BadRecord("wrong type", f"field '{where}[{index}]' must be an object, got {type_name(part)}")
        if part.get("type", "text") not in TEXT_PART_TYPES:
            continue
        text = part.get("text", part.get("content"))
        if not isinstance(text, str):
            raise BadRecord("wrong type", f"field '{where}[{index}].text' must be a string, got {type_name(text)}")
        texts.append(text)
    return "\n".join(texts)


def render_tool_call(name: Any, arguments: Any, where: str = "tool call") -> str:
    """One tool call as `{"name": ..., "arguments": ...}`; arguments logged as JSON text are embedded as is.

    The name is a string (or missing); arguments are JSON text or any JSON value orjson can write back
    (not an integer beyond 64 bits, not nested deeper than 254 levels).
    """
    if name is not None and not isinstance(name, str):
        raise BadRecord("wrong type", f"field '{where}.name' must be a string, got {type_name(name)}")
    try:
        if isinstance(arguments, str):
            try:
                orjson.loads(arguments)
                rendered_arguments = arguments
            except orjson.JSONDecodeError:
                rendered_arguments = orjson.dumps(arguments).decode()
        else:
            rendered_arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
    except orjson.JSONEncodeError as error:
        raise BadRecord("wrong type", f"field '{where}.arguments' cannot be rendered as JSON ({error})") from None
    return f'{{"name": {orjson.dumps(name).decode()}, "arguments": {rendered_arguments}}}'


def with_tool_calls(text: str, tool_calls: Any, where: str) -> str:
    """`text` followed by the rendered OpenAI-style `tool_calls` ([{function: {name, arguments}}]), if any."""
    if not tool_calls:
        return text
    if not isinstance(tool_calls, list):
        raise BadRecord("wrong type", f"field '{where}' must be a list, got {type_name(tool_calls)}")
    lines = [text] if text else []
    for index, call in enumerate(tool_calls):
        if not isinstance(call, dict):
            raise BadRecord("wrong type", f"field '{where}[{index}]' must be an object, got {type_name(call)}")
        function = call.get("function", call)
        if not isinstance(function, dict):
            raise BadRecord("wrong type",
                            f"field '{where}[{index}].function' must be an object, got {type_name(function)}")
        lines.append(render_tool_call(function.get("name"), function.get("arguments"), f"{where}[{index}].function"))
    return "\n".join(lines)


def chat_messages(value: Any, where: str = "messages") -> tuple[Message, ...]:
    """An OpenAI-style message list ({role, content, tool_calls?}) as `Message`s."""
    if not isinstance(value, list):
        raise BadRecord("wrong type", f"field '{where}' must be a list, got {type_name(value)}")
    if not value:
        raise BadRecord("empty conversation", f"field '{where}' is an empty list: no prompt to send")
    if len(value) > MAX_MESSAGES:
        raise BadRecord("too large", f"field '{where}' holds {len(value)} messages, limit {MAX_MESSAGES}")
    messages = []
    for index, item in enumerate(value):
        if type(item) is dict:  # the usual message, {"role": str, "content": str}, read without the checks' cost
            role, text = item.get("role"), item.get("content")
            if type(role) is str and type(text) is str and not item.get("tool_calls"):
                messages.append(Message(ROLE_ALIASES.get(role, role), text))
                continue
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise BadRecord("wrong type", f"field '{at}' must be an object, got {type_name(item)}")
        role = item.get("role")
        if role is None:
            raise BadRecord("missing field", f"expected '{at}.role'")
        if not isinstance(role, str):
            raise BadRecord("wrong type", f"field '{at}.role' must be a string, got {type_name(role)}")
        text = content_text(item.get("content"), f"{at}.content")
        text = with_tool_calls(text, item.get("tool_calls"), f"{at}.tool_calls")
        messages.append(Message(ROLE_ALIASES.get(role, role), text))
    return tuple(messages)
