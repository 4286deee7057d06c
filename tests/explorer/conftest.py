"""The explorer tests' fixture database (tests/explorer/fixtures.py), built once per module."""

from pathlib import Path

import pytest

from tests.explorer import fixtures


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("explorer") / "bench.duckdb"
    fixtures.build(path)
    return path
