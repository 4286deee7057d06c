import json

import pytest

from engram_bench.parser import build_parser
from engram_bench.run_config import config_for
from harness.results.store import Store
from runners.profiles import PROFILES, profile
from tests.helpers import run_cli


def test_every_table_placement_has_a_device_that_stands_for_it():
    assert {p.table_placement for p in PROFILES.values()} == {"device", "host", "nvme"}
    assert profile("cpu").table_placement == "device"  # this machine: the table in its RAM


@pytest.mark.parametrize("name", PROFILES)
def test_cache_ratio_is_the_page_cache_share_of_the_published_table(name):
    p = profile(name)
    # only a table offloaded to nvme lives in a page cache, so only such a profile states one
    assert (p.page_cache_budget_gib is not None) == (p.table_placement == "nvme")
    if p.page_cache_budget_gib is not None:
        assert p.cache_ratio == pytest.approx(p.page_cache_budget_gib / p.published_table_gib)
        assert 0 < p.cache_ratio < 1
    else:
        assert p.cache_ratio == 1.0  # the whole table is resident


@pytest.mark.parametrize("name", PROFILES)
def test_a_bundled_run_uses_the_profiles_levels_and_placement(name, tmp_path):
    p = profile(name)
    args = build_parser().parse_args(["run", "--device", name])
    config, _ = config_for(args, Store(tmp_path / "b.duckdb"))
    assert config.levels == p.default_levels and config.table_placement == p.table_placement
    flags = dict(zip(config.server_args[::2], config.server_args[1::2], strict=True))
    assert (flags["--device"], flags["--placement"]) == (name, p.table_placement)
    # the default sweep reaches the server's batch limit, where capacity is decided
    assert max(p.default_levels) >= p.max_running_requests


def test_devices_cli_lists_every_profile():
    out = json.loads(run_cli("devices", "--json").stdout)
    assert set(out) == set(PROFILES)
    for name, listed in out.items():
        assert listed["bandwidth_gbs"] == profile(name).bandwidth_gbs
        assert listed["cache_ratio"] == pytest.approx(profile(name).cache_ratio)
