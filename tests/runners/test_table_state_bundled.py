"""`run --table-state` through the agent, against the bundled server started by hand as an
external process (its table on disk): cold leaves the table's residency near zero at the
first level's start and its first requests wait on the disk, so their first-token time,
stored and shown apart, exceeds that of the same requests on a table the agent warmed."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.helpers import host_agent, on_disk, run_cli
from tests.runners.test_host_metrics_bundled import _server

# prompts at their own lengths: no calibration request reads the table before the drop
LOAD = ("--levels", "2,4", "--rounds", "2", "--output-tokens", "16", "--warmup", "0",
        "--no-progress")


def _prompts(tmp_path: Path) -> Path:
    words = ["table", "page", "cache", "disk", "read", "token", "engram", "row", "layer",
             "model", "file", "host", "level"]
    rng = random.Random(7)
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": " ".join(rng.choices(words, k=60))}) + "\n"
                            for _ in range(16)))
    return path


def _first_level_host(db: Path, tmp_path: Path, *args: str) -> dict:
    """The run's first level's host object, as `summary --json` reads it back from the file."""
    run = run_cli("run", *args, *LOAD, "--prompts", str(_prompts(tmp_path)), "--db", str(db),
                  "--json", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    run_id = json.loads(run.stdout)["run_id"]
    stored = run_cli("summary", run_id, "--db", str(db), "--json")
    assert stored.returncode == 0, stored.stderr[-2000:]
    levels = json.loads(stored.stdout)["levels"]
    (first,) = [row for row in levels if row["concurrency"] == 2]
    (later,) = [row for row in levels if row["concurrency"] == 4]
    assert later["host"]["table_state"] is None  # only the first pass met the state set
    return first["host"]


def test_a_cold_start_through_the_agent_is_stored_apart_and_slower_than_a_warm_one(tmp_path):
    on_disk(tmp_path)
    db = tmp_path / "bench.duckdb"

    def first_level(state: str) -> dict:
        """A fresh server for each state, so both pay its first requests alike (a warm run
        before a cold one would leave pages the server maps, which no drop evicts)."""
        with _server(tmp_path) as (server, url), \
                host_agent(server.pid, tmp_path / "table.bin") as agent:
            return _first_level_host(db, tmp_path, "--url", f"{url}/v1", "--host-metrics",
                                     agent, "--table-state", state)

    warm = first_level("warm")
    cold = first_level("cold")
    assert cold["table_state"] == "cold" and warm["table_state"] == "warm"
    assert cold["table_resident_bytes_start"] <= 0.01 * cold["table_bytes"]  # near zero
    assert warm["table_resident_bytes_start"] >= 0.9 * warm["table_bytes"]
    assert cold["table_state_requests"] == warm["table_state_requests"] == 2
    assert cold["table_state_ttft_ms"] > warm["table_state_ttft_ms"]
    assert cold["tree_read_bytes"] > warm["tree_read_bytes"]
