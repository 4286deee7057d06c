"""The sample runs that README.md and the docs show have the tables, with the columns, that
the code prints today: a sample gone stale fails here (benchmarks/sample_output.py measures
them again)."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks.sample_output import SAMPLES, block
from tests.helpers import ROOT
from tests.piped import columns, run_piped, tables


@pytest.fixture(scope="module")
def piped(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    return run_piped(tmp_path_factory.mktemp("piped") / "bench.duckdb", host=True)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_each_sample_shows_the_tables_and_columns_printed_today(piped, sample):
    today = [columns(table) for table in tables(piped.stdout)]
    for name in sample.files:
        shown = block(sample.name).search((ROOT / name).read_text())
        assert shown, f"{name} lost its <!-- sample {sample.name} --> block"
        assert [columns(table) for table in tables(shown.group())] == today, (
            f"{name}: the {sample.name} sample is not what the code prints now; measure it "
            f"again: .venv/bin/python -m benchmarks.sample_output {sample.name}")
