"""One regression case per crash class of issue 11 (a 10,000-case fuzz of the fixtures), each of which
ended in a traceback, a wrong exit code, a wrong format or unbounded memory before the fix; plus the
process-limit test and the option limits.

Every case runs the real CLI in-process and is checked by the fuzz suite's own invariants
(tests/fuzzing.py: exit code in the README's table, no traceback, no warning, read = used + skipped, no
prompt text), then for its specific outcome.

Class of the issue -> the case that failed before the fix (run against 15a5081, the commit before issue 11,
with these tests; what the old code did):
- timestamps/durations: arrivals.concurrency ValueError -> test_end_before_start_... (uncaught ValueError);
  parse_iso OverflowError -> test_far_times_...[9999-..., 0001-..., +-1e300] (OverflowError); open_loop
  ZeroDivisionError -> test_open_loop_... (ZeroDivisionError); profile._nan OverflowError ->
  test_huge_csv_count_... (OverflowError); numpy RuntimeWarnings -> test_counts_beyond_64_bits_...[numpy
  RuntimeWarning] and test_speculative_config_...[config5] (RuntimeWarning in a cast)
- Mooncake hash_ids: OverflowError -> test_hostile_hash_ids_...[record0]; MemoryError in the APC replay ->
  [record2, record3] (MemoryError)
- OTel spans -> test_malformed_otel_spans_...[record0-4, record7] (TypeError, AttributeError)
- OpenAI: render_tool_call -> test_malformed_openai_...[change0] (RecursionError as TypeError); _completions ->
  [change2] (TypeError); an empty message list -> test_only_empty_conversations_... (exit 5); malformed usage
  accepted -> test_malformed_usage_is_reported_not_accepted (no problem reported)
- aider._count -> test_aider_malformed_tokens_... (ValueError); SWE-agent -> test_swe_agent_assistant_first_...
  (exit 5); bench-custom -> test_bench_custom_bad_output_tokens[1099511627776] (MemoryError)
- truncated/corrupt .gz -> test_truncated_gzip_keeps_... (exit 3, nothing kept), test_corrupt_gzip_... (zlib
  error); csv.Error -> test_broken_csv_header_...[\r], test_csv_row_with_a_carriage_return_... (csv.Error);
  report.dumps TypeError -> test_counts_beyond_64_bits_...[TypeError in report.dumps] (TypeError)
- exit 3 without the skipped-record messages -> test_exit_3_prints_the_skipped_record_messages; a first line
  over 64 KiB -> test_long_first_line_is_detected (cannot tell the format)
- files detected as the wrong format -> test_one_odd_first_line_does_not_decide_the_format (Mooncake for an
  OpenAI or OTel file; "cannot tell" for the others), test_batch_output_file_with_a_damaged_first_line_...,
  test_prompt_quoting_an_aider_transcript_... (read as aider), test_trajectory_longer_than_the_sniff_window_...
  and the real-data one (cannot tell), test_records_longer_than_the_sniff_window_... (ShareGPT for a trace);
  test_a_rotated_vllm_log_that_starts_inside_a_stream_... failed on main before this change, not on 15a5081
- options: --speculative-config k 2^31, 10^9, 2^63, a huge prompt_lookup_max or tree depth ->
  test_speculative_config_beyond_the_limits_... (MemoryError, ValueError); whatif --tp 0 ->
  test_whatif_options_...[args0] (exit 1, a traceback)
- lint: a non-string method or model -> test_hostile_lint_inputs_...[0, 1] (TypeError, exit 0); nested
  thousands deep -> [2, 3] (RecursionError); billion laughs -> [4] (MemoryError); a 20 MB file ->
  test_huge_lint_input_is_refused (no limit); a malformed --report -> the 4 GiB report of
  test_hostile_inputs_and_options_stay_within_a_memory_limit (MemoryError; the JSON-shape cases of
  test_malformed_lint_report_is_exit_3 were already refused cleanly and stay as guards)
- memory: a 50 MB record, input_length 1e11 -> test_hostile_inputs_and_options_stay_within_a_memory_limit
  (MemoryError under RLIMIT_AS)
15 of the 134 cases passed on the old code too (they guard neighbours of a class, or options it did not have):
the quoted-header CSV case, whatif --concurrency 0,8 and a nan acceptance length, --tp 0 in the profile, the
report-shape cases, --workers / --max-draft-requests and verify's --trials 0 / --tensor-parallel-size /
--gpu-memory-utilization, the realistic-limit run, and the rotated vLLM log (a regression after 15a5081).
"""
from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import fuzzing
from advisor.cli import cli
from advisor.errors import EXIT_BAD_LINES, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from advisor.ingest import IngestStats, detect_format, read_requests

GOOD = {"timestamp": "2025-03-04T09:00:00Z", "messages": [{"role": "user", "content": "Write the parser now"}],
        "response": {"choices": [{"message": {"role": "assistant", "content": "Here is the parser you asked for"}}]},
        "latency": 1.5}


def _case(tmp_path: Path, name: str, data: bytes, *args: str, hostile_option: bool = False,
          strict: bool = False) -> tuple[fuzzing.Outcome, dict | None]:
    """Runs the profile on `data` written to `name`; asserts the fuzz invariants; returns the outcome and report."""
    case = fuzzing.Case(seed=-1, fmt="regression", name=name, data=data, args=["--no-sweep", *args],
                        hostile_option=hostile_option, strict=strict)
    outcome = fuzzing.run(case, tmp_path)
    assert fuzzing.check(case, outcome, tmp_path) == [], outcome.stderr
    return outcome, orjson.loads(outcome.stdout) if outcome.code == EXIT_OK else None


def _lines(*records: object) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def _skipped(report: dict) -> list[str]:
    return [problem.split(": ", 1)[1] for problem in report["ingest"]["problems"]]


# --- timestamps and durations ---------------------------------------------------------------------------

def test_end_before_start_is_skipped_not_a_concurrency_valueerror(tmp_path):
    bad = {**GOOD, "timestamp": 1741078800, "end_time": 1741078700}
    del bad["latency"]
    _, report = _case(tmp_path, "log.jsonl", _lines(GOOD, bad))
    assert _skipped(report) == ["out of range: the end time must follow the start time by at most a week"]


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+01:00", 1e300, -1e300,
                                  "2025-03-04T09:00:00.1234567890123456789012345Z", "10000-01-01T00:00:00Z", 2**64])
def test_far_times_are_skipped_not_overflow(tmp_path, when):
    _, report = _case(tmp_path, "log.jsonl", _lines(GOOD, {**GOOD, "timestamp": when}))
    assert report["ingest"]["records_skipped"] == 1 and report["ingest"]["records_used"] == 1


def test_huge_csv_count_is_skipped_not_overflow_in_profile_nan(tmp_path):
    data = f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.1,{'1' * 400},3\n2023-11-16 18:00:01.1,5,3\n"
    _, report = _case(tmp_path, "trace.csv", data.encode())
    assert _skipped(report) == ["out of range: column 'ContextTokens' has 400 digits"]


@pytest.mark.parametrize("outputs", [[0], [0, 0, 0], [0, 5]])
def test_zero_length_outputs_and_single_requests_give_a_finite_report(tmp_path, outputs):
    rows = "".join(f"2023-11-16 18:00:0{i}.0,100,{n}\n" for i, n in enumerate(outputs))
    _, report = _case(tmp_path, "trace.csv", ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows).encode())
    assert "recommendation" in report


def test_open_loop_with_zero_length_requests_at_a_high_rate_is_finite():
    """ZeroDivisionError in engine/cost.open_loop: a saturated server with zero-length outputs."""
    import math

    from advisor.engine.cost import CostModel
    from advisor.hardware import resolve_gpu, resolve_model

    model = CostModel(resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("H200"), 1)
    point = model.open_loop(1e6, 0, 0)
    assert math.isfinite(point.tpot_ms) and point.saturated


def test_csv_row_with_a_carriage_return_is_skipped(tmp_path):
    data = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.1,5,3\n2023-11-16 18:00:01.1,5\r9,3\n"
    _, report = _case(tmp_path, "trace.csv", data.encode())
    assert _skipped(report)[0].startswith("malformed CSV row")


def test_identical_timestamps_and_one_second_of_traffic(tmp_path):
    same = [{**GOOD, "latency": 0.0} for _ in range(4)]
    _, report = _case(tmp_path, "log.jsonl", _lines(*same), "--no-replay")
    assert report["ingest"]["records_used"] == 4
    second = [{**GOOD, "timestamp": f"2025-03-04T09:00:00.{i}Z", "latency": 0.2} for i in range(10)]
    _case(tmp_path, "log.jsonl", _lines(*second))


@pytest.mark.parametrize("record, was", [
    ({"timestamp": 5, "input_length": 1000, "output_length": 2**64, "hash_ids": [1]}, "numpy RuntimeWarning in a cast"),
    ({"timestamp": 5, "input_length": 10**20, "output_length": 3}, "TypeError in report.dumps"),
])
def test_counts_beyond_64_bits_are_skipped(tmp_path, record, was):
    good = {"timestamp": 1, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}
    _, report = _case(tmp_path, "trace.jsonl", _lines(good, record), "--tp", "2")
    assert _skipped(report)[0].startswith("out of range"), was


# --- Mooncake / timed_trace hash ids -----------------------------------------------------------------------

@pytest.mark.parametrize("record", [
    {"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": [-1, 2]},
    {"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": [2**64 - 1]},
    {"timestamp": 5, "input_length": 10**11, "output_length": 3, "hash_ids": [1]},
    {"timestamp": 5, "input_length": 1000, "output_length": 10**11, "hash_ids": [1]},
    {"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": list(range(5000))},
])
def test_hostile_hash_ids_and_lengths_are_skipped_before_the_apc_replay(tmp_path, record):
    good = {"timestamp": 1, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}
    _, report = _case(tmp_path, "trace.jsonl", _lines(good, record))
    assert report["ingest"]["records_skipped"] == 1 and _skipped(report)[0].startswith("out of range")


# --- OpenTelemetry spans -------------------------------------------------------------------------------------

def _span(attributes: list, **fields) -> dict:
    return {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "chat", "startTimeUnixNano": "1741078800783000064",
                                                           "attributes": attributes, **fields}]}]}]}


def _attr(key: str, value: dict) -> dict:
    return {"key": key, "value": value}


MESSAGES = _attr("gen_ai.input.messages", {"stringValue": json.dumps([{"role": "user", "parts": [
    {"type": "text", "content": "Say hello to the nice people"}]}])})
OPERATION = _attr("gen_ai.operation.name", {"stringValue": "chat"})


@pytest.mark.parametrize("record", [
    _span([OPERATION, MESSAGES, _attr("gen_ai.usage.input_tokens", {"intValue": [1]})]),  # _any_value int(list)
    _span([OPERATION, MESSAGES, {"key": 5, "value": {"stringValue": "x"}}]),  # _attributes: a non-string key
    _span([OPERATION, MESSAGES, _attr("x", {"arrayValue": 3})]),  # _any_value: arrayValue not an object
    _span([OPERATION, MESSAGES, _attr("x", {"kvlistValue": {"values": [1]}})]),
    _span([_attr("gen_ai.operation.name", {"arrayValue": {"values": [{"stringValue": "chat"}]}}), MESSAGES]),
    _span([OPERATION, _attr("gen_ai.input.messages", {"stringValue": '[{"role": "user", "parts": 5}]'})]),
    _span([OPERATION, MESSAGES], startTimeUnixNano="99999999999999999999999999"),
    {"resourceSpans": 5},  # _spans: not a list
    {"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]},
])
def test_malformed_otel_spans_are_skipped(tmp_path, record):
    good = _span([OPERATION, MESSAGES])
    _, report = _case(tmp_path, "spans.jsonl", _lines(good, record), "--no-replay")
    assert report["ingest"]["records_skipped"] == 1


def test_a_line_of_agent_spans_only_is_reported(tmp_path):
    agent = _span([_attr("gen_ai.operation.name", {"stringValue": "invoke_agent"})])
    _, report = _case(tmp_path, "spans.jsonl", _lines(_span([OPERATION, MESSAGES]), agent), "--no-replay")
    assert _skipped(report)[0].startswith("no model call")


# --- OpenAI records ----------------------------------------------------------------------------------------

def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("change, reason", [
    ({"response": {"choices": [{"message": {"role": "assistant", "content": "x", "tool_calls": [
        {"function": {"name": "f", "arguments": _nested(300)}}]}}]}}, "wrong type"),  # render_tool_call
    ({"response": {"choices": [{"message": {"role": "assistant", "content": "x", "tool_calls": [
        {"function": {"name": {"n": 1}, "arguments": "{}"}}]}}]}}, "wrong type"),
    ({"response": {"choices": [{"index": "a", "text": "x"}, {"index": 1, "text": "y"}]}}, "wrong type"),  # sort
    ({"messages": []}, "empty conversation"),  # was exit 5 for the whole run
    ({"usage": [1, 2]}, "wrong type"),  # malformed usage was accepted
    ({"usage": {"prompt_tokens": -5, "completion_tokens": 3}}, "out of range"),
    ({"usage": {"prompt_tokens": 5, "completion_tokens": 2.5}}, "wrong type"),
    ({"usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}}, "inconsistent usage"),
    ({"prompt": [1, 2, -3], "messages": None}, "wrong type"),
])
def test_malformed_openai_records_are_skipped(tmp_path, change, reason):
    bad = {key: value for key, value in {**GOOD, **change}.items() if value is not None}
    _, report = _case(tmp_path, "log.jsonl", _lines(GOOD, bad), "--no-replay")
    assert _skipped(report)[0].startswith(reason)


@pytest.mark.parametrize("usage", [[1, 2], {"prompt_tokens": -5, "completion_tokens": 3},
                                   {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}])
def test_malformed_usage_is_reported_not_accepted(tmp_path, usage):
    """Accepted as good before: the record's counts went into the report."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(_lines(GOOD, {**GOOD, "usage": usage}))
    stats = IngestStats()
    assert len(list(read_requests([str(path)], stats=stats))) == 1
    assert [problem.split(": ")[0] for problem in stats.problems] == [f"{path}:2"]


def test_exit_3_prints_the_skipped_record_messages(tmp_path):
    """Exit 3 said "see the skipped-record messages" and printed none of them."""
    outcome, _ = _case(tmp_path, "log.jsonl", _lines({**GOOD, "messages": 5}, {**GOOD, "messages": 7}))
    assert outcome.code == EXIT_INPUT
    assert "log.jsonl:1: wrong type" in outcome.stderr and "log.jsonl:2: wrong type" in outcome.stderr


def test_only_empty_conversations_exit_3_with_the_messages(tmp_path):
    outcome, _ = _case(tmp_path, "log.jsonl", _lines({**GOOD, "messages": []}, {**GOOD, "messages": []}))
    assert outcome.code == EXIT_INPUT
    assert "log.jsonl:1: empty conversation" in outcome.stderr and "log.jsonl:2: empty conversation" in outcome.stderr


# --- aider, SWE-agent, bench-custom --------------------------------------------------------------------------

def test_aider_malformed_tokens_line_skips_its_reply(tmp_path):
    text = ("# aider chat started at 2024-08-05 19:33:02\n\n#### make it faster now please  \n\nSure, done here.\n\n"
            "> Tokens: 1.2.3k sent, 3 received.  \n\n#### and again please now  \n\nDone again for you.\n")
    _, report = _case(tmp_path, "chat.md", text.encode(), "--no-replay")
    assert _skipped(report) == ["wrong type: the Tokens line holds a count that is not a number"]


def test_swe_agent_assistant_first_is_skipped_not_exit_5(tmp_path):
    document = fuzzing._swe_agent_seed()
    document["history"].insert(0, {"role": "assistant", "content": "I start talking before anyone asked"})
    _, report = _case(tmp_path, "run.traj", orjson.dumps(document), "--no-replay")
    assert _skipped(report)[0].startswith("malformed turn") and report["ingest"]["records_used"] == 5


@pytest.mark.parametrize("tokens", [-1, 2**40, 1.5, "12"])
def test_bench_custom_bad_output_tokens(tmp_path, tokens):
    records = [{"prompt": "Summarise this short text now", "output_tokens": 10},
               {"prompt": "Summarise this other text now", "output_tokens": tokens}]
    _, report = _case(tmp_path, "bench.jsonl", _lines(*records), "--no-replay", "--format", "bench-custom")
    assert report["ingest"]["records_skipped"] == 1


# --- whole-file failures ------------------------------------------------------------------------------------

def test_truncated_gzip_keeps_the_records_before_the_break(tmp_path):
    packed = gzip.compress(_lines(*[{**GOOD, "latency": i / 7} for i in range(400)]), mtime=0)  # not too compressible
    _, report = _case(tmp_path, "log.jsonl.gz", packed[: len(packed) * 3 // 4], "--no-replay")
    assert 0 < report["ingest"]["records_used"] < 400
    assert "truncated .gz" in report["ingest"]["notes"][0] and "records before the break are used" in report["ingest"]["notes"][0]


@pytest.mark.parametrize("cut", [5, 12])
def test_gzip_cut_before_any_record_is_one_clear_error(tmp_path, cut):
    outcome, _ = _case(tmp_path, "log.jsonl.gz", gzip.compress(_lines(GOOD), mtime=0)[:cut])
    assert outcome.code == EXIT_INPUT and "log.jsonl.gz" in outcome.stderr and "before any record" in outcome.stderr


def test_corrupt_gzip_is_one_clear_error(tmp_path):
    packed = bytearray(gzip.compress(_lines(*[GOOD] * 50), mtime=0))
    packed[20:24] = b"\xff\x00\xff\x00"
    outcome, _ = _case(tmp_path, "log.jsonl.gz", bytes(packed))
    assert outcome.code == EXIT_INPUT and "corrupt" in outcome.stderr


@pytest.mark.parametrize("header", ["TIMESTAMP,Con\rtextTokens,GeneratedTokens", '"TIMESTAMP,ContextTokens,GeneratedTokens'])
def test_broken_csv_header_is_one_clear_error(tmp_path, header):
    outcome, _ = _case(tmp_path, "trace.csv", f"{header}\n2023-11-16 18:00:00.1,5,3\n".encode(), "--format", "azure")
    assert outcome.code == EXIT_INPUT and "trace.csv:1" in outcome.stderr


def test_report_dumps_writes_integers_orjson_refuses():
    """report.dumps raised TypeError on a value orjson cannot write (an integer beyond 64 bits)."""
    from advisor.report import _plain

    document = {"options": {"speculative_config": {"draft_tensor_parallel_size": 2**70}}, "rows": [(2**65, 1)]}
    assert orjson.loads(orjson.dumps(_plain(document))) == {
        "options": {"speculative_config": {"draft_tensor_parallel_size": 2.0**70}}, "rows": [[2.0**65, 1]]}


def test_long_first_line_is_detected(tmp_path):
    first = {**GOOD, "messages": [{"role": "user", "content": "word " * 20_000}]}  # ~100 KB, over the 64 KiB sniff
    _, report = _case(tmp_path, "log.jsonl", _lines(first, GOOD), "--no-replay")
    assert report["inputs"][0]["format"] == "openai" and report["ingest"]["records_used"] == 2


def test_strict_still_stops_at_the_first_bad_record(tmp_path):
    outcome, _ = _case(tmp_path, "log.jsonl", _lines(GOOD, {**GOOD, "messages": []}), "--strict", strict=True)
    assert outcome.code == EXIT_BAD_LINES and "log.jsonl:2: empty conversation" in outcome.stderr


# --- format detection ---------------------------------------------------------------------------------------
# Before, the first JSON object decided a file's format alone: a first line of another system or a damaged one
# sent the whole file to the wrong reader (every record skipped) or to "cannot tell the log format".

MOONCAKE_LINE = {"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}
SPAN = _span([OPERATION, MESSAGES])


@pytest.mark.parametrize("first, records, fmt", [
    (MOONCAKE_LINE, [GOOD] * 4, "openai"),  # a mixed file: one trace line before the OpenAI log
    (MOONCAKE_LINE, [SPAN] * 3, "otel"),
    ({"output_tokens": 12}, [{"prompt": "Summarise this short text now", "output_tokens": 10}] * 3, "bench-custom"),
    ([1, 2], [GOOD] * 3, "openai"),  # a JSON array line first is not a ShareGPT document
    ({"conversations": 5}, [{"id": "a", "conversations": [{"from": "human", "value": "Tell me a long story now"},
                                                           {"from": "gpt", "value": "Once upon a time there"}]}] * 3,
     "sharegpt"),
])
def test_one_odd_first_line_does_not_decide_the_format(tmp_path, first, records, fmt):
    assert detect_format(str(_write(tmp_path / "log.jsonl", _lines(first, *records)))) == fmt
    _, report = _case(tmp_path, "log.jsonl", _lines(first, *records), "--no-replay")
    assert report["inputs"][0]["format"] == fmt
    assert report["ingest"]["records_used"] == len(records) and report["ingest"]["records_skipped"] == 1


def test_records_longer_than_the_sniff_window_still_outvote_a_foreign_first_line(tmp_path):
    """The sniffed 64 KiB held only the short foreign line: the head now reads on to several whole lines."""
    sharegpt = {"id": "a", "conversations": [{"from": "human", "value": "Tell me a long story now"}]}
    long_records = [{**MOONCAKE_LINE, "timestamp": i, "note": "p" * 70_000} for i in range(3)]
    assert detect_format(str(_write(tmp_path / "trace.jsonl", _lines(sharegpt, *long_records)))) == "mooncake"
    _, report = _case(tmp_path, "trace.jsonl", _lines(sharegpt, *long_records), "--no-replay")
    assert report["ingest"]["records_used"] == 3 and report["ingest"]["records_skipped"] == 1


def test_a_rotated_vllm_log_that_starts_inside_a_stream_is_a_vllm_log(tmp_path):
    """Found by the fuzz's detection check on main after the vllm-log rework (15a5081 still told it): lines
    of streamed output only, without the word "vllm", were "cannot tell the log format"."""
    lines = [line for line in (fuzzing.FIXTURES / "vllm_server.log").read_text().splitlines() if "(streaming" in line]
    assert lines and not any("vllm" in line.lower() for line in lines)
    assert detect_format(str(_write(tmp_path / "server.log.1", ("\n".join(lines) + "\n").encode()))) == "vllm-log"


def test_batch_output_file_with_a_damaged_first_line_is_still_the_output_file(tmp_path):
    requests = (fuzzing.FIXTURES / "vllm_batch_requests.jsonl").read_bytes()
    outputs = (fuzzing.FIXTURES / "vllm_batch_outputs.jsonl").read_bytes().splitlines()
    first = orjson.loads(outputs[0])
    del first["custom_id"]
    (tmp_path / "requests.jsonl").write_bytes(requests)
    (tmp_path / "outputs.jsonl").write_bytes(b"\n".join([orjson.dumps(first), *outputs[1:]]) + b"\n")
    result = CliRunner().invoke(cli, [str(tmp_path / "requests.jsonl"), str(tmp_path / "outputs.jsonl"), "--json",
                                      "--no-replay", "--no-recommend"])
    assert result.exit_code == EXIT_OK, result.stderr
    ingest = orjson.loads(result.stdout)["ingest"]
    assert ingest["unfinished"] == 1 and ingest["records_read"] == ingest["records_used"] + ingest["records_skipped"]


def test_prompt_quoting_an_aider_transcript_is_not_an_aider_log(tmp_path):
    quoting = {**GOOD, "messages": [{"role": "user", "content": "Summarise this:\n# aider chat started at 2024-08-05 "
                                                                "19:33:02\n#### fix it now"}]}
    _, report = _case(tmp_path, "log.jsonl", _lines(quoting, GOOD), "--no-replay")
    assert report["inputs"][0]["format"] == "openai" and report["ingest"]["records_used"] == 2


def test_trajectory_longer_than_the_sniff_window_under_another_name(tmp_path):
    document = fuzzing._swe_agent_seed()
    trajectory = [{"action": "cat a.py", "observation": "line of the file here\n" * 4000}]
    text = json.dumps({"trajectory": trajectory, "history": document["history"], "info": {}}, indent=2)
    _, report = _case(tmp_path, "run.json", text.encode(), "--no-replay")
    assert report["inputs"][0]["format"] == "swe-agent" and report["ingest"]["records_used"] == 5


@pytest.mark.real_data
def test_real_trajectory_under_another_name_and_a_real_trace_after_a_foreign_line(tmp_path, real_file):
    trajectory = real_file("swe_agent_marshmallow_1867.traj").read_bytes()
    assert detect_format(str(_write(tmp_path / "run.json", trajectory))) == "swe-agent"
    trace = real_file("mooncake_conversation_trace.jsonl").read_bytes().splitlines(keepends=True)[:50]
    mixed = _write(tmp_path / "trace.jsonl", _lines(GOOD) + b"".join(trace))
    assert detect_format(str(mixed)) == "mooncake"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- options -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config, limit", [
    ({"method": "ngram", "num_speculative_tokens": 2**31, "prompt_lookup_max": 4}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 10**9, "prompt_lookup_max": 4}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2**63, "prompt_lookup_max": 4}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2**62}, "prompt_lookup"),
    ({"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 10**9},
     "suffix_decoding_max_tree_depth"),
    ({"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_spec_factor": 1e308},  # numpy warning
     "suffix_decoding_max_spec_factor"),
])
def test_speculative_config_beyond_the_limits_is_exit_2_naming_it(tmp_path, config, limit):
    outcome, _ = _case(tmp_path, "log.jsonl", _lines(GOOD), "--speculative-config", json.dumps(config),
                       hostile_option=True)
    assert outcome.code == EXIT_USAGE and limit in outcome.stderr and "limit" in outcome.stderr


@pytest.mark.parametrize("args", [["--tp", "0"], ["--tp", "5000"], ["--max-num-seqs", str(2**63)],
                                  ["--block-size", str(2**40)], ["--request-rate", "nan"], ["--request-rate", "inf"]])
def test_profile_options_beyond_the_limits_are_exit_2(tmp_path, args):
    outcome, _ = _case(tmp_path, "log.jsonl", _lines(GOOD), *args, hostile_option=True)
    assert outcome.code == EXIT_USAGE and args[0] in outcome.stderr


@pytest.mark.parametrize("args", [["--tp", "0"], ["--k", str(2**31)], ["--concurrency", "0,8"],
                                  ["--concurrency", "9" * 30], ["--acceptance-length", "nan"]])
def test_whatif_options_beyond_the_limits_are_exit_2(args):
    from click.testing import CliRunner

    from advisor.cli import cli

    base = {"--model": "meta-llama/Llama-3.1-8B", "--gpu": "H200", "--k": "4", "--acceptance-length": "3.0"}
    base.update(dict([args]))
    result = CliRunner().invoke(cli, ["whatif", *[part for pair in base.items() for part in pair]])
    assert result.exit_code == EXIT_USAGE, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert args[0] in result.stderr


@pytest.mark.parametrize("args, limit", [
    (["--workers", "100000"], "--workers"), (["--max-draft-requests", str(2**63)], "--max-draft-requests"),
])
def test_profile_process_and_sample_options_beyond_the_limits_are_exit_2(tmp_path, args, limit):
    outcome, _ = _case(tmp_path, "log.jsonl", _lines(GOOD), *args, hostile_option=True)
    assert outcome.code == EXIT_USAGE and limit in outcome.stderr


VERIFY_LIMITS = [
    (["--trials", "1000000"], "--trials"), (["--trials", "0"], "--trials"),
    (["--max-requests", str(2**63)], "--max-requests"), (["--max-model-len", "0"], "--max-model-len"),
    (["--max-model-len", str(2**40)], "--max-model-len"), (["--tensor-parallel-size", "5000"], "--tensor-parallel-size"),
    (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"), (["--request-rate", "nan"], "--request-rate"),
    (["--request-rate", "1e300"], "--request-rate"), (["--burstiness", "0"], "--burstiness"),
    (["--burstiness", "inf"], "--burstiness"), (["--max-concurrency", "0"], "--max-concurrency"),
    (["--max-concurrency", str(10**12)], "--max-concurrency"), (["--temperature", "-1"], "--temperature"),
    (["--temperature", "nan"], "--temperature"), (["--seed", str(2**32)], "--seed"), (["--seed", "-1"], "--seed"),
    (["--kv-cache-gib", "1.5"], "--kv-cache-gib"), (["--kv-cache-gib", "0"], "--kv-cache-gib"),
    (["--min-effect", "nan"], "--min-effect"), (["--ready-timeout", "inf"], "--ready-timeout"),
    (["--ready-timeout", "-5"], "--ready-timeout"), (["--serve-arg", "x" * 70_000], "--serve-arg"),
    (["--serve-arg", "--a " * 300], "--serve-arg"), (["--serve-arg", "'unclosed"], "--serve-arg"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2147483648}'], "num_speculative_tokens"),
    (["--speculative-config", '{"method": "eagle3", "model": "d", "num-speculative-tokens": 0}'], "num_speculative_tokens"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 1e300}'],
     "prompt_lookup_max"),
    (["--speculative-config", '{"method": "suffix", "suffix_decoding_max_spec_factor": 1e308}'],
     "suffix_decoding_max_spec_factor"),
    (["--speculative-config", "[" * 100_000], "--speculative-config"),
]


@pytest.mark.parametrize("args, limit", VERIFY_LIMITS)
def test_verify_options_beyond_what_vllm_accepts_are_exit_2_naming_the_limit(tmp_path, args, limit):
    """Each would reach vLLM (a server per arm and trial) or the bench as it is: refused before any work."""
    (tmp_path / "log.jsonl").write_bytes(_lines(GOOD))
    result = CliRunner().invoke(cli, ["verify", str(tmp_path / "log.jsonl"), "--model", "m", "--dry-run",
                                      "--out", str(tmp_path / "out"), "--speculative-config",
                                      '{"method": "ngram", "num_speculative_tokens": 3}', *args])
    assert result.exit_code == EXIT_USAGE, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert limit in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_show_refuses_a_report_over_the_limit_before_reading_it(tmp_path):
    from advisor.report import MAX_REPORT_BYTES

    path = tmp_path / "report.json"
    with open(path, "wb") as handle:
        handle.truncate(MAX_REPORT_BYTES + 1)  # sparse: no disk or memory spent
    result = CliRunner().invoke(cli, ["show", str(path)])
    assert result.exit_code == EXIT_INPUT and "not a report of `advise --json`" in result.stderr


# --- lint ----------------------------------------------------------------------------------------------------

def _lint(path: Path, *args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from advisor.cli import cli

    result = CliRunner().invoke(cli, ["lint", str(path), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout + result.stderr


def _billion_laughs() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level in range(1, 10):
        name, previous = chr(97 + level), chr(96 + level)
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize("name, text, expected", [
    ("deploy.sh", 'vllm serve m --speculative-config \'{"method": {"a": 1}, "num_speculative_tokens": 3}\'\n',
     "must be a string"),
    ("deploy.sh", 'vllm serve m --speculative-config \'{"method": "draft_model", "model": 7, '
                  '"num_speculative_tokens": 3}\'\n', "must be a string"),
    ("deploy.sh", "vllm serve m --speculative-config '" + "[" * 5000 + "]" * 5000 + "'\n", "nests too deep"),
    ("config.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper"),
    ("config.yaml", _billion_laughs(), "alias expansion limit"),
])
def test_hostile_lint_inputs_are_findings(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    code, output = _lint(path)
    assert code == 1 and expected in output


def test_huge_lint_input_is_refused(tmp_path):
    path = tmp_path / "deploy.sh"
    path.write_text("vllm serve m " + "x " * 10_000_000 + "\n")
    code, output = _lint(path)
    assert code == EXIT_INPUT and "lint limit" in output


@pytest.mark.parametrize("report", ["[1, 2]", '{"lengths": 5}', '{"lengths": {"total": {"p99_9": "x"}}}',
                                    "[" * 100_000 + "]" * 100_000])
def test_malformed_lint_report_is_exit_3(tmp_path, report):
    (tmp_path / "deploy.sh").write_text("vllm serve meta-llama/Llama-3.1-8B\n")
    (tmp_path / "report.json").write_text(report)
    code, output = _lint(tmp_path / "deploy.sh", "--report", str(tmp_path / "report.json"))
    assert code == EXIT_INPUT and "report.json" in output


# --- bounded memory and time under a process limit ------------------------------------------------------------
# Address space, not resident memory, is what RLIMIT_AS caps, and the imports reserve much of it: numpy and numba's
# llvmlite. Measured on the 2-core dev box (docs/input.md): the default pipeline on a fixture peaks at ~250 MB RSS
# and completes under RLIMIT_AS = 768 MiB once numba's kernels are cached (the first run of a fresh install
# compiles them: ~400 MB RSS, fails at 768 MiB, completes under 1 GiB); `--draft` (torch) peaks at ~650 MB RSS
# and needs 2 GiB (1.5 GiB: MemoryError). The hostile runs below get 3 GiB, a few GiB as the issue asks, with
# room for the machine.

MEMORY_LIMIT = 3 * 2**30
REALISTIC_LIMIT = 2**30


def _limited(*args: str, cwd: Path, limit_bytes: int = MEMORY_LIMIT) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    command = [sys.executable, "-c", "from advisor.cli import main; main()", *args]
    return subprocess.run(command, cwd=cwd, preexec_fn=limit, capture_output=True, text=True, timeout=300)


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)  # no disk or memory spent until it is read
    return path


def test_hostile_inputs_and_options_stay_within_a_memory_limit(tmp_path):
    """Under RLIMIT_AS = 3 GiB: the inputs that needed 6-23 GB before end in a clear exit, never MemoryError;
    options at their limits (not beyond) complete."""
    (tmp_path / "huge.jsonl").write_bytes(_lines(
        {"timestamp": 1, "input_length": 10**11, "output_length": 3, "hash_ids": [1]},
        {"timestamp": 2, "input_length": 1000, "output_length": 3, "hash_ids": [2**62]},
        {"timestamp": 3, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}))
    (tmp_path / "record.jsonl").write_bytes(_lines({"prompt": "word " * (10 * 2**20), "completion": "ok"}, GOOD))
    (tmp_path / "laughs.yaml").write_text(_billion_laughs())
    (tmp_path / "deploy.sh").write_text("vllm serve meta-llama/Llama-3.1-8B --max-model-len 4096\n")
    _sparse(tmp_path / "report.json", 4 * 2**30)  # read whole before, past the limit
    fixture = str(fuzzing.FIXTURES / "code_editing.jsonl")
    runs = {
        "huge.jsonl": ["huge.jsonl", "--json"],
        "50 MB record": ["record.jsonl", "--json", "--no-sweep"],
        "k = 2^31": ["record.jsonl", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2147483648}'],
        "billion laughs": ["lint", "laughs.yaml"],
        "4 GiB --report": ["lint", "deploy.sh", "--report", "report.json"],
        "4 GiB show": ["show", "report.json"],
        "suffix at its limits": [fixture, "--json", "--speculative-config", json.dumps({
            "method": "suffix", "num_speculative_tokens": 128, "suffix_decoding_max_tree_depth": 1024,
            "suffix_decoding_max_cached_requests": 10**7, "suffix_decoding_max_spec_factor": 1024})],
        "ngram at its limits": [fixture, "--json", "--speculative-config", json.dumps({
            "method": "ngram", "num_speculative_tokens": 128, "prompt_lookup_min": 1, "prompt_lookup_max": 128})],
        "whatif at its limits": ["whatif", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H200", "--k", "128",
                                 "--acceptance-length", "129", "--concurrency", ",".join(["1000000"] * 64),
                                 "--input-len", str(2**24), "--output-len", str(2**24), "--tp", "1024"],
    }
    for name, args in runs.items():
        result = _limited(*args, cwd=tmp_path)
        assert result.returncode in (0, 1, 2, 3), (name, result.stderr[-2000:])
        assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr, (name, result.stderr[-2000:])
        if "at its limits" in name:
            assert result.returncode == 0, (name, result.stderr[-2000:])


def test_the_default_pipeline_runs_under_the_documented_realistic_limit(tmp_path):
    """docs/input.md: 1 GiB of address space is enough for a profile with replay, sweep and recommendation."""
    result = _limited(str(fuzzing.FIXTURES / "code_editing.jsonl"), "--json", cwd=tmp_path,
                      limit_bytes=REALISTIC_LIMIT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert orjson.loads(result.stdout)["recommendation"] is not None
