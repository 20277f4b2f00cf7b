"""Exact greedy replay of vLLM's `draft_model` proposer from the logs and the draft model alone.

Why teacher forcing is exact (docs/replay.md): at every decode step vLLM's draft proposer
(vllm/v1/spec_decode/draft_model.py on llm_base_proposer.py) runs the draft over the accepted context, which
is always the true prefix of the logged sequence (rejected positions are dropped from its KV cache), and
proposes k tokens autoregressively by argmax. The target accepts the longest prefix of the draft that equals
its own greedy continuation, which is the logged output. While the draft's tokens agree with the log, the
draft's own context IS the logged prefix, so its next proposal is argmax(draft | true prefix) again. Hence
the accepted count at a step from context length t is the run of positions p >= t where
argmax(draft | tokens[:p]) == tokens[p], capped at the draft length. One causal (teacher-forced) forward of
the draft over prompt + output gives that argmax for every position at once, for every k.

The bookkeeping is the ngram replay's (`advisor.measure.ngram.count_step`): the prefill emits the first
output token and the draft proposes right after it (the first decode step verifies k drafts); a draft is
proposed at every step (unlike ngram), trimmed by the scheduler to max_model_len - t - 1 tokens. Torch and
transformers are needed only here (the `advise[draft]` extra) and are imported inside the functions.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from advisor.errors import ConfigError
from advisor.measure.ngram import COUNTER_COLUMNS, LAST_CONTEXT, MAX_SLOTS, NO_LIMIT, OUTPUT_TOKENS, count_step

EXTRA = "advise[draft]"
# Padded tokens per forward batch: big enough for the CPU's GEMMs, small enough for memory (activations of a
# 135M-parameter draft at 4k tokens are tens of MB; the LM head runs on slices of LOGIT_ROWS positions).
BATCH_TOKENS = 4096
LOGIT_ROWS = 1024

DraftProgress = Callable[[int, int], None]  # (tokens forwarded so far, tokens to forward)


def require_torch() -> None:
    """Raises ConfigError (exit 2) naming the extra when torch or transformers is missing."""
    import importlib.util

    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"the draft_model replay (--draft) needs {' and '.join(missing)}: pip install '{EXTRA}'")


@dataclass(frozen=True, slots=True)
class DraftModelInfo:
    """What the replay and the engine need to know about a draft, read from its folder."""

    name: str
    path: str
    params: int
    vocab_size: int
    max_model_len: int
    num_layers: int
    tokenizer_vocab: dict | None  # token -> id from the draft's tokenizer.json, when it has one

    def to_dict(self) -> dict:
        return {"model": self.name, "path": self.path, "params": self.params, "vocab_size": self.vocab_size,
                "max_model_len": self.max_model_len, "num_layers": self.num_layers}


def resolve_draft(name: str) -> Path:
    """The draft's folder: a local directory, or a snapshot of an HF id in the local cache (never the hub)."""
    from advisor.tokenize.hf_backend import find_local

    folder = find_local(name)
    if folder is None or not (folder / "config.json").is_file():
        raise ConfigError(f"--draft {name}: no model folder with config.json, and no snapshot of it in the "
                          "local Hugging Face cache (advise never downloads)")
    return folder


def read_draft_info(name: str, folder: Path, params: int) -> DraftModelInfo:
    import json

    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or config
    vocab = None
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file():
        from tokenizers import Tokenizer

        vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab(with_added_tokens=True)
    return DraftModelInfo(
        name=name, path=str(folder), params=params, vocab_size=int(text.get("vocab_size") or config["vocab_size"]),
        max_model_len=int(text.get("max_position_embeddings") or NO_LIMIT),
        num_layers=int(text.get("num_hidden_layers") or 0), tokenizer_vocab=vocab,
    )


def check_compatible(draft: DraftModelInfo, target_vocab_size: int | None, target_vocab: dict | None) -> list[str]:
    """The checks vLLM makes before it starts a draft_model server, plus the tokenizer comparison it skips.

    vLLM (vllm/config/speculative.py, verify_equal_vocab_size_if_draft_model) refuses a draft whose config
    vocab_size differs from the target's, and feeds the draft the target's token ids (the draft is loaded
    with the target's tokenizer), so a draft trained on another tokenizer of the same size would start and
    propose nonsense. Returns the checks that passed; raises ConfigError with the reason otherwise.
    """
    passed = []
    if target_vocab_size is not None:
        if draft.vocab_size != target_vocab_size:
            raise ConfigError(
                f"--draft {draft.name}: vocab_size {draft.vocab_size} differs from the target's {target_vocab_size}; "
                "vLLM refuses such a draft_model (verify_equal_vocab_size_if_draft_model)"
            )
        passed.append(f"config vocab_size {draft.vocab_size} equals the target's (vLLM's check)")
    if target_vocab is not None and draft.tokenizer_vocab is not None:
        differing = sum(draft.tokenizer_vocab.get(token) != index for token, index in target_vocab.items())
        extra = len(set(draft.tokenizer_vocab) - set(target_vocab))
        if differing or extra:
            raise ConfigError(
                f"--draft {draft.name}: its tokenizer differs from the target's ({differing} of {len(target_vocab)} "
                f"target tokens map to another id, {extra} tokens only in the draft's); vLLM feeds the draft the "
                "target's token ids, so its drafts would be meaningless"
            )
        passed.append(f"tokenizer identical to the target's ({len(target_vocab)} tokens)")
    if not passed:
        raise ConfigError(
            f"--draft {draft.name}: cannot check that it shares the target's vocabulary: pass the target with "
            "--model (its config.json) or a tokenizer with --tokenizer, and give the draft folder its tokenizer.json"
        )
    return passed


class DraftRunner:
    """A draft model for teacher-forced argmax passes on the CPU: `info` is read from its config at once (so
    compatibility is checked before anything heavy), the weights on `load()` (or the first pass)."""

    def __init__(self, name: str, dtype: str = "float32"):
        require_torch()
        self.folder = resolve_draft(name)
        self.dtype = dtype
        self.model = None
        self.info = read_draft_info(name, self.folder, 0)

    def load(self) -> None:
        """Loads the weights offline; `info.params` then counts them."""
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import dataclasses

        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()  # the CLI renders its own bar
        try:
            self.model = transformers.AutoModelForCausalLM.from_pretrained(
                str(self.folder), dtype=getattr(torch, self.dtype), local_files_only=True
            ).eval()
        except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for unusable folders
            raise ConfigError(f"--draft {self.info.name}: transformers could not load {self.folder} offline ({exc})") from exc
        params = sum(p.numel() for p in self.model.parameters())
        self.info = dataclasses.replace(self.info, params=int(params))

    def argmax_agreement(self, requests: Sequence[tuple[np.ndarray, np.ndarray]],
                         progress: DraftProgress | None = None) -> list[np.ndarray]:
        """Per request, agree[p] = (argmax of the draft given tokens[:p]) == tokens[p] for every output
        position p after the first (the first output token comes from the target's prefill).

        Requests are sorted by length and packed into right-padded batches of BATCH_TOKENS: under causal
        attention a real position never sees the padding after it, so no attention mask is needed.
        """
        import torch

        if self.model is None:
            self.load()
        sequences = [np.concatenate((np.asarray(p, np.int64), np.asarray(o, np.int64))) for p, o in requests]
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        total = int(sum(len(s) for s in sequences))
        done = 0
        agree: list[np.ndarray] = [np.zeros(len(s), dtype=np.bool_) for s in sequences]
        decoder = self.model.get_decoder()
        head = self.model.get_output_embeddings()
        batch: list[int] = []
        with torch.inference_mode():
            for position, index in enumerate(order):
                batch.append(index)
                longest = len(sequences[index])
                following = len(sequences[order[position + 1]]) if position + 1 < len(order) else None
                if following is not None and following * (len(batch) + 1) <= BATCH_TOKENS:
                    continue
                ids = torch.zeros((len(batch), longest), dtype=torch.long)
                for row, member in enumerate(batch):
                    ids[row, : len(sequences[member])] = torch.from_numpy(sequences[member])
                hidden = decoder(input_ids=ids).last_hidden_state
                for row, member in enumerate(batch):
                    size = len(sequences[member])
                    first = len(requests[member][0]) + 1  # positions predicted by a draft
                    if size <= first:
                        continue
                    states = hidden[row, first - 1 : size - 1]
                    predicted = torch.cat([head(states[s : s + LOGIT_ROWS]).argmax(dim=-1)
                                           for s in range(0, states.shape[0], LOGIT_ROWS)])
                    agree[member][first:] = (predicted.numpy() == sequences[member][first:])
                    done += size
                if progress:
                    progress(done, total)
                batch = []
        return agree


@njit(cache=True, nogil=True)
def _replay_batch(agree: np.ndarray, offsets: np.ndarray, prompt_lens: np.ndarray, ks: np.ndarray,
                  max_model_len: int, counters: np.ndarray, per_pos: np.ndarray) -> None:
    """counters[r, ki] and per_pos[ki] for every request r and k ks[ki] (see the module docstring)."""
    for r in range(prompt_lens.shape[0]):
        start = offsets[r]
        total = offsets[r + 1] - start
        prompt = prompt_lens[r]
        if total - prompt <= 0:
            continue
        # run[p]: consecutive positions from p on where the draft's argmax equals the logged token.
        run = np.zeros(total + 1, dtype=np.int64)
        for p in range(total - 1, prompt, -1):
            if agree[start + p]:
                run[p] = run[p + 1] + 1
        for ki in range(ks.shape[0]):
            k = ks[ki]
            row = counters[r, ki]
            row[LAST_CONTEXT] = prompt
            row[MAX_SLOTS] = prompt
            t = prompt + 1
            while t < total:
                length = min(k, max_model_len - t - 1) if t < max_model_len else 0  # scheduler trim
                accepted = count_step(row, per_pos[ki], t, total, length, run[t])
                t += accepted + 1
            row[OUTPUT_TOKENS] += total - prompt


def replay_draft(requests: Sequence[tuple[np.ndarray, np.ndarray]], agree: Sequence[np.ndarray],
                 ks: Sequence[int], max_model_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Counters (columns of advisor.measure.ngram) per request and k, and per-position accepted counts,
    from the agreement arrays of `DraftRunner.argmax_agreement`."""
    ks = np.asarray([int(k) for k in ks], dtype=np.int64)
    if ks.size == 0 or ks.min() < 1:
        raise ValueError(f"need k >= 1, got {ks.tolist()}")
    lengths = np.array([0] + [len(p) + len(o) for p, o in requests], dtype=np.int64)
    offsets = np.cumsum(lengths)
    prompt_lens = np.array([len(p) for p, _ in requests], dtype=np.int64)
    flat = np.concatenate(list(agree)) if len(agree) else np.zeros(0, dtype=np.bool_)
    counters = np.zeros((len(requests), ks.size, COUNTER_COLUMNS), dtype=np.int64)
    per_pos = np.zeros((ks.size, int(ks.max())), dtype=np.int64)
    _replay_batch(flat, offsets, prompt_lens, ks, NO_LIMIT if max_model_len is None else int(max_model_len),
                  counters, per_pos)
    return counters, per_pos


@dataclass(frozen=True, slots=True, eq=False)
class DraftMeasurement:
    """One draft's teacher-forced pass over the sampled requests, before the per-k summaries."""

    info: DraftModelInfo
    dtype: str
    compatibility: tuple[str, ...]
    chosen: np.ndarray  # indices of the replayed requests (a uniform sample of those that fit)
    counters: np.ndarray
    per_pos: np.ndarray
    ks: tuple[int, ...]
    skipped_too_long: int  # requests longer than the draft's max length (not replayed, not in the population)
    fitting_requests: int  # the population the sample is drawn from
    tokens_forwarded: int
    seconds: float
    population_tokens: int  # tokens of every request the draft could serve (for the full-run estimate)

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens_forwarded / self.seconds if self.seconds > 0 else None


def measure_draft(
    runner: DraftRunner,
    requests: Sequence[tuple[np.ndarray, np.ndarray]],
    ks: Sequence[int],
    compatibility: Sequence[str],
    max_requests: int | None,
    seed: int = 0,
    max_model_len: int | None = None,
    progress: DraftProgress | None = None,
) -> DraftMeasurement:
    """Forwards the draft over a seeded uniform sample of the requests that fit its max length (longer ones
    are skipped and counted: the draft cannot serve them) and replays every k."""
    from advisor.measure.specreplay import sample_indices

    limit = runner.info.max_model_len
    fitting = np.array([i for i, (p, o) in enumerate(requests) if len(p) + len(o) <= limit], dtype=np.int64)
    kept = fitting[sample_indices(len(fitting), max_requests, seed)]
    picked = [requests[i] for i in kept]
    started = time.perf_counter()
    agree = runner.argmax_agreement(picked, progress)
    seconds = time.perf_counter() - started
    counters, per_pos = replay_draft(picked, agree, ks, max_model_len)
    return DraftMeasurement(
        info=runner.info, dtype=runner.dtype, compatibility=tuple(compatibility), chosen=kept, counters=counters,
        per_pos=per_pos, ks=tuple(int(k) for k in ks), skipped_too_long=int(len(requests) - len(fitting)),
        fitting_requests=int(len(fitting)), tokens_forwarded=int(sum(len(p) + len(o) for p, o in picked)),
        seconds=seconds, population_tokens=int(sum(len(requests[i][0]) + len(requests[i][1]) for i in fitting)),
    )
