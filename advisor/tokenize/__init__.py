"""Tokenize stage: `Request` -> token ids exactly as vLLM's server would see them. This is the public API.

`load_tokenizer` picks the tokenizer offline (docs/tokenizers.md); `RequestTokenizer.tokenize` turns a
batch of requests into `TokenizedRequest`s, encoding each distinct text piece once. transformers is imported
only when an HF tokenizer directory or model id is loaded.
"""
from advisor.tokenize.base import Tokenizer, TokenizerInfo
from advisor.tokenize.loader import load_tokenizer
from advisor.tokenize.request import PackedIds, RequestTokenizer, TokenizedRequest, TokenizeStats, logged_ids

__all__ = ["PackedIds", "RequestTokenizer", "TokenizeStats", "TokenizedRequest", "Tokenizer", "TokenizerInfo", "load_tokenizer", "logged_ids"]
