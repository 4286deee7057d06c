"""`run --ray` without a cluster: the clock offset read from round trips, the address a user
gives, and the install it names when Ray is missing (the cluster itself: tests/distributed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.run.ray_workers import ClockReading, RayUnavailable, best_offset, split_address
from tests.helpers import ROOT

THEIRS_AHEAD_NS = 7_345_000  # the actor's monotonic clock minus ours, the truth
WALL_AHEAD_NS = -2_000_000  # ... and its wall clock's


def _reading(sent_ns: int, out_ns: int, back_ns: int) -> ClockReading:
    """A round trip whose request took `out_ns` to reach the actor and its answer `back_ns`
    to come back."""
    at = sent_ns + out_ns
    return ClockReading(sent_ns, at + back_ns, 1_800_000_000_000_000_000 + sent_ns,
                        1_800_000_000_000_000_000 + at + WALL_AHEAD_NS, at + THEIRS_AHEAD_NS)


def test_the_offset_is_read_from_the_shortest_round_trip_within_half_of_it():
    readings = [_reading(0, 900_000, 100_000), _reading(10**7, 150_000, 250_000),
                _reading(2 * 10**7, 3_000_000, 50_000)]
    offset = best_offset(readings)
    assert offset.round_trip_ns == 400_000
    assert abs(offset.monotonic_ns - THEIRS_AHEAD_NS) <= offset.round_trip_ns // 2
    assert abs(offset.wall_ns - WALL_AHEAD_NS) <= offset.round_trip_ns // 2
    symmetric = best_offset([_reading(0, 200_000, 200_000)])
    assert (symmetric.monotonic_ns, symmetric.wall_ns) == (THEIRS_AHEAD_NS, WALL_AHEAD_NS)


@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.1:6379", ("10.0.0.1", 6379)), ("head.example:6380", ("head.example", 6380)),
    ("[::1]:6379", ("::1", 6379)),
])
def test_a_heads_address_is_host_and_port(address, expected):
    assert split_address(address) == expected


@pytest.mark.parametrize(("address", "message"), [
    ("nonsense", "--ray takes the head's HOST:PORT"), ("head:0", "--ray takes the head's"),
    (":6379", "--ray takes the head's"), ("ray://head:10001", "not a Ray Client address"),
])
def test_an_address_that_names_no_head_is_one_sentence(address, message):
    with pytest.raises(RayUnavailable, match=message):
        split_address(address)


def test_ray_missing_names_the_install(tmp_path):
    """As on a host without the distributed extra: Ray cannot be imported."""
    code = ("import sys; sys.modules['ray'] = None\n"
            "from engram_bench.cli import main\n"
            "raise SystemExit(main(['run', '--url', 'http://127.0.0.1:9/v1', '--ray', "
            "'127.0.0.1:6379', '--db', sys.argv[1]]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.duckdb")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "--ray needs ray: pip install 'engram-bench[distributed]'" in done.stderr
    assert "Traceback" not in done.stderr
