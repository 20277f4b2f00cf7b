"""The profile: ingest -> tokenize -> measure -> engine -> emit, assembled into the typed report document.

This module is the only place that wires the stages together (it sits above them, below the CLI).
`advisor.stream` streams the logs in batches (the reader never holds a whole JSONL file), tokenizes each
batch with the per-piece cache, and keeps per request only what the measurements need, in compact state
with fixed budgets: lengths, times, block-hash chains and, for the replays, token ids. The measurements themselves are pure functions in `advisor.measure`; each result
becomes a section of `advisor.report.Report` under the names the measurement gives it.
"""
from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from advisor import __version__, shards, stream
from advisor.errors import ConfigError
from advisor.ingest import IngestStats, expand_paths
from advisor.measure import arrivals, prefix, routing, sampling, stats
from advisor.measure.stats import json_float
from advisor.report import (
    Apc,
    Arrivals,
    Disabled,
    DraftRef,
    DraftReplay,
    Ingest,
    InputFile,
    Lengths,
    Overlap,
    Prefix,
    ProfileOptions,
    Replay,
    Report,
    Routing,
    RowSample,
    Sampling,
    Segment,
    TokenizerSection,
    section,
)

__all__ = ["Profile", "ProfileOptions", "build_profile", "recommend"]

# Without logged latencies, a request holds its KV blocks for this long per output token in the APC replay.
ASSUMED_DECODE_S_PER_TOKEN = 0.03
# The replays shown without --speculative-config: ngram with a small lookup window and suffix with vLLM's
# defaults (k = its max tree depth); the sweep around them is in `replay_sweep`.
HEADLINE_REPLAYS = (
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    {"method": "suffix", "num_speculative_tokens": 24},
)

Progress = stream.Progress
DRAFT_HEADLINE_K = 4  # the draft_model replay shown beside the ngram and suffix headlines (all k are swept)


@dataclass(frozen=True)
class Profile:
    """The report document plus per-request feature arrays (for the engine's segmentation).

    The features stay beside the document, not in it: one float per request and feature would make the JSON
    grow with the log, and they serve only the segmentation the engine runs once, here (a saved report
    carries its segments).
    """

    report: Report
    features: dict[str, np.ndarray] = field(default_factory=dict)


def build_profile(options: ProfileOptions, progress: Progress | None = None,
                  draft_progress: Callable[[int, int], None] | None = None, workers: int = 1,
                  ray_address: str | None = None) -> Profile:
    """Reads, tokenizes and measures the logs; returns the report (and recommendation unless disabled).

    Glob patterns among the paths (local, or fsspec URLs) become the files they match, sorted.
    `workers` processes tokenize and measure, and as many threads run the ngram replay (the same report as
    one: it only changes the speed).
    `ray_address` (advisor.shards: LOCAL or a cluster's address) collects the files as parallel shards on
    Ray instead, merged into the same report. `draft_progress(tokens_done, tokens_total)` follows the draft
    models' forward passes.
    Raises AdvisorError subclasses: InputError (nothing usable), BadRecordError (--strict), TokenizerError.
    """
    if options.speculative_config is not None:
        from advisor.measure.specreplay import normalize_config

        normalize_config(options.speculative_config)  # fail before reading gigabytes of logs
    history = ()
    if options.history is not None:
        from advisor.engine.history import read_history

        history = read_history(options.history)  # a bad history fails before the logs are read
    if ray_address is not None and workers > 1:
        raise ConfigError("--ray runs one process per shard on the cluster: drop --workers")
    options = replace(options, paths=tuple(expand_paths(options.paths)))
    tokenizer_state: dict[str, Any] = {}
    runners = _draft_runners(options, tokenizer_state)  # refuse a missing extra or a wrong draft before reading
    # The input files' digests for the report, computed on a thread while the logs stream (hashlib releases
    # the GIL): after the stream it was the last serial second of a 1 GB log on 16 workers.
    stop_hashing = threading.Event()
    hasher = ThreadPoolExecutor(max_workers=1)
    digests = hasher.submit(_file_digests, options.paths, stop_hashing)
    try:
        if ray_address is not None:
            collection = shards.collect_on_ray(options.paths, options.fmt, options.strict, _stream_options(options),
                                               ray_address, progress)
        else:
            collection = shards.collect_shard(options.paths, options.fmt, options.strict, _stream_options(options),
                                              tokenizer_state, workers, progress)
    except BaseException:
        stop_hashing.set()
        raise
    finally:
        hasher.shutdown(wait=False)
    collected, ingest_stats, tokenizer_info = collection.collected, collection.stats, collection.tokenizer_info
    if tokenizer_info is None and "tokenizer" in tokenizer_state:  # loaded here for a draft (the shards had no text)
        tokenizer_info = tokenizer_state["tokenizer"].info

    features = _features(collected)
    # The engine's segmentation needs only the features: with a second core it runs (with the engine's
    # imports) beside the analyses instead of after them, 0.2-0.3 s of k-means and silhouette off a
    # many-core run's last stretch. On one core the thread only competes (ShareGPT pinned to one core here:
    # 5.8-6.1 s against 5.6-5.8 s).
    segmenting: Future[list[Segment]] | None = None
    if options.recommend and stream.usable_cores() > 1:
        segmenter = ThreadPoolExecutor(max_workers=1)
        segmenting = segmenter.submit(_segments, features)
        segmenter.shutdown(wait=False)  # its one job runs on; an error comes back through result()
    report = replace(_assemble(options, ingest_stats, collected, tokenizer_info, workers, digests),
                     verify_history=history)
    if runners and collected.replay_inputs:
        report = _with_draft_replays(report, runners, collected, options, draft_progress)
    if options.recommend:
        segments = segmenting.result() if segmenting is not None else _segments(features)
        report = recommend(report, features, _population_segments(segments, collected))
    return Profile(report=report, features=features)


def _segments(features: dict[str, np.ndarray]) -> list[Segment]:
    """`advisor.engine.decide.segment_requests(features)`, the engine imported where it runs."""
    from advisor.engine.decide import segment_requests

    return segment_requests(features)


def _population_segments(segments: list[Segment], c: stream.Collected) -> list[Segment]:
    """The segments with their request counts in the whole log's terms: past the row budget the features
    are the row sample's, so a segment's count is scaled by 1/p (an estimate, as RowSample.estimated says;
    its share is the sample's, an estimate of the log's)."""
    if not c.sample.sampled:
        return segments
    return [replace(segment, requests=round(segment.requests / c.row_share)) for segment in segments]


def _stream_options(options: ProfileOptions) -> stream.StreamOptions:
    return stream.StreamOptions(
        tokenizer=options.tokenizer, model=options.model, block_size=options.block_size,
        hash_block_size=options.hash_block_size, seed=options.seed,
    )


def recommend(report: Report, features: dict[str, np.ndarray] | None = None,
              segments: Sequence[Segment] | None = None) -> Report:
    """The report with its `recommendation` section: the engine decides, the emitters render its configs.
    `segments`: `segment_requests(features)` when the caller has it already."""
    from advisor.emit.configs import render_configs
    from advisor.engine.decide import decide

    recommendation = decide(report, features, segments)
    return replace(report, recommendation=replace(recommendation, emitted=render_configs(recommendation)))


def _arrival_order(timestamps: np.ndarray) -> np.ndarray:
    """Indices in arrival order (stable: file order among equal or missing timestamps)."""
    if np.isnan(timestamps).all():
        return np.arange(timestamps.size)
    keys = np.where(np.isnan(timestamps), np.inf, timestamps)
    return np.argsort(keys, kind="stable")


def _in_arrival_order(rows: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
    """Positions into `rows` (request indices, with their `timestamps`) that put them in the whole log's
    arrival order (`_arrival_order` restricted to them: by timestamp, missing ones last, file order among
    equals), for the sampled requests the replays see, without an order of the whole log."""
    return np.lexsort((rows, np.where(np.isnan(timestamps), np.inf, timestamps)))


def _replicas(sample: Any, names: tuple[str, ...], options: ProfileOptions) -> tuple[np.ndarray, routing.ReplicaSplit]:
    """`routing.assign` over the requests a sample (state.RowSample, ChainStore or ReplaySample) kept, from
    the values it carries: round_robin deals them in their arrival order."""
    order = _arrival_order(sample.carried("timestamp")) \
        if options.replicas > 1 and options.routing == "round_robin" else None
    return routing.assign(_read_only(sample.carried("replica_label")), names,
                          _read_only(sample.carried("affinity")), order, options.replicas, options.routing)


def _row_sample(c: stream.Collected) -> RowSample | None:
    """How the per-request figures were sampled (None: every request's numbers were kept)."""
    if not c.sample.sampled:
        return None
    return RowSample(
        requests=int(c.sample.rows.size), population_requests=c.rows,
        rule=f"per-request numbers past {c.sample.cut:,} requests: a seeded uniform sample of requests"
             f" (p = {c.row_share:.3g} of them)",
        estimated=(
            "length percentiles", "arrival bins and peaks (scaled by 1/p)",
            "inter-arrival gaps (scaled by p) and burstiness (a thinned process looks less bursty)",
            "observed concurrency (scaled by 1/p)", "per-request overlap medians", "tokenizer usage check",
            "routing split (scaled)", "segmentation (its counts scaled by 1/p)",
        ),
    )


def _assemble(options: ProfileOptions, ingest_stats: IngestStats, c: stream.Collected, tokenizer_info: Any | None,
              workers: int, digests: Future[dict[str, tuple[int, str]]]) -> Report:
    timestamps = _read_only(c.timestamps)
    input_lens = _read_only(c.input_lens)
    output_lens = _read_only(c.output_lens)
    latencies = _read_only(c.latencies)
    names = tuple(c.replica_names)
    replica_of, split = _replicas(c.sample, names, options)
    if c.sample.sampled:
        # Past the row budget each sample routes the requests it kept (round_robin: among themselves), and
        # the row sample's split is brought to the log's count.
        chain_replicas, replay_replicas = _replicas(c.store, names, options)[0], _replicas(c.replay, names, options)[0]
        split = replace(split, requests=tuple(int(round(n * c.rows / c.sample.rows.size)) for n in split.requests))
    else:  # the sample's rows are the log's: route the whole log, as vLLM's router saw it
        chain_replicas, replay_replicas = replica_of[c.store.rows.values], replica_of[c.replay_rows]
    del replica_of
    chains_disabled: list[Disabled] = []
    chains = _prefix_chains(c, chain_replicas, options, chains_disabled)
    # The analyses of the bounded samples start first, on two threads (their compiled kernels release the
    # GIL): the proposer replays on one, the prefix analysis then the APC replay on the other; the whole-log
    # summaries follow here meanwhile. After a many-core stream these analyses are what the run waits for.
    # The prefix analysis and the APC replay stay one after the other: each holds 100-200 MB on a big log,
    # and side by side with the replays they could meet at their peaks on a many-core machine.
    analyses = ThreadPoolExecutor(max_workers=2)
    try:
        replays_job = analyses.submit(_replays, c, options, workers, replay_replicas)
        prefix_job = analyses.submit(_prefix_and_apc, c, chains, options, workers) if chains else None

        disabled: list[Disabled] = []
        known_in = input_lens[~np.isnan(input_lens)]
        known_out = output_lens[~np.isnan(output_lens)]
        both = ~np.isnan(input_lens) & ~np.isnan(output_lens)
        if known_in.size == 0:
            disabled.append(Disabled("length distributions", "no prompt text or token counts in the log"))
        # Past the row budget: percentiles of the sample, count, mean, extremes, histogram and share exact.
        exact = c.lengths if c.sample.sampled else None

        def distribution(values: np.ndarray, name: str) -> dict[str, Any]:
            sampled = stats.distribution(values)
            return (sampled if exact is None else exact[name].over(sampled)).to_dict()

        if exact is None:
            decode_share = stats.decode_share(input_lens[both], output_lens[both]) if both.any() else None
        else:
            tokens = c.decode_sums.sum()
            decode_share = float(c.decode_sums[1] / tokens) if tokens > 0 else None
        lengths = section(Lengths, {
            "input": distribution(known_in, "input"),
            "output": distribution(known_out, "output") if known_out.size else None,
            "total": distribution(input_lens[both] + output_lens[both], "total") if both.any() else None,
            "decode_share": decode_share,
        })
        if known_out.size == 0:
            disabled.append(Disabled("output lengths", "no completion text or output token counts"))
        arrival_section = _arrivals(timestamps, latencies, disabled, c if c.sample.sampled else None)
        disabled += chains_disabled
        overlap_section = None
        summary = c.overlap_summary()
        if summary is not None:
            overlap_section = section(Overlap, summary.to_dict())
        else:
            disabled.append(Disabled("n-gram overlap and speculative replay", "no completion text in the log"))
        sampling_section = section(Sampling, sampling.summary_from_counts(c.sampling.counts).to_dict())
        replays, sweep = replays_job.result()
        prefix_section, apc_section = prefix_job.result() if prefix_job else (None, None)
    finally:
        analyses.shutdown(cancel_futures=True)
    return Report(
        advise_version=__version__,
        inputs=tuple(_input_entry(path, ingest_stats, digests.result()) for path in options.paths),
        options=options,
        tokenizer=_tokenizer_entry(tokenizer_info, input_lens, _read_only(c.logged_prompt_tokens)),
        ingest=Ingest(
            records_read=ingest_stats.records_read,
            records_used=ingest_stats.records_used,
            records_skipped=ingest_stats.records_skipped,
            requests=ingest_stats.requests,
            skipped=ingest_stats.skipped,
            skipped_by_reason=dict(ingest_stats.skipped_by_reason),
            problems=tuple(ingest_stats.problems),
            conversations=ingest_stats.conversations,
            turns=ingest_stats.turns,
            truncated=ingest_stats.truncated,
            unfinished=ingest_stats.unfinished,
            notes=tuple(ingest_stats.notes),
        ),
        lengths=lengths,
        arrivals=arrival_section,
        prefix=prefix_section,
        apc=apc_section,
        overlap=overlap_section,
        sampling=sampling_section,
        replay=replays,
        replay_sweep=sweep,
        disabled_analyses=tuple(disabled),
        routing=section(Routing, split.to_dict(), "routing"),
        row_sample=_row_sample(c),
    )


def _file_digests(paths: tuple[str, ...], stop: threading.Event) -> dict[str, tuple[int, str]]:
    """(size, SHA-256) of each local file among `paths` (stdin and URLs have none); stops early, with what
    it has, once `stop` is set (the run failed)."""
    digests: dict[str, tuple[int, str]] = {}
    for path in paths:
        if path == "-" or not os.path.isfile(path):
            continue
        digest = hashlib.sha256()
        size = 0
        with open(path, "rb") as handle:
            while not stop.is_set() and (block := handle.read(1 << 20)):
                digest.update(block)
                size += len(block)
        digests[path] = size, digest.hexdigest()
    return digests


def _input_entry(path: str, ingest_stats: IngestStats, digests: dict[str, tuple[int, str]]) -> InputFile:
    if path not in digests:
        return InputFile(path, ingest_stats.formats.get(path))
    size, digest = digests[path]
    return InputFile(path, ingest_stats.formats.get(path), size, digest)


def _tokenizer_entry(info: Any | None, input_lens: np.ndarray, logged: np.ndarray) -> TokenizerSection | None:
    """Which tokenizer was used (its TokenizerInfo; None: none was loaded), with a warning when it is not the
    target's, and a check against logged usage."""
    if info is None:
        return None
    entry = {**asdict(info), "usage_check": None}
    pairs = ~np.isnan(input_lens) & ~np.isnan(logged) & (logged > 0)
    if pairs.any():
        ratio = input_lens[pairs] / logged[pairs]
        entry["usage_check"] = {
            "requests": int(pairs.sum()),
            "median_ratio": float(np.median(ratio)),
            "exact_share": float(np.mean(input_lens[pairs] == logged[pairs])),
        }
        if abs(np.median(ratio) - 1) > 0.02:
            note = (
                f"prompt token counts differ from the logged usage (median ratio {np.median(ratio):.3f}):"
                " pass the served model's tokenizer with --tokenizer or --model"
            )
            entry["warning"] = f"{entry['warning']}; {note}" if entry["warning"] else note
    return section(TokenizerSection, entry, "tokenizer")


def _arrivals(timestamps: np.ndarray, latencies: np.ndarray, disabled: list[Disabled],
              thinned: stream.Collected | None = None) -> Arrivals | None:
    """The arrival profile of the requests' timestamps; `thinned`: the collection whose row sample they are
    (see `_unthinned`)."""
    known = ~np.isnan(timestamps)
    if known.sum() < 2:
        disabled.append(Disabled("arrival rate and burstiness", "fewer than two requests with a timestamp"))
        return None
    data = arrivals.arrival_profile(timestamps[known]).to_dict()
    data["peak_rate_60s_rps"] = data["peak_bin_rate_rps"] if data["bin_s"] == 60 else None
    if data["peak_rate_60s_rps"] is None and data["duration_s"] >= 60:
        data["peak_rate_60s_rps"] = _peak_window_rate(np.sort(timestamps[known]), 60.0)
    data["concurrency"] = None
    timed = known & ~np.isnan(latencies)
    if timed.any():
        data["concurrency"] = arrivals.concurrency(timestamps[timed], latencies[timed]).to_dict()
    else:
        disabled.append(Disabled("observed concurrency", "no latencies in the log"))
    if thinned is not None:
        data = _unthinned(data, timestamps[known], thinned)
    return section(Arrivals, data, "arrivals")


def _unthinned(data: dict[str, Any], sampled: np.ndarray, c: stream.Collected) -> dict[str, Any]:
    """The arrival profile of a uniform sample of requests (each kept with probability p), brought back to the
    whole log's: the count, span and mean rate exactly (kept for the whole log), the bins over the whole span
    and the peaks scaled by 1/p (estimates), the inter-arrival gaps by p (their mean is then the whole log's;
    the CV is scale-free, but a thinned process is less bursty than the log: an estimate towards 1), the
    observed concurrency by 1/p (its mean exactly so in expectation, by Little's law)."""
    share = sampled.size / c.timed
    duration = c.last_time - c.first_time
    bin_s = arrivals.rate_bin_seconds(duration)
    counts = np.bincount(((sampled - c.first_time) // bin_s).astype(np.int64)) / share
    scaled = {"count": c.timed, "duration_s": json_float(duration), "bin_s": bin_s,
              "mean_rate_rps": json_float((c.timed - 1) / duration) if duration > 0 else None,
              "counts_per_bin": [int(round(count)) for count in counts],
              "peak_bin_rate_rps": json_float(float(counts.max()) / bin_s)}
    for name in ("peak_rate_1s_rps", "peak_rate_10s_rps", "peak_rate_60s_rps"):
        if data.get(name) is not None:
            scaled[name] = json_float(data[name] / share)
    if bin_s == 60:
        scaled["peak_rate_60s_rps"] = scaled["peak_bin_rate_rps"]
    gaps = data["interarrival_s"]
    scaled["interarrival_s"] = {
        **gaps, **{key: None if gaps[key] is None else json_float(gaps[key] * share)
                   for key in ("mean", "min", "max", "p50", "p90", "p99", "p99_9")},
        "count": c.timed - 1,
        "histogram": {**gaps["histogram"], "edges": [json_float(edge * share) for edge in gaps["histogram"]["edges"]]}}
    concurrency = data["concurrency"]
    if concurrency is not None:
        scaled["concurrency"] = {**concurrency, "requests": int(round(concurrency["requests"] / share)),
                                 **{key: None if concurrency[key] is None else
                                    (json_float(concurrency[key] / share) if key == "mean"
                                     else int(round(concurrency[key] / share)))
                                    for key in ("mean", "p50", "p99", "max")}}
    return {**data, **scaled}


def _peak_window_rate(sorted_times: np.ndarray, window_s: float) -> float:
    """Most arrivals in any window of `window_s` seconds, per second."""
    ends = np.searchsorted(sorted_times, sorted_times + window_s, side="left")
    return float((ends - np.arange(sorted_times.size)).max() / window_s)


def _prefix_chains(c: stream.Collected, replicas: np.ndarray, options: ProfileOptions,
                   disabled: list[Disabled]) -> tuple[list[prefix.PrefixBlocks], int, dict[str, np.ndarray]] | None:
    """The sampled requests' block chains in arrival order, the block size, and what the APC replay reads
    of those requests, in the same order (their timestamps, output lengths, latencies and `replicas`, the
    store's routing); None: no chain."""
    rows, chains = c.store.kept_chains()
    if not chains:
        disabled.append(Disabled("prefix sharing and APC", "no prompt text and no block hashes"))
        return None
    if len(c.chain_sizes) > 1:
        raise ConfigError(
            f"the logs mix token-free traces (block {options.hash_block_size}) and text requests"
            f" (block {options.block_size}): profile them separately"
        )
    timestamps = c.store.carried("timestamp")
    arrival = _in_arrival_order(rows, timestamps)
    values = {"timestamp": timestamps[arrival], "output_len": c.store.carried("output_len")[arrival],
              "latency": c.store.carried("latency")[arrival], "replica": replicas[arrival]}
    return [chains[i] for i in arrival.tolist()], next(iter(c.chain_sizes)), values


def _prefix_and_apc(c: stream.Collected, chains: tuple[list[prefix.PrefixBlocks], int, dict[str, np.ndarray]],
                    options: ProfileOptions, threads: int) -> tuple[Prefix, Apc]:
    """`_prefix`, then `_apc` (one after the other: see `_assemble`)."""
    chain_list, block_size, values = chains
    return _prefix(c, chain_list, block_size), _apc(c, chain_list, block_size, options, values, threads)


def _prefix(c: stream.Collected, chains: list[prefix.PrefixBlocks], block_size: int) -> Prefix:
    data = prefix.prefix_sharing(chains, block_size, cache_outputs=True, top=10).to_dict()
    data["sample"] = _chain_sample(c)
    return section(Prefix, data, "prefix")


def _chain_sample(c: stream.Collected) -> dict[str, Any] | None:
    """How the prefix and APC analyses were sampled (None: every request with a chain)."""
    if not c.store.sampled:
        return None
    return {
        "requests": int(c.store.rows.size),
        "population_requests": c.store.offered,
        "conversation_share": c.store.kept_share,
        "rule": f"block chains past {stream.PREFIX_BLOCK_BUDGET:,} blocks: a seeded sample of whole conversations",
    }


def _apc(c: stream.Collected, chains: list[prefix.PrefixBlocks], block_size: int, options: ProfileOptions,
         values: dict[str, np.ndarray], threads: int) -> Apc:
    """Finite-cache APC replay at the deployment's KV capacity, with the hit-rate-versus-capacity curve, of
    the sampled requests' `chains` (in arrival order, of `block_size`) with their `values` (timestamp,
    output_len, latency, replica: `_prefix_chains`); one cache per replica (advisor.measure.routing), each
    of that capacity; the curve's replays on `threads` threads (--workers: the same results).

    Capacity = KV budget / (KV bytes per token per rank x block size), the budget being
    --kv-cache-memory-bytes or GPU memory x utilization - weights per rank (activation peak and CUDA graphs
    are not known offline: the capacity is an upper bound, and the report says so). Requests hold their
    blocks while they run: from the logged latency, else an assumed decode time per output token.
    """
    from advisor.hardware import (
        DEFAULT_GPU,
        DEFAULT_MODEL,
        kv_bytes_per_token_per_rank,
        resolve_gpu,
        resolve_model,
        weight_bytes_per_rank,
    )
    from advisor.measure import apc

    assumptions = []
    model = resolve_model(options.model or DEFAULT_MODEL)
    if not options.model:
        assumptions.append(f"model not given: KV layout of {DEFAULT_MODEL}")
    per_token = kv_bytes_per_token_per_rank(model, options.tp)
    if options.kv_cache_memory_bytes is not None:
        budget = apc.kv_budget_bytes(kv_cache_memory_bytes=options.kv_cache_memory_bytes)
        source = "--kv-cache-memory-bytes"
    else:
        gpu = resolve_gpu(options.gpu or DEFAULT_GPU)
        if not options.gpu:
            assumptions.append(f"GPU not given: {gpu.name}")
        budget = apc.kv_budget_bytes(
            gpu_memory_bytes=gpu.memory_gb * 1e9, gpu_memory_utilization=options.gpu_memory_utilization,
            weight_bytes_per_gpu=weight_bytes_per_rank(model, options.tp),
        )
        source = f"{gpu.name} {gpu.memory_gb:g} GB x {options.gpu_memory_utilization} - weights (upper bound)"
    capacity = apc.capacity_blocks(budget, per_token, block_size)
    if c.store.sampled:
        # A sample of conversations gets the same share of the cache that it would hold in the whole traffic.
        capacity = max(1, round(capacity * c.store.kept_share))
        assumptions.append(
            f"prefix analyses on {c.store.kept_share:.1%} of conversations (block budget): the cache is scaled alike"
        )
    outputs = np.nan_to_num(values["output_len"]).astype(np.int64)
    arrivals_s = values["timestamp"]
    durations = None
    if np.isnan(arrivals_s).any():
        arrivals_s = None
        assumptions.append("no timestamps: requests replayed one after another")
    else:
        durations = values["latency"]
        missing = np.isnan(durations)
        if missing.any():
            durations = np.where(missing, outputs * ASSUMED_DECODE_S_PER_TOKEN, durations)
            assumptions.append(
                f"{int(missing.sum()):,} requests without a logged latency hold their blocks for"
                f" {ASSUMED_DECODE_S_PER_TOKEN * 1000:.0f} ms per output token"
            )
    data = apc.apc_report(chains, block_size, capacity, outputs, arrivals_s, durations,
                          replicas=values["replica"], threads=threads).to_dict()
    data.update(capacity_source=source, kv_bytes_per_token=per_token, assumptions=assumptions)
    return section(Apc, data, "apc")


def _replays(c: stream.Collected, options: ProfileOptions, threads: int,
             replica_of: np.ndarray) -> tuple[tuple[Replay, ...], tuple[Replay, ...]]:
    """The headline replays and the sweep; the ngram pass on `threads` threads (--workers: the same counts),
    the suffix pass with one global tree per replica (`replica_of[k]` for the sample's k-th request)."""
    if not c.replay_inputs or not options.replay:
        return (), ()
    from advisor.measure import specreplay

    rows = np.asarray(c.replay_rows, dtype=np.int64)
    by_arrival = _in_arrival_order(rows, c.replay.carried("timestamp"))
    inputs = [c.replay_inputs[i] for i in by_arrival.tolist()]
    replicas = replica_of[by_arrival]
    budget_sampled = len(c.replay_inputs) != c.replay_seen
    headline = [specreplay.normalize_config(config) for config in HEADLINE_REPLAYS]
    if options.speculative_config is not None:
        headline = [specreplay.normalize_config(options.speculative_config)]
        if headline[0]["method"] == specreplay.DRAFT_METHOD:
            return (), ()  # replayed with its draft (_with_draft_replays)
    if options.sweep and options.speculative_config is None:
        suffix_ks = sorted({*specreplay.SWEEP_KS, *(c["num_speculative_tokens"] for c in headline if c["method"] == "suffix")})
        swept = specreplay.sweep(
            inputs, max_requests=options.max_replay_requests, seed=options.seed, suffix_ks=suffix_ks, threads=threads,
            replicas=replicas,
        ).replays
        replays = [next(r for r in swept if r.config == config) for config in headline]
        sweep = [r for r in swept if r.method != "suffix" or r.config["num_speculative_tokens"] in specreplay.SWEEP_KS]
    else:
        replays = [
            specreplay.replay_config(config, inputs, max_requests=options.max_replay_requests, seed=options.seed,
                                     threads=threads, replicas=replicas)
            for config in headline
        ]
        sweep = []

    def entry(result: specreplay.SpecReplay) -> Replay:
        return section(Replay, {**result.to_dict(), "token_budget_sampled": budget_sampled}, "replay")

    return tuple(entry(r) for r in replays), tuple(entry(r) for r in sweep)


def _draft_requests(options: ProfileOptions) -> list[tuple[str, tuple[int, ...], int]]:
    """(draft, k values to replay, headline k) per draft: --draft drafts sweep k = 1..8 (one forward pass
    serves every k); a draft_model --speculative-config replays its own k only."""
    from advisor.measure.specreplay import DRAFT_METHOD, SWEEP_KS, normalize_config

    config = normalize_config(options.speculative_config) if options.speculative_config is not None else None
    if config is not None and config["method"] == DRAFT_METHOD:
        k = config["num_speculative_tokens"]
        return [(config["model"], (k,), k)]
    if not options.replay:
        return []
    ks = tuple(sorted({*SWEEP_KS, DRAFT_HEADLINE_K})) if options.sweep else (DRAFT_HEADLINE_K,)
    return [(name, ks, DRAFT_HEADLINE_K) for name in options.drafts]


def _draft_runners(options: ProfileOptions, tokenizer_state: dict[str, Any]) -> list[tuple]:
    """(loaded draft, ks, headline k, compatibility checks passed) per draft; raises ConfigError naming the
    `advise[draft]` extra when torch is missing, or the reason a draft cannot serve the target."""
    drafts = _draft_requests(options)
    if not drafts:
        return []
    from advisor.hardware import find_model
    from advisor.measure.draft import DraftRunner, check_compatible, require_torch

    require_torch()
    target = find_model(options.model)
    backend = getattr(stream.load_request_tokenizer(_stream_options(options), tokenizer_state).tokenizer, "backend", None)
    target_vocab = backend.get_vocab(with_added_tokens=True) if backend is not None else None
    runners = []
    for name, ks, headline in drafts:
        runner = DraftRunner(name)
        checks = check_compatible(runner.info, target.vocab_size if target else None, target_vocab)
        runner.load()
        runners.append((runner, ks, headline, checks))
    return runners


def _with_draft_replays(report: Report, runners: list, c: stream.Collected, options: ProfileOptions,
                        progress: Callable[[int, int], None] | None) -> Report:
    """Measured draft_model acceptance beside the lookup replays: the headline k in `replay`, every k in
    `replay_sweep` (each entry carries the draft's size for the engine's cost model), and the measurement
    itself (sample, throughput, compatibility) in `draft_replay`."""
    from advisor.measure.draft import measure_draft
    from advisor.measure.specreplay import draft_replays

    greedy = report.sampling.greedy_share == 1.0 and not report.sampling.temperature_missing_share
    replays, sweep, sections = list(report.replay), list(report.replay_sweep), []
    for runner, ks, headline, checks in runners:
        measured = measure_draft(runner, c.replay_inputs, ks, checks, options.max_draft_requests, options.seed,
                                 progress=progress)
        draft = DraftRef(runner.info.name, runner.info.params)
        for result in draft_replays(measured, ks, options.seed, greedy):
            entry = replace(section(Replay, {**result.to_dict(), "token_budget_sampled":
                                             len(c.replay_inputs) < c.replay_seen}, "replay"), draft=draft)
            if result.config["num_speculative_tokens"] == headline:
                replays.append(entry)
            if len(ks) > 1:
                sweep.append(entry)
        speed = measured.tokens_per_s
        sections.append(DraftReplay(
            **runner.info.to_dict(),
            dtype=measured.dtype,
            compatibility=measured.compatibility,
            requests_replayed=int(len(measured.chosen)),
            population_requests=measured.fitting_requests,
            skipped_too_long=measured.skipped_too_long,
            tokens_forwarded=measured.tokens_forwarded,
            seconds=measured.seconds,
            tokens_per_s=speed,
            full_run_cpu_s=measured.population_tokens / speed if speed else None,
            greedy=greedy,
            note=None if greedy else (
                "the log does not show greedy decoding for every request: the draft's greedy acceptance is an "
                "upper-bound estimate for sampled traffic"),
        ))
    return replace(report, replay=tuple(replays), replay_sweep=tuple(sweep), draft_replay=tuple(sections))


def _features(c: stream.Collected) -> dict[str, np.ndarray]:
    """Per-request features for the engine's segmentation (NaN where unknown)."""
    return {
        "input_len": _read_only(c.input_lens),
        "output_len": _read_only(c.output_lens),
        "prompt_overlap_4": _read_only(c.overlap4),
        "timestamp": _read_only(c.timestamps),
    }


def _read_only(column: np.ndarray) -> np.ndarray:
    """A read-only view of a collected column, for the analyses after the stream: the columns are
    what grows with the log (a few hundred bytes a request with the analyses' own arrays), so they are
    shared, not copied (4-8 bytes a request for each copy), and nothing may write into them."""
    view = column.view()
    view.flags.writeable = False
    return view
