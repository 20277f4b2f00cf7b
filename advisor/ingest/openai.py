"""OpenAI-style request/response logs, one JSON object per line.

Accepted shapes, all normalised to a (request, response) pair before reading fields:
- `{"request": {...}, "response": {...}}`, the Batch API's `{"body": {...}}` / `{"response": {"body": {...}}}`
  (a body logged as JSON text is parsed), and `{"input": ..., "output": ...}` (input: prompt text, message
  list or request object);
- flat records: the request's own fields plus `response` / `completion` / `output` / `output_text` /
  `generated_text` (text or a response object) and top-level `usage` or `prompt_tokens`-style counts.
Requests are chat (`messages`, or the Responses API's `input` + `instructions`) or completions (`prompt`).
A completions `prompt` that is a list gives one request per element (source "file:line#i"): that is how
the server runs it; with `n > 1` the first choice of each prompt is the completion, and the summed `usage`
cannot be split so token counts are left empty. Token-id prompts give token-free requests. Token ids a
vLLM server returned (`return_token_ids`: `prompt_token_ids`, `choices[i].token_ids`) are kept as they are.
An assistant message at the end of `messages` is history, never the completion: only a logged response is.
Timestamps (ISO text or epoch s/ms/us/ns), latencies, TTFT and conversation ids are looked up under the
usual names in the record, then the request, then the response; `turn` is the logged one or the count of
earlier requests of the same conversation in the file.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import orjson

from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, iter_json_lines, type_name
from advisor.ingest._schema import Field, Schema
from advisor.ingest._messages import chat_messages, content_text, render_tool_call, with_tool_calls
from advisor.record import Message, Request, SamplingParams

NAME = "openai"
REQUEST_KEYS = frozenset({"messages", "prompt"})
RESPONSE_TEXT_KEYS = ("response", "completion", "output", "output_text", "generated_text")
TIME_KEYS = ("timestamp", "time", "ts", "request_time", "start_time", "startTime", "created_at", "created",
             "arrival_time", "date")
END_KEYS = ("end_time", "endTime", "completed_at", "finish_time", "end")
LATENCY_S_KEYS = ("latency", "latency_s", "duration", "duration_s", "elapsed", "elapsed_s", "response_time",
                  "total_time")
LATENCY_MS_KEYS = ("latency_ms", "duration_ms", "elapsed_ms", "response_time_ms")
TTFT_S_KEYS = ("ttft", "ttft_s", "time_to_first_token")
TTFT_MS_KEYS = ("ttft_ms", "time_to_first_token_ms")
CONVERSATION_KEYS = ("conversation_id", "session_id", "thread_id", "chat_id", "conversation", "session",
                     "user", "user_id")
# The serving replica, as a gateway or a multi-instance log names it (advisor.measure.routing).
REPLICA_KEYS = ("replica", "replica_id", "instance", "instance_id", "pod", "pod_name")
# The checked scalar fields, per layer they are read from (docs/input.md: accepted ranges).
SAMPLING = Schema("openai request", (
    Field("temperature", _schema.temperature),
    Field("top_p", _schema.top_p),
    Field("top_k", _schema.top_k),
    Field("max_tokens", _schema.tokens),
    Field("max_completion_tokens", _schema.tokens),
    Field("max_output_tokens", _schema.tokens),
    Field("seed", _schema.seed),
    Field("n", _schema.small_count),
))
USAGE_FIELDS = ("prompt_tokens", "input_tokens", "completion_tokens", "output_tokens", "cache_read_input_tokens")
USAGE = Schema("openai usage", tuple(Field(key, _schema.tokens) for key in USAGE_FIELDS))
CACHED = Schema("openai usage details", (Field("cached_tokens", _schema.tokens),))
USAGE_KEYS = frozenset({"usage", "prompt_tokens_details", "input_tokens_details", *USAGE_FIELDS})
LATENCY_KEYS = frozenset(LATENCY_S_KEYS + LATENCY_MS_KEYS)
TTFT_KEYS = frozenset(TTFT_S_KEYS + TTFT_MS_KEYS)
NOT_LOGGED = SamplingParams()  # frozen: one instance for every record without sampling fields


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    """Requests of an OpenAI-style JSONL log, in file order."""
    return read_records(iter_json_lines(source, sink), source.name, sink, hash_block_size)


def read_records(records: Iterable[tuple[int, Any]], name: str, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    """The requests of (line, parsed record) pairs of the file `name`. The requests of a conversation that the
    log gives no turn are numbered in the order read: over the whole file in `read`; within the chunk for a
    chunk parsed by a worker process (advisor.ingest.parse_chunk), whose requests' turns nothing reads."""
    turns: dict[str, int] = {}
    for request in _schema.convert_each(records, lambda line, record: convert(record, f"{name}:{line}"), sink):
            if request.conversation_id is not None and request.turn is None:
                turn = turns.get(request.conversation_id, 0)
                turns[request.conversation_id] = turn + 1
                # The request was made by `convert` just now and nothing holds it yet: setting the field in
                # place is `dataclasses.replace` without building the 20-field record again (7 us a request).
                object.__setattr__(request, "turn", turn)
            yield request


def looks_like(record: dict[str, Any]) -> bool:
    """Whether a sniffed first record has the shape of a request/response log."""
    keys = record.keys()
    return bool(keys & {"messages", "prompt", "request", "body", "input", "choices"}) or bool(
        keys & set(RESPONSE_TEXT_KEYS) and keys & {"model", "usage"}
    )


def _unwrap_body(value: Any, where: str) -> Any:
    """Follows `body` wrappers (Batch API, HTTP proxies); a body logged as JSON text is parsed."""
    while isinstance(value, dict) and "body" in value and not value.keys() & REQUEST_KEYS:
        body = value["body"]
        if isinstance(body, (str, bytes)):
            try:
                body = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRecord("invalid JSON",
                                f"field '{where}.body' holds text that is not JSON: {exc.msg}") from None
        value = body
        where += ".body"
    return value


def _split(record: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The request object and the response (object, text, list or None) of one log record."""
    if "request" in record or ("body" in record and not record.keys() & REQUEST_KEYS):
        request = _unwrap_body(record.get("request", record), "request")
        request = expect_object(request, "field 'request'")
        return request, _unwrap_body(record.get("response"), "response")
    if "input" in record and not record.keys() & REQUEST_KEYS:
        given = record["input"]
        if isinstance(given, dict) and given.keys() & (REQUEST_KEYS | {"input"}):
            request = given
        else:
            request = {**record, "input": given}
        return request, _unwrap_body(record.get("output"), "output")
    for key in RESPONSE_TEXT_KEYS:
        if record.get(key) is not None:
            return record, _unwrap_body(record[key], key)
    return record, record if "choices" in record else None


def _prompt_messages(request: dict[str, Any]) -> tuple[Message, ...] | None:
    """Chat messages of a chat-completions or Responses API request; None for a completions request."""
    if "messages" in request:
        return chat_messages(request["messages"])
    if "input" not in request or "prompt" in request:
        return None
    given = request["input"]
    messages: tuple[Message, ...]
    if isinstance(given, str):
        messages = (Message("user", given),)
    elif isinstance(given, list):
        items = [item if isinstance(item, dict) and "role" in item else {"role": "user", "content": item}
                 for item in given]
        messages = chat_messages(items, "input")
    else:
        raise BadRecord("wrong type", f"field 'input' must be a string or a list of messages, got {type_name(given)}")
    instructions = request.get("instructions")
    if isinstance(instructions, str):
        messages = (Message("system", instructions),) + messages
    return messages


def _prompts(request: dict[str, Any]) -> list[str | list[int]]:
    """The completions `prompt` as a list of prompts (text, or token ids)."""
    prompt = request["prompt"]
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
        _token_ids(prompt, "prompt")
        return [prompt]
    if isinstance(prompt, list) and prompt:
        for index, item in enumerate(prompt):
            if not isinstance(item, (str, list)):
                raise BadRecord("wrong type",
                                f"field 'prompt[{index}]' must be a string or token ids, got {type_name(item)}")
            if isinstance(item, list):
                _token_ids(item, f"prompt[{index}]")
        return prompt
    raise BadRecord("wrong type", f"field 'prompt' must be a string or a non-empty list, got {type_name(prompt)}")


def _token_ids(ids: list[Any], where: str) -> None:
    """A token-id prompt: integers in a vocabulary's range, at most MAX_TOKENS of them (only its length is used)."""
    if len(ids) > _schema.MAX_TOKENS:
        raise BadRecord("out of range", f"field '{where}' holds {len(ids)} token ids, limit {_schema.MAX_TOKENS}")
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < 2**31:
            raise BadRecord("wrong type", f"field '{where}' must hold token ids (integers in [0, 2^31))")


def _choice_text(choice: Any, where: str) -> str:
    choice = expect_object(choice, f"field '{where}'")
    message = choice.get("message")
    if isinstance(message, dict):
        text = content_text(message.get("content"), f"{where}.message.content")
        return with_tool_calls(text, message.get("tool_calls"), f"{where}.message.tool_calls")
    text = choice.get("text")
    if isinstance(text, str):
        return text
    raise BadRecord("missing field", f"expected '{where}.message.content' or '{where}.text'")


def _choice_index(choice: Any) -> int:
    index = choice.get("index") if isinstance(choice, dict) else None
    return 0 if index is None else _schema.integer(index, "field 'choices[].index'", 0, _schema.MAX_REQUESTS_PER_RECORD)


def _output_items_text(items: list[Any]) -> str:
    """Text of a Responses API `output` list (message items and function calls) or of a message list."""
    texts = []
    for index, item in enumerate(items):
        item = expect_object(item, f"field 'output[{index}]'")
        if item.get("type") == "function_call":
            texts.append(render_tool_call(item.get("name"), item.get("arguments")))
        elif item.get("role", "assistant") == "assistant" and "content" in item:
            texts.append(with_tool_calls(content_text(item["content"], f"output[{index}].content"),
                                         item.get("tool_calls"), f"output[{index}].tool_calls"))
    return "\n".join(texts)


def _completions(response: Any) -> list[str] | None:
    """Completion text per choice index; None when the response carries no text."""
    if response is None:
        return None
    if isinstance(response, str):
        return [response]
    if isinstance(response, list):
        return [_output_items_text(response)]
    response = expect_object(response, "field 'response'")
    choices = response.get("choices")
    if choices is not None:
        if not isinstance(choices, list):
            raise BadRecord("wrong type", f"field 'choices' must be a list, got {type_name(choices)}")
        ordered = sorted(choices, key=lambda c: _choice_index(c))
        return [_choice_text(choice, f"choices[{i}]") for i, choice in enumerate(ordered)] or None
    if isinstance(response.get("output_text"), str):
        return [response["output_text"]]
    if isinstance(response.get("output"), list):
        return [_output_items_text(response["output"])]
    for key in ("text", "completion", "generated_text", "content"):
        if key in response and response[key] is not None:
            return [content_text(response[key], key)]
    message = response.get("message")
    if isinstance(message, dict):
        return [content_text(message.get("content"), "message.content")]
    return None


def _first(layers: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for layer in layers:
        if layer.keys().isdisjoint(keys):  # the usual case, one C call instead of a get per key
            continue
        for key in keys:
            if layer.get(key) is not None:
                return key, layer[key]
    return None


def _seconds(layers: list[dict[str, Any]], s_keys: tuple[str, ...], ms_keys: tuple[str, ...]) -> float | None:
    for keys, scale in ((s_keys, 1.0), (ms_keys, 1e-3)):
        found = _first(layers, keys)
        if found is not None:
            return _schema.duration_s(found[1], f"field '{found[0]}'", scale, text=True)
    return None


def _time(layers: list[dict[str, Any]], keys: tuple[str, ...]) -> float | None:
    found = _first(layers, keys)
    return _schema.epoch_time(found[1], f"field '{found[0]}'") if found is not None else None


def _conversation(layers: list[dict[str, Any]]) -> str | None:
    return _identifier(layers, CONVERSATION_KEYS)


def _identifier(layers: list[dict[str, Any]], keys: tuple[str, ...]) -> str | None:
    """The first of `keys` in the layers or their `metadata` objects, as a string (ids may be integers)."""
    metadata = [layer["metadata"] for layer in layers if isinstance(layer.get("metadata"), dict)]
    found = _first(layers + metadata, keys)
    if found is None:
        return None
    value = found[1]
    if isinstance(value, dict):  # the Responses API's {"conversation": {"id": ...}}
        value = value.get("id")
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    raise BadRecord("wrong type", f"field '{found[0]}' must be a string or an integer, got {type_name(value)}")


def _sampling(fields: dict[str, Any]) -> SamplingParams:
    max_tokens = next((fields[key] for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")
                       if key in fields), None)
    return SamplingParams(temperature=fields.get("temperature"), top_p=fields.get("top_p"),
                          top_k=fields.get("top_k"), max_tokens=max_tokens, seed=fields.get("seed"),
                          n=fields.get("n"))


def _usage(layers: list[dict[str, Any]]) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached) token counts from `usage` objects or flat count fields."""
    for layer in layers:
        if layer.get("usage") is not None and not isinstance(layer["usage"], dict):
            raise BadRecord("wrong type", f"field 'usage' must be an object, got {type_name(layer['usage'])}")
    usage = next((layer["usage"] for layer in layers if isinstance(layer.get("usage"), dict)), None)
    sources = [usage] if usage is not None else layers
    for layer in sources:
        counts = USAGE.check(layer, where="usage." if layer is usage else "")
        prompt = counts.get("prompt_tokens", counts.get("input_tokens"))
        completion = counts.get("completion_tokens", counts.get("output_tokens"))
        cached = None
        for details in ("prompt_tokens_details", "input_tokens_details"):
            if layer.get(details) is not None:
                detail = expect_object(layer[details], f"field '{details}'")
                cached = CACHED.check(detail, where=f"{details}.").get("cached_tokens")
                break
        if cached is None:
            cached = counts.get("cache_read_input_tokens")
        if cached is not None and prompt is not None and cached > prompt and "cache_read_input_tokens" not in counts:
            raise BadRecord("inconsistent usage", f"cached_tokens {cached} exceed prompt_tokens {prompt}")
        if (prompt, completion, cached) != (None, None, None):
            return prompt, completion, cached
    return None, None, None


def _token_ids(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(i) is int and i >= 0 for i in value):
        raise BadRecord("wrong type", f"field '{where}' must be a list of non-negative integers")
    return tuple(value)


def _returned_ids(response: dict[str, Any], choice: int) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(prompt, output) token ids a vLLM server returned with `return_token_ids` (choice `choice`).

    Chat responses carry `prompt_token_ids` at the top, completions responses per choice; both carry
    `choices[i].token_ids`. They are the server's own tokenization, used instead of re-tokenizing.
    """
    choices = response.get("choices")
    picked = choices[choice] if isinstance(choices, list) and choice < len(choices) else None
    picked = picked if isinstance(picked, dict) else {}
    prompt = picked.get("prompt_token_ids", response.get("prompt_token_ids"))
    return (_token_ids(prompt, "prompt_token_ids"),
            _token_ids(picked.get("token_ids"), f"choices[{choice}].token_ids"))


def convert(record: Any, source: str) -> list[Request]:
    """The requests of one log record (one, or one per element of a completions prompt list)."""
    record = expect_object(record, "the record")
    request, response = _split(record)
    messages = _prompt_messages(request)
    if messages is None and "prompt" not in request:
        raise BadRecord("missing field", "expected 'prompt' or 'messages'")
    texts = _completions(response)
    response_layer = response if isinstance(response, dict) else {}
    layers = [record, request, response_layer]
    # Most records hold few of the optional fields: a group of names none of the layers holds is told by one
    # C call on the union of their keys, not looked up layer by layer (the lookups were half of the
    # conversion of a plain chat record, 17.5 us).
    present = record.keys() | request.keys() | response_layer.keys()
    timestamp = None if present.isdisjoint(TIME_KEYS) else _time(layers, TIME_KEYS)
    latency = (None if present.isdisjoint(LATENCY_KEYS)
               else _seconds([record, response_layer, request], LATENCY_S_KEYS, LATENCY_MS_KEYS))
    if latency is None and timestamp is not None and not present.isdisjoint(END_KEYS):
        end = _time([record, response_layer], END_KEYS)
        latency = end - timestamp if end is not None else None
        if latency is not None and not 0 <= latency <= _schema.MAX_DURATION_S:
            raise BadRecord("out of range", "the end time must follow the start time by at most a week")
    logged_turn = _schema.turn_index(record["turn"], "field 'turn'") if record.get("turn") is not None else None
    sampling = SAMPLING.check(request)
    model = _first([request, response_layer, record], ("model",)) if "model" in present else None
    if model is not None and not isinstance(model[1], str):
        raise BadRecord("wrong type", f"field 'model' must be a string, got {type_name(model[1])}")
    with_metadata = "metadata" in present  # identifiers are looked up in `metadata` objects too
    common = dict(
        timestamp=timestamp,
        conversation_id=(_conversation(layers) if with_metadata or not present.isdisjoint(CONVERSATION_KEYS)
                         else None),
        replica=_identifier(layers, REPLICA_KEYS) if with_metadata or not present.isdisjoint(REPLICA_KEYS) else None,
        turn=logged_turn,
        model=model[1] if model is not None else None,
        sampling=_sampling(sampling) if sampling else NOT_LOGGED,
        latency_s=latency,
        ttft_s=None if present.isdisjoint(TTFT_KEYS) else _seconds([record, response_layer], TTFT_S_KEYS,
                                                                    TTFT_MS_KEYS),
    )
    prompt_tokens, completion_tokens, cached_tokens = (
        (None, None, None) if present.isdisjoint(USAGE_KEYS) else _usage([response_layer, record]))
    prompt_ids, output_ids = _returned_ids(response_layer, 0)
    if messages is not None:
        return [Request(source=source, messages=messages, completion=texts[0] if texts else None,
                        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        cached_tokens=cached_tokens, prompt_token_ids=prompt_ids, output_token_ids=output_ids,
                        **common)]
    prompts = _prompts(request)
    if len(prompts) == 1:
        prompt = prompts[0]
        text_prompt = prompt if isinstance(prompt, str) else None
        return [Request(source=source, prompt=text_prompt, completion=texts[0] if texts else None,
                        prompt_tokens=prompt_tokens if text_prompt is not None else len(prompt),
                        completion_tokens=completion_tokens, cached_tokens=cached_tokens,
                        prompt_token_ids=prompt_ids, output_token_ids=output_ids, **common)]
    per_prompt = sampling.get("n") or 1
    requests = []
    for index, prompt in enumerate(prompts):
        choice = index * per_prompt
        requests.append(Request(
            source=f"{source}#{index}",
            prompt=prompt if isinstance(prompt, str) else None,
            prompt_tokens=None if isinstance(prompt, str) else len(prompt),
            completion=texts[choice] if texts and choice < len(texts) else None,
            **common,
        ))
    return requests
