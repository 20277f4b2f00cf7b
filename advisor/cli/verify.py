"""`advise verify`: a controlled A/B (speculative config, or APC) with a real `vllm serve` + `vllm bench serve`."""
from __future__ import annotations

import datetime as dt
import json
import os
import shlex
from pathlib import Path

import click

from advisor.errors import EXIT_FINDINGS, ConfigError
from advisor.verify.plan import MODES, SPECULATIVE
from advisor.verify.session import VerifyOptions, dry_run_script, prepare, run_verify
from advisor.verify.verdict import REFUTED

DEFAULT_VLLM_PYTHON = "/work/vllm-venv/bin/python"


def _json_object(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as error:
        raise click.BadParameter(f"not JSON ({error})") from error
    if not isinstance(parsed, dict):
        raise click.BadParameter("expected one JSON object, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'")
    return parsed


def _rate(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        rate = float(value)
    except ValueError as error:
        raise click.BadParameter("a number of requests per second, or 'inf'") from error
    if rate <= 0:
        raise click.BadParameter("must be positive")
    return rate


@click.command("verify")
@click.argument("logs", nargs=-1, required=True)
@click.option("--model", required=True, help="Model to serve: a local folder (no hub access here).")
@click.option("--tokenizer", help="Tokenizer folder (default: the model folder).")
@click.option("--compare", "mode", type=click.Choice(MODES), default=SPECULATIVE, show_default=True,
              help="What the arms differ in: the speculative config, or prefix caching off (baseline) vs on.")
@click.option("--speculative-config", callback=_json_object, help="Candidate's --speculative-config JSON.")
@click.option("--recommendation", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A report from `advise LOGS --json`: its recommended config is the candidate (unless "
                   "--speculative-config is given) and its predictions are compared with the measurements.")
@click.option("--trials", type=int, default=2, show_default=True, help="Trials; each runs baseline then candidate.")
@click.option("--max-requests", type=int, help="Replay only the first N usable requests of the logs.")
@click.option("--max-model-len", type=int, help="Skip requests whose prompt + output exceed this (the server's limit).")
@click.option("--request-rate", callback=_rate, help="Requests/s (default: the logs' observed rate; 'inf' = all at once).")
@click.option("--burstiness", type=float, help="Gamma shape of arrivals (default: from the logs' inter-arrival CV).")
@click.option("--max-concurrency", type=int, help="Requests in flight at most (default: the logs' observed peak).")
@click.option("--temperature", type=float, help="Sampling temperature (default: the logs', else 0).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the servers, the bench and the bootstrap.")
@click.option("--serve-arg", "serve_args", multiple=True,
              help="Extra `vllm serve` flags for BOTH arms, shell-quoted (repeatable), e.g. --serve-arg='--enforce-eager'.")
@click.option("--baseline-url", help="Use this running baseline server instead of starting one (prefix cache may carry over).")
@click.option("--candidate-url", help="Use this running candidate server instead of starting one.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the dataset, raw bench JSON, logs, record and summary "
                   "(default: advise-verify/<UTC time>).")
@click.option("--history", type=click.Path(dir_okay=False, path_type=Path),
              help="JSON Lines file the record is appended to (default: history.jsonl beside the run folder).")
@click.option("--format", "fmt", help="Log format (default: detected).")
@click.option("--vllm-python", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=lambda: os.environ.get("ADVISOR_VLLM_PYTHON", DEFAULT_VLLM_PYTHON), show_default=DEFAULT_VLLM_PYTHON,
              help="Python of the venv with vLLM (scripts/setup_vllm_cpu.sh); env ADVISOR_VLLM_PYTHON.")
@click.option("--kv-cache-gib", type=float, default=1.0, show_default=True, help="VLLM_CPU_KVCACHE_SPACE (CPU builds).")
@click.option("--min-effect", type=float, default=0.02, show_default=True,
              help="Smallest gain (fraction) of the primary metric that counts as confirmed (TPOT; TTFT for apc).")
@click.option("--ready-timeout", type=float, default=900.0, show_default=True, help="Seconds for a server to become ready.")
@click.option("--dry-run", is_flag=True, help="Print the plan as a runnable shell script and run nothing.")
def verify_command(logs: tuple[str, ...], model: str, tokenizer: str | None, mode: str, speculative_config: dict | None,
                   recommendation: Path | None, trials: int, max_requests: int | None, max_model_len: int | None,
                   request_rate: float | None, burstiness: float | None, max_concurrency: int | None,
                   temperature: float | None, seed: int, serve_args: tuple[str, ...], baseline_url: str | None,
                   candidate_url: str | None, out_dir: Path | None, history: Path | None, fmt: str | None,
                   vllm_python: Path, kv_cache_gib: float, min_effect: float, ready_timeout: float,
                   dry_run: bool) -> None:
    """A/B a speculative config against the same server without it (or, with --compare apc, prefix caching
    on against off), replaying LOGS with `vllm bench serve`.

    Fresh server per arm and trial, interleaved A B A B; prompts pre-rendered with the chat template, the
    logged output lengths, the logs' load. Prints the verdict (confirmed / refuted / inconclusive, exit 1 when
    refuted) and writes record.json and summary.md (docs/verify.md).
    """
    if mode == SPECULATIVE and speculative_config is None and recommendation is None:
        raise ConfigError("nothing to verify: pass --speculative-config JSON or --recommendation report.json")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    options = VerifyOptions(
        logs=logs, model=model, out_dir=(out_dir or Path("advise-verify") / stamp).resolve(), vllm_python=vllm_python,
        mode=mode,
        speculative_config=speculative_config, recommendation=recommendation, tokenizer=tokenizer, fmt=fmt,
        trials=trials, max_requests=max_requests, max_model_len=max_model_len, request_rate=request_rate,
        burstiness=burstiness, max_concurrency=max_concurrency, temperature=temperature, seed=seed,
        serve_args=tuple(arg for group in serve_args for arg in shlex.split(group)), kv_cache_gib=kv_cache_gib,
        baseline_url=baseline_url, candidate_url=candidate_url, history=history, min_effect=min_effect,
        ready_timeout_s=ready_timeout,
    )
    if dry_run:
        click.echo(dry_run_script(prepare(options)), nl=False)
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
