"""A timed trace replay in the explorer: the Run page judges it by the speedup it sustains,
lists its speedups with the trace's prompts, and draws a level over the trace's own time."""

import json
from pathlib import Path

import pytest

from tests.explorer import fixtures
from tests.explorer.apptest import app, assert_human, metrics


@pytest.fixture(scope="module")
def trace_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("explorer_trace") / "bench.duckdb"
    fixtures.build_with_trace(path)
    return path


def test_run_page_shows_the_sustained_speedup_and_the_traces_time(monkeypatch, trace_db):
    at = app(monkeypatch, trace_db, "views/run.py")
    at.selectbox(key="run_id").set_value(fixtures.TRACE_RUN).run()
    assert not at.exception, at.exception
    assert at.subheader[0].value == "Sustains 4x the trace's rate"
    shown = metrics(at)
    assert shown["sustained speedup"] == "4x" and shown["speedups replayed"] == "4"
    assert "Max C" not in shown
    per_level = at.dataframe[0].value
    assert_human(at.dataframe[0])
    assert per_level.columns[0] == "speedup (x)"
    assert list(per_level["speedup (x)"]) == list(fixtures.TRACE_SPEEDUPS)
    assert list(per_level["passes"]) == [True, True, True, False]
    assert list(per_level["prompt tokens asked"]) == [100.0] * 4
    assert list(per_level["prompt tokens shared (trace)"]) == pytest.approx([25.0] * 4, abs=1)
    timeline = json.loads(at.get("plotly_chart")[-1].proto.spec)
    bars = next(t for t in timeline["data"] if t["type"] == "bar")
    # the 4x level (the one sustained) over trace time in 10 s windows: the burst in 20-30 s;
    # the last window's rate over the 8 s its arrivals reach (50 s to the last, at 58 s)
    assert bars["y"] == pytest.approx([5 * 4 / 10, 5 * 4 / 10, 10 * 4 / 10, 0.0, 5 * 4 / 10,
                                       5 * 4 / 8])
    assert "trace time" in timeline["layout"]["xaxis"]["title"]["text"]
    at.selectbox(key="trace_speedup").set_value(1.0).run()
    slow = json.loads(at.get("plotly_chart")[-1].proto.spec)
    assert next(t for t in slow["data"] if t["type"] == "bar")["y"][2] == pytest.approx(1.0)
