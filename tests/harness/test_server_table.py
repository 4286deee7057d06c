"""The bundled server's table line: what /stats reports is printed and stored, nothing else."""

import json

from harness.results.server_table import describe_server_table, server_table
from harness.run.progress import LevelProgress
from harness.wire import target

NVME = {"table_bytes": 2 * 2**30, "placement": "nvme", "io_mode": "mmap",
        "table_budget_bytes": int(343.5 * 2**20), "cache_ratio": 0.168, "cache_state": "cold",
        "decode": "replay", "tokens": 0}


def test_the_full_line():
    assert describe_server_table(server_table(NVME)) == (
        "table: 2.0 GiB on nvme (mmap), page-cache budget 343.5 MiB (cache ratio 0.168), "
        "cold start, decode replay")


def test_only_what_the_server_reports_is_named():
    stats = {"table_bytes": 512 * 2**20, "placement": "host", "io_mode": None,
             "cache_ratio": 0.5, "decode": "sample"}
    assert describe_server_table(server_table(stats)) == (
        "table: 512.0 MiB on host, cache ratio 0.5, decode sample")
    direct = server_table({**NVME, "io_mode": "direct"})
    assert "row-cache budget 343.5 MiB" in describe_server_table(direct)


def test_counters_and_odd_types_are_not_table_facts():
    assert server_table(None) == {}
    assert server_table({"requests": 3, "tokens": 10}) == {}
    assert server_table({"placement": "nvme", "cache_ratio": "high"}) == {"placement": "nvme"}


def test_the_table_is_stored_with_the_run_and_printed(sweep, monkeypatch, capsys):
    async def stats(endpoint):
        return dict(NVME)

    monkeypatch.setattr(target, "fetch_stats", stats)
    swept = sweep(levels=(1,), rounds=1, output_tokens=4, progress=LevelProgress())
    stored = json.loads(swept.run.config)
    assert stored["server"] == server_table(NVME)
    printed = " ".join(capsys.readouterr().err.split())  # rich wraps lines off a terminal
    assert describe_server_table(server_table(NVME)) in printed


def test_a_server_without_table_stats_stores_none(sweep):
    swept = sweep(levels=(1,), rounds=1, output_tokens=4)
    assert "server" not in json.loads(swept.run.config)
