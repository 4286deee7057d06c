import random

import pytest

from harness.results.confidence import (
    MIN_CLUSTERS,
    _tail,
    agreement,
    cluster_sums,
    difference,
    difference_of_clusters,
    interval,
    interval_of_clusters,
    intervals_by_level,
)

TRUE_MEAN = 600.0  # 500 + the exponential noise's mean of 100


def clustered_run(rng, repeats=3, rounds=8, per_round=4, scale=1.0, cluster_sd=60.0):
    """One run's TTFTs: a per-(repeat, round) random effect shared by the round's requests plus
    skewed per-request noise, so requests inside a round are not independent. Mean: 600 x scale.
    """
    obs = []
    for r in range(repeats):
        for k in range(rounds):
            shared = rng.gauss(0.0, cluster_sd)
            for _ in range(per_round):
                obs.append((r, k, scale * (500.0 + shared + rng.expovariate(1 / 100.0))))
    return obs


def coverage(runs, make, truth, resamples=400):
    rng = random.Random(7)
    hits = 0
    for i in range(runs):
        iv = interval(make(rng), resamples=resamples, seed=i)
        hits += iv.low <= truth <= iv.high
    return hits / runs


def test_the_interval_brackets_the_pooled_request_mean_and_is_seeded():
    obs = clustered_run(random.Random(1))
    iv = interval(obs)
    assert iv.mean == pytest.approx(sum(v for *_, v in obs) / len(obs))
    assert iv.low < iv.mean < iv.high
    assert (iv.method, iv.clusters, iv.repeats) == ("bootstrap", 24, 3)
    assert iv.note == "95% interval, bootstrap over 24 (repeat, round) clusters"
    assert interval(obs, seed=0) == iv  # same rows, same seed: same interval
    assert interval(obs, seed=1) != iv
    assert interval(list(reversed(obs))) == iv  # row order does not matter


def test_the_level_mean_weights_requests_not_clusters():
    # 20 clusters: one of 10 requests at 100, nineteen of 1 request at 0
    obs = [(0, 0, 100.0)] * 10 + [(0, k, 0.0) for k in range(1, 20)]
    iv = interval(obs)
    assert iv.mean == pytest.approx(1000 / 29)
    assert iv.low == 0.0 and iv.mean < iv.high < 100.0


def test_interval_coverage_is_about_95_percent_with_clustered_data():
    # 1,000 simulated runs of 3 repeats x 8 rounds x 4 requests; Monte Carlo SE ~0.7%
    assert 0.92 <= coverage(1000, clustered_run, TRUE_MEAN) <= 0.98


def test_coverage_holds_at_the_minimum_cluster_count():
    # 20 clusters is where the plain percentile interval undercovers (~93%); the expanded one
    # reads further into the tails to make up for it
    assert _tail(0.95, 20) == pytest.approx(0.0159, abs=1e-4)
    assert _tail(0.95, 10**6) == pytest.approx(0.025, abs=1e-4)

    def make(rng):
        return clustered_run(rng, repeats=2, rounds=10)

    assert 0.92 <= coverage(600, make, TRUE_MEAN) <= 0.98


def test_treating_a_rounds_requests_as_independent_would_undercover():
    # the same data with every request its own cluster: intervals far too narrow
    def as_independent(rng):
        obs = clustered_run(rng, cluster_sd=250.0)
        return [(r, i, v) for i, (r, _, v) in enumerate(obs)]

    def clustered(rng):
        return clustered_run(rng, cluster_sd=250.0)

    assert coverage(150, as_independent, TRUE_MEAN, resamples=200) < 0.8
    assert coverage(150, clustered, TRUE_MEAN, resamples=200) > 0.9


def test_fewer_than_20_clusters_give_the_range_over_repeats_and_say_so():
    obs = clustered_run(random.Random(3), repeats=3, rounds=6)  # 18 clusters
    iv = interval(obs)
    per_repeat = [
        sum(v for r, _, v in obs if r == rep) / sum(1 for r, _, _ in obs if r == rep)
        for rep in range(3)
    ]
    assert (iv.method, iv.clusters, iv.repeats) == ("range", 18, 3)
    assert (iv.low, iv.high) == (pytest.approx(min(per_repeat)), pytest.approx(max(per_repeat)))
    assert iv.note == ("range over 3 repeat(s), not an interval: only 18 (repeat, round) "
                       f"clusters (< {MIN_CLUSTERS})")
    single = interval([(0, k, 10.0 + k) for k in range(5)])
    assert (single.method, single.low, single.high, single.mean) == ("range", 12.0, 12.0, 12.0)
    assert interval([(0, k, 1.0) for k in range(5)], min_clusters=5).method == "bootstrap"


def test_no_values_no_interval():
    assert interval([]) is None


def test_intervals_by_level_group_rows_and_skip_missing_values():
    # (level, repeat, round, value): round 0 of every repeat failed (no value)
    rows = [(c, r, k, None if k == 0 else 100.0 * c + k)
            for c in (2, 1) for r in range(3) for k in range(8)]
    out = intervals_by_level(rows)
    assert list(out) == [1, 2]
    assert (out[1].clusters, out[1].repeats, out[1].method) == (21, 3, "bootstrap")
    assert out[2].mean == pytest.approx(200 + 4)  # rounds 1..7
    assert intervals_by_level([(1, 0, 0, None)]) == {}


def test_max_c_agreement_is_the_modal_value_and_how_many_repeats_found_it():
    assert agreement([3, 3, 3]).text == "3 of 3"
    a = agreement([5, 4, 5])
    assert (a.max_c, a.agree, a.repeats, a.text) == (5, 2, 3, "2 of 3")
    tie = agreement([8, 4])  # a tie goes to the lower Max C, the claim a buyer can rely on
    assert (tie.max_c, tie.text) == (4, "1 of 2")
    assert agreement([2.5, 2.5, 4.0]).max_c == 2.5  # sustainable rates agree the same way
    with pytest.raises(ValueError, match="at least one repeat"):
        agreement([])


def test_difference_interval_covers_the_true_percentage_about_95_percent():
    # B is 10% slower than A; each run 3 repeats x 8 rounds, bootstrapped independently
    rng = random.Random(11)
    runs, hits, significant = 500, 0, 0
    for i in range(runs):
        d = difference(clustered_run(rng), clustered_run(rng, scale=1.1), resamples=400, seed=i)
        hits += d.low <= 10.0 <= d.high
        significant += d.verdict == "significant"
    assert 0.92 <= hits / runs <= 0.98
    assert significant / runs > 0.5  # ~2.6 standard errors: usually, not always, detected


def test_the_same_distribution_is_within_noise():
    rng = random.Random(5)
    d = difference(clustered_run(rng), clustered_run(rng))
    assert d.verdict == "within noise" and d.method == "bootstrap"
    assert d.low < 0 < d.high
    assert d.pct == pytest.approx((d.other / d.baseline - 1) * 100)


def test_a_large_difference_is_significant():
    rng = random.Random(5)
    d = difference(clustered_run(rng), clustered_run(rng, scale=0.7))
    assert d.verdict == "significant"
    assert d.low < d.pct < d.high < 0 and d.pct == pytest.approx(-30, abs=4)


def test_a_run_without_repeats_gets_only_the_difference():
    rng = random.Random(2)
    one = clustered_run(rng, repeats=1, rounds=30)
    three = clustered_run(rng, scale=1.5)
    for a, b in ((one, three), (three, one)):
        d = difference(a, b)
        assert (d.verdict, d.low, d.high, d.method) == ("single run", None, None, None)
        assert d.pct == pytest.approx((d.other / d.baseline - 1) * 100)


def test_few_clusters_compare_by_the_range_over_repeat_pairs():
    a = [(r, k, v) for r, v in enumerate((100.0, 110.0)) for k in range(3)]
    b = [(r, k, v) for r, v in enumerate((105.0, 120.0)) for k in range(3)]
    d = difference(a, b)
    assert d.method == "range"
    assert d.pct == pytest.approx((112.5 / 105 - 1) * 100)
    assert (d.low, d.high) == (pytest.approx(105 / 110 * 100 - 100), pytest.approx(20.0))
    assert d.verdict == "within noise"
    faster = [(r, k, v * 2) for r, k, v in b]
    assert difference(a, faster).verdict == "significant"


def test_difference_needs_values_and_a_nonzero_baseline():
    obs = clustered_run(random.Random(1))
    assert difference([], obs) is None and difference(obs, []) is None
    assert difference([(0, 0, 0.0)], obs) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"confidence": 1.0}, "confidence must be between 0 and 1, got 1.0"),
        ({"resamples": 10}, "use at least 100 bootstrap resamples, got 10"),
        ({"min_clusters": 1}, "the bootstrap needs at least 2 clusters, got 1"),
    ],
)
def test_bad_options_are_one_sentence(options, message):
    with pytest.raises(ValueError) as err:
        interval([(0, 0, 1.0)], **options)
    assert str(err.value) == message
    with pytest.raises(ValueError):
        difference([(0, 0, 1.0)], [(0, 0, 1.0)], **options)


def test_pre_aggregated_clusters_give_the_same_answers():
    # what `GROUP BY repeat, round` returns from the store: no request rows through Python
    rng = random.Random(9)
    a, b = clustered_run(rng), clustered_run(rng, scale=1.05)
    sums = cluster_sums(a)
    assert len(sums) == 24 and sums[0][:2] == (0, 0) and sums[0][3] == 4
    assert sum(s for *_, s, _ in sums) == pytest.approx(sum(v for *_, v in a))
    assert interval_of_clusters(sums) == interval(a)
    assert interval_of_clusters(list(reversed(sums))) == interval(a)
    assert difference_of_clusters(sums, cluster_sums(b)) == difference(a, b)
    assert interval_of_clusters([(0, 0, 0.0, 0)]) is None  # an empty cluster is no cluster
