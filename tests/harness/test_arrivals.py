import math
import statistics

import pytest

from harness.results.send_lag import LAG_LIMIT_MS, send_lag
from harness.run.arrivals import schedule


def test_poisson_mean_rate_over_a_long_schedule():
    offsets = schedule(rate=50.0, duration=400.0, seed=1)  # ~20,000 requests
    # count ~ Poisson(20,000): sd ~141, so 2% is ~3 standard deviations
    assert len(offsets) == pytest.approx(20_000, rel=0.02)
    assert offsets == sorted(offsets) and offsets[0] > 0 and offsets[-1] < 400.0


def test_poisson_gaps_are_exponential():
    offsets = schedule(rate=4.0, duration=5000.0, seed=2)
    gaps = [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(0.25, rel=0.02)
    assert statistics.stdev(gaps) == pytest.approx(mean, rel=0.03)  # exponential: sd = mean
    # P(gap > mean) = e^-1 for an exponential, 0 for constant spacing
    assert sum(g > 0.25 for g in gaps) / len(gaps) == pytest.approx(math.exp(-1), abs=0.015)


def test_counts_in_windows_are_poisson():
    # requests per 1 s window at 3/s: variance equals mean (dispersion index ~1)
    offsets = schedule(rate=3.0, duration=3000.0, seed=3)
    counts = [0] * 3000
    for t in offsets:
        counts[int(t)] += 1
    assert statistics.fmean(counts) == pytest.approx(3.0, rel=0.03)
    assert statistics.pvariance(counts) / statistics.fmean(counts) == pytest.approx(1.0, abs=0.1)


def test_the_same_seed_gives_the_same_schedule():
    assert schedule(2.0, 60.0, seed=7) == schedule(2.0, 60.0, seed=7)
    assert schedule(2.0, 60.0, seed=7) != schedule(2.0, 60.0, seed=8)


def test_one_seed_scales_across_rates():
    # common random numbers: doubling the rate halves every gap of the same draw sequence
    slow, fast = schedule(1.0, 100.0, seed=4), schedule(2.0, 50.0, seed=4)
    assert len(slow) == len(fast)
    assert all(f == pytest.approx(s / 2) for s, f in zip(slow, fast, strict=True))


def test_constant_spacing_is_exact():
    assert schedule(4.0, 1.0, "constant") == [0.0, 0.25, 0.5, 0.75]
    assert schedule(0.5, 10.0, "constant") == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert schedule(0.1, 30.0, "constant") == [0.0, 10.0, 20.0]  # 30.000000000000004 excluded
    offsets = schedule(3.0, 60.0, "constant")
    assert len(offsets) == 180 and offsets[-1] == 179 / 3
    assert schedule(3.0, 60.0, "constant", seed=1) == offsets  # the seed plays no part


def test_a_short_level_can_hold_no_poisson_arrival():
    assert schedule(0.01, 0.1, seed=0) == []
    assert schedule(0.01, 0.1, "constant") == [0.0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 60), "the request rate must be a finite number above 0, got 0"),
        ((-1.5, 60), "the request rate must be a finite number above 0, got -1.5"),
        ((math.inf, 60), "the request rate must be a finite number above 0, got inf"),
        ((2, 0), "the duration must be a finite number above 0, got 0"),
        ((2, -5.0), "the duration must be a finite number above 0, got -5.0"),
        ((2, math.nan), "the duration must be a finite number above 0, got nan"),
        ((2, 60, "burst"), "arrival must be one of poisson, constant, got 'burst'"),
    ],
)
def test_bad_input_is_one_sentence(args, message):
    with pytest.raises(ValueError) as err:
        schedule(*args)
    assert str(err.value) == message


def test_send_lag_quantiles_in_ms():
    scheduled = [i * 0.1 for i in range(100)]
    actual = [s + (i + 1) / 1000 for i, s in enumerate(scheduled)]  # lags 1..100 ms
    lag = send_lag(scheduled, actual)
    assert lag.count == 100
    assert lag.p50_ms == pytest.approx(50.5)
    assert lag.p99_ms == pytest.approx(99.01)
    assert lag.max_ms == pytest.approx(100.0)
    assert lag.generator_limited
    assert lag.warning == ("p99 send lag 99.0 ms > 10 ms: the load generator, not the server, "
                           "was the limit")


def test_small_lag_is_not_flagged():
    scheduled = schedule(50.0, 10.0, seed=1)
    actual = [s + 0.0005 for s in scheduled]
    lag = send_lag(scheduled, actual)
    assert lag.p99_ms == pytest.approx(0.5) and lag.limit_ms == LAG_LIMIT_MS
    assert not lag.generator_limited and lag.warning is None


def test_the_flag_is_on_p99_not_the_worst_request():
    scheduled = [float(i) for i in range(1000)]
    actual = [s + (0.5 if i == 0 else 0.001) for i, s in enumerate(scheduled)]  # one 500 ms
    lag = send_lag(scheduled, actual)
    assert lag.max_ms == pytest.approx(500.0) and not lag.generator_limited
    assert send_lag(scheduled, actual, limit_ms=0.5).generator_limited


def test_early_sends_show_as_negative_lag_and_no_requests_no_figures():
    lag = send_lag([1.0, 2.0], [0.999, 1.999])
    assert lag.p50_ms == pytest.approx(-1.0) and not lag.generator_limited
    empty = send_lag([], [])
    assert (empty.count, empty.p50_ms, empty.p99_ms, empty.max_ms) == (0, None, None, None)
    assert not empty.generator_limited


def test_send_lag_bad_input():
    with pytest.raises(ValueError, match=r"^3 scheduled send times but 2 actual ones$"):
        send_lag([0.0, 1.0, 2.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="send lag limit must be a finite number above 0"):
        send_lag([0.0], [0.0], limit_ms=0)
