"""Aider chat transcripts (`.aider.chat.history.md`), read as a stream of lines.

Structure: `# aider chat started at YYYY-MM-DD HH:MM:SS` opens a session (one conversation; every request
of the session gets that time, naive = UTC, since the transcript logs no per-request time); `#### ` lines
are the user's input; `> ` lines are tool output. Aider prefixes only the first line of a multi-line tool
output with `> ` and ends every write with two spaces, so a `> ` line without them opens an output that runs
to the next non-blank line ending in two spaces. Other text after the user's input, or after tool output
and a blank line, is an assistant reply, ending at the next `> `, `#### ` or session line (a reply that
itself holds such a line at a line start, e.g. a Markdown edit, is cut there: a known limit).
Each reply is one request: messages = the session's user inputs and replies before it, plus the user input
since the previous reply (consecutive inputs joined), or, for a reply with no user input before it (aider's
automatic retries after lint errors or failed edits), the tool output since the previous reply, which is
what aider sends then. The transcript lacks aider's system prompt, repo map and file contents, so text
prompts are shorter than what the model saw; the `Tokens: N sent, [W cache write, ][C cached, ]M received`
line after a reply gives the real counts (prompt = N + W + C, cached = C; "12k" style values are rounded).
Source = the line where the reply starts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

from advisor.ingest import _schema
from advisor.ingest._io import BadRecord, Sink, Source, iter_lines, parse_iso
from advisor.record import Message, Request

NAME = "aider"
SESSION_HEADER = "# aider chat started at "
LINE_END = "  "  # aider ends every write to the transcript with two spaces (a Markdown line break)
TOKENS = re.compile(r"^> Tokens: ([\d.,]+k?) sent(?:, ([\d.,]+k?) cache write)?"
                    r"(?:, ([\d.,]+k?) (?:cached|cache hit))?, ([\d.,]+k?) received")


def looks_like(head: bytes) -> bool:
    """A session header at a line start: inside a JSON record (a logged prompt quoting a transcript) the header
    follows an escaped newline or a quote, never a real one."""
    header = SESSION_HEADER.encode()
    return head.startswith(header) or b"\n" + header in head


def _count(text: str | None) -> int:
    """A count of the Tokens line ("5,244", "1.2k"); BadRecord for what aider never writes ("1.2.3k")."""
    if not text:
        return 0
    digits = text.replace(",", "")
    try:
        value = round(float(digits[:-1]) * 1000) if digits.endswith("k") else int(digits)
    except ValueError:
        raise BadRecord("wrong type", "the Tokens line holds a count that is not a number") from None
    return _schema.token_count(value, "the 'Tokens' count")


@dataclass
class _Reply:
    line: int
    lines: list[str] = field(default_factory=list)
    prompt: tuple[Message, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    problem: BadRecord | None = None  # a malformed Tokens line: the reply is skipped with it


class _Session:
    """Conversation state of one session while its lines stream by."""

    def __init__(self, conversation_id: str, timestamp: float | None):
        self.conversation_id = conversation_id
        self.timestamp = timestamp
        self.history: list[Message] = []
        self.user_lines: list[str] = []
        self.tool_lines: list[str] = []
        self.turn = 0

    def start_reply(self, line: int) -> _Reply:
        pending = self.user_lines or self.tool_lines
        if pending:
            self.history.append(Message("user", "\n".join(pending).strip("\n")))
        self.user_lines, self.tool_lines = [], []
        return _Reply(line=line, prompt=tuple(self.history))

    def finish(self, reply: _Reply, source: str, sink: Sink) -> Iterator[Request]:
        """The reply's request; a reply that opens its session is history only (nothing asked for it, but
        the replies after it hold it: a used record). A malformed or too large reply is skipped."""
        completion = "\n".join(reply.lines).strip("\n")
        self.history.append(Message("assistant", completion))
        if reply.problem is not None:
            sink.bad(reply.line, reply.problem)
            return
        if not reply.prompt:
            sink.used(reply.line)
            return
        size = len(completion) + sum(len(message.content) for message in reply.prompt)
        if size > _schema.MAX_TEXT_CHARS:
            sink.bad(reply.line, BadRecord("too large", f"a request of {size} characters, limit {_schema.MAX_TEXT_CHARS}"))
            return
        self.turn += 1
        yield Request(
            source=f"{source}:{reply.line}", timestamp=self.timestamp, conversation_id=self.conversation_id,
            turn=self.turn - 1, messages=reply.prompt, completion=completion, prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens, cached_tokens=reply.cached_tokens,
        )


def read(source: Source, sink: Sink, hash_block_size: int) -> Iterator[Request]:
    session = _Session(f"{source.stem}:1", None)  # text before the first header: a session cut at its start
    reply: _Reply | None = None  # the reply being read, or the last one while its Tokens line may follow
    state = "start"  # start | header | user | tool | tool_open (multi-line tool output) | gap | reply | other
    for number, raw in iter_lines(source, sink, keep_blank=True):
        text = raw.rstrip("\r\n")
        if text.startswith(SESSION_HEADER):
            if reply is not None:
                yield from session.finish(reply, source.name, sink)
                reply = None
            started = parse_iso(text[len(SESSION_HEADER):])
            if started is not None and not 0 <= started <= _schema.MAX_EPOCH_S:
                started = None  # a header time outside 1970..2100 is no arrival time: the session has none
            session = _Session(f"{source.stem}:{number}", started)
            state = "header"
            continue
        is_user = text.startswith("#### ") or text.rstrip(" ") == "####"
        if state == "tool_open" and not is_user:
            session.tool_lines.append(text.removesuffix(LINE_END))
            state = "tool" if text.endswith(LINE_END) and text.strip() else state
            continue
        if is_user:
            if reply is not None:
                yield from session.finish(reply, source.name, sink)
                reply = None
            session.user_lines.append(text[5:].removesuffix(LINE_END))
            state = "user"
        elif text.startswith("> ") or text.rstrip(" ") == ">":
            tokens = TOKENS.match(text)
            if tokens and reply is not None and reply.completion_tokens is None:
                try:
                    sent, written, cached, received = (_count(group) for group in tokens.groups())
                    reply.prompt_tokens = _schema.token_count(sent + written + cached, "the 'Tokens' sent count")
                    reply.cached_tokens, reply.completion_tokens = cached, received
                except BadRecord as problem:
                    reply.problem = problem
            session.tool_lines.append(text[2:].removesuffix(LINE_END))
            state = "tool" if text.endswith(LINE_END) or text.rstrip(" ") == ">" else "tool_open"
        elif not text.strip():
            if state == "reply":
                reply.lines.append("")  # type: ignore[union-attr]
            elif state in ("header", "user", "tool"):
                state = "gap"
        elif state == "reply":
            reply.lines.append(text)  # type: ignore[union-attr]
        elif state in ("user", "gap"):
            if reply is not None:
                yield from session.finish(reply, source.name, sink)
            sink.stats.records_read += 1
            reply = session.start_reply(number)
            reply.lines.append(text)
            state = "reply"
        else:
            state = "other"  # unprefixed text in a session's preamble: not a reply
    if reply is not None:
        yield from session.finish(reply, source.name, sink)
