"""`run --host-metrics` against the fake server with `engram-bench agent` beside it: what a
URL that cannot serve is told before any load is sent, a watched process that ends mid-run,
and an agent whose clocks run apart from the harness's."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import host_metrics as m
from harness.mock_server import MockConfig, ThreadedMockServer
from harness.results.store import Store
from harness.wire.scraper import Scraper
from runners.lifecycle import free_port
from tests.helpers import (
    FAST,
    ROOT,
    host_agent,
    metrics_text,
    run_cli,
    stored_rows,
    wait_while_running,
)


def _run(url: str, db: Path, *flags: str) -> subprocess.CompletedProcess:
    return run_cli("run", "--url", url, "--levels", "1", "--rounds", "2", "--db", str(db),
                   "--no-progress", *flags)


def test_an_agent_that_does_not_answer_is_one_sentence_before_any_load(tmp_path):
    gone = f"http://127.0.0.1:{free_port()}/metrics"
    with ThreadedMockServer(MockConfig(**FAST)) as server:
        proc = _run(server.url, tmp_path / "bench.duckdb", "--host-metrics", gone)
        sent = server.server.requests_seen
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"engram-bench: error: --host-metrics {gone} does not answer (")
    assert "Traceback" not in proc.stderr
    assert sent == 0  # not even calibration
    assert not (tmp_path / "bench.duckdb").exists() or \
        Store(tmp_path / "bench.duckdb").runs() == []


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_a_url_that_answers_without_host_metrics_is_one_sentence(tmp_path, path):
    """The fake server's model list (JSON) and its own vLLM-named /metrics (Prometheus text,
    but neither the agent's names nor a node_exporter's)."""
    with ThreadedMockServer(MockConfig(**FAST, metrics=True)) as server:
        url = server.url.removesuffix("/v1") + path
        proc = _run(server.url, tmp_path / "bench.duckdb", "--host-metrics", url)
        sent = server.server.requests_seen
    assert proc.returncode == 2, proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("engram-bench: error:")]
    assert line.startswith(f"engram-bench: error: --host-metrics {url} answers, but not with "
                           "an engram-bench agent's or a node_exporter's metrics (")
    assert "Traceback" not in proc.stderr and sent == 0


def test_a_watched_process_that_ends_mid_run_loses_its_levels_and_the_run_goes_on(tmp_path):
    db = tmp_path / "bench.duckdb"
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with ThreadedMockServer(MockConfig(**FAST)) as server, host_agent(watched.pid) as url:
            proc = subprocess.Popen(
                [sys.executable, "-m", "engram_bench", "run", "--url", server.url, "--levels",
                 "1,2,4", "--rounds", "10", "--host-metrics", url, "--db", str(db),
                 "--no-progress", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, cwd=ROOT)
            wait_while_running(lambda: stored_rows(db) >= 2, proc, "a round was stored")
            watched.kill()
            watched.wait()
            out, err = proc.communicate(timeout=120)
    finally:
        watched.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["status"] == "complete"
    last = summary["levels"][-1]["host"]
    assert last["tree_read_bytes_per_output_token"] is None
    assert "the process tree the agent watches had ended before the level began" in \
        last["missing"]
    assert "Traceback" not in err
    assert any(w.startswith("C=4: host figures missing: ") for w in summary["warnings"])
    stored = Store(db).host_levels(summary["run_id"])
    assert stored[(4, None)][0][1].missing == last["missing"]


SKEW_S = 7200.0  # how far the skewed agent's host's clocks run ahead of this one's


def _skewed_agent() -> str:
    """An agent's scrape whose host's clocks run SKEW_S ahead (its counters still)."""
    now_mono, now_wall = time.monotonic() + SKEW_S, time.time() + SKEW_S
    return (f"{m.CLOCK_MONOTONIC} {now_mono}\n{m.CLOCK_WALL} {now_wall}\n"
            f"{m.PROCESSES} 1\n{m.PROCESS_READ_BYTES} 0\n{m.PROCESS_MAJOR_FAULTS} 0\n")


def test_an_agents_clock_two_hours_ahead_is_mapped_onto_the_harness():
    async def level(url: str) -> tuple[float, float, list]:
        scraper = Scraper(None, (url,))
        try:
            await scraper.start()
            began = time.time()
            await asyncio.sleep(2.2)
            ended = time.time()
            return began, ended, (await scraper.stop()).hosts
        finally:
            scraper.close()

    with metrics_text(_skewed_agent) as url:
        began, ended, [(figures, slices)] = asyncio.run(level(url))
    assert figures.missing is None and figures.scrapes >= 3
    assert figures.clock_offset_ms == pytest.approx(SKEW_S * 1000,
                                                    abs=figures.round_trip_ms)
    assert len(slices) >= 2
    # on the harness's clock (not two hours ahead): within the level, one after the other
    assert began - 5.0 < slices[0].started_at <= began
    assert all(a.started_at + a.width_s == pytest.approx(b.started_at, abs=1e-3)
               for a, b in itertools.pairwise(slices))
    assert slices[-1].started_at + slices[-1].width_s < ended + 5.0
