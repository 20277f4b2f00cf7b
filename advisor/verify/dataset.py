"""The benchmark input of `advise verify`: the logged requests as a `vllm bench serve` custom dataset, and
the load to replay them at.

Controls, each against a way a bench run can stop resembling the logged workload:
- prompts are pre-rendered with the served model's chat template (system prompts and history included) and
  sent with `--skip-chat-template`; bench would otherwise wrap each prompt as a single user message;
- the BOS text that the template writes is removed when the completions endpoint adds BOS itself, so the
  server sees exactly the token ids the chat endpoint would have (no double BOS);
- every row carries the logged output length (`--custom-output-len -1`, with `--ignore-eos`), so both arms
  generate the same number of tokens per request;
- rows are written in log order and sent in that order (`--disable-shuffle`), never more than exist
  (`--no-oversample`: duplicated prompts would be artificial prefix-cache hits);
- request rate, burstiness and max concurrency come from the logs' observed arrivals and latencies
  (advisor.measure.arrivals), never an unbounded burst unless asked; temperature from the logs, else 0.

The dataset file holds prompt text (private data): it is written into the run's own folder and never printed.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from advisor import limits
from advisor.errors import ConfigError, InputError
from advisor.measure.arrivals import arrival_profile, concurrency
from advisor.record import Request
from advisor.tokenize import RequestTokenizer, Tokenizer

TOKENIZE_BATCH = 256


@dataclass(frozen=True)
class BenchLoad:
    """Arguments of `vllm bench serve` that shape the load; `source` says where each came from."""

    request_rate: float | None  # None: send everything at once (only when asked with --request-rate inf)
    burstiness: float
    max_concurrency: int | None
    source: dict[str, str]

    def to_dict(self) -> dict:
        return {
            "request_rate": self.request_rate,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "source": self.source,
        }


@dataclass(frozen=True)
class BenchDataset:
    """What was written to the custom dataset file, with the settings derived from the logs."""

    path: Path
    sha256: str
    rows: int
    input_tokens: int
    output_tokens: int
    skipped: dict[str, int]
    temperature: float
    temperature_source: str
    load: BenchLoad
    bos_stripped: bool
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "rows": self.rows,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "skipped": self.skipped,
            "temperature": self.temperature,
            "temperature_source": self.temperature_source,
            "load": self.load.to_dict(),
            "bos_stripped": self.bos_stripped,
            "notes": list(self.notes),
        }


def completion_prompt(tokenizer: Tokenizer, rendered: str) -> tuple[str, bool]:
    """The rendered chat text to send to /v1/completions, and whether a leading BOS text was removed.

    The chat endpoint encodes the rendered text without adding special tokens; the completions endpoint
    adds them (vllm/entrypoints/openai/completion/protocol.py, `add_special_tokens` default True). When the
    template already wrote those ids' text, it is dropped here so the server's ids equal the chat's.
    """
    prefix = tokenizer.completion_prefix
    if not prefix:
        return rendered, False
    text_of = {token_id: text for text, token_id in tokenizer.special_ids.items()}
    if not all(token_id in text_of for token_id in prefix):
        return rendered, False
    written = "".join(text_of[token_id] for token_id in prefix)
    if rendered.startswith(written):
        return rendered[len(written):], True
    return rendered, False


def observed_load(
    requests: Sequence[Request],
    request_rate: float | None = None,
    burstiness: float | None = None,
    max_concurrency: int | None = None,
) -> BenchLoad:
    """Rate, burstiness and concurrency limit for the bench: the options when given, else the logs'.

    request_rate=inf (float) means "everything at once", and only when the user asks for it. The logs' rate
    is (n - 1) / duration over the replayed requests, the burstiness the gamma shape 1/CV^2 of their gaps,
    the concurrency limit the most requests ever in flight (from logged latencies).
    """
    source: dict[str, str] = {}
    timestamps = np.array([r.timestamp for r in requests if r.timestamp is not None], dtype=np.float64)
    profile = arrival_profile(timestamps) if timestamps.size >= 2 else None
    if request_rate is not None:
        rate: float | None = None if np.isinf(request_rate) else request_rate
        source["request_rate"] = "option"
    elif profile is not None and profile.mean_rate_rps:
        rate = profile.mean_rate_rps
        source["request_rate"] = f"logs ({profile.count} arrivals over {profile.duration_s:.1f} s)"
    else:
        raise ConfigError(
            "the logs carry no usable timestamps (fewer than two distinct arrival times), so the load to replay "
            "is unknown: pass --request-rate (requests/s, or 'inf' to send everything at once)"
        )
    if burstiness is not None:
        shape = burstiness
        source["burstiness"] = "option"
    elif profile is not None and profile.interarrival_cv is not None:
        shape = min(profile.gamma_burstiness or limits.MAX_BURSTINESS, limits.MAX_BURSTINESS)
        source["burstiness"] = f"logs (inter-arrival CV {profile.interarrival_cv:.2f})"
    else:
        shape = 1.0
        source["burstiness"] = "default (Poisson)"
    if max_concurrency is not None:
        limit: int | None = max_concurrency
        source["max_concurrency"] = "option"
    else:
        pairs = [(r.timestamp, r.latency_s) for r in requests if r.timestamp is not None and r.latency_s]
        flight = concurrency(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])) if pairs else None
        limit = flight.max if flight is not None and flight.max else None
        source["max_concurrency"] = (
            f"logs (most requests in flight, {flight.requests} with latencies)" if limit else "none (no logged latencies)"
        )
    return BenchLoad(rate, float(shape), limit, source)


def logged_temperature(requests: Sequence[Request], override: float | None = None) -> tuple[float, str]:
    """One temperature for the bench (it applies one to every request): the option, the logs' most common
    value, else 0 (greedy, which makes the two arms generate comparable text)."""
    if override is not None:
        return override, "option"
    values = Counter(r.sampling.temperature for r in requests if r.sampling.temperature is not None)
    if not values:
        return 0.0, "default (not logged)"
    value, count = values.most_common(1)[0]
    if len(values) == 1:
        return float(value), "logs"
    return float(value), f"logs (most common; {sum(values.values()) - count} requests used other values)"


def build_dataset(
    requests: Sequence[Request],
    tokenizer: Tokenizer,
    out_path: Path,
    *,
    max_requests: int | None = None,
    max_model_len: int | None = None,
    request_rate: float | None = None,
    burstiness: float | None = None,
    max_concurrency: int | None = None,
    temperature: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchDataset:
    """Write the custom dataset (JSONL, log order) for the first `max_requests` usable requests.

    A request is usable with prompt text (chat or completions) and a known output length (the completion
    re-tokenized, else the logged count) that fits `max_model_len` together with the prompt.
    """
    if out_path.suffix != ".jsonl":
        raise ConfigError(f"{out_path}: vllm bench's custom dataset must be a .jsonl file")
    skipped: Counter[str] = Counter()
    kept: list[Request] = []
    rows: list[bytes] = []
    input_tokens = output_tokens = 0
    bos_stripped = False
    encoder = RequestTokenizer(tokenizer)
    for start in range(0, len(requests), TOKENIZE_BATCH):
        if max_requests is not None and len(kept) >= max_requests:
            break
        batch = list(requests[start : start + TOKENIZE_BATCH])
        for item in encoder.tokenize(batch):
            request = item.request
            if max_requests is not None and len(kept) >= max_requests:
                break
            if item.prompt_ids is None:
                skipped["no prompt text"] += 1
                continue
            output_len = item.output_len
            if not output_len:
                skipped["no output length"] += 1
                continue
            if max_model_len is not None and item.prompt_len + output_len > max_model_len:
                skipped[f"prompt + output longer than max-model-len {max_model_len}"] += 1
                continue
            if request.messages is not None:
                text, stripped = completion_prompt(tokenizer, tokenizer.render_chat(request.messages))
                bos_stripped |= stripped
            else:
                text = request.prompt or ""
            rows.append(orjson.dumps({"prompt": text, "output_tokens": int(output_len)}))
            kept.append(request)
            input_tokens += int(item.prompt_len)
            output_tokens += int(output_len)
        if progress is not None:
            progress(f"dataset: {len(kept)} requests ready")
    if not rows:
        reasons = ", ".join(f"{count} {reason}" for reason, count in skipped.items()) or "no requests"
        raise InputError(f"no request of the logs can be replayed ({reasons})")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    payload = b"\n".join(rows) + b"\n"
    out_path.write_bytes(payload)
    temp, temp_source = logged_temperature(kept, temperature)
    notes = []
    if tokenizer.completion_suffix:
        notes.append("the completions endpoint appends special tokens to each prompt that the chat endpoint would not")
    return BenchDataset(
        path=out_path,
        sha256=hashlib.sha256(payload).hexdigest(),
        rows=len(rows),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        skipped=dict(skipped),
        temperature=temp,
        temperature_source=temp_source,
        load=observed_load(kept, request_rate, burstiness, max_concurrency),
        bos_stripped=bos_stripped,
        notes=tuple(notes),
    )
