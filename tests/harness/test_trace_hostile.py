"""Hostile trace files: each refused in one sentence naming the file, its line and the field
(exit 2 at the CLI, never a traceback); lengths past what a request may hold refused as the
trace is read, clipped or not; a window past what one run may hold refused where the reading
reaches it; refused numbers shown at a readable size."""

from __future__ import annotations

import json
import pickle
import re

import pytest

from harness.config import MAX_REQUEST_TOKENS, RunConfig
from harness.run.sweep import Sweep
from harness.run.trace import lengths, source
from harness.run.trace.formats import TraceError, TraceRequest
from harness.run.trace.requests import shaped
from harness.wire.client import Clock
from harness.wire.endpoint import Endpoint
from tests.helpers import run_cli

DEAD_URL = "http://127.0.0.1:9/v1"
BURST = "Timestamp,Request tokens,Response tokens,Log Type"
FIRST = '{"timestamp": 0, "input_length": 5, "output_length": 2}'


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _length(field: str, minimum: int, shown: str) -> str:
    return f"{field} must be a whole number from {minimum} to {MAX_REQUEST_TOKENS:,}, not {shown}"


@pytest.mark.parametrize(("name", "lines", "message"), [
    ("m.jsonl", [FIRST, '{"timestamp": 1, "input_length": NaN, "output_length": 2}'],
     "m.jsonl line 2: " + _length("input_length", 1, "NaN")),
    ("m.jsonl", [FIRST, '{"timestamp": 1, "input_length": 5, "output_length": Infinity}'],
     "m.jsonl line 2: " + _length("output_length", 1, "Infinity")),
    ("m.jsonl", [FIRST, '{"timestamp": 1, "input_length": 5, "output_length": -Infinity}'],
     "m.jsonl line 2: " + _length("output_length", 1, "-Infinity")),
    ("o.jsonl", ['{"prompt": "a"}', '{"prompt": "b", "max_tokens": NaN}'],
     "o.jsonl line 2: " + _length("max_tokens", 1, "NaN")),
    ("b.csv", [BURST, "0,5,5,c", "1,\u00b2,5,c"],  # str.isdigit() takes it, int() does not
     "b.csv line 3: " + _length("Request tokens", 1, "'\u00b2'")),
    ("b.csv", [BURST, "0,5,5,c", "1,5," + "9" * 5000 + ",c"],  # past Python's 4,300 digits
     "b.csv line 3: " + _length("Response tokens", 0, "1e+5000")),
    ("m.jsonl", [FIRST, '{"timestamp": 1, "input_length": ' + "9" * 5000 + ', "output_length": 2}'],
     "m.jsonl line 2: " + _length("input_length", 1, "1e+5000")),
    ("m.jsonl", [FIRST, '{"timestamp": 1' + "0" * 5000 + ', "input_length": 5, '
                        '"output_length": 2}'],
     "m.jsonl line 2: timestamp must be a number of ms of at least 0, not 1e+5000"),
    ("b.csv", [BURST, "0,5,5,c", '1,5,5,"' + "x" * 140_000 + '"'],  # past the csv module's field
     "b.csv line 3: Log Type holds more than 131,072 characters"),
    ("a.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", '"' + "x" * 200_000 + '",5,5'],
     "a.csv line 2: TIMESTAMP holds more than 131,072 characters"),
    ("x.txt", ["a" * 200_000], "cannot tell the format of trace"),  # a first line of no CSV
    ("m.jsonl", [FIRST, '{"timestamp": 1, "input_length": 3, "output_length": 2, '
                        '"hash_ids": [1, 2, 3, 4]}'],
     "m.jsonl line 2: hash_ids names 4 blocks, more than its input_length of 3 tokens"),
])
def test_a_hostile_line_is_refused_naming_its_line_and_field(tmp_path, name, lines, message):
    with pytest.raises(TraceError) as refused:
        source.read(_write(tmp_path / name, lines))
    assert message in str(refused.value)


@pytest.mark.parametrize("fmt", ["", "burstgpt"])
def test_a_file_whose_lines_end_in_cr_alone_says_so(tmp_path, fmt):
    path = tmp_path / "b.csv"
    path.write_text(BURST + "\r0,5,5,c\r1,5,5,c\r")
    with pytest.raises(TraceError, match=r"b.csv line 1 holds carriage returns mid-line: a file "
                                         r"whose lines end in CR alone must be converted"):
        source.read(path, fmt)


@pytest.mark.parametrize(("name", "lines", "flags", "message"), [
    # 3e9 tokens, clipped to 64 as sent, failed the run on an INT32 column and left it running
    ("m.jsonl", [FIRST.replace("5", "3000000000", 1), FIRST.replace(": 0", ": 1000", 1)],
     ("--max-input-tokens", "64"), "m.jsonl line 1: " + _length("input_length", 1, "3000000000")),
    # 1e40 tokens, clipped to 8, failed the spill of measured rows (past 64 bits)
    ("b.csv", [BURST, "0,5,1" + "0" * 40 + ",c", "1,5,5,c"], ("--max-output-tokens", "8"),
     "b.csv line 2: " + _length("Response tokens", 0, "1e+40")),
])
def test_a_length_past_one_requests_tokens_is_refused_when_read_clipped_or_not(
        tmp_path, name, lines, flags, message):
    path = _write(tmp_path / name, lines)
    db = tmp_path / "b.duckdb"
    done = run_cli("run", "--url", DEAD_URL, "--trace", str(path), *flags, "--db", str(db))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not db.exists()


def test_an_unreadable_trace_is_one_sentence(tmp_path):
    try:
        open("/proc/1/mem", "rb").close()
    except OSError:
        pass
    else:
        pytest.skip("this process may read /proc/1/mem")
    done = run_cli("run", "--url", DEAD_URL, "--trace", "/proc/1/mem",
                   "--trace-format", "mooncake", "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2, done.stderr
    assert "cannot read trace /proc/1/mem: Permission denied" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_hostile_lengths_trace_is_one_sentence(tmp_path):
    nan = _write(tmp_path / "m.jsonl", [FIRST, FIRST.replace("5", "NaN", 1)])
    done = run_cli("run", "--url", DEAD_URL, "--lengths-from", str(nan),
                   "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2 and "m.jsonl line 2: " + _length("input_length", 1, "NaN") \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def _timed(path, n, bad_line=None):
    """n requests a second apart; `bad_line`: a line of no JSON there."""
    return _write(path, ["{not json" if k + 1 == bad_line else json.dumps(
        {"timestamp": k * 1000, "input_length": 5, "output_length": 2}) for k in range(n)])


def test_a_window_past_the_bound_is_refused_where_the_reading_reaches_it(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_WINDOW_REQUESTS", 5)
    # line 9 is no JSON: the read stops at the 6th request, before it
    path = _timed(tmp_path / "m.jsonl", 12, bad_line=9)
    with pytest.raises(TraceError, match=r"trace .*m.jsonl holds more than the 5 requests one "
                                         r"run may hold \(line 6 is past them\)"):
        source.read(path)
    with pytest.raises(TraceError, match=r"the window from 2 s of trace .* \(line 8 is past"):
        source.read(path, window=source.Window(start_s=2))
    with pytest.raises(TraceError, match=r"\(line 6 is past them\)"):  # sorted: any 6 are past
        source.read(path, sort=True)


def test_a_window_within_the_bound_is_read_from_a_file_past_it(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_WINDOW_REQUESTS", 5)
    path = _timed(tmp_path / "m.jsonl", 12)
    assert [r.line for r in source.read(path, window=source.Window(limit=4)).requests] \
        == [1, 2, 3, 4]
    assert [r.line for r in source.read(path, window=source.Window(3, 4.5)).requests] \
        == [4, 5, 6, 7, 8]
    shuffled = _write(tmp_path / "s.jsonl", [json.dumps(
        {"timestamp": t * 1000, "input_length": 5, "output_length": 2})
        for t in (0, 9, 3, 11, 1, 7, 2, 10, 5, 4, 8, 6)])
    trace = source.read(shuffled, sort=True, window=source.Window(limit=4))
    assert [r.arrival_s for r in trace.requests] == [0, 1, 2, 3]
    assert [r.line for r in trace.requests] == [1, 5, 7, 3]
    with pytest.raises(TraceError, match=r"line 6 is past them"):  # the 6th read of the window
        source.read(shuffled, sort=True)


def test_a_worker_draws_its_lengths_from_its_prompts_without_the_trace(tmp_path):
    """A load worker gets the sweep's prompts pickled: under --lengths-from they carry the
    lengths, not the trace, and the worker's sweep draws from them without reading it."""
    path = _write(tmp_path / "b.csv", [BURST] + [f"{k},{10 + k},{1 + k % 7},c"
                                                  for k in range(300)])
    config = RunConfig(url="http://127.0.0.1:9/v1", model="m", levels=(1,),
                       lengths_from=str(path))
    draws = lengths.draws(config)
    assert draws is not None
    drawn = [draws.at(k) for k in range(100)]
    shipped = pickle.dumps(lengths.prompts(config))
    assert b"TraceRequest" not in shipped
    path.unlink()  # nothing left to read, as in a worker that must not read it
    lengths.read.cache_clear()
    lengths.draws.cache_clear()
    sweep = Sweep(config, Endpoint(config.url), "run", pickle.loads(shipped), Clock())
    assert sweep.lengths is not None
    assert [sweep.lengths.at(k) for k in range(100)] == drawn
    sweep.close()


class _Tripwire(tuple):
    """Hash ids that fail the test when walked past their first `walked`."""

    walked = 0

    def __iter__(self):
        for k, value in enumerate(tuple.__iter__(self)):
            assert k < self.walked, f"id {k} walked, past the prompt's end"
            yield value


def test_the_ids_past_a_prompts_end_are_not_walked(tmp_path):
    ids = _Tripwire(range(100_000))
    ids.walked = 4  # a prompt of 1,100 tokens ends in its third 512-token block: the walk
    # reads the fourth id to find it past the end
    path = _write(tmp_path / "m.jsonl", [FIRST])
    config = RunConfig(url="x", model="m", mode="trace", levels=(), trace=str(path),
                       speedups=(1.0,))
    trace = source.Trace(str(path), "mooncake", True, (
        TraceRequest(1, 0.0, 1100, 2, (0, 1, 2)), TraceRequest(2, 1.0, 1100, 2, ids)),
        0, "", 0, source.Window())
    assert [s.prefix_tokens for s in shaped(config, trace)] == [0, 1100]


@pytest.mark.parametrize(("lines", "flags", "shown"), [
    ([FIRST, FIRST.replace(": 0", ": 1e30", 1)], (), "1e+27 s"),
    ([BURST, "0,5,5,c", "1e300,5,5,c"], (), "1e+300 s"),
    ([FIRST, FIRST.replace(": 0", ": 1000", 1)], ("--speedup", "1e-300"), "take 1e+300 s"),
])
def test_a_refused_number_is_shown_at_a_readable_size(tmp_path, lines, flags, shown):
    path = _write(tmp_path / "t.trace", lines)
    done = run_cli("run", "--url", DEAD_URL, "--trace", str(path), *flags,
                   "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2 and shown in done.stderr, done.stderr
    assert not re.search(r"\d{16}", done.stderr.replace(",", ""))
