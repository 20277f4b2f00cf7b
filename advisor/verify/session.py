"""`advise verify` as one library call: options -> dataset and plan -> runs -> verdict -> saved record.

The CLI (advisor/cli/verify.py) only fills `VerifyOptions` and calls `prepare` (then `VerifyPlan.to_shell`
for --dry-run) or `run_verify`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from advisor.errors import ConfigError, InputError
from advisor.ingest import read_requests
from advisor.report import Report, loads
from advisor.tokenize import load_tokenizer
from advisor.verify.dataset import build_dataset
from advisor.verify.history import build_record, save_record
from advisor.verify.plan import APC, SPECULATIVE, VerifyPlan, make_plan
from advisor.verify.runner import run_plan
from advisor.verify.server import MAX_IPC_DIR_CHARS, vllm_env, vllm_executable
from advisor.verify.verdict import build_verdict

Progress = Callable[[str], None]


@dataclass(frozen=True)
class VerifyOptions:
    """Everything `advise verify` was asked to do (see `advise verify --help` for each option)."""

    logs: tuple[str, ...]
    model: str
    out_dir: Path
    vllm_python: Path
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
    kv_cache_gib: float = 1.0
    baseline_url: str | None = None
    candidate_url: str | None = None
    history: Path | None = None
    min_effect: float = 0.02
    ready_timeout_s: float = 900.0
    bench_timeout_s: float = 3600.0


def _load_report(path: Path) -> Report:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: not a readable advise JSON report ({exc})") from exc
    return loads(text, str(path))


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
    """A local folder for the bench's --tokenizer (a bare name would be looked up on the hub)."""
    for candidate in (options.tokenizer, options.model):
        if candidate and Path(candidate).is_dir():
            return str(Path(candidate).resolve())
    raise ConfigError(
        "vllm bench serve needs a local tokenizer folder: pass --tokenizer DIR (the served model's tokenizer) "
        "or a model folder as --model"
    )


def prepare(options: VerifyOptions, progress: Progress | None = None) -> VerifyPlan:
    """Read and tokenize the logs, write the bench dataset into out_dir, and make the plan (runs nothing)."""
    if options.trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {options.trials}")
    report = _load_report(options.recommendation) if options.recommendation else None
    config = candidate_config(options, report)
    tokenizer = load_tokenizer(options.tokenizer or options.model, options.model)
    requests = list(read_requests(list(options.logs), options.fmt))
    dataset = build_dataset(
        requests, tokenizer, options.out_dir / "dataset.jsonl", max_requests=options.max_requests,
        max_model_len=options.max_model_len, request_rate=options.request_rate, burstiness=options.burstiness,
        max_concurrency=options.max_concurrency, temperature=options.temperature, progress=progress,
    )
    return make_plan(
        vllm_bin=vllm_executable(options.vllm_python), model=options.model,
        served_model_name=options.served_model_name or Path(options.model).name or options.model,
        bench_tokenizer=bench_tokenizer_path(options), dataset=dataset, candidate_config=config,
        out_dir=options.out_dir, trials=options.trials, mode=options.mode, serve_args=options.serve_args, seed=options.seed,
        kv_cache_gib=options.kv_cache_gib, baseline_url=options.baseline_url, candidate_url=options.candidate_url,
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
    report = _load_report(options.recommendation) if options.recommendation else None
    results = run_plan(plan, options.vllm_python, ready_timeout_s=options.ready_timeout_s,
                       bench_timeout_s=options.bench_timeout_s, progress=progress)
    predicted = predictions_from_report(report, plan.arms[1].speculative_config)
    verdict = build_verdict(results, mode=plan.mode, predicted=predicted, min_effect=options.min_effect,
                            seed=options.seed)
    record = build_record(plan, results, verdict, logs=list(options.logs),
                          tokenizer=options.tokenizer or options.model,
                          prediction_source=str(options.recommendation) if options.recommendation else None)
    history = options.history if options.history is not None else options.out_dir.parent / "history.jsonl"
    record_path, summary_path = save_record(record, options.out_dir, history)
    return record, record_path, summary_path
