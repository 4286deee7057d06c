"""The /stats names the harness and the explorer read (common.stats_keys) are figures the
bundled server sends, and the older names they fall back to are ones it no longer sends."""

from common import stats_keys
from runners.engram.stats import ServerStats


def _names(legacy: bool) -> set[str]:
    return {value for name, value in vars(stats_keys).items()
            if name.isupper() and name.startswith("LEGACY_") == legacy}


def test_every_shared_name_is_a_figure_of_the_bundled_servers_stats():
    assert _names(legacy=False) <= ServerStats.__required_keys__


def test_no_legacy_name_is_sent_any_more():
    assert _names(legacy=True)
    assert not _names(legacy=True) & ServerStats.__required_keys__
