"""`advise verify` as one library call: options -> dataset and plan -> runs -> verdict -> saved record.

The CLI (advisor/cli/verify.py) only fills `VerifyOptions` and calls `prepare` (then `VerifyPlan.to_shell`
for --dry-run) or `run_verify`.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from advisor import limits
from advisor.errors import ConfigError
from advisor.ingest import read_requests
from advisor.report import Report, load
from advisor.tokenize import load_tokenizer
from advisor.verify.dataset import build_dataset
from advisor.verify.history import build_record, save_record
from advisor.verify.plan import APC, SPECULATIVE, VerifyPlan, make_plan
from advisor.verify.runner import run_plan
from advisor.verify.server import MAX_IPC_DIR_CHARS, detect_gpus, is_cpu_build, resolve_vllm, vllm_env, vllm_version
from advisor.verify.verdict import build_verdict

Progress = Callable[[str], None]


@dataclass(frozen=True)
class VerifyOptions:
    """Everything `advise verify` was asked to do (see `advise verify --help` for each option)."""

    logs: tuple[str, ...]
    model: str
    out_dir: Path
    vllm: str | None = None  # --vllm CMD; None: the venv of vllm_python, else `vllm` on PATH, else python -m
    vllm_python: Path | None = None
    mode: str = SPECULATIVE
    speculative_config: dict | None = None
    recommendation: Path | None = None
    tokenizer: str | None = None
    served_model_name: str | None = None
    fmt: str | None = None
    trials: int = 2
    max_requests: int | None = None
    max_model_len: int | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    temperature: float | None = None
    seed: int = 0
    serve_args: tuple[str, ...] = field(default=())
    kv_cache_gib: float = 1.0  # CPU builds only (VLLM_CPU_KVCACHE_SPACE)
    synthetic_acceptance: bool = False
    baseline_url: str | None = None
    candidate_url: str | None = None
    history: Path | None = None
    min_effect: float = 0.02
    ready_timeout_s: float = 900.0
    bench_timeout_s: float = 3600.0


def candidate_config(options: VerifyOptions, report: Report | None) -> dict | None:
    """The candidate's speculative config: the option, else the report's recommendation (none for APC)."""
    if options.mode == APC:
        if options.speculative_config is not None:
            raise ConfigError("--compare apc tests prefix caching alone: drop --speculative-config")
        return None
    if options.speculative_config is not None:
        return options.speculative_config
    if report is not None:
        config = report.recommendation.speculative_config if report.recommendation else None
        if config:
            limits.check_speculative_config(config)  # a report is a file: its config is checked as an option is
            return dict(config)
        raise ConfigError(f"{options.recommendation}: the report recommends no speculative config; "
                          "pass --speculative-config to test one anyway")
    raise ConfigError("nothing to verify: pass --speculative-config JSON or --recommendation report.json")


def predictions_from_report(report: Report | None, config: dict | None) -> dict:
    """The engine's predictions: for a speculative `config` the replay entry whose config agrees on every key
    given and the TPOT ratio when it is the one the report recommends; always the profile's APC hit rate; for
    the APC A/B (config None) the TTFT ratio APC on / APC off."""
    if not report:
        return {}
    predicted: dict = {}
    if report.apc is not None and report.apc.hit_rate is not None:
        predicted["apc_hit_rate"] = report.apc.hit_rate
    recommendation = report.recommendation
    if config is None:
        ttft = recommendation.predicted.ttft_ms if recommendation else None
        if ttft and ttft.apc_on and ttft.apc_off:
            predicted["ttft_ratio"] = ttft.apc_on / ttft.apc_off
        return predicted
    for entry in report.replay + report.replay_sweep:
        if all(entry.config.get(key) == value for key, value in config.items()):
            predicted.update(
                acceptance_rate=entry.acceptance_rate,
                mean_acceptance_length=entry.mean_acceptance_length,
                tokens_per_step=entry.tokens_per_step,
            )
            break
    tpot = recommendation.predicted.tpot_ms if recommendation else None
    if recommendation and recommendation.speculative_config == config and tpot and tpot.baseline and tpot.candidate:
        predicted["tpot_ratio"] = tpot.candidate / tpot.baseline
    return predicted


def bench_tokenizer_path(options: VerifyOptions) -> str:
    """The bench's --tokenizer: a local folder when one is named, else the model id (which `vllm bench serve`
    resolves from the serving host's Hugging Face cache, as `vllm serve` resolves the model)."""
    for candidate in (options.tokenizer, options.model):
        if candidate and Path(candidate).is_dir():
            return str(Path(candidate).resolve())
    return options.tokenizer or options.model


def synthetic_rates(report: Report | None, config: dict) -> list[float]:
    """Per-position acceptance rates of `config` from the report's replay (accepted at position i / drafts),
    made non-increasing as vLLM's synthetic rejection sampler requires."""
    if report is None:
        raise ConfigError("--synthetic-acceptance takes its per-position rates from a profile's replay: "
                          "pass --recommendation report.json")
    for entry in report.replay + report.replay_sweep:
        if all(entry.config.get(key) == value for key, value in config.items()) and entry.num_drafts:
            rates, last = [], 1.0
            for accepted in entry.num_accepted_tokens_per_pos:
                last = min(last, accepted / entry.num_drafts)
                rates.append(round(last, 4))
            return rates
    raise ConfigError(f"{json.dumps(config)}: no replay of this config with drafts in the report; profile it first")


def load_verify_tokenizer(options: VerifyOptions):
    """The tokenizer the profile would use (--tokenizer, else the model's own from a folder or the offline
    HF cache, else the default when it is the model's); ConfigError naming what is missing otherwise."""
    tokenizer = load_tokenizer(options.tokenizer, options.model)
    if tokenizer.info.model_match is False:
        raise ConfigError(
            f"no tokenizer of {options.model} here: not a model folder, not in the Hugging Face cache "
            f"(HF_HOME/hub), and the default tokenizer ({tokenizer.info.name}) is another model's; "
            "pass --tokenizer DIR|tokenizer.json, or download the model's tokenizer first"
        )
    return tokenizer


def prepare(options: VerifyOptions, progress: Progress | None = None, dry_run: bool = False) -> VerifyPlan:
    """Read and tokenize the logs, write the bench dataset into out_dir, and make the plan (runs nothing).

    A dry run needs no vLLM here: its script runs on the serving host, with that host's `vllm` unless --vllm
    names another command.
    """
    if options.trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {options.trials}")
    report = load(str(options.recommendation)) if options.recommendation else None
    config = candidate_config(options, report)
    if options.synthetic_acceptance:
        if config is None:
            raise ConfigError("--synthetic-acceptance needs a speculative candidate")
        config = {**config, "rejection_sample_method": "synthetic",
                  "synthetic_acceptance_rates": synthetic_rates(report, candidate_config(options, report))}
    vllm_cmd = resolve_vllm(options.vllm, options.vllm_python, required=not dry_run)
    version = None if dry_run and vllm_cmd == ("vllm",) else vllm_version(vllm_cmd)
    tokenizer = load_verify_tokenizer(options)
    requests = list(read_requests(list(options.logs), options.fmt))
    dataset = build_dataset(
        requests, tokenizer, options.out_dir / "dataset.jsonl", max_requests=options.max_requests,
        max_model_len=options.max_model_len, request_rate=options.request_rate, burstiness=options.burstiness,
        max_concurrency=options.max_concurrency, temperature=options.temperature, progress=progress,
    )
    return make_plan(
        vllm_cmd=vllm_cmd, model=options.model,
        served_model_name=options.served_model_name or Path(options.model).name or options.model,
        bench_tokenizer=bench_tokenizer_path(options), dataset=dataset, candidate_config=config,
        out_dir=options.out_dir, trials=options.trials, mode=options.mode, serve_args=options.serve_args, seed=options.seed,
        kv_cache_gib=options.kv_cache_gib if is_cpu_build(version) else None, ready_timeout_s=options.ready_timeout_s,
        baseline_url=options.baseline_url, candidate_url=options.candidate_url, vllm_version=version,
    )


def dry_run_script(plan: VerifyPlan) -> str:
    """The plan as a shell script, with the environment the servers would get (the script makes its folders;
    a scratch path too long for vLLM's IPC sockets gets /tmp as TMPDIR, see `short_tmp_dir`)."""
    scratch = plan.out_dir / "scratch"
    tmp = scratch / "tmp"
    return plan.to_shell(vllm_env(scratch, tmp if len(str(tmp)) <= MAX_IPC_DIR_CHARS else Path("/tmp"),
                                  plan.kv_cache_gib, base={}, create=False))


def run_verify(options: VerifyOptions, progress: Progress | None = None) -> tuple[dict, Path, Path]:
    """Run the whole A/B; returns the record and the paths of record.json and summary.md."""
    plan = prepare(options, progress)
    report = load(str(options.recommendation)) if options.recommendation else None
    results = run_plan(plan, ready_timeout_s=options.ready_timeout_s,
                       bench_timeout_s=options.bench_timeout_s, progress=progress)
    predicted = predictions_from_report(report, candidate_config(options, report))
    verdict = build_verdict(results, mode=plan.mode, predicted=predicted, min_effect=options.min_effect,
                            seed=options.seed)
    record = build_record(plan, results, verdict, logs=list(options.logs),
                          tokenizer=options.tokenizer or options.model,
                          prediction_source=str(options.recommendation) if options.recommendation else None,
                          hardware={"gpus": detect_gpus()})
    history = options.history if options.history is not None else options.out_dir.parent / "history.jsonl"
    record_path, summary_path = save_record(record, options.out_dir, history)
    return record, record_path, summary_path
