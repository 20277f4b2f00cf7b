"""vLLM's own server log (`vllm serve --enable-log-requests --enable-log-outputs`), plain or gzip, rotated.

Line shapes, from vLLM's `RequestLogger` (vllm/entrypoints/serve/utils/request_logger.py in 0.32; earlier
vllm/entrypoints/logger.py) behind the logger prefix `[(<process> pid=N) ]LEVEL MM-DD HH:MM:SS [file:line] `:
- vLLM 0.11.2 on, 0.32 included ("split", vLLM PR #26713): DEBUG `Request <id> details: prompt: <repr>,
  prompt_token_ids: [..], prompt_embeds shape: ..`, INFO `Received request <id>: params: SamplingParams(..),
  lora_request: ..`, DEBUG `Generated response <id>[ (streaming delta|complete)] details: output_token_ids:
  [..]` before each INFO `Generated response <id>[ ..]: output: <repr>, finish_reason: <reason>`. At INFO
  level only params and output text are logged.
- 0.11.0 and earlier ("one line"): INFO `Received request <id>: prompt: <repr>, params: SamplingParams(..),
  prompt_token_ids: [..][, prompt_embeds shape: ..], lora_request: ..` and INFO `Generated response <id>[ ..]:
  output: <repr>, output_token_ids: [..], finish_reason: <reason>` (`sampling_params:` in the oldest).
Inputs and outputs are joined by request id across all files given together (read oldest first);
streamed deltas are joined in log order. A request is yielded when its last output line is read; inputs left
without output are unfinished: yielded with no completion (not a zero-length one) and counted. vLLM logs no
output line for a response whose text is empty, none for /v1/completions in 0.32, and no delta for a
streamed chunk without text (the end-of-sequence token, a partial UTF-8 character), so a streamed
response's ids can lack those tokens: the reader notes how many streams provably lost some.
`--max-log-len N` cuts the logged prompt text, prompt ids, output text and output ids to N; N is read from
the startup line `non-default args: {...}`. A cut prompt or output is not a request's full size: its
tokens are dropped (counted as truncated) and the request still gives its arrival, sampling parameters and
the side that was not cut. Times are the line prefix's: whole seconds, local time of the server, no year
(the year is the file's modification year, stepping back at a year boundary); the latency is the output
line's time minus the input line's, so also in whole seconds (unbiased on average, coarse per request).
A record is one request-logger line: used once its request is given (finished or unfinished), or skipped
with its file:line (malformed, duplicate, output lines that never make a request); other lines are none.
"""
from __future__ import annotations

import ast
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence

import orjson

from advisor.ingest._io import BadRecord, Sink, Source, iter_lines
from advisor.record import Request, SamplingParams

NAME = "vllm-log"
_PREFIX = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,]\d+)? \[?[^\]\s]*:\d+\] "
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RECEIVED = re.compile(r"Received request (\S+?): (?=prompt: |params: |sampling_params: )")
_DETAILS = re.compile(r"Request (\S+?) details: (?=prompt: )")
_GENERATED = re.compile(r"Generated response (\S+?)( \(streaming (?:delta|complete)\))?( details)?: "
                        r"(?=output: |output_token_ids: )")
_MAX_LOG_LEN = re.compile(r"max_log_len['\"]?(?::|=)\s*(\d+|None)")
_KEYWORDS = ("Received request ", "Request ", "Generated response ", "args: ")
# Request-logger lines that tell a vLLM log without the word "vllm" in it (a rotated file that starts inside a
# stream of output lines, with the logger's path abbreviated).
_SNIFF = re.compile(r"\] (?:Received request \S+: (?:prompt|params|sampling_params): |Request \S+ details: prompt: |"
                    r"Generated response \S+(?: \(streaming (?:delta|complete)\))?(?: details)?: "
                    r"(?:output|output_token_ids): |non-default args: )")


def looks_like(head: bytes) -> bool:
    """Whether sniffed bytes hold vLLM logger lines (any vLLM log: request lines may come much later)."""
    text = _ANSI.sub("", head.decode("utf-8", "replace"))
    return bool(_PREFIX.search(text)) and ("vllm" in text.lower() or bool(_SNIFF.search(text)))


@dataclass(slots=True)
class _Pending:
    """What is known of one request id until its last output line."""

    source: str
    lines: list[tuple[Sink, int]] = field(default_factory=list)  # its request-logger lines: used or skipped
    timestamp: float | None = None
    prompt: str | None = None
    prompt_ids: list[int] | None = None
    prompt_cut: bool = False
    sampling: SamplingParams | None = None
    has_input: bool = False
    has_details: bool = False  # the DEBUG `Request <id> details` line was read
    output_ids: list[int] | None = None  # ids of the DEBUG line waiting for its INFO line (0.32)
    delta_ids: list[int] | None = None  # a stream's ids so far
    finish_reason: str | None = None
    output_cut: bool = False


@dataclass
class _Group:
    """Join state of one set of files; counts feed the ingest stats and notes."""

    max_log_len: int | None = None
    max_log_len_known: bool = False
    pending: dict[str, _Pending] = field(default_factory=dict)
    extra_choices: dict[str, int] = field(default_factory=dict)  # n > 1: further output lines expected
    inputs_with_prompt: int = 0
    inputs_without_prompt: int = 0
    outputs: int = 0
    outputs_without_input: int = 0
    short_streams: int = 0
    streams: int = 0
    completions_unfinished: int = 0


def _string(value: str, key: str) -> str:
    if len(value) < 2 or value[0] not in "'\"" or value[-1] != value[0]:
        raise BadRecord("malformed vLLM log line", f"'{key}' is not a quoted string")
    try:
        text = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise BadRecord("malformed vLLM log line", f"'{key}' is not a valid string literal") from None
    if not isinstance(text, str):
        raise BadRecord("malformed vLLM log line", f"'{key}' is not a string")
    return text


def _ids(value: str, key: str) -> list[int] | None:
    if value == "None":
        return None
    if not _ID_LIST.fullmatch(value):
        raise BadRecord("malformed vLLM log line", f"'{key}' must be a list of non-negative integers")
    return orjson.loads(value)


_QUOTED = {"'": re.compile(r"'[^'\\]*(?:\\.[^'\\]*)*'", re.S), '"': re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)}
_ID_LIST = re.compile(r"\[(?:\d+(?:, \d+)*)?\]")


def _value_end(text: str, start: int) -> int:
    """End of the value at `start`: text up to the next ", " outside brackets and quoted strings.

    Strings and flat lists (token ids, the bulk of a line) are skipped by C-level scans, not per character.
    """
    depth = 0
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c in _QUOTED:
            quoted = _QUOTED[c].match(text, i)
            if quoted is None:
                raise BadRecord("malformed vLLM log line", "unterminated string")
            i = quoted.end()
            continue
        if c == "[":
            close = text.find("]", i)
            inner = text[i + 1:close] if close > 0 else ""
            if close > 0 and not any(mark in inner for mark in "[('\""):
                i = close + 1
                continue
            depth += 1
        elif c in "({":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                raise BadRecord("malformed vLLM log line", "unbalanced brackets")
        elif c == "," and depth == 0 and text.startswith(", ", i):
            return i
        i += 1
    if depth:
        raise BadRecord("malformed vLLM log line", "unbalanced brackets")
    return n


def _fields(text: str, separator: str = ": ") -> dict[str, str]:
    """`key: value, key: value` (or `key=value, ...` inside SamplingParams) as raw value texts."""
    fields: dict[str, str] = {}
    i = 0
    while i < len(text):
        cut = text.find(separator, i)
        if cut < 0:
            raise BadRecord("malformed vLLM log line", f"expected '<field>{separator}<value>'")
        key = text[i:cut]
        end = _value_end(text, cut + len(separator))
        fields[key] = text[cut + len(separator):end]
        i = end + 2
    return fields


def _number(params: dict[str, str], key: str, kind: type) -> Any:
    raw = params.get(key)
    if raw is None or raw == "None":
        return None
    try:
        return kind(raw)
    except ValueError:
        raise BadRecord("malformed vLLM log line", f"SamplingParams field '{key}' is not a number") from None


def _sampling(value: str) -> SamplingParams:
    """temperature, top_p, top_k, max_tokens, seed and n of vLLM's `SamplingParams(...)` repr."""
    name, paren, rest = value.partition("(")
    if not paren or not rest.endswith(")"):
        raise BadRecord("malformed vLLM log line", "'params' is not a SamplingParams(...) repr")
    if name.strip() != "SamplingParams":  # beam search and pooling requests carry other parameters
        return SamplingParams()
    params = _fields(rest[:-1], "=")
    top_k = _number(params, "top_k", int)
    return SamplingParams(
        temperature=_number(params, "temperature", float),
        top_p=_number(params, "top_p", float),
        top_k=top_k if top_k is None or top_k > 0 else None,  # 0 and -1 both mean "off" across versions
        max_tokens=_number(params, "max_tokens", int),
        seed=_number(params, "seed", int),
        n=_number(params, "n", int),
    )


class _Clock:
    """Line times (MM-DD HH:MM:SS, no year) as epoch seconds, the year taken from the file's mtime."""

    def __init__(self, path: str):
        mtime = os.path.getmtime(path) if path != "-" and os.path.exists(path) else time.time()
        self.end = datetime.fromtimestamp(mtime, timezone.utc)
        self._cache: tuple[str, float] | None = None

    def seconds(self, match: re.Match[str]) -> float | None:
        key = "".join(match.groups())
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        month, day, hour, minute, second = (int(g) for g in match.groups())
        year = self.end.year - ((month, day) > (self.end.month, self.end.day))
        try:
            moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
        except ValueError:
            return None
        value = moment.timestamp()
        self._cache = (key, value)
        return value


class _Reader:
    def __init__(self, group: _Group, source: Source, sink: Sink):
        self.group = group
        self.source = source
        self.sink = sink
        self.clock = _Clock(source.path)

    def lines(self) -> Iterator[Request]:
        for number, text in iter_lines(self.source, self.sink):
            if not any(word in text for word in _KEYWORDS):
                continue
            if "\x1b[" in text:
                text = _ANSI.sub("", text)
            prefix = _PREFIX.search(text)
            if prefix is None:
                continue
            message = text[prefix.end():].rstrip("\r\n")
            if message.startswith(("non-default args: ", "args: ")):  # the startup line naming the flags
                found = _MAX_LOG_LEN.search(message)
                self.group.max_log_len_known = True
                self.group.max_log_len = None if found is None or found.group(1) == "None" else int(found.group(1))
                continue
            try:
                request = self._message(number, message, prefix)
            except BadRecord as problem:
                self.sink.bad(number, problem)
                continue
            if request is not None:
                yield request

    def _message(self, number: int, message: str, prefix: re.Match[str]) -> Request | None:
        for pattern, handle in ((_GENERATED, self._output), (_RECEIVED, self._received), (_DETAILS, self._details)):
            match = pattern.match(message)
            if match:
                self.sink.stats.records_read += 1
                return handle(number, match, message[match.end():], prefix)
        return None

    def _entry(self, request_id: str, number: int) -> _Pending:
        """The pending request of `request_id`, holding line `number` as one of its records."""
        entry = self.group.pending.get(request_id)
        if entry is None:
            entry = self.group.pending[request_id] = _Pending(source=f"{self.source.name}:{number}")
        entry.lines.append((self.sink, number))
        return entry

    def _cut(self, value: list[int] | str | None) -> bool:
        limit = self.group.max_log_len
        return value is not None and limit is not None and len(value) >= limit

    def _set_prompt(self, entry: _Pending, prompt: tuple[bool, str | None], ids: tuple[bool, list[int] | None]) -> None:
        if prompt[0]:
            entry.prompt = prompt[1]
        if ids[0]:
            entry.prompt_ids = ids[1]
        # A full id list makes the request whole even when its (longer) prompt text was cut.
        entry.prompt_cut = self._cut(entry.prompt_ids) if entry.prompt_ids is not None else self._cut(entry.prompt)

    def _details(self, number: int, match: re.Match[str], rest: str, prefix: re.Match[str]) -> None:
        fields = _fields(_strip_period(rest))
        prompt, ids = _prompt_fields(fields)
        pending = self.group.pending.get(match.group(1))
        if pending is not None and pending.has_details:
            raise BadRecord("duplicate vLLM log line", "a second 'Request <id> details' line for one request id")
        entry = self._entry(match.group(1), number)
        self._set_prompt(entry, prompt, ids)
        entry.has_input = entry.has_details = True
        entry.timestamp = self.clock.seconds(prefix)
        return None

    def _received(self, number: int, match: re.Match[str], rest: str, prefix: re.Match[str]) -> None:
        fields = _fields(_strip_period(rest))
        params = fields.get("params", fields.get("sampling_params"))
        if params is None:
            raise BadRecord("malformed vLLM log line", "expected 'params: SamplingParams(...)'")
        sampling = _sampling(params)
        prompt, ids = _prompt_fields(fields)
        pending = self.group.pending.get(match.group(1))
        if pending is not None and pending.sampling is not None:
            raise BadRecord("duplicate vLLM log line", "a second 'Received request' line for one request id")
        entry = self._entry(match.group(1), number)
        entry.source = f"{self.source.name}:{number}"
        entry.sampling = sampling
        entry.has_input = True
        if prompt[0] or ids[0]:
            self._set_prompt(entry, prompt, ids)
        if entry.prompt is not None or entry.prompt_ids is not None:
            self.group.inputs_with_prompt += 1
        else:
            self.group.inputs_without_prompt += 1
        entry.timestamp = self.clock.seconds(prefix)
        return None

    def _output(self, number: int, match: re.Match[str], rest: str, prefix: re.Match[str]) -> Request | None:
        request_id, stream, details = match.groups()
        fields = _fields(rest)
        ids = _ids(fields["output_token_ids"], "output_token_ids") if "output_token_ids" in fields else None
        if not details and "output" not in fields:
            raise BadRecord("malformed vLLM log line", "expected 'output: <text>'")
        text = "" if details else _string(fields["output"], "output")
        group = self.group
        if request_id not in group.pending and request_id in group.extra_choices:
            self.sink.used(number)  # a further choice of an n > 1 request already given: the first choice
            if not details:         # is its completion
                group.extra_choices[request_id] -= 1
                if group.extra_choices[request_id] <= 0:
                    del group.extra_choices[request_id]
            return None
        entry = self._entry(request_id, number)
        if details:
            entry.output_ids = ids
            return None
        ids = ids if ids is not None else entry.output_ids
        entry.output_ids = None
        reason = fields.get("finish_reason")
        reason = None if reason in (None, "None") else reason
        if stream == " (streaming delta)":
            if ids is not None:
                entry.delta_ids = entry.delta_ids if entry.delta_ids is not None else []
                entry.delta_ids.extend(ids)
            entry.output_cut = entry.output_cut or self._cut(ids if ids is not None else text)
            entry.finish_reason = reason or entry.finish_reason
            return None
        sampling = entry.sampling
        if stream:  # streaming complete: the text of all deltas; ids only through the deltas
            group.streams += 1
            output_ids = entry.delta_ids
            if output_ids is None:
                entry.output_cut = self._cut(text)
            if sampling is not None and (sampling.n or 1) > 1:  # choices' deltas interleave: not separable
                text, output_ids = None, None
            elif (output_ids is not None and entry.finish_reason == "length" and sampling is not None
                  and sampling.max_tokens is not None and len(output_ids) < sampling.max_tokens):
                group.short_streams += 1
        else:
            output_ids = ids
            entry.output_cut = self._cut(ids if ids is not None else text)
            entry.finish_reason = reason
        group.outputs += 1
        del group.pending[request_id]
        if not entry.has_input:
            group.outputs_without_input += 1
            entry.source = f"{self.source.name}:{number}"
        if sampling is not None and (sampling.n or 1) > 1 and not stream:
            group.extra_choices[request_id] = sampling.n - 1
        finished = self.clock.seconds(prefix)
        latency = finished - entry.timestamp if finished is not None and entry.timestamp is not None else None
        return _request(entry, text, output_ids, self.sink, latency)


def _prompt_fields(fields: dict[str, str]) -> tuple[tuple[bool, str | None], tuple[bool, list[int] | None]]:
    """(present, value) of a line's prompt text and prompt ids, parsed before any state changes, so a
    line that does not parse leaves its request as it was."""
    raw = fields.get("prompt")
    prompt = None if raw in (None, "None") else _string(raw, "prompt")
    ids = _ids(fields["prompt_token_ids"], "prompt_token_ids") if "prompt_token_ids" in fields else None
    return ("prompt" in fields, prompt), ("prompt_token_ids" in fields, ids)


def _strip_period(rest: str) -> str:
    if not rest.endswith("."):
        raise BadRecord("malformed vLLM log line", "the line does not end with '.' (cut short?)")
    return rest[:-1]


def _request(entry: _Pending, completion: str | None, output_ids: list[int] | None, sink: Sink,
             latency: float | None = None) -> Request:
    """The Request of a joined entry; cut sides are dropped (their size is unknown) and counted once.

    Every request-logger line the request joined is a used record (read_group's caller counts none).
    """
    for line_sink, number in entry.lines:
        line_sink.used(number)
    prompt, prompt_ids = entry.prompt, entry.prompt_ids
    if entry.prompt_cut:
        prompt, prompt_ids = None, None
    if entry.output_cut:
        completion, output_ids = None, None
    if entry.prompt_cut or entry.output_cut:
        sink.stats.truncated += 1
    return Request(
        source=entry.source,
        timestamp=entry.timestamp,
        prompt=prompt if prompt_ids is None else None,
        prompt_token_ids=tuple(prompt_ids) if prompt_ids is not None else None,
        completion=completion if output_ids is None else None,
        output_token_ids=tuple(output_ids) if output_ids is not None else None,
        sampling=entry.sampling or SamplingParams(),
        latency_s=latency,
        finish_reason=entry.finish_reason,
    )


def _first_time(source: Source) -> float:
    """Time of the file's first logger line (files without one sort last)."""
    match = _PREFIX.search(_ANSI.sub("", source.head().decode("utf-8", "replace")))
    seconds = _Clock(source.path).seconds(match) if match else None
    return seconds if seconds is not None else float("inf")


def read_group(sources: Sequence[Source], sinks: Sequence[Sink]) -> Iterator[tuple[int, Request]]:
    """(file index, request) of the files of one deployment, joined by request id.

    Files are read oldest first, by their first line's time, whatever order they were given in
    (`server.log server.log.1` from a shell glob is newest first).
    """
    group = _Group()
    order = sorted(range(len(sources)), key=lambda i: (_first_time(sources[i]), i))
    for index in order:
        for request in _Reader(group, sources[index], sinks[index]).lines():
            yield index, request
    sink = sinks[-1]
    for request_id, entry in list(group.pending.items()):
        if not entry.has_input:  # output details or deltas whose final output line is missing: no request
            for line_sink, number in entry.lines:
                line_sink.bad(number, BadRecord("incomplete vLLM response", "an output line of a request "
                                                "with neither an input line nor a final output line"))
            continue
        if request_id.startswith("cmpl-"):
            group.completions_unfinished += 1
        sink.stats.unfinished += 1
        yield len(sources) - 1, _request(entry, None, None, sink)
    group.pending.clear()
    _notes(group, sink)


def _notes(group: _Group, sink: Sink) -> None:
    notes = sink.stats.notes
    if group.inputs_without_prompt and not group.inputs_with_prompt:
        notes.append("vllm-log: the log has sampling parameters but no prompts: vLLM 0.32 logs prompts and token "
                     "ids only at DEBUG; serve with --enable-log-requests --enable-log-outputs and "
                     "VLLM_LOGGING_LEVEL=DEBUG (or --log-level debug) to record them")
    if not group.outputs and group.inputs_with_prompt + group.inputs_without_prompt:
        notes.append("vllm-log: the log has no output lines: serve with --enable-log-outputs (with "
                     "--enable-log-requests) to record completions")
    if group.completions_unfinished:
        notes.append(f"vllm-log: {group.completions_unfinished} /v1/completions requests have no output line "
                     f"(vLLM 0.32 logs outputs of chat requests only); they count as unfinished")
    if group.outputs_without_input:
        notes.append(f"vllm-log: {group.outputs_without_input} outputs have no input line (an earlier rotated "
                     f"file missing?); they have no arrival time or prompt")
    if group.short_streams:
        notes.append(f"vllm-log: {group.short_streams} of {group.streams} streamed responses have fewer logged "
                     f"token ids than they generated: vLLM logs no delta for chunks without text")
    if group.max_log_len is not None:
        notes.append(f"vllm-log: the server ran with --max-log-len {group.max_log_len}: {sink.stats.truncated} "
                     f"requests were cut; their cut prompt or output is left out of lengths, prefix caching "
                     f"and replays, and they count for arrivals and sampling parameters")
    elif not group.max_log_len_known:
        notes.append("vllm-log: the server's startup lines (non-default args) are not in the log, so "
                     "--max-log-len truncation cannot be ruled out")
    notes.append("vllm-log: arrival times are the log's, in whole seconds")
