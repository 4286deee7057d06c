"""The one-line verdict per run: Max C, how far it can be trusted, the users it serves."""

import pytest

from explorer.data import verdict
from harness.results.metrics import LevelPoint, capacity

GOOD, SLOW = (200.0, 30.0), (200.0, 10.0)  # (TTFT ms, TPS): passes, fails the TPS target


def cap(levels: dict[int, tuple[float, float]], errors: dict[int, int] | None = None):
    return capacity([LevelPoint(c, ttft, tps, (errors or {}).get(c, 0))
                     for c, (ttft, tps) in levels.items()])


@pytest.mark.parametrize(("levels", "probes", "line"), [
    ({1: GOOD, 2: GOOD, 4: GOOD, 8: SLOW, 6: SLOW, 5: GOOD}, {6, 5},
     "Max C 5 (exact, found by --search): 20 chat / 7 agentic users"),
    ({1: GOOD, 2: GOOD, 3: SLOW}, set(), "Max C 2 (exact): 8 chat / 3 agentic users"),
    ({1: GOOD, 2: GOOD}, set(), "Max C 2 (lower bound: no higher level tested): 8 chat / 3 "
                                "agentic users"),
    ({1: GOOD, 2: GOOD, 4: SLOW}, set(), "Max C 2 (lower bound: C=3 not tested): 8 chat / 3 "
                                         "agentic users"),
    ({1: GOOD, 2: SLOW, 4: GOOD, 8: SLOW}, set(),
     "Max C 4 (lower bound: C=5-7 not tested; C=2 fails below it): 16 chat / 6 agentic users"),
    ({1: SLOW, 2: SLOW}, set(), "Max C 0 (no level meets the targets): no users"),
    ({}, set(), "no levels to judge"),
])
def test_verdict_says_how_far_max_c_can_be_trusted(levels, probes, line):
    assert verdict(cap(levels), probes) == line


def test_a_failed_request_fails_the_level_in_the_verdict():
    assert verdict(cap({1: GOOD, 2: GOOD}, errors={2: 1})) == (
        "Max C 1 (exact): 4 chat / 1 agentic users")
