"""Simulated users (`--mode users`): the duty cycle they ran at, whether a level reached
steady state, and measured users set beside the published factor estimates. Pure: no I/O.

A user loops: send a request, wait for it to end, think, send the next. Its duty cycle is the
share of its time with a request running; every user of a level thinks around one mean Z,
(1 - d) / d times the level's mean request (harness.run.think), so chat (d = 0.25) thinks ~3x
the mean request and agentic (d ~ 0.67) ~0.5x, whatever each user's own last request took.
Thinks are drawn from a generator seeded by (seed, level, user, repeat).

`steady_state` checks a level against its own sampling noise: the measured duty cycle against
the target, and the response-time law U = X (R + Z) over the window in which every user was
storing. A level off by more than `NOISE_Z` standard errors is flagged, and so is one whose
lead-in reached its cap before its users were paced at the target duty (harness.run.think).

The published explorer estimates users as Max C x 4 (chat) and x 1.5 (agentic), i.e. Max C
divided by the duty cycle; the summary sets the measured highest passing user count beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.config import PROFILE_DUTY, RunConfig, think_cv
from harness.records import RequestRecord
from harness.results.confidence import Interval
from harness.results.metrics import Targets, level_key, users
from harness.results.run_row import RunRow


def duty_cycle(records: Iterable[RequestRecord]) -> float | None:
    """Measured share of the users' time with a request running: over every request a think
    followed (a user's last request of a level has none), busy / (busy + think)."""
    busy = think = 0.0
    for r in records:
        if r.think_ms is not None and r.latency_ms is not None:
            busy += r.latency_ms
            think += r.think_ms
    return busy / (busy + think) if busy + think > 0 else None


NOISE_Z = 3.0  # a level is flagged past this many of its own standard errors
DUTY_SLACK = 0.005  # ... and a duty cycle only when it is off by more than half a point


@dataclass(slots=True, frozen=True)
class SteadyState:
    """What says a users level ran in steady state; `flag` names why not (None: it did)."""

    duty_cycle: float | None
    think_mean_ms: float | None  # the thinks its users drew (their mean)
    law_error_pct: float | None  # U / (X (R + Z)) - 1, in %
    flag: str | None
    in_flight_mean: float | None = None  # requests in flight over the window, time-weighted
    in_flight_sd: float | None = None  # ... and their spread: how bursty the users were


BLOCKS = 8  # the stored window is cut into this many time blocks for the law's noise


@dataclass(slots=True, frozen=True)
class LeadIn:
    """A users pass's unstored requests before its first stored one, and whether its users'
    pacing had settled at the target duty by then (None: stored before this was checked)."""

    requests: int | None
    settled: bool | None
    paced_duty: float | None  # the duty its last cycle of lead-ins was paced at

    def cycles(self, users: int) -> float | None:
        """Lead-in requests per user."""
        return None if self.requests is None else self.requests / max(users, 1)


def worst_lead_in(passes: Sequence[LeadIn]) -> LeadIn:
    """One level's lead-in over its passes: the first that did not settle, else the longest."""
    unsettled = [p for p in passes if p.settled is False]
    return unsettled[0] if unsettled else max(passes, key=lambda p: p.requests or 0)


def steady_state(records: Sequence[RequestRecord], users: int,
                 target_duty: float | None, think_cv: float,
                 lead_in: LeadIn | None = None) -> SteadyState:
    """Per pass (repeat) of a users level, the worst kept: `_steady_pass`; a lead-in that
    did not settle flags the level first."""
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_repeat.setdefault(r.repeat, []).append(r)
    checks = [_steady_pass(rs, users, target_duty, think_cv)
              for _, rs in sorted(by_repeat.items())]
    if not checks:
        return SteadyState(None, None, None, "no request was stored")
    think = [r.think_ms for r in records if r.think_ms is not None]
    laws = [c for c in checks if c.law_error_pct is not None]
    worst = max(laws, key=lambda c: abs(c.law_error_pct or 0.0), default=None)
    spread = [(c.in_flight_mean, c.in_flight_sd) for c in checks
              if c.in_flight_mean is not None and c.in_flight_sd is not None]
    flag = next((c.flag for c in checks if c.flag), None)
    if lead_in is not None and lead_in.settled is False and target_duty is not None:
        paced = "" if lead_in.paced_duty is None else f" (paced at {lead_in.paced_duty:.2f})"
        flag = (f"its users were not paced at duty {target_duty:.2f}{paced} after "
                f"{lead_in.cycles(users):.1f} lead-in requests per user, the cap")
    return SteadyState(
        duty_cycle(records),
        sum(think) / len(think) if think else None,
        worst.law_error_pct if worst else None,
        flag,
        sum(m for m, _ in spread) / len(spread) if spread else None,
        math.sqrt(sum(sd ** 2 for _, sd in spread) / len(spread)) if spread else None)


def _steady_pass(records: Sequence[RequestRecord], users: int,
                 target_duty: float | None, think_cv: float) -> SteadyState:
    """One pass. Its stored window runs from the first stored send to the last, and every
    request sent in it is stored (lead-ins stop before it, load-keeping starts after it). Over
    it: the duty cycle busy / (busy + think); the response-time law's error U / (X (R + Z)) - 1
    with X the requests sent per second, R and Z their means; the requests in flight.

    The duty's noise is what its n requests leave unknown in a level steady at the target d:
    the thinks' random draws and the requests' own spread, d (1 - d) sqrt(cv_Z^2 + cv_R^2) /
    sqrt n (cv_Z: the think distribution's, harness.config.think_cv; cv_R: the stored
    latencies'). Nothing a level does can make it steadier than that, so a level paced off its
    target by load that swings is flagged, not excused by its own swings (batch means over
    the window's blocks would widen its noise as it swings). The law's noise is by batch means:
    the window is cut into BLOCKS equal times, and the standard error is that of the blocks'
    ratio estimates (sqrt(sum (a_b - q t_b)^2 / (B (B - 1))) / mean t_b for a ratio
    q = sum a / sum t). Flagged: a window of fewer than 2 x U requests (too few rounds to
    check), a law error more than NOISE_Z standard errors from 0, or a duty more than NOISE_Z
    standard errors (and DUTY_SLACK) from the target."""
    done = sorted((r.sent_at, r.latency_ms / 1000, r.think_ms / 1000) for r in records
                  if r.latency_ms is not None and r.think_ms is not None)
    duty = duty_cycle(records)
    if len(done) < 2 * max(users, 1) or done[-1][0] <= done[0][0]:
        return SteadyState(duty, None, None,
                           "too short to check: fewer than two requests per user stored "
                           "(raise --rounds)")
    start, end = done[0][0], done[-1][0]
    window = [d for d in done if d[0] < end]  # sends in [start, end): X counts them
    length = (end - start) / BLOCKS
    blocks: list[list[tuple[float, float, float]]] = [[] for _ in range(BLOCKS)]
    for d in window:
        blocks[min(int((d[0] - start) / length), BLOCKS - 1)].append(d)
    cycle = [sum(rs + zs for _, rs, zs in b) for b in blocks]
    duty_w = sum(rs for _, rs, _ in window) / sum(cycle)
    duty_se = None if target_duty is None else (
        target_duty * (1 - target_duty) * math.hypot(think_cv, _cv([rs for _, rs, _ in window]))
        / math.sqrt(len(window)))
    # U / (X m) = U * length / sum(cycles) per block: users' time over the time they used
    law = (users * (end - start) / sum(cycle) - 1) * 100
    law_se = _ratio_se([users * length] * BLOCKS, cycle, users * (end - start) / sum(cycle))
    law_se = None if law_se is None else law_se * 100
    busy_mean, busy_sd = in_flight([(sent, sent + rs) for sent, rs, _ in done], start, end)
    flag = None
    if law_se is not None and abs(law) > NOISE_Z * law_se:
        flag = (f"the response-time law is {law:+.0f}% off, more than {NOISE_Z:g} x its "
                f"noise ({law_se:.0f}%)")
    elif target_duty is not None and duty_se is not None and (
            abs(duty_w - target_duty) > NOISE_Z * duty_se + DUTY_SLACK):
        flag = (f"duty cycle {duty_w:.2f} against {target_duty:.2f}, more than {NOISE_Z:g} x "
                f"its noise ({duty_se:.3f})")
    return SteadyState(duty, None, law, flag, busy_mean, busy_sd)


def _cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sd / mean) of a sample (0 for fewer than two)."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    if n < 2 or mean <= 0:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / mean


def _ratio_se(numerators: Sequence[float], denominators: Sequence[float],
              ratio: float | None = None) -> float | None:
    """The standard error of sum(a) / sum(t) from per-block sums (a ratio estimator's)."""
    n = len(numerators)
    total = sum(denominators)
    if n < 2 or total <= 0:
        return None
    q = sum(numerators) / total if ratio is None else ratio
    residual = sum((a - q * t) ** 2 for a, t in zip(numerators, denominators, strict=True))
    return math.sqrt(residual / (n * (n - 1))) / (total / n)


def in_flight(spans: Sequence[tuple[float, float]], start: float, end: float
              ) -> tuple[float, float]:
    """Time-weighted mean and standard deviation of how many (begin, end) spans are open
    within [start, end): in a users level's window every request in flight is a stored one
    (lead-ins end before their user's first stored send, load-keeping begins after the last),
    so this is the load the server saw, exactly."""
    events = sorted([(max(b, start), 1) for b, e in spans if e > start and b < end]
                    + [(min(e, end), -1) for b, e in spans if e > start and b < end])
    open_now, last, area, square = 0, start, 0.0, 0.0
    for t, step in events:
        area += open_now * (t - last)
        square += open_now ** 2 * (t - last)
        open_now, last = open_now + step, t
    length = end - start
    mean = area / length
    return mean, math.sqrt(max(square / length - mean ** 2, 0.0))


def within_noise(tps: Interval | None, ttft: Interval | None, targets: Targets) -> bool:
    """A level whose verdict its own noise could turn: its mean TPS or mean TTFT interval (or
    range over repeats) holds the target. A single pass with too few clusters has no interval
    and is not called uncertain (nothing says it is)."""
    def holds(iv: Interval | None, target: float) -> bool:
        if iv is None or (iv.method == "range" and iv.repeats < 2):
            return False
        return iv.low <= target <= iv.high
    return holds(tps, targets.tps_min) or holds(ttft, targets.ttft_max_ms)


@dataclass(slots=True, frozen=True)
class LevelCheck:
    """One users level: its steady-state check and whether its verdict lies within noise."""

    steady: SteadyState
    within_noise: bool


def level_checks(records: Sequence[RequestRecord], config: RunConfig | None, targets: Targets,
                 tps: Mapping[int, Interval], ttft: Mapping[int, Interval],
                 lead_ins: Mapping[int, LeadIn] | None = None) -> dict[int, LevelCheck]:
    """Per users level (U = concurrency): `steady_state` against the run's `target_duty` and
    think distribution, and `within_noise`, given the levels' mean TPS and TTFT intervals
    (harness.results.report.level_intervals), and each level's stored lead-in."""
    duty = target_duty(config)
    cv = think_cv(config.think_dist) if config else 0.0  # no config: no duty to check
    by_level: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.rate is None:
            by_level.setdefault(r.concurrency, []).append(r)
    return {c: LevelCheck(steady_state(rs, c, duty, cv, (lead_ins or {}).get(c)),
                          within_noise(tps.get(c), ttft.get(c), targets))
            for c, rs in sorted(by_level.items())}


def target_duty(config: RunConfig | None) -> float | None:
    """The duty cycle a users run aims at: its --duty-cycle, else its profile's (None with a
    fixed --think-time, whose duty is whatever the server gives, or a run stored without its
    config)."""
    if config is None or config.think_s is not None:
        return None
    return config.duty_cycle or PROFILE_DUTY.get(config.profile or "chat")


@dataclass(slots=True, frozen=True)
class UsersEstimate:
    """Measured max users beside the factor estimate from a closed sweep's Max C."""

    max_users: int
    duty_cycle: float | None  # measured at the max-users level (None: not measured)
    max_c: int | None  # of the paired closed run (None: none to compare with)
    factor: float | None  # users per Max C (None: no factor known, e.g. no duty measured)
    how: str = ""  # how the factor reads: "x 4", "/ target duty 0.30"

    @property
    def estimated_users(self) -> int | None:
        """Max C x factor, floored as the published explorer does (metrics.users)."""
        if self.max_c is None or self.factor is None:
            return None
        return users(self.max_c, self.factor)

    @property
    def predicted_users(self) -> float | None:
        """Max C over the measured duty cycle: what the duty cycle alone predicts."""
        if self.max_c is None or not self.duty_cycle:
            return None
        return self.max_c / self.duty_cycle

    @property
    def measured_factor(self) -> float | None:
        """Measured users per Max C: the factor this hardware really gives."""
        return None if not self.max_c else self.max_users / self.max_c


def estimate(max_users: int, duty: float | None, max_c: int | None, profile: str | None,
             duty_target: float | None, targets: Targets) -> UsersEstimate:
    """A users run's estimate, the one rule the summary and the explorer share: the factor
    of `estimate_factor` with the targets' chat and agentic factors."""
    factor, how = estimate_factor(profile, duty_target, duty, targets.chat_factor,
                                  targets.agentic_factor)
    return UsersEstimate(max_users, duty, max_c, factor, how)


def estimate_factor(profile: str | None, duty_target: float | None,
                    duty_measured: float | None, chat_factor: float,
                    agentic_factor: float) -> tuple[float | None, str]:
    """Users per Max C the estimate multiplies by, and how it reads: the published factor of
    the profile (x 4 chat, x 1.5 agentic), else Max C over the target duty cycle, else over
    the measured one (a fixed think time has no published factor); (None, "") when none."""
    if profile in PROFILE_DUTY:
        factor = chat_factor if profile == "chat" else agentic_factor
        return factor, f"x {factor:g}"
    for name, d in (("target duty", duty_target), ("measured duty", duty_measured)):
        if d is not None and not math.isnan(d) and d > 0:
            return 1 / float(d), f"/ {name} {float(d):.2f}"
    return None, ""


def paired_concurrency_run(runs: Sequence[RunRow], users_run: RunRow) -> RunRow | None:
    """The newest complete run keyed by concurrency C of the same setup (device, engine, model,
    placement, prompt and output tokens) as a users run: where its Max C comes from."""
    keys = ("device", "engine", "model", "table_placement", "input_tokens", "output_tokens")
    matches = [r for r in runs
               if level_key(r.mode) == "C" and r.status == "complete"
               and all(getattr(r, k) == getattr(users_run, k) for k in keys)]
    return max(matches, key=lambda r: (r.started_at, r.run_id), default=None)
