"""The plan of an `advise verify` run: every server and bench command, in order, also as a shell script.

Arms differ in ONE thing: `--speculative-config` (mode "speculative"), or automatic prefix caching off versus
on (mode "apc", its own A/B); same model, other flags, dataset, load and seed.
Each (trial, arm) gets a freshly started server so no prefix-cache content carries over from an earlier run,
and the arms alternate A B A B so slow drift of the machine (thermal, other tenants) hits both alike.
`--dry-run` prints `VerifyPlan.to_shell()`: the same commands, runnable by hand.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from advisor.errors import ConfigError
from advisor.verify.dataset import BenchDataset

BASELINE = "baseline"
CANDIDATE = "candidate"
SPECULATIVE, APC = "speculative", "apc"
MODES = (SPECULATIVE, APC)
WARMUP_PROMPT = "Hello"  # far shorter than a KV block: warms the server up without caching a full block
WARMUP_TOKENS = 8
WARMUP_REQUESTS = 3  # the first requests of a fresh (GPU) server pay one-off costs; three absorb them


@dataclass(frozen=True)
class Arm:
    """One side of the A/B: its own serve flags, or the URL of a server someone else runs."""

    name: str
    speculative_config: dict | None
    url: str | None = None
    flags: tuple[str, ...] = ()  # e.g. --no-enable-prefix-caching for the APC A/B's baseline

    def serve_flags(self) -> list[str]:
        if self.speculative_config is None:
            return list(self.flags)
        spec = json.dumps(self.speculative_config, sort_keys=True, separators=(",", ":"))
        return [*self.flags, "--speculative-config", spec]


@dataclass(frozen=True)
class Step:
    """One (trial, arm): a server start (unless the arm has a URL), warm-up, a bench run, metrics around it."""

    trial: int
    arm: Arm
    result_dir: Path

    @property
    def stem(self) -> str:
        return f"trial{self.trial}-{self.arm.name}"

    @property
    def result_file(self) -> Path:
        return self.result_dir / f"{self.stem}.bench.json"

    @property
    def server_log(self) -> Path:
        return self.result_dir / f"{self.stem}.server.log"

    @property
    def bench_log(self) -> Path:
        return self.result_dir / f"{self.stem}.bench.log"

    def metrics_file(self, when: str) -> Path:
        """The raw /metrics text scraped `when` ("before" or "after") the bench run."""
        return self.result_dir / f"{self.stem}.metrics.{when}.txt"


@dataclass(frozen=True)
class VerifyPlan:
    """Everything needed to run (or print) the A/B; built by `make_plan`."""

    vllm_cmd: tuple[str, ...]  # the vLLM command: ("vllm",), ("/venv/bin/vllm",), ("python3", "-m", ...)
    model: str
    served_model_name: str
    bench_tokenizer: str
    dataset: BenchDataset
    arms: tuple[Arm, Arm]
    trials: int
    out_dir: Path
    mode: str = SPECULATIVE
    serve_args: tuple[str, ...] = ()
    seed: int = 0
    kv_cache_gib: float | None = None  # CPU builds' VLLM_CPU_KVCACHE_SPACE; None on GPU builds
    ready_timeout_s: float = 900.0
    vllm_version: str | None = None  # as the command's interpreter reported it (None: not known here)
    steps: tuple[Step, ...] = field(default=())

    def server_flags(self, arm: Arm) -> list[str]:
        """Serve flags after model, host, port and name: the shared ones, then the arm's speculative config."""
        return ["--seed", str(self.seed), *self.serve_args, *arm.serve_flags()]

    def serve_argv(self, arm: Arm, port: int | str) -> list[str]:
        """The whole `vllm serve` command of an arm (what `VllmServer` runs, and what the script prints)."""
        return [
            *self.vllm_cmd, "serve", self.model,
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", self.served_model_name,
            *self.server_flags(arm),
        ]

    def bench_argv(self, step: Step, base_url: str) -> list[str]:
        """`vllm bench serve` for one step; identical for both arms except the label and result file."""
        ds, load = self.dataset, self.dataset.load
        argv = [
            *self.vllm_cmd, "bench", "serve",
            "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", self.served_model_name, "--tokenizer", self.bench_tokenizer,
            "--dataset-name", "custom", "--dataset-path", str(ds.path),
            "--num-prompts", str(ds.rows), "--no-oversample", "--disable-shuffle",
            "--skip-chat-template", "--custom-output-len", "-1", "--ignore-eos",
            "--temperature", f"{ds.temperature:g}", "--seed", str(self.seed),
            "--request-rate", "inf" if load.request_rate is None else f"{load.request_rate:.6g}",
            "--burstiness", f"{load.burstiness:.6g}",
        ]
        if load.max_concurrency is not None:
            argv += ["--max-concurrency", str(load.max_concurrency)]
        argv += [
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed",
            "--result-dir", str(step.result_dir), "--result-filename", step.result_file.name,
            "--label", step.arm.name, "--metadata", f"trial={step.trial}", f"arm={step.arm.name}",
            "--ready-check-timeout-sec", "0", "--disable-tqdm",
        ]
        return argv

    def to_shell(self, env: dict[str, str]) -> str:
        """The plan as a bash script: same commands, same order, same controls (fresh server per step)."""
        q = shlex.quote
        lines = [
            "#!/usr/bin/env bash",
            f"# advise verify plan ({self.mode} A/B): {self.trials} trial(s) x ({BASELINE}, {CANDIDATE}), "
            f"{self.dataset.rows} requests from the logs.",
            "# Each step starts a fresh server in its own process group, warms it up, scrapes /metrics,",
            "# runs the bench, scrapes /metrics again and stops the group.",
            "set -euo pipefail",
            *(f"export {key}={q(value)}" for key, value in sorted(env.items())),
            "mkdir -p " + " ".join(q(str(path)) for path in (
                self.out_dir, *(env[key] for key in ("TMPDIR", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR") if key in env))),
            "PORT=${PORT:-8000}",
            "SERVER_PGID=''",
            "SERVER_LOG=''",
            "stop_server() {",
            '    [ -n "$SERVER_PGID" ] || return 0',
            '    kill -TERM -- "-$SERVER_PGID" 2>/dev/null || true',
            '    for _ in $(seq 30); do kill -0 -- "-$SERVER_PGID" 2>/dev/null || { SERVER_PGID=""; return 0; }; sleep 0.5; done',
            '    kill -KILL -- "-$SERVER_PGID" 2>/dev/null || true',
            '    SERVER_PGID=""',
            "}",
            "trap stop_server EXIT",
            "trap 'exit 130' INT TERM",
            "wait_ready() {",
            f"    for _ in $(seq {int(self.ready_timeout_s * 2)}); do",
            '        kill -0 "$SERVER_PGID" 2>/dev/null || { echo "server exited; its log ends:" >&2; tail -n 30 "$SERVER_LOG" >&2; return 1; }',
            '        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && '
            'curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && return 0',
            "        sleep 0.5",
            "    done",
            f'    echo "server not ready in {self.ready_timeout_s:.0f} s" >&2; tail -n 30 "$SERVER_LOG" >&2; return 1',
            "}",
        ]
        warmup = json.dumps({
            "model": self.served_model_name, "prompt": WARMUP_PROMPT, "max_tokens": WARMUP_TOKENS,
            "temperature": 0, "ignore_eos": True,
        })
        for step in self.steps:
            lines += ["", f"# --- trial {step.trial}, {step.arm.name} ---"]
            if step.arm.url is None:
                serve = " ".join(q(a) for a in self.serve_argv(step.arm, "@PORT@")).replace("@PORT@", '"$PORT"')
                lines += [
                    'BASE="http://127.0.0.1:$PORT"',
                    f"SERVER_LOG={q(str(step.server_log))}",
                    f"setsid {serve} >{q(str(step.server_log))} 2>&1 &",
                    "SERVER_PGID=$!",
                    "wait_ready",
                ]
            else:
                lines.append(f"BASE={q(step.arm.url)}")
            bench = " ".join(q(a) for a in self.bench_argv(step, "@BASE@")).replace("@BASE@", '"$BASE"')
            lines += [
                f"for _ in {' '.join(str(i) for i in range(1, WARMUP_REQUESTS + 1))}; do curl -sf \"$BASE/v1/completions\" "
                f"-H 'Content-Type: application/json' -d {q(warmup)} >/dev/null; done",
                f"curl -sf \"$BASE/metrics\" >{q(str(step.metrics_file('before')))}",
                f"{bench} >{q(str(step.bench_log))} 2>&1",
                f"curl -sf \"$BASE/metrics\" >{q(str(step.metrics_file('after')))}",
            ]
            if step.arm.url is None:
                lines.append("stop_server")
        return "\n".join(lines) + "\n"


def make_plan(
    *,
    vllm_cmd: tuple[str, ...],
    model: str,
    served_model_name: str,
    bench_tokenizer: str,
    dataset: BenchDataset,
    candidate_config: dict | None,
    out_dir: Path,
    trials: int = 2,
    mode: str = SPECULATIVE,
    serve_args: tuple[str, ...] = (),
    seed: int = 0,
    kv_cache_gib: float | None = None,
    ready_timeout_s: float = 900.0,
    baseline_url: str | None = None,
    candidate_url: str | None = None,
    vllm_version: str | None = None,
) -> VerifyPlan:
    """Interleaved steps A B A B ...: trial t runs the baseline, then the candidate.

    Mode "speculative": the candidate adds `candidate_config`. Mode "apc": the baseline runs with
    `--no-enable-prefix-caching`, the candidate with `--enable-prefix-caching`, neither speculates.
    """
    if mode == APC:
        arms = (Arm(BASELINE, None, baseline_url, ("--no-enable-prefix-caching",)),
                Arm(CANDIDATE, None, candidate_url, ("--enable-prefix-caching",)))
    elif mode == SPECULATIVE and candidate_config:
        arms = (Arm(BASELINE, None, baseline_url), Arm(CANDIDATE, candidate_config, candidate_url))
    else:
        raise ConfigError(f"verify mode {mode!r} needs a speculative config" if mode == SPECULATIVE
                          else f"unknown verify mode {mode!r}; expected one of {', '.join(MODES)}")
    steps = tuple(Step(trial, arm, out_dir) for trial in range(1, trials + 1) for arm in arms)
    return VerifyPlan(
        vllm_cmd=tuple(vllm_cmd), model=model, served_model_name=served_model_name, bench_tokenizer=bench_tokenizer,
        dataset=dataset, arms=arms, trials=trials, out_dir=out_dir, mode=mode, serve_args=tuple(serve_args), seed=seed,
        kv_cache_gib=kv_cache_gib, ready_timeout_s=ready_timeout_s, vllm_version=vllm_version,
        steps=steps,
    )
