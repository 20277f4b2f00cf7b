"""`advise lint`: checks `vllm serve` / `vllm bench serve` command lines and `--config` YAML files.

Each rule catches a mistake that either stops vLLM 0.33 from starting (removed flags, unknown keys: the
speculative config is a pydantic model with extra="forbid") or, worse, starts a server or benchmark that
silently measures something else (`enable-prefix-caching: false` in YAML is ignored, `--request-rate inf`,
oversampled datasets that create artificial prefix hits). Every finding says why and how to fix it.
Facts: the project's vLLM 0.33 reference notes (vllm-0.33.md); the rule table is in docs/engine.md.
"""
from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from advisor.errors import InputError
from advisor.hardware import find_model
from advisor.report import Report
from advisor.vllm_vocab import (
    DEPRECATED_MTP_METHODS,
    DYNAMIC_K_METHODS,
    LEGACY_FLAGS,
    METHODS_NEEDING_K,
    METHODS_NEEDING_MODEL,
    PLACEHOLDER,
    REMOVED_METHODS,
    REMOVED_SPECULATIVE_KEYS,
    SHORTCUT_FLAGS,
    SPECULATIVE_CONFIG_FLAGS,
    SPECULATIVE_KEYS,
    SPECULATIVE_METHODS,
)
# Lint input limits (docs/input.md): deploy scripts and --config files are kilobytes; these bound the work
# on hostile input (a 20 MB command line, JSON or YAML nested thousands deep, a billion-laughs YAML).
MAX_LINT_BYTES = 1 << 20
MAX_JSON_CHARS = 1 << 16
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000

# rule id -> (severity, what it checks)
RULES: dict[str, tuple[str, str]] = {
    "legacy-flag": ("error", "a removed speculative flag (vLLM stops: unrecognized arguments)"),
    "duplicate-key": ("error", "the same speculative key through a shortcut flag and the JSON"),
    "placeholder": ("error", "a YOUR_VALUE placeholder left in"),
    "invalid-json": ("error", "--speculative-config is not one JSON object"),
    "unknown-key": ("error", "a key SpeculativeConfig does not have (extra=forbid)"),
    "removed-key": ("error", "a speculative key that older vLLM had and 0.33 rejects"),
    "unknown-method": ("error", "a method vLLM does not know"),
    "removed-method": ("error", "medusa / mlp_speculator"),
    "deprecated-method": ("warning", "a per-model MTP name that vLLM rewrites to mtp"),
    "missing-method": ("warning", "no explicit method: vLLM guesses it from the model name"),
    "missing-model": ("error", "a draft/head method without `model`"),
    "bad-k": ("error", "num_speculative_tokens missing where required, or <= 0"),
    "lookup-range": ("error", "prompt_lookup_min > prompt_lookup_max"),
    "bad-batch-table": ("error", "num_speculative_tokens_per_batch_size entries are not [start, end, k>=0]"),
    "batch-table-method": ("warning", "num_speculative_tokens_per_batch_size with a method that ignores it"),
    "vocab-mismatch": ("error", "draft and target vocabulary sizes differ"),
    "mtp-unsupported": ("error", "method mtp with a target that has no native MTP layers"),
    "max-model-len-low": ("error", "--max-model-len below the observed p99.9 of prompt + output"),
    "yaml-apc-false": ("error", "`enable-prefix-caching: false` in a --config YAML is silently ignored"),
    "invalid-yaml": ("error", "the --config file is not a YAML mapping"),
    "config-missing": ("warning", "--config names a local file that is not on this machine (contents not checked)"),
    "bench-request-rate": ("warning", "vllm bench serve with --request-rate inf or missing"),
    "bench-dataset-missing": ("error", "no --dataset-path where the dataset needs one"),
    "dataset-not-found": ("warning", "a --dataset-path that is not on this machine (rows not checked)"),
    "bench-oversample": ("error", "--num-prompts above the rows of a local dataset (duplicates inflate APC hits)"),
    "bench-temperature": ("warning", "vllm bench serve without --temperature"),
    "shell-syntax": ("error", "the command line cannot be split like a shell would"),
}

# Boolean flags (no value) of vllm serve / vllm bench serve that the linter may meet.
BOOLEAN_FLAGS = frozenset(
    {
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--enforce-eager", "--trust-remote-code",
        "--ignore-eos", "--no-oversample", "--save-result", "--save-detailed", "--disable-shuffle",
        "--skip-chat-template", "--disable-log-requests", "--disable-log-stats", "--enable-chunked-prefill",
        "--no-enable-chunked-prefill", "--disable-tqdm", "--use-beam-search", "--append-result",
        "--speculative-disable-mqa-scorer", "--speculative-disable-logprobs", "--help", "-h",
    }
)
DATASETS_NEEDING_PATH = frozenset({"sharegpt", "custom", "burstgpt", "spec_bench", "timed_trace"})
BENCH_DEFAULT_NUM_PROMPTS = 1000


@dataclass(frozen=True)
class Finding:
    """One problem: rule id, severity, where, and a message saying why and how to fix it."""

    rule: str
    severity: str
    line: int
    message: str
    file: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        return f"{self.file}:{self.line}: {self.severity} [{self.rule}] {self.message}"


def _finding(rule: str, line: int, message: str, file: str = "") -> Finding:
    return Finding(rule, RULES[rule][0], line, message, file)


# ---------------------------------------------------------------------------------------------------------
# the speculative config itself (shared with advisor.emit, which refuses to emit an invalid config)
# ---------------------------------------------------------------------------------------------------------


def check_speculative_config(config: dict, line: int, target: str | None = None, file: str = "") -> list[Finding]:
    """Checks one speculative-config object the way vLLM 0.33's SpeculativeConfig would, plus advice."""
    findings: list[Finding] = []
    normalized = {str(key).replace("-", "_"): value for key, value in config.items()}
    for key in normalized:
        if key in REMOVED_SPECULATIVE_KEYS:
            findings.append(_finding("removed-key", line, f"speculative key {key!r} was removed and is rejected by "
                                     f"vLLM 0.33: {REMOVED_SPECULATIVE_KEYS[key]}", file))
        elif key not in SPECULATIVE_KEYS:
            close = difflib.get_close_matches(key, sorted(SPECULATIVE_KEYS), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "see vllm/config/speculative.py for the accepted keys"
            findings.append(_finding("unknown-key", line, f"unknown speculative key {key!r} (vLLM rejects unknown "
                                     f"keys): {hint}", file))
    method = normalized.get("method")
    if method is not None and not isinstance(method, str):
        findings.append(_finding("unknown-method", line, f"\"method\" must be a string naming the method, got a "
                                 f"{type(method).__name__}: one of {', '.join(sorted(SPECULATIVE_METHODS))}", file))
        method = None
    elif method is None:
        findings.append(_finding("missing-method", line, "no \"method\": vLLM guesses it from `model` (anything not "
                                 "named eagle/dflash becomes draft_model); write the method explicitly", file))
    elif method in REMOVED_METHODS:
        findings.append(_finding("removed-method", line, f"method {method!r} no longer exists: {REMOVED_METHODS[method]}",
                                 file))
    elif method in DEPRECATED_MTP_METHODS:
        findings.append(_finding("deprecated-method", line, f"method {method!r} is rewritten to \"mtp\" with a "
                                 "deprecation warning: write \"method\": \"mtp\"", file))
    elif method not in SPECULATIVE_METHODS:
        close = difflib.get_close_matches(str(method), sorted(SPECULATIVE_METHODS), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(sorted(SPECULATIVE_METHODS))}"
        findings.append(_finding("unknown-method", line, f"unknown method {method!r}: {hint}", file))
    model = normalized.get("model")
    if model is not None and not isinstance(model, str):
        findings.append(_finding("missing-model", line, f"\"model\" must be a string (a model id or path), got a "
                                 f"{type(model).__name__}; fix it", file))
        normalized = {key: value for key, value in normalized.items() if key != "model"}
    if method in METHODS_NEEDING_MODEL and not normalized.get("model"):
        findings.append(_finding("missing-model", line, f"method {method!r} needs \"model\" (the draft or head to "
                                 "load); add it", file))
    k = normalized.get("num_speculative_tokens")
    if k is None and method in METHODS_NEEDING_K:
        findings.append(_finding("bad-k", line, f"method {method!r} needs \"num_speculative_tokens\" (k > 0); start "
                                 "with the k `advise` chose from the replay", file))
    elif k is not None and (not isinstance(k, int) or isinstance(k, bool) or k <= 0):
        findings.append(_finding("bad-k", line, f"num_speculative_tokens must be an integer > 0, got {k!r}; to stop "
                                 "drafting at some batch sizes use num_speculative_tokens_per_batch_size", file))
    low, high = normalized.get("prompt_lookup_min"), normalized.get("prompt_lookup_max")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        findings.append(_finding("lookup-range", line, f"prompt_lookup_min {low} > prompt_lookup_max {high}: vLLM "
                                 "rejects it; swap them or set min <= max", file))
    findings.extend(_check_batch_table(normalized, method, line, file))
    findings.extend(_check_draft_against_target(normalized, method, target, line, file))
    return findings


def _check_batch_table(config: dict, method: object, line: int, file: str) -> list[Finding]:
    table = config.get("num_speculative_tokens_per_batch_size")
    if table is None:
        return []
    valid = isinstance(table, list) and all(
        isinstance(entry, (list, tuple)) and len(entry) == 3 and all(isinstance(v, int) for v in entry)
        and entry[0] <= entry[1] and entry[2] >= 0
        for entry in table
    )
    if not valid:
        return [_finding("bad-batch-table", line, "num_speculative_tokens_per_batch_size must be a list of "
                         "[start_batch, end_batch, k] with start <= end and k >= 0, e.g. [[1,16,4],[17,1024,0]]", file)]
    if method is not None and method not in DYNAMIC_K_METHODS:
        return [_finding("batch-table-method", line, f"num_speculative_tokens_per_batch_size has no effect with method "
                         f"{method!r} (supported: {', '.join(sorted(DYNAMIC_K_METHODS))})", file)]
    return []


def _check_draft_against_target(config: dict, method: object, target: str | None, line: int,
                                file: str) -> list[Finding]:
    target_spec = find_model(target)
    if target_spec is None:
        return []
    if method == "mtp" and target_spec.mtp_layers == 0:
        return [_finding("mtp-unsupported", line, f"target {target} has no native MTP layers ({target_spec.source}): "
                         "use eagle3 with a trained head, or a lookup method", file)]
    draft_spec = find_model(config.get("model")) if method in ("draft_model", None) else None
    if draft_spec is not None and draft_spec.vocab_size != target_spec.vocab_size:
        return [_finding("vocab-mismatch", line, f"draft {config.get('model')} has vocabulary {draft_spec.vocab_size}, "
                         f"target {target} has {target_spec.vocab_size}: vLLM refuses draft_model with different "
                         "vocabularies; pick a draft from the target's family with the same vocab_size", file)]
    return []


# ---------------------------------------------------------------------------------------------------------
# command lines
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One logical command (continuations joined) with the 1-based line where it starts."""

    line: int
    tokens: tuple[str, ...]


def split_commands(text: str, file: str = "") -> tuple[list[Command], list[Finding]]:
    """Logical shell lines that run `vllm serve` or `vllm bench serve` (`\\` continuations joined)."""
    commands: list[Command] = []
    findings: list[Finding] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not buffer:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1])
            continue
        buffer.append(stripped)
        logical = " ".join(buffer)
        buffer = []
        if "vllm" not in logical:
            continue
        try:
            tokens = shlex.split(logical, comments=True)
        except ValueError as error:
            findings.append(_finding("shell-syntax", start, f"cannot split this line like a shell ({error}): check "
                                     "quotes around the JSON (use single quotes outside, double inside)", file))
            continue
        for index in range(len(tokens) - 1):
            if tokens[index] == "vllm" and tokens[index + 1] in ("serve", "bench"):
                commands.append(Command(start, tuple(tokens[index:])))
                break
    return commands, findings


def parse_args(tokens: list[str]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """Positional arguments and (flag, value) pairs; `--flag=value` and boolean flags handled."""
    positional: list[str] = []
    options: list[tuple[str, str | None]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in ("&&", "||", ";", "|", "&"):
            break
        if token.startswith("-") and len(token) > 1 and not _is_number(token):
            if "=" in token and token.startswith("--"):
                flag, value = token.split("=", 1)
                options.append((flag, value))
            elif token in BOOLEAN_FLAGS or index + 1 >= len(tokens) or (
                tokens[index + 1].startswith("-") and not _is_number(tokens[index + 1])
            ):
                options.append((token, None))
            else:
                options.append((token, tokens[index + 1]))
                index += 1
        else:
            positional.append(token)
        index += 1
    return positional, options


def _is_number(token: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", token) is not None


def _load_json_config(value: str | None, line: int, file: str) -> tuple[dict | None, list[Finding]]:
    if value is None:
        return None, [_finding("invalid-json", line, "--speculative-config without a value: pass one JSON object", file)]
    if len(value) > MAX_JSON_CHARS:
        return None, [_finding("invalid-json", line, f"--speculative-config is {len(value):,} characters, over the "
                               f"lint limit of {MAX_JSON_CHARS:,}: a speculative config is a few keys", file)]
    try:
        config = json.loads(value)
    except RecursionError:
        return None, [_finding("invalid-json", line, "--speculative-config nests too deep to be a speculative config",
                               file)]
    except json.JSONDecodeError as error:
        return None, [_finding("invalid-json", line, f"--speculative-config is not valid JSON ({error.msg} at column "
                               f"{error.colno}): quote keys and strings with double quotes, wrap the whole JSON in "
                               "single quotes for the shell", file)]
    if not isinstance(config, dict):
        return None, [_finding("invalid-json", line, "--speculative-config must be a JSON object {...}", file)]
    return config, []


def _lint_serve(command: Command, base_dir: Path, file: str, observed_p999: float | None) -> list[Finding]:
    findings: list[Finding] = []
    line = command.line
    positional, options = parse_args(list(command.tokens[2:]))
    target = positional[0] if positional else None
    settings: dict[str, str | None] = {}
    spec_config: dict | None = None
    shortcut_keys: dict[str, str] = {}
    shortcut_values: dict[str, object] = {}
    yaml_file: str | None = None
    for flag, value in options:
        name = flag.split("=", 1)[0]
        if name in LEGACY_FLAGS:
            replacement = LEGACY_FLAGS[name]
            findings.append(_finding("legacy-flag", line, f"{name} was removed from vLLM (\"unrecognized arguments\"): "
                                     f"put {replacement!r} into --speculative-config '{{\"method\": ..., ...}}'", file))
        elif name in SPECULATIVE_CONFIG_FLAGS:
            spec_config, errors = _load_json_config(value, line, file)
            findings.extend(errors)
        elif name in SHORTCUT_FLAGS:
            shortcut_keys[SHORTCUT_FLAGS[name]] = name
            shortcut_values[SHORTCUT_FLAGS[name]] = _shortcut_value(value)
        elif name == "--config":
            yaml_file = value
        settings[name.lstrip("-").replace("_", "-")] = value
    if yaml_file is not None:
        yaml_settings, yaml_findings, yaml_spec = _lint_yaml_reference(yaml_file, base_dir, target, file, line)
        findings.extend(yaml_findings)
        for key, value in yaml_settings.items():
            settings.setdefault(key, value)  # the command line beats the YAML
        if spec_config is None:
            spec_config = yaml_spec
    if spec_config is not None:
        json_keys = {k.replace("-", "_") for k in spec_config}
        for key, flag in shortcut_keys.items():
            if key in json_keys:
                findings.append(_finding("duplicate-key", line, f"{flag} and the JSON both set {key!r}: vLLM refuses "
                                         "the same key twice; keep it in the JSON only", file))
    if spec_config is not None or shortcut_values:
        merged = {**shortcut_values, **(spec_config or {})}
        findings.extend(check_speculative_config(merged, line, target, file))
    findings.extend(_placeholders(command, file))
    if observed_p999 is not None and settings.get("max-model-len") not in (None, PLACEHOLDER):
        try:
            max_len = int(str(settings["max-model-len"]).lower().replace("k", "000"))
        except ValueError:
            max_len = None
        if max_len is not None and max_len < observed_p999:
            findings.append(_finding("max-model-len-low", line, f"--max-model-len {max_len} is below the observed p99.9 "
                                     f"of prompt + output ({observed_p999:.0f} tokens): about 1 request in 1000 would be "
                                     "rejected; raise it (advise emits a value with headroom)", file))
    return findings


def _shortcut_value(value: str | None) -> object:
    """Shortcut flags carry strings; --spec-tokens is an integer in vLLM."""
    if value is not None and re.fullmatch(r"-?\d+", value):
        return int(value)
    return value


def _placeholders(command: Command, file: str) -> list[Finding]:
    hits = [token for token in command.tokens if PLACEHOLDER in token]
    if not hits:
        return []
    return [_finding("placeholder", command.line, f"{len(hits)} {PLACEHOLDER} placeholder(s) left in: replace each "
                     "with this deployment's value (model id, limits from your business load)", file)]


def _lint_bench(command: Command, base_dir: Path, file: str) -> list[Finding]:
    findings: list[Finding] = []
    line = command.line
    _, options = parse_args(list(command.tokens[3:]))
    settings = {flag.lstrip("-").replace("_", "-"): value for flag, value in options}
    rate = settings.get("request-rate")
    if rate is None or str(rate).lower() in ("inf", "infinity"):
        what = "is missing (default inf)" if rate is None else "is inf"
        findings.append(_finding("bench-request-rate", line, f"--request-rate {what}: every request is sent at once, "
                                 "which measures a burst, not your traffic; set the business request rate (advise "
                                 "reports the observed one) and --max-concurrency", file))
    if "temperature" not in settings:
        findings.append(_finding("bench-temperature", line, "no --temperature: the client no longer sends 0 by default, "
                                 "so acceptance differs from a greedy replay; pass --temperature 0 or your production "
                                 "value", file))
    dataset = settings.get("dataset-name") or "random"
    path_value = settings.get("dataset-path")
    if path_value is None:
        if dataset in DATASETS_NEEDING_PATH:
            findings.append(_finding("bench-dataset-missing", line, f"--dataset-name {dataset} needs --dataset-path: "
                                     "point it at a local file (the hub is not reachable)", file))
    elif PLACEHOLDER not in path_value:
        path = Path(path_value).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        if not path.exists():
            # A config repository's CI rarely holds the benchmark data: not an error, but nothing to count either.
            findings.append(_finding("dataset-not-found", line, f"--dataset-path {path_value} is not on this machine "
                                     f"(relative to {base_dir}): make sure it exists where the bench runs; "
                                     "--num-prompts is not checked against its rows", file))
        elif path.is_file() and "no-oversample" not in settings:
            rows = _count_rows(path)
            try:
                prompts = int(settings.get("num-prompts") or BENCH_DEFAULT_NUM_PROMPTS)
            except ValueError:
                prompts = None
            if rows is not None and prompts is not None and prompts > rows:
                findings.append(_finding("bench-oversample", line, f"--num-prompts {prompts} > {rows} rows in "
                                         f"{path_value}: vLLM duplicates rows to fill up, creating artificial prefix-cache "
                                         f"hits; use --num-prompts {rows} or --no-oversample", file))
    findings.extend(_placeholders(command, file))
    return findings


def _count_rows(path: Path) -> int | None:
    """Rows of a local dataset: JSON array length, or non-empty lines of a JSONL file."""
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            return len(data) if isinstance(data, list) else None
        with path.open("rb") as handle:
            return sum(1 for raw in handle if raw.strip())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------
# --config YAML
# ---------------------------------------------------------------------------------------------------------


def _yaml_line(text: str, key: str) -> int:
    """1-based line of a top-level key (dashes or underscores) in a YAML text; 1 when not found."""
    name = "[-_]".join(re.escape(part) for part in re.split(r"[-_]", key))
    pattern = re.compile(rf"^{name}\s*:", re.MULTILINE)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else 1


class _TooComplex(yaml.YAMLError):
    """A YAML text beyond the lint limits (nesting, aliases, size): no deploy config looks like that."""


def _safe_yaml(text: str) -> object:
    """`yaml.safe_load` after a linear pass over the parse events that enforces the lint limits.

    safe_load builds aliases as shared references, but everything that walks the result (str(), the
    checks) expands them: nine levels of nine aliases (billion laughs) are 9^9 nodes from 81 aliases. The
    pass counts the nodes as if every alias were expanded and stops past MAX_YAML_NODES, past
    MAX_YAML_DEPTH levels of nesting, or past MAX_LINT_BYTES of text.
    """
    if len(text) > MAX_LINT_BYTES:
        raise _TooComplex(f"{len(text):,} characters, over the lint limit of {MAX_LINT_BYTES:,}")
    anchors: dict[str, int] = {}  # anchor -> expanded node count
    open_nodes: list[tuple[str | None, int]] = [(None, 0)]  # (anchor, nodes so far) per open collection
    total = 0

    def add(nodes: int) -> None:
        nonlocal total
        total += nodes
        if total > MAX_YAML_NODES:
            raise _TooComplex(f"more than {MAX_YAML_NODES:,} nodes once its aliases are expanded "
                              f"(alias expansion limit)")
        anchor, count = open_nodes[-1]
        open_nodes[-1] = (anchor, count + nodes)

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(open_nodes) > MAX_YAML_DEPTH:
                raise _TooComplex(f"nested deeper than {MAX_YAML_DEPTH} levels")
            open_nodes.append((event.anchor, 1))
            total += 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, count = open_nodes.pop()
            if anchor is not None:
                anchors[anchor] = count
            total -= count  # re-added to the parent as one block below
            add(count)
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                anchors[event.anchor] = 1
            add(1)
        elif isinstance(event, yaml.AliasEvent):
            add(anchors.get(event.anchor, 1))
    return yaml.safe_load(text)


def lint_yaml(text: str, file: str = "", target: str | None = None) -> tuple[dict, list[Finding], dict | None]:
    """Checks a `vllm serve --config` YAML; returns its settings (dashed keys), findings, speculative config."""
    try:
        data = _safe_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        if isinstance(error, _TooComplex):
            return {}, [_finding("invalid-yaml", 1, f"beyond the lint limits ({error}): a --config file is a flat "
                                 "mapping of flags", file)], None
        return {}, [_finding("invalid-yaml", line, f"not valid YAML ({error}): fix the syntax", file)], None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return {}, [_finding("invalid-yaml", 1, "a --config file must be a mapping of flag names to values", file)], None
    findings: list[Finding] = []
    settings: dict[str, str | None] = {}
    spec_config: dict | None = None
    target = target or (str(data["model"]) if data.get("model") else None)
    for key, value in data.items():
        name = str(key).replace("_", "-")
        line = _yaml_line(text, str(key))
        settings[name] = None if value is True else str(value)
        if f"--{name}" in LEGACY_FLAGS:
            findings.append(_finding("legacy-flag", line, f"{name} was removed from vLLM: put "
                                     f"{LEGACY_FLAGS['--' + name]!r} into speculative-config", file))
        if name == "enable-prefix-caching" and value is False:
            findings.append(_finding("yaml-apc-false", line, "`enable-prefix-caching: false` is silently dropped by "
                                     "vLLM's YAML loader, so APC stays ON; write `no-enable-prefix-caching: true`",
                                     file))
        if name == "speculative-config":
            if isinstance(value, str):
                spec_config, errors = _load_json_config(value, line, file)
                findings.extend(errors)
            elif isinstance(value, dict):
                spec_config = value
            else:
                findings.append(_finding("invalid-json", line, "speculative-config must be a mapping or a JSON object",
                                         file))
        if isinstance(value, str) and PLACEHOLDER in value:
            findings.append(_finding("placeholder", line, f"{name}: {PLACEHOLDER} left in; replace it with this "
                                     "deployment's value", file))
    if spec_config is not None:
        findings.extend(check_speculative_config(spec_config, _yaml_line(text, "speculative-config"), target, file))
    return settings, findings, spec_config


def _lint_yaml_reference(name: str | None, base_dir: Path, target: str | None, file: str,
                         line: int) -> tuple[dict, list[Finding], dict | None]:
    if not name:
        return {}, [_finding("invalid-yaml", line, "--config without a file name: vLLM stops (argparse expects one "
                             "argument); name the YAML file", file)], None
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        return {}, [_finding("config-missing", line, f"--config {name} is not on this machine (relative to "
                             f"{base_dir}): its settings are not checked; vLLM stops if it is missing where it "
                             "serves", file)], None
    try:
        if path.stat().st_size > 4 * MAX_LINT_BYTES:
            return {}, [_finding("invalid-yaml", line, f"--config {name} is {path.stat().st_size:,} bytes, over the "
                                 f"lint limit of {MAX_LINT_BYTES:,} characters", file)], None
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        return {}, [_finding("config-missing", line, f"--config {name} cannot be read ({error}): vLLM would stop",
                             file)], None
    return lint_yaml(text, str(path), target)


# ---------------------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------------------


def _looks_like_yaml_config(text: str) -> bool:
    if re.search(r"(^|\s)vllm\s+(serve|bench)\b", text):
        return False
    try:
        return isinstance(_safe_yaml(text), dict)
    except _TooComplex:
        return True  # lint_yaml reports it
    except yaml.YAMLError:
        return False


def lint_text(text: str, file: str = "<stdin>", base_dir: Path | None = None,
              observed_p999: float | None = None) -> list[Finding]:
    """All findings for a shell/Markdown text holding vllm commands, or for a --config YAML."""
    base_dir = base_dir or Path.cwd()
    if len(text) > MAX_LINT_BYTES:
        raise InputError(f"{file}: {len(text):,} characters, over the lint limit of {MAX_LINT_BYTES:,}: a deploy "
                         f"script or --config file is far smaller; lint the part that holds the vllm commands")
    if _looks_like_yaml_config(text):
        return lint_yaml(text, file)[1]
    commands, findings = split_commands(text, file)
    for command in commands:
        if command.tokens[1] == "serve":
            findings.extend(_lint_serve(command, base_dir, file, observed_p999))
        elif len(command.tokens) > 2 and command.tokens[2] == "serve":
            findings.extend(_lint_bench(command, base_dir, file))
    return sorted(findings, key=lambda f: (f.file, f.line, f.rule))


def lint_file(path: Path, observed_p999: float | None = None) -> list[Finding]:
    """Lints a file; InputError when it cannot be read."""
    try:
        if path.stat().st_size > 4 * MAX_LINT_BYTES:
            raise InputError(f"{path}: {path.stat().st_size:,} bytes, over the lint limit of {MAX_LINT_BYTES:,} "
                             f"characters")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read ({error})") from error
    if len(text) > MAX_LINT_BYTES:
        raise InputError(f"{path}: {len(text):,} characters, over the lint limit of {MAX_LINT_BYTES:,}")
    if path.suffix in (".yaml", ".yml"):
        return lint_yaml(text, str(path))[1]
    return lint_text(text, str(path), path.parent, observed_p999)


def observed_p999_from_report(report: Report) -> float | None:
    """The p99.9 of prompt + output tokens from a profile report (for the max-model-len rule)."""
    total = report.lengths.total
    return None if total is None else total.p99_9
