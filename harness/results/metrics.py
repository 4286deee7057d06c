"""Per-level statistics and capacity (Max C, users): the one place these rules live.

Pure functions over plain values; the CLI, the store's `levels` view (mirrored in SQL and
checked against this module by a test) and the explorer all follow them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from harness.config import USERS_PER_MAX_C
from harness.records import RequestRecord
from harness.results.figure import Figure, Group, figure
from harness.results.goodput import Slo, goodput
from harness.results.quantiles import busy_seconds, mean
from harness.results.request_figures import (
    REQUEST_FIGURES,
    Value,
    level_figures,
    level_values,
)
from harness.results.send_lag import SendLag, send_lag
from harness.results.token_timing import pooled_itl

STATISTICS = ("mean", "p50", "p90", "p99")
# which first token the TTFT target judges: the first of any kind (the published method), or
# the answer's first (TTFO, after any reasoning)
TTFT_OF = ("first", "output")
COUNT = "%d"  # the explorer's format of a count
PROMPT_TOLERANCE = 0.05  # per-level prompt-token means must land within this of the target


@dataclass(slots=True, frozen=True)
class LevelStats:
    """What one concurrency level measured, over its successful requests; each field declares
    how it is named and where it is shown (harness.results.figure), in the order of the
    summary's level rows."""

    concurrency: int = field(metadata=figure("C", header="C", format=COUNT))
    requests: int = field(metadata=figure("requests", header="req", format=COUNT))
    errors: int = field(metadata=figure("errors", header="err", format=COUNT))
    short_outputs: int = field(metadata=figure("short outputs", header="short", format=COUNT))
    # (the declared per-request figures' statistics follow: TTFT, TPS, TPOT, E2E ...)
    throughput_tps: float | None = field(
        default=None, metadata=figure("throughput", "tok/s", "tok/s all"))
    # token-weighted, pooled over the level's token gaps
    mean_itl_ms: float | None = field(
        default=None, metadata=figure("mean ITL", "ms/token", "ITL mean", "%.2f"))
    p50_itl_ms: float | None = field(
        default=None, metadata=figure("p50 ITL", "ms/token", "p50", "%.2f"))
    p90_itl_ms: float | None = field(
        default=None, metadata=figure("p90 ITL", "ms/token", "p90", "%.2f"))
    p99_itl_ms: float | None = field(
        default=None, metadata=figure("p99 ITL", "ms/token", "p99", "%.2f"))
    # some stream carried no per-chunk usage
    tokens_per_chunk_estimated: bool | None = field(
        default=None, metadata=figure("tokens per chunk estimated", format=None))
    # with an SLO: the share of requests meeting all of it, and such requests per second of busy
    # time; the results file knows no SLO, so its `levels` view has neither
    goodput_share: float | None = field(default=None, metadata=figure(
        "goodput (share meeting the SLO)", format="percent", group="slo", sql=False))
    goodput_rps: float | None = field(default=None, metadata=figure(
        "goodput", "req/s", format="%.2f", group="slo", sql=False))
    # mode rate: requests/s (concurrency is then 0), and actual - scheduled send time
    rate: float | None = field(
        default=None, metadata=figure("rate", "req/s", "req/s", "%.2f", group="rate"))
    p50_send_lag_ms: float | None = field(
        default=None, metadata=figure("p50 send lag", "ms", "lag p50", "%.2f", group="rate"))
    p99_send_lag_ms: float | None = field(
        default=None, metadata=figure("p99 send lag", "ms", "lag p99", "%.2f", group="rate"))
    # the load generator, not the server, set the pace: a sentence for the summary's warnings
    lag_warning: str | None = field(default=None, metadata=figure(
        "send lag warning", format=None, group="rate", sql=False, summary=False,
        explorer=False))
    # a trace replay: a timed level's speedup (its rate is what that offers)
    speedup: float | None = field(
        default=None, metadata=figure("speedup", "x", "X", "%.3g", group="trace"))
    # the declared per-request figures' statistics, by level name ("mean_ttft_ms"): their
    # names, types and where they show are declared in harness.results.request_figures
    declared: dict[str, Value] = field(default_factory=dict)

    def value(self, name: str) -> object:
        """A figure by its level name, a field's or a declared one's."""
        return self.declared.get(name) if name in DECLARED_FIGURES else getattr(self, name)

    def number(self, name: str) -> float | None:
        """A figure by its level name as a number ("mean_ttft_ms"), None where the level has
        none."""
        value = self.value(name)
        return float(value) if isinstance(value, int | float) else None


# The declared per-request figures' level statistics (harness.results.request_figures).
DECLARED_FIGURES: dict[str, Figure] = level_figures()
# the LevelStats fields the declared figures follow: the level and its request counts
_LEAD = ("concurrency", "requests", "errors", "short_outputs")
_FIELD_FIGURES = {f.name: f.metadata["figure"] for f in fields(LevelStats)
                  if "figure" in f.metadata}
# Every level figure's declaration: the level's counts, the declared figures, then the other
# LevelStats fields in field order.
LEVEL_FIGURES: dict[str, Figure] = {
    **{name: _FIELD_FIGURES[name] for name in _LEAD},
    **DECLARED_FIGURES,
    **{name: fig for name, fig in _FIELD_FIGURES.items() if name not in _LEAD},
}


def figure_names(group: Group, where: str) -> tuple[str, ...]:
    """The LevelStats fields of `group` that `where` ("sql", "summary" or "explorer") shows,
    in field order."""
    return tuple(name for name, fig in LEVEL_FIGURES.items()
                 if fig.group == group and getattr(fig, where))


def mean_prompt_tokens(records: Iterable[RequestRecord]) -> float | None:
    """Mean server-counted prompt tokens of successful requests (None: no server counted)."""
    return mean([r.input_tokens for r in records if r.ok and r.input_tokens is not None])


def prompt_warning(stats: LevelStats, target: int) -> str | None:
    """Why a level's prompts do not match the calibrated target (a trace's level: the mean
    its requests asked for), or None when they do."""
    mean = stats.number("mean_prompt_tokens")
    asked = stats.number("mean_input_tokens_requested") or target
    if mean is None or abs(mean - asked) <= PROMPT_TOLERANCE * asked:
        return None
    return (f"{level_name(stats)}: prompts averaged {mean:.1f} tokens, {mean / asked - 1:+.1%} "
            f"off the {asked:.0f}-token target (tolerance {PROMPT_TOLERANCE:.0%})")


def first_turns(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The requests that sent only a new message (a conversation's later turns resend the
    turns before them): the ones whose prompt the calibrated length describes."""
    return [r for r in records if r.turn == 1]


def level_label(concurrency: int, rate: float | None, speedup: float | None,
                rate_unit: str = " req/s") -> str:
    """'C=4', 'R=2 req/s' for a rate level, 'X=4' for a trace replayed 4x as fast: how
    messages and tables name a level from the keys it is stored under."""
    if speedup is not None:
        return f"X={speedup:g}"
    return f"C={concurrency}" if rate is None else f"R={rate:g}{rate_unit}"


def level_name(stats: LevelStats) -> str:
    """A measured level's label (level_label)."""
    return level_label(stats.concurrency, stats.rate, stats.speedup)


def _send_lag(records: Sequence[RequestRecord]) -> SendLag | None:
    """How late a rate level's requests went out; None outside rate mode."""

    sent = [(r.scheduled_at, r.sent_at) for r in records if r.scheduled_at is not None]
    if not sent:
        return None
    return send_lag([s for s, _ in sent], [a for _, a in sent])


def level_stats(
    concurrency: int, records: Sequence[RequestRecord], output_target: int,
    rate: float | None = None, slo: Slo | None = None,
) -> LevelStats:
    """Statistics of one level. Throughput = successful output tokens / the level's busy time
    (while any of its requests was in flight), so an outage between resumed rounds is not in it."""
    good = [r for r in records if r.ok]
    short = sum(1 for r in good if r.output_tokens < (r.output_tokens_requested or output_target))
    throughput = None
    if good:
        busy = busy_seconds([(r.sent_at, r.sent_at + (r.latency_ms or 0.0) / 1000)
                             for r in records])
        throughput = sum(r.output_tokens for r in good) / busy if busy > 0 else None
    lag = _send_lag(records)
    share, rps = goodput(records, slo) if slo else (None, None)
    itl = pooled_itl((r.itl_mean_ms, r.itl_bins, r.itl_counts) for r in good)
    return LevelStats(
        concurrency=concurrency,
        requests=len(records),
        errors=len(records) - len(good),
        short_outputs=short,
        throughput_tps=throughput,
        mean_itl_ms=itl.mean_ms,
        p50_itl_ms=itl.p50_ms,
        p90_itl_ms=itl.p90_ms,
        p99_itl_ms=itl.p99_ms,
        tokens_per_chunk_estimated=(any(r.tokens_per_chunk_estimated for r in good)
                                    if good else None),
        goodput_share=share,
        goodput_rps=rps,
        rate=rate,
        p50_send_lag_ms=lag.p50_ms if lag else None,
        p99_send_lag_ms=lag.p99_ms if lag else None,
        lag_warning=lag.warning if lag else None,
        speedup=next((r.speedup for r in records if r.speedup is not None), None),
        declared=level_values(figure_values(r) for r in good),
    )


def figure_values(record: RequestRecord) -> dict[str, Value]:
    """A request's value of each declared figure, by name: its own column's from
    `figures`, the record's or a derived one from the record."""
    return {f.name: record.figures.get(f.name) if f.source == "column"
            else getattr(record, f.name) for f in REQUEST_FIGURES}


def stats_by_level(records: Iterable[RequestRecord], output_target: int,
                   slo: Slo | None = None) -> list[LevelStats]:
    """One LevelStats per (concurrency, rate): concurrency levels first, then rates; with
    `slo`, each has its goodput."""
    by_level: dict[tuple[int, float | None], list[RequestRecord]] = {}
    for r in records:
        by_level.setdefault((r.concurrency, r.rate), []).append(r)
    keys = sorted(by_level, key=lambda k: (k[1] is not None, k[0], k[1] or 0.0))
    return [level_stats(c, by_level[(c, rate)], output_target, rate, slo) for c, rate in keys]


@dataclass(slots=True, frozen=True)
class Targets:
    """Service targets and user factors (defaults: docs/design.md and the published explorer)."""

    tps_min: float = 20.0
    ttft_max_ms: float = 1000.0
    statistic: str = "mean"
    chat_factor: float = USERS_PER_MAX_C["chat"]
    agentic_factor: float = USERS_PER_MAX_C["agentic"]
    slo: Slo | None = None  # per-request objectives for goodput (none by default)
    min_goodput: float | None = None  # a level passes only if this share met `slo`
    ttft_of: str = "first"  # TTFT_OF: "output" judges the TTFT target on TTFO

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}")
        if self.ttft_of not in TTFT_OF:
            raise ValueError(f"--ttft-of is first (the first token of any kind) or output "
                             f"(the answer's first, after any reasoning), not {self.ttft_of!r}")
        # written so that NaN fails every check: `not (NaN >= 0)`
        if not (0 <= self.tps_min < math.inf) or not self.ttft_max_ms > 0:
            raise ValueError("the TPS target must be a finite number >= 0 and the TTFT target "
                             "a number > 0")
        if not (0 <= self.chat_factor < math.inf and 0 <= self.agentic_factor < math.inf):
            raise ValueError("user factors must be finite numbers >= 0")
        if self.min_goodput is not None:
            if not 0 < self.min_goodput <= 1:
                raise ValueError(f"--min-goodput is a share in (0, 1], not {self.min_goodput:g}")
            if self.slo is None:
                raise ValueError("--min-goodput needs --slo: the objectives a request must meet")


@dataclass(slots=True, frozen=True)
class LevelPoint:
    """The figures capacity judges at one level; None means not measured or not published."""

    concurrency: int
    ttft_ms: float | None
    tps: float | None
    errors: int | None = 0
    goodput: float | None = None  # the share of requests meeting the SLO, where one was set


# The statistic judged: TTFT at the percentile, TPS at the mirrored low percentile.
STATISTIC_FIELDS = {
    "mean": ("mean_ttft_ms", "mean_tps"),
    "p50": ("p50_ttft_ms", "p50_tps"),
    "p90": ("p90_ttft_ms", "p10_tps"),
    "p99": ("p99_ttft_ms", "p1_tps"),
}
# Every statistic capacity can judge, TTFT and TPS: each is in --json, whichever is judged.
FIGURE_FIELDS = ("mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
                 "mean_tps", "p50_tps", "p10_tps", "p1_tps")


def judged_fields(statistic: str, ttft_of: str = "first") -> tuple[str, str]:
    """The level figures the TTFT and TPS targets judge: with `ttft_of` "output", TTFO's at
    the statistic (a declared figure, harness.results.request_figures) in TTFT's place."""
    ttft_field, tps_field = STATISTIC_FIELDS[statistic]
    return (ttft_field.replace("_ttft_", "_ttfo_") if ttft_of == "output" else ttft_field,
            tps_field)


def point(stats: LevelStats, statistic: str = "mean", ttft_of: str = "first") -> LevelPoint:
    ttft_field, tps_field = judged_fields(statistic, ttft_of)
    return LevelPoint(stats.concurrency, stats.number(ttft_field), stats.number(tps_field),
                      stats.errors, stats.goodput_share)


@dataclass(slots=True, frozen=True)
class LevelVerdict:
    concurrency: int
    ttft_ms: float | None
    tps: float | None
    passes: bool
    reason: str  # why it fails, or "" when it passes


@dataclass(slots=True, frozen=True)
class Capacity:
    max_c: int
    chat_users: int
    agentic_users: int
    levels: list[LevelVerdict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def judge(p: LevelPoint, targets: Targets) -> LevelVerdict:
    reasons = []
    if p.ttft_ms is None or p.tps is None:
        missing = [n for n, v in (("TTFT", p.ttft_ms), ("TPS", p.tps)) if v is None]
        reasons.append(f"no {' or '.join(missing)} figure")
    if p.errors:
        reasons.append(f"{p.errors} failed request(s)")
    if p.tps is not None and p.tps < targets.tps_min:
        reasons.append(f"TPS {p.tps:.1f} < {targets.tps_min:g}")
    if p.ttft_ms is not None and p.ttft_ms > targets.ttft_max_ms:
        reasons.append(f"TTFT {p.ttft_ms:.0f} ms > {targets.ttft_max_ms:g} ms")
    if targets.min_goodput is not None:
        if p.goodput is None:
            reasons.append("no goodput figure")
        elif p.goodput < targets.min_goodput:
            reasons.append(f"goodput {p.goodput:.1%} < {targets.min_goodput:.1%}")
    return LevelVerdict(p.concurrency, p.ttft_ms, p.tps, not reasons, "; ".join(reasons))


def users(max_c: int, factor: float) -> int:
    """floor(Max C x factor); the epsilon keeps 2 x 1.5 from flooring to 2 in binary."""
    return math.floor(max_c * factor + 1e-9)


# What a load mode's levels are keyed by where that is not a concurrency C: the one list of it
# (harness.run.modes takes each mode's key from here), so readers of results branch on the key.
LEVEL_KEYS = {"rate": "R", "users": "U", "trace": "X"}


def level_key(mode: str | None) -> str | None:
    """C, U (users), R (rate) or X (a timed trace replay's speedup): what the levels of a run
    in `mode` are keyed by; None for a run whose row names no mode (another tool wrote it)."""
    return None if mode is None else LEVEL_KEYS.get(mode, "C")


def level_names(users_levels: bool) -> tuple[str, str]:
    """How a level and the capacity read: ("C", "Max C"), or ("U", "Max users") in users mode."""
    return ("U", "Max users") if users_levels else ("C", "Max C")


def capacity(points: Iterable[LevelPoint], targets: Targets | None = None,
             users_levels: bool = False) -> Capacity:
    """Max C = highest tested level that passes; a pass above a failure is warned about, and
    so is a pass at the top level, which only bounds Max C from below. `users_levels`: the
    levels are user counts U (mode users), and the warnings say so."""
    targets = targets or Targets()
    level, best = level_names(users_levels)
    verdicts = [judge(p, targets) for p in sorted(points, key=lambda p: p.concurrency)]
    passing = [v.concurrency for v in verdicts if v.passes]
    max_c = max(passing, default=0)
    warnings = [
        f"{level}={v.concurrency} cannot be judged ({v.reason}), so it does not pass"
        for v in verdicts
        if v.reason.startswith("no ") and ";" not in v.reason
    ]
    tested = [v.concurrency for v in verdicts]
    above = [c for c in tested if c > max_c]
    if max_c and above and min(above) > 2 * max_c:
        warnings.append(
            f"{best} is a lower bound: no level between {level}={max_c} and "
            f"{level}={min(above)} was tested"
        )
    failed_below = [v.concurrency for v in verdicts if not v.passes and v.concurrency < max_c]
    if failed_below:
        warnings.append(
            f"{level}={max_c} passes although lower level(s) "
            f"{level}={','.join(map(str, failed_below))} fail"
        )
    if max_c and not above:
        warnings.append(f"{best} >= {max_c}: no higher level was tested")
    if not verdicts:
        warnings.append("no levels to judge")
    elif max_c == 0:
        warnings.append("no level meets the targets")
    return Capacity(
        max_c=max_c,
        chat_users=users(max_c, targets.chat_factor),
        agentic_users=users(max_c, targets.agentic_factor),
        levels=verdicts,
        warnings=warnings,
    )


@dataclass(slots=True, frozen=True)
class RateCapacity:
    """The sustainable request rate: the highest tested rate meeting the targets."""

    max_rate: float  # 0.0: no rate passes
    levels: list[tuple[float, LevelVerdict]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def rate_capacity(stats: Iterable[LevelStats], targets: Targets | None = None) -> RateCapacity:
    """Judge rate levels by the Max C rules; users are left out, as they need a concurrency."""
    targets = targets or Targets()
    rated = sorted(((s.rate, s) for s in stats if s.rate is not None), key=lambda rs: rs[0])
    verdicts = [(rate, judge(point(s, targets.statistic, targets.ttft_of), targets))
                for rate, s in rated]
    max_rate = max((r for r, v in verdicts if v.passes), default=0.0)
    warnings = [f"R={rate:g} req/s: {s.lag_warning}" for rate, s in rated if s.lag_warning]
    failed_below = [r for r, v in verdicts if not v.passes and r < max_rate]
    if failed_below:
        warnings.append(f"R={max_rate:g} req/s passes although lower rate(s) "
                        f"{','.join(f'{r:g}' for r in failed_below)} fail")
    if not verdicts:
        warnings.append("no rate levels to judge")
    elif max_rate == 0.0:
        warnings.append("no rate meets the targets")
    elif max_rate == verdicts[-1][0]:
        warnings.append(f"sustainable rate >= {max_rate:g} req/s: no higher rate was tested")
    return RateCapacity(max_rate, verdicts, warnings)
