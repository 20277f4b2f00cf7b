"""`advise [profile] LOGS...`: profile request logs and recommend APC and speculative decoding."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from advisor import limits
from advisor.cli.options import FiniteFloatRange, speculative_config as speculative_config_option
from advisor.errors import ConfigError
from advisor.ingest import FORMATS
from advisor.vllm_vocab import DEFAULT_ROUTING, ROUTING_POLICIES

STDOUT = "-"  # an output FILE of -: stdout, in place of the terminal view
OUTPUT_PATH = click.Path(dir_okay=False, writable=True, allow_dash=True)

if TYPE_CHECKING:
    from advisor.report import Report


class _DraftBar:
    """Renders the draft models' forward passes (tokens done of total) as one bar per draft on stderr."""

    def __init__(self) -> None:
        self.bar = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="draft tokens", file=sys.stderr, show_pos=True)
            self.bar.__enter__()
            self.done = 0
        self.bar.update(done - self.done)
        self.done = done
        if done >= total:
            self.bar.__exit__(None, None, None)
            self.bar = None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("logs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Log format (default: detected per file).")
@click.option("--strict", is_flag=True, help="Stop at the first bad record instead of skipping it.")
@click.option("--tokenizer", help="Local HF tokenizer dir or tokenizer.json, a cached HF model id, or tiktoken:<encoding>.")
@click.option("--model", help="Target model id or local dir (implies its tokenizer and config when found locally).")
@click.option("--gpu", help="GPU of the deployment, e.g. H100 (default: assumed and stated in the report).")
@click.option("--tp", type=click.IntRange(1, limits.MAX_TP), default=1, show_default=True, help="Tensor-parallel size.")
@click.option("--max-num-seqs", type=click.IntRange(1, limits.MAX_NUM_SEQS), help="The deployment's --max-num-seqs (default: assumed and stated).")
@click.option("--request-rate", type=FiniteFloatRange(0, limits.MAX_REQUEST_RATE, min_open=True),
              help="Business load in requests/s, for logs without timestamps.")
@click.option("--replicas", type=click.IntRange(1, limits.MAX_REPLICAS), default=1, show_default=True,
              help="vLLM servers the logged traffic is spread over (ignored when the log names each request's "
                   "replica): each has its own prefix cache, suffix tree and share of the load.")
@click.option("--routing", type=click.Choice(ROUTING_POLICIES), default=DEFAULT_ROUTING, show_default=True,
              help="How the router spreads requests over --replicas: round_robin, or consistent_hash "
                   "(a conversation stays on one replica).")
@click.option("--history", type=click.Path(dir_okay=False, exists=True), metavar="HISTORY.jsonl",
              help="An `advise verify` history: records for the same --model, --gpu and --tp replace the fitted step "
                   "costs and the acceptance (docs/engine.md).")
@click.option("--block-size", type=click.IntRange(1, limits.MAX_BLOCK_SIZE), default=16, show_default=True,
              help="vLLM KV block size for prefix caching (16 on GPU, 128 on vLLM's CPU backend).")
@click.option("--hash-block-size", type=click.IntRange(1, limits.MAX_BLOCK_SIZE), default=512, show_default=True,
              help="Tokens per hash id in Mooncake / timed_trace logs.")
@click.option("--speculative-config", "speculative_config", callback=speculative_config_option,
              help="Replay exactly this JSON speculative config (as vllm serve takes it) instead of the sweep.")
@click.option("--draft", "drafts", multiple=True, metavar="MODEL",
              help="Replay this draft model as draft_model (folder or cached HF id; repeatable). Needs advise[draft].")
@click.option("--max-draft-requests", type=click.IntRange(1, limits.MAX_REPLAY_REQUESTS), default=64, show_default=True,
              help="Run each draft over a seeded sample of this many requests (with 95% intervals).")
@click.option("--no-replay", is_flag=True, help="Skip the ngram/suffix replays (and with them the sweep).")
@click.option("--no-sweep", is_flag=True, help="Skip the k / lookup-window sweep (faster).")
@click.option("--max-replay-requests", type=click.IntRange(1, limits.MAX_REPLAY_REQUESTS), default=20_000, show_default=True,
              help="Replay a seeded sample of this many requests when the log has more (with 95% intervals).")
@click.option("--no-recommend", is_flag=True, help="Measure only; skip the recommendation engine.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON on stdout.")
@click.option("-o", "--out", type=OUTPUT_PATH, help="Also write the JSON report to FILE (- : stdout).")
@click.option("--checklist", type=OUTPUT_PATH, help="Write the pre-deployment checklist (Markdown) to FILE (- : stdout).")
@click.option("--html", "html_path", type=OUTPUT_PATH,
              help="Write the report as one self-contained HTML page with plots to FILE (- : stdout; docs/html-report.md).")
@click.option("--no-progress", is_flag=True, help="Never show a progress bar.")
@click.option("--workers", type=click.IntRange(1, limits.MAX_WORKERS), default=1, show_default=True,
              help="Processes that tokenize and measure, threads for the ngram replay (the report is the same; "
                   "only the speed changes).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", metavar="[ADDRESS]",
              help="Collect the files as parallel shards on a Ray cluster (auto, host:port, ray://host:port; "
                   "alone: a local one) into the same report. Needs advise[ray] (docs/ray.md).")
def profile_command(logs: tuple[str, ...], fmt: str | None, strict: bool, tokenizer: str | None, model: str | None,
                    gpu: str | None, tp: int, max_num_seqs: int | None, request_rate: float | None,
                    replicas: int, routing: str, history: str | None, block_size: int, hash_block_size: int, speculative_config: dict | None, drafts: tuple[str, ...],
                    max_draft_requests: int, no_replay: bool,
                    no_sweep: bool, max_replay_requests: int, no_recommend: bool, as_json: bool, out: str | None,
                    checklist: str | None, html_path: str | None, no_progress: bool, workers: int,
                    ray_address: str | None) -> None:
    """Profile LOGS (files, .gz, fsspec URLs such as s3://bucket/logs/*.jsonl.gz, globs, or - for stdin) and
    advise on APC and speculative decoding."""
    from advisor.profile import ProfileOptions, build_profile

    if ray_address is not None:
        from advisor.shards import LOCAL, is_address

        if not is_address(ray_address):  # `--ray LOGS...`: the value click took is the first log
            logs, ray_address = (ray_address, *logs), LOCAL
    if not logs:
        raise click.UsageError("Missing argument 'LOGS...'.")

    if speculative_config is not None and no_replay:
        raise ConfigError("--speculative-config asks for a replay: drop --no-replay")
    if drafts and no_replay:
        raise ConfigError("--draft asks for a replay: drop --no-replay")
    if drafts and speculative_config is not None:
        raise ConfigError("--draft replays beside the sweep; --speculative-config replays one config: pick one")
    if checklist and no_recommend:
        raise ConfigError("--checklist needs the recommendation: drop --no-recommend")
    stdout_output(as_json, out, checklist, html_path)  # refused before the logs are read, not after
    options = ProfileOptions(
        paths=logs, fmt=fmt, strict=strict, tokenizer=tokenizer, model=model, gpu=gpu, tp=tp, max_num_seqs=max_num_seqs,
        request_rate=request_rate, replicas=replicas, routing=routing, history=history, block_size=block_size,
        hash_block_size=hash_block_size, speculative_config=speculative_config, drafts=drafts,
        max_draft_requests=max_draft_requests, replay=not no_replay,
        sweep=not no_sweep,
        max_replay_requests=max_replay_requests, recommend=not no_recommend,
    )
    show_bar = not no_progress and sys.stderr.isatty() and "-" not in logs
    if show_bar:
        with click.progressbar(length=None, label="requests", file=sys.stderr, show_pos=True) as bar:  # type: ignore[arg-type]
            profile = build_profile(options, progress=bar.update, draft_progress=_DraftBar(), workers=workers,
                                    ray_address=ray_address)
    else:
        profile = build_profile(options, workers=workers, ray_address=ray_address)
    write_outputs(profile.report, as_json=as_json, out=out, checklist=checklist, html=html_path)


def stdout_output(as_json: bool, out: str | None, checklist: str | None, html: str | None) -> str | None:
    """The output that takes stdout in place of the terminal view (`--json`, or an output FILE given as -),
    None for the terminal view. Two would interleave on one stream: ConfigError."""
    asked = [flag for flag, wanted in (("--json", as_json), ("-o -", out == STDOUT), ("--checklist -", checklist == STDOUT),
                                       ("--html -", html == STDOUT)) if wanted]
    if len(asked) > 1:
        raise ConfigError(f"only one output can go to stdout: {' and '.join(asked)}")
    return asked[0] if asked else None


def write_outputs(report: Report, as_json: bool, out: str | None, checklist: str | None,
                  html: str | None = None) -> None:
    """The outputs of one report, shared by `advise LOGS` and `advise show`: JSON file, checklist, HTML, and on
    stdout the terminal view, or the one output asked for there (`--json`, or FILE -: to pipe the checklist
    into a review or the JSON into a config repo)."""
    from advisor.emit.checklist import render_checklist
    from advisor.emit.terminal import render_terminal
    from advisor.report import dumps

    on_stdout = stdout_output(as_json, out, checklist, html)
    if checklist and report.recommendation is None:
        raise ConfigError("--checklist needs the recommendation: this report was profiled with --no-recommend")
    document = dumps(report)
    if out:
        _write(out, document)
    if as_json:
        _write(STDOUT, document)
    if checklist:
        _write(checklist, render_checklist(report).encode())
    if html:
        from advisor.emit.html import render_html

        _write(html, render_html(report).encode())
    if on_stdout is None:
        click.echo(render_terminal(report, style=sys.stdout.isatty()), nl=False)


def _write(path: str, data: bytes) -> None:
    """`data` into the file at `path`, or on stdout for -."""
    if path == STDOUT:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with open(path, "wb") as handle:
        handle.write(data)
