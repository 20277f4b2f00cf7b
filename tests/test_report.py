"""The report document: every fixture's saved report re-renders byte for byte (`advise show`), reads back
equal to what was written, and everything it emits passes `advise lint` without an error.
"""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from advisor.cli import cli
from advisor.errors import EXIT_INPUT
from advisor.lint import check_speculative_config, lint_file, lint_text
from advisor.report import SCHEMA_VERSION, Report, ReportError, loads
from advisor.vllm_vocab import PLACEHOLDER

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_FILES = sorted(path.name for path in FIXTURES.iterdir() if path.is_file())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """One profile per fixture file: what it printed, its saved report and its checklist."""
    out = tmp_path_factory.mktemp("reports")
    results = {}
    for name in FIXTURE_FILES:
        saved, checklist = out / f"{name}.json", out / f"{name}.md"
        result = CliRunner().invoke(cli, [str(FIXTURES / name), "-o", str(saved), "--checklist", str(checklist)],
                                    catch_exceptions=False)
        assert result.exit_code == 0, (name, result.stderr)
        results[name] = {"stdout": result.stdout, "saved": saved, "checklist": checklist.read_text()}
    return results


def _show(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["show", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_show_prints_exactly_what_the_run_printed(runs, name: str, tmp_path: Path) -> None:
    run = runs[name]
    code, stdout, _ = _show(str(run["saved"]))
    assert code == 0 and stdout == run["stdout"]
    code, document, _ = _show(str(run["saved"]), "--json")
    assert code == 0 and document.encode() == run["saved"].read_bytes()
    checklist = tmp_path / "checklist.md"
    assert _show(str(run["saved"]), "--checklist", str(checklist))[0] == 0
    assert checklist.read_text() == run["checklist"]


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_saved_report_reads_back_equal(runs, name: str) -> None:
    text = runs[name]["saved"].read_bytes()
    report = loads(text, name)
    assert report.to_dict() == orjson.loads(text)
    assert Report.from_dict(report.to_dict()) == report


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_everything_a_fixture_emits_lints_without_error(runs, name: str, tmp_path: Path) -> None:
    recommendation = loads(runs[name]["saved"].read_bytes()).recommendation
    emitted = recommendation.emitted
    yaml_file = tmp_path / "serve.yaml"
    yaml_file.write_text(emitted.config_yaml)
    findings = lint_text(emitted.serve_command) + lint_file(yaml_file)
    if recommendation.speculative_config is not None:
        findings += check_speculative_config(emitted.llm_kwargs["speculative_config"], line=0)
    assert [f.render() for f in findings if f.severity == "error"] == []
    for text in (emitted.serve_command, emitted.config_yaml, orjson.dumps(emitted.llm_kwargs).decode(),
                 orjson.dumps(emitted.config_json).decode()):
        assert PLACEHOLDER not in text


def test_other_schema_versions_are_refused_with_what_to_do(runs, tmp_path: Path) -> None:
    data = orjson.loads(runs["code_editing.jsonl"]["saved"].read_bytes())
    old = tmp_path / "old.json"
    old.write_bytes(orjson.dumps({**data, "schema_version": 1}))
    code, _, stderr = _show(str(old))
    assert code == EXIT_INPUT
    assert f"schema_version 1, this advise reads version {SCHEMA_VERSION}" in stderr and "re-run" in stderr
    with pytest.raises(ReportError, match=r"report\.apc: unknown key\(s\) hit_rate"):
        Report.from_dict({**data, "apc": {**data["apc"], "hit_rate": 0.5}})
    with pytest.raises(ReportError, match=r"report\.lengths\.input: missing key p99"):
        Report.from_dict({**data, "lengths": {**data["lengths"], "input": {
            key: value for key, value in data["lengths"]["input"].items() if key != "p99"}}})
    with pytest.raises(ReportError, match=r"report\.ingest\.requests: expected int, got str"):
        Report.from_dict({**data, "ingest": {**data["ingest"], "requests": "many"}})
    assert _show(str(tmp_path / "missing.json"))[0] == EXIT_INPUT


def test_one_name_per_figure(runs) -> None:
    """Figures the old document wrote twice are written once (issue 8)."""
    data = orjson.loads(runs["code_editing.jsonl"]["saved"].read_bytes())
    assert "ceiling_hit_ratio" not in data["prefix"]
    assert "request_rate" not in data["arrivals"] and "detail" not in data["arrivals"]
    assert set(data["overlap"]) >= {"prompt_share", "context_share"} and "prompt" not in data["overlap"]
    assert "hit_rate" not in data["apc"] and data["apc"]["at_capacity"]["hit_rate"] is not None
    assert "candidates" not in data and data["recommendation"]["candidates"]
