"""Chat-template rendering the way transformers (and so vLLM's chat endpoint) does it.

vLLM's chat endpoint renders `tokenizer.apply_chat_template(conversation, tokenize=False,
add_generation_prompt=True)` (vllm/renderers/hf.py, `safe_apply_chat_template`; the defaults come from
vllm/entrypoints/openai/chat_completion/protocol.py, `ChatCompletionRequest`). transformers compiles the
template in a sandboxed jinja2 environment with `trim_blocks`/`lstrip_blocks`, its own `tojson`, and the
globals `raise_exception` and `strftime_now` (transformers/utils/chat_template_utils.py,
`_cached_compile_jinja_template`). `compile_template` builds the same environment without importing
transformers (1.8 s to import), and tests/test_tokenize.py checks the output against transformers' renderer.

vLLM also decides how message content reaches the template: templates that loop over
`message['content']` get OpenAI-style parts `[{"type": "text", "text": ...}]`, the others a plain string
(vllm/renderers/hf.py, `_detect_content_format`). `content_format` reproduces that detection.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

from advisor.errors import TokenizerError
from advisor.record import Message

ContentFormat = Literal["string", "openai"]

LLAMA31_TEMPLATE_FILE = Path(__file__).resolve().parent.parent / "data" / "llama3.1_chat_template.jinja"


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    # transformers overrides jinja's tojson, which would HTML-escape characters.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationTag(jinja2.ext.Extension):
    """Accepts transformers' `{% generation %}` block (assistant-mask marker) and renders its body as is."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Callable[[], str]) -> str:
        return caller()


@lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    """Compile a chat template in transformers' environment; TokenizerError if it does not parse."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TokenizerError(f"chat template does not parse (line {exc.lineno}): {exc.message}") from exc


def _accesses(node: jinja2.nodes.Node, names: set[str], key: str | None) -> bool:
    """True if `node` reads one of `names` (or its `key` item), through filters, tests and slices."""
    if isinstance(node, (jinja2.nodes.Filter, jinja2.nodes.Test)):
        return node.node is not None and _accesses(node.node, names, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _accesses(node.node, names, key)
    if key is None:
        return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name in names
    if isinstance(node, jinja2.nodes.Getitem):
        item = node.arg
        return isinstance(item, jinja2.nodes.Const) and item.value == key and _accesses(node.node, names, None)
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == key and _accesses(node.node, names, None)
    return False


@lru_cache(maxsize=16)
def content_format(source: str) -> ContentFormat:
    """vLLM's detection: "openai" if the template loops over a message's content, else "string"."""
    root = compile_template(source).environment.parse(source)
    messages_vars = {"messages"}
    changed = True
    while changed:  # names assigned from `messages` (e.g. `loop_messages = messages[1:]`)
        changed = False
        for assign in root.find_all(jinja2.nodes.Assign):
            target = assign.target
            if isinstance(target, jinja2.nodes.Name) and target.name not in messages_vars:
                if _accesses(assign.node, messages_vars, None):
                    messages_vars.add(target.name)
                    changed = True
    loops = list(root.find_all(jinja2.nodes.For))
    message_vars = {
        loop.target.name
        for loop in loops
        if isinstance(loop.target, jinja2.nodes.Name) and _accesses(loop.iter, messages_vars, None)
    }
    for loop in loops:
        if _accesses(loop.iter, message_vars, "content"):
            return "openai"
    return "string"


def message_dicts(messages: Sequence[Message], fmt: ContentFormat) -> list[dict[str, Any]]:
    """Messages as the template sees them after vLLM's parsing, for one content format."""
    if fmt == "openai":
        return [{"role": m.role, "content": [{"type": "text", "text": m.content}]} for m in messages]
    return [{"role": m.role, "content": m.content} for m in messages]


def render(template: jinja2.Template, fmt: ContentFormat, messages: Sequence[Message], variables: dict[str, Any]) -> str:
    """Render with the generation prompt; a template error becomes a TokenizerError (no message text)."""
    try:
        return template.render(
            messages=message_dicts(messages, fmt), tools=None, documents=None, add_generation_prompt=True, **variables
        )
    except jinja2.TemplateError as exc:
        raise TokenizerError(f"chat template failed on a conversation of {len(messages)} messages: {exc}") from exc


def render_fallback(messages: Sequence[Message]) -> str:
    """Documented stand-in when a tokenizer has no chat template (docs/tokenizers.md).

    ChatML-like plain text, one block per message and an open assistant turn, so prompt lengths grow with
    the same content; the exact overhead of the real template is unknown, hence the warning in TokenizerInfo.
    """
    parts = [f"{m.role}: {m.content}\n\n" for m in messages]
    parts.append("assistant: ")
    return "".join(parts)


# Special-token names of the form <|name|> with no '<', '|' or '>' inside: no such name can start inside text
# and end inside a following special token, nor start inside one, so cutting a text right before a special
# token does not change where `Tokenizer.split_special` cuts it.
PLAIN_SPECIAL_NAME = re.compile(r"<\|[^<>|]*\|>")
_LLAMA31_HEADER = ("<|start_header_id|>system<|end_header_id|>\n\n"
                   "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n")
_LLAMA31_GENERATION = "<|start_header_id|>assistant<|end_header_id|>\n\n"
_LLAMA31_TOOL_ROLES = ("ipython", "tool")  # rendered as JSON by the template's tool branch: not segmented
# A message segment: START role END "\n\n" content|trim EOT.
_LLAMA31_START, _LLAMA31_END, _LLAMA31_EOT = _LLAMA31_MESSAGE_SPECIALS = (
    "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
GENERATION_SEGMENT = ("generation",)


class Llama31Segments:
    """The Llama 3.1 Instruct template's output cut into per-message segments, so that a conversation's
    earlier turns are rendered (and tokenized) once, not once per later request.

    Read from the template (advisor/data/llama3.1_chat_template.jinja) for what `render` passes it (tools and
    documents None, add_generation_prompt True, only bos_token and eos_token as variables): the output is
    `bos_token + HEADER + system + "<|eot_id|>"` (system: the first message's content, trimmed, when its role
    is system, else empty), then per remaining message `"<|start_header_id|>" + role + "<|end_header_id|>\n\n"
    + content|trim + "<|eot_id|>"`, then the generation prompt. Every segment starts with a special token and
    all but the last end with one, so (with plain special-token names) splitting the segments one by one
    gives exactly the pieces of the whole text. Conversations with an ipython/tool message get None: the
    caller renders them whole. tests/test_tokenize.py compares both ways on the real logs.
    """

    def __init__(self, bos_token: str, special_ids: Mapping[str, int]):
        self.bos_token = bos_token
        self._start, self._end, self._eot = (special_ids[name] for name in _LLAMA31_MESSAGE_SPECIALS)

    def pieces(self, key: Hashable) -> list[str | int] | None:
        """`Tokenizer.split_special(self.render(key))` for a message whose role and content hold no '<',
        without scanning its text (every special-token name here starts with '<|': `segmenter` checks, so
        no special token can be inside them); None for other segments (split their render)."""
        if key == GENERATION_SEGMENT:
            return None
        role, content = key  # type: ignore[misc]
        if role is None or "<" in role or "<" in content:
            return None
        body = f"\n\n{content.strip()}"
        return [self._start, role, self._end, body, self._eot] if role else [self._start, self._end, body, self._eot]

    def keys(self, messages: Sequence[Message]) -> list[Hashable] | None:
        """The segment keys of `messages` (equal keys render equal text), or None: render in whole."""
        if not messages or any(m.role in _LLAMA31_TOOL_ROLES for m in messages):
            return None
        has_system = messages[0].role == "system"
        # Plain tuples, not the Messages: their hash is C's, where a Message's is a Python call, and the
        # caches look each key up several times. A message's key is (role, content); the header's role
        # place holds None, which no message's role is, and GENERATION_SEGMENT has one element.
        header = (None, messages[0].content if has_system else None)
        return [header, *[(m.role, m.content) for m in messages[1 if has_system else 0:]], GENERATION_SEGMENT]

    def render(self, key: Hashable) -> str:
        """The text of one segment (jinja's `trim` filter is str.strip)."""
        if key == GENERATION_SEGMENT:
            return _LLAMA31_GENERATION
        role, content = key  # type: ignore[misc]
        if role is not None:
            return f"{_LLAMA31_START}{role}{_LLAMA31_END}\n\n{content.strip()}{_LLAMA31_EOT}"
        return f"{self.bos_token}{_LLAMA31_HEADER}{content.strip() if content is not None else ''}{_LLAMA31_EOT}"


def segmenter(source: str | None, variables: dict[str, str], special_ids: Mapping[str, int]) -> Llama31Segments | None:
    """Per-message segments for a template known to render that way, else None (render every prompt whole).

    Only the bundled Llama 3.1 Instruct template, byte for byte, with no template variable beyond bos_token
    and eos_token (date_string, custom_tools, builtin_tools would change the header), a bos_token that is a
    special token or empty, and plain special-token names (see PLAIN_SPECIAL_NAME).
    """
    if source is None or set(variables) - {"bos_token", "eos_token"}:
        return None
    bos = variables.get("bos_token", "")
    if source != llama31_template() or (bos and bos not in special_ids):
        return None
    if not all(PLAIN_SPECIAL_NAME.fullmatch(name) for name in special_ids):
        return None
    if not all(name in special_ids for name in _LLAMA31_MESSAGE_SPECIALS):
        return None
    return Llama31Segments(bos, special_ids)


@lru_cache(maxsize=1)
def llama31_template() -> str:
    """The bundled Llama 3.1 Instruct template, read once (the default tokenizer renders with it, the
    segmenter compares templates with it)."""
    return LLAMA31_TEMPLATE_FILE.read_text(encoding="utf-8")
