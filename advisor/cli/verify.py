"""`advise verify`: a controlled A/B (speculative config, or APC) with a real `vllm serve` + `vllm bench serve`."""
from __future__ import annotations

import datetime as dt
import math
import os
import shlex
from pathlib import Path

import click

from advisor import limits
from advisor.cli.options import FiniteFloatRange, speculative_config as speculative_config_option
from advisor.errors import EXIT_FINDINGS, ConfigError
from advisor.verify.plan import MODES, SPECULATIVE
from advisor.verify.session import VerifyOptions, dry_run_script, prepare, run_verify
from advisor.verify.verdict import REFUTED

def _rate(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        rate = float(value)
    except ValueError as error:
        raise click.BadParameter("a number of requests per second, or 'inf'") from error
    if not (0 < rate <= limits.MAX_REQUEST_RATE or rate == math.inf):
        raise click.BadParameter(f"must be in (0, {limits.MAX_REQUEST_RATE:g}] requests/s, or 'inf'")
    return rate


def _serve_args(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """The shell-split --serve-arg flags, within advise's limits (a `vllm serve` line is a few hundred
    characters), as one list for both servers."""
    too_long = [group for group in value if len(group) > limits.MAX_SERVE_ARG_CHARS]
    if too_long:
        raise click.BadParameter(f"one is {len(too_long[0]):,} characters, over advise's limit of "
                                 f"{limits.MAX_SERVE_ARG_CHARS:,}")
    try:
        split = tuple(arg for group in value for arg in shlex.split(group))
    except ValueError as error:
        raise click.BadParameter(f"not shell-quoted words ({error})") from None
    if len(split) > limits.MAX_SERVE_ARGS:
        raise click.BadParameter(f"{len(split):,} words, over advise's limit of {limits.MAX_SERVE_ARGS}")
    return split


@click.command("verify")
@click.argument("logs", nargs=-1, required=True)
@click.option("--model", required=True,
              help="Model to serve, as `vllm serve` takes it: a Hugging Face id (from the serving host's cache) or a folder.")
@click.option("--tokenizer", help="Tokenizer (folder, tokenizer.json or cached HF id; default: the model's, resolved "
                                  "offline as the profile resolves it).")
@click.option("--compare", "mode", type=click.Choice(MODES), default=SPECULATIVE, show_default=True,
              help="What the arms differ in: the speculative config, or prefix caching off (baseline) vs on.")
@click.option("--speculative-config", callback=speculative_config_option, help="Candidate's --speculative-config JSON.")
@click.option("--recommendation", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A report from `advise LOGS --json`: its recommended config is the candidate (unless "
                   "--speculative-config is given) and its predictions are compared with the measurements.")
@click.option("--trials", type=click.IntRange(1, limits.MAX_TRIALS), default=2, show_default=True, help="Trials; each runs baseline then candidate.")
@click.option("--max-requests", type=click.IntRange(1, limits.MAX_REPLAY_REQUESTS), help="Replay only the first N usable requests of the logs.")
@click.option("--max-model-len", type=click.IntRange(1, limits.MAX_MODEL_LEN),
              help="Both servers' --max-model-len; requests whose prompt + output exceed it are skipped.")
@click.option("--gpu-memory-utilization", type=FiniteFloatRange(0.0, 1.0, min_open=True),
              help="Both servers' --gpu-memory-utilization (GPU builds).")
@click.option("--tensor-parallel-size", type=click.IntRange(1, limits.MAX_TP), help="Both servers' --tensor-parallel-size.")
@click.option("--request-rate", callback=_rate, help="Requests/s (default: the logs' observed rate; 'inf' = all at once).")
@click.option("--burstiness", type=FiniteFloatRange(0.0, limits.MAX_BURSTINESS, min_open=True), help="Gamma shape of arrivals (default: from the logs' inter-arrival CV).")
@click.option("--max-concurrency", type=click.IntRange(1, limits.MAX_CONCURRENCY), help="Requests in flight at most (default: the logs' observed peak).")
@click.option("--temperature", type=FiniteFloatRange(0.0, limits.MAX_TEMPERATURE), help="Sampling temperature (default: the logs', else 0).")
@click.option("--seed", type=click.IntRange(0, limits.MAX_SEED), default=0, show_default=True, help="Seed for the servers, the bench and the bootstrap.")
@click.option("--serve-arg", "serve_args", multiple=True, callback=_serve_args,
              help="Extra `vllm serve` flags for BOTH arms, shell-quoted (repeatable), e.g. --serve-arg='--enforce-eager'.")
@click.option("--baseline-url", help="Use this running baseline server instead of starting one (prefix cache may carry over).")
@click.option("--candidate-url", help="Use this running candidate server instead of starting one.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the dataset, raw bench JSON, logs, record and summary "
                   "(default: advise-verify/<UTC time>).")
@click.option("--history", type=click.Path(dir_okay=False, path_type=Path),
              help="JSON Lines file the record is appended to (default: history.jsonl beside the run folder).")
@click.option("--format", "fmt", help="Log format (default: detected).")
@click.option("--vllm", "vllm_command",
              help="The vLLM command, shell-quoted (default: `vllm` on PATH, else `python -m "
                   "vllm.entrypoints.cli.main` when this python imports vllm), e.g. --vllm '/opt/venv/bin/vllm'.")
@click.option("--vllm-python", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=lambda: os.environ.get("ADVISOR_VLLM_PYTHON") or None,
              help="Python of a venv with vLLM: its `vllm` is used (env ADVISOR_VLLM_PYTHON; the test suite's setup).")
@click.option("--kv-cache-gib", type=click.IntRange(1, limits.MAX_KV_CACHE_GIB), default=1, show_default=True,
              help="KV-cache size of vLLM's CPU build in whole GiB (VLLM_CPU_KVCACHE_SPACE, an integer); GPU builds ignore it.")
@click.option("--synthetic-acceptance", is_flag=True,
              help="Cost-only candidate: vLLM accepts drafts at the per-position rates the profile's replay "
                   "measured (\"rejection_sample_method\": \"synthetic\"), for methods whose draft weights are not "
                   "at hand or with dummy weights. Needs --recommendation; the record says the arm was synthetic.")
@click.option("--min-effect", type=FiniteFloatRange(0.0, 1.0, max_open=True), default=0.02, show_default=True,
              help="Smallest gain (fraction) of the primary metric that counts as confirmed (TPOT; TTFT for apc).")
@click.option("--ready-timeout", type=FiniteFloatRange(0.0, limits.MAX_READY_TIMEOUT_S, min_open=True), default=900.0, show_default=True,
              help="Seconds for a server to become ready (weight loading, compilation, CUDA-graph capture).")
@click.option("--dry-run", is_flag=True,
              help="Write the dataset into --out and print the plan as a runnable shell script for the serving "
                   "host; needs no vLLM, model files or GPU here.")
def verify_command(logs: tuple[str, ...], model: str, tokenizer: str | None, mode: str, speculative_config: dict | None,
                   recommendation: Path | None, trials: int, max_requests: int | None, max_model_len: int | None,
                   request_rate: float | None, burstiness: float | None, max_concurrency: int | None,
                   temperature: float | None, seed: int, serve_args: tuple[str, ...], baseline_url: str | None,
                   candidate_url: str | None, out_dir: Path | None, history: Path | None, fmt: str | None,
                   gpu_memory_utilization: float | None, tensor_parallel_size: int | None,
                   vllm_command: str | None, vllm_python: Path | None, kv_cache_gib: int,
                   synthetic_acceptance: bool, min_effect: float, ready_timeout: float, dry_run: bool) -> None:
    """A/B a speculative config against the same server without it (or, with --compare apc, prefix caching
    on against off), replaying LOGS with `vllm bench serve`.

    Fresh server per arm and trial, interleaved A B A B; prompts pre-rendered with the chat template, the
    logged output lengths, the logs' load. Prints the verdict (confirmed / refuted / inconclusive, exit 1 when
    refuted) and writes record.json and summary.md (docs/verify.md).
    """
    if mode == SPECULATIVE and speculative_config is None and recommendation is None:
        raise ConfigError("nothing to verify: pass --speculative-config JSON or --recommendation report.json")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    shared = list(serve_args)
    for flag, value in (("--max-model-len", max_model_len), ("--gpu-memory-utilization", gpu_memory_utilization),
                        ("--tensor-parallel-size", tensor_parallel_size)):
        if value is not None:
            shared += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    options = VerifyOptions(
        logs=logs, model=model, out_dir=(out_dir or Path("advise-verify") / stamp).resolve(), vllm=vllm_command,
        vllm_python=vllm_python, mode=mode, synthetic_acceptance=synthetic_acceptance,
        speculative_config=speculative_config, recommendation=recommendation, tokenizer=tokenizer, fmt=fmt,
        trials=trials, max_requests=max_requests, max_model_len=max_model_len, request_rate=request_rate,
        burstiness=burstiness, max_concurrency=max_concurrency, temperature=temperature, seed=seed,
        serve_args=tuple(shared), kv_cache_gib=kv_cache_gib,
        baseline_url=baseline_url, candidate_url=candidate_url, history=history, min_effect=min_effect,
        ready_timeout_s=ready_timeout,
    )
    if dry_run:
        click.echo(dry_run_script(prepare(options, dry_run=True)), nl=False)
        return
    record, record_path, summary_path = run_verify(options, progress=lambda message: click.echo(message, err=True))
    verdict = record["verdict"]
    click.echo(f"verdict: {verdict['verdict']} - {verdict['reason']}")
    primary = verdict["ratios"][verdict["primary_metric"]]
    click.echo(f"{verdict['primary_metric'].upper()} ratio {primary['ratio']:.3f} (95% interval "
               f"{primary['ci95'][0]:.3f}-{primary['ci95'][1]:.3f}); rule: {verdict['rule']}")
    click.echo(f"record: {record_path}\nsummary: {summary_path}")
    if verdict["verdict"] == REFUTED:
        click.get_current_context().exit(EXIT_FINDINGS)
