"""The serving host's figures on the Run page (`run --host-metrics`): per level beside TTFT and
TPOT, and a level's one-second slices on its own time axis; a run without them shows
nothing of the kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.results.host_level import Scrape, host_level
from harness.results.host_sample import (
    AGENT,
    DiskFigures,
    HostSample,
    ProcessFigures,
    SystemFigures,
    TableFileFigures,
)
from harness.results.store import Store
from tests.explorer import fixtures
from tests.explorer.apptest import app, assert_human
from tests.explorer.test_server_metrics_pages import traces

RUN = "fixture-nvme"
READ_PER_C = 64_000.0  # bytes a second of the level, per stream: B per token = that x C / ...


def _sample(t: float, read: float, resident: float) -> HostSample:
    tree = ProcessFigures(alive=1, ended=0, io_unreadable=0, minor_faults=0,
                          major_faults=read / 4096, read_bytes=read, rss_anon_bytes=0,
                          rss_file_bytes=resident, rss_shmem_bytes=0, locked_bytes=0,
                          pinned_bytes=0)
    return HostSample(AGENT, fixtures.T0 + t, t, "cachestat", tree,
                      (TableFileFigures("/t/table.bin", 2**31, "vda", resident, 1.0),),
                      {"vda": DiskFigures("vda", read, 0, 0, 0, t / 2)},
                      SystemFigures(io_some_s=t / 10))


@pytest.fixture(scope="module")
def host_db(tmp_path_factory) -> Path:
    """The fixture database, with 3 s of an agent's scrapes beside each level of RUN."""
    path = tmp_path_factory.mktemp("explorer-host") / "bench.duckdb"
    fixtures.build(path)
    store = Store(path)
    for c in fixtures.LEVELS:
        first = min(r.sent_at for r in store.requests(RUN) if r.concurrency == c)
        scrapes = [Scrape(round(t * 1e9), round(t * 1e9) + 1_000_000,
                          round((first - 0.01 + t) * 1e9),
                          _sample(t, READ_PER_C * c * t, 2**28 + 2**24 * t))
                   for t in (0.0, 1.0, 2.0, 3.0)]
        store.write_host_levels(RUN, c, [host_level(0, "http://127.0.0.1:9477/metrics",
                                                    scrapes, None)])
    return path


def test_the_run_page_shows_each_levels_host_figures_and_a_levels_time_slices(monkeypatch,
                                                                            host_db):
    at = app(monkeypatch, host_db, "views/run.py")
    at.selectbox(key="run_id").set_value(RUN).run()
    assert not at.exception, at.exception
    [table] = [t for t in at.dataframe if "server reads B / output token" in t.value.columns]
    assert_human(table)
    frame = table.value.set_index("C")
    # 3 s of READ_PER_C x C bytes a second over each level's 10 rounds of C x 128 tokens
    assert list(frame["server reads B / output token"]) == pytest.approx(
        [READ_PER_C * c * 3 / (10 * c * 128) for c in fixtures.LEVELS])
    assert {"mean TTFT (ms)", "mean TPOT (ms/token)"} <= set(frame.columns)  # beside them
    assert list(frame["table resident at end"]) == [2**28 + 3 * 2**24] * len(fixtures.LEVELS)
    at.selectbox(key="host_level").set_value(4).run()
    chart = traces(at, next(i for i, c in enumerate(at.get("plotly_chart"))
                        if "disk reads" in c.proto.spec))
    assert chart["node 0: disk reads (MB/s)"] == pytest.approx([READ_PER_C * 4 / 1e6] * 3)
    assert chart["node 0: disk busy (share)"] == pytest.approx([0.5] * 3, abs=0.01)
    assert len(chart["TTFT of a request sent then (ms)"]) == 10 * 4


def test_a_run_without_host_metrics_shows_no_host_section(monkeypatch, host_db):
    at = app(monkeypatch, host_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-mem").run()
    assert not any("server reads B / output token" in t.value.columns for t in at.dataframe)
    assert not any(s.value == "The serving host per level" for s in at.subheader)


def test_a_levels_requests_and_slices_share_one_time_axis_when_its_first_request_failed(
        tmp_path):
    from explorer.data import host_slices
    from tests.harness.fixtures import make_records

    records = sorted((r for r in make_records(levels=(2,))), key=lambda r: r.sent_at)
    records[0].error_kind = "http_error"  # the level's first request sent, and failed
    store = Store(tmp_path / "b.duckdb")
    store.initialise()
    store.write_requests("run-a", records)
    _, requests = host_slices(store.path, "run-a", 2)
    first_ok = next(r for r in records if r.ok)
    assert requests["t_s"].iloc[0] == pytest.approx(first_ok.sent_at - records[0].sent_at,
                                                    abs=1e-6)  # stored to the microsecond
