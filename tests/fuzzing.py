"""Structured mutators over every log format, and the invariants every `advise` run must keep.

Used by tests/test_fuzz.py (a short run in the fast suite) and scripts/fuzz.py (the long run in .ci/run and
longer campaigns). A case is built from the project's fixtures (formats without a fixture get a small seed
written here in the format's documented shape): a few seed records, mutated at the JSON level (hostile
values, wrong types, deleted keys, deep nesting), at the byte level (truncation, bad UTF-8, binary garbage,
over-long lines, mixed formats) and at the file level (gzip, truncated gzip, empty files), run through the
real CLI in-process with a random mix of options (some hostile). Every case is seeded: `case(seed)` rebuilds it.

Invariants checked per run (`check`):
- the exit code is one of the README's table, and 2 only where an option value was hostile, 4 only with --strict;
- no traceback, no uncaught exception, no Python warning (numpy RuntimeWarnings included);
- with exit 0: read = used + skipped in the report's ingest counts, every skipped record's file:line among the
  problems (when they are not truncated), no NaN/Infinity in the JSON; with exit 3 after bad records, the
  skipped-record messages are printed;
- no prompt or completion text (a canary planted in every text field) in stdout, stderr or the report;
- format detection (`check_detection`): the detected format never uses fewer records than the case's own
  format would (read again with --format), nor gives up on a file that format reads.
"""
from __future__ import annotations

import copy
import gzip
import json
import random
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson
from click.testing import CliRunner

from advisor.cli import cli

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
CANARY = "qzxcanary"
README_EXIT_CODES = {0, 1, 2, 3, 4, 5, 6, 130}
MAX_RECORDS = 6

# --- seeds: a few records per format -----------------------------------------------------------------------


def _jsonl_seeds(*names: str, limit: int = 40) -> list[Any]:
    records = []
    for name in names:
        for line in (FIXTURES / name).read_bytes().splitlines()[:limit]:
            records.append(orjson.loads(line))
    return records


_AIDER = """# aider chat started at 2024-08-05 19:33:02

> aider --model x  
> Aider v0.47  

#### make it faster please with the cache  
#### and keep the tests green as they were  

Sure. Here is the edit that you asked for:

```python
x = 1
```

> Tokens: 5,244 sent, 1.2k cached, 604 received. Cost: $0.02 request.  
> Applied edit to a.py  
> Running lint
E1 bad
E2 worse  

Fixing the lint error now as you can see here.

> Tokens: 2k sent, 10 received.  

# aider chat started at 2024-08-05 20:00:00

#### hi there how are you doing today  

Hello! I am doing fine, thank you for asking me.
"""


def _swe_agent_seed() -> dict[str, Any]:
    call = {"id": "1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls -la\"}"}}
    return {"trajectory": [], "info": {}, "history": [
        {"role": "system", "content": "You are an autonomous programmer in a shell."},
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing test in the parser module please."}]},
        {"role": "assistant", "content": "Let me look at the files in the repository first.", "tool_calls": [call]},
        {"role": "tool", "content": "a.py b.py and some other files here", "tool_call_ids": ["1"]},
        {"role": "assistant", "content": "The bug is in a.py on the line with the loop."},
    ]}


@dataclass
class _Seeds:
    openai: list[Any]
    mooncake: list[Any]
    otel: list[Any]
    sharegpt: list[Any]
    azure_rows: list[str]
    bench_custom: list[Any]
    vllm_log: list[str]
    batch: list[Any]


_SEEDS: _Seeds | None = None


def seeds() -> _Seeds:
    """The seed records, loaded once per process."""
    global _SEEDS
    if _SEEDS is None:
        openai = _jsonl_seeds("code_editing.jsonl", "chat_multiturn.jsonl", "rag_summarization.jsonl",
                              "no_overlap.jsonl", "copy_heavy_high_rate.jsonl", limit=12)
        prompts = [r.get("prompt") for r in _jsonl_seeds("no_overlap.jsonl", limit=12) if isinstance(r.get("prompt"), str)]
        _SEEDS = _Seeds(
            openai=openai,
            mooncake=_jsonl_seeds("mooncake_trace.jsonl", limit=60),
            otel=_jsonl_seeds("otel_spans.jsonl", limit=8),
            sharegpt=orjson.loads((FIXTURES / "chat_sharegpt.json").read_bytes())[:20],
            azure_rows=(FIXTURES / "azure_trace.csv").read_text().splitlines()[1:80],
            bench_custom=[{"prompt": p, "output_tokens": 20 + 7 * i} for i, p in enumerate(prompts)],
            vllm_log=(FIXTURES / "vllm_server.log").read_text().splitlines(),
            batch=_jsonl_seeds("vllm_batch_requests.jsonl", "vllm_batch_outputs.jsonl"),
        )
    return _SEEDS


# --- JSON-level mutation -------------------------------------------------------------------------------------

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**53 + 1, 2**63, -(2**63), 2**64, 10**30, 1e300, -1e300, 1.5, -0.0, 1e-300,
    "", "x", "12", "-5", "1e400", "nan", "inf", "0x10", [], {}, [1, 2], [[]], {"a": 1}, [None], ["x"], [{"role": 1}],
    "2025-03-04T09:00:00Z", "9999-12-31T23:59:59.999999999Z", "0001-01-01T00:00:00Z", "10000-01-01T00:00:00Z",
    "2025-13-45T99:99:99Z", "1970-01-01T00:00:00+25:00", "2025-03-04T09:00:00.123456789123456789Z",
    "2025-03-04 09:00:00.+", "1e300", "-1e300", "99999999999999999999999", 1741078800783000064, 10**25,
    {"stringValue": 1}, {"intValue": "x"}, {"intValue": 1.5}, {"arrayValue": 3}, {"kvlistValue": {"values": [1]}},
    {"arrayValue": {"values": "abc"}}, {"doubleValue": "nan"}, {"intValue": "99999999999999999999"},
]


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indices) to a node of a JSON value, the root excluded."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append(prefix + (key,))
            found.extend(_paths(item, prefix + (key,)))
    elif isinstance(value, list):
        for index, item in enumerate(value[:50]):
            found.append(prefix + (index,))
            found.extend(_paths(item, prefix + (index,)))
    return found


def _get(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def _hostile(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.75:
        return copy.deepcopy(rng.choice(HOSTILE_VALUES))  # never shared: later mutations must not alias it
    if roll < 0.85:
        return "y" * rng.choice([1000, 70_000, 300_000])
    if roll < 0.92:
        depth = rng.choice([50, 300, 600])  # deeper than orjson's 1024 limit comes from mutate_bytes ("deep")
        nested: Any = 1
        for _ in range(depth):
            nested = [nested]
        return nested
    return [rng.choice([0, 1, 2**40, 2**62, -1]) for _ in range(rng.choice([3, 1000, 20_000]))]


def mutate_json(value: Any, rng: random.Random, log: list[str]) -> Any:
    """One structural mutation of a parsed record (it may be replaced whole)."""
    paths = _paths(value)
    if not paths or rng.random() < 0.04:
        log.append("record->hostile")
        return _hostile(rng)
    path = rng.choice(paths)
    parent = _get(value, path[:-1])
    key = path[-1]
    roll = rng.random()
    if roll < 0.55:
        parent[key] = _hostile(rng)
        log.append(f"set {'.'.join(map(str, path))}")
    elif roll < 0.7:
        del parent[key]
        log.append(f"del {'.'.join(map(str, path))}")
    elif roll < 0.8:
        current = parent[key]
        if isinstance(current, (int, float)) and not isinstance(current, bool):
            parent[key] = rng.choice([current * 10**rng.randint(3, 30), -current, current + 0.5, str(current), 0])
        else:
            parent[key] = [] if isinstance(current, list) else {} if isinstance(current, dict) else None
        log.append(f"shift {'.'.join(map(str, path))}")
    elif roll < 0.9:
        current = parent[key]
        if isinstance(current, list) and current and all(not isinstance(item, (list, dict)) for item in current):
            parent[key] = current * rng.choice([2, 50])  # scalars only: no shared containers to alias later
            log.append(f"repeat {'.'.join(map(str, path))}")
        else:
            parent[key] = [current]
            log.append(f"wrap {'.'.join(map(str, path))}")
    else:
        if isinstance(parent, dict):
            parent[rng.choice(["role", "content", "timestamp", "usage", "choices", "hash_ids", "messages", "prompt",
                                "attributes", "latency", "body", "turn", "n", "index", "parts"])] = _hostile(rng)
        log.append(f"add key at {'.'.join(map(str, path[:-1]))}")
    return value


def _plant(value: Any) -> Any:
    """The value with a canary word at the start of every text string (nested JSON text included)."""
    if isinstance(value, dict):
        return {key: _plant(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plant(item) for item in value]
    if isinstance(value, str) and value.count(" ") >= 2:
        stripped = value.lstrip()
        if stripped[:1] in "[{":
            try:
                return orjson.dumps(_plant(orjson.loads(value))).decode()
            except orjson.JSONDecodeError:
                pass
        return f"{CANARY} {value}"
    return value


# --- byte-level and file-level mutation ----------------------------------------------------------------------

def mutate_bytes(data: bytes, rng: random.Random, log: list[str]) -> bytes:
    if not data:
        return data
    roll = rng.random()
    at = rng.randrange(len(data))
    if roll < 0.2:
        log.append(f"truncate@{at}")
        return data[:at]
    if roll < 0.4:
        log.append(f"bad-utf8@{at}")
        return data[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"]) + data[at:]
    if roll < 0.55:
        log.append(f"garbage@{at}")
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.choice([1, 16, 300]))) + data[at:]
    if roll < 0.65:
        log.append("crlf")
        return data.replace(b"\n", b"\r\n")
    if roll < 0.72:
        log.append("bom")
        return b"\xef\xbb\xbf" + data
    if roll < 0.8:
        log.append(f"nul@{at}")
        return data[:at] + b"\x00" * rng.choice([1, 100]) + data[at:]
    if roll < 0.85:
        log.append(f"deep@{at}")  # nesting past every parser's depth limit, as text
        return data[:at] + b"[" * 3000 + b"]" * 3000 + data[at:]
    if roll < 0.9:
        log.append("dup-lines")
        lines = data.split(b"\n")
        return b"\n".join(lines + lines[: rng.randint(1, len(lines))])
    log.append("all-binary")
    return bytes(rng.randrange(256) for _ in range(rng.choice([10, 2000])))


def _gzip(data: bytes, rng: random.Random, log: list[str]) -> bytes:
    packed = gzip.compress(data, mtime=0)
    roll = rng.random()
    if roll < 0.4:
        cut = rng.randrange(2, max(3, len(packed)))
        log.append(f"gzip-truncated@{cut}")
        return packed[:cut]
    if roll < 0.5:
        log.append("gzip-corrupt")
        at = rng.randrange(10, max(11, len(packed)))
        return packed[:at] + b"\x00\xff" + packed[at + 2:]
    if roll < 0.55:
        log.append("gzip-trailing-garbage")
        return packed + b"garbage"
    log.append("gzip")
    return packed


# --- a case ---------------------------------------------------------------------------------------------------

FORMAT_NAMES = ("openai", "bench-custom", "sharegpt", "mooncake", "azure", "burstgpt", "swe-agent", "otel", "aider",
                "openai-batch", "vllm-log")

HOSTILE_OPTIONS: list[list[str]] = [
    ["--tp", "0"], ["--tp", str(2**31)], ["--tp", "-3"], ["--tp", "1000000"], ["--max-num-seqs", str(2**63)],
    ["--max-num-seqs", "0"], ["--max-num-seqs", str(10**9)], ["--block-size", str(2**40)], ["--block-size", "3"],
    ["--hash-block-size", str(2**40)], ["--hash-block-size", "0"], ["--max-replay-requests", str(2**63)],
    ["--request-rate", "1e308"], ["--request-rate", "inf"], ["--request-rate", "nan"], ["--request-rate", "1e-300"],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2147483648, "prompt_lookup_max": 4}'],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1000000000, "prompt_lookup_max": 4}'],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 9223372036854775808, "prompt_lookup_max": 4}'],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 9223372036854775807}'],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 0, "prompt_lookup_max": 0}'],
    ["--speculative-config", '{"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 1000000000}'],
    ["--speculative-config", '{"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_cached_requests": -5}'],
    ["--speculative-config", '{"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_spec_factor": 1e308}'],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": "4"}'],
    ["--speculative-config", '{"method": 7}'], ["--speculative-config", "[1]"], ["--speculative-config", "{"],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 1e300}'],
    ["--gpu", "Z9000"], ["--model", "no/such-model-xyz"], ["--workers", "100000"], ["--workers", "0"],
    ["--max-draft-requests", str(2**63)],
]
SAFE_OPTION_SETS: list[list[str]] = [
    [], ["--no-replay"], ["--no-sweep"], ["--no-recommend"], ["--no-replay", "--no-recommend"], ["--tp", "2"],
    ["--max-num-seqs", "8"], ["--request-rate", "3.5"], ["--block-size", "128"], ["--hash-block-size", "16"],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'],
    ["--speculative-config", '{"method": "suffix", "num_speculative_tokens": 8}'], ["--max-replay-requests", "2"],
]


@dataclass
class Case:
    seed: int
    fmt: str
    name: str  # file name of the input
    data: bytes
    args: list[str]
    log: list[str] = field(default_factory=list)
    hostile_option: bool = False
    strict: bool = False

    def describe(self) -> str:
        return f"seed {self.seed} [{self.fmt}] {self.name} args={self.args} mutations={self.log}"


def _dumps(value: Any) -> bytes:
    """JSON text of a mutated value: the stdlib writes ints beyond 64 bits and non-finite floats (as NaN and
    Infinity, which no JSON parser accepts: they must come back as invalid JSON), orjson refuses both."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _lines(records: list[Any]) -> bytes:
    return b"".join(_dumps(r) + b"\n" for r in records)


def _pick(rng: random.Random, pool: list[Any]) -> list[Any]:
    count = rng.choice([1, 1, 2, 3, MAX_RECORDS])
    return [orjson.loads(orjson.dumps(rng.choice(pool))) for _ in range(count)]


def _mutate_records(records: list[Any], rng: random.Random, log: list[str]) -> list[Any]:
    for _ in range(rng.choice([0, 1, 1, 2, 4])):
        index = rng.randrange(len(records))
        records[index] = mutate_json(records[index], rng, log)
    return records


def _csv(rng: random.Random, fmt: str, log: list[str]) -> bytes:
    rows = [rng.choice(seeds().azure_rows) for _ in range(rng.choice([1, 2, 5, 20]))]
    if fmt == "azure":
        header = "TIMESTAMP,ContextTokens,GeneratedTokens"
    else:
        header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
        converted = []
        for i, row in enumerate(rows):
            _, context, generated = row.split(",")
            converted.append(f"{i * 1.5:.1f},ChatGPT,{context},{generated},{int(context) + int(generated)},Conversation log")
        rows = converted
    cells = [row.split(",") for row in rows]
    for _ in range(rng.choice([0, 1, 2])):
        row = rng.choice(cells)
        column = rng.randrange(len(row))
        row[column] = str(rng.choice(["", "-1", "1e400", "2**63", str(2**63), "1e11", "nan", "x", '"', "9999-12-31 23:59:59.9999999",
                                       "0001-01-01 00:00:00", "1" * 40, "2023-11-16 18:00:00.1554427,5"]))
        log.append(f"cell {column}")
    if rng.random() < 0.08:
        header = rng.choice(['"TIMESTAMP,Context', "TIMESTAMP,,,", '"a"b",c', "TIMESTAMP\x00,ContextTokens"])
        log.append("broken header")
    return ("\n".join([header] + [",".join(row) for row in cells]) + "\n").encode()


def _aider(rng: random.Random, log: list[str]) -> bytes:
    lines = _AIDER.split("\n")
    for _ in range(rng.choice([0, 1, 2, 3])):
        index = rng.randrange(len(lines))
        lines[index] = rng.choice([
            "> Tokens: 99999999999999999999k sent, 1.2.3k cached, 5k received.  ", "> Tokens: 1..2k sent, 3 received.  ",
            "> Tokens: ,k sent, 3 received.  ", "# aider chat started at 99999-99-99 99:99:99",
            "# aider chat started at 2024-08-05 19:33:02.5.5", "#### ", "####", ">", "", "plain text reply here",
            "# aider chat started at ", "> Tokens: 1e400 sent, 3 received.  ",
        ])
        log.append(f"aider line {index}")
    return "\n".join(_plant_text(line) for line in lines).encode()


VLLM_LOG_NOISE = [
    "Received request x: params: SamplingParams(n=1, temperature=1e400, max_tokens=99999999999999999999)",
    "prompt_token_ids: [" + ",".join(["99999999999999999999"] * 3) + "]", "output_token_ids: [1, 2, -5]",
    "Generated response chatcmpl-x: output: 'unterminated", "non-default args: {'max_log_len': -1}",
    "non-default args: {'max_log_len': 99999999999999999999}", "finish_reason: None\x00", "",
]


def _vllm_log(rng: random.Random, log: list[str]) -> bytes:
    lines = seeds().vllm_log
    start = rng.randrange(len(lines))
    chosen = lines[start:start + rng.choice([10, 40, 120])]
    if rng.random() < 0.5:  # the startup lines carry --max-log-len and the year
        chosen = lines[:5] + chosen
    for _ in range(rng.choice([0, 1, 2, 3])):
        index = rng.randrange(len(chosen))
        roll = rng.random()
        if roll < 0.35:
            chosen[index] = chosen[index][: rng.randrange(len(chosen[index]) + 1)]
            log.append(f"cut line {index}")
        elif roll < 0.5:  # a request line twice: a duplicate record
            chosen.insert(index, chosen[index])
            log.append(f"repeated line {index}")
        elif roll < 0.7:
            prefix = chosen[index].split("] ", 1)[0] + "] "
            chosen[index] = prefix + rng.choice(VLLM_LOG_NOISE)
            log.append(f"noise line {index}")
        else:
            chosen[index] = re.sub(r"\d+", lambda m: rng.choice(["0", "-1", "99999999999999999999", m.group()]),
                                   chosen[index], count=3)
            log.append(f"numbers line {index}")
    planted = [line.replace("prompt: '", f"prompt: '{CANARY} ").replace("output: '", f"output: '{CANARY} ")
               for line in chosen]
    return ("\n".join(planted) + "\n").encode()


def _plant_text(line: str) -> str:
    """Aider's replies and inputs are text lines: the canary goes into every line of words."""
    if line.startswith(("# aider", "> Tokens")) or line.count(" ") < 3:
        return line
    prefix = "#### " if line.startswith("#### ") else "> " if line.startswith("> ") else ""
    return f"{prefix}{CANARY} {line[len(prefix):]}"


def case(seed: int, fmt: str | None = None) -> Case:
    """The fuzz case of `seed` (deterministic), in format `fmt` or a random one."""
    rng = random.Random(seed)
    fmt = fmt or rng.choice(FORMAT_NAMES)
    s = seeds()
    log: list[str] = []
    ext = ".jsonl"
    if fmt in ("openai", "mooncake", "otel", "bench-custom"):
        pool = {"openai": s.openai, "mooncake": s.mooncake, "otel": s.otel, "bench-custom": s.bench_custom}[fmt]
        records = _mutate_records([_plant(r) for r in _pick(rng, pool)], rng, log)
        if rng.random() < 0.05:  # a valid log whose first line is over 64 KiB
            first = records[0]
            if isinstance(first, dict):
                first["padding_field"] = "p" * 70_000
                log.append("first line > 64 KiB")
        if rng.random() < 0.05:  # mixed formats
            other = rng.choice([s.openai, s.mooncake, s.otel, s.sharegpt])
            records.insert(rng.randrange(len(records) + 1), _plant(rng.choice(other)))
            log.append("mixed format")
        data = _lines(records)
    elif fmt == "sharegpt":
        records = _mutate_records([_plant(r) for r in _pick(rng, s.sharegpt)], rng, log)
        if rng.random() < 0.5:
            ext, data = ".json", _dumps(records)
        else:
            data = _lines(records)
    elif fmt in ("azure", "burstgpt"):
        ext, data = ".csv", _csv(rng, fmt, log)
    elif fmt == "vllm-log":
        ext, data = ".log", _vllm_log(rng, log)
    elif fmt == "openai-batch":
        data = _lines(_mutate_records([_plant(r) for r in _pick(rng, s.batch)], rng, log))
    elif fmt == "swe-agent":
        document = _plant(_swe_agent_seed())
        for _ in range(rng.choice([0, 1, 2, 3])):
            document = mutate_json(document, rng, log)
        ext, data = ".traj", _dumps(document)
    else:
        ext, data = ".md", _aider(rng, log)
    if rng.random() < 0.3:
        data = mutate_bytes(data, rng, log)
    name = f"log{ext}"
    if rng.random() < 0.1:
        data = _gzip(data, rng, log)
        name += ".gz"
    args = [*rng.choice(SAFE_OPTION_SETS)]
    hostile = rng.random() < 0.12
    if hostile:
        args += rng.choice(HOSTILE_OPTIONS)
    strict = rng.random() < 0.08
    if strict:
        args.append("--strict")
    if rng.random() < 0.05:
        args += ["--format", rng.choice(FORMAT_NAMES)]
        log.append("forced format")
    # Keep most runs cheap (the long run is >= 10,000 cases): the sweep and the engine (~0.3 s a run) still
    # run in a fifth of the cases, the replays and the APC simulation in most.
    if "--no-replay" not in args and "--speculative-config" not in args and rng.random() < 0.8:
        args.append("--no-sweep")
    if "--no-recommend" not in args and rng.random() < 0.8:
        args.append("--no-recommend")
    return Case(seed=seed, fmt=fmt, name=name, data=data, args=args, log=log, hostile_option=hostile, strict=strict)


# --- running and checking ----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    report: bytes
    exception: BaseException | None
    caught_warnings: list[str]
    seconds: float


def run(case: Case, workdir: Path) -> Outcome:
    """Runs `advise <file> --json -o report.json <args>` in-process; captures everything it printed."""
    path = workdir / case.name
    path.write_bytes(case.data)
    report_path = workdir / "report.json"
    report_path.unlink(missing_ok=True)
    args = [str(path), "--json", "--no-progress", "-o", str(report_path), *case.args]
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(cli, args)
    seconds = time.perf_counter() - start
    exception = result.exception if not isinstance(result.exception, SystemExit) else None
    report = report_path.read_bytes() if report_path.exists() else b""
    return Outcome(result.exit_code, result.stdout, result.stderr, report, exception,
                   [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught], seconds)


def _line_numbers(problems: list[str], name: str) -> set[int]:
    numbers = set()
    for problem in problems:
        if problem.startswith(name + ":"):
            digits = problem[len(name) + 1:].split(":", 1)[0]
            if digits.isdigit():
                numbers.add(int(digits))
    return numbers


def check(case: Case, outcome: Outcome, workdir: Path) -> list[str]:
    """The invariants `outcome` breaks (empty: the run was fine)."""
    broken = []
    code = outcome.code
    if outcome.exception is not None:
        broken.append(f"uncaught {type(outcome.exception).__name__}: {outcome.exception}")
    if code not in README_EXIT_CODES:
        broken.append(f"exit code {code} is not in the README's table")
    if code == 2 and not case.hostile_option:
        broken.append(f"exit 2 without a hostile option: {outcome.stderr.strip()[-300:]}")
    if code == 4 and not case.strict:
        broken.append("exit 4 without --strict")
    if code in (1, 6, 130):
        broken.append(f"exit {code} is not a profile outcome")
    for stream, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
        if "Traceback" in text:
            broken.append(f"traceback on {stream}")
    if outcome.caught_warnings:
        broken.append(f"warnings: {outcome.caught_warnings[:3]}")
    everything = outcome.stdout + outcome.stderr + outcome.report.decode("utf-8", "replace")
    if CANARY in everything:
        broken.append("prompt/completion text (the canary) in the output")
    if code != 0 and not outcome.stderr.strip().startswith(("advise: error:", "Usage:", "Error:")):
        broken.append(f"exit {code} without a clear error: {outcome.stderr.strip()[:300]!r}")
    if code == 3 and "see the skipped-record messages" in outcome.stderr and f"{workdir / case.name}:" not in \
            outcome.stderr.split("see the skipped-record messages", 1)[1]:
        broken.append("exit 3 refers to skipped-record messages that were not printed")
    if code == 0:
        try:
            report = orjson.loads(outcome.stdout)
        except orjson.JSONDecodeError as error:
            return broken + [f"stdout is not JSON ({error})"]
        if outcome.report != outcome.stdout.encode():
            broken.append("-o report differs from --json stdout")
        ingest = report["ingest"]
        if not {"records_read", "records_used", "records_skipped"} <= ingest.keys():
            return broken + ["the report's ingest section has no record accounting (read, used, skipped)"]
        read, used, skipped = ingest["records_read"], ingest["records_used"], ingest["records_skipped"]
        if read != used + skipped:
            broken.append(f"records read {read} != used {used} + skipped {skipped}")
        if used == 0:
            broken.append("exit 0 with no record used")
        if ingest["skipped"] <= len(ingest["problems"]) and skipped:
            reported = _line_numbers(ingest["problems"], str(workdir / case.name))
            if len(reported) < skipped:
                broken.append(f"{skipped} skipped records but only lines {sorted(reported)} reported")
    return broken


def _records_used(case: Case, workdir: Path, fmt: str) -> int:
    """Records used when the case's file is read as `fmt` (the profile's cheapest run); 0 if it fails."""
    forced = Case(case.seed, case.fmt, case.name, case.data, ["--format", fmt, "--no-replay", "--no-recommend"])
    outcome = run(forced, workdir)
    return orjson.loads(outcome.stdout)["ingest"]["records_used"] if outcome.code == 0 else 0


def check_detection(case: Case, outcome: Outcome, workdir: Path) -> list[str]:
    """The detector never picks a format (or gives up) where the file's own format would use more records:
    a file misdetected sends every record to the wrong reader. Checked when detection decided (no --format,
    no hostile option or --strict that ends the run first) and chose another format or none."""
    if "--format" in case.args or case.hostile_option or case.strict or case.fmt not in FORMAT_NAMES:
        return []
    if outcome.code == 0:
        detected = orjson.loads(outcome.stdout)["inputs"][0]["format"]
        if detected == case.fmt:
            return []
        used = orjson.loads(outcome.stdout)["ingest"]["records_used"]
    elif outcome.code == 3 and "cannot tell the log format" in outcome.stderr:
        detected, used = "none", 0
    else:
        return []
    own = _records_used(case, workdir, case.fmt)
    return [f"detected as {detected} ({used} records used), read as {case.fmt} it uses {own}"] if own > used else []


def run_cases(seeds_: range, workdir: Path, fmt: str | None = None,
              on_case: Callable[[Case, Outcome, list[str]], None] | None = None) -> list[tuple[Case, list[str]]]:
    """Runs the cases of `seeds_`; returns the failing ones with what they broke."""
    failures = []
    for seed in seeds_:
        one = case(seed, fmt)  # a generator bug raises here, loudly: it is the suite's own
        outcome = run(one, workdir)
        broken = check(one, outcome, workdir) or check_detection(one, outcome, workdir)
        if on_case is not None:
            on_case(one, outcome, broken)
        if broken:
            failures.append((one, broken))
    return failures
