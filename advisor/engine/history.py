"""Verify's history feeds the engine: measured step costs and acceptance instead of the fit, where they match.

`advise verify` appends one record per run to a JSON Lines history (schema `advise.verify/1`, written by
advisor.verify.history; docs/verify.md). This module reads that documented JSON itself (the engine never
imports verify), reduces each record to a `VerifyRun` of the report document, and matches the records to the
deployment the engine prices. The rules (docs/engine.md, "Measured calibration"):

- a record counts only for the same model (the target's name equals the record's model or served model name,
  case-insensitive, whole or by last path component: `meta-llama/Llama-3.1-8B-Instruct` matches a folder
  `/models/Llama-3.1-8B-Instruct`), the same GPU (the record's host GPU resolves to the target's GPU in the
  hardware table; a CPU record never calibrates a GPU) and the same tensor-parallel size; only speculative
  records (an APC A/B changes prefill only);
- cost: an arm's mean median TPOT over the model's TPOT at the record's own load (its requests' mean lengths,
  concurrency or rate, prefix-cache hit rate, measured tokens per step) is a factor on every step the engine
  prices with that setting: the baseline's on steps without speculation, the candidate's on the same method
  and k. Synthetic-acceptance arms count for cost: the factor is taken at the acceptance they ran with;
- acceptance: a candidate arm that did not use synthetic acceptance, whose speculative config equals the
  engine's (synthetic keys aside) and whose dataset came from the same log files (by file name), replaces the
  replay's or prior's tokens per step and verified tokens per step;
- several matching records: the newest one per setting wins (the history is appended in time order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from advisor.engine.cost import DEFAULT_MAX_NUM_SEQS, CostModel
from advisor.engine.load import SpecPoint
from advisor.errors import InputError
from advisor.hardware import GPUS, GpuSpec
from advisor.report import VERIFY_RECORD_SCHEMA, InputFile, VerifyArm, VerifyRun
from advisor.vllm_vocab import ASYNC_INCOMPATIBLE_METHODS

# Keys of a speculative config that fix acceptance instead of measuring it (vLLM's synthetic rejection sampler).
SYNTHETIC_KEYS = frozenset({"rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length"})
VENDOR_PREFIXES = ("NVIDIA ", "AMD INSTINCT ", "AMD ")
TP_FLAGS = ("--tensor-parallel-size", "-tp")


def read_history(path: str | Path) -> tuple[VerifyRun, ...]:
    """Every record of a verify history file; InputError naming file:line and the reason on a bad line."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the verify history ({exc.strerror or exc})") from exc
    runs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        source = f"{path.name}:{number}"
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not a JSON verify record ({exc})") from exc
        runs.append(parse_record(record, source, f"{path}:{number}"))
    return tuple(runs)


def parse_record(record: object, source: str, where: str | None = None) -> VerifyRun:
    """One `advise.verify/1` record as a VerifyRun; InputError naming `where` (file:line) when malformed."""
    where = where or source
    if not isinstance(record, dict) or record.get("schema") != VERIFY_RECORD_SCHEMA:
        schema = record.get("schema") if isinstance(record, dict) else None
        raise InputError(f"{where}: schema {schema!r}, expected an {VERIFY_RECORD_SCHEMA!r} record of `advise verify`")
    try:
        inputs, dataset, protocol = record["inputs"], record["dataset"], record["protocol"]
        rows = int(dataset["rows"])
        load = dataset.get("load") or {}
        measured = (record.get("verdict") or {}).get("measured") or {}
        arms = tuple(
            _arm(name, setting, [run for run in record["runs"] if run["arm"] == name], measured.get(name) or {})
            for name, setting in protocol["arms"].items()
        )
        rate = load.get("request_rate")
        return VerifyRun(
            source=f"{source} ({record['created']})" if record.get("created") else source,
            created=record.get("created"),
            mode=str(protocol["mode"]),
            model=str(inputs["model"]),
            served_model_name=inputs.get("served_model_name"),
            gpus=tuple(str(name) for name in ((record.get("hardware") or {}).get("gpus") or ())),
            tp=_tensor_parallel(protocol.get("serve_args") or ()),
            logs=tuple(str(log) for log in inputs.get("logs") or ()),
            requests=rows,
            input_len=float(dataset["input_tokens"]) / max(rows, 1),
            output_len=float(dataset["output_tokens"]) / max(rows, 1),
            max_concurrency=int(load["max_concurrency"]) if load.get("max_concurrency") else None,
            request_rate=float(rate) if isinstance(rate, (int, float)) and math.isfinite(rate) else None,
            apc_hit_rate=_apc_hit_rate(measured),
            arms=arms,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{where}: malformed verify record ({type(exc).__name__}: {exc})") from exc


def _arm(name: str, setting: dict, runs: list[dict], measured: dict) -> VerifyArm:
    tpots = [float(run["bench"]["median_tpot_ms"]) for run in runs if run["bench"].get("median_tpot_ms") is not None]
    if not tpots:
        raise ValueError(f"arm {name!r} has no run with a median TPOT")
    counters = measured.get("counters") or {}
    tokens_per_step = measured.get("tokens_per_step")
    verify_tokens = None
    if tokens_per_step and counters.get("generation_tokens"):
        # steps = emitted tokens - accepted tokens (each step emits one token plus its accepted drafts)
        steps = counters["generation_tokens"] - counters.get("spec_accepted_tokens", 0.0)
        verify_tokens = 1.0 + counters.get("spec_draft_tokens", 0.0) / steps if steps > 0 else None
    return VerifyArm(
        name=name,
        speculative_config=setting.get("speculative_config"),
        synthetic_acceptance=bool(setting.get("synthetic_acceptance")),
        runs=len(tpots),
        median_tpot_ms=sum(tpots) / len(tpots),
        tokens_per_step=float(tokens_per_step) if tokens_per_step else None,
        verify_tokens_per_seq=verify_tokens,
        mean_acceptance_length=measured.get("mean_acceptance_length"),
        per_position_acceptance=tuple(measured.get("per_position_acceptance") or ()),
    )


def _tensor_parallel(serve_args: list[str] | tuple[str, ...]) -> int:
    """The --tensor-parallel-size both servers ran with (vLLM's default 1)."""
    args = list(serve_args)
    for index, arg in enumerate(args):
        for flag in TP_FLAGS:
            if arg == flag and index + 1 < len(args):
                return int(args[index + 1])
            if arg.startswith(flag + "="):
                return int(arg.split("=", 1)[1])
    return 1


def _apc_hit_rate(measured: dict) -> float | None:
    rates = [arm.get("apc_hit_rate") for arm in measured.values() if isinstance(arm, dict)]
    rates = [float(rate) for rate in rates if rate is not None]
    return sum(rates) / len(rates) if rates else None


def gpu_of_device(name: str) -> GpuSpec | None:
    """The hardware table's GPU for a device name as the host reports it ("NVIDIA H200", "NVIDIA H100 80GB
    HBM3"): vendor prefix dropped, then the whole name or its first word; None when the table lacks it."""
    text = name.strip().upper()
    for prefix in VENDOR_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return GPUS.get(text) or GPUS.get(text.split(" ")[0] if text else "")


def _same_model(target: str, run: VerifyRun) -> bool:
    def forms(name: str) -> set[str]:
        name = name.strip().rstrip("/").lower()
        return {name, name.rsplit("/", 1)[-1]}

    names = [run.model] + ([run.served_model_name] if run.served_model_name else [])
    return any(forms(target) & forms(name) for name in names)


def _acceptance_key(config: dict | None) -> dict:
    return {key: value for key, value in (config or {}).items() if key not in SYNTHETIC_KEYS}


@dataclass(frozen=True)
class MeasuredStep:
    """A measured cost factor: measured TPOT over the model's at the record's load, and where it came from."""

    factor: float
    measured_tpot_ms: float
    model_tpot_ms: float
    source: str


@dataclass(frozen=True)
class MeasuredCalibration:
    """What the matching records give the engine, and every record left out with its reason."""

    runs: tuple[VerifyRun, ...]  # the matching records, oldest first
    baseline: MeasuredStep | None
    ignored: tuple[str, ...]

    def apply(self, point: SpecPoint, cost: CostModel, log_names: set[str]) -> tuple[SpecPoint, list[str]]:
        """`point` with the newest matching measurement of its setting: acceptance (same config, real
        acceptance, same logs) first, then the cost factor of the same method and k at that acceptance."""
        notes: list[str] = []
        for run in reversed(self.runs):
            arm = _candidate_arm(run)
            if arm is None or arm.tokens_per_step is None or arm.synthetic_acceptance:
                continue
            if _acceptance_key(arm.speculative_config) != _acceptance_key(point.config):
                continue
            if {Path(log).name for log in run.logs} != log_names:
                notes.append(f"{point.label()}: acceptance in {run.source} not used: measured on other logs "
                             f"({', '.join(run.logs)})")
                continue
            notes.append(f"{point.label()}: acceptance measured by advise verify in {run.source}: "
                         f"{arm.tokens_per_step:.2f} tokens per step (was {point.tokens_per_step:.2f} from the "
                         f"{'replay' if point.from_replay else 'prior'})")
            point = replace(point, tokens_per_step=arm.tokens_per_step,
                            verify_tokens_per_seq=arm.verify_tokens_per_seq or point.verify_tokens_per_seq,
                            mean_acceptance_length=arm.mean_acceptance_length, from_replay=True,
                            source=f"measured by advise verify: {run.source}")
            break
        for run in reversed(self.runs):
            arm = _candidate_arm(run)
            config = arm.speculative_config if arm else None
            if not config or config.get("method") != point.method or _k(config) != point.k or arm.tokens_per_step is None:
                continue
            step = _measured_step(cost, run, arm, point)
            kind = "synthetic acceptance: cost only" if arm.synthetic_acceptance else "real acceptance"
            notes.append(f"{point.label()}: step cost measured by advise verify in {run.source} ({kind}): TPOT "
                         f"{step.measured_tpot_ms:.2f} ms at {arm.tokens_per_step:.2f} tokens per step against "
                         f"{step.model_tpot_ms:.2f} ms fitted: steps x{step.factor:.3f}")
            point = replace(point, step_scale=step.factor)
            break
        return point, notes


def _candidate_arm(run: VerifyRun) -> VerifyArm | None:
    return next((arm for arm in run.arms if arm.name == "candidate" and arm.speculative_config), None)


def _k(config: dict) -> int:
    return int(config.get("num_speculative_tokens") or config.get("suffix_decoding_max_tree_depth") or 0)


def _record_tpot(cost: CostModel, run: VerifyRun, point: SpecPoint | None, arm: VerifyArm) -> float:
    """The model's TPOT at the record's load (its mean lengths, concurrency or rate, hit rate, acceptance)."""
    cached = run.apc_hit_rate or 0.0
    spec: dict = {}
    draft_ms = None
    if point is not None:
        spec = {"tokens_per_seq": arm.verify_tokens_per_seq or point.verify_tokens_per_seq,
                "tokens_per_step": arm.tokens_per_step or point.tokens_per_step, "speculative": True,
                "async_scheduling": point.method not in ASYNC_INCOMPATIBLE_METHODS}
        draft = point.draft
        if draft is not None:
            draft_ms = lambda batch: cost.draft_ms(draft, batch, point.k, run.input_len + run.output_len / 2)  # noqa: E731
    else:
        spec = {"async_scheduling": True}
    if run.request_rate is None and run.max_concurrency:
        concurrency = min(run.max_concurrency, run.requests)
        return cost.closed_loop(concurrency, run.input_len, run.output_len, cached_share=cached,
                                draft_ms=draft_ms(concurrency) if draft_ms else 0.0, **spec).tpot_ms
    rate = run.request_rate if run.request_rate is not None else 1e6  # all at once: the server's batch limit
    return cost.open_loop(rate, run.input_len, run.output_len, cached_share=cached,
                          max_batch=min(run.max_concurrency or DEFAULT_MAX_NUM_SEQS, run.requests),
                          draft_for_batch=draft_ms, **spec).tpot_ms


def _measured_step(cost: CostModel, run: VerifyRun, arm: VerifyArm, point: SpecPoint | None) -> MeasuredStep:
    model_tpot = _record_tpot(cost, run, point, arm)
    return MeasuredStep(arm.median_tpot_ms / model_tpot, arm.median_tpot_ms, model_tpot, run.source)


def calibrate(runs: tuple[VerifyRun, ...], target: str, gpu: GpuSpec, tp: int, cost: CostModel) -> MeasuredCalibration:
    """The records that match the target model, GPU and tp (module docstring), the newest baseline factor,
    and the reason each other record was left out."""
    matching: list[VerifyRun] = []
    ignored: list[str] = []
    for run in runs:
        hosts = [gpu_of_device(name) for name in run.gpus]
        if run.mode != "speculative":
            ignored.append(f"{run.source}: an APC A/B, which changes prefill only")
        elif not _same_model(target, run):
            ignored.append(f"{run.source}: another model ({run.model})")
        elif not run.gpus:
            ignored.append(f"{run.source}: no GPU in the record (a CPU build), which never calibrates a GPU")
        elif any(host is not gpu for host in hosts):
            ignored.append(f"{run.source}: another GPU ({', '.join(run.gpus)})")
        elif run.tp != tp:
            ignored.append(f"{run.source}: tensor-parallel size {run.tp}, not {tp}")
        else:
            matching.append(run)
    baseline = None
    for run in reversed(matching):
        arm = next((arm for arm in run.arms if not arm.speculative_config), None)
        if arm is not None:
            baseline = _measured_step(cost, run, arm, None)
            break
    return MeasuredCalibration(tuple(matching), baseline, tuple(ignored))


def log_names(inputs: tuple[InputFile, ...]) -> set[str]:
    """The profile's log files by name, as a verify record's `inputs.logs` are compared with them."""
    return {Path(entry.path).name for entry in inputs}
