"""The pre-deployment checklist (Markdown): every check of the seed guidance, filled with this workload's
numbers. docs/engine.md maps each item to the guidance sentence it implements and to the lint rule, if any,
that checks it mechanically.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from advisor.engine.decide import cached_share, hit_ratio

if TYPE_CHECKING:
    from advisor.engine.decide import Recommendation


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render_checklist(report: dict, recommendation: Recommendation) -> str:
    """Markdown with one checkbox per check; numbers from the report and the recommendation."""
    lengths = report.get("lengths") or {}
    total = lengths.get("total") or {}
    output = lengths.get("output") or {}
    apc = report.get("apc") or {}
    overlap4 = ((report.get("overlap") or {}).get("prompt") or {}).get("4")
    predicted = recommendation.predicted
    config = recommendation.speculative_config
    method = config.get("method") if config else None
    placeholders = [flag["flag"] for flag in recommendation.derived if flag["value"] == "YOUR_VALUE"]
    derived = "; ".join(f"`{f['flag']} {f['value']}` ({f['reason']})" for f in recommendation.derived)
    rate = predicted.get("request_rate", {})
    batch = predicted.get("batch", {})
    tpot = predicted.get("tpot_ms", {})

    sections: list[tuple[str, list[str]]] = [
        ("Before measuring", [
            f"Target model fixed: `{recommendation.model}` on {recommendation.gpu} x{recommendation.tp}"
            + (f" (assumed: {'; '.join(recommendation.assumptions)})" if recommendation.assumptions else ""),
            f"Business limits fixed before any benchmark: prompt + output p99.9 is {_num(total.get('p99_9'))} tokens, "
            f"output p99 {_num(output.get('p99'))} tokens; latency goal (TTFT / TPOT) written down",
            f"The request sample represents production: {(report.get('ingest') or {}).get('requests', 'n/a')} logged "
            "requests; do not guess performance numbers before choosing parameters",
        ]),
        ("Which bottleneck (decide before configuring)", [
            f"Prefix reuse: {_pct(cached_share(report))} of prompt tokens come from the prefix cache ("
            + ("APC replay at this GPU's capacity" if apc.get("hit_rate") is not None else "unlimited-cache ceiling")
            + f", ceiling {_pct(hit_ratio(apc.get('ceiling')) or hit_ratio((report.get('prefix') or {}).get('ceiling')))}); "
            f"APC only shortens prefill: predicted to save "
            f"{_num(predicted.get('ttft_ms', {}).get('apc_saving'), 1)} ms of TTFT",
            f"Output length: decode is {_pct(lengths.get('decode_share'))} of tokens (mean output "
            f"{_num(output.get('mean'))}); long generation is not helped by APC",
            f"Arrival pressure: {_num(rate.get('typical'), 2)} req/s typical, {_num(rate.get('peak'), 2)} at peak "
            f"({rate.get('source', 'n/a')}) -> batch {_num(batch.get('typical'), 1)} / {_num(batch.get('peak'), 1)}; "
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
            "Every YOUR_VALUE replaced (lint rule placeholder)"
            + (f": still open here: {', '.join(placeholders)}" if placeholders else ": none left in the emitted config"),
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
            f"Request rate and concurrency from the business load ({_num(rate.get('typical'), 2)} req/s here), not "
            "`--request-rate inf`, and not relaxed to get nicer numbers; the bench `--model` is the served model "
            "(lint rule bench-request-rate)",
            "Benchmark dataset: local file, `--num-prompts` <= its rows or `--no-oversample`, explicit "
            "`--temperature` (lint rules bench-dataset-missing, bench-oversample, bench-temperature)",
            "Read request, output-token and total-token throughput, TTFT, ITL and TPOT together; under speculation "
            "one streamed chunk carries several tokens, so ITL and TPOT diverge: judge by TPOT and E2EL",
            f"Predicted to check against: TPOT {_num(tpot.get('baseline'), 2)} ms -> {_num(tpot.get('candidate'), 2)} ms "
            f"at typical load (confidence {recommendation.confidence_level})",
            "When results get worse, check prompt prefixes, output lengths and the load distribution first, then "
            "decide whether to keep the config",
            "Checked against the vLLM version actually deployed (facts here are from vLLM 0.33)",
        ]),
    ]
    lines = [f"# Pre-deployment checklist: {recommendation.model}", ""]
    lines.append(f"Confidence: **{recommendation.confidence_level}** ({'; '.join(recommendation.confidence_reasons)})")
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
