"""The profile's collection on a Ray cluster: shards of the log collected in parallel, merged in file order.

A shard is one input file, or the group of files that the reader joins (a rotated vLLM server log, an
OpenAI batch file and its outputs): `advisor.ingest.shard_paths`. Each shard runs on a Ray worker as one
plain Ray task (reading, tokenizing and measuring are one streamed pass per file, so Ray Data's row model
would only add a copy): `read_requests` and `stream.collect` over its files, into its own `Collected` and
`IngestStats`. The driver merges them in path order (`Collected.absorb`, `IngestStats.absorb`), which gives
the collection one pass over all the paths gives, field by field; the whole-log analyses (arrivals, the
prefix and APC replays, the proposer replays, the engine) then run on the driver as in a single-machine run.

What keeps the merge exact: per-request columns are concatenated (rows follow the shards' order); the
overlap and sampling counters add; the chain and replay samples depend only on the set of requests
offered (advisor.measure.state). One thing does not cross a shard: the earlier outputs of a conversation
(the overlap's context). A conversation whose turns lie in several files starts each file with an empty
context, where one pass would carry it over; every format that holds a conversation in one record or
one file (ShareGPT, SWE-agent, Aider, OpenTelemetry traces per file) is unaffected (docs/ray.md).

Ray is the optional extra `advise[ray]`, imported only here and only when a run asks for it.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from advisor import stream
from advisor.errors import AdvisorError, ConfigError
from advisor.ingest import IngestStats, LineChunk, read_parts, read_requests, shard_paths
from advisor.record import Request

# The local cluster started when no address is given (`ray.init()` with every core of this machine).
LOCAL = "local"
# What `--ray VALUE` takes as a cluster address rather than as the first log: "auto", "local",
# ray://host:port (Ray Client), or host:port of a running head (`ray start --head`).
_ADDRESS = re.compile(r"^(auto|local|ray://.+|[A-Za-z0-9_.-]+:\d+)$")


def is_address(value: str) -> bool:
    """Whether `value` reads as a Ray address (see _ADDRESS), not a path."""
    return bool(_ADDRESS.match(value)) and not os.path.exists(value)


@dataclass(frozen=True)
class Shard:
    """What one shard's task sends back: its collection, its ingest stats and the tokenizer it loaded."""

    collected: stream.Collected
    stats: IngestStats
    tokenizer_info: Any | None  # advisor.tokenize.TokenizerInfo when the shard tokenized text


def collect_shard(paths: Sequence[str], fmt: str | None, strict: bool, options: stream.StreamOptions,
                  tokenizer_state: dict[str, Any] | None = None, workers: int = 1,
                  progress: stream.Progress | None = None) -> Shard:
    """Reads and collects `paths` in this process (on `workers` processes): what a Ray task runs on its
    shard, and what a single-machine profile runs on all the paths. `tokenizer_state` is shared with the
    caller (a tokenizer it loaded already is used, the one loaded here stays in it)."""
    stats = IngestStats()
    tokenizer_state = {} if tokenizer_state is None else tokenizer_state
    parts: Iterable[Request | LineChunk]
    if workers > 1:  # the workers parse the JSON Lines files, in chunks sized for them
        parts = read_parts(list(paths), fmt, strict=strict, hash_block_size=options.hash_block_size, stats=stats,
                           workers=workers)
    else:
        parts = read_requests(list(paths), fmt, strict=strict, hash_block_size=options.hash_block_size, stats=stats)
    collected = stream.collect(parts, options, tokenizer_state, workers, progress, stats=stats, strict=strict)
    info = tokenizer_state["tokenizer"].info if "tokenizer" in tokenizer_state else None
    return Shard(collected, stats, info)


def _task(paths: Sequence[str], fmt: str | None, strict: bool, options: stream.StreamOptions) -> Shard | AdvisorError:
    """The Ray task: an AdvisorError comes back as a value, so the driver raises it with its own exit code
    and message (Ray would wrap it in a traceback)."""
    try:
        return collect_shard(paths, fmt, strict, options)
    except AdvisorError as error:
        return error


def merge(shards: Iterable[Shard], seed: int, progress: stream.Progress | None = None) -> Shard:
    """The shards' collections and stats merged in order: what one pass over their paths gives."""
    collected, stats, info = stream.Collected(seed), IngestStats(), None
    for shard in shards:
        collected.absorb(shard.collected)
        stats.absorb(shard.stats)
        info = info or shard.tokenizer_info
        if progress:
            progress(shard.collected.rows)
    return Shard(collected, stats, info)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'advise[ray]'") from None
    return ray


def collect_on_ray(paths: Sequence[str], fmt: str | None, strict: bool, options: stream.StreamOptions,
                   address: str, progress: stream.Progress | None = None) -> Shard:
    """Collects `paths` as parallel Ray tasks, one per shard, and merges them in path order.

    `address` is LOCAL for a local cluster on this machine, or a running cluster's address (`auto`, host:port,
    ray://host:port). The workers must have advise installed (the same version). Results are merged as
    they arrive in path order, so the driver holds at most the shards that finished ahead of the next one.
    """
    if "-" in paths:
        raise ConfigError("--ray reads files, not stdin: pass the logs as paths or URLs")
    shards = shard_paths(paths, fmt)
    ray = _import_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # offline: no usage report
    started = not ray.is_initialized()
    if started:
        if address == LOCAL:
            ray.init(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
        else:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_task)
        pending = [task.remote(shard, fmt, strict, options) for shard in shards]

        def in_order() -> Iterator[Shard]:
            for index, ref in enumerate(pending):
                result = ray.get(ref)
                pending[index] = None  # the object store may free it
                if isinstance(result, AdvisorError):
                    raise result
                yield result

        return merge(in_order(), options.seed, progress)
    finally:
        if started:
            ray.shutdown()
