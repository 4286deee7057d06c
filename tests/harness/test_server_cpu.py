"""A server the run started itself: its CPU and what other processes took over each level, read
from /proc, judged, stored per pass and shown by the summary, in its warnings and its verdict."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import duckdb
import pytest
from rich.console import Console

from harness.results.metrics import Targets, capacity, point, stats_by_level
from harness.results.render import print_summary
from harness.results.report import summarise
from harness.results.run_row import RunRow
from harness.results.schema import SCHEMA_VERSION
from harness.results.server_cpu import ServerCpu, measured
from harness.results.store import Store
from harness.run.server_cpu_monitor import ServerCpuMonitor, tree_ticks
from tests.harness.fixtures import make_records

# a 2-core machine over 10 s: a server on one core beside the run, alone and behind others
QUIET = ServerCpu(wall_s=10.0, cpus=2, server_cpu_s=12.0, own_cpu_s=0.3, others_cpu_s=0.5)
CROWDED = ServerCpu(wall_s=10.0, cpus=2, server_cpu_s=6.5, own_cpu_s=0.3, others_cpu_s=13.0)


def test_a_tree_is_its_process_and_descendants_and_the_server_is_not_the_runs():
    # pid: (parent, ticks); 10 is the run, 20 the server it started, 21 a child of the server
    processes = {1: (0, 1000), 10: (1, 7), 11: (10, 3), 20: (10, 50), 21: (20, 40),
                 30: (1, 900)}
    assert tree_ticks(processes, 20) == 90
    assert tree_ticks(processes, 10, excluded=20) == 10
    assert tree_ticks(processes, 99) == 0  # a server that has ended


def test_others_are_what_the_machine_did_beside_the_two_trees():
    c = measured(wall_s=10.0, cpus=2, busy_s=19.0, server_s=6.5, own_s=0.5)
    assert c.others_cpu_s == pytest.approx(12.0)
    assert c.others_share == pytest.approx(0.6) and c.idle_share == pytest.approx(0.05)
    assert measured(10.0, 2, 6.9, 6.5, 0.5).others_cpu_s == 0.0  # a tick below: none


def test_a_server_is_starved_when_others_fill_a_machine_it_shares():
    assert not QUIET.server_starved and CROWDED.server_starved
    # as many other processes' CPU on a machine with CPUs to spare starves nothing
    roomy = ServerCpu(wall_s=10.0, cpus=16, server_cpu_s=12.0, own_cpu_s=0.3,
                      others_cpu_s=110.0)
    assert roomy.others_share is not None and roomy.others_share > CROWDED.others_share
    assert not roomy.server_starved


def test_the_monitor_counts_the_servers_children_after_they_end():
    """A child of the server that burns CPU and ends within the level counts, to the server
    that reaped it; this process's time does not."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    server = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys\nsys.stdin.readline()\n"
         f"subprocess.run([sys.executable, '-c', {burn!r}])\nprint('done', flush=True)\n"
         "sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        monitor = ServerCpuMonitor(server.pid)
        monitor.start()
        server.stdin.write("go\n")
        server.stdin.flush()
        assert server.stdout.readline().strip() == "done"
        c = monitor.stop()
    finally:
        server.communicate("end\n", timeout=30)
    assert c is not None and c.cpus >= 1 and c.wall_s > 0
    assert c.server_cpu_s >= 0.3  # the child's burn, at least
    assert c.own_cpu_s < c.server_cpu_s


def _summary(server_cpu: dict) -> tuple[dict, str]:
    """A closed run of levels 1, 2, 4 whose Max C is 2, with the given CPU per level: its
    `--json` summary and its printed text."""
    records = make_records()
    stats = stats_by_level(records, 128)
    tps = {s.concurrency: s.number("mean_tps") for s in stats}
    targets = Targets(tps_min=(tps[2] + tps[4]) / 2)  # C=4 fails on TPS
    assert capacity([point(s, "mean") for s in stats], targets).max_c == 2
    run = RunRow(run_id="run-a", status="complete", mode="closed", levels=[1, 2, 4],
                 rounds=3, input_tokens=128, output_tokens=128, config="{}")
    summary = summarise(run, stats, records, targets, server_cpu=server_cpu)
    out = io.StringIO()
    print_summary(json.loads(json.dumps(summary)), Console(file=out, width=200))
    return summary, out.getvalue()


def test_a_starved_level_that_decided_max_c_is_said_in_the_verdict():
    summary, text = _summary({(1, None): QUIET, (2, None): QUIET, (4, None): CROWDED})
    rows = {row["concurrency"]: row for row in summary["levels"]}
    assert [rows[c]["server_starved"] for c in (1, 2, 4)] == [False, False, True]
    assert rows[4]["others_cpu_share"] == 0.65 and rows[4]["server_cores"] == 0.65
    assert summary["max_c_starved"].startswith("C=4 failed while the server was starved")
    assert "C=4 failed while the server was starved of CPU" in text
    assert sum("C=4: the server was starved of CPU" in w for w in summary["warnings"]) == 1


def test_a_starved_level_that_did_not_decide_max_c_is_only_warned_of():
    summary, text = _summary({(1, None): CROWDED, (2, None): QUIET, (4, None): QUIET})
    assert summary["max_c_starved"] is None and "failed while" not in text
    assert any(w.startswith("C=1: the server was starved") for w in summary["warnings"])


def test_a_run_against_a_url_has_no_server_cpu():
    summary, _ = _summary({})
    assert summary["max_c_starved"] is None
    assert all(row["server_starved"] is None for row in summary["levels"])


def test_each_pass_is_stored_and_a_level_reads_as_its_most_starved_pass(tmp_path):
    store = Store(tmp_path / "bench.duckdb")
    store.initialise()
    store.write_server_cpu("run-a", 4, QUIET, repeat=0)
    store.write_server_cpu("run-a", 4, CROWDED, repeat=1)
    store.write_server_cpu("run-a", 4, QUIET, repeat=1)  # a pass measured again replaces
    store.write_server_cpu("run-a", 8, CROWDED, repeat=0)
    assert store.server_cpu("run-a") == {(4, None): QUIET, (8, None): CROWDED}
    assert store.server_cpu("run-b") == {}


def test_a_file_from_before_server_cpu_is_upgraded_in_place(tmp_path):
    path = tmp_path / "old.duckdb"
    Store(path).initialise()
    with duckdb.connect(str(path)) as con:  # as the version before wrote it
        con.execute("DROP VIEW levels; DROP TABLE server_cpu; DELETE FROM schema_version; "
                    "INSERT INTO schema_version VALUES (3)")
    store = Store(path)
    assert store.server_cpu("run-a") == {}
    store.write_server_cpu("run-a", 1, CROWDED)
    assert store.server_cpu("run-a") == {(1, None): CROWDED}
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT version FROM schema_version").fetchone() == (SCHEMA_VERSION,)
        columns = {row[0] for row in con.execute("DESCRIBE levels").fetchall()}
    assert {"server_cores", "others_cpu_share", "server_starved"} <= columns
