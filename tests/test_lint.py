"""advise lint: one broken and one good example per rule (tests/lint_corpus), plus parsing details.

Rule semantics follow vLLM 0.33 (/work/shared/reference/vllm-0.33.md): SpeculativeConfig in
vllm/config/speculative.py forbids unknown keys (pydantic extra="forbid"), removed legacy flags make argparse
stop, and `enable-prefix-caching: false` in a --config YAML is dropped by vllm/utils/argparse_utils.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine_reports
from advisor.report import dumps

from advisor.lint import RULES, check_speculative_config, lint_file, lint_text, split_commands

CORPUS = Path(__file__).parent / "lint_corpus"
OBSERVED_P999 = 5000  # the corpus' max-model-len files are judged against this observed p99.9


def _one(rule: str, kind: str) -> Path:
    files = sorted(CORPUS.glob(f"{rule}.{kind}.*"))
    assert len(files) == 1, f"expected exactly one {rule}.{kind}.* in {CORPUS}, found {files}"
    return files[0]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_bad_example_triggers_its_rule(rule: str) -> None:
    findings = lint_file(_one(rule, "bad"), observed_p999=OBSERVED_P999)
    hits = [f for f in findings if f.rule == rule]
    assert hits, f"{rule}: no finding in {[f.rule for f in findings]}"
    assert all(f.severity == RULES[rule][0] for f in hits)
    assert all(len(f.message) > 40 for f in hits), "a finding must say why and how to fix"


@pytest.mark.parametrize("rule", sorted(RULES))
def test_good_example_is_clean(rule: str) -> None:
    assert lint_file(_one(rule, "good"), observed_p999=OBSERVED_P999) == []


def test_every_corpus_file_belongs_to_a_rule() -> None:
    names = {path.name.split(".")[0] for path in CORPUS.iterdir() if path.is_file()}
    assert names == set(RULES)


def test_continuations_multiple_commands_and_lines() -> None:
    text = (
        "# deploy\n"
        "vllm serve m \\\n"
        "  --num-speculative-tokens 4\n"
        "\n"
        "echo done && vllm serve m --speculative-config '{\"method\": \"medusa\"}'\n"
    )
    commands, _ = split_commands(text)
    assert [c.line for c in commands] == [2, 5]
    findings = lint_text(text)
    assert {(f.rule, f.line) for f in findings} >= {("legacy-flag", 2), ("removed-method", 5)}


def test_flag_equals_value_and_unknown_key_suggestion() -> None:
    findings = lint_text("vllm serve m --speculative-config='{\"method\": \"ngram\", \"num_speculative_tokens\": 2, "
                         "\"prompt_lookup_mn\": 2}'")
    [unknown] = [f for f in findings if f.rule == "unknown-key"]
    assert "prompt_lookup_min" in unknown.message


def test_config_yaml_reference_reports_yaml_findings(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text("max-model-len: 4096\nenable_prefix_caching: false\n")
    (tmp_path / "run.sh").write_text("vllm serve m --config serve.yaml\n")
    findings = lint_file(tmp_path / "run.sh", observed_p999=6000)
    rules = {(f.rule, Path(f.file).name, f.line) for f in findings}
    assert ("yaml-apc-false", "serve.yaml", 2) in rules
    assert ("max-model-len-low", "run.sh", 1) in rules  # the YAML's value, judged at the command


def test_command_line_beats_yaml(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text("max-model-len: 4096\n")
    (tmp_path / "run.sh").write_text("vllm serve m --config serve.yaml --max-model-len 8192\n")
    assert lint_file(tmp_path / "run.sh", observed_p999=6000) == []


def test_shortcuts_complete_the_json() -> None:
    assert check_speculative_config({"method": "suffix"}, 1) == []
    findings = lint_text("vllm serve m --spec-method eagle3 --spec-tokens 3")
    assert [f.rule for f in findings] == ["missing-model"]


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from advisor.cli import cli

    runner = CliRunner()
    bad = runner.invoke(cli, ["lint", str(_one("removed-key", "bad"))])
    assert bad.exit_code == 1 and "[removed-key]" in bad.output
    assert runner.invoke(cli, ["lint", str(_one("removed-key", "good"))]).exit_code == 0
    warning_only = runner.invoke(cli, ["lint", str(_one("bench-temperature", "bad"))])
    assert warning_only.exit_code == 0
    report = tmp_path / "report.json"
    saved = engine_reports.report(**engine_reports.CODE_EDITING)  # prompt + output p99.9: 12,075 tokens
    report.write_bytes(dumps(saved))
    piped = runner.invoke(cli, ["lint", "-", "--json", "--report", str(report)], input="vllm serve m --max-model-len 8192\n")
    assert piped.exit_code == 1
    assert [f["rule"] for f in json.loads(piped.output)["findings"]] == ["max-model-len-low"]
    report.write_text('{"lengths": {"total": {"p99_9": 9000}}}')  # not a report of this schema
    stale = runner.invoke(cli, ["lint", "-", "--report", str(report)], input="vllm serve m\n")
    assert stale.exit_code == 3 and "schema_version" in stale.output
