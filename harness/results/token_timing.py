"""Inter-token figures of one stream and of a level, from the arrival times of its chunks.

A chunk may carry several tokens (speculative decoding sends the accepted run at once), so two
families are kept apart and named apart:
- chunk gaps (`chunk_gap_*`): the time between content chunks, one value per chunk;
- inter-token latency (`itl_*`), token-weighted: a chunk of k tokens that came g after the
  one before counts as k gaps of g / k, so 4 tokens after 40 ms are 4 gaps of 10 ms.

A chunk's tokens come from per-chunk usage where the server streams it (the cumulative
`usage.completion_tokens` on each chunk); otherwise every chunk is taken to carry the mean
(output tokens / chunks), and the figures are flagged estimated.

A level's ITL percentiles pool every token gap of its requests. Without the chunk times
stored, each request keeps a histogram of its token gaps on a log scale (bins 1 % wide, so a
pooled percentile is within 0.5 % of the exact one), which merges across requests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.results.quantiles import quantile

BIN_RATIO = 1.01  # width of a histogram bin: each is 1 % wider than the one below
_LOG_RATIO = math.log(BIN_RATIO)


def bin_of(gap_us: float) -> int:
    """The histogram bin of a token gap in microseconds (gaps under 1 us share bin 0)."""
    return round(math.log(gap_us) / _LOG_RATIO) if gap_us > 1.0 else 0


def bin_value_ms(b: int) -> float:
    """The gap a bin stands for, in ms (the SQL form is the levels view's)."""
    return BIN_RATIO ** b / 1000.0


@dataclass(slots=True, frozen=True)
class StreamTiming:
    """One request's inter-token figures; None where the stream had one content chunk."""

    tokens_per_chunk: float | None
    tokens_per_chunk_estimated: bool
    chunk_gap_mean_ms: float | None = None
    chunk_gap_p50_ms: float | None = None
    chunk_gap_p90_ms: float | None = None
    chunk_gap_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    itl_bins: list[int] | None = None  # the token gaps' histogram: bins and their counts
    itl_counts: list[int] | None = None


def weighted_quantiles(pairs: Sequence[tuple[float, float]], qs: Sequence[float]
                       ) -> list[float | None]:
    """For each q (ascending), the smallest value whose cumulative weight reaches q of the
    total (nearest rank); `pairs` are (value, weight), in any order. One sort for all."""
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    if not ordered or total <= 0:
        return [None] * len(qs)
    out: list[float | None] = []
    cum, i = 0.0, 0
    for q in qs:
        reach = q * total
        while i < len(ordered) and cum + ordered[i][1] < reach:
            cum += ordered[i][1]
            i += 1
        out.append(ordered[min(i, len(ordered) - 1)][0])
    return out


def stream_timing(times_ns: Sequence[int], chunk_tokens: Sequence[int] | None,
                  output_tokens: int) -> StreamTiming:
    """The figures of one stream: `times_ns` are its content chunks' arrival times,
    `chunk_tokens` each chunk's tokens from per-chunk usage (None: the server sent none)."""
    chunks = len(times_ns)
    if not chunks:
        return StreamTiming(None, chunk_tokens is None)
    estimated = chunk_tokens is None or len(chunk_tokens) != chunks
    if estimated:
        per_chunk = output_tokens / chunks
        weights: Sequence[float] = [per_chunk] * chunks
    else:
        assert chunk_tokens is not None
        per_chunk = sum(chunk_tokens) / chunks
        weights = chunk_tokens
    if chunks < 2:
        return StreamTiming(per_chunk, estimated)
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(times_ns)]
    # a chunk that carried no token (usage unchanged) adds its gap to the next one's
    token_gaps: list[tuple[float, float]] = []
    pending_ms = 0.0
    for gap, weight in zip(gaps, weights[1:], strict=True):
        pending_ms += gap
        if weight > 0:
            token_gaps.append((pending_ms / weight, weight))
            pending_ms = 0.0
    tokens_after_first = sum(w for _, w in token_gaps)
    histogram: dict[int, int] = {}
    for per_token_ms, weight in token_gaps:
        b = bin_of(per_token_ms * 1000.0)
        histogram[b] = histogram.get(b, 0) + max(1, round(weight))
    bins = sorted(histogram)
    p50, p90, p99 = weighted_quantiles(token_gaps, (0.5, 0.9, 0.99))
    return StreamTiming(
        tokens_per_chunk=per_chunk,
        tokens_per_chunk_estimated=estimated,
        chunk_gap_mean_ms=sum(gaps) / len(gaps),
        chunk_gap_p50_ms=quantile(gaps, 0.5),
        chunk_gap_p90_ms=quantile(gaps, 0.9),
        chunk_gap_p99_ms=quantile(gaps, 0.99),
        itl_mean_ms=(sum(gaps) - pending_ms) / tokens_after_first if tokens_after_first else None,
        itl_p50_ms=p50,
        itl_p90_ms=p90,
        itl_p99_ms=p99,
        itl_bins=bins or None,
        itl_counts=[histogram[b] for b in bins] or None,
    )


@dataclass(slots=True, frozen=True)
class PooledItl:
    """A level's token-weighted ITL over every token gap of its requests."""

    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


def pooled_itl(streams: Iterable[tuple[float | None, Sequence[int] | None,
                                       Sequence[int] | None]]) -> PooledItl:
    """Pool (itl_mean_ms, itl_bins, itl_counts) of a level's requests: the mean weights each
    request by its token gaps, the percentiles come from the merged histogram."""
    merged: dict[int, int] = {}
    weighted_sum = 0.0
    weight = 0
    for itl_mean, bins, counts in streams:
        if itl_mean is None or not bins or not counts:
            continue
        n = sum(counts)
        weighted_sum += itl_mean * n
        weight += n
        for b, c in zip(bins, counts, strict=True):
            merged[b] = merged.get(b, 0) + c
    if not weight:
        return PooledItl(None, None, None, None)
    pairs = [(float(b), float(c)) for b, c in merged.items()]
    p50, p90, p99 = (None if b is None else bin_value_ms(int(b))
                     for b in weighted_quantiles(pairs, (0.5, 0.9, 0.99)))
    return PooledItl(weighted_sum / weight, p50, p90, p99)
