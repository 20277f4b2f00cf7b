"""OpenTelemetry GenAI spans, JSONL: one span, or one whole OTLP export, per line.

Spans may be OTLP JSON (`attributes` as a list of `{key, value: {stringValue|intValue|doubleValue|...}}`,
`startTimeUnixNano`/`endTimeUnixNano`) or flat (`attributes` as an object, or `gen_ai.*` keys on the span,
`start_time`/`end_time` as ISO text or epoch numbers). Messages follow the GenAI semantic conventions
(`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`: lists of `{role, parts}`,
as lists or JSON text); the older indexed `gen_ai.prompt.N.role/content` and `gen_ai.completion.N.content`
attributes are read too. Only model-call spans are requests: spans without `gen_ai.*` attributes, or whose
`gen_ai.operation.name` is not a model call (agent or tool spans, which would double count), are passed over;
a line with no model-call span at all is a skipped record ("no model call"), so that every line is either
used or reported. Spans without messages but with usage counts give token-free requests.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator

import orjson

from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, iter_json_lines, type_name
from advisor.ingest._messages import ROLE_ALIASES, render_tool_call
from advisor.ingest._schema import Field, Schema
from advisor.record import Message, Request, SamplingParams

NAME = "otel"
MODEL_CALL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
# OTLP JSON writes 64-bit integers (intValue, *UnixNano) as decimal text: the coercion is the format's own.
ATTRIBUTES = Schema("otel attributes", (
    Field("gen_ai.usage.input_tokens", _schema.tokens_or_text),
    Field("gen_ai.usage.prompt_tokens", _schema.tokens_or_text),
    Field("gen_ai.usage.output_tokens", _schema.tokens_or_text),
    Field("gen_ai.usage.completion_tokens", _schema.tokens_or_text),
    Field("gen_ai.usage.cache_read.input_tokens", _schema.tokens_or_text),
    Field("gen_ai.usage.cache_read_input_tokens", _schema.tokens_or_text),
    Field("gen_ai.request.temperature", _schema.temperature),
    Field("gen_ai.request.top_p", _schema.top_p),
    Field("gen_ai.request.top_k", _schema.top_k),
    Field("gen_ai.request.max_tokens", _schema.tokens_or_text),
    Field("gen_ai.request.seed", _schema.seed),
))
SPAN_TIMES = Schema("otel span", tuple(Field(key, _schema.epoch_time) for key in (
    "startTimeUnixNano", "start_time", "startTime", "endTimeUnixNano", "end_time", "endTime")))
# OTLP AnyValue nesting (arrayValue / kvlistValue) deeper than this is not a GenAI attribute.
MAX_VALUE_DEPTH = 32


def looks_like(record: dict[str, Any]) -> bool:
    if record.keys() & {"resourceSpans", "scopeSpans"}:
        return True
    attributes = record.get("attributes")
    keys = attributes.keys() if isinstance(attributes, dict) else (
        {a.get("key") for a in attributes if isinstance(a, dict)} if isinstance(attributes, list) else set()
    )
    return any(isinstance(k, str) and k.startswith("gen_ai.") for k in list(keys) + list(record))


def _values(inner: Any, where: str) -> list[Any]:
    """The `values` list of an OTLP arrayValue / kvlistValue."""
    if inner is None:
        return []
    values = expect_object(inner, f"field '{where}'").get("values", [])
    if not isinstance(values, list):
        raise BadRecord("wrong type", f"field '{where}.values' must be a list, got {type_name(values)}")
    return values


def _any_value(value: Any, where: str, depth: int = 0) -> Any:
    """An OTLP AnyValue ({"stringValue": ...} etc.) as a plain value; plain values pass through."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    if depth > MAX_VALUE_DEPTH:
        raise BadRecord("too deep", f"field '{where}' nests values deeper than {MAX_VALUE_DEPTH} levels")
    kind, inner = next(iter(value.items()))
    if kind == "intValue":
        return _schema.integer(inner, f"field '{where}.intValue'", -(2**63), 2**64 - 1, text=True)
    if kind == "arrayValue":
        return [_any_value(v, f"{where}.arrayValue", depth + 1) for v in _values(inner, f"{where}.arrayValue")]
    if kind == "kvlistValue":
        pairs = {}
        for kv in _values(inner, f"{where}.kvlistValue"):
            kv = expect_object(kv, f"field '{where}.kvlistValue.values[]'")
            key = kv.get("key")
            if not isinstance(key, str):
                raise BadRecord("wrong type", f"field '{where}.kvlistValue.values[].key' must be a string")
            pairs[key] = _any_value(kv.get("value"), f"{where}.kvlistValue", depth + 1)
        return pairs
    if kind in ("stringValue", "doubleValue", "boolValue", "bytesValue"):
        return inner
    return value


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    found = {key: value for key, value in span.items() if key.startswith("gen_ai.")}
    raw = span.get("attributes")
    if isinstance(raw, dict):
        found.update(raw)
    elif isinstance(raw, list):
        for index, item in enumerate(raw):
            item = expect_object(item, f"field 'attributes[{index}]'")
            key = item.get("key")
            if not isinstance(key, str):
                raise BadRecord("wrong type", f"field 'attributes[{index}].key' must be a string, got {type_name(key)}")
            found[key] = _any_value(item.get("value"), f"attributes[{index}].value")
    elif raw is not None:
        raise BadRecord("wrong type", f"field 'attributes' must be an object or a list, got {type_name(raw)}")
    return found


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadRecord("wrong type", f"field '{where}' must be a list, got {type_name(value)}")
    return value


def _spans(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of a line: the span itself, or all spans of an OTLP export."""
    if "resourceSpans" not in record and "scopeSpans" not in record:
        return [record]
    spans = []
    for resource in _list(record.get("resourceSpans", [record]), "resourceSpans"):
        resource = expect_object(resource, "field 'resourceSpans[]'")
        scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans", []))
        for scope in _list(scopes, "resourceSpans[].scopeSpans"):
            scope = expect_object(scope, "field 'scopeSpans[]'")
            spans.extend(expect_object(span, "field 'spans[]'")
                         for span in _list(scope.get("spans", []), "scopeSpans[].spans"))
    return spans


def _json_list(value: Any, key: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise BadRecord("invalid JSON", f"attribute '{key}' holds text that is not JSON: {exc.msg}") from None
    if not isinstance(value, list):
        raise BadRecord("wrong type", f"attribute '{key}' must be a list of messages, got {type_name(value)}")
    return value


def _parts_text(parts: Any, at: str) -> str:
    """Text of GenAI message parts: text, tool calls (rendered as JSON) and tool results."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise BadRecord("wrong type", f"field '{at}' must be a list of parts, got {type_name(parts)}")
    texts = []
    for index, part in enumerate(parts):
        part = expect_object(part, f"field '{at}[{index}]'")
        kind = part.get("type")
        if kind == "text":
            content = part.get("content", part.get("text"))
            if not isinstance(content, str):
                raise BadRecord("wrong type",
                                f"field '{at}[{index}].content' must be a string, got {type_name(content)}")
            texts.append(content)
        elif kind == "tool_call":
            texts.append(render_tool_call(part.get("name"), part.get("arguments"), f"{at}[{index}]"))
        elif kind == "tool_call_response":
            response = part.get("response")
            try:
                texts.append(response if isinstance(response, str) else orjson.dumps(response).decode())
            except orjson.JSONEncodeError as error:
                raise BadRecord("wrong type", f"field '{at}[{index}].response' cannot be rendered ({error})") from None
    return "\n".join(texts)


def _messages(items: list[Any], key: str) -> list[Message]:
    messages = []
    for index, item in enumerate(items):
        at = f"{key}[{index}]"
        item = expect_object(item, f"field '{at}'")
        role = item.get("role")
        if not isinstance(role, str):
            raise BadRecord("missing field" if role is None else "wrong type", f"expected a string '{at}.role'")
        body = item["parts"] if "parts" in item else item.get("content", "")
        messages.append(Message(ROLE_ALIASES.get(role, role), _parts_text(body, f"{at}.parts")))
    return messages


def _indexed(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Legacy `gen_ai.prompt.N.role`/`.content` attributes as a message list, in index order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix):
            index, _, field = key[len(prefix):].partition(".")
            if index.isdigit() and len(index) <= 6 and field in ("role", "content"):
                found.setdefault(int(index), {})[field] = value
    return [found[i] for i in sorted(found)]


def _prompt(attributes: dict[str, Any]) -> tuple[Message, ...] | None:
    if "gen_ai.input.messages" in attributes:
        messages = _messages(_json_list(attributes["gen_ai.input.messages"], "gen_ai.input.messages"),
                             "gen_ai.input.messages")
    else:
        legacy = _indexed(attributes, "gen_ai.prompt.")
        if not legacy:
            return None
        messages = _messages(legacy, "gen_ai.prompt")
    if "gen_ai.system_instructions" in attributes:
        instructions = attributes["gen_ai.system_instructions"]
        if not isinstance(instructions, (str, list)):
            raise BadRecord("wrong type", "attribute 'gen_ai.system_instructions' must be text or a list of parts")
        if isinstance(instructions, str) and instructions.lstrip().startswith("["):
            instructions = _json_list(instructions, "gen_ai.system_instructions")
        messages.insert(0, Message("system", _parts_text(instructions, "gen_ai.system_instructions")))
    return tuple(messages)


def _completion(attributes: dict[str, Any]) -> str | None:
    if "gen_ai.output.messages" in attributes:
        outputs = _messages(_json_list(attributes["gen_ai.output.messages"], "gen_ai.output.messages"),
                            "gen_ai.output.messages")
        return outputs[0].content if outputs else None
    legacy = [{"role": "assistant", **item} for item in _indexed(attributes, "gen_ai.completion.")]
    return _messages(legacy, "gen_ai.completion")[0].content if legacy else None


def _first(values: dict[str, Any], *keys: str) -> Any:
    return next((values[key] for key in keys if key in values), None)


def span_request(span: dict[str, Any], source: str) -> Request | None:
    """The request of one span; None for a span that is not a model call."""
    attributes = _attributes(span)
    operation = attributes.get("gen_ai.operation.name")
    if operation is not None and not isinstance(operation, str):
        raise BadRecord("wrong type", "attribute 'gen_ai.operation.name' must be a string")
    if not any(key.startswith("gen_ai.") for key in attributes) or (
        operation is not None and operation not in MODEL_CALL_OPERATIONS
    ):
        return None
    numbers = ATTRIBUTES.check(attributes)
    times = SPAN_TIMES.check(span)
    messages = _prompt(attributes)
    prompt_tokens = _first(numbers, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    if messages is None and prompt_tokens is None:
        raise BadRecord("missing field", "expected 'gen_ai.input.messages' or 'gen_ai.usage.input_tokens'")
    start = _first(times, "startTimeUnixNano", "start_time", "startTime")
    end = _first(times, "endTimeUnixNano", "end_time", "endTime")
    if start is not None and end is not None and not 0 <= end - start <= _schema.MAX_DURATION_S:
        raise BadRecord("out of range", "the span's end must follow its start by at most a week")
    model = attributes.get("gen_ai.request.model", attributes.get("gen_ai.response.model"))
    conversation = attributes.get("gen_ai.conversation.id", attributes.get("session.id"))
    if conversation is not None and not isinstance(conversation, (str, int)):
        raise BadRecord("wrong type", "attribute 'gen_ai.conversation.id' must be a string")
    return Request(
        source=source,
        timestamp=start,
        conversation_id=str(conversation) if conversation is not None else None,
        messages=messages,
        completion=_completion(attributes),
        prompt_tokens=prompt_tokens,
        completion_tokens=_first(numbers, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
        cached_tokens=_first(numbers, "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens"),
        model=model if isinstance(model, str) else None,
        sampling=SamplingParams(
            temperature=numbers.get("gen_ai.request.temperature"),
            top_p=numbers.get("gen_ai.request.top_p"),
            top_k=numbers.get("gen_ai.request.top_k"),
            max_tokens=numbers.get("gen_ai.request.max_tokens"),
            seed=numbers.get("gen_ai.request.seed"),
        ),
        latency_s=end - start if start is not None and end is not None else None,
    )


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    turns: dict[str, int] = {}

    def line_requests(line: int, record: Any) -> list[Request]:
        spans = _spans(expect_object(record, "the record"))
        found = [request for request in (span_request(span, f"{source.name}:{line}") for span in spans)
                 if request is not None]
        if not found:
            raise BadRecord("no model call", "no span of the line is a GenAI model call (agent and tool spans "
                                             "are not requests)")
        if len(found) > 1:
            found = [replace(request, source=f"{request.source}#{index}") for index, request in enumerate(found)]
        return found

    for request in _schema.convert_each(iter_json_lines(source, sink), line_requests, sink):
        if request.conversation_id is not None:
            turn = turns.get(request.conversation_id, 0)
            turns[request.conversation_id] = turn + 1
            request = replace(request, turn=turn)
        yield request
