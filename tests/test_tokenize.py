"""Tokenize stage: ids and rendered prompts as vLLM's server produces them, and the piece cache's exactness.

vLLM semantics pinned here (read in vLLM's source):
- chat: vllm/renderers/hf.py `safe_apply_chat_template` renders `tokenizer.apply_chat_template(conversation,
  tokenize=False, add_generation_prompt=True)`; vllm/renderers/base.py `default_chat_tok_params` encodes the
  text with add_special_tokens=False (ChatCompletionRequest.add_special_tokens defaults to False in
  vllm/entrypoints/openai/chat_completion/protocol.py), so the template's own <|begin_of_text|> is the only BOS;
- completions: `default_cmpl_tok_params` / CompletionRequest.add_special_tokens=True: the post-processor's BOS;
- content format: vllm/renderers/hf.py `_detect_content_format` passes OpenAI-style parts to templates that
  loop over message content, plain strings otherwise.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
import tiktoken
import tiktoken.load

from advisor.errors import TokenizerError
from advisor.record import Message, Request
from advisor.tokenize import RequestTokenizer, load_tokenizer
from advisor.tokenize import chat as chat_module

# Written here from llama_models/llama3/tokenizer.py (Tokenizer.pat_str), independently of the module.
LLAMA3_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CONVERSATION = (
    Message("system", "You are a concise assistant."),
    Message("user", "What is 12345 * 3?  Answer\tbriefly."),
    Message("assistant", " 37035. "),
    Message("user", "Thanks! Now in French, s'il vous plaît."),
)


@pytest.fixture(scope="module")
def default_tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def independent_llama3() -> tiktoken.Encoding:
    """Llama 3 built straight from llama-models' file with tiktoken's own loader (cache disabled)."""
    import llama_models

    path = Path(llama_models.__file__).parent / "llama3" / "tokenizer.model"
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # tiktoken: "" disables its cache copy
    try:
        ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old
    special = {"<|begin_of_text|>": 128000, "<|start_header_id|>": 128006, "<|end_header_id|>": 128007,
               "<|eot_id|>": 128009}
    return tiktoken.Encoding("llama3-test", pat_str=LLAMA3_PAT, mergeable_ranks=ranks, special_tokens=special)


def _sharegpt_requests(path: Path, conversations: int) -> list[Request]:
    """One chat request per assistant turn: the history up to it as messages, the reply as completion."""
    data = orjson.loads(path.read_bytes())
    requests = []
    for conv in data[:conversations]:
        history: list[Message] = []
        for turn in conv["conversations"]:
            role = {"human": "user", "gpt": "assistant"}.get(turn["from"], turn["from"])
            if role == "assistant" and history:
                requests.append(Request(source=f"sharegpt:{conv['id']}#{len(requests)}", messages=tuple(history),
                                        completion=turn["value"]))
            history.append(Message(role, turn["value"]))
    return requests


# ---------------------------------------------------------------- default tokenizer (llama-models + Llama 3.1)

def test_import_stays_light():
    code = "import advisor, advisor.tokenize, sys; assert 'transformers' not in sys.modules, 'transformers imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("text", [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "Numbers 1234567 and 3.14159; emoji 🤖🚀 and CJK 你好世界",
    "def f(x):\n\treturn x**2  # comment\n\n\n",
    "It's we'VE they'll I'd",
])
def test_default_ids_equal_independent_tiktoken(default_tok, independent_llama3, text):
    assert default_tok.encode_texts([text], special=False) == [independent_llama3.encode_ordinary(text)]


def test_default_parses_special_tokens_like_independent(default_tok, independent_llama3):
    text = "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
    ours = default_tok.encode_texts([text], special=True)[0]
    assert ours == independent_llama3.encode(text, allowed_special="all")
    assert ours[0] == 128006 and ours[-1] == 128009
    # special=False: the same strings are ordinary text
    assert 128006 not in default_tok.encode_texts([text], special=False)[0]


def test_default_special_token_names_follow_hf_llama31(default_tok):
    ids = default_tok.special_ids
    assert len(ids) == 256 and sorted(ids.values()) == list(range(128000, 128256))
    assert ids["<|begin_of_text|>"] == 128000 and ids["<|eot_id|>"] == 128009 and ids["<|eom_id|>"] == 128008
    assert ids["<|python_tag|>"] == 128010 and ids["<|finetune_right_pad_id|>"] == 128004
    assert ids["<|reserved_special_token_2|>"] == 128005 and ids["<|reserved_special_token_3|>"] == 128011
    assert ids["<|reserved_special_token_247|>"] == 128255
    assert default_tok.eos_token_ids == (128001, 128008, 128009)
    assert default_tok.info.vocab_size == 128256 and default_tok.info.is_default


def test_default_template_renders_official_llama31_format(default_tok):
    rendered = default_tok.render_chat(CONVERSATION)
    assert rendered == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a concise assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 12345 * 3?  Answer\tbriefly.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n37035.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nThanks! Now in French, s'il vous plaît.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_default_template_equals_transformers_renderer(default_tok):
    """Our jinja environment vs transformers' own (transformers/utils/chat_template_utils.py)."""
    chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    source = (Path(chat_module.__file__).parent.parent / "data" / "llama3.1_chat_template.jinja").read_text()
    for messages in (CONVERSATION, CONVERSATION[1:], CONVERSATION[:2]):
        expected, _ = chat_utils.render_jinja_template(
            conversations=[[{"role": m.role, "content": m.content} for m in messages]],
            chat_template=source, add_generation_prompt=True, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
        )
        assert default_tok.render_chat(messages) == expected[0]


def test_content_format_detection():
    assert chat_module.content_format(CHATML) == "string"
    looping = "{% for m in messages %}{% for part in m['content'] %}{{ part['text'] }}{% endfor %}{% endfor %}"
    assert chat_module.content_format(looping) == "openai"
    rendered = chat_module.render(chat_module.compile_template(looping), "openai", [Message("user", "x y")], {})
    assert rendered == "x y"
    # transformers' {% generation %} marker (assistant masks) renders its body
    marked = "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    assert chat_module.render(chat_module.compile_template(marked), "string", [Message("user", "a")], {}) == "[a]"


def test_template_errors_are_tokenizer_errors(default_tok):
    with pytest.raises(TokenizerError, match="0 messages"):
        default_tok.render_chat([])
    with pytest.raises(TokenizerError, match="does not parse"):
        chat_module.compile_template("{% if %}")
    rt = RequestTokenizer(default_tok)
    with pytest.raises(TokenizerError, match="^log.jsonl:7: "):
        rt.tokenize([Request(source="log.jsonl:7", messages=())])


def test_request_kinds_default(default_tok):
    rt = RequestTokenizer(default_tok)
    chat_req = Request(source="t:1", messages=CONVERSATION, completion="Merci !")
    completion_req = Request(source="t:2", prompt="Once upon a time", completion=" there was")
    trace_req = Request(source="t:3", prompt_tokens=700, completion_tokens=40)
    chat_out, comp_out, trace_out = rt.tokenize([chat_req, completion_req, trace_req])
    rendered = default_tok.render_chat(CONVERSATION)
    assert chat_out.prompt_ids.tolist() == default_tok.encode_texts([rendered], special=True)[0]
    assert chat_out.prompt_ids.tolist().count(128000) == 1  # the template's BOS only (add_special_tokens=False)
    assert chat_out.output_ids.tolist() == default_tok.encode_texts(["Merci !"], special=True)[0]
    assert comp_out.prompt_ids.tolist() == [128000, *default_tok.encode_texts(["Once upon a time"], special=True)[0]]
    assert comp_out.prompt_ids.dtype == np.int32
    assert trace_out.prompt_ids is None and trace_out.output_ids is None
    assert (trace_out.prompt_len, trace_out.output_len) == (700, 40)
    assert chat_out.prompt_len == len(chat_out.prompt_ids)


# ---------------------------------------------------------------- piece cache on real multi-turn data

@pytest.mark.real_data
def test_piece_cache_exact_on_sharegpt(default_tok, real_file):
    requests = _sharegpt_requests(real_file("sharegpt_v3_subset.json"), 300)
    assert len(requests) > 900  # about 3 assistant turns per conversation
    out = RequestTokenizer(default_tok).tokenize(requests)
    whole_prompts = default_tok.encode_texts([default_tok.render_chat(r.messages) for r in requests], special=True)
    whole_outputs = default_tok.encode_texts([r.completion for r in requests], special=True)
    for got, prompt, output in zip(out, whole_prompts, whole_outputs):
        assert got.prompt_ids.tolist() == prompt
        assert got.output_ids.tolist() == output


@pytest.mark.real_data
def test_each_distinct_piece_encoded_once(default_tok, real_file, monkeypatch):
    requests = _sharegpt_requests(real_file("sharegpt_v3_subset.json"), 200)
    calls: list[list[str]] = []
    real_encode = default_tok.encode_ordinary_arrays

    def spy(texts):
        calls.append(list(texts))
        return real_encode(texts)

    monkeypatch.setattr(default_tok, "encode_ordinary_arrays", spy)
    rt = RequestTokenizer(default_tok)
    first = rt.tokenize(requests)
    assert len(calls) == 1, "one batched encoder call per tokenize() batch"
    encoded = calls[0]
    assert len(encoded) == len(set(encoded))
    distinct = {p for r in requests for text in (default_tok.render_chat(r.messages), r.completion)
                for p in default_tok.split_special(text) if isinstance(p, str)}
    # An assistant message's body is "\n\n" + an earlier completion: built from the completion's ids.
    derived = {p for p in distinct if p.startswith("\n\n") and len(p) > 2 and not p[2].isspace() and p[2:] in distinct}
    assert len(derived) > len(requests) / 2 and rt.stats.derived_texts == len(derived)
    assert set(encoded) == distinct - derived
    assert all(t.prompt_ids.tolist() == w for t, w in zip(first, default_tok.encode_texts(
        [default_tok.render_chat(r.messages) for r in requests], special=True)))
    # every earlier turn repeats in later requests: most look-ups are hits (of whole messages, or pieces)
    assert rt.stats.cache_hits == rt.stats.pieces - len(encoded) - len(derived)
    assert rt.stats.cache_hits + rt.stats.segment_hits > 3 * len(encoded)
    again = rt.tokenize(requests)
    assert len(calls) == 1, "a second pass is served from the cache"
    assert all(np.array_equal(a.prompt_ids, b.prompt_ids) for a, b in zip(first, again))


def test_encode_ordinary_arrays_equal_encode_ordinary(default_tok):
    """tiktoken's token buffer gives encode_ordinary's ids, lone surrogates and special-token text included."""
    texts = ["Hello, world!", "", "a\ud800b", "<|eot_id|> as text", "日本語 🎉\n\n  x", "def f(x):\n    return x"]
    arrays = default_tok.encode_ordinary_arrays(texts)
    assert [a.dtype for a in arrays] == [np.int32] * len(texts)
    assert [a.tolist() for a in arrays] == default_tok.encode_ordinary(texts)


@pytest.mark.real_data
def test_overlapped_batches_give_the_same_ids_and_encode_each_piece_once(default_tok, real_file, monkeypatch):
    """A batch begun while the one before is still encoding (on a thread) takes the pieces and chat segments
    it shares with that one from it: the same ids as one batch after the other, no piece encoded twice."""
    from concurrent.futures import ThreadPoolExecutor

    requests = _sharegpt_requests(real_file("sharegpt_v3_subset.json"), 120)
    batches = [requests[i:i + 16] for i in range(0, len(requests), 16)]
    reference = RequestTokenizer(default_tok).tokenize_packed(requests)
    encoded: list[str] = []
    real_encode = default_tok.encode_ordinary_arrays

    def spy(texts):
        encoded.extend(texts)
        return real_encode(texts)

    monkeypatch.setattr(default_tok, "encode_ordinary_arrays", spy)
    tokenizer = RequestTokenizer(default_tok)
    got = []
    with ThreadPoolExecutor(max_workers=1) as executor:
        started = tokenizer.begin(batches[0], executor)
        for batch in batches[1:]:
            following = tokenizer.begin(batch, executor)
            got.append(tokenizer.finish(started))
            started = following
        got.append(tokenizer.finish(started))
    assert len(encoded) == len(set(encoded))
    ids = np.concatenate([packed.ids for packed in got])
    assert np.array_equal(ids, reference.ids)
    assert [length for packed in got for length in packed.prompt_lens.tolist()] == reference.prompt_lens.tolist()


@pytest.mark.real_data
def test_tiny_cache_evicts_and_stays_exact(default_tok, real_file):
    requests = _sharegpt_requests(real_file("sharegpt_v3_subset.json"), 40)
    reference = RequestTokenizer(default_tok).tokenize(requests)
    small = RequestTokenizer(default_tok, cache_bytes=64 << 10)
    got = [t for i in range(0, len(requests), 16) for t in small.tokenize(requests[i:i + 16])]
    assert small.stats.evictions > 0 and small._cache.bytes <= 64 << 10
    assert all(np.array_equal(a.prompt_ids, b.prompt_ids) for a, b in zip(reference, got))


# ---------------------------------------------------------------- "\n\n" + text from text's ids

# Unicode's White_Space characters (PropList.txt since Unicode 6.3): what the split pattern's \s matches.
WHITE_SPACE = (*range(0x9, 0xE), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F,
               0x3000)


def test_blank_line_then_text_encodes_as_the_blank_line_then_the_text(default_tok):
    """`blank_line_ids`: encode("\n\n" + text) == ids of "\n\n" + encode(text) when text[0] is not whitespace,
    for every first character of the Basic Multilingual Plane and every 61st beyond (all of them pass too:
    8 s), each followed by a contraction, a space and a letter. The check of text[0] is str.isspace, which
    accepts every White_Space character; with one of those first the pieces do change."""
    assert all(chr(c).isspace() for c in WHITE_SPACE)
    blank_line = default_tok.blank_line_ids
    assert blank_line.tolist() == default_tok.encode_ordinary(["\n\n"])[0]
    firsts = [chr(c) for c in (*range(0x10000), *range(0x10000, 0x110000, 61))
              if not 0xD800 <= c < 0xE000 and not chr(c).isspace()]
    whole = default_tok.encode_ordinary_arrays(["\n\n" + first + "'s x" for first in firsts])
    rest = default_tok.encode_ordinary_arrays([first + "'s x" for first in firsts])
    assert [f for f, w, r in zip(firsts, whole, rest) if not np.array_equal(w, np.concatenate((blank_line, r)))] == []
    assert default_tok.encode_ordinary(["\n\n\nx"])[0] != blank_line.tolist() + default_tok.encode_ordinary(["\nx"])[0]


def test_blank_line_ids_only_for_the_llama3_split_pattern(default_tok, tiny_dir):
    from advisor.tokenize.tiktoken_backend import LLAMA3_PATTERN, TiktokenTokenizer

    assert default_tok.encoding._pat_str == LLAMA3_PATTERN
    other = tiktoken.Encoding(name="other", pat_str=r"\s+|\S+", mergeable_ranks=default_tok.encoding._mergeable_ranks,
                              special_tokens={})
    assert TiktokenTokenizer(other, default_tok.info, template=None, template_variables={}, eos_token_ids=(),
                             completion_prefix=()).blank_line_ids is None
    assert load_tokenizer(str(tiny_dir)).blank_line_ids is None


BLANK_LINE_CASES = (  # completions, each repeated as the assistant message of the next turn
    "Plain reply.", "  padded reply \n", "'s a contraction", "12345 digits", "<|eot_id|> special text first",
    "ends in special text <|eot_id|>", "a lone \ud800 surrogate", "\u3000ideographic space first", "\n\nblank first",
    "\x1cfile separator first", "caf\u00e9 \U0001f600", "",
)


def test_assistant_messages_built_from_completions_equal_the_whole_render(default_tok):
    """Every turn's assistant message is the completion before it: ids from the completion's where its body
    qualifies, in one batch, across batches (from the cache) and from a batch still encoding on a thread,
    equal to encoding the whole rendered prompt."""
    from concurrent.futures import ThreadPoolExecutor

    requests, history = [], [Message("system", "Be brief.")]
    for number, completion in enumerate(BLANK_LINE_CASES * 3):
        history.append(Message("user", f"question {number}"))
        requests.append(Request(source=f"t#{number}", messages=tuple(history), completion=completion))
        history.append(Message("assistant", completion))
    whole = default_tok.encode_texts([default_tok.render_chat(r.messages) for r in requests], special=True)
    outputs = default_tok.encode_texts([r.completion for r in requests], special=True)
    for size in (len(requests), 5, 1):
        tokenizer = RequestTokenizer(default_tok)
        got = [t for i in range(0, len(requests), size) for t in tokenizer.tokenize(requests[i:i + size])]
        assert [t.prompt_ids.tolist() for t in got] == whole
        assert [t.output_ids.tolist() for t in got] == outputs
        assert tokenizer.stats.derived_texts >= 6
    tokenizer = RequestTokenizer(default_tok)
    packed = []
    with ThreadPoolExecutor(max_workers=1) as executor:
        started = tokenizer.begin(requests[:1], executor)
        for request in requests[1:]:  # each turn's completion is still encoding when the next turn begins
            following = tokenizer.begin([request], executor)
            packed.append(tokenizer.finish(started))
            started = following
        packed.append(tokenizer.finish(started))
    assert [p.prompt(0).tolist() for p in packed] == whole
    assert tokenizer.stats.derived_texts >= 6


# ---------------------------------------------------------------- per-message segments of the Llama 3.1 template

SEGMENT_EDGE_CASES = (
    CONVERSATION,
    CONVERSATION[1:],  # no system message: empty system block
    (Message("system", "  \u3000padded\x1c\n"), Message("user", "\u2028 a \t")),  # str.strip whitespace
    (Message("user", "ends in <|eot_id|>"), Message("assistant", "<|start_header_id|>x<|end_header_id|>")),
    (Message("user", "<|eot_id"), Message("assistant", "|>"), Message("user", "<|begin_of_text|><")),
    (Message("user", ""), Message("assistant", "   "), Message("system", "a later system turn")),
    (Message("system", "only a system message"),),
    (Message("user", "caf\u00e9 \U0001f600"), Message("<|eot_id|>", "a role holding a special token")),
)


@pytest.mark.parametrize("messages", SEGMENT_EDGE_CASES)
def test_segments_render_the_template_exactly(default_tok, messages):
    segments = default_tok.segments
    keys = segments.keys(messages)
    assert keys is not None
    assert "".join(segments.render(key) for key in keys) == default_tok.render_chat(messages)
    for key in keys:  # the pieces built without scanning, where a message allows it, are the scan's
        pieces = segments.pieces(key)
        assert pieces is None or pieces == default_tok.split_special(segments.render(key))
    request = Request(source="t:1", messages=messages)
    warm = RequestTokenizer(default_tok)
    warm.tokenize([Request(source="t:0", messages=messages[:-1])] if len(messages) > 1 else [])
    whole = default_tok.encode_texts([default_tok.render_chat(messages)], special=True)[0]
    assert warm.tokenize([request])[0].prompt_ids.tolist() == whole


def test_segments_only_where_the_template_is_known_to_render_by_message(default_tok):
    tool_turn = (Message("user", "run it"), Message("tool", "{}"))
    assert default_tok.segments.keys(tool_turn) is None  # the tool branch renders JSON: rendered whole
    assert default_tok.segments.keys(()) is None  # the template fails on it: the full render says why
    names = default_tok.special_ids
    source = chat_module.LLAMA31_TEMPLATE_FILE.read_text()
    variables = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    assert chat_module.segmenter(source, variables, names) is not None
    assert chat_module.segmenter(source + " ", variables, names) is None
    assert chat_module.segmenter(CHATML, variables, names) is None
    assert chat_module.segmenter(source, {**variables, "date_string": "1 Jan 2025"}, names) is None
    assert chat_module.segmenter(source, variables, {**names, "<|a<b|>": 1}) is None
    assert default_tok.segments.pieces(("user", "a < b")) is None  # '<' in the text: split by scanning
    assert default_tok.segments.pieces(("user", " hi ")) == [names["<|start_header_id|>"], "user",
                                                             names["<|end_header_id|>"], "\n\nhi", names["<|eot_id|>"]]


@pytest.mark.real_data
@pytest.mark.parametrize("name", ["sharegpt_v3_subset.json", "aider_chat_history.md", "swe_agent_marshmallow_1867.traj"])
def test_segments_give_the_whole_render_ids_on_real_logs(default_tok, real_file, name):
    from advisor.ingest import read_requests

    requests = [r for r in read_requests([str(real_file(name))]) if r.messages is not None][:1500]
    rt = RequestTokenizer(default_tok)
    got = [t for i in range(0, len(requests), 128) for t in rt.tokenize(requests[i:i + 128])]
    whole = default_tok.encode_texts([default_tok.render_chat(r.messages) for r in requests], special=True)
    assert all(t.prompt_ids.tolist() == w for t, w in zip(got, whole))
    if name != "swe_agent_marshmallow_1867.traj":  # its tool messages are rendered whole
        assert rt.stats.segment_hits > len(requests)


# ---------------------------------------------------------------- HF tokenizers built locally

def _train_tiny(pre_tokenizer: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    if pre_tokenizer == "bytelevel":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:  # SentencePiece-style prefix space: not split-invariant
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=alphabet)
    corpus = ["Hello world, this is a small test corpus.", "The quick brown fox jumps over the lazy dog!",
              "user assistant system: numbers 12345 and tabs\tand\nnewlines."]
    tok.train_from_iterator(corpus * 20, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def _write_hf_dir(folder: Path, pre_tokenizer: str = "bytelevel", template: str | None = CHATML) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _train_tiny(pre_tokenizer).save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "<|im_end|>"}
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return _write_hf_dir(tmp_path_factory.mktemp("tiny") / "tok")


def test_hf_dir_render_and_ids_match_transformers(tiny_dir):
    transformers = pytest.importorskip("transformers")
    tok = load_tokenizer(str(tiny_dir))
    assert tok.info.kind == "hf" and tok.info.chat_template and tok.split_invariant
    hf = transformers.AutoTokenizer.from_pretrained(str(tiny_dir), local_files_only=True)
    messages = [{"role": m.role, "content": m.content} for m in CONVERSATION]
    rendered = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.render_chat(CONVERSATION) == rendered
    requests = [
        Request(source="t:1", messages=CONVERSATION, completion="Merci <|im_end|> bien"),
        Request(source="t:2", messages=CONVERSATION[:2], completion="37035"),
        Request(source="t:3", prompt="Hello <|im_start|>world", completion=" fox"),
    ]
    out = RequestTokenizer(tok).tokenize(requests)
    assert out[0].prompt_ids.tolist() == hf.encode(rendered, add_special_tokens=False)
    assert out[0].output_ids.tolist() == hf.encode("Merci <|im_end|> bien", add_special_tokens=False)
    assert out[2].prompt_ids.tolist() == hf.encode("Hello <|im_start|>world", add_special_tokens=True)
    assert out[2].prompt_ids[0] == hf.bos_token_id
    # batch equals one by one
    single = [RequestTokenizer(tok).tokenize([r])[0] for r in requests]
    assert all(np.array_equal(a.prompt_ids, b.prompt_ids) for a, b in zip(out, single))
    assert tok.encode_texts(["a b", "Hello"], special=True) == [tok.encode_texts([t], special=True)[0]
                                                              for t in ["a b", "Hello"]]


def test_metaspace_tokenizer_falls_back_to_whole_text(tmp_path):
    folder = _write_hf_dir(tmp_path / "sp", pre_tokenizer="metaspace")
    tok = load_tokenizer(str(folder))
    assert not tok.split_invariant and "Metaspace" in tok.split_note
    backend = tok.backend
    requests = [Request(source="t:1", messages=CONVERSATION, completion="Hello world"),
                Request(source="t:2", prompt="Hello world")]
    out = RequestTokenizer(tok).tokenize(requests)
    rendered = tok.render_chat(CONVERSATION)
    assert out[0].prompt_ids.tolist() == backend.encode(rendered, add_special_tokens=False).ids
    assert out[1].prompt_ids.tolist() == backend.encode("Hello world", add_special_tokens=True).ids
    # the reason for the fallback: pieces would tokenize differently here
    pieces = [i for p in tok.split_special(rendered)
              for i in ([p] if isinstance(p, int) else backend.encode(p, add_special_tokens=False).ids)]
    assert pieces != out[0].prompt_ids.tolist()


def test_bare_tokenizer_json_uses_documented_fallback(tiny_dir):
    tok = load_tokenizer(str(tiny_dir / "tokenizer.json"))
    assert tok.info.chat_template is False and "approximate" in tok.info.warning
    assert tok.render_chat(CONVERSATION[:2]) == (
        "system: You are a concise assistant.\n\nuser: What is 12345 * 3?  Answer\tbriefly.\n\nassistant: "
    )


def test_model_implies_its_tokenizer(tiny_dir):
    tok = load_tokenizer(model=str(tiny_dir))
    assert tok.info.kind == "hf" and tok.info.model_match is True and tok.info.warning is None


def test_default_when_model_not_found_says_so():
    other = load_tokenizer(model="/nonexistent/Qwen3-8B")
    assert other.info.is_default and other.info.model_match is False and "approximate" in other.info.warning
    llama = load_tokenizer(model="/nonexistent/Llama-3.1-8B-Instruct")
    assert llama.info.model_match is True and llama.info.warning is None


@pytest.mark.vllm
def test_hf_ids_equal_real_vllm(tiny_dir, vllm_python):
    """vLLM's own tokenizer object and calls: vllm/tokenizers/registry.py `get_tokenizer`; chat as in
    vllm/renderers/hf.py `safe_apply_chat_template` (apply_chat_template with add_generation_prompt, the
    template tokenized without added special tokens); completions as vllm/renderers/base.py `_tokenize_prompt`
    with `default_cmpl_tok_params` (add_special_tokens=True)."""
    messages = [{"role": m.role, "content": m.content} for m in CONVERSATION]
    code = f"""
import json, sys
from vllm.tokenizers import get_tokenizer
tok = get_tokenizer({str(tiny_dir)!r})
messages = json.loads(sys.argv[1])
chat = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
completion = tok.encode("Hello <|im_start|>world", add_special_tokens=True)
print(json.dumps({{"chat": list(chat), "completion": list(completion)}}))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([str(vllm_python), "-c", code, json.dumps(messages)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = json.loads(result.stdout.strip().splitlines()[-1])
    tok = load_tokenizer(str(tiny_dir))
    chat_req, completion_req = RequestTokenizer(tok).tokenize([
        Request(source="t:1", messages=CONVERSATION), Request(source="t:2", prompt="Hello <|im_start|>world")])
    assert chat_req.prompt_ids.tolist() == expected["chat"]
    assert completion_req.prompt_ids.tolist() == expected["completion"]


# ---------------------------------------------------------------- errors, offline

def test_unknown_path_or_uncached_id_is_a_tokenizer_error(tmp_path):
    """Run in a fresh interpreter with an empty HF cache and sockets disabled: nothing may touch the network."""
    code = f"""
import socket
def refuse(*a, **k):
    raise AssertionError('network attempted')
socket.socket.connect = refuse
socket.create_connection = refuse
from advisor.errors import TokenizerError
from advisor.tokenize import load_tokenizer
for spec in ['{tmp_path}/missing', 'some-org/some-model', 'tiktoken:o200k_base', 'tiktoken:nope']:
    try:
        load_tokenizer(spec)
    except TokenizerError as exc:
        print(spec, '->', exc)
    else:
        raise SystemExit(spec + ' loaded')
"""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "TIKTOKEN_CACHE_DIR": str(tmp_path / "tt")}
    env.pop("HF_HUB_OFFLINE", None)  # the loader must set it itself
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "local Hugging Face cache" in lines[0] and "local Hugging Face cache" in lines[1]
    assert "TIKTOKEN_CACHE_DIR" in lines[2] and "tiktoken:o200k_base=" in lines[2]
    assert "unknown tiktoken encoding" in lines[3]


def test_model_id_found_in_local_hf_cache(tiny_dir, tmp_path):
    """An id resolves to its snapshot in the HF cache layout (refs/main -> snapshots/<rev>), offline."""
    repo = tmp_path / "hf" / "hub" / "models--test-org--tiny"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((tiny_dir / name).read_bytes())
    code = """
import socket
def refuse(*a, **k):
    raise AssertionError('network attempted')
socket.socket.connect = refuse
from advisor.tokenize import load_tokenizer
tok = load_tokenizer(model='test-org/tiny')
print(tok.info.kind, tok.info.model_match, tok.info.source)
"""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hf", "True", str(snapshot)]


def test_tiktoken_definitions_reused_without_download(monkeypatch):
    """`tiktoken:` encodings take pattern and special tokens from tiktoken_ext, with our ranks, no network."""
    import socket

    import tiktoken_ext.openai_public as openai_public

    from advisor.tokenize import tiktoken_backend

    def refuse(*args, **kwargs):
        raise AssertionError("network attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    original = openai_public.load_tiktoken_bpe
    params = tiktoken_backend._openai_params("o200k_harmony", {b"a": 0})
    assert params["name"] == "o200k_harmony" and params["mergeable_ranks"] == {b"a": 0}
    assert params["special_tokens"]["<|return|>"] == 200002
    assert openai_public.load_tiktoken_bpe is original


def test_tiktoken_file_with_wrong_content_is_rejected(tmp_path):
    fake = tmp_path / "o200k_base.tiktoken"
    fake.write_bytes(b"IQ== 0\n")
    with pytest.raises(TokenizerError, match="sha256"):
        load_tokenizer(f"tiktoken:o200k_base={fake}")


def test_non_json_file_is_refused(tmp_path):
    bpe = tmp_path / "tokenizer.model"
    bpe.write_text("IQ== 0\n")
    with pytest.raises(TokenizerError, match="tiktoken:<encoding>="):
        load_tokenizer(str(bpe))


def test_logged_token_ids_pass_through_and_are_checked_against_a_named_tokenizer(tiny_dir, default_tok):
    from advisor.tokenize import logged_ids

    logged = Request(source="x:1", prompt="ignored text", prompt_token_ids=(5, 6, 7), output_token_ids=(8,),
                     completion="also ignored")
    assert not logged.needs_tokenizer
    [through_default] = RequestTokenizer(default_tok).tokenize([logged])
    [without] = [logged_ids(logged)]
    for item in (through_default, without):
        assert item.prompt_ids.tolist() == [5, 6, 7] and item.output_ids.tolist() == [8]
    tok = load_tokenizer(str(tiny_dir))
    [checked] = RequestTokenizer(tok).tokenize([logged])
    assert checked.prompt_ids.tolist() == [5, 6, 7]
    too_big = Request(source="x:2", prompt_token_ids=(tok.info.vocab_size,))
    with pytest.raises(TokenizerError, match=r"x:2: the log holds token id \d+ .* not the served model's tokenizer"):
        RequestTokenizer(tok).tokenize([too_big])
    half = Request(source="x:3", prompt_token_ids=(1, 2), completion="text without ids")
    assert half.needs_tokenizer  # the output still has to be encoded
