"""The report: one versioned JSON-ready document, and its terminal renderer.

`build_profile` produces the document; `--json` serialises it as is and the terminal view is only a renderer
over it, so a saved report can be re-rendered without recomputing (`advise show report.json`). Sections that a
stage did not fill are absent or null, and the renderer says why instead of showing a result.
"""
from __future__ import annotations

from typing import Any

import orjson

SCHEMA_VERSION = 1


def dumps(report: dict[str, Any]) -> bytes:
    """Serialise the report (orjson; numpy scalars and arrays allowed)."""
    return orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


def _fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        text = f"{value:,.{digits}f}"
    else:
        text = f"{value:,}"
    return f"{text}{unit}"


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}%"


class _Writer:
    def __init__(self, style: bool):
        self.lines: list[str] = []
        self.style = style

    def heading(self, text: str) -> None:
        import click

        self.lines.append("")
        self.lines.append(click.style(text, bold=True) if self.style else text)

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        import click

        self.lines.append(click.style(f"! {text}", fg="yellow") if self.style else f"! {text}")


def _distribution_row(name: str, dist: dict[str, Any] | None) -> str:
    if not dist or not dist.get("count"):
        return f"  {name:<8} n/a"
    cells = [_fmt(dist.get(key), digits=0) for key in ("mean", "p50", "p90", "p99", "p99_9", "max")]
    return f"  {name:<8} " + " ".join(f"{cell:>9}" for cell in cells)


def render_terminal(report: dict[str, Any], style: bool = False) -> str:
    """Human-readable report. Never includes prompt or completion text."""
    out = _Writer(style)
    inputs = report.get("inputs", [])
    out.line(f"advise {report.get('advise_version', '?')}: profile of {', '.join(i['path'] for i in inputs)}")
    for item in inputs:
        out.line(f"  {item['path']}: format {item['format']}")
    tok = report.get("tokenizer")
    if tok:
        out.line(f"  tokenizer: {tok['name']}")
        if tok.get("warning"):
            out.warn(tok["warning"])

    ingest = report["ingest"]
    out.heading("Input")
    out.line(f"  {ingest['requests']:,} requests from {ingest['records_read']:,} records; {ingest['skipped']:,} skipped")
    for reason, count in sorted(ingest.get("skipped_by_reason", {}).items(), key=lambda kv: -kv[1]):
        out.line(f"    {count:,} x {reason}")
    for problem in ingest.get("problems", [])[:5]:
        out.line(f"    {problem}")
    if ingest["skipped"] > len(ingest.get("problems", [])[:5]) and ingest.get("problems"):
        out.line("    ... (all problems are listed in the JSON report, up to its limit)")
    for item in report.get("disabled_analyses", []):
        out.warn(f"{item['analysis']} disabled: {item['reason']}")

    lengths = report.get("lengths")
    if lengths:
        out.heading("Lengths (tokens)")
        out.line("  " + " " * 8 + " ".join(f"{h:>9}" for h in ("mean", "p50", "p90", "p99", "p99.9", "max")))
        out.line(_distribution_row("input", lengths.get("input")))
        out.line(_distribution_row("output", lengths.get("output")))
        out.line(_distribution_row("total", lengths.get("total")))
        out.line(f"  decode share of all tokens: {_pct(lengths.get('decode_share'))}")

    arrivals = report.get("arrivals")
    if arrivals:
        out.heading("Arrivals")
        out.line(
            f"  {_fmt(arrivals.get('request_rate'), ' req/s', 2)} over {_fmt(arrivals.get('duration_s'), ' s', 0)};"
            f" peak {_fmt(arrivals.get('peak_rate_1s'), ' req/s (1 s)', 0)}, {_fmt(arrivals.get('peak_rate_60s'), ' req/s (60 s)', 2)}"
        )
        cv = arrivals.get("interarrival_cv")
        kind = "" if cv is None else (" (bursty)" if cv > 1.2 else " (about Poisson)" if cv > 0.8 else " (regular)")
        out.line(f"  inter-arrival CV {_fmt(cv, digits=2)}{kind}; bench --burstiness {_fmt(arrivals.get('burstiness_gamma_shape'), digits=2)}")
        conc = arrivals.get("concurrency")
        if conc:
            out.line(f"  concurrency from logged latencies: mean {_fmt(conc.get('mean'), digits=1)}, p99 {_fmt(conc.get('p99'), digits=0)}, max {_fmt(conc.get('max'), digits=0)}")

    prefix = report.get("prefix")
    if prefix:
        out.heading("Prefix sharing")
        out.line(
            f"  infinite-cache ceiling: {_pct(prefix.get('ceiling_hit_ratio'))} of prompt tokens"
            f" (block {prefix.get('block_size')}, {_pct(prefix.get('requests_with_hit_share'))} of requests hit)"
        )
        for top in prefix.get("top_prefixes", [])[:5]:
            out.line(f"    prefix {top['hash']}: {top['length_tokens']:,} tokens x {top['requests']:,} requests")
    apc = report.get("apc")
    if apc:
        out.line(
            f"  APC replay: hit rate {_pct(apc.get('hit_rate'))} at {apc.get('capacity_blocks'):,} blocks"
            f" ({apc.get('capacity_source', '')}); {apc.get('prefill_tokens_saved', 0):,} prefill tokens saved"
        )

    overlap = report.get("overlap")
    if overlap and overlap.get("prompt"):
        out.heading("Output n-gram overlap")
        shares = overlap["prompt"]
        out.line("  in prompt:        " + "  ".join(f"{n}-gram {_pct(shares[n], 0)}" for n in sorted(shares)))
        conv = overlap.get("conversation")
        if conv:
            out.line("  in earlier turns: " + "  ".join(f"{n}-gram {_pct(conv[n], 0)}" for n in sorted(conv)))

    sampling = report.get("sampling")
    if sampling and sampling.get("temperature"):
        temp = sampling["temperature"]
        out.line(f"  sampling: greedy {_pct(temp.get('greedy_share'))}, temperature unknown for {_pct(temp.get('missing_share'))}")

    replays = report.get("replay") or []
    if replays:
        out.heading("Speculative decoding replay (what vLLM's counters would report)")
        for rep in replays:
            out.line(
                f"  {rep['method']:<7} {orjson.dumps(rep['config']).decode()}: acceptance {_pct(rep['acceptance_rate'])},"
                f" mean acceptance length {_fmt(rep['mean_acceptance_length'], digits=2)},"
                f" drafts on {_pct(rep['draft_step_share'])} of steps, {_fmt(rep['tokens_per_step'], digits=2)} tokens/step"
            )
    sweep = report.get("replay_sweep") or []
    if sweep:
        rows: dict[str, dict[int, float | None]] = {}
        for rep in sweep:
            config = rep["config"]
            if rep["method"] == "suffix":
                name = "suffix (vLLM defaults)"
            else:
                name = f"{rep['method']} window {config.get('prompt_lookup_min')}-{config.get('prompt_lookup_max')}"
            rows.setdefault(name, {})[config["num_speculative_tokens"]] = rep["tokens_per_step"]
        ks = sorted({k for row in rows.values() for k in row})
        out.line("  sweep, tokens per target step by num_speculative_tokens:")
        out.line("    " + " " * 24 + "".join(f"{'k=' + str(k):>7}" for k in ks))
        for name, row in rows.items():
            out.line(f"    {name:<24}" + "".join(f"{_fmt(row.get(k), digits=2):>7}" for k in ks))

    rec = report.get("recommendation")
    if rec:
        out.heading("Recommendation")
        spec = rec.get("speculative_config")
        out.line(f"  speculative decoding: {orjson.dumps(spec).decode() if spec else 'none'}")
        out.line(f"  prefix caching: {'on' if rec.get('enable_prefix_caching') else 'off'}")
        conf = rec.get("confidence") or {}
        out.line(f"  confidence: {conf.get('level', 'n/a')}")
        for item in rec.get("evidence", []):
            out.line(f"   - {item}")
        emitted = rec.get("emitted") or {}
        if emitted.get("serve_command"):
            out.line("")
            out.line(emitted["serve_command"])
    return "\n".join(out.lines) + "\n"
