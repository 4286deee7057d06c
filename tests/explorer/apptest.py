"""Driving the explorer under Streamlit's AppTest, and what every page's tables must look like:
human headers, Max C and the users first."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from explorer import tables

APP = str(Path(__file__).resolve().parents[2] / "explorer" / "app.py")


def app(monkeypatch, db: Path, page: str | None = None) -> AppTest:
    monkeypatch.setenv("ENGRAM_BENCH_DB", str(db))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def downloads(at: AppTest) -> list[str]:
    return [b.label for b in at.download_button]


def config(table) -> dict[str, dict]:
    """A shown table's column configuration as the browser gets it, by visible header."""
    return {k: v for k, v in json.loads(table.proto.columns).items() if k != "_index"}


RAW_NAMES = {raw for raw, column in tables.COLUMNS.items() if column.label != raw}


def assert_human(table) -> None:
    """No field name (`mean_ttft_ms`, `tps_c1`) as a visible header."""
    headers = set(table.value.columns)
    assert not RAW_NAMES & headers and not any("_" in h for h in headers), headers


RUNS_FIRST = ["Max C", "chat users", "agentic users", "run"]


def assert_runs_table(table) -> None:
    """Max C and the users lead, pinned, then the run; human names only, counts as integers."""
    shown = config(table)
    assert list(table.value.columns[:4]) == RUNS_FIRST
    assert [shown[c]["pinned"] for c in table.value.columns] == [True] * 3 + [False] * (
        len(table.value.columns) - 3)
    assert_human(table)
    assert shown["Max C"]["type_config"]["format"] == "%d"
