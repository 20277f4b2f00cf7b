"""The `advise [profile]` command end to end: routing, JSON report, exit codes, privacy, real data."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from advisor.cli import cli
from advisor.errors import EXIT_BAD_LINES, EXIT_INPUT, EXIT_TOKENIZER, EXIT_USAGE
from advisor.report import SCHEMA_VERSION

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str) -> dict:
    code, out, err = run(*args, "--json")
    assert code == 0, err
    return orjson.loads(out)


def test_import_advisor_stays_light():
    code = ("import advisor, advisor.cli, advisor.shards, advisor.ingest, sys; bad = [m for m in ('transformers', "
            "'sklearn', 'torch', 'vllm', 'matplotlib', 'selenium', 'ray', 'fsspec') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_default_command_is_profile():
    default = run_json(str(FIXTURES / "mooncake_trace.jsonl"), "--no-recommend")
    explicit = run_json("profile", str(FIXTURES / "mooncake_trace.jsonl"), "--no-recommend")
    assert default == explicit
    assert default["schema_version"] == SCHEMA_VERSION and default["inputs"][0]["format"] == "mooncake"


def test_every_command_has_help():
    """Every subcommand (loaded lazily, advisor.cli.COMMANDS) answers --help and is listed by `advise --help`."""
    import click

    names = cli.list_commands(click.Context(cli))
    assert names == ["profile", "show", "lint", "whatif", "verify"]
    _, top, _ = run("--help")
    for name in names:
        command = cli.get_command(click.Context(cli), name)
        code, out, _ = run(name, "--help")
        assert code == 0 and command is not None and command.help, name
        assert len(out) > 200, name
        assert f"\n  {name} " in top.split("Commands:")[1], name


def test_profile_does_not_load_the_other_commands():
    """`advise LOGS` imports only the profile command's modules: verify's HTTP client and server plumbing stay
    out of every profile run's start."""
    code = ("import sys\nfrom advisor.cli import main\n"
            f"sys.argv = ['advise', {str(FIXTURES / 'code_editing.jsonl')!r}, '--no-progress', '--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('advisor.cli.verify', 'advisor.verify.runner', 'advisor.cli.lint', "
            "'advisor.cli.whatif', 'advisor.cli.show') if m in sys.modules], file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert '"recommendation"' in done.stdout  # a whole profile ran
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_report_sections_and_disabled_analyses():
    report = run_json(str(FIXTURES / "azure_trace.csv"), "--no-recommend")
    disabled = {item["analysis"] for item in report["disabled_analyses"]}
    assert "prefix sharing and APC" in disabled
    assert "n-gram overlap and speculative replay" in disabled
    assert report["prefix"] is None and report["overlap"] is None and report["replay"] == []
    assert report["tokenizer"] is None  # a token-free trace never loads one


def test_text_log_reports_tokenizer_overlap_and_replay():
    report = run_json(str(FIXTURES / "code_editing.jsonl"), "--no-sweep", "--no-recommend")
    assert report["tokenizer"]["is_default"] is True
    assert "approximate" in report["tokenizer"]["warning"]
    assert report["overlap"]["prompt_share"][3] > 0.5
    assert {r["method"] for r in report["replay"]} == {"ngram", "suffix"}
    for replay in report["replay"]:
        assert replay["num_drafts"] > 0
        assert replay["mean_acceptance_length"] == pytest.approx(1 + replay["num_accepted_tokens"] / replay["num_drafts"], rel=1e-5)


def test_speculative_config_replays_exactly_that_config():
    config = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
    report = run_json(str(FIXTURES / "code_editing.jsonl"), "--speculative-config", config, "--no-recommend")
    assert len(report["replay"]) == 1
    replay = report["replay"][0]
    assert replay["method"] == "ngram"
    assert replay["config"]["num_speculative_tokens"] == 3 and replay["config"]["prompt_lookup_max"] == 4
    assert len(replay["num_accepted_tokens_per_pos"]) == 3
    assert report["replay_sweep"] == []


def test_no_prompt_or_completion_text_in_reports(tmp_path):
    texts = []
    with open(FIXTURES / "code_editing.jsonl", "rb") as handle:
        for line in list(handle)[:20]:
            record = orjson.loads(line)
            texts.append(record["response"]["choices"][0]["message"]["content"])
            texts.append(record["request"]["messages"][-1]["content"])
    out_file = tmp_path / "report.json"
    code, terminal, _ = run(str(FIXTURES / "code_editing.jsonl"), "--no-sweep", "-o", str(out_file))
    assert code == 0
    saved = out_file.read_text()
    for text in texts:
        probe = text.strip()[:40]
        assert probe and probe not in terminal and probe not in saved


def test_exit_codes(tmp_path):
    assert run(str(tmp_path / "missing.jsonl"))[0] == EXIT_INPUT
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, _, err = run(str(empty))
    assert code == EXIT_INPUT and "empty.jsonl" in err
    code, _, err = run(str(FIXTURES / "bad_lines.jsonl"), "--strict")
    assert code == EXIT_BAD_LINES and "bad_lines.jsonl:" in err
    code, _, err = run(str(FIXTURES / "code_editing.jsonl"), "--tokenizer", str(tmp_path / "no-such-tokenizer"))
    assert code == EXIT_TOKENIZER
    code, _, err = run(str(FIXTURES / "code_editing.jsonl"), "--speculative-config", '{"method": "ngram", "bogus_key": 1}')
    assert code == EXIT_USAGE and "bogus_key" in err
    assert run(str(FIXTURES / "code_editing.jsonl"), "--speculative-config", "{not json")[0] == EXIT_USAGE


def test_inputs_carry_size_and_sha256_of_each_file(tmp_path):
    """The digests are computed on a thread while the logs stream: they must still be each whole file's."""
    paths = [FIXTURES / "code_editing.jsonl", FIXTURES / "azure_trace.csv"]
    report = run_json(*map(str, paths), "--no-recommend", "--no-replay")
    assert [entry["path"] for entry in report["inputs"]] == [str(p) for p in paths]
    for entry, path in zip(report["inputs"], paths):
        data = path.read_bytes()
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()


def test_bad_lines_are_reported_with_line_numbers():
    report = run_json(str(FIXTURES / "bad_lines.jsonl"), "--no-recommend", "--no-replay")
    assert report["ingest"]["skipped"] == 6 and report["ingest"]["requests"] == 2
    assert all(p.startswith(str(FIXTURES / "bad_lines.jsonl") + ":") for p in report["ingest"]["problems"])


def test_checklist_written(tmp_path):
    checklist = tmp_path / "checklist.md"
    code, _, err = run(str(FIXTURES / "chat_multiturn.jsonl"), "--no-sweep", "--checklist", str(checklist))
    assert code == 0, err
    text = checklist.read_text()
    assert text.startswith("#") and "[ ]" in text


def test_an_output_file_of_dash_takes_stdout_in_place_of_the_terminal_view(tmp_path):
    """`--checklist -` pipes the checklist into a review, `-o -` the JSON, `--html -` the page; the same bytes
    as the files, and one of them at most: two on one stream would interleave (refused before reading)."""
    log, report = str(FIXTURES / "chat_multiturn.jsonl"), tmp_path / "report.json"
    checklist, html = tmp_path / "checklist.md", tmp_path / "report.html"
    code, terminal, err = run(log, "--no-sweep", "-o", str(report), "--checklist", str(checklist), "--html", str(html))
    assert code == 0, err
    for flag, written in (("--checklist", checklist), ("--html", html)):
        for command in ((log, "--no-sweep"), ("show", str(report))):
            code, out, err = run(*command, flag, "-")
            assert code == 0, err
            assert out == written.read_text()
    code, out, err = run(log, "--no-sweep", "-o", "-")
    assert code == 0, err
    assert orjson.loads(out) == orjson.loads(report.read_bytes())
    assert not (REPO / "-").exists()
    code, out, err = run("show", str(report))
    assert out == terminal
    for both in (("--json", "--checklist", "-"), ("-o", "-", "--html", "-")):
        code, out, err = run(log + ".missing", *both)
        assert code == EXIT_USAGE and "only one output can go to stdout" in err and not out


# ------------------------------------------------------------------ real data (../shared/data)


def test_mooncake_real(real_file):
    """12,031 requests; the ceiling from hash_ids equals an independent computation over the raw file."""
    path = real_file("mooncake_conversation_trace.jsonl")
    report = run_json(str(path), "--no-recommend")
    assert report["ingest"]["requests"] == 12031
    seen: set[int] = set()
    hits = total = 0
    rows = [json.loads(line) for line in path.open()]
    rows.sort(key=lambda row: row["timestamp"])  # stable: file order among equal times
    for row in rows:
        n, ids = row["input_length"], row["hash_ids"]
        lcp = 0
        while lcp < len(ids) and ids[lcp] in seen:
            lcp += 1
        hits += 512 * (min(lcp * 512, n - 1) // 512)
        total += n
        seen.update(ids)
    assert report["prefix"]["block_size"] == 512
    assert report["prefix"]["ceiling"] == pytest.approx(hits / total, rel=1e-5)


def test_azure_real_matches_numpy(real_file):
    path = real_file("azure_llm_inference_2023_code.csv")
    report = run_json(str(path), "--no-recommend")
    lines = path.read_text().splitlines()[1:]
    stamps, context, generated = [], [], []
    for line in lines:
        stamp, ctx, gen = line.split(",")
        day, frac = stamp.split(".")
        parsed = datetime.strptime(f"{day}.{frac[:6]}", "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
        stamps.append(parsed.timestamp() + int(frac[6:] or 0) * 1e-7)
        context.append(int(ctx))
        generated.append(int(gen))
    stamps_arr = np.sort(np.array(stamps))
    assert report["ingest"]["requests"] == len(lines) == 8819
    duration = stamps_arr[-1] - stamps_arr[0]
    assert report["arrivals"]["duration_s"] == pytest.approx(duration, rel=1e-5)
    assert report["arrivals"]["mean_rate_rps"] == pytest.approx((len(lines) - 1) / duration, rel=1e-5)
    gaps = np.diff(stamps_arr)
    assert report["arrivals"]["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean(), rel=1e-4)
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p99_9", 99.9)):
        assert report["lengths"]["input"][key] == pytest.approx(np.percentile(context, q), rel=1e-5)
        assert report["lengths"]["output"][key] == pytest.approx(np.percentile(generated, q), rel=1e-5)


def test_sharegpt_real_multiturn(real_file):
    report = run_json(str(real_file("sharegpt_v3_subset.json")), "--no-recommend", "--no-replay")
    assert report["ingest"]["requests"] > 10000
    assert report["overlap"]["prompt_share"][0] > 0 and report["overlap"]["context_share"][3] > 0
    assert report["prefix"]["ceiling"] > 0.3  # later turns resend the whole history


def test_swe_agent_real_multiturn(real_file):
    report = run_json(str(real_file("swe_agent_marshmallow_1867.traj")), "--no-recommend", "--no-sweep")
    assert report["ingest"]["requests"] == 13
    assert report["overlap"]["context_share"] is not None
    assert report["prefix"]["ceiling"] > 0.5
    assert report["replay"][0]["num_requests"] == 13


def test_aider_real_loads(real_file):
    report = run_json(str(real_file("aider_chat_history.md")), "--no-recommend", "--no-replay")
    assert report["inputs"][0]["format"] == "aider"
    assert report["ingest"]["requests"] > 800
