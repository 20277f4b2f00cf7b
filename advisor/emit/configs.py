"""Renders the report's recommendation as what people paste: a `vllm serve` command, a `--config` YAML,
`LLM(...)` keyword arguments and JSON for config repositories.

Rules from vLLM itself (vllm-0.33.md): one JSON `--speculative-config` with `method` explicit, never the
removed legacy flags; in YAML, APC off must be written `no-enable-prefix-caching: true` because
`enable-prefix-caching: false` is silently dropped. The resource flags and their reasons come sized from
the engine (`advisor.engine.sizing`); a flag the logs could not size is left out, so every form runs as
printed, and the checklist says what to confirm. Nothing here decides: these are renderers of the document.
"""
from __future__ import annotations

import json
import shlex

from advisor.report import DerivedFlag, Emitted, Recommendation


def _json(config: dict) -> str:
    return json.dumps(config, separators=(", ", ": "))


def _set(flags: tuple[DerivedFlag, ...]) -> list[DerivedFlag]:
    """The flags with a value (the others are left out: vLLM's default applies)."""
    return [flag for flag in flags if flag.value is not None]


def serve_command(rec: Recommendation) -> str:
    """A `vllm serve` command, one argument per line."""
    parts = [f"vllm serve {shlex.quote(rec.target.model)}"]
    if rec.speculative_config is not None:
        parts.append(f"--speculative-config {shlex.quote(_json(rec.speculative_config))}")
    parts.append("--enable-prefix-caching" if rec.enable_prefix_caching else "--no-enable-prefix-caching")
    if rec.target.tp > 1:
        parts.append(f"--tensor-parallel-size {rec.target.tp}")
    parts.extend(f"{flag.flag} {flag.value}" for flag in _set(rec.derived_flags))
    return " \\\n  ".join(parts)


def config_yaml(rec: Recommendation) -> str:
    """A `vllm serve MODEL --config FILE` YAML; reasons as comments (left-out flags as comments only).

    The speculative config is written as JSON, which YAML reads as a flow mapping: one line, the same text
    as on the command line.
    """
    lines = []
    if rec.speculative_config is not None:
        lines.append(f"speculative-config: {_json(rec.speculative_config)}")
    # `enable-prefix-caching: false` would be silently dropped by vLLM's YAML loader.
    lines.append(("enable-prefix-caching" if rec.enable_prefix_caching else "no-enable-prefix-caching") + ": true")
    if rec.target.tp > 1:
        lines.append(f"tensor-parallel-size: {rec.target.tp}")
    for flag in rec.derived_flags:
        if flag.value is None:
            lines.append(f"# {flag.flag[2:]} not set: {flag.reason}")
        else:
            lines.append(f"# {flag.reason}")
            lines.append(f"{flag.flag[2:]}: {flag.value}")
    return "\n".join(lines) + "\n"


def llm_kwargs(rec: Recommendation) -> dict:
    """Keyword arguments for `vllm.LLM(...)`; flags left out are listed in the checklist."""
    kwargs: dict = {"model": rec.target.model, "enable_prefix_caching": rec.enable_prefix_caching}
    if rec.speculative_config is not None:
        kwargs["speculative_config"] = rec.speculative_config
    if rec.target.tp > 1:
        kwargs["tensor_parallel_size"] = rec.target.tp
    for flag in _set(rec.derived_flags):
        kwargs[flag.flag[2:].replace("-", "_")] = flag.value
    return kwargs


def config_json(rec: Recommendation) -> dict:
    """A JSON document for config repositories: serve arguments, and the flags left out with why."""
    args: dict = {"enable-prefix-caching": rec.enable_prefix_caching}
    if rec.speculative_config is not None:
        args["speculative-config"] = rec.speculative_config
    if rec.target.tp > 1:
        args["tensor-parallel-size"] = rec.target.tp
    undecided = {}
    for flag in rec.derived_flags:
        if flag.value is None:
            undecided[flag.flag[2:]] = flag.reason
        else:
            args[flag.flag[2:]] = flag.value
    return {"model": rec.target.model, "vllm": "0.33", "serve_args": args, "undecided": undecided,
            "reasons": {flag.flag[2:]: flag.reason for flag in rec.derived_flags}}


def render_configs(rec: Recommendation) -> Emitted:
    """All emitted forms of one recommendation (the document's `recommendation.emitted`)."""
    return Emitted(serve_command=serve_command(rec), config_yaml=config_yaml(rec), llm_kwargs=llm_kwargs(rec),
                   config_json=config_json(rec))
