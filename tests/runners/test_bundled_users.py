"""Users mode and multi-turn sessions against the bundled Engram server: its prefix cache
reports cached prompt tokens turn by turn, and `--search` finds its max users."""

import json

import pytest

from runners.lifecycle import BundledServer
from tests.helpers import run_cli

SERVER = ("--device", "cpu", "--preset", "tiny", "--table-size-gb", "0.01",
          "--placement", "device", "--decode", "replay", "--max-running", "4")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    with BundledServer(SERVER, log_dir=logs) as server:
        yield server


def test_turns_against_the_bundled_server_store_its_cached_tokens(bundled, tmp_path):
    db = tmp_path / "t.duckdb"
    out = run_cli("run", "--url", bundled.url, "--levels", "2", "--rounds", "3", "--turns",
                  "3", "--input-tokens", "40", "--output-tokens", "16", "--db", str(db),
                  "--json", "--no-progress", "--prompts", "text")
    assert out.returncode == 0, out.stderr
    turns = json.loads(out.stdout)["turns"]
    assert turns[0]["mean_prompt_tokens"] < turns[1]["mean_prompt_tokens"] \
        < turns[2]["mean_prompt_tokens"]
    assert turns[0]["mean_cached_tokens"] < turns[1]["mean_cached_tokens"] \
        < turns[2]["mean_cached_tokens"]
    # a turn reuses (at least) the blocks of the prompt before it, less the partial block
    assert turns[2]["mean_cached_tokens"] >= turns[1]["mean_prompt_tokens"] - 16


def test_users_search_on_the_bundled_server(bundled, tmp_path):
    """A tiny model answers fast: a 15 ms TTFT target makes a few users the limit."""
    db = tmp_path / "u.duckdb"
    out = run_cli("run", "--url", bundled.url, "--mode", "users", "--profile", "agentic",
                  "--levels", "2", "--rounds", "3", "--search", "--max-concurrency", "24",
                  "--input-tokens", "32", "--output-tokens", "16", "--ttft-max-ms", "15",
                  "--tps-min", "1", "--db", str(db), "--json", "--no-progress",
                  "--prompts", "text", timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    verdicts = {lv["concurrency"]: lv["passes"] for lv in summary["levels"]}
    # the search brackets the highest passing level to the integer (below 16 users) ...
    top = max((c for c, ok in verdicts.items() if ok), default=0)
    assert top == 24 or verdicts.get(top + 1) is False
    # ... and Max users is the highest passing level in steady state (a flagged one is left out)
    steady = [lv["concurrency"] for lv in summary["levels"]
              if lv["passes"] and lv["steady_state"] is not False]
    assert summary["max_users"] == max(steady, default=0)
    assert summary["users"]["duty_cycle"] is None or 0.4 < summary["users"]["duty_cycle"] < 0.9
