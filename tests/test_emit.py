"""Emitted configs: one JSON --speculative-config with an explicit method, YAML that really turns APC off,
LLM kwargs, JSON; derived resource flags with reasons; the checklist covers the seed guidance.

YAML semantics: vLLM's --config loader turns `key: true` into `--key` and drops `key: false`
(vllm-0.33.md section 2, "YAML pitfall"), so APC off must be `no-enable-prefix-caching: true`.
"""
from __future__ import annotations

import shlex
from dataclasses import replace

import pytest
import yaml

from advisor.emit import config_json, config_yaml, llm_kwargs, render_checklist, serve_command
from advisor.engine import decide
from advisor.engine.decide import _validate_speculative_config
from advisor.engine.sizing import derive_flags
from advisor.errors import ConfigError
from advisor.hardware import resolve_gpu, resolve_model
from advisor.lint import lint_text
from advisor.profile import recommend
from advisor.report import DerivedFlag, Recommendation
from advisor.vllm_vocab import LEGACY_FLAGS, PLACEHOLDER
from engine_reports import CHAT_MULTITURN, CODE_EDITING, report

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
FLAGS = (DerivedFlag("--max-model-len", 8192, "r1", False),
         DerivedFlag("--max-num-seqs", None, "r2", True))
BASE = decide(report(**CODE_EDITING))


def _rec(config: dict | None = NGRAM, apc: bool = True, flags: tuple[DerivedFlag, ...] = FLAGS[:1]) -> Recommendation:
    """The recommendation of a hand-built report with the config, APC setting and flags under test."""
    return replace(BASE, speculative_config=config, enable_prefix_caching=apc, derived_flags=flags)


def test_serve_command_has_one_json_config_and_no_legacy_flags() -> None:
    command = serve_command(_rec())
    tokens = shlex.split(command.replace("\\\n", " "))
    assert tokens.count("--speculative-config") == 1
    assert not set(tokens) & set(LEGACY_FLAGS)
    assert "--enable-prefix-caching" in tokens
    assert lint_text(command) == []


def test_yaml_turns_apc_off_the_way_vllm_reads_it() -> None:
    text = config_yaml(_rec(apc=False))
    data = yaml.safe_load(text)
    assert data["no-enable-prefix-caching"] is True and "enable-prefix-caching" not in data
    assert data["speculative-config"] == NGRAM
    assert data["max-model-len"] == 8192
    assert lint_text(text) == []


def test_yaml_without_speculation_is_valid_yaml() -> None:
    data = yaml.safe_load(config_yaml(_rec(config=None)))
    assert data == {"enable-prefix-caching": True, "max-model-len": 8192}


def test_flags_left_out_never_reach_a_command_and_are_listed_apart() -> None:
    rec = _rec(flags=FLAGS)
    kwargs = llm_kwargs(rec)
    assert kwargs["speculative_config"] == NGRAM and kwargs["max_model_len"] == 8192
    assert "max_num_seqs" not in kwargs
    document = config_json(rec)
    assert document["serve_args"]["max-model-len"] == 8192
    assert document["undecided"] == {"max-num-seqs": "r2"}
    assert "--max-num-seqs" not in serve_command(rec)
    assert "max-num-seqs" not in yaml.safe_load(config_yaml(rec))
    for text in (serve_command(rec), config_yaml(rec), str(kwargs)):
        assert PLACEHOLDER not in text


def test_invalid_speculative_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="disable_by_batch_size"):
        _validate_speculative_config({"method": "ngram", "num_speculative_tokens": 4, "disable_by_batch_size": 8})
    _validate_speculative_config(NGRAM)


def test_max_model_len_from_observed_p999_with_headroom() -> None:
    model = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    h100 = resolve_gpu("H100")
    small = report(**CODE_EDITING)
    small = replace(small, lengths=replace(
        small.lengths, total=replace(small.lengths.total, p99_9=3000, mean=900),
        input=replace(small.lengths.input, p99=2500)))
    flags = {f.flag: f for f in derive_flags(small, model, h100, False, 1, 20, False, 4)}
    assert flags["--max-model-len"].value == 3328  # 3300 rounded up to a multiple of 256
    assert "multiple of 256" in flags["--max-model-len"].reason
    assert flags["--max-num-seqs"].value == 32
    assert flags["--max-num-batched-tokens"].value == 3072
    assert flags["--gpu-memory-utilization"].value == 0.92 and not flags["--gpu-memory-utilization"].confirm
    large = replace(small, lengths=replace(small.lengths, total=replace(small.lengths.total, p99_9=20000)))
    flags = {f.flag: f for f in derive_flags(large, model, h100, True, 1, None, False, 0)}
    assert flags["--max-model-len"].value == 22528  # 22000 rounded up to a multiple of 1024
    assert flags["--max-num-seqs"].value is None and flags["--max-num-seqs"].confirm  # left out: vLLM's default
    assert flags["--gpu-memory-utilization"].value == 0.92 and flags["--gpu-memory-utilization"].confirm


def test_emitted_forms_of_a_recommendation_lint_clean() -> None:
    decided = recommend(report(**CODE_EDITING, model="meta-llama/Llama-3.1-8B-Instruct"))
    emitted = decided.recommendation.emitted
    assert lint_text(emitted.serve_command) == []
    assert lint_text(emitted.config_yaml) == []
    assert emitted.llm_kwargs["speculative_config"] == decided.recommendation.speculative_config


# Every check of the seed guidance (000_8c9563c4ce42b5f1.txt), by a phrase the checklist must contain.
SEED_CHECKS = [
    "Business limits fixed before any benchmark",
    "do not guess performance numbers",
    "Prefix reuse: 62% of prompt tokens come from the prefix cache",
    "APC only shortens prefill",
    "Output length: decode is",
    "Arrival pressure",
    "without reusable fragments",
    "One JSON `--speculative-config`",
    "no removed legacy flags",
    "sharing the target's vocabulary",
    "Values the logs could not decide confirmed",
    "Memory and concurrency flags confirmed for THIS machine",
    "`--kv-cache-memory-bytes`",
    "\"The server starts\" is not \"the config helps\"",
    "Only the speculative config changes between arms",
    "one at a time",
    "never change APC, context length, memory fraction and concurrency in the same trial",
    "repeated runs hit the prefix cache",
    "not `--request-rate inf`",
    "the bench `--model` is the served model",
    "TTFT, ITL and TPOT together",
    "ITL and TPOT diverge",
    "check prompt prefixes, output lengths and the load distribution first",
    "Checked against the vLLM version actually deployed",
]


def test_checklist_has_every_seed_check_with_numbers() -> None:
    text = render_checklist(recommend(report(**CHAT_MULTITURN)))
    missing = [phrase for phrase in SEED_CHECKS if phrase not in text]
    assert not missing
    assert "2.00 req/s" in text  # the workload's own rate
    assert text.count("- [ ]") >= 20
