"""The exact Max C search: which concurrency to probe next, as a pure planner.

The sweep's levels (1, 2, 4, 8 ...) only bracket Max C; the search probes more levels until the
highest passing and the lowest failing concurrency are adjacent integers, so "Max C >= 2" can
become "Max C 3" (a users search stops within USERS_RESOLUTION of that). The runner measures
each probe as a full level and feeds the verdict back:

    probes = []
    while (p := plan(swept, probes, cap).next_probe) is not None:
        probes.append((p, passes(p)))

Pass/fail comes from `harness.results.metrics.judge` (see `outcomes`), so the search refines
exactly the number `metrics.capacity` reports. Bracket rule, consistent with `capacity`, which
takes the highest passing level even above a failure (and warns): the lower end is the highest
passing level, the upper end the lowest failing level above it. A failure below that pass does
not stop the search; `plan` notes it and `capacity` warns about it.

A users level that is not in steady state (harness.results.users) has no verdict: it is
`unsettled`, left out of the bracket, and never probed again by the planner (the runner measures
it once more first); a bisection whose midpoint is unsettled probes the nearest level that is
not, and stops when none is left between the bracket's ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.results.metrics import LevelPoint, Targets, judge

DEFAULT_MAX_CONCURRENCY = 256
# A users search stops bisecting once its bracket is within this share of the highest passing
# count: a users level's verdict moves by more than that from one pass to the next (the levels
# within noise of the targets span a quarter or more of Max users on the mock server), and its
# last probes are its costliest levels.
USERS_RESOLUTION = 1 / 8


@dataclass(slots=True, frozen=True)
class SearchPlan:
    """Where the search stands: the next level to run, or the answer and how it was found."""

    next_probe: int | None  # None: nothing left to probe
    max_c: int  # the highest passing level so far (0: none passes)
    exact: bool  # adjacent integers known: max_c passes and max_c + 1 fails
    # (neither exact nor lower_bound: stopped within the resolution, see `how`)
    lower_bound: bool  # every level up to the cap passed, so Max C >= max_c
    how: str  # one human sentence, e.g. "bisection: 4 passed, 8 failed; probed 6 (fail), 5 (pass)"
    unsettled: tuple[int, ...] = ()  # measured, but not in steady state: no verdict


def outcomes(points: Iterable[LevelPoint], targets: Targets | None = None) -> dict[int, bool]:
    """Pass/fail per level by the capacity rules, so the search and `capacity` never disagree."""
    targets = targets or Targets()
    return {p.concurrency: judge(p, targets).passes for p in points}


def _merge(swept: Mapping[int, bool], probes: Sequence[tuple[int, bool]]) -> dict[int, bool]:
    if not swept:
        raise ValueError("the search needs at least one measured level to start from")
    known = dict(swept)
    for c, ok in probes:
        if c in known and known[c] != ok:
            raise ValueError(f"C={c} is recorded both as passing and as failing")
        known[c] = ok
    if min(known) < 1:
        raise ValueError(f"concurrency levels must be >= 1, got {min(known)}")
    return known


def _fmt(c: int, ok: bool) -> str:
    return f"{c} ({'pass' if ok else 'fail'})"


def _how(
    swept: Mapping[int, bool], probes: Sequence[tuple[int, bool]], known: dict[int, bool],
    max_c: int, cap: int, exact: bool, lower_bound: bool, resolved: int | None,
    unsettled: Collection[int] = (),
) -> str:
    """Describe the search: where the sweep left it, the probes in order, and any oddity."""
    passing = [c for c, ok in swept.items() if ok]
    if passing and all(swept.values()):
        start = (f"doubling: every level up to {max(swept)} passed" if probes
                 else f"levels: every level up to {max(swept)} passed")
    elif passing:
        lo = max(passing)
        above = [c for c, ok in swept.items() if not ok and c > lo]
        start = (f"bisection: {lo} passed, {min(above)} failed" if above
                 else f"levels: {lo} passed")
    elif min(swept) == 1:
        return "levels: 1 failed, so no concurrency meets the targets"
    else:
        start = f"bisection below the lowest level: {min(swept)} failed"
    parts = [start]
    if probes:
        parts.append("probed " + ", ".join(_fmt(c, ok) for c, ok in probes))
    elif exact:
        parts.append("adjacent levels, nothing to probe")
    if exact and max_c == 0:
        parts.append("1 failed, so no concurrency meets the targets")
    elif resolved is not None:
        parts.append(f"stopped with {max_c} passing and {resolved} failing, within the "
                     "search's resolution")
    elif lower_bound:
        parts.append(f"the cap C={cap} passed, so Max C >= {cap}")
    below = sorted(c for c, ok in known.items() if not ok and c < max_c)
    if below:
        parts.append(f"C={','.join(map(str, below))} failed below the passing C={max_c} "
                     "(not monotonic)")
    if unsettled:
        parts.append(f"U={','.join(map(str, sorted(unsettled)))} not in steady state, so "
                     "left out")
    return "; ".join(parts)


def _nearest(target: int, low: int, high: int, unsettled: Collection[int]) -> int | None:
    """The level in [low, high] nearest `target` (the lower on a tie) that is not unsettled."""
    for step in range(max(target - low, high - target) + 1):
        for c in (target - step, target + step):
            if low <= c <= high and c not in unsettled:
                return c
    return None


def plan(
    swept: Mapping[int, bool],
    probes: Sequence[tuple[int, bool]] = (),
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    resolution: float = 0.0,
    unsettled: Collection[int] = (),
) -> SearchPlan:
    """The next level to probe given the sweep's verdicts and the probes so far (in order),
    and the levels measured without a verdict (`unsettled`, never in `swept` or `probes`).

    Bisects (midpoint, rounded down) between the highest passing level and the lowest failing
    level above it, until they are adjacent or (`resolution` > 0) at most
    max(1, resolution x the passing level) apart; when nothing fails, doubles the highest
    level, capped at `max_concurrency` (a passing cap ends the search with a lower bound);
    when nothing passes, bisects down towards 1 (C=1 failing means Max C 0).
    """
    known = _merge(swept, probes)
    if max_concurrency < 1:
        raise ValueError(f"the maximum concurrency must be >= 1, got {max_concurrency}")
    if max_concurrency < max(known):
        raise ValueError(f"the maximum concurrency {max_concurrency} is below the highest "
                         f"level tested, C={max(known)}")
    max_c = max((c for c, ok in known.items() if ok), default=0)
    failing_above = [c for c, ok in known.items() if not ok and c > max_c]
    if failing_above:
        hi = min(failing_above)
        step = max(1, int(resolution * max_c))
        nxt = (_nearest((max_c + hi) // 2, max_c + 1, hi - 1, unsettled)
               if hi - max_c > step else None)
    else:  # nothing fails above the highest pass: double upwards, within the cap
        nxt = (_nearest(min(2 * max_c, max_concurrency), max_c + 1, max_concurrency, unsettled)
               if max_c < max_concurrency else None)
    exact = nxt is None and bool(failing_above) and min(failing_above) == max_c + 1
    resolved = min(failing_above) if nxt is None and failing_above and not exact else None
    lower_bound = nxt is None and not failing_above
    return SearchPlan(
        next_probe=nxt,
        max_c=max_c,
        exact=exact,
        lower_bound=lower_bound,
        how=_how(swept, probes, known, max_c, max_concurrency, exact, lower_bound,
                 resolved, unsettled),
        unsettled=tuple(sorted(unsettled)),
    )


def search(
    levels: Iterable[int],
    passes: Callable[[int], bool],
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    resolution: float = 0.0,
) -> tuple[SearchPlan, list[tuple[int, bool]]]:
    """Run the sweep's levels then the probes against a pass rule; for tests and simulations."""
    swept = {c: passes(c) for c in levels}
    probes: list[tuple[int, bool]] = []
    while (p := plan(swept, probes, max_concurrency, resolution)).next_probe is not None:
        probes.append((p.next_probe, passes(p.next_probe)))
    return p, probes


# A timed trace replay's search stops once its bracket's ends are within this ratio of each
# other (a probe replays the whole trace window, so each is a level's worth of time), and
# neither doubles past MAX_SPEEDUP nor halves below MIN_SPEEDUP.
SPEEDUP_RESOLUTION = 1 / 8
MAX_SPEEDUP = 1000.0
MIN_SPEEDUP = 1 / 64


@dataclass(slots=True, frozen=True)
class SpeedupPlan:
    """Where a speedup search stands: the next speedup to replay at, or the highest that
    passed (`sustained`, 0: none) and how it was found."""

    next_probe: float | None
    sustained: float
    failed_above: float | None  # the lowest failing speedup above it
    how: str


def _between(lo: float, hi: float) -> float:
    """The geometric midpoint of lo and hi, to 3 significant digits, strictly inside them."""
    mid = math.sqrt(lo * hi)
    rounded = float(f"{mid:.3g}")
    return rounded if lo < rounded < hi else mid


def plan_speedup(verdicts: Mapping[float, bool], order: Sequence[float]) -> SpeedupPlan:
    """The next speedup given every replayed level's verdict (`order`: the speedups in the
    order they ran, for `how`). Doubles above the highest pass while nothing fails there,
    halves below the lowest level while nothing passes, and bisects (geometrically) between
    the highest pass and the lowest failure above it until they are within
    SPEEDUP_RESOLUTION of each other."""
    if not verdicts:
        raise ValueError("the search needs at least one replayed speedup to start from")
    ran = ", ".join(f"{x:g}x ({'pass' if verdicts[x] else 'fail'})" for x in order
                    if x in verdicts)
    passing = [x for x, ok in verdicts.items() if ok]
    if not passing:
        low = min(verdicts)
        nxt = low / 2 if low / 2 >= MIN_SPEEDUP else None
        how = (f"replayed {ran}" if nxt is not None else
               f"replayed {ran}; no speedup down to {low:g}x meets the targets")
        return SpeedupPlan(nxt, 0.0, low, how)
    lo = max(passing)
    above = [x for x, ok in verdicts.items() if not ok and x > lo]
    if not above:
        nxt = min(2 * lo, MAX_SPEEDUP) if lo < MAX_SPEEDUP else None
        how = f"replayed {ran}" + ("" if nxt else f"; the cap {MAX_SPEEDUP:g}x passed")
        return SpeedupPlan(nxt, lo, None, how)
    hi = min(above)
    nxt = _between(lo, hi) if hi / lo > 1 + SPEEDUP_RESOLUTION else None
    below = sorted(x for x, ok in verdicts.items() if not ok and x < lo)
    how = f"replayed {ran}" + ("" if nxt else f"; {lo:g}x passed and {hi:g}x failed")
    if below:
        how += f"; {','.join(f'{x:g}x' for x in below)} failed below it (not monotonic)"
    return SpeedupPlan(nxt, lo, hi, how)
