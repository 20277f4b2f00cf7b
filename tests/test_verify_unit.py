"""advise verify without a server: dataset, load, plan and its shell script, verdict rule, record rendering.

The real A/B runs in tests/test_verify_e2e.py (marked vllm).
"""
from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import engine_reports
from advisor.errors import ConfigError, InputError
from advisor.ingest import read_requests
from advisor.profile import recommend
from advisor.record import Message, Request, SamplingParams
from advisor.report import BaselineVsCandidate, TtftPrediction, loads
from advisor.tokenize import load_tokenizer
from advisor.verify.dataset import BenchDataset, BenchLoad, build_dataset, completion_prompt, logged_temperature, observed_load
from advisor.verify.history import render_markdown
from advisor.verify.metrics import MetricsSnapshot
from advisor.verify.plan import APC, BASELINE, CANDIDATE, make_plan

_real_find_spec = importlib.util.find_spec
from advisor.verify.runner import StepResult
from advisor.verify.session import predictions_from_report
from advisor.verify.verdict import CONFIRMED, INCONCLUSIVE, REFUTED, bootstrap_ratio, build_verdict, per_request

LOG = Path(__file__).parent / "data" / "verify_requests.jsonl"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 2}


@pytest.fixture(scope="module")
def llama3():
    return load_tokenizer()


def test_bos_written_by_the_template_is_dropped_for_the_completions_endpoint(llama3):
    """vLLM's completions endpoint adds BOS itself (add_special_tokens=True, vllm/renderers/base.py
    default_cmpl_tok_params); the chat endpoint does not. Dropping the template's BOS text makes the ids equal."""
    rendered = llama3.render_chat([Message("user", "hello")])
    text, stripped = completion_prompt(llama3, rendered)
    assert stripped and not text.startswith("<|begin_of_text|>")
    chat_ids = llama3.encode_texts([rendered], special=True)[0]
    completion_ids = list(llama3.completion_prefix) + llama3.encode_texts([text], special=True)[0]
    assert completion_ids == chat_ids


def test_dataset_rows_follow_the_log_with_logged_output_lengths(llama3, tmp_path):
    requests = list(read_requests([str(LOG)]))
    ds = build_dataset(requests, llama3, tmp_path / "ds.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "ds.jsonl").read_text().splitlines()]
    assert ds.rows == len(rows) == len(requests) == 10
    outputs = [len(llama3.encode_texts([r.completion], special=False)[0]) for r in requests]
    assert [row["output_tokens"] for row in rows] == outputs
    assert ds.output_tokens == sum(outputs)
    assert ds.bos_stripped and all(not row["prompt"].startswith("<|begin_of_text|>") for row in rows)
    assert ds.temperature == 0.0 and ds.temperature_source == "logs"
    times = sorted(r.timestamp for r in requests)
    assert ds.load.request_rate == pytest.approx(9 / (times[-1] - times[0]))
    assert ds.load.max_concurrency >= 1


def test_dataset_limits_and_skips(llama3, tmp_path):
    requests = list(read_requests([str(LOG)]))
    assert build_dataset(requests, llama3, tmp_path / "a.jsonl", max_requests=3).rows == 3
    with pytest.raises(InputError, match="max-model-len"):
        build_dataset(requests, llama3, tmp_path / "b.jsonl", max_model_len=10)
    with pytest.raises(ConfigError, match=".jsonl"):
        build_dataset(requests, llama3, tmp_path / "c.json")


def test_load_from_options_or_logs():
    untimed = [Request(source=f"x:{i}", prompt="p", completion="c") for i in range(3)]
    with pytest.raises(ConfigError, match="--request-rate"):
        observed_load(untimed)
    assert observed_load(untimed, request_rate=float("inf")).request_rate is None
    timed = [Request(source=f"x:{i}", timestamp=float(t), latency_s=1.5) for i, t in enumerate([0, 1, 2, 3, 4])]
    load = observed_load(timed)
    assert load.request_rate == pytest.approx(1.0)
    assert load.max_concurrency == 2  # each request overlaps the next one for 0.5 s
    assert load.burstiness == 100.0  # evenly spaced: CV 0, capped gamma shape


def test_temperature_is_the_most_common_logged_value():
    reqs = [Request(source="x", sampling=SamplingParams(temperature=t)) for t in (0.7, 0.7, 0.0)]
    value, source = logged_temperature(reqs)
    assert value == 0.7 and "1 requests used other values" in source
    assert logged_temperature([Request(source="x")]) == (0.0, "default (not logged)")


def _dataset(tmp_path: Path) -> BenchDataset:
    return BenchDataset(tmp_path / "ds.jsonl", "0" * 64, 10, 100, 50, {}, 0.0, "logs",
                        BenchLoad(2.0, 1.5, 4, {}), True)


def _plan(tmp_path: Path, mode: str = "speculative", **kwargs):
    return make_plan(vllm_cmd=("/venv/bin/vllm",), model="/models/tiny m", served_model_name="tiny",
                     bench_tokenizer="/models/tiny m", dataset=_dataset(tmp_path),
                     candidate_config=NGRAM if mode == "speculative" else None, mode=mode,
                     out_dir=tmp_path / "out", trials=2, serve_args=("--enforce-eager",), **kwargs)


def test_plan_interleaves_fresh_servers_that_differ_only_in_the_speculative_config(tmp_path):
    plan = _plan(tmp_path)
    assert [(s.trial, s.arm.name) for s in plan.steps] == [(1, BASELINE), (1, CANDIDATE), (2, BASELINE), (2, CANDIDATE)]
    base, cand = (plan.serve_argv(arm, 8000) for arm in plan.arms)
    assert cand[: len(base)] == base and cand[len(base):] == ["--speculative-config", json.dumps(NGRAM, sort_keys=True, separators=(",", ":"))]
    bench = plan.bench_argv(plan.steps[0], "http://127.0.0.1:8000")
    for flag in ("--skip-chat-template", "--ignore-eos", "--no-oversample", "--disable-shuffle", "--save-detailed"):
        assert flag in bench
    assert bench[bench.index("--custom-output-len") + 1] == "-1"
    assert bench[bench.index("--num-prompts") + 1] == "10"
    assert bench[bench.index("--request-rate") + 1] == "2"
    assert bench[bench.index("--max-concurrency") + 1] == "4"
    other = plan.bench_argv(plan.steps[1], "http://127.0.0.1:8000")
    assert [a for a in bench if "baseline" not in a] == [a for a in other if "candidate" not in a]


def test_apc_plan_differs_only_in_prefix_caching(tmp_path):
    plan = _plan(tmp_path, mode=APC)
    base, cand = (plan.serve_argv(arm, 8000) for arm in plan.arms)
    assert base[-1] == "--no-enable-prefix-caching" and cand[-1] == "--enable-prefix-caching"
    assert base[:-1] == cand[:-1] and "--speculative-config" not in base + cand


def test_dry_run_script_is_valid_bash_with_the_plans_commands(tmp_path):
    plan = _plan(tmp_path)
    script = plan.to_shell({"HF_HUB_OFFLINE": "1", "TMPDIR": "/tmp/a dir"})
    path = tmp_path / "plan.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    lines = script.splitlines()
    serves = [shlex.split(line.split(">", 1)[0])[1:] for line in lines if line.startswith("setsid ")]
    assert serves == [[a if a != "8000" else "$PORT" for a in plan.serve_argv(s.arm, 8000)] for s in plan.steps]
    benches = [shlex.split(line.rsplit(" >", 1)[0]) for line in lines if " bench serve " in line]
    assert benches == [plan.bench_argv(s, "$BASE") for s in plan.steps]
    assert script.count("stop_server\n") == 4 and "trap stop_server EXIT" in script


def test_dry_run_with_running_servers_starts_none(tmp_path):
    plan = _plan(tmp_path, baseline_url="http://127.0.0.1:9001", candidate_url="http://127.0.0.1:9002")
    script = plan.to_shell({})
    assert "setsid" not in script.split("wait_ready() {")[1] and "BASE=http://127.0.0.1:9002" in script


def _bench(tpot_ms: list[float], ttft_ms: float = 50.0, out: int = 11, throughput: float = 100.0) -> dict:
    """A detailed bench result whose requests have the given TPOTs (E2EL = TTFT + TPOT * (out - 1))."""
    ttfts = [ttft_ms / 1000] * len(tpot_ms)
    return {
        "ttfts": ttfts, "latencies": [t + v / 1000 * (out - 1) for t, v in zip(ttfts, tpot_ms)],
        "output_lens": [out] * len(tpot_ms), "input_lens": [20] * len(tpot_ms),
        "itls": [[v / 1000] * (out - 1) for v in tpot_ms], "output_throughput": throughput,
        "completed": len(tpot_ms), "num_prompts": len(tpot_ms), "failed": 0, "total_output_tokens": out * len(tpot_ms),
    }


def _results(base_tpots, cand_tpots, cand_drafts=5.0) -> list[StepResult]:
    results = []
    for trial, (b, c) in enumerate(zip(base_tpots, cand_tpots), 1):
        for arm, tpots, drafts in ((BASELINE, b, 0.0), (CANDIDATE, c, cand_drafts)):
            bench = _bench(tpots)
            metrics = MetricsSnapshot(spec_drafts=drafts, spec_draft_tokens=3 * drafts, spec_accepted_tokens=2 * drafts,
                                      generation_tokens=bench["total_output_tokens"], has_spec_decode=arm == CANDIDATE)
            results.append(StepResult(trial, arm, Path(f"t{trial}{arm}.json"), bench, metrics, 1.0, 2.0))
    return results


def test_apc_verdict_judges_ttft_and_needs_cache_hits():
    base = [[20.0, 21.0, 19.0]] * 2
    results = _results(base, base, cand_drafts=0.0)
    faster_prefill = []
    for r in results:
        bench = dict(r.bench)
        hits = 0.0
        if r.arm == CANDIDATE:
            bench["ttfts"] = [t * 0.5 for t in bench["ttfts"]]
            bench["latencies"] = [e - t * 0.5 for e, t in zip(bench["latencies"], r.bench["ttfts"])]
            hits = 256.0
        metrics = MetricsSnapshot(prefix_cache_queries=600.0, prefix_cache_hits=hits,
                                  generation_tokens=bench["total_output_tokens"])
        faster_prefill.append(StepResult(r.trial, r.arm, r.result_file, bench, metrics, 1.0, 2.0))
    verdict = build_verdict(faster_prefill, mode=APC, resamples=100)
    assert verdict["primary_metric"] == "ttft" and "TTFT ratio" in verdict["rule"]
    assert verdict["verdict"] == CONFIRMED and verdict["ratios"]["ttft"]["ratio"] == pytest.approx(0.5)
    assert verdict["measured"]["candidate"]["apc_hit_rate"] == pytest.approx(256 / 600)
    no_hits = [StepResult(r.trial, r.arm, r.result_file, r.bench, MetricsSnapshot(
        generation_tokens=r.bench["total_output_tokens"]), 1.0, 2.0) for r in faster_prefill]
    verdict = build_verdict(no_hits, mode=APC, resamples=100)
    assert verdict["verdict"] == INCONCLUSIVE and "candidate hit the prefix cache" in verdict["reason"]


def test_per_request_tpot_is_bench_definition():
    """TPOT = (E2EL - TTFT) / (output_len - 1), vllm/benchmarks/serve.py calculate_metrics."""
    bench = {"ttfts": [0.1, 0.2], "latencies": [1.1, 0.2], "output_lens": [11, 1], "itls": [[0.1] * 10, []]}
    tpot = per_request(bench, "tpot")
    assert tpot[0] == pytest.approx(100.0) and np.isnan(tpot[1])


def test_verdict_confirmed_refuted_inconclusive():
    rng = np.random.default_rng(1)
    base = [list(20 + rng.normal(0, 1, 30)) for _ in range(2)]
    faster = [[v * 0.6 for v in b] for b in base]
    verdict = build_verdict(_results(base, faster), resamples=300)
    assert verdict["verdict"] == CONFIRMED
    assert verdict["ratios"]["tpot"]["ratio"] == pytest.approx(0.6)
    assert "below 0.98" in verdict["rule"]
    same = build_verdict(_results(base, base), resamples=300)
    assert same["verdict"] == REFUTED and same["ratios"]["tpot"]["ci95"] == [1.0, 1.0]
    noisy = [[v * (0.97 + rng.normal(0, 0.3)) for v in b] for b in base]
    assert build_verdict(_results(base, noisy), resamples=300)["verdict"] == INCONCLUSIVE


def test_failed_control_makes_the_verdict_inconclusive():
    base = [[20.0, 21.0, 19.0]] * 2
    verdict = build_verdict(_results(base, [[10.0, 10.5, 9.5]] * 2, cand_drafts=0.0), resamples=100)
    assert verdict["verdict"] == INCONCLUSIVE and "candidate proposed drafts" in verdict["reason"]


def test_bootstrap_is_paired_when_the_rows_match():
    base, cand = [_bench([10.0, 30.0])], [_bench([5.0, 15.0])]
    ratio = bootstrap_ratio("tpot", base, cand, resamples=200, seed=0)
    assert ratio.method.startswith("paired") and ratio.low == pytest.approx(0.5) and ratio.high == pytest.approx(0.5)


def test_predictions_come_from_the_matching_replay_entry():
    base = recommend(engine_reports.report(**engine_reports.CODE_EDITING))
    entries = (
        replace(base.replay[0], config={**NGRAM, "num_speculative_tokens": 5}, acceptance_rate=0.1),
        replace(base.replay[0], config={**NGRAM, "method": "ngram"}, acceptance_rate=0.4, mean_acceptance_length=2.2,
                tokens_per_step=1.8),
    )
    predicted = replace(base.recommendation.predicted, tpot_ms=BaselineVsCandidate(10.0, 7.0),
                        ttft_ms=TtftPrediction(30.0, 60.0, 30.0))
    report = replace(base, replay=entries, replay_sweep=(),
                     apc=replace(base.apc, at_capacity=replace(base.apc.at_capacity, hit_rate=0.3)),
                     recommendation=replace(base.recommendation, speculative_config=NGRAM, predicted=predicted))
    assert predictions_from_report(report, NGRAM) == {
        "acceptance_rate": 0.4, "mean_acceptance_length": 2.2, "tokens_per_step": 1.8, "apc_hit_rate": 0.3,
        "tpot_ratio": pytest.approx(0.7)}
    assert predictions_from_report(report, None) == {"apc_hit_rate": 0.3, "ttft_ratio": pytest.approx(0.5)}


def test_markdown_summary_states_verdict_rule_and_runs(tmp_path):
    from advisor.verify.history import build_record

    results = _results([[20.0, 22.0, 21.0]] * 2, [[12.0, 13.0, 12.5]] * 2)
    verdict = build_verdict(results, resamples=100)
    record = build_record(_plan(tmp_path), results, verdict, logs=["x.jsonl"], tokenizer="t", prediction_source=None)
    text = render_markdown(record)
    assert text.startswith("# advise verify: CONFIRMED")
    assert "Rule: confirmed if" in text and "not comparable" in text
    assert text.count("| trial ") == 4


FAKE_VLLM = """#!{python}
# Stands in for the vllm CLI: `serve` answers the endpoints verify uses, `bench serve` writes a result file.
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
if args[0] == "serve":
    port = int(args[args.index("--port") + 1])
    class Handler(BaseHTTPRequestHandler):
        def _send(self, body):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            if self.path == "/metrics":
                self._send(b"# TYPE vllm:generation_tokens_total counter\\nvllm:generation_tokens_total 8.0\\n")
            else:
                self._send(b'{{"data": [{{"id": "tiny"}}]}}')
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(b"{{}}")
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
else:
    out = args[args.index("--result-dir") + 1] + "/" + args[args.index("--result-filename") + 1]
    json.dump({{"argv": args}}, open(out, "w"))
"""


def _tokenizer_dir(path: Path) -> Path:
    """A small HF tokenizer folder with a chat template, made as scripts/make_tiny_model.py makes it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_tiny_model", Path(__file__).parent.parent / "scripts" / "make_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path.mkdir()
    module.build_tokenizer(path)
    return path


def _live_processes_running(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_text() and \
                    (entry / "stat").read_text().split(") ")[1][0] != "Z":
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_cli_dry_run_script_runs_every_step_and_leaves_no_server(tmp_path):
    """The printed script, run by bash against a stand-in vllm, starts, warms up, scrapes, benches and stops
    a server per step, in plan order."""
    import sys

    from advisor.cli.verify import verify_command
    from advisor.verify.server import free_port

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    fake = venv / "vllm"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    model = _tokenizer_dir(tmp_path / "model")
    run = tmp_path / "run"
    result = CliRunner().invoke(verify_command, [
        str(LOG), "--model", str(model), "--speculative-config", json.dumps(NGRAM), "--serve-arg=--enforce-eager",
        "--vllm-python", str(venv / "python"), "--out", str(run), "--dry-run",
    ])
    assert result.exit_code == 0, result.output
    script = tmp_path / "plan.sh"
    script.write_text(result.output)
    done = subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin", "PORT": str(free_port())},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for stem in ("trial1-baseline", "trial1-candidate", "trial2-baseline", "trial2-candidate"):
        argv = json.loads((run / f"{stem}.bench.json").read_text())["argv"]
        assert argv[argv.index("--label") + 1] == stem.split("-")[1]
        assert (run / f"{stem}.metrics.before.txt").read_text().startswith("# TYPE")
        assert (run / f"{stem}.metrics.after.txt").is_file()
    assert _live_processes_running(str(fake)) == []


def test_predictions_read_a_real_profile_report():
    """The keys verify reads are those `advise LOGS --json` writes (replay entries, apc, recommendation)."""
    from advisor.cli import cli

    result = CliRunner().invoke(cli, ["profile", str(LOG), "--json", "--no-sweep"])
    assert result.exit_code == 0, result.output[-2000:]
    report = loads(result.stdout)
    entry = report.replay[0]
    predicted = predictions_from_report(report, entry.config)
    assert predicted["acceptance_rate"] == entry.acceptance_rate
    assert predicted["mean_acceptance_length"] == entry.mean_acceptance_length
    assert predicted["apc_hit_rate"] == report.apc.hit_rate
    recommended = report.recommendation.speculative_config
    if recommended:
        assert 0 < predictions_from_report(report, recommended)["tpot_ratio"]


def test_dry_run_without_vllm_for_a_hub_model_runs_against_a_vllm_on_path(tmp_path, monkeypatch):
    """The acceptance case: no vLLM, no model files, no GPU here; a hub id; the printed script's two serve
    lines differ only in the speculative config, and the script runs against a stand-in `vllm` on PATH."""
    import sys

    from advisor.cli.verify import verify_command
    from advisor.verify.server import free_port

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("ADVISOR_VLLM_PYTHON", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "vllm" else _real_find_spec(name, *a))
    run = tmp_path / "run"
    result = CliRunner().invoke(verify_command, [
        str(LOG), "--model", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", json.dumps(NGRAM),
        "--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "2", "--max-model-len", "8192",
        "--serve-arg=--enforce-eager", "--trials", "1", "--out", str(run), "--dry-run",
    ])
    assert result.exit_code == 0, result.output
    assert "VLLM_CPU_KVCACHE_SPACE" not in result.output and "/work/" not in result.output.replace(str(tmp_path), "")
    serves = [shlex.split(line.split(">", 1)[0])[1:] for line in result.output.splitlines() if line.startswith("setsid ")]
    assert len(serves) == 2 and serves[0][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    base, cand = serves
    assert cand[: len(base)] == base and cand[len(base)] == "--speculative-config" and len(cand) == len(base) + 2
    for flag, value in (("--gpu-memory-utilization", "0.9"), ("--tensor-parallel-size", "2"), ("--max-model-len", "8192")):
        assert base[base.index(flag) + 1] == value
    assert (run / "dataset.jsonl").is_file()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(FAKE_VLLM.format(python=sys.executable))
    (bin_dir / "vllm").chmod(0o755)
    script = tmp_path / "plan.sh"
    script.write_text(result.output)
    done = subprocess.run(["bash", str(script)], env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PORT": str(free_port())},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for stem in ("trial1-baseline", "trial1-candidate"):
        argv = json.loads((run / f"{stem}.bench.json").read_text())["argv"]
        assert argv[argv.index("--tokenizer") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert _live_processes_running(str(bin_dir / "vllm")) == []


def test_resolve_vllm_prefers_the_option_then_path_then_this_python(tmp_path, monkeypatch):
    import sys

    from advisor.errors import VllmError
    from advisor.verify.server import VLLM_MODULE, resolve_vllm

    assert resolve_vllm("python3 -m vllm.entrypoints.cli.main") == ("python3", "-m", VLLM_MODULE)
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve_vllm() == (str(exe),)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object() if name == "vllm" else None)
    assert resolve_vllm() == (sys.executable, "-m", VLLM_MODULE)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(VllmError, match="--vllm CMD"):
        resolve_vllm()
    assert resolve_vllm(required=False) == ("vllm",)


def test_synthetic_acceptance_takes_per_position_rates_from_the_replay():
    from advisor.verify.session import synthetic_rates

    class Entry:
        config = {"method": "ngram", "num_speculative_tokens": 3}
        num_drafts = 100
        num_accepted_tokens_per_pos = (70, 40, 45)

    class Report:
        replay = (Entry(),)
        replay_sweep = ()

    assert synthetic_rates(Report(), {"method": "ngram"}) == [0.7, 0.4, 0.4]
