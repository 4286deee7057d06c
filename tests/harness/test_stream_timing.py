"""The inter-token arithmetic of one stream and of a level, on hand-made arrival times."""

from __future__ import annotations

import pytest

from harness.results.token_timing import bin_value_ms, pooled_itl, stream_timing

MS = 1_000_000


def test_a_chunk_of_k_tokens_is_k_token_gaps():
    """Chunks of 1, 4 and 1 tokens, 10 ms apart: the 4-token chunk is 4 gaps of 2.5 ms."""
    t = stream_timing([0, 10 * MS, 20 * MS], [1, 4, 1], 6)
    assert t.chunk_gap_mean_ms == 10 and t.chunk_gap_p99_ms == 10
    assert t.itl_mean_ms == pytest.approx(20 / 5)
    assert t.itl_p50_ms == 2.5  # 4 of the 5 token gaps are 2.5 ms
    assert t.itl_p99_ms == 10
    assert t.tokens_per_chunk == 2 and not t.tokens_per_chunk_estimated


def test_without_per_chunk_usage_each_chunk_carries_the_mean_and_is_flagged():
    t = stream_timing([0, 10 * MS, 20 * MS], None, 6)
    assert t.tokens_per_chunk == 2 and t.tokens_per_chunk_estimated
    assert t.itl_p50_ms == 5 and t.itl_mean_ms == 5


def test_a_chunk_without_a_token_adds_its_wait_to_the_next():
    t = stream_timing([0, 10 * MS, 20 * MS], [1, 0, 2], 3)
    assert t.itl_mean_ms == 10 and t.itl_p50_ms == 10


def test_one_chunk_has_no_gaps():
    t = stream_timing([5 * MS], [8], 8)
    assert (t.tokens_per_chunk, t.itl_mean_ms, t.chunk_gap_mean_ms) == (8, None, None)
    assert stream_timing([], None, 0).tokens_per_chunk is None


def test_a_level_pools_token_gaps_across_requests_within_the_bin_width():
    """One request of 99 gaps of 1 ms and one of 1 gap of 100 ms: pooled, p50 is 1 ms and
    p99 1 ms (99 of 100 gaps), and the mean weighs each gap once."""
    fast = stream_timing([i * MS for i in range(100)], [1] * 100, 100)
    slow = stream_timing([0, 100 * MS], [1, 1], 2)
    pooled = pooled_itl([(s.itl_mean_ms, s.itl_bins, s.itl_counts) for s in (fast, slow)])
    assert pooled.mean_ms == pytest.approx((99 + 100) / 100)
    assert pooled.p50_ms == pytest.approx(1, rel=0.005)
    assert pooled.p99_ms == pytest.approx(1, rel=0.005)
    with_slow = pooled_itl([(slow.itl_mean_ms, slow.itl_bins, slow.itl_counts)] * 2
                           + [(fast.itl_mean_ms, fast.itl_bins, fast.itl_counts)])
    assert with_slow.p99_ms == pytest.approx(100, rel=0.005)


def test_bins_are_one_percent_wide():
    for ms in (0.013, 0.5, 2.5, 10, 999):
        t = stream_timing([0, int(ms * MS)], [1, 1], 2)
        assert t.itl_bins is not None
        assert bin_value_ms(t.itl_bins[0]) == pytest.approx(ms, rel=0.005)
