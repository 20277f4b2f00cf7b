"""One GPU calibration wave: several vLLM servers share the GPU, each benchmarked alone while the others idle.

Run on the lent H200 with the vLLM 0.26 bundle of ../shared/gpu staged (setup.sh there); the raw results
go to advisor/data/measurements/ with their provenance. Why a wave and not one server at a time: a server
takes 85-130 s to start (torch.compile, CUDA graphs), and the device time of a session is 30 minutes; the
servers of a wave start together and are benchmarked one after another.

Every run is one `vllm bench serve` (vLLM's own client code, in process: random dataset, `--ignore-eos`,
temperature 0, closed loop at `--max-concurrency C`), and beside its result JSON the driver records what
explains a step's time besides the GPU kernels: the CPU seconds of each process of the server (API server,
engine core) and of the client over the run, and an nvidia-smi trace (SM clock, power, GPU utilization)
sampled every 250 ms for the whole wave. A process near one CPU second per second is a bottleneck the GPU
cannot hide.

    python scripts/gpu_calibrate.py PLAN.json OUTDIR --deadline-s 540

PLAN.json: {"servers": [{"name", "shape", "k", "kv_cache_bytes", "max_num_seqs"?}...], "runs": [{"server",
"input_len", "output_len", "concurrency", "prompts", "repeat", "request_rate"?}...]} in priority order: runs that
would pass the deadline are skipped (listed in the summary), never cut short. A run with a `request_rate` is an
open-loop run: Poisson arrivals at that rate (`--request-rate R --burstiness 1`), `concurrency` only a cap, and
its per-request figures saved (`--save-detailed`), so the steady state the engine prices can be checked against
it. The host's CPU (model, a fixed single-thread Python loop timed at the wave's start and end) goes into
runs.json: a small shape's step is mostly engine CPU work, so the CPU explains a wave's level.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SYNTHETIC_RATES = [0.8, 0.6, 0.4, 0.2, 0.1, 0.05, 0.02, 0.01]  # per position, as the w1/w2 runs
BASE_PORT = 8100
HEALTH_TIMEOUT_S = 360
CLK_TCK = os.sysconf("SC_CLK_TCK")


def serve_command(server: dict, model_dir: Path, port: int) -> list[str]:
    """The `vllm serve` line of one server: the w1 protocol (fixed KV size so servers sharing a GPU do not
    profile each other's memory; `--max-num-seqs 256` as w2)."""
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "m",
               "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096",
               "--max-num-seqs", str(server.get("max_num_seqs", 256)), "--no-enable-prefix-caching", "--seed", "0",
               "--gpu-memory-utilization", "0.04", "--kv-cache-memory-bytes", str(server["kv_cache_bytes"])]
    k = int(server["k"])
    if k == 0:
        return command + ["--no-async-scheduling"]  # speculating servers turn it off themselves
    config = {"method": "custom_class", "model": "fixedk.FixedKProposer", "num_speculative_tokens": k,
              "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": SYNTHETIC_RATES[:k]}
    return command + ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def healthy(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        return True
    except OSError:
        return False


def group_cpu(pgid: int) -> dict[str, float]:
    """CPU seconds (user + system, all threads) of every live process in a process group, by 'comm:pid'."""
    usage = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:  # pgrp
            usage[f"{comm}:{entry}"] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return usage


def self_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def bench(port: int, tokenizer_dir: Path, run: dict, result_dir: Path, filename: str) -> dict:
    """One `vllm bench serve` in this process (vLLM's client code), the result as saved."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions",
            "--model", "m", "--tokenizer", str(tokenizer_dir), "--dataset-name", "random",
            "--random-input-len", str(run["input_len"]), "--random-output-len", str(run["output_len"]),
            "--ignore-eos", "--temperature", "0", "--max-concurrency", str(run["concurrency"]),
            "--num-prompts", str(run["prompts"]), "--num-warmups", "2",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--seed", "0",
            "--disable-tqdm", "--save-result", "--result-dir", str(result_dir), "--result-filename", filename]
    if "request_rate" in run:  # open loop: Poisson arrivals, the per-request figures kept
        argv += ["--request-rate", str(run["request_rate"]), "--burstiness", "1.0", "--save-detailed"]
    else:
        argv += ["--request-rate", "inf"]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return main(parser.parse_args(argv))


def host_cpu() -> dict:
    """The host's CPU model and the best of five timings of a fixed pure-Python loop (one core, ms)."""
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    timings = []
    for _ in range(5):
        t = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i * i % 7
        timings.append((time.perf_counter() - t) * 1000)
    return {"cpu_model": model, "cpus": os.cpu_count(), "loop_2m_ms": round(min(timings), 1),
            "loadavg": os.getloadavg()}


def stop_all(pids: list[int]) -> None:
    """SIGTERM to each server's process group, SIGKILL to what is left after 30 s."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.time() + 30
    for pid in pids:
        while time.time() < end:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.5)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def write_runs(out: Path, servers: dict, records: list, host: dict) -> None:
    """runs.json after every run, so a wave cut short keeps what it measured."""
    kept = {name: {key: value for key, value in server.items() if key not in ("process", "model_dir")}
            for name, server in servers.items()}
    (out / "runs.json").write_text(json.dumps({"host": host, "servers": kept, "records": records}, indent=1,
                                              default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan")
    parser.add_argument("out")
    parser.add_argument("--deadline-s", type=float, default=540.0, help="seconds from start to the last run's end")
    parser.add_argument("--shapes", default="advisor/data/measurements/h200_vllm0.26/shapes")
    parser.add_argument("--tokenizer-dir", default=str(Path.home() / "tok"))
    parser.add_argument("--stagger-s", type=float, default=8.0)
    args = parser.parse_args()
    start = time.time()
    deadline = start + args.deadline_s
    plan = json.loads(Path(args.plan).read_text())
    out = Path(args.out)
    (out / "res").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,"
                            "temperature.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "250"],
                           stdout=open(out / "gpu_trace.csv", "w"))
    servers: dict[str, dict] = {}
    host = {"start": host_cpu()}
    print(f"[wave] host {host['start']}", flush=True)
    try:
        for index, server in enumerate(plan["servers"]):
            model_dir = Path.home() / f"model_{server['name']}"
            model_dir.mkdir(exist_ok=True)
            shutil.copy(Path(args.shapes) / server["shape"] / "config.json", model_dir)
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(Path(args.tokenizer_dir) / name, model_dir)
            port = BASE_PORT + index
            command = serve_command(server, model_dir, port)
            log = open(out / "logs" / f"{server['name']}.server.log", "w")
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            servers[server["name"]] = {**server, "port": port, "pid": process.pid, "process": process,
                                       "model_dir": model_dir, "command": command, "started": time.time()}
            print(f"[wave] {server['name']} started at {time.time() - start:.0f}s", flush=True)
            time.sleep(args.stagger_s)
        for name, server in servers.items():
            while not healthy(server["port"]):
                if server["process"].poll() is not None or time.time() - server["started"] > HEALTH_TIMEOUT_S:
                    server["failed"] = True
                    print(f"[wave] {name} FAILED to start", flush=True)
                    break
                time.sleep(1)
            else:
                server["ready_s"] = time.time() - server["started"]
                print(f"[wave] {name} healthy after {server['ready_s']:.0f}s (at {time.time() - start:.0f}s)",
                      flush=True)
        records = []
        last_s: dict[str, float] = {}
        for run in plan["runs"]:
            server = servers[run["server"]]
            if server.get("failed"):
                continue
            key = f"{run['server']}_in{run['input_len']}_c{run['concurrency']}_n{run['prompts']}_r{run['repeat']}"
            if "request_rate" in run:
                key += f"_rate{run['request_rate']}"
            estimate = last_s.get(f"{run['server']}_{run['concurrency']}_{run['input_len']}", 0.0)
            if "request_rate" in run:  # an open-loop run lasts about prompts / rate, plus the drain
                estimate = max(estimate, run["prompts"] / run["request_rate"] + 10)
            if time.time() + estimate > deadline:
                print(f"[wave] skip {key} (deadline)", flush=True)
                records.append({"run": key, "skipped": "deadline"})
                continue
            cpu_before, client_before, t = group_cpu(server["pid"]), self_cpu(), time.time()
            try:
                result = bench(server["port"], server["model_dir"], run, out / "res", key + ".json")
            except Exception as error:  # one failed run must not lose the wave
                print(f"[wave] {key} FAILED: {error!r}", flush=True)
                records.append({"run": key, "failed": repr(error)})
                continue
            wall = time.time() - t
            cpu_after, client_after = group_cpu(server["pid"]), self_cpu()
            last_s[f"{run['server']}_{run['concurrency']}_{run['input_len']}"] = wall
            cpu = {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in cpu_after}
            record = {"run": key, **run, "k": server["k"], "shape": server["shape"], "t_start": t,
                      "t_end": t + wall, "wall_s": round(wall, 2), "bench_duration_s": result.get("duration"),
                      "server_cpu_s": cpu, "client_cpu_s": round(client_after - client_before, 2),
                      "median_tpot_ms": result.get("median_tpot_ms"), "median_itl_ms": result.get("median_itl_ms"),
                      "median_ttft_ms": result.get("median_ttft_ms"), "mean_tpot_ms": result.get("mean_tpot_ms"),
                      "request_throughput": result.get("request_throughput"),
                      "mean_e2el_ms": result.get("mean_e2el_ms"),
                      "output_throughput": result.get("output_throughput"),
                      "acceptance_length": result.get("spec_decode_acceptance_length")}
            records.append(record)
            print(f"[run] {key} wall={wall:.1f}s tpot={record['median_tpot_ms']:.3f} "
                  f"itl={record['median_itl_ms']:.3f} acc={record['acceptance_length']} "
                  f"cpu={cpu} client_cpu={record['client_cpu_s']}", flush=True)
            write_runs(out, servers, records, host)
        host["end"] = host_cpu()
        write_runs(out, servers, records, host)
    finally:
        stop_all([server["pid"] for server in servers.values()])
        smi.terminate()
        print(f"[wave] done at {time.time() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
