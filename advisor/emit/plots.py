"""The HTML report's plots: matplotlib figures written as inline SVG, one function per figure.

Each function takes plain series (already read from the report document) and returns the SVG text, so the
page needs no network, no script and no font download: text stays text (`svg.fonttype: none`, rendered with
the viewer's sans-serif font), which also keeps titles searchable and testable in the DOM. matplotlib is
imported only here, and only when an HTML report is rendered.
"""
from __future__ import annotations

import io
import re
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

# One palette for the whole page (the CSS uses the same values): "without" is always grey, the
# recommended or speculative setting blue, output lengths orange.
GREY = "#6b7280"
BLUE = "#2563eb"
ORANGE = "#ea580c"
GREEN = "#059669"
SERIES = ("#2563eb", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#ca8a04", "#dc2626", "#4b5563")
SUFFIX_COLOUR = ORANGE
FIGSIZE = (6.4, 3.6)  # inches; scaled by the page's CSS to the column width

_STYLE = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"],
    "font.size": 10,
    "axes.titlesize": 11.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.titlepad": 10,
    "axes.labelsize": 10,
    "axes.labelcolor": "#1f2937",
    "axes.edgecolor": "#9ca3af",
    "axes.grid": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.color": "#e5e7eb",
    "grid.linewidth": 0.8,
    "xtick.color": "#374151",
    "ytick.color": "#374151",
    "legend.frameon": False,
    "legend.fontsize": 9,
    "lines.linewidth": 2.0,
    "lines.markersize": 5,
}


@dataclass(frozen=True)
class Line:
    """One named series of a line plot."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    colour: str
    highlight: int | None = None  # index of a point to mark (the recommended setting)


@contextmanager
def _figure(name: str, ncols: int = 1):
    """A matplotlib Figure (no pyplot: no global state, no GUI backend) with the report's style."""
    import matplotlib
    from matplotlib.figure import Figure

    # A fixed salt: the SVG's hashed ids are the same on every run (a page re-rendered by `advise show` is
    # byte-identical).
    with matplotlib.rc_context({**_STYLE, "svg.hashsalt": name}):
        figure = Figure(figsize=(FIGSIZE[0] * (1.0 if ncols == 1 else 1.55), FIGSIZE[1]), layout="constrained")
        figure.set_label(name)
        axes = figure.subplots(1, ncols)
        yield figure, axes


def _svg(figure) -> str:
    """The figure as SVG text without the XML prolog (it is inlined into HTML).

    matplotlib numbers its element ids per figure (figure_1, patch_1, ...): every id and every reference to
    one (url(#...), href="#...") gets the figure's name (its label) as prefix, so one page holds several figures
    without duplicate ids.
    """
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    name = figure.get_label()
    text = re.sub(r'\bid="([^"]+)"', rf'id="{name}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{name}-\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{name}-\1"', text)


def _count(value: float, _position=None) -> str:
    """Tick labels for counts: 512, 2k, 16k, 1.5M (never 10^3 notation)."""
    for threshold, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= threshold:
            return f"{value / threshold:g}{suffix}"
    return f"{value:g}"


def _tokens(value: float, _position=None) -> str:
    """Tick labels on a log2 token axis: powers of two from 1024 on as 1k, 4k, 128k (as context sizes are said)."""
    if value >= 1024 and value % 1024 == 0:
        return f"{value / 1024:g}k"
    return f"{value:g}"


def _percent_axis(axis) -> None:
    from matplotlib.ticker import PercentFormatter

    axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))


def apc_curve(capacity_blocks: Sequence[int], hit_rates: Sequence[float], block_size: int,
              deployed_blocks: int | None, deployed_hit_rate: float | None, ceiling: float | None) -> str:
    """Prefix-cache hit rate against KV cache size (blocks, log scale), the deployment's capacity marked."""
    with _figure("apc") as (figure, ax):
        ax.plot(capacity_blocks, hit_rates, color=BLUE, marker="o", label="APC replay")
        if ceiling is not None:
            ax.axhline(ceiling, color=GREY, linestyle="--", linewidth=1.2, label=f"unlimited cache: {ceiling:.0%}")
        if deployed_blocks is not None and deployed_hit_rate is not None:
            ax.plot([deployed_blocks], [deployed_hit_rate], marker="*", markersize=14, color=GREEN, linestyle="none",
                    label=f"this GPU's capacity: {deployed_hit_rate:.0%}")
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(_count))
        ax.set_ylim(0, max(1e-3, *(h for h in hit_rates), ceiling or 0) * 1.15)
        _percent_axis(ax.yaxis)
        ax.set_xlabel(f"KV cache size (blocks of {block_size} tokens, log scale)")
        ax.set_ylabel("prompt tokens from cache")
        ax.set_title("Prefix-cache hit rate vs cache size")
        ax.legend(loc="lower right")
        return _svg(figure)


def speculative_by_k(lines: Sequence[Line], acceptance: Sequence[Line]) -> str:
    """Two panels over num_speculative_tokens: acceptance rate, and tokens per target step."""
    with _figure("spec", ncols=2) as (figure, (left, right)):
        for ax, series in ((left, acceptance), (right, lines)):
            for line in series:
                ax.plot(line.x, line.y, color=line.colour, marker="o", label=line.label)
                if line.highlight is not None:
                    ax.plot([line.x[line.highlight]], [line.y[line.highlight]], marker="*", markersize=15,
                            color=GREEN, linestyle="none", zorder=5)
            ks = sorted({k for line in series for k in line.x})
            if ks and ks[-1] > 12:  # vLLM's suffix default k=24 beside a 1..8 sweep
                ax.set_xscale("log", base=2)
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.minorticks_off()
            ax.set_xlabel("num_speculative_tokens (k)")
        left.set_ylim(0, 1.05)
        _percent_axis(left.yaxis)
        left.set_ylabel("drafted tokens accepted")
        left.set_title("Acceptance rate by k")
        right.set_ylim(bottom=1.0)
        right.set_ylabel("tokens per target step")
        right.set_title("Tokens per step by k")
        handles, labels = right.get_legend_handles_labels()
        if any(line.highlight is not None for line in lines):
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], marker="*", markersize=12, color=GREEN, linestyle="none"))
            labels.append("recommended")
        figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
        return _svg(figure)


def tpot_by_concurrency(concurrency: Sequence[int], baseline_ms: Sequence[float], speculative_ms: Sequence[float],
                        candidate: str, recommended: bool, typical_batch: float | None,
                        peak_batch: float | None) -> str:
    """Predicted TPOT against concurrency, without speculation and with the candidate; observed load marked."""
    with _figure("tpot") as (figure, ax):
        ax.plot(concurrency, baseline_ms, color=GREY, marker="o", label="no speculation")
        ax.plot(concurrency, speculative_ms, color=BLUE, marker="o",
                label=candidate + ("" if recommended else " (not recommended)"))
        marks = [(typical_batch, "typical"), (peak_batch, "peak")]
        if typical_batch and peak_batch and abs(peak_batch - typical_batch) <= 0.05 * peak_batch:
            marks = [(peak_batch, "typical and peak")]  # one line, one label
        for batch, name in marks:
            if batch:
                ax.axvline(max(batch, 1.0), color=GREEN, linestyle=":", linewidth=1.4)
                ax.annotate(f"{name} load (batch {batch:.1f})", (max(batch, 1.0), 0.5),
                            xycoords=("data", "axes fraction"), xytext=(-3, 0), textcoords="offset points",
                            rotation=90, ha="right", va="center", fontsize=8.5, color=GREEN)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(concurrency), [str(c) for c in concurrency])
        ax.minorticks_off()
        ax.set_ylim(0, max(*baseline_ms, *speculative_ms) * 1.1)
        ax.set_xlabel("concurrent requests (log scale)")
        ax.set_ylabel("TPOT (ms per output token)")
        ax.set_title("Predicted TPOT by concurrency")
        ax.legend(loc="upper center")
        return _svg(figure)


def length_histograms(input_hist: tuple[Sequence[float], Sequence[int]] | None,
                      output_hist: tuple[Sequence[float], Sequence[int]] | None) -> str:
    """Input and output token lengths as histograms over log2 bins (requests per bin).

    A zero-length bin [0, 1) is drawn from 1/2 on the log axis; the x range spans the occupied bins of both
    histograms (empty bins at either end dropped).
    """
    from matplotlib.ticker import FuncFormatter

    series = []
    for name, hist, colour in (("input (prompt)", input_hist, BLUE), ("output (completion)", output_hist, ORANGE)):
        if hist is not None:
            edges = list(hist[0])
            if edges[0] == 0:
                edges[0] = edges[1] / 2
            series.append((name, edges, list(hist[1]), colour))
    occupied = [(edges[i], edges[i + 1]) for _, edges, counts, _ in series for i, c in enumerate(counts) if c]
    with _figure("lengths") as (figure, ax):
        for name, edges, counts, colour in series:
            ax.stairs(counts, edges, fill=True, alpha=0.25, color=colour)
            ax.stairs(counts, edges, color=colour, linewidth=1.8, label=name)
        ax.set_xscale("log", base=2)
        if occupied:
            ax.set_xlim(min(lo for lo, _ in occupied) / 1.15, max(hi for _, hi in occupied) * 1.15)
        ax.xaxis.set_major_formatter(FuncFormatter(_tokens))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("tokens per request (log2 bins)")
        ax.set_ylabel("requests")
        ax.set_title("Prompt and completion lengths")
        ax.legend(loc="best")
        return _svg(figure)


def _duration(seconds: float) -> str:
    """A bin width as people say it: 10 s, 5 min, 6 h, 2 d."""
    for size, unit in ((86400.0, "d"), (3600.0, "h"), (60.0, "min")):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def arrival_rate(bin_s: float, counts: Sequence[int], mean_rate: float | None) -> str:
    """Requests per second (per minute or hour for sparse logs) in consecutive bins of `bin_s` seconds."""
    span = len(counts) * bin_s
    unit, scale = next(((name, size) for name, size in (("hours", 3600.0), ("minutes", 60.0))
                        if span > 2 * size), ("seconds", 1.0))
    peak = max(counts) / bin_s
    rate_unit, per = next(((name, size) for name, size in (("second", 1.0), ("minute", 60.0))
                           if peak * size >= 1), ("hour", 3600.0))
    edges = [i * bin_s / scale for i in range(len(counts) + 1)]
    rates = [count / bin_s * per for count in counts]
    with _figure("arrivals") as (figure, ax):
        ax.stairs(rates, edges, fill=True, alpha=0.25, color=BLUE)
        ax.stairs(rates, edges, color=BLUE, linewidth=1.5, label=f"per {_duration(bin_s)} bin")
        if mean_rate is not None:
            ax.axhline(mean_rate * per, color=GREY, linestyle="--", linewidth=1.2,
                       label=f"mean {mean_rate * per:.3g} requests per {rate_unit}")
        ax.set_xlim(0, edges[-1])
        ax.set_ylim(bottom=0)
        ax.set_xlabel(f"time since the first request ({unit})")
        ax.set_ylabel(f"requests per {rate_unit}")
        ax.set_title("Arrival rate over time")
        figure.legend(loc="outside lower center", ncols=2)
        return _svg(figure)
