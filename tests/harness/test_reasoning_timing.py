"""Reasoning models timed as users feel them: TTFO at the first answer token (content or a
tool call), the reasoning's time and tokens apart, the answer's own speed; TTFT unchanged."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import duckdb
import httpx
import orjson
import pytest

from harness.results.metrics import level_stats
from harness.results.run_row import RunRow
from harness.results.store import Store
from harness.wire.completion_stream import CompletionStream
from tests.harness.fixtures import make_records
from tests.harness.test_store import OLD_SCHEMA
from tests.helpers import run_cli

MS = 1_000_000  # ns


def _chunk(delta: dict | None = None, usage: dict | None = None,
           finish: str | None = None) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return orjson.dumps({"choices": choices, **({"usage": usage} if usage else {})})


def _feed(payloads: list[bytes]) -> CompletionStream:
    """Chunk i arrives at (i + 1) * 10 ms after a send at 0."""
    stream = CompletionStream()
    for i, payload in enumerate([*payloads, b"[DONE]"]):
        stream.add(payload, (i + 1) * 10 * MS)
    return stream


def test_vllm_reasoning_content_then_the_answer_with_usage():
    stream = _feed([
        _chunk({"role": "assistant", "content": ""}),  # the role alone is no token
        _chunk({"reasoning_content": "Let"}), _chunk({"reasoning_content": " me"}),
        _chunk({"reasoning_content": " think"}), _chunk({"content": "Four"}),
        _chunk({"content": "."}, finish="stop"),
        _chunk(usage={"prompt_tokens": 9, "completion_tokens": 5,
                      "completion_tokens_details": {"reasoning_tokens": 3}})])
    figures = stream.reasoning_figures(0, 70 * MS, 5)
    assert stream.times_ns[0] == 20 * MS  # TTFT: the first reasoning delta, as before
    assert figures["ttfo_ms"] == 50.0 and figures["reasoning_ms"] == 30.0
    assert figures["reasoning_tokens"] == 3 and figures["reasoning_tokens_source"] == "usage"
    assert figures["answer_tps"] == pytest.approx(2 / 0.020)  # 2 answer tokens in 20 ms
    assert figures["reasoning_over_completion"] is False and "ttfo_missing" not in figures


def test_newer_reasoning_field_without_usage_is_counted_from_its_chunks():
    stream = _feed([_chunk({"reasoning": "Hm"}), _chunk({"reasoning": "m"}),
                    _chunk({"content": "Yes"}, finish="stop")])
    figures = stream.reasoning_figures(0, 40 * MS, stream.chunks)
    assert figures["ttfo_ms"] == 30.0 and figures["reasoning_ms"] == 20.0
    assert figures["reasoning_tokens"] == 2 and figures["reasoning_tokens_source"] == "chunks"


def test_per_chunk_usage_counts_the_reasoning_chunks_tokens():
    stream = _feed([_chunk({"reasoning_content": "a b"}, usage={"completion_tokens": 2}),
                    _chunk({"content": "c"}, usage={"completion_tokens": 3})])
    figures = stream.reasoning_figures(0, 30 * MS, 3)
    assert figures["reasoning_tokens"] == 2 and figures["reasoning_tokens_source"] == "chunk_usage"


def test_a_tool_call_is_the_answer():
    stream = _feed([_chunk({"reasoning_content": "x"}),
                    _chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]})])
    assert stream.reasoning_figures(0, 30 * MS, 2)["ttfo_ms"] == 20.0


def test_a_stream_without_reasoning_has_ttfo_equal_to_ttft():
    stream = _feed([_chunk({"content": "a"}), _chunk({"content": "b"}, finish="stop")])
    figures = stream.reasoning_figures(0, 30 * MS, 2)
    assert figures["ttfo_ms"] == stream.times_ns[0] / MS and figures["reasoning_ms"] == 0.0
    assert figures["reasoning_tokens"] == 0


def test_a_stream_that_reasons_and_never_answers_has_no_ttfo_and_says_why():
    stream = _feed([_chunk({"reasoning_content": "a"}),
                    _chunk({"reasoning_content": "b"}, finish="length")])
    figures = stream.reasoning_figures(0, 30 * MS, 2)
    assert "ttfo_ms" not in figures and "answer_tps" not in figures  # not E2E
    assert "reasoning" in str(figures["ttfo_missing"]) and "length" in str(
        figures["ttfo_missing"])


def test_reasoning_tokens_above_completion_tokens_are_stored_as_reported_and_flagged():
    stream = _feed([_chunk({"reasoning_content": "a"}), _chunk({"content": "b"}),
                    _chunk(usage={"completion_tokens": 2,
                                  "completion_tokens_details": {"reasoning_tokens": 5}})])
    figures = stream.reasoning_figures(0, 30 * MS, 2)
    assert figures["reasoning_tokens"] == 5 and figures["reasoning_over_completion"] is True
    assert "answer_tps" not in figures  # no answer tokens left to time


def _reasoning_records() -> list:
    records = make_records(levels=(2,))
    for i, r in enumerate(records):
        answer = i % 3 != 2
        r.figures = {"reasoning_tokens": 10 + i, "reasoning_tokens_source": "usage",
                     "reasoning_over_completion": i == 0,
                     **({"ttfo_ms": r.ttft_ms + 40 + i, "reasoning_ms": 40.0 + i,
                         "answer_tps": 50.0 + i} if answer
                        else {"ttfo_missing": "the stream ended inside its reasoning"})}
    return records


def test_the_levels_view_and_python_agree_and_the_level_says_so_once(tmp_path):
    records = _reasoning_records()
    store = Store(tmp_path / "r.duckdb")
    store.initialise()
    store.create_run(RunRow(run_id="run-a", levels=[2], rounds=3, output_tokens=128))
    store.write_requests("run-a", records)
    [view] = store.levels("run-a")
    stats = level_stats(2, records, 128)
    for name, value in stats.declared.items():
        assert view[name] == (value if not isinstance(value, float)
                              else pytest.approx(value, rel=1e-9)), name
    assert view["count_reasoning_over_completion"] == 1
    assert view["count_ttfo_missing"] == sum(1 for r in records if "ttfo_missing" in r.figures)
    back = {r.request_id: r.figures for r in store.requests("run-a")}
    assert all(back[r.request_id] == r.figures for r in records)


def test_an_old_results_file_upgrades_and_its_rows_read_ttfo_as_ttft(tmp_path):
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(OLD_SCHEMA)
    store = Store(path)
    [old] = store.requests("old")
    assert old.figures["ttfo_ms"] == old.ttft_ms == 50.0
    assert old.figures["reasoning_ms"] == 0.0
    [level] = store.levels("old")
    assert level["mean_ttfo_ms"] == level["mean_ttft_ms"] == 50.0
    # a new row that never answered keeps its missing TTFO however often the file upgrades
    store.write_requests("old", [replace(old, request_id="old-2", figures={
        "ttfo_missing": "the stream ended inside its reasoning"})])
    rows = {r.request_id: r.figures.get("ttfo_ms") for r in Store(path).requests("old")}
    assert rows == {"old-c1-r0-w0": 50.0, "old-2": None}


def test_stored_ttfo_against_the_fake_servers_clock(mock_process, tmp_path):
    """A fake server in its own process streams 12 reasoning tokens, then the answer, and
    logs when it wrote each chunk (the same monotonic clock): at C=1 and C=8 the stored TTFO
    after TTFT is its first answer write after its first write, within 1 ms at the median (a
    shared machine's stall can hold one read), TTFT reads no less than the server's, and the
    reasoning tokens are usage's."""
    url = mock_process("--ttft-ms", "5", "--itl-ms", "4", "--reasoning-tokens", "12",
                       "--log-chunks")
    db = tmp_path / "bench.duckdb"
    proc = run_cli("run", "--url", url, "--model", "mock-model", "--levels", "1,8",
                   "--rounds", "6", "--output-tokens", "20", "--json", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    server = {t["request_id"]: t for t in httpx.get(url[:-3] + "/mock/timings").json()}
    records = Store(db).requests(out["run_id"])
    assert len(records) == 54 and all(r.ok for r in records)
    for concurrency in (1, 8):
        errors = []
        for r in (r for r in records if r.concurrency == concurrency):
            truth = server[r.request_id]
            assert r.figures["reasoning_tokens"] == truth["reasoning_tokens"] == 12
            assert r.figures["reasoning_tokens_source"] == "usage"
            assert r.ttft_ms >= (truth["first_write"] - truth["body_read"]) * 1000
            server_ms = (truth["first_answer_write"] - truth["first_write"]) * 1000
            errors.append(r.figures["ttfo_ms"] - r.ttft_ms - server_ms)
        assert abs(statistics.median(errors)) < 1.0, (concurrency, errors)
    for level in out["levels"]:
        assert level["mean_reasoning_tokens"] == 12
        assert level["values_reasoning_tokens_source"] == "usage"
        assert level["mean_ttfo_ms"] > level["mean_ttft_ms"]


def _reasoning_run(tmp_path) -> Path:
    """Levels 1-3 that all meet the targets on TTFT, while the answer's first token comes
    500 ms per request in flight after it: TTFO passes 1,000 ms at C=1 only."""
    records = make_records(levels=(1, 2, 3))
    for r in records:
        r.figures = {"ttfo_ms": r.ttft_ms + 500 * r.concurrency,
                     "reasoning_ms": 500.0 * r.concurrency, "reasoning_tokens": 40,
                     "reasoning_tokens_source": "usage"}
    store = Store(tmp_path / "bench.duckdb")
    store.initialise()
    store.create_run(RunRow(run_id="run-a", status="complete", mode="closed", levels=[1, 2, 3],
                            rounds=3, output_tokens=128, config="{}"))
    store.write_requests("run-a", records)
    return store.path


def test_ttft_of_output_judges_max_c_on_ttfo(tmp_path):
    db = str(_reasoning_run(tmp_path))
    found = {}
    for choice in ("first", "output"):
        proc = run_cli("summary", "--db", db, "--json", "--ttft-of", choice)
        assert proc.returncode == 0, proc.stderr
        found[choice] = json.loads(proc.stdout)
    assert found["first"]["max_c"] == 3 and found["output"]["max_c"] == 1
    assert found["first"]["judged"]["ttft"] == "mean_ttft_ms"
    assert found["output"]["judged"]["ttft"] == "mean_ttfo_ms"
    assert found["output"]["targets"]["ttft_of"] == "output"
    default = json.loads(run_cli("summary", "--db", db, "--json").stdout)
    assert default["max_c"] == 3 and default["targets"]["ttft_of"] == "first"
    printed = run_cli("summary", "--db", db, "--ttft-of", "output").stdout
    assert "Max C = 1" in printed and "TTFO <= 1000 ms" in printed


def test_ttft_of_anything_else_is_refused_in_one_sentence(tmp_path):
    proc = run_cli("summary", "--db", str(_reasoning_run(tmp_path)), "--ttft-of", "last")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--ttft-of is first" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_a_later_turn_is_sent_the_answer_without_its_reasoning():
    """Multi-turn and users modes resend a turn's reply (`keep_text`): the answer only, as the
    models' chat templates drop the reasoning from the history."""
    stream = CompletionStream(keep_text=True)
    for i, payload in enumerate([_chunk({"reasoning_content": "First, think."}),
                                 _chunk({"reasoning": " More."}), _chunk({"content": "Four"}),
                                 _chunk({"content": "."}), b"[DONE]"]):
        stream.add(payload, (i + 1) * MS)
    assert "".join(stream.text or []) == "Four."
