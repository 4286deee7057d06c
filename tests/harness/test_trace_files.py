"""Trace files as `run --trace` reads them: each format on a file the test writes, the format
guessed, windows, and every bad file refused in one sentence naming its line and field."""

from __future__ import annotations

import json
import os

import pytest

from harness.config import RunConfig
from harness.run.trace import source
from harness.run.trace.formats import TraceError
from harness.run.trace.requests import shaped
from tests.helpers import run_cli

DEAD_URL = "http://127.0.0.1:9/v1"


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _mooncake(path, rows):
    return _write(path, [json.dumps(r) for r in rows])


def test_mooncake_lines_keep_their_lengths_ids_and_clock_in_seconds(tmp_path):
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": 1500, "input_length": 700, "output_length": 20, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 300, "output_length": 5, "hash_ids": [0]},
        {"timestamp": 4000, "input_length": 1100, "output_length": 9, "hash_ids": [0, 2, 3]}])
    trace = source.read(path)
    assert (trace.format, trace.guessed, trace.timed) == ("mooncake", True, True)
    assert [(r.line, r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids)
            for r in trace.requests] == [(1, 0.0, 700, 20, (0, 1)), (2, 0.0, 300, 5, (0,)),
                                         (3, 2.5, 1100, 9, (0, 2, 3))]
    assert trace.rate == pytest.approx(2 / 2.5)


def test_azure_rows_count_their_clock_from_the_first(tmp_path):
    path = _write(tmp_path / "azure.csv", [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.6805900,374,44",
        "2023-11-16 18:15:50.9951690,396,109",
        "2023-11-16 18:16:06.6805900,879,17"])
    trace = source.read(path)
    assert trace.format == "azure"
    assert [(r.line, round(r.arrival_s or 0, 3), r.input_tokens, r.output_tokens)
            for r in trace.requests] == [(2, 0.0, 374, 44), (3, 4.315, 396, 109),
                                         (4, 20.0, 879, 17)]


def test_burstgpt_skips_the_requests_that_failed_in_the_source_and_says_so(tmp_path):
    path = _write(tmp_path / "burst.csv", [
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        "5,ChatGPT,472,18,490,Conversation log",
        "45,ChatGPT,1087,0,1087,Conversation log",
        "118,GPT-4,417,276,693,API log"])
    trace = source.read(path)
    assert (trace.format, trace.skipped) == ("burstgpt", 1)
    assert [(r.line, r.arrival_s, r.input_tokens, r.output_tokens)
            for r in trace.requests] == [(2, 0.0, 472, 18), (4, 113.0, 417, 276)]
    assert "1 rows skipped (failed in the source: 0 response tokens)" in trace.describe()


def test_jsonl_lines_carry_their_messages_sessions_and_max_tokens(tmp_path):
    path = _write(tmp_path / "own.jsonl", [
        json.dumps({"prompt": "hello", "session_id": "a", "max_tokens": 7}),
        json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "and you?"}], "session_id": "a"}),
        json.dumps({"prompt": "alone"})])
    trace = source.read(path)
    assert (trace.format, trace.timed) == ("jsonl", False)
    first, second, third = trace.requests
    assert first.messages == ({"role": "user", "content": "hello"},)
    assert (first.session, first.output_tokens, first.input_tokens) == ("a", 7, None)
    assert [m["role"] for m in second.messages] == ["system", "user"]
    assert (second.session, second.output_tokens, third.session) == ("a", None, None)


def test_a_window_takes_its_start_duration_and_limit_on_the_traces_clock(tmp_path):
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": t * 1000, "input_length": 10, "output_length": 2, "hash_ids": [t]}
        for t in range(10)])
    trace = source.read(path, window=source.Window(start_s=2.5, duration_s=4))
    assert [r.line for r in trace.requests] == [4, 5, 6, 7]
    assert trace.requests[0].arrival_s == 0.0 and trace.span_s == 3.0
    limited = source.read(path, window=source.Window(start_s=2, limit=2))
    assert [r.line for r in limited.requests] == [3, 4]


def test_an_unsorted_trace_is_refused_at_its_line_or_sorted_when_asked(tmp_path):
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": t, "input_length": 10, "output_length": 2, "hash_ids": []}
        for t in (0, 3000, 1000, 2000)])
    with pytest.raises(TraceError, match=r"m.jsonl line 3: its timestamp comes before line 2's"):
        source.read(path)
    trace = source.read(path, sort=True)
    assert [r.line for r in trace.requests] == [1, 3, 4, 2] and trace.sorted_lines == 2
    assert "2 out-of-order requests sorted by arrival" in trace.describe()


@pytest.mark.parametrize(("name", "lines", "message"), [
    ("m.jsonl", ['{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": []}',
                 '{"timestamp": 9, "input_length": -5, "output_length": 2, "hash_ids": []}'],
     "m.jsonl line 2: input_length must be a whole number from 1 to 16,777,216, not -5"),
    ("m.jsonl", ['{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": []}',
                 '{"timestamp": "soon", "input_length": 5, "output_length": 2}'],
     'm.jsonl line 2: timestamp must be a number of ms of at least 0, not "soon"'),
    ("m.jsonl", ['{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": []}',
                 '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": "x"}'],
     "m.jsonl line 2: hash_ids must be a list of whole numbers"),
    ("m.jsonl", ['{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": []}',
                 "{not json"], "m.jsonl line 2 is not JSON"),
    ("a.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,12,x"],
     "a.csv line 2: GeneratedTokens must be a whole number from 1 to 16,777,216, not 'x'"),
    ("a.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", "yesterday,12,3"],
     "a.csv line 2: TIMESTAMP must be a date and time"),
    ("a.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,12"],
     "a.csv line 2: 2 fields where the header has 3"),
    ("b.csv", ["Timestamp,Request tokens,Response tokens,Log Type", "nan,5,5,API log"],
     "b.csv line 2: Timestamp must be a number of s of at least 0, not 'nan'"),
    ("o.jsonl", ['{"prompt": "a"}', '{"messages": [{"role": "user"}]}'],
     'o.jsonl line 2: expected "prompt" (text) or "messages"'),
    ("o.jsonl", ['{"prompt": "a", "timestamp": 1}', '{"prompt": "b"}'],
     "o.jsonl line 2: timestamp must be given on every line or on none"),
    ("o.jsonl", ['{"prompt": "a"}', '{"prompt": "\\ud800"}'],
     "o.jsonl line 2 holds half a surrogate pair"),
    ("o.jsonl", ['{"prompt": "a"}', "[" * 100_000 + "]" * 100_000],
     "o.jsonl line 2 is JSON nested too deeply to read"),
])
def test_a_malformed_line_names_the_file_its_line_and_the_field(tmp_path, name, lines, message):
    path = _write(tmp_path / name, lines)
    with pytest.raises(TraceError) as refused:
        source.read(path)
    assert message in str(refused.value)


def test_files_that_are_no_trace_are_refused_in_one_sentence(tmp_path, monkeypatch):
    with pytest.raises(TraceError, match="does not exist"):
        source.read(tmp_path / "none.jsonl")
    with pytest.raises(TraceError, match="is empty"):
        source.read(_write(tmp_path / "e.jsonl", []))
    with pytest.raises(TraceError, match=r"cannot tell the format of trace .* --trace-format"):
        source.read(_write(tmp_path / "x.jsonl", ['{"text": "hi"}']))
    only_failures = _write(tmp_path / "f.csv", [
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        "5,ChatGPT,472,0,472,Conversation log"])
    with pytest.raises(TraceError, match=r"holds no request \(1 rows skipped"):
        source.read(only_failures)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="is not a regular file"):
        source.read(fifo)  # refused unopened: opening a pipe would wait for a writer
    monkeypatch.setattr(source, "MAX_FILE_BYTES", 100)
    big = _write(tmp_path / "big.jsonl", ['{"prompt": "' + "a" * 200 + '"}'])
    with pytest.raises(TraceError, match="above the 0 MiB a trace may have"):
        source.read(big)


def test_an_empty_window_says_what_the_trace_spans(tmp_path):
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": t * 1000, "input_length": 10, "output_length": 2} for t in range(3)])
    with pytest.raises(TraceError, match=r"the window from 60 s of trace .* holds no request"):
        source.read(path, window=source.Window(start_s=60))


@pytest.mark.parametrize(("flags", "message"), [
    (("--speedup", "0"), "--speedup: must be speedups above 0"),
    (("--speedup", "-2"), "--speedup: must be speedups above 0"),
    (("--speedup", "nan"), "--speedup: must be speedups above 0"),
    (("--speedup", "inf"), "--speedup: must be speedups above 0"),
    (("--speedup", "1,1"), "--speedup: lists a speedup twice"),
    (("--trace-start", "-1"), "--trace-start: must be 0 or more seconds"),
    (("--input-scale", "0"), "--input-scale: must be a positive number"),
])
def test_bad_trace_flags_are_one_sentence_and_exit_2(tmp_path, flags, message):
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]},
        {"timestamp": 900, "input_length": 10, "output_length": 2, "hash_ids": [0]}])
    done = run_cli("run", "--url", DEAD_URL, "--trace", str(path), *flags,
                   "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (("--trace-start", "5"), "has no timestamps, so --trace-start"),
    (("--trace-schedule", "timed"), "has no timestamps: replay it at concurrency levels"),
    (("--mode", "closed"), "--trace replays in --mode trace or trace-closed, not closed"),
])
def test_a_trace_without_timestamps_takes_no_clock(tmp_path, flags, message):
    path = _write(tmp_path / "own.jsonl", [json.dumps({"prompt": "hi"})])
    done = run_cli("run", "--url", DEAD_URL, "--trace", str(path), *flags,
                   "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "b.duckdb").exists() or "run" not in done.stdout


def test_a_shared_block_counts_as_far_as_an_earlier_request_sent_it(tmp_path):
    """A prompt's last block is cut where the prompt ends: a later request sharing that id
    shares that much of it, and nothing of the blocks after it."""
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 768, "output_length": 2, "hash_ids": [0, 1]},
        {"timestamp": 1, "input_length": 1536, "output_length": 2, "hash_ids": [0, 1, 2]},
        {"timestamp": 2, "input_length": 2048, "output_length": 2, "hash_ids": [0, 1, 2, 3]},
        {"timestamp": 3, "input_length": 1024, "output_length": 2, "hash_ids": [5, 1]}])
    config = RunConfig(url="x", model="m", mode="trace", levels=(), trace=str(path),
                       speedups=(1.0,))
    shares = [s.prefix_tokens for s in shaped(config, source.read(path))]
    # block 1 was sent half (768 = 1.5 blocks): the second request shares 512 + 256; the
    # third shares blocks 0 and 1 whole (the second sent them) and block 2 whole; a prefix
    # that starts elsewhere shares nothing
    assert shares == [0, 768, 1536, 0]
