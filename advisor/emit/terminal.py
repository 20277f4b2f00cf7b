"""The terminal view of a report: what `advise LOGS` and `advise show report.json` print.

A renderer of the document alone (no logs, no engine): `advise show` of a saved report prints exactly what
the run that wrote it printed. Never includes prompt or completion text.
"""
from __future__ import annotations

import click
import orjson

from advisor.report import Distribution, Report


def _fmt(value: int | float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        text = f"{value:,.{digits}f}"
    else:
        text = f"{value:,}"
    return f"{text}{unit}"


def counted(count: int, noun: str) -> str:
    """"1 request", "10,085 requests": the input counts of the terminal view and the HTML page."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}%"


class _Writer:
    def __init__(self, style: bool):
        self.lines: list[str] = []
        self.style = style

    def heading(self, text: str) -> None:
        self.lines.append("")
        self.lines.append(click.style(text, bold=True) if self.style else text)

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        self.lines.append(click.style(f"! {text}", fg="yellow") if self.style else f"! {text}")


def _distribution_row(name: str, dist: Distribution | None) -> str:
    if dist is None or not dist.count:
        return f"  {name:<8} n/a"
    cells = [_fmt(value, digits=0) for value in (dist.mean, dist.p50, dist.p90, dist.p99, dist.p99_9, dist.max)]
    return f"  {name:<8} " + " ".join(f"{cell:>9}" for cell in cells)


def render_terminal(report: Report, style: bool = False) -> str:
    """Human-readable report; `style` adds bold headings and yellow warnings (a TTY)."""
    out = _Writer(style)
    out.line(f"advise {report.advise_version}: profile of {', '.join(i.path for i in report.inputs)}")
    for item in report.inputs:
        out.line(f"  {item.path}: format {item.format}")
    tok = report.tokenizer
    if tok:
        out.line(f"  tokenizer: {tok.name}")
        if tok.warning:
            out.warn(tok.warning)

    ingest = report.ingest
    out.heading("Input")
    out.line(f"  {counted(ingest.requests, 'request')} from {counted(ingest.records_read, 'record')};"
             f" {ingest.skipped:,} skipped")
    for reason, count in sorted(ingest.skipped_by_reason.items(), key=lambda kv: -kv[1]):
        out.line(f"    {count:,} x {reason}")
    for problem in ingest.problems[:5]:
        out.line(f"    {problem}")
    if ingest.skipped > len(ingest.problems[:5]) and ingest.problems:
        out.line("    ... (all problems are listed in the JSON report, up to its limit)")
    if ingest.conversations:
        out.line(f"  {counted(ingest.conversations, 'conversation')}, {counted(ingest.turns, 'turn')}")
    if ingest.unfinished or ingest.truncated:
        out.line(f"  {ingest.unfinished:,} unfinished (no output logged), {ingest.truncated:,} cut by the log's length limit")
    for note in ingest.notes:
        out.line(f"  note: {note}")
    if report.row_sample:
        sample = report.row_sample
        out.line(f"  per-request figures from a seeded sample of {sample.requests:,} of"
                 f" {sample.population_requests:,} requests (p = {sample.requests / sample.population_requests:.3g});"
                 " estimates:")
        out.line(f"    {'; '.join(sample.estimated)}")
    for item in report.disabled_analyses:
        out.warn(f"{item.analysis} disabled: {item.reason}")

    lengths = report.lengths
    out.heading("Lengths (tokens)")
    out.line("  " + " " * 8 + " ".join(f"{h:>9}" for h in ("mean", "p50", "p90", "p99", "p99.9", "max")))
    out.line(_distribution_row("input", lengths.input))
    out.line(_distribution_row("output", lengths.output))
    out.line(_distribution_row("total", lengths.total))
    out.line(f"  decode share of all tokens: {_pct(lengths.decode_share)}")

    arrivals = report.arrivals
    if arrivals:
        out.heading("Arrivals")
        out.line(
            f"  {_fmt(arrivals.mean_rate_rps, ' req/s', 2)} over {_fmt(arrivals.duration_s, ' s', 0)};"
            f" peak {_fmt(arrivals.peak_rate_1s_rps, ' req/s (1 s)', 0)}, {_fmt(arrivals.peak_rate_60s_rps, ' req/s (60 s)', 2)}"
        )
        cv = arrivals.interarrival_cv
        kind = "" if cv is None else (" (bursty)" if cv > 1.2 else " (about Poisson)" if cv > 0.8 else " (regular)")
        out.line(f"  inter-arrival CV {_fmt(cv, digits=2)}{kind}; bench --burstiness {_fmt(arrivals.gamma_burstiness, digits=2)}")
        conc = arrivals.concurrency
        if conc:
            out.line(f"  concurrency from logged latencies: mean {_fmt(conc.mean, digits=1)}, p99 {_fmt(conc.p99, digits=0)}, max {_fmt(conc.max, digits=0)}")

    prefix = report.prefix
    if prefix:
        out.heading("Prefix sharing")
        out.line(
            f"  infinite-cache ceiling: {_pct(prefix.ceiling)} of prompt tokens"
            f" (block {prefix.block_size}, {_pct(prefix.requests_with_hit_share)} of requests hit)"
        )
        for top in prefix.top_prefixes[:5]:
            out.line(f"    prefix {top.hash}: {top.length_tokens:,} tokens x {top.requests:,} requests")
    apc = report.apc
    if apc:
        capacity = apc.at_capacity.capacity_blocks if apc.at_capacity else None
        out.line(
            f"  APC replay: hit rate {_pct(apc.hit_rate)} at {_fmt(capacity)} blocks"
            f" ({apc.capacity_source}); {apc.prefill_tokens_saved:,} prefill tokens saved"
        )
    split = report.routing
    if split and split.replicas > 1 and (apc or report.replay):
        out.line(f"  {split.replicas:,} replicas ({split.source}): APC and suffix replays per replica, each with its "
                 f"own cache and tree; {min(split.requests):,}-{max(split.requests):,} requests each")

    overlap = report.overlap
    if overlap:
        out.heading("Output n-gram overlap")
        out.line("  in prompt:        " + "  ".join(
            f"{n}-gram {_pct(share, 0)}" for n, share in zip(overlap.n, overlap.prompt_share)))
        if overlap.context_requests and overlap.context_share is not None:
            out.line("  in earlier turns: " + "  ".join(
                f"{n}-gram {_pct(share, 0)}" for n, share in zip(overlap.n, overlap.context_share)))

    sampling = report.sampling
    out.line(f"  sampling: greedy {_pct(sampling.greedy_share)}, temperature unknown for {_pct(sampling.temperature_missing_share)}")

    if report.replay:
        out.heading("Speculative decoding replay (what vLLM's counters would report)")
        for rep in report.replay:
            out.line(
                f"  {rep.method:<7} {orjson.dumps(rep.config).decode()}: acceptance {_pct(rep.acceptance_rate)},"
                f" mean acceptance length {_fmt(rep.mean_acceptance_length, digits=2)},"
                f" drafts on {_pct(rep.draft_step_share)} of steps, {_fmt(rep.tokens_per_step, digits=2)} tokens/step"
            )
    for draft in report.draft_replay:
        out.line(
            f"  draft {draft.model}: {draft.requests_replayed:,} of {draft.population_requests:,} requests "
            f"replayed ({draft.skipped_too_long:,} longer than its {draft.max_model_len:,} tokens skipped), "
            f"{_fmt(draft.tokens_per_s, ' tokens/s', 0)} on this CPU ({draft.dtype}); a full run would take "
            f"{_fmt((draft.full_run_cpu_s or 0) / 60, ' CPU-min', 1)}"
        )
        if draft.note:
            out.warn(draft.note)
    if report.replay_sweep:
        rows: dict[str, dict[int, float | None]] = {}
        for rep in report.replay_sweep:
            config = rep.config
            if rep.method == "suffix":
                name = "suffix (vLLM defaults)"
            elif rep.method == "draft_model":
                name = "draft " + str(config.get("model", "")).rstrip("/").rsplit("/", 1)[-1][:18]
            else:
                name = f"{rep.method} window {config.get('prompt_lookup_min')}-{config.get('prompt_lookup_max')}"
            rows.setdefault(name, {})[config["num_speculative_tokens"]] = rep.tokens_per_step
        ks = sorted({k for row in rows.values() for k in row})
        out.line("  sweep, tokens per target step by num_speculative_tokens:")
        out.line("    " + " " * 24 + "".join(f"{'k=' + str(k):>7}" for k in ks))
        for name, row in rows.items():
            out.line(f"    {name:<24}" + "".join(f"{_fmt(row.get(k), digits=2):>7}" for k in ks))

    rec = report.recommendation
    if rec:
        out.heading("Recommendation")
        spec = rec.speculative_config
        out.line(f"  speculative decoding: {orjson.dumps(spec).decode() if spec else 'none'}")
        out.line(f"  prefix caching: {'on' if rec.enable_prefix_caching else 'off'}")
        out.line(f"  confidence: {rec.confidence.level}")
        for item in rec.evidence:
            out.line(f"   - {item}")
        if rec.emitted is not None:
            out.line("")
            out.line(rec.emitted.serve_command)
    return "\n".join(out.lines) + "\n"
