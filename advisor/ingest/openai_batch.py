"""OpenAI Batch API files: the request JSONL and the output JSONL given together, joined by `custom_id`.

Request lines are `{"custom_id", "method", "url", "body"}` (body: a chat-completions or completions request);
output lines are `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`, the shape
of OpenAI's output and error files and of `vllm run-batch` (vllm/entrypoints/launchers/run_batch.py in 0.32,
`BatchRequestOutput`: a failed request has `error` set and a status code but no body). Bodies are read by
the OpenAI reader (`advisor.ingest.openai.convert`), so chat and completions requests, usage counts and
multi-prompt completions mean the same as there. A failed request is counted (reason "batch error", with
its file:line), a request without an output line is unfinished (yielded without completion), an output
without a request line gives its completion alone. A batch is offline traffic: its requests have no
arrival times (a response's `created` is when it finished), so arrival analyses are left out.
The request files are read first (held in memory, keyed by custom_id), then the outputs are streamed.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator, Sequence

from advisor.ingest import openai
from advisor.ingest._io import BadRecord, Sink, Source, expect_object, head_records, iter_json_lines, type_name
from advisor.record import Request

NAME = "openai-batch"
INPUT_KEYS = frozenset({"custom_id", "body"})


def is_input(record: dict[str, Any]) -> bool:
    """A request line; one that also carries its response is a one-file OpenAI-style log instead."""
    return INPUT_KEYS <= record.keys() and bool(record.keys() & {"url", "method"}) and "response" not in record


def is_output(record: dict[str, Any]) -> bool:
    return "custom_id" in record and bool(record.keys() & {"response", "error"}) and "body" not in record


def looks_like(record: dict[str, Any]) -> bool:
    """Whether a sniffed first record is a batch request or output line."""
    return is_input(record) or is_output(record)


def _is_output_file(source: Source) -> bool:
    """Told by the sniffed records: more output lines than request lines (one damaged line does not decide)."""
    records = head_records(source.head())
    return sum(map(is_output, records)) > sum(map(is_input, records))


def _custom_id(record: dict[str, Any]) -> str:
    value = record.get("custom_id")
    if value is None:
        raise BadRecord("missing field", "expected 'custom_id'")
    if not isinstance(value, str):
        raise BadRecord("wrong type", f"field 'custom_id' must be a string, got {type_name(value)}")
    return value


def _input(record: Any) -> tuple[str, dict[str, Any]]:
    record = expect_object(record, "the record")
    custom_id = _custom_id(record)
    url = record.get("url")
    if url is not None and not isinstance(url, str):
        raise BadRecord("wrong type", f"field 'url' must be a string, got {type_name(url)}")
    body = expect_object(record.get("body"), "field 'body'")
    if not body.keys() & openai.REQUEST_KEYS:
        raise BadRecord("missing field", "expected 'body.messages' or 'body.prompt' (chat or completions)")
    return custom_id, body


def _output(record: Any) -> tuple[str, dict[str, Any] | None, str | None]:
    """(custom_id, response body, error reason): a body for a success, a reason for a failure."""
    record = expect_object(record, "the record")
    custom_id = _custom_id(record)
    response = record.get("response")
    if response is not None:
        response = expect_object(response, "field 'response'")
    status = response.get("status_code", 200) if response is not None else None
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        raise BadRecord("wrong type", f"field 'response.status_code' must be an integer, got {type_name(status)}")
    error = record.get("error")
    if error is not None or status != 200:
        return custom_id, None, f"status {status}" if status is not None else "no response"
    body = expect_object(response.get("body") if response is not None else None, "field 'response.body'")
    return custom_id, body, None


def read_group(sources: Sequence[Source], sinks: Sequence[Sink]) -> Iterator[tuple[int, Request]]:
    """(file index, request) of request and output files, joined by custom_id.

    A joined request uses two records, its request line and its output line, in two files: both are counted
    as used here (the group's caller counts nothing for this format)."""
    pending: dict[str, tuple[Sink, int, dict[str, Any]]] = {}  # custom_id -> (sink, line, body) of its request
    outputs = [i for i, source in enumerate(sources) if _is_output_file(source)]
    for index, (source, sink) in enumerate(zip(sources, sinks)):
        if index in outputs:
            continue
        for line, record in iter_json_lines(source, sink):
            try:
                custom_id, body = _input(record)
                if custom_id in pending:
                    raise BadRecord("duplicate custom_id", "an earlier request line has the same custom_id")
                openai.convert({"request": body}, "")  # a broken body is reported at its own line
            except BadRecord as problem:
                sink.bad(line, problem)
                continue
            pending[custom_id] = (sink, line, body)
    for index in outputs:
        source, sink = sources[index], sinks[index]
        for line, record in iter_json_lines(source, sink):
            try:
                custom_id, body, error = _output(record)
                if error is not None:
                    failed = pending.pop(custom_id, None)
                    if failed is not None:  # its request line gives no request either: reported at its own line
                        failed[0].bad(failed[1], BadRecord("batch error", f"the request failed ({error}; output "
                                                                          f"line {source.name}:{line})"))
                    raise BadRecord("batch error", f"the request failed ({error})")
                request = pending.pop(custom_id, None)
                requests = _join(request, body, f"{source.name}:{line}")
            except BadRecord as problem:
                sink.bad(line, problem)
                continue
            if requests:
                sink.used(line)
                if request is not None:
                    request[0].used(request[1])
            for joined in requests:
                yield index, joined
    last = len(sources) - 1
    for sink, line, body in pending.values():
        requests = openai.convert({"request": body}, f"{sink.name}:{line}")
        if requests:
            sink.used(line)
        for request in requests:
            sinks[last].stats.unfinished += 1
            yield last, replace(request, timestamp=None, latency_s=None)
    if outputs:
        sinks[last].stats.notes.append("openai-batch: offline traffic: no arrival times, so arrival rates and "
                                       "burstiness are left out")


def _join(request: tuple[Sink, int, dict[str, Any]] | None, body: dict[str, Any], where: str) -> list[Request]:
    """The requests of one output line with its request (or the completion alone, without one)."""
    if request is not None:
        sink, line, request_body = request
        joined = openai.convert({"request": request_body, "response": body}, f"{sink.name}:{line}")
    else:
        texts = openai._completions(body)
        prompt_tokens, completion_tokens, cached = openai._usage([body])
        joined = [Request(source=where, completion=texts[0] if texts else None, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, cached_tokens=cached)]
    return [replace(r, timestamp=None, latency_s=None) for r in joined]
