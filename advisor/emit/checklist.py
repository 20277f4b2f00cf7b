"""The pre-deployment checklist (Markdown): every check of the seed guidance, filled with this workload's
numbers. docs/engine.md maps each item to the guidance sentence it implements and to the lint rule, if any,
that checks it mechanically.
"""
from __future__ import annotations

import json

from advisor.report import Report


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render_checklist(report: Report) -> str:
    """Markdown with one checkbox per check; numbers from the report and its recommendation.

    Raises ValueError for a report without a recommendation (`--no-recommend`): there is nothing to check.
    """
    recommendation = report.recommendation
    if recommendation is None:
        raise ValueError("the checklist needs the report's recommendation (profiled with --no-recommend?)")
    lengths = report.lengths
    total, output = lengths.total, lengths.output
    overlap4 = report.overlap.in_prompt(4) if report.overlap else None
    predicted = recommendation.predicted
    config = recommendation.speculative_config
    method = config.get("method") if config else None
    target = recommendation.target
    to_confirm = "; ".join(f"`{f.flag}` ({f.reason})" for f in recommendation.flags_to_confirm)
    derived = "; ".join(f"`{f.flag} {f.value}` ({f.reason})" if f.value is not None else f"`{f.flag}` left out ({f.reason})"
                        for f in recommendation.derived_flags)
    rate, batch, tpot = predicted.request_rate, predicted.batch, predicted.tpot_ms
    apc_measured = report.apc is not None and report.apc.hit_rate is not None

    sections: list[tuple[str, list[str]]] = [
        ("Before measuring", [
            f"Target model fixed: `{target.model}` on {target.gpu} x{target.tp}"
            + (f" (assumed: {'; '.join(recommendation.assumptions)})" if recommendation.assumptions else ""),
            f"Business limits fixed before any benchmark: prompt + output p99.9 is {_num(total.p99_9 if total else None)} "
            f"tokens, output p99 {_num(output.p99 if output else None)} tokens; latency goal (TTFT / TPOT) written down",
            f"The request sample represents production: {report.ingest.requests} logged "
            "requests; do not guess performance numbers before choosing parameters",
        ]),
        ("Which bottleneck (decide before configuring)", [
            f"Prefix reuse: {_pct(report.cached_share)} of prompt tokens come from the prefix cache ("
            + ("APC replay at this GPU's capacity" if apc_measured else "unlimited-cache ceiling")
            + (f", per replica: {report.routing.replicas} replicas, {report.routing.source}"
               if report.routing and report.routing.replicas > 1 else "")
            + f", ceiling {_pct(report.prefix_ceiling)}); "
            f"APC only shortens prefill: predicted to save "
            f"{_num(predicted.ttft_ms.apc_saving, 1)} ms of TTFT",
            f"Output length: decode is {_pct(lengths.decode_share)} of tokens (mean output "
            f"{_num(output.mean if output else None)}); long generation is not helped by APC",
            f"Arrival pressure: {_num(rate.typical, 2)} req/s typical, {_num(rate.peak, 2)} at peak "
            f"({rate.source}) -> batch {_num(batch.typical, 1)} / {_num(batch.peak, 1)}; "
            "speculation pays at low-to-medium load while decode is bandwidth-bound",
            f"Prompt reuse for ngram/suffix: {_pct(overlap4)} of output 4-grams occur in the prompt; without reusable "
            "fragments a lookup config existing is no reason to enable it",
        ]),
        ("Configuration", [
            "Speculation: " + (f"`--speculative-config '{json.dumps(config)}'` (method `{method}`, written explicitly)"
                               if config else "none recommended: " + recommendation.evidence[-1]),
            "One JSON `--speculative-config` (same keys as `LLM(speculative_config=...)`); no removed legacy flags "
            "(`--speculative-model`, `--num-speculative-tokens`, ...) and no key set through both a shortcut and the "
            "JSON (`advise lint` rules legacy-flag, duplicate-key)",
            "draft_model only with a draft sharing the target's vocabulary (lint rule vocab-mismatch)",
            "Values the logs could not decide confirmed for this deployment (left out: vLLM's default applies)"
            + (f": {to_confirm}" if to_confirm else ": none here"),
            f"Memory and concurrency flags confirmed for THIS machine, not copied from another: {derived}; "
            "`--kv-cache-memory-bytes`, if set, overrides `--gpu-memory-utilization` for the KV cache",
            "APC off only as `no-enable-prefix-caching: true` in YAML (`enable-prefix-caching: false` is ignored; lint "
            "rule yaml-apc-false); APC stays " + ("on" if recommendation.enable_prefix_caching else "off"),
        ]),
        ("A/B verification (`advise verify`)", [
            "\"The server starts\" is not \"the config helps\": run an A/B before rollout",
            "Only the speculative config changes between arms; compare methods one at a time by swapping "
            "`speculative_config` alone; never change APC, context length, memory fraction and concurrency in the "
            "same trial",
            "A fresh server per arm and trial (or a dev-mode prefix-cache reset): repeated runs hit the prefix cache "
            "and inflate results; record repeated runs apart from the independent A/B",
            f"Request rate and concurrency from the business load ({_num(rate.typical, 2)} req/s here), not "
            "`--request-rate inf`, and not relaxed to get nicer numbers; the bench `--model` is the served model "
            "(lint rule bench-request-rate)",
            "Benchmark dataset: local file, `--num-prompts` <= its rows or `--no-oversample`, explicit "
            "`--temperature` (lint rules bench-dataset-missing, bench-oversample, bench-temperature)",
            "Read request, output-token and total-token throughput, TTFT, ITL and TPOT together; under speculation "
            "one streamed chunk carries several tokens, so ITL and TPOT diverge: judge by TPOT and E2EL",
            f"Predicted to check against: TPOT {_num(tpot.baseline, 2)} ms -> {_num(tpot.candidate, 2)} ms "
            f"at typical load (confidence {recommendation.confidence.level})",
            "When results get worse, check prompt prefixes, output lengths and the load distribution first, then "
            "decide whether to keep the config",
            "Checked against the vLLM version actually deployed (facts here are from vLLM 0.33)",
        ]),
    ]
    lines = [f"# Pre-deployment checklist: {target.model}", ""]
    lines.append(f"Confidence: **{recommendation.confidence.level}** ({'; '.join(recommendation.confidence.reasons)})")
    lines.append("")
    for title, items in sections:
        lines.append(f"## {title}")
        lines.append("")
        lines.extend(f"- [ ] {item}" for item in items)
        lines.append("")
    lines.append("## Evidence")
    lines.append("")
    lines.extend(f"- {line}" for line in recommendation.evidence)
    return "\n".join(lines) + "\n"
