"""`run --search`: the exact Max C, found with full levels and stored as probes."""

import json
import subprocess

import pytest

from harness.config import ConfigError, RunConfig
from harness.mock_server import MockConfig
from harness.results.metrics import Targets
from harness.results.report import search_plan
from tests.helpers import ROOT, run_cli

# 8 tokens, 20 ms between tokens x requests in flight: TPS(C) ~ 8 / (0.14 C), so at 10.4 tok/s
# C=5 passes (~11.4) and C=6 fails (~9.5): Max C is 5.
SLOWING = MockConfig(ttft_ms=2, itl_ms=20, shared_decode=True)
TARGETS = Targets(tps_min=10.4)


def _search(sweep, levels, max_concurrency=256):
    swept = sweep(SLOWING, levels=levels, rounds=1, mode="burst", output_tokens=8, search=True,
                  max_concurrency=max_concurrency, server_metrics=False, db="s.duckdb",
                  run_id="20261129-000000-5ea7", targets=TARGETS)
    return swept.store, swept.result, swept.config


def test_bisection_finds_max_c_between_the_tested_levels(sweep):
    store, result, config = _search(sweep, (1, 2, 4, 8))
    assert store.probes(result.run_id) == [6, 5]  # 4 passes, 8 fails: 6 fails, 5 passes
    found = search_plan(store, result.run_id, config, TARGETS)
    assert (found.max_c, found.exact) == (5, True)
    assert "probed 6 (fail), 5 (pass)" in found.how
    levels = {row["concurrency"]: row["probe"] for row in store.levels(result.run_id)}
    assert levels == {1: False, 2: False, 4: False, 5: True, 6: True, 8: False}


def test_every_level_passing_doubles_until_one_fails(sweep):
    store, result, config = _search(sweep, (1, 2))
    assert store.probes(result.run_id)[:2] == [4, 8]  # doubled from 2; 8 fails
    assert search_plan(store, result.run_id, config, TARGETS).max_c == 5


def test_the_cap_ends_the_search_with_a_lower_bound(sweep):
    store, result, config = _search(sweep, (1, 2), max_concurrency=3)
    assert store.probes(result.run_id) == [3]
    found = search_plan(store, result.run_id, config, TARGETS)
    assert (found.max_c, found.lower_bound) == (3, True)


def test_a_cap_below_the_highest_level_is_refused():
    with pytest.raises(ConfigError, match="--max-concurrency 4 is below the highest level, 8"):
        RunConfig(url="http://127.0.0.1:1/v1", model="m", levels=(1, 8), max_concurrency=4)


def test_run_and_summary_say_how_max_c_was_found(tmp_path, start_mock):
    db = tmp_path / "cli.duckdb"
    server = start_mock(SLOWING)
    proc = run_cli("run", "--url", server.url, "--levels", "1,2,4,8", "--rounds", "1",
                   "--mode", "burst", "--output-tokens", "8", "--tps-min", "10.4",
                   "--search", "--no-server-metrics", "--no-progress", "--db", str(db),
                   "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["max_c"] == 5 and out["max_c_search"]["exact"] is True
    assert "probed 6 (fail), 5 (pass)" in out["max_c_search"]["how"]
    text = run_cli("summary", out["run_id"], "--db", str(db), "--tps-min", "10.4")
    assert "Max C found by --search: bisection" in text.stdout


def test_make_bench_search_passes_the_flag():
    dry = subprocess.run(["make", "-n", "bench", "SEARCH=1", "QUICK=1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    bench = [line for line in dry.stdout.splitlines() if "engram-bench run" in line]
    assert bench and "--search" in bench[0]
    plain = subprocess.run(["make", "-n", "bench", "QUICK=1"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert "--search" not in plain.stdout
