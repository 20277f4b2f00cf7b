"""The report: one typed, versioned document that carries every result from the profile to the outputs.

Each section is a frozen dataclass whose fields have the names the measurement results write
(`advisor.measure.*` `to_dict()`), one name per figure: a figure is never written twice under two names, and
a renamed figure is a type error in every reader instead of a silent `None`. The profile builds the
document (`advisor.profile`), the engine reads it and produces the `recommendation` section
(`advisor.engine.decide`), and every output renders it alone: the terminal view, the checklist and the
emitted configs (`advisor.emit`), and the JSON (`to_dict`). `Report.from_dict` reads a saved report back,
so `advise show report.json` re-renders it without the logs.

This module sits at the bottom of the package with `errors`, `record` and `vllm_vocab`: it imports no stage.
Bump SCHEMA_VERSION whenever a field is added, removed or renamed.
"""
from __future__ import annotations

import dataclasses
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any

import orjson

from advisor.errors import InputError
from advisor.vllm_vocab import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_ROUTING

# 5: verify_history section (issue 9); 6: apc.blocks_for_ceiling is the smallest cache that evicts nothing;
# 7: routing section and options.replicas / options.routing (per-replica APC and suffix replays)
SCHEMA_VERSION = 8
# The schema of an `advise verify` record (advisor.verify.history writes it; advisor.engine.history reads it).
VERIFY_RECORD_SCHEMA = "advise.verify/1"


class ReportError(InputError):
    """A saved report that this version cannot read (another schema version, or a malformed document)."""


# ---------------------------------------------------------------------------------------------------------
# header: inputs, options, tokenizer, ingest
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputFile:
    path: str
    format: str | None
    bytes: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class ProfileOptions:
    """Everything that changes what the profile computes, including the deployment facts the engine needs
    (model, GPU, tp, --max-num-seqs, business load); recorded in the report as `options`."""

    paths: tuple[str, ...]
    fmt: str | None = None
    strict: bool = False
    tokenizer: str | None = None
    model: str | None = None
    hash_block_size: int = 512  # tokens per entry of a trace's hash_ids (Mooncake)
    block_size: int = 16  # vLLM's KV block size: 16 on GPU, 128 on vLLM's CPU backend
    speculative_config: dict | None = None  # replay exactly this config instead of the sweep
    drafts: tuple[str, ...] = ()  # draft models to replay as draft_model (--draft; torch, advise[draft])
    max_draft_requests: int | None = 64  # the draft's teacher-forced passes run on a seeded sample
    replay: bool = True  # ngram/suffix replays (and the APC simulation)
    sweep: bool = True
    max_replay_requests: int | None = 20_000
    gpu: str | None = None
    tp: int = 1
    max_num_seqs: int | None = None  # the deployment's --max-num-seqs (engine default: assumed and stated)
    request_rate: float | None = None  # business load in req/s, for logs without timestamps
    history: str | None = None  # an `advise verify` history file (JSON Lines) whose measurements the engine uses
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    replicas: int = 1  # vLLM servers the traffic is spread over when the log names none (--replicas)
    routing: str = DEFAULT_ROUTING  # how (--routing): one of ROUTING_POLICIES
    recommend: bool = True
    seed: int = 0


@dataclass(frozen=True)
class UsageCheck:
    """Our prompt token counts against the usage the log recorded."""

    requests: int
    median_ratio: float
    exact_share: float


@dataclass(frozen=True)
class TokenizerSection:
    name: str
    source: str
    kind: str
    vocab_size: int
    is_default: bool
    chat_template: bool
    model_match: bool | None
    warning: str | None
    usage_check: UsageCheck | None = None


@dataclass(frozen=True)
class Ingest:
    records_read: int
    requests: int
    skipped: int
    skipped_by_reason: dict[str, int]
    problems: tuple[str, ...]
    records_used: int = 0  # records that gave a request; records_read = records_used + records_skipped
    records_skipped: int = 0  # records that gave none, each reported in problems with its file:line
    conversations: int = 0  # chat formats: conversations read and their turns (every message)
    turns: int = 0
    truncated: int = 0  # requests whose logged prompt or output was cut (vLLM --max-log-len)
    unfinished: int = 0  # requests logged without any output (server logs, batch files)
    notes: tuple[str, ...] = ()  # what the log could not record, and how to record it


@dataclass(frozen=True)
class Disabled:
    """An analysis the logs could not feed, and why."""

    analysis: str
    reason: str


# ---------------------------------------------------------------------------------------------------------
# measurements (field names as advisor.measure's to_dict() writes them)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    edges: tuple[float | None, ...]
    counts: tuple[int, ...]


@dataclass(frozen=True)
class Distribution:
    """advisor.measure.stats.Distribution."""

    count: int
    mean: float | None
    min: float | None
    max: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    p99_9: float | None
    histogram: Histogram


@dataclass(frozen=True)
class Lengths:
    """Token lengths per request: prompt (input), completion (output) and both (total)."""

    input: Distribution
    output: Distribution | None
    total: Distribution | None
    decode_share: float | None


@dataclass(frozen=True)
class Concurrency:
    """advisor.measure.arrivals.Concurrency: requests in flight from logged latencies."""

    requests: int
    span_s: float | None
    mean: float | None
    p50: int | None
    p99: int | None
    max: int | None


@dataclass(frozen=True)
class Arrivals:
    """advisor.measure.arrivals.ArrivalProfile, the busiest minute and the logged concurrency.

    `peak_rate_60s_rps`: the busiest 60 s (the rate bins when they are 60 s wide, else a sliding 60 s
    window; None for a log shorter than a minute).
    """

    count: int
    duration_s: float | None
    mean_rate_rps: float | None
    bin_s: float | None
    counts_per_bin: tuple[int, ...]
    peak_bin_rate_rps: float | None
    peak_rate_1s_rps: float | None
    peak_rate_10s_rps: float | None
    interarrival_s: Distribution
    zero_gap_share: float | None
    smallest_positive_gap_s: float | None
    interarrival_cv: float | None
    gamma_burstiness: float | None
    peak_rate_60s_rps: float | None
    concurrency: Concurrency | None


@dataclass(frozen=True)
class SharedPrefix:
    hash: str
    length_tokens: int
    requests: int
    token_volume: int


@dataclass(frozen=True)
class RowSample:
    """Which requests the per-request figures came from when the log passed its row budget
    (advisor.stream.ROW_BUDGET): a seeded uniform sample of requests. `estimated` names the figures taken
    from it; counts, rates, spans and the overlap's shares stay exact."""

    requests: int
    population_requests: int
    rule: str
    estimated: tuple[str, ...]


@dataclass(frozen=True)
class PrefixSample:
    """Which requests the prefix and APC analyses saw when the log's block chains passed their memory budget
    (advisor.stream.PREFIX_BLOCK_BUDGET): a seeded sample of whole conversations."""

    requests: int
    population_requests: int
    conversation_share: float
    rule: str


@dataclass(frozen=True)
class Prefix:
    """advisor.measure.prefix.PrefixSharing: the infinite-cache prefix-hit ceiling (`sample`: None when every
    request was measured)."""

    block_size: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    ceiling: float | None
    requests_with_hit_share: float | None
    outputs_cached: bool
    top_prefixes: tuple[SharedPrefix, ...]
    sample: PrefixSample | None = None


@dataclass(frozen=True)
class ApcResult:
    """advisor.measure.apc.ApcResult: one APC replay at one capacity (None: infinite)."""

    block_size: int
    capacity_blocks: int | None
    requests: int
    prompt_tokens: int
    hit_tokens: int
    hit_rate: float | None
    queued_requests: int
    unserved_requests: int


@dataclass(frozen=True)
class CurvePoint:
    capacity_blocks: int
    hit_rate: float | None


@dataclass(frozen=True)
class Apc:
    """advisor.measure.apc.ApcReport at the deployment's KV capacity, with where that capacity came from."""

    at_capacity: ApcResult | None
    ceiling: ApcResult
    blocks_for_ceiling: int
    curve: tuple[CurvePoint, ...]
    prefill_tokens_saved: int
    capacity_source: str
    kv_bytes_per_token: float
    assumptions: tuple[str, ...]

    @property
    def hit_rate(self) -> float | None:
        """Hit rate at the deployment's capacity (None without one)."""
        return None if self.at_capacity is None else self.at_capacity.hit_rate


@dataclass(frozen=True)
class Routing:
    """advisor.measure.routing.ReplicaSplit: the vLLM replicas the requests were spread over. The APC and
    suffix replays ran per replica; the engine sizes one replica's load by `busiest_share`."""

    replicas: int
    policy: str
    source: str
    names: tuple[str, ...]
    requests: tuple[int, ...]
    busiest_share: float


@dataclass(frozen=True)
class Overlap:
    """advisor.measure.overlap.OverlapSummary: output n-grams found in the prompt / earlier turns (n = 1..)."""

    n: tuple[int, ...]
    requests: int
    output_ngrams: tuple[int, ...]
    prompt_share: tuple[float | None, ...]
    prompt_share_request_p50: tuple[float | None, ...]
    context_requests: int
    context_share: tuple[float | None, ...] | None
    context_share_request_p50: tuple[float | None, ...]

    def in_prompt(self, n: int) -> float | None:
        """Share of output n-grams that occur in their prompt (None when n was not measured)."""
        return self.prompt_share[self.n.index(n)] if n in self.n else None


@dataclass(frozen=True)
class Sampling:
    """advisor.measure.sampling.SamplingSummary."""

    requests: int
    temperature_missing_share: float | None
    greedy_share: float | None
    temperature_p50: float | None
    temperature_max: float | None
    top_p_present_share: float | None


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None


@dataclass(frozen=True)
class DraftRef:
    """The draft behind a measured draft_model replay, as the engine's cost model needs it."""

    model: str
    params: int


@dataclass(frozen=True)
class Replay:
    """advisor.measure.specreplay.SpecReplay: what vLLM's speculative counters would report.

    `token_budget_sampled`: the profile kept token ids for only part of the requests (its memory budget).
    `draft`: set for a draft_model replay (advisor.measure.draft).
    """

    method: str
    config: dict
    num_requests: int
    population_requests: int
    num_output_tokens: int
    decode_steps: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_past_end: float | None
    num_accepted_tokens_per_pos: tuple[int, ...]
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    draft_step_share: float | None
    tokens_per_step: float | None
    sampled: bool
    sampling: str
    confidence_95: dict[str, Interval]
    token_budget_sampled: bool
    draft: DraftRef | None = None


@dataclass(frozen=True)
class DraftReplay:
    """One draft's teacher-forced replay (advisor.measure.draft): the draft, the sample it ran on, its
    measured speed on this CPU and the CPU time a full replay would take, the compatibility checks passed.
    Its acceptance per k is in `replay` / `replay_sweep` (entries with `draft`)."""

    model: str
    path: str
    params: int
    vocab_size: int
    max_model_len: int
    num_layers: int
    dtype: str
    compatibility: tuple[str, ...]
    requests_replayed: int
    population_requests: int
    skipped_too_long: int
    tokens_forwarded: int
    seconds: float | None
    tokens_per_s: float | None
    full_run_cpu_s: float | None
    greedy: bool
    note: str | None


# ---------------------------------------------------------------------------------------------------------
# the recommendation (produced by advisor.engine, rendered by advisor.emit)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyArm:
    """One arm of a verify record: its server setting and what its runs measured (means over trials)."""

    name: str  # "baseline" or "candidate"
    speculative_config: dict | None
    synthetic_acceptance: bool  # drafts accepted at configured rates: the arm measured cost, not acceptance
    runs: int
    median_tpot_ms: float  # mean over the arm's runs of `vllm bench serve`'s median TPOT
    tokens_per_step: float | None = None  # emitted tokens per sequence per step (server counters); None: no drafts
    verify_tokens_per_seq: float | None = None  # 1 + draft tokens per sequence per step
    mean_acceptance_length: float | None = None
    per_position_acceptance: tuple[float, ...] = ()


@dataclass(frozen=True)
class VerifyRun:
    """One `advise verify` record of a history file (`--history`), reduced to what the engine matches and uses.

    `source` names the record (file:line and its creation time) wherever the engine cites it.
    """

    source: str
    created: str | None
    mode: str  # "speculative" or "apc"
    model: str
    served_model_name: str | None
    gpus: tuple[str, ...]  # the serving host's GPU names; empty: a CPU build
    tp: int
    logs: tuple[str, ...]  # the logs the verify dataset was built from
    requests: int
    input_len: float  # mean prompt tokens per request of the verify dataset
    output_len: float
    max_concurrency: int | None
    request_rate: float | None  # None: all at once (inf)
    apc_hit_rate: float | None
    arms: tuple[VerifyArm, ...]


@dataclass(frozen=True)
class LoadPoint:
    """A steady state at one load as the cost model predicts it (rounded for the report)."""

    batch: float
    step_ms: float
    tpot_ms: float
    ttft_ms: float
    output_tps: float
    prefill_tokens_per_step: float
    saturated: bool


@dataclass(frozen=True)
class Candidate:
    """One configuration the engine priced, at typical and peak load."""

    name: str
    method: str | None
    speculative_config: dict | None
    enable_prefix_caching: bool
    source: str
    from_replay: bool
    tokens_per_step: float
    typical: LoadPoint
    peak: LoadPoint
    speedup_typical: float
    speedup_peak: float
    notes: tuple[str, ...]


@dataclass(frozen=True)
class BaselineVsCandidate:
    baseline: float
    candidate: float


@dataclass(frozen=True)
class TypicalPeak:
    typical: float
    peak: float


@dataclass(frozen=True)
class TtftPrediction:
    apc_on: float
    apc_off: float
    apc_saving: float


@dataclass(frozen=True)
class RatePrediction:
    typical: float
    peak: float
    source: str


@dataclass(frozen=True)
class Predicted:
    """The recommended configuration against no speculation, at the load the arrivals produce."""

    tpot_ms: BaselineVsCandidate
    tpot_ms_peak: BaselineVsCandidate
    output_tps: BaselineVsCandidate
    speedup: TypicalPeak
    ttft_ms: TtftPrediction
    batch: TypicalPeak
    request_rate: RatePrediction
    calibration: str


@dataclass(frozen=True)
class Confidence:
    level: str  # high | medium | low (docs/engine.md)
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Target:
    model: str
    gpu: str
    tp: int
    gpu_given: bool


@dataclass(frozen=True)
class Segment:
    segment: int
    requests: int
    share: float
    mean: dict[str, float]
    advice: str
    silhouette: float


@dataclass(frozen=True)
class DerivedFlag:
    """A resource flag sized from the workload, with its reason.

    `value` None: the logs cannot size it, so the emitted configs leave the flag out (vLLM's default
    applies). `confirm`: the value (or vLLM's default, when left out) rests on an assumption the reason
    names; the checklist asks to confirm it on the deployment.
    """

    flag: str
    value: int | float | None
    reason: str
    confirm: bool


@dataclass(frozen=True)
class Emitted:
    """The recommendation as people paste it (rendered by advisor.emit.configs from this document)."""

    serve_command: str
    config_yaml: str
    llm_kwargs: dict
    config_json: dict


@dataclass(frozen=True)
class TpotAtConcurrency:
    concurrency: int
    baseline_tpot_ms: float
    speculative_tpot_ms: float


@dataclass(frozen=True)
class TpotCurve:
    """Predicted TPOT by concurrency in closed loop (C requests always in flight, the log's mean lengths),
    without speculation and with `candidate`: the recommended one, or when none is (`recommended` false)
    the best-ranked speculative candidate, to show where it stops paying."""

    candidate: str
    recommended: bool
    input_len: float
    output_len: float
    load: str
    rows: tuple[TpotAtConcurrency, ...]


@dataclass(frozen=True)
class Recommendation:
    speculative_config: dict | None
    enable_prefix_caching: bool
    evidence: tuple[str, ...]
    confidence: Confidence
    predicted: Predicted
    assumptions: tuple[str, ...]
    target: Target
    segments: tuple[Segment, ...]
    derived_flags: tuple[DerivedFlag, ...]
    candidates: tuple[Candidate, ...]
    tpot_by_concurrency: TpotCurve | None = None  # None: no speculative candidate at all
    emitted: Emitted | None = None

    @property
    def flags_to_confirm(self) -> list[DerivedFlag]:
        """Resource flags left out or set to vLLM's default on an assumption: to confirm by hand."""
        return [flag for flag in self.derived_flags if flag.confirm]


# ---------------------------------------------------------------------------------------------------------
# the document
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """The whole profile; sections a stage could not fill are None (or empty) and `disabled_analyses` says why."""

    advise_version: str
    inputs: tuple[InputFile, ...]
    options: ProfileOptions
    tokenizer: TokenizerSection | None
    ingest: Ingest
    lengths: Lengths
    arrivals: Arrivals | None
    prefix: Prefix | None
    apc: Apc | None
    overlap: Overlap | None
    sampling: Sampling
    replay: tuple[Replay, ...]
    replay_sweep: tuple[Replay, ...]
    disabled_analyses: tuple[Disabled, ...]
    recommendation: Recommendation | None = None
    draft_replay: tuple[DraftReplay, ...] = ()
    verify_history: tuple[VerifyRun, ...] = ()  # records of `--history`; the engine uses those that match
    routing: Routing | None = None  # the profile always sets it; None in documents built by hand (tests)
    row_sample: RowSample | None = None  # None: every request's numbers were kept
    schema_version: int = SCHEMA_VERSION

    @property
    def cached_share(self) -> float:
        """Share of prompt tokens the prefix cache serves: the APC replay at real capacity when the profile
        ran it, else the infinite-cache ceiling of the prefix analysis (an upper bound), else 0."""
        if self.apc is not None and self.apc.hit_rate is not None:
            return float(self.apc.hit_rate)
        if self.prefix is not None and self.prefix.ceiling is not None:
            return float(self.prefix.ceiling)
        return 0.0

    @property
    def prefix_ceiling(self) -> float | None:
        """The infinite-cache hit ratio: from the APC replay when it ran, else from the prefix analysis."""
        from_apc = self.apc.ceiling.hit_rate if self.apc is not None else None
        return from_apc or (self.prefix.ceiling if self.prefix is not None else from_apc)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (`advise LOGS --json`): plain dicts, lists and scalars, `schema_version` first."""
        data = _encode(self)
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: Any, source: str = "report") -> Report:
        """Reads a document written by `to_dict` (a saved `--json` report).

        Raises ReportError naming `source` and the offending key when the schema version differs or a
        section does not have the expected shape.
        """
        if not isinstance(data, dict):
            raise ReportError(f"{source}: not an advise JSON report (expected an object, got {type(data).__name__})")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ReportError(
                f"{source}: report schema_version {version!r}, this advise reads version {SCHEMA_VERSION}: "
                "re-run `advise LOGS --json` with this advise to regenerate it (or show it with the advise that wrote it)"
            )
        return _decode(cls, data, source)


def dumps(report: Report) -> bytes:
    """The report as indented JSON bytes (what `--json` prints and `-o` writes).

    An integer orjson cannot write (beyond 64 bits, echoed from an option) is written as a JSON float by
    `_plain` instead of failing the run.
    """
    options = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    document = report.to_dict()
    try:
        return orjson.dumps(document, option=options)
    except orjson.JSONEncodeError:
        return orjson.dumps(_plain(document), option=options)


def _plain(value: Any) -> Any:
    """`value` with integers beyond 64 bits as floats (JSON numbers) and containers walked."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return float(value)
    return value


def loads(text: bytes | str, source: str = "report") -> Report:
    """A report from JSON text; ReportError when it is not JSON or not a report of this schema."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise ReportError(f"{source}: not JSON ({error})") from error
    return Report.from_dict(data, source)


# A saved report is a few hundred KB at most (its problems and prefix lists are capped): a bigger file is not
# one, and is refused before it is read into memory.
MAX_REPORT_BYTES = 64 * 2**20


def load(path: str) -> Report:
    """A report saved by `advise LOGS -o FILE` (or `--json > FILE`); "-" reads stdin. InputError when it cannot
    be read or is over MAX_REPORT_BYTES (read in a bounded way: stdin and pipes have no size to ask first)."""
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.buffer.read(MAX_REPORT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                text = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as error:
        raise InputError(f"{source}: cannot read the report ({error.strerror or error})") from error
    if len(text) > MAX_REPORT_BYTES:
        raise InputError(f"{source}: over {MAX_REPORT_BYTES:,} bytes, not a report of `advise --json`")
    return loads(text, source)


def section(cls: type, data: dict[str, Any], source: str = "result") -> Any:
    """A section from a measurement's `to_dict()` (plus the profile's own fields): the one constructor, so the
    document in memory equals the document read back from its JSON."""
    return _decode(cls, data, source)


# ---------------------------------------------------------------------------------------------------------
# the codec: dataclasses <-> JSON values, driven by the type hints
# ---------------------------------------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}
_SCALARS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode(hint: Any, data: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        if data is None and type(None) in arms:
            return None
        errors = []
        for arm in arms:
            if arm is type(None):
                continue
            try:
                return _decode(arm, data, path)
            except ReportError as error:
                errors.append(error)
        raise errors[0] if errors else ReportError(f"{path}: unexpected null")
    if dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise ReportError(f"{path}: expected an object, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(hint)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ReportError(f"{path}: unknown key(s) {', '.join(unknown)}")
        hints = _hints(hint)
        values = {}
        for name, spec in fields.items():
            if name in data:
                values[name] = _decode(hints[name], data[name], f"{path}.{name}")
            elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                raise ReportError(f"{path}: missing key {name}")
        return hint(**values)
    if origin is tuple:
        if not isinstance(data, (list, tuple)):
            raise ReportError(f"{path}: expected a list, got {type(data).__name__}")
        item = typing.get_args(hint)[0]
        return tuple(_decode(item, value, f"{path}[{index}]") for index, value in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise ReportError(f"{path}: expected an object, got {type(data).__name__}")
        item = typing.get_args(hint)[1]
        return {key: _decode(item, value, f"{path}.{key}") for key, value in data.items()}
    if hint is dict:  # free-form JSON objects: speculative configs, LLM kwargs
        if not isinstance(data, dict):
            raise ReportError(f"{path}: expected an object, got {type(data).__name__}")
        return data
    if hint in _SCALARS:
        if not isinstance(data, _SCALARS[hint]) or (hint is not bool and isinstance(data, bool)):
            raise ReportError(f"{path}: expected {hint.__name__}, got {type(data).__name__}")
        return data
    if hint is Any:
        return data
    raise TypeError(f"{path}: no decoder for {hint!r}")  # a section type this codec does not know: a bug here
