"""The one-line verdicts a buyer acts on: Max C, Max users or the sustainable rate, and how far
each can be trusted. The explorer shows them; pure functions over `metrics.capacity`."""

from __future__ import annotations

from collections.abc import Collection

from harness.results.metrics import Capacity, RateCapacity

USERS_NEED_C = ("users are counted from Max C, a concurrency: a rate run reports the "
                "sustainable request rate instead (run --mode closed for users)")
TRACE_USERS_NEED_C = ("users are counted from Max C, a concurrency: a timed trace replay "
                      "reports the speedup it sustains instead (replay it with "
                      "--trace-schedule closed for Max C and users)")


def _bound(cap: Capacity, letter: str = "C") -> str:
    """How far the highest passing level can be trusted: exact, or a lower bound and why, and
    any failing level below it (`letter`: C for concurrency, U for users)."""
    above = [v.concurrency for v in cap.levels if v.concurrency > cap.max_c]
    if not above:
        how = "lower bound: no higher level tested"
    elif min(above) == cap.max_c + 1:
        how = "exact"
    else:
        gap = range(cap.max_c + 1, min(above))
        how = f"lower bound: {letter}={gap[0]}{f'-{gap[-1]}' if len(gap) > 1 else ''} not tested"
    below = [str(v.concurrency) for v in cap.levels
             if not v.passes and v.concurrency < cap.max_c]
    return how + (f"; {letter}={','.join(below)} fails below it" if below else "")


def verdict(cap: Capacity, probes: Collection[int] = ()) -> str:
    """One line a buyer can act on: Max C, how far it can be trusted (the bounds that
    `capacity` warns about) and the users it serves."""
    if not cap.levels:
        return "no levels to judge"
    searched = ", found by --search" if probes else ""
    if cap.max_c == 0:
        return f"Max C 0 (no level meets the targets{searched}): no users"
    return (f"Max C {cap.max_c} ({_bound(cap)}{searched}): {cap.chat_users} chat / "
            f"{cap.agentic_users} agentic users")


def users_verdict(cap: Capacity, duty: float | None) -> str:
    """A users run's line: the highest passing user count, how far it can be trusted and the
    duty cycle measured there."""
    if not cap.levels:
        return "no levels to judge"
    if cap.max_c == 0:
        return "Max users 0 (no level meets the targets)"
    at = "" if duty is None else f" at duty cycle {duty:.2f}"
    return f"Max users {cap.max_c} ({_bound(cap, 'U')}){at}"


def rate_verdict(cap: RateCapacity) -> str:
    """One line: 'sustainable 2 req/s (4 req/s fails)', with how far it can be trusted."""
    if not cap.levels:
        return "no rate levels to judge"
    if cap.max_rate == 0.0:
        return "sustainable 0 req/s (no rate meets the targets)"
    above = [r for r, _ in cap.levels if r > cap.max_rate]
    how = (f"{min(above):g} req/s fails" if above
           else "lower bound: no higher rate tested")
    below = [f"{r:g}" for r, v in cap.levels if not v.passes and r < cap.max_rate]
    odd = f"; {','.join(below)} req/s fails below it" if below else ""
    return f"sustainable {cap.max_rate:g} req/s ({how}{odd})"
