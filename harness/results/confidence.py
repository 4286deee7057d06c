"""Repeats and confidence: intervals for level means, Max C agreement, run-vs-run differences.

Requests inside one round share the server's state (batch, cache, drift), so they are not
independent: the unit of resampling is the cluster (repeat, round). A level mean is the mean
over all requests, so a resample is sum(cluster sums) / sum(cluster counts) over clusters drawn
with replacement. Pure stdlib (`random`), seeded, so the same rows always give the same interval.

The percentile interval of a bootstrap of the mean is too narrow with few clusters (the
bootstrap variance is (n-1)/n of the sample's, and it uses z where t belongs): 20 clusters cover
~93%, not 95%. We use Hesterberg's expanded percentile interval, which reads the bootstrap
quantiles at the tail Phi(-sqrt(n/(n-1)) t_{n-1}) instead of alpha/2. Below `MIN_CLUSTERS` no
interval is claimed: the range of per-repeat means is shown instead, and flagged.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from harness.results.quantiles import quantile

MIN_CLUSTERS = 20
RESAMPLES = 2000
CONFIDENCE = 0.95

# One successful request's value at a level: (repeat, round, value), e.g. (0, 3, 412.5) ms TTFT.
Observation = tuple[int, int, float]
# One cluster pre-aggregated: (repeat, round, sum of values, number of values).
ClusterSum = tuple[int, int, float, int]


@dataclass(slots=True, frozen=True)
class Interval:
    """A level mean with its 95% interval (method "bootstrap") or its range over repeats."""

    mean: float
    low: float
    high: float
    method: str  # "bootstrap" | "range" (fewer than MIN_CLUSTERS clusters)
    clusters: int
    repeats: int

    @property
    def note(self) -> str:
        if self.method == "bootstrap":
            return f"95% interval, bootstrap over {self.clusters} (repeat, round) clusters"
        return (f"range over {self.repeats} repeat(s), not an interval: only {self.clusters} "
                f"(repeat, round) clusters (< {MIN_CLUSTERS})")


@dataclass(slots=True, frozen=True)
class Agreement:
    """The modal Max C over repeats and how many repeats found it."""

    max_c: float  # an int for concurrency levels, a rate for rate levels
    agree: int
    repeats: int

    @property
    def text(self) -> str:
        return f"{self.agree} of {self.repeats}"


@dataclass(slots=True, frozen=True)
class Difference:
    """Run B against baseline A at one level, in % of A, with an interval and a verdict."""

    baseline: float  # mean of A
    other: float  # mean of B
    pct: float  # (B - A) / A x 100
    low: float | None  # None for "single run"
    high: float | None
    verdict: str  # "within noise" | "significant" | "single run"
    method: str | None  # "bootstrap" | "range" | None (single run)


@dataclass(slots=True, frozen=True)
class _Clusters:
    sums: list[float]
    counts: list[int]
    repeat_means: list[float]

    @property
    def mean(self) -> float:
        return sum(self.sums) / sum(self.counts)


def cluster_sums(observations: Iterable[Observation]) -> list[ClusterSum]:
    """Aggregate request values to (repeat, round, sum, count), the bootstrap's unit; what a
    `GROUP BY repeat, round` in DuckDB returns, so large runs need not reach Python row by row."""
    sums: dict[tuple[int, int], float] = {}
    counts: Counter[tuple[int, int]] = Counter()
    for repeat, rnd, value in observations:
        key = (repeat, rnd)
        sums[key] = sums.get(key, 0.0) + value
        counts[key] += 1
    return [(r, k, sums[(r, k)], counts[(r, k)]) for r, k in sorted(sums)]


def _clusters(rows: Iterable[ClusterSum]) -> _Clusters | None:
    ordered = sorted(row for row in rows if row[3] > 0)
    if not ordered:
        return None
    by_repeat: dict[int, list[float]] = {}
    for r, _, total, count in ordered:
        acc = by_repeat.setdefault(r, [0.0, 0.0])
        acc[0] += total
        acc[1] += count
    return _Clusters([row[2] for row in ordered], [row[3] for row in ordered],
                     [total / count for total, count in by_repeat.values()])


def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion (A&S 26.7.5); error < 1e-4 for
    df >= 10, the only range used here (the stdlib has no t distribution)."""
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _tail(confidence: float, n: int) -> float:
    """The expanded percentile tail for n clusters (Hesterberg 2015)."""
    t = _t_quantile(1 - (1 - confidence) / 2, n - 1)
    return NormalDist().cdf(-math.sqrt(n / (n - 1)) * t)


def _resample(c: _Clusters, resamples: int, rng: random.Random) -> list[float]:
    """Bootstrap means over clusters; `random()` directly is fast and stable across versions."""
    sums, counts, n, rand = c.sums, c.counts, len(c.sums), rng.random
    out = []
    for _ in range(resamples):
        s = cnt = 0.0
        for _ in range(n):
            i = int(rand() * n)
            s += sums[i]
            cnt += counts[i]
        out.append(s / cnt)
    return out


def _check(confidence: float, resamples: int, min_clusters: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if resamples < 100:
        raise ValueError(f"use at least 100 bootstrap resamples, got {resamples}")
    if min_clusters < 2:
        raise ValueError(f"the bootstrap needs at least 2 clusters, got {min_clusters}")


def interval(
    observations: Iterable[Observation],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    min_clusters: int = MIN_CLUSTERS,
) -> Interval | None:
    """The mean of a level's values with its cluster-bootstrap interval, or with the range of
    per-repeat means when there are fewer than `min_clusters` clusters; None without values."""
    return interval_of_clusters(cluster_sums(observations), confidence=confidence,
                                resamples=resamples, seed=seed, min_clusters=min_clusters)


def interval_of_clusters(
    clusters: Iterable[ClusterSum],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    min_clusters: int = MIN_CLUSTERS,
) -> Interval | None:
    """`interval` from clusters already aggregated to (repeat, round, sum, count)."""
    _check(confidence, resamples, min_clusters)
    c = _clusters(clusters)
    if c is None:
        return None
    n, repeats = len(c.sums), len(c.repeat_means)
    if n < min_clusters:
        return Interval(c.mean, min(c.repeat_means), max(c.repeat_means), "range", n, repeats)
    means = _resample(c, resamples, random.Random(seed))
    tail = _tail(confidence, n)
    low, high = quantile(means, tail), quantile(means, 1 - tail)
    assert low is not None and high is not None
    return Interval(c.mean, low, high, "bootstrap", n, repeats)


def intervals_by_level(
    rows: Iterable[tuple[float, int, int, float | None]],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    min_clusters: int = MIN_CLUSTERS,
) -> dict[float, Interval]:
    """Intervals per level from (level, repeat, round, value) rows, e.g. successful requests'
    (concurrency, repeat, round, ttft_ms); None values (not measured) are skipped."""
    by_level: dict[float, list[Observation]] = {}
    for level, repeat, rnd, value in rows:
        if value is not None:
            by_level.setdefault(level, []).append((repeat, rnd, value))
    out = {}
    for level in sorted(by_level):
        iv = interval(by_level[level], confidence=confidence, resamples=resamples, seed=seed,
                      min_clusters=min_clusters)
        assert iv is not None  # every listed level holds at least one value
        out[level] = iv
    return out


def agreement(max_cs: Sequence[float]) -> Agreement:
    """The modal Max C over repeats; a tie goes to the lower value, the conservative claim."""
    if not max_cs:
        raise ValueError("agreement needs the Max C of at least one repeat")
    counts = Counter(max_cs)
    top = max(counts.values())
    modal = min(v for v, k in counts.items() if k == top)
    return Agreement(modal, top, len(max_cs))


def difference(
    baseline: Iterable[Observation],
    other: Iterable[Observation],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    min_clusters: int = MIN_CLUSTERS,
) -> Difference | None:
    """Run B (`other`) against baseline A at one level, in % of A.

    Each run is bootstrapped independently over its own clusters; the interval is the expanded
    percentile interval of 100 x (B* / A* - 1), read with the fewer clusters of the two. With
    fewer than `min_clusters` clusters on a side, the interval is the range over every pair of
    per-repeat means instead; either way "within noise" when it spans 0, else "significant".
    A side with a single repeat gets no verdict: "single run". None without values or when A's
    mean is 0 (no percentage).
    """
    return difference_of_clusters(cluster_sums(baseline), cluster_sums(other),
                                  confidence=confidence, resamples=resamples, seed=seed,
                                  min_clusters=min_clusters)


def difference_of_clusters(
    baseline: Iterable[ClusterSum],
    other: Iterable[ClusterSum],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    min_clusters: int = MIN_CLUSTERS,
) -> Difference | None:
    """`difference` from clusters already aggregated to (repeat, round, sum, count)."""
    _check(confidence, resamples, min_clusters)
    a, b = _clusters(baseline), _clusters(other)
    if a is None or b is None or a.mean == 0:
        return None
    pct = (b.mean / a.mean - 1) * 100
    if len(a.repeat_means) < 2 or len(b.repeat_means) < 2:
        return Difference(a.mean, b.mean, pct, None, None, "single run", None)
    n = min(len(a.sums), len(b.sums))
    if n < min_clusters:
        pairs = [(y / x - 1) * 100 for x in a.repeat_means if x for y in b.repeat_means]
        low, high, method = min(pairs), max(pairs), "range"
    else:
        rng = random.Random(seed)
        ra, rb = _resample(a, resamples, rng), _resample(b, resamples, rng)
        diffs = [(y / x - 1) * 100 for x, y in zip(ra, rb, strict=True) if x != 0]
        tail = _tail(confidence, n)
        qlow, qhigh = quantile(diffs, tail), quantile(diffs, 1 - tail)
        assert qlow is not None and qhigh is not None
        low, high, method = qlow, qhigh, "bootstrap"
    verdict = "within noise" if low <= 0 <= high else "significant"
    return Difference(a.mean, b.mean, pct, low, high, verdict, method)
