"""Verify's history feeds the engine (advisor.engine.history): the real H200 verify record and hand-built
records, matched by model, GPU, tp and setting; the evidence names every record used or left out."""
from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import cli
from advisor.engine.calibration_data import DATA_DIR
from advisor.engine.decide import decide
from advisor.engine.history import gpu_of_device, read_history
from advisor.errors import InputError
from advisor.hardware import resolve_gpu
from advisor.report import Report
from engine_reports import CODE_EDITING, report

RECORD = json.loads((Path(__file__).parent / "data" / "gpu" / "h200_verify" / "record.json").read_text())
SOURCE = "history.jsonl:1 (2026-12-02T21:15:51+00:00)"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# A replayed setting of CODE_EDITING's sweep (tests/engine_reports.py)
REPLAYED_K4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


def _history(tmp_path: Path, *records: dict) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A folder named like the verify run's model (/root/model_l8: the Llama-3.1-8B shape it served)."""
    folder = tmp_path / "model_l8"
    folder.mkdir()
    shutil.copy(DATA_DIR / "shapes" / "llama-3.1-8b-shape-vocab-151669" / "config.json", folder)
    return folder


def _decide(model_dir: Path, history: Path, **options):
    profile = report(**CODE_EDITING, model=str(model_dir), gpu="H200", **options)
    return decide(profile), decide(replace(profile, verify_history=read_history(history)))


def _real_acceptance(tokens_per_step: float, logs: list[str]) -> dict:
    """The real record with its candidate arm turned into a real-acceptance run of a replayed setting."""
    record = copy.deepcopy(RECORD)
    record["inputs"]["logs"] = logs
    arm = record["protocol"]["arms"]["candidate"]
    arm["speculative_config"], arm["synthetic_acceptance"] = dict(REPLAYED_K4), False
    measured = record["verdict"]["measured"]["candidate"]
    measured["tokens_per_step"] = tokens_per_step
    counters = measured["counters"]  # emitted = steps + accepted: keep the counters consistent with it
    counters["spec_accepted_tokens"] = counters["generation_tokens"] * (1 - 1 / tokens_per_step)
    for run in record["runs"]:  # the same step time at the new acceptance
        if run["arm"] == "candidate":
            run["bench"]["median_tpot_ms"] *= 3.1431302922698716 / tokens_per_step
    return record


def test_the_real_h200_record_reads_as_measured(tmp_path: Path) -> None:
    (run,) = read_history(_history(tmp_path, RECORD))
    assert run.source == SOURCE and run.model == "/root/model_l8" and run.gpus == ("NVIDIA H200",) and run.tp == 1
    assert run.max_concurrency == 8 and run.request_rate is None and run.requests == 22
    assert run.input_len == pytest.approx(82886 / 22) and run.output_len == pytest.approx(11507 / 22)
    baseline, candidate = run.arms
    assert baseline.speculative_config is None and baseline.runs == 2
    assert baseline.median_tpot_ms == pytest.approx((5.918374932217238 + 5.901190815391458) / 2)
    assert candidate.synthetic_acceptance and candidate.tokens_per_step == pytest.approx(3.1431302922698716)
    # verified tokens per step: 1 + draft tokens / steps, steps = emitted - accepted (server counters)
    assert candidate.verify_tokens_per_seq == pytest.approx(1 + 28690 / (23014 - 15692))
    assert gpu_of_device("NVIDIA H200") is resolve_gpu("H200")
    assert gpu_of_device("NVIDIA H100 80GB HBM3") is resolve_gpu("H100") and gpu_of_device("Tesla T4") is None


def test_a_synthetic_arm_gives_step_costs_and_names_the_record(tmp_path: Path, model_dir: Path) -> None:
    fitted, measured = _decide(model_dir, _history(tmp_path, RECORD))
    evidence = "\n".join(measured.evidence)
    assert f"no speculation: step cost measured by advise verify in {SOURCE}" in evidence
    assert f"ngram k=4 (window 1-3): step cost measured by advise verify in {SOURCE} (synthetic acceptance: cost only)" \
        in evidence
    assert "acceptance measured" not in evidence  # synthetic acceptance is configured, not measured
    assert measured.predicted.calibration.endswith(f"measured steps from advise verify: {SOURCE}")
    # the measured baseline TPOT (5.91 ms) is above the fit's at that run's load: the baseline slows by that factor
    factor = float(evidence.split("steps without speculation x")[1].split()[0])
    assert factor > 1.0
    ratio = measured.predicted.tpot_ms.baseline / fitted.predicted.tpot_ms.baseline
    assert ratio == pytest.approx(factor, rel=0.03)  # the batch grows a little with slower steps
    assert all("advise verify" not in c.source for c in measured.candidates)  # acceptance still the replay's


def test_real_acceptance_of_the_same_setting_and_logs_replaces_the_replay(tmp_path: Path, model_dir: Path) -> None:
    record = _real_acceptance(4.6, ["/gpu-host/logs/synthetic.jsonl"])  # the profile read synthetic.jsonl
    _, measured = _decide(model_dir, _history(tmp_path, record))
    evidence = "\n".join(measured.evidence)
    assert f"ngram k=4 (window 1-3): acceptance measured by advise verify in {SOURCE}: 4.60 tokens per step" in evidence
    candidate = next(c for c in measured.candidates if c.source == f"measured by advise verify: {SOURCE}")
    assert candidate.name == "ngram k=4 (window 1-3)" and candidate.tokens_per_step == 4.6
    assert candidate.from_replay


def test_acceptance_measured_on_other_logs_is_not_used(tmp_path: Path, model_dir: Path) -> None:
    _, measured = _decide(model_dir, _history(tmp_path, _real_acceptance(4.6, ["other.jsonl"])))
    evidence = "\n".join(measured.evidence)
    assert f"acceptance in {SOURCE} not used: measured on other logs (other.jsonl)" in evidence
    assert all(c.source != f"measured by advise verify: {SOURCE}" for c in measured.candidates)
    assert "step cost measured" in evidence  # its cost still counts


@pytest.mark.parametrize("change, reason", [
    (lambda r: r["hardware"].update(gpus=[]), "no GPU in the record (a CPU build), which never calibrates a GPU"),
    (lambda r: r["hardware"].update(gpus=["NVIDIA H100 80GB HBM3"]), "another GPU (NVIDIA H100 80GB HBM3)"),
    (lambda r: r["protocol"]["serve_args"].extend(["--tensor-parallel-size", "2"]), "tensor-parallel size 2, not 1"),
    (lambda r: r["inputs"].update(model="Qwen/Qwen2.5-14B", served_model_name=None), "another model (Qwen/Qwen2.5-14B)"),
    (lambda r: r["protocol"].update(mode="apc"), "an APC A/B, which changes prefill only"),
])
def test_records_of_another_deployment_are_left_out_with_the_reason(tmp_path, model_dir, change, reason) -> None:
    record = copy.deepcopy(RECORD)
    change(record)
    fitted, measured = _decide(model_dir, _history(tmp_path, record))
    assert f"verify record {SOURCE}: {reason}: not used" in measured.evidence
    assert measured.predicted.tpot_ms == fitted.predicted.tpot_ms


def test_the_newest_matching_record_wins(tmp_path: Path, model_dir: Path) -> None:
    newer = copy.deepcopy(RECORD)
    newer["created"] = "2026-12-03T08:00:00+00:00"
    for run in newer["runs"]:
        if run["arm"] == "baseline":
            run["bench"]["median_tpot_ms"] *= 1.5
    _, measured = _decide(model_dir, _history(tmp_path, RECORD, newer))
    assert any(line.startswith("no speculation: step cost measured by advise verify in history.jsonl:2 "
                               "(2026-12-03T08:00:00+00:00)") for line in measured.evidence)


def test_an_assumed_target_uses_no_history(tmp_path: Path) -> None:
    profile = report(**CODE_EDITING, model=None, gpu="H200")
    measured = decide(replace(profile, verify_history=read_history(_history(tmp_path, RECORD))))
    assert any("verify history (1 records) not used" in line for line in measured.evidence)


def test_bad_history_lines_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(RECORD) + "\n{not json\n")
    with pytest.raises(InputError, match=r"history.jsonl:2: not a JSON verify record"):
        read_history(path)
    path.write_text(json.dumps({"schema": "other/1"}) + "\n")
    with pytest.raises(InputError, match=r"history.jsonl:1: schema 'other/1'"):
        read_history(path)
    broken = copy.deepcopy(RECORD)
    del broken["dataset"]
    path.write_text(json.dumps(broken) + "\n")
    with pytest.raises(InputError, match=r"history.jsonl:1: malformed verify record"):
        read_history(path)


def test_the_history_travels_in_the_report(tmp_path: Path) -> None:
    profile = replace(report(**CODE_EDITING, model=None, gpu="H200"),
                      verify_history=read_history(_history(tmp_path, RECORD)))
    assert Report.from_dict(profile.to_dict()) == profile


def test_cli_history_option(tmp_path: Path, model_dir: Path) -> None:
    history = _history(tmp_path, RECORD)
    result = CliRunner().invoke(cli, [str(FIXTURES / "code_editing.jsonl"), "--model", str(model_dir), "--gpu", "H200",
                                      "--history", str(history), "--no-sweep",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["options"]["history"] == str(history)
    assert document["verify_history"][0]["source"] == SOURCE
    assert any(SOURCE in line for line in document["recommendation"]["evidence"])
    missing = CliRunner().invoke(cli, [str(FIXTURES / "code_editing.jsonl"), "--history", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2
