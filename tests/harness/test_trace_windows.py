"""A timed trace level over the trace's own time: requests due at the same moment are all
counted (a real trace has many at one millisecond), and the last window's rate is over the
part of it the level reached."""

from __future__ import annotations

import json

import pytest

from harness.records import RequestRecord
from harness.results.trace_windows import trace_windows
from tests.helpers import run_cli


def _due(*at: float) -> list[RequestRecord]:
    return [RequestRecord(f"r{k}", 0, 0, k, sent_at=t, scheduled_at=t, ttft_ms=10.0,
                          http_status=200, output_tokens=4, latency_ms=20.0)
            for k, t in enumerate(at)]


def test_requests_due_at_one_moment_are_all_counted():
    windows = trace_windows(_due(100.0, 100.0, 100.0, 101.0), speedup=1.0, width_s=10.0)
    assert [w.requests for w in windows] == [4]
    assert windows[0].mean_ttft_ms == pytest.approx(10.0)


def test_a_trace_whose_requests_share_a_timestamp_is_run_and_summarised(tmp_path,
                                                                        mock_process):
    trace = tmp_path / "ties.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 100,
                                         "output_length": 4}) + "\n" for t in (0, 0, 1000)))
    db = str(tmp_path / "b.duckdb")
    url = mock_process("--ttft-ms", "2", "--itl-ms", "1")
    done = run_cli("run", "--url", url, "--trace", str(trace), "--speedup", "1", "--db", db,
                   "--no-progress", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert [sum(w["requests"] for w in lv["windows"]) for lv in summary["trace_windows"]] == [3]
    plain = run_cli("summary", "--db", db)
    assert plain.returncode == 0, plain.stderr
    assert "over the trace's time" in plain.stdout
    again = run_cli("summary", "--db", db, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["trace_windows"] == summary["trace_windows"]


def test_the_last_windows_rate_is_over_the_part_of_it_the_level_reached():
    """20 requests a second over the last 4 s of a 10 s window read 20 a second, not 8."""
    steady = [k * 1.0 for k in range(10)]  # one a second over the first window
    burst = [10.0 + k * 0.05 for k in range(81)]  # 20 a second from 10 s to 14 s
    replayed = [t / 2 for t in (*steady, *burst)]  # at twice the trace's speed
    windows = trace_windows(_due(*replayed), speedup=2.0, width_s=10.0)
    assert [w.requests for w in windows] == [10, 81]
    assert windows[0].arrival_rate == pytest.approx(1.0 * 2)
    assert windows[1].arrival_rate == pytest.approx(81 / 4.0 * 2)
    alone = trace_windows(_due(0.0, 5.0, 10.0), speedup=1.0, width_s=10.0)
    assert [w.requests for w in alone] == [2, 1]
    assert alone[1].arrival_rate is None  # a window of no width has no rate
