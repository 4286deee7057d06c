"""A level's figures as another benchmark tool defines them, from engram-bench's stored rows,
so a user can set numbers from `vllm bench serve`, AIPerf or GuideLLM beside this run's.

The tools agree on where TTFT starts (just before the request is sent, not counting a wait for
a concurrency slot) and differ in the rest (docs/studies/peers.md):

- `vllm bench serve`: TPOT = (latency - TTFT) / (tokens - 1) per request; ITL is every gap
  between chunks, pooled over the level's requests (a chunk of several tokens is one gap);
  throughputs are totals over the level's duration (first send to last end); output tokens
  from the server's usage.
- AIPerf: its "inter token latency" is per request what vLLM calls TPOT; "output token
  throughput per user" is 1 / that (TTFT left out); percentiles are over requests; output
  tokens counted by re-tokenizing the text (here: the server's count).
- GuideLLM: TPOT = latency / tokens (TTFT included); ITL = (latency - TTFT) / (tokens - 1);
  their percentiles are weighted by tokens (TPOT by tokens, ITL by tokens - 1); per-request
  output tokens/s = tokens / latency (engram-bench's TPS).

Only successful requests count, as in the three tools. A figure the stored rows cannot give
(pooled chunk-gap percentiles without `--token-times`) is None with the reason beside it.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.records import RequestRecord
from harness.results.quantiles import quantile
from harness.results.token_timing import weighted_quantiles

PEER_TOOLS = ("vllm", "aiperf", "guidellm")
TOOL_NAMES = {"vllm": "vllm bench serve", "aiperf": "AIPerf", "guidellm": "GuideLLM"}
NEEDS_CHUNK_TIMES = "needs the chunk times (run with --token-times)"
QUANTILES = {"median": 0.5, "p50": 0.5, "p90": 0.9, "p99": 0.99}  # the tools' names for them


@dataclass(slots=True, frozen=True)
class PeerFigure:
    """One figure under the tool's own name, with its unit and how it is computed."""

    name: str
    value: float | None
    unit: str
    definition: str
    missing: str | None = None  # why `value` is None, where the stored rows cannot give it


def _ok(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok and r.latency_ms is not None and r.ttft_ms is not None]


def _duration_s(records: Sequence[RequestRecord]) -> float | None:
    """First send to last end: the tools' benchmark duration (summed over the passes of a
    level under --repeat, as each pass is a benchmark of its own)."""
    passes: dict[int, list[RequestRecord]] = collections.defaultdict(list)
    for r in records:
        passes[r.repeat].append(r)
    span = sum(max(r.sent_at + (r.latency_ms or 0.0) / 1000 for r in rs)
               - min(r.sent_at for r in rs) for rs in passes.values())
    return span if span > 0 else None


def _per_request(values: Sequence[float], stat: str) -> float | None:
    if not values:
        return None
    if stat == "mean":
        return statistics.fmean(values)
    return quantile(values, QUANTILES[stat])


def _weighted(pairs: Sequence[tuple[float, float]], stat: str) -> float | None:
    """A token-weighted statistic of (value, weight) pairs, as GuideLLM weighs TPOT and ITL."""
    pairs = [(v, w) for v, w in pairs if w > 0]
    if not pairs:
        return None
    if stat == "mean":
        return sum(v * w for v, w in pairs) / sum(w for _, w in pairs)
    return weighted_quantiles(pairs, [QUANTILES[stat]])[0]


def _pooled_chunk_gaps(records: Sequence[RequestRecord]) -> list[float] | None:
    """Every gap between content chunks of the level's requests, in ms (None: not stored)."""
    gaps: list[float] = []
    for r in records:
        if r.chunk_offsets_ns is None:
            return None
        offsets = r.chunk_offsets_ns
        gaps += [(b - a) / 1e6 for a, b in itertools.pairwise(offsets)]
    return gaps


def _mean_chunk_gap(records: Sequence[RequestRecord]) -> float | None:
    """The pooled mean gap between chunks without their times: a request's gaps sum to its
    latency after the first chunk (to its last, the stream's end here)."""
    chunked = [r for r in records if r.chunks > 1]
    if not chunked:
        return None
    return (sum((r.latency_ms or 0.0) - (r.ttft_ms or 0.0) for r in chunked)
            / sum(r.chunks - 1 for r in chunked))


def _totals(records: Sequence[RequestRecord], ok: Sequence[RequestRecord],
            ) -> tuple[float | None, int, int]:
    duration = _duration_s(records)
    return duration, sum(r.output_tokens for r in ok), sum(r.input_tokens or 0 for r in ok)


def _rate(amount: float, duration: float | None) -> float | None:
    return amount / duration if duration else None


def vllm(records: Sequence[RequestRecord]) -> list[PeerFigure]:
    ok = _ok(records)
    duration, out, inp = _totals(records, ok)
    tpot = [t for r in ok if (t := r.tpot_ms) is not None]
    ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    e2el = [r.latency_ms for r in ok if r.latency_ms is not None]
    gaps = _pooled_chunk_gaps(ok)
    figures = [
        PeerFigure("Request throughput", _rate(len(ok), duration), "req/s",
                   "completed requests / duration (first send to last end)"),
        PeerFigure("Output token throughput", _rate(out, duration), "tok/s",
                   "output tokens (server usage) / duration"),
        PeerFigure("Total token throughput", _rate(out + inp, duration), "tok/s",
                   "(prompt + output tokens) / duration"),
    ]
    for stat in ("mean", "median", "p99"):
        figures.append(PeerFigure(f"{stat.capitalize()} TTFT", _per_request(ttft, stat), "ms",
                                  "send to first content chunk, over requests"))
    for stat in ("mean", "median", "p99"):
        figures.append(PeerFigure(f"{stat.capitalize()} TPOT", _per_request(tpot, stat), "ms",
                                  "(latency - TTFT) / (tokens - 1) per request, over requests"))
    for stat in ("mean", "median", "p99"):
        if gaps is not None:
            value, missing = _per_request(gaps, stat), None
        elif stat == "mean":
            value, missing = _mean_chunk_gap(ok), None
        else:
            value, missing = None, NEEDS_CHUNK_TIMES
        figures.append(PeerFigure(f"{stat.capitalize()} ITL", value, "ms",
                                  "every gap between chunks, pooled over requests (a chunk "
                                  "is one gap)", missing))
    for stat in ("mean", "median", "p99"):
        figures.append(PeerFigure(f"{stat.capitalize()} E2EL", _per_request(e2el, stat), "ms",
                                  "send to end of stream, over requests"))
    return figures


def aiperf(records: Sequence[RequestRecord]) -> list[PeerFigure]:
    ok = _ok(records)
    duration, out, _ = _totals(records, ok)
    itl = [t for r in ok if (t := r.tpot_ms) is not None]
    per_user = [1000.0 / t for t in itl if t > 0]
    figures = []
    for stat in ("mean", "p50", "p90", "p99"):
        figures.append(PeerFigure(f"Time to First Token {stat}",
                                  _per_request([r.ttft_ms for r in ok if r.ttft_ms], stat),
                                  "ms", "send to first content chunk, over requests"))
    for stat in ("mean", "p50", "p90", "p99"):
        figures.append(PeerFigure(f"Inter Token Latency {stat}", _per_request(itl, stat), "ms",
                                  "(latency - TTFT) / (tokens - 1) per request, over requests"))
    for stat in ("mean", "p50", "p99"):
        figures.append(PeerFigure(
            f"Request Latency {stat}",
            _per_request([r.latency_ms for r in ok if r.latency_ms], stat), "ms",
            "send to end of stream, over requests"))
    figures += [
        PeerFigure("Output Token Throughput Per User avg", _per_request(per_user, "mean"),
                   "tok/s/user", "1000 / inter token latency per request (TTFT left out), "
                   "mean over requests"),
        PeerFigure("Output Token Throughput", _rate(out, duration), "tok/s",
                   "output tokens / duration (first send to last end)"),
        PeerFigure("Request Throughput", _rate(len(ok), duration), "req/s",
                   "completed requests / duration"),
    ]
    return figures


def guidellm(records: Sequence[RequestRecord]) -> list[PeerFigure]:
    ok = _ok(records)
    duration, out, _ = _totals(records, ok)
    tpot = [((r.latency_ms or 0.0) / r.output_tokens, float(r.output_tokens)) for r in ok
            if r.output_tokens > 0]
    itl = [(t, float(r.output_tokens - 1)) for r in ok if (t := r.tpot_ms) is not None]
    tps = [t for r in ok if (t := r.tps) is not None]
    figures = [
        PeerFigure("Requests per second", _rate(len(ok), duration), "req/s",
                   "completed requests / (first send to last end)"),
        PeerFigure("Output tokens per second (total)", _rate(out, duration), "tok/s",
                   "output tokens (server usage) / (first send to last end)"),
        PeerFigure("Request latency mean", _per_request(
            [r.latency_ms for r in ok if r.latency_ms], "mean"), "ms", "send to end of stream"),
    ]
    for stat in ("mean", "median", "p99"):
        figures.append(PeerFigure(f"TTFT {stat}", _per_request(
            [r.ttft_ms for r in ok if r.ttft_ms], stat), "ms",
            "send to first content chunk, over requests"))
    for stat in ("mean", "median", "p99"):
        figures.append(PeerFigure(f"TPOT {stat}", _weighted(tpot, stat), "ms",
                                  "latency / tokens per request (TTFT included), "
                                  "weighted by tokens"))
    for stat in ("mean", "median", "p99"):
        figures.append(PeerFigure(f"ITL {stat}", _weighted(itl, stat), "ms",
                                  "(latency - TTFT) / (tokens - 1) per request, "
                                  "weighted by tokens - 1"))
    figures.append(PeerFigure("Output tokens per second per request mean",
                              _per_request(tps, "mean"), "tok/s",
                              "tokens / latency per request (TTFT included): engram-bench's "
                              "TPS"))
    return figures


VIEWS: dict[str, Callable[[Sequence[RequestRecord]], list[PeerFigure]]] = {
    "vllm": vllm, "aiperf": aiperf, "guidellm": guidellm}


def with_chunk_times(records: Sequence[RequestRecord], chunk_rows: Sequence[dict],
                     ) -> list[RequestRecord]:
    """The records with their stored chunk arrivals (`Store.chunk_times` rows), where a run
    kept them (`--token-times`)."""
    offsets: dict[str, list[int]] = collections.defaultdict(list)
    for row in chunk_rows:  # ordered by request and index
        offsets[row["request_id"]].append(row["t_ns"])
    if not offsets:
        return list(records)
    return [dataclasses.replace(r, chunk_offsets_ns=offsets.get(r.request_id)) for r in records]


def peer_view(records: Sequence[RequestRecord], tool: str) -> dict:
    """Per level (concurrency or rate, passes pooled) the tool's figures by its definitions:
    {"tool", "levels": [{"concurrency", "rate", "requests", "figures": {name: value}}],
    "units", "definitions", "missing": {name: why}}."""
    by_level: dict[tuple[int, float | None], list[RequestRecord]] = collections.defaultdict(list)
    for r in records:
        by_level[(r.concurrency, r.rate)].append(r)
    view: dict = {"tool": TOOL_NAMES[tool], "levels": [], "units": {}, "definitions": {},
                  "missing": {}}
    for (c, rate), level in sorted(by_level.items(), key=lambda kv: (kv[0][1] or 0, kv[0][0])):
        figures = VIEWS[tool](level)
        view["levels"].append({"concurrency": c, "rate": rate, "requests": len(level),
                               "figures": {f.name: f.value for f in figures}})
        for f in figures:
            view["units"][f.name] = f.unit
            view["definitions"][f.name] = f.definition
            if f.missing:
                view["missing"][f.name] = f.missing
    return view
