"""The HTML report: one self-contained page rendered from the report document alone.

Plots (advisor.emit.plots, inline SVG) sit beside the figures they show; the recommendation, its evidence
and confidence, the emitted configs and the checklist follow. Nothing is fetched when the page is viewed (no
script, no CDN, no web font), it prints on paper (print CSS), and it carries no prompt or completion text:
the document it renders holds only counts, lengths, hashes and rates. A plot whose data the profile could not
compute is replaced by the reason (the report's `disabled_analyses`, or the option that skipped it).
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from advisor.emit import plots
from advisor.emit.terminal import counted
from advisor.report import Distribution, Replay, Report

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class Figure:
    """One plot of the page: its SVG, or why there is none."""

    key: str
    title: str
    svg: str | None
    missing: str | None = None


def _disabled_reason(report: Report, *analyses: str) -> str | None:
    for item in report.disabled_analyses:
        if item.analysis in analyses:
            return f"{item.analysis} disabled: {item.reason}"
    return None


def _apc_figure(report: Report) -> Figure:
    title = "Prefix-cache hit rate vs cache size"
    apc = report.apc
    points = sorted((p.capacity_blocks, p.hit_rate) for p in apc.curve if p.hit_rate is not None) if apc else []
    if not points:
        reason = _disabled_reason(report, "prefix sharing and APC") or "the APC replay did not run"
        return Figure("apc", title, None, reason)
    deployed = apc.at_capacity
    svg = plots.apc_curve([p[0] for p in points], [p[1] for p in points], apc.ceiling.block_size,
                          deployed.capacity_blocks if deployed else None, apc.hit_rate, apc.ceiling.hit_rate)
    return Figure("apc", title, svg)


def _setting_name(replay: Replay) -> str:
    config = replay.config
    if replay.method == "suffix":
        return "suffix (vLLM defaults)"
    if "prompt_lookup_min" in config:
        return f"{replay.method} window {config['prompt_lookup_min']}-{config['prompt_lookup_max']}"
    if replay.draft is not None:  # one line per draft: two drafts' acceptance must not share a line
        return "draft " + replay.draft.model.rstrip("/").rsplit("/", 1)[-1]
    return replay.method


def _speculative_figure(report: Report) -> Figure:
    title = "Acceptance and tokens per step by k"
    replays = [r for r in (*report.replay_sweep, *report.replay) if r.tokens_per_step is not None]
    if not replays:
        reason = _disabled_reason(report, "n-gram overlap and speculative replay")
        if reason is None and not report.options.replay:
            reason = "the speculative replays were skipped (--no-replay)"
        return Figure("speculative", title, None, reason or "the replays found no decode steps")
    recommended = dict(report.recommendation.speculative_config or {}) if report.recommendation else {}
    recommended.pop("num_speculative_tokens_per_batch_size", None)
    by_setting: dict[str, dict[int, Replay]] = {}
    for replay in replays:
        by_setting.setdefault(_setting_name(replay), {})[replay.config["num_speculative_tokens"]] = replay
    tokens, acceptance = [], []
    ngram_colours = iter(plots.SERIES)
    for name, by_k in by_setting.items():
        ks = sorted(by_k)
        colour = plots.SUFFIX_COLOUR if name.startswith("suffix") else next(ngram_colours)
        highlight = next((i for i, k in enumerate(ks) if by_k[k].config == recommended), None)
        tokens.append(plots.Line(name, ks, [by_k[k].tokens_per_step for k in ks], colour, highlight))
        acceptance.append(plots.Line(name, ks, [by_k[k].acceptance_rate or 0.0 for k in ks], colour, highlight))
    return Figure("speculative", title, plots.speculative_by_k(tokens, acceptance))


def _tpot_figure(report: Report) -> Figure:
    title = "Predicted TPOT by concurrency"
    recommendation = report.recommendation
    if recommendation is None:
        return Figure("tpot", title, None, "the recommendation engine did not run (--no-recommend)")
    curve = recommendation.tpot_by_concurrency
    if curve is None:
        return Figure("tpot", title, None,
                      "no speculative candidate to compare: no replayed lookup setting and no prior for this model")
    batch = recommendation.predicted.batch
    svg = plots.tpot_by_concurrency(
        [r.concurrency for r in curve.rows], [r.baseline_tpot_ms for r in curve.rows],
        [r.speculative_tpot_ms for r in curve.rows], curve.candidate, curve.recommended, batch.typical, batch.peak,
    )
    return Figure("tpot", title, svg)


def _histogram(distribution: Distribution | None) -> tuple[tuple[float, ...], tuple[int, ...]] | None:
    if distribution is None or not distribution.count or len(distribution.histogram.edges) < 2:
        return None
    return distribution.histogram.edges, distribution.histogram.counts


def _lengths_figure(report: Report) -> Figure:
    title = "Prompt and completion lengths"
    input_hist, output_hist = _histogram(report.lengths.input), _histogram(report.lengths.output)
    if input_hist is None and output_hist is None:
        reason = _disabled_reason(report, "length distributions") or "no token lengths in the log"
        return Figure("lengths", title, None, reason)
    return Figure("lengths", title, plots.length_histograms(input_hist, output_hist))


def _arrivals_figure(report: Report) -> Figure:
    title = "Arrival rate over time"
    arrivals = report.arrivals
    if arrivals is None or not arrivals.counts_per_bin or not arrivals.bin_s:
        reason = _disabled_reason(report, "arrival rate and burstiness") or "no arrival times in the log"
        return Figure("arrivals", title, None, reason)
    return Figure("arrivals", title, plots.arrival_rate(arrivals.bin_s, arrivals.counts_per_bin, arrivals.mean_rate_rps))


def figures(report: Report) -> dict[str, Figure]:
    """Every plot of the page by key, in page order; a Figure without svg says why it is missing."""
    built = (_apc_figure(report), _speculative_figure(report), _tpot_figure(report), _lengths_figure(report),
             _arrivals_figure(report))
    return {figure.key: figure for figure in built}


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}%"


def _num(value: Any, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value:,}{unit}"


def _sig(value: float | None) -> str:
    """Three significant digits for rates that span 0.0006 to 300 req/s (never 0.00 nor 1.23e+03)."""
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _checklist_sections(markdown: str) -> list[tuple[str, list[str]]]:
    """The checklist's Markdown (emit.checklist) as (heading, items) from its `## ` headings and `- [ ] ` items.

    Its Evidence section is left out: the page shows the evidence beside the recommendation.
    """
    sections: list[tuple[str, list[str]]] = []
    for line in markdown.splitlines():
        if line.startswith("## "):
            sections.append((line[3:], []))
        elif sections and line.startswith("- [ ] "):
            sections[-1][1].append(line[6:])
    return [(title, items) for title, items in sections if items]


def _inline(text: str) -> str:
    """Escapes `text` and renders the checklist's inline Markdown: `code` and **bold**."""
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def render_html(report: Report) -> str:
    """The whole page for one report document (with its checklist when the recommendation ran)."""
    import jinja2
    from markupsafe import Markup

    from advisor.emit.checklist import render_checklist

    source = resources.files("advisor").joinpath("data", TEMPLATE).read_text(encoding="utf-8")
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                                     lstrip_blocks=True)
    environment.filters["pct"] = _pct
    environment.filters["num"] = _num
    environment.filters["counted"] = counted
    environment.filters["sig"] = _sig
    environment.filters["inline"] = lambda text: Markup(_inline(text))
    environment.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2)
    environment.filters["compact_json"] = lambda value: json.dumps(value)
    overlap = report.overlap
    return environment.from_string(source).render(
        report=report,
        figures={key: (Markup(f.svg) if f.svg else None, f) for key, f in figures(report).items()},
        recommendation=report.recommendation,
        checklist=_checklist_sections(render_checklist(report)) if report.recommendation else [],
        overlap_in_prompt=list(zip(overlap.n, overlap.prompt_share)) if overlap else [],
    )
