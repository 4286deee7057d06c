"""The mean think time Z of one users level, the same for all its users at any moment.

People read and type for as long as the text takes, whatever the server did, so a user's think
does not follow how long its own last request took (the response-time law U = X (R + Z) assumes
as much). Every user of a level thinks around one mean Z. With `--think-time`, Z is that. With
a duty cycle d (a profile), Z = (1 - d) / d x R, where R is the level's mean request over every
user's requests. During the lead-in R is a running mean from the moment every user is in the
level (the new ones have sent their first: the load is the level's only from then), which turns
into a moving average over the last max(U, 24) requests, about one cycle of every user, so Z
finds the level's load within a cycle. From the first stored request on (`hold`), R is a moving
average over the last two cycles (max(2U, 48) requests), so Z follows the level's swings half
as closely: a Z that kept following the last cycle made every think follow the level's recent
latency (measured: r = 0.14-0.17 between a think and the latency before it, over 1,008 requests
on a server whose token rate is shared by the streams; over two cycles, 0.05), while a Z that
stops following them (the mean of every stored request) lands the duty cycle off d on a server
whose first token waits for every request in flight, where the duty follows Z steeply
(0.28-0.40 for 0.25; two cycles, 0.25-0.31).

Z follows the load a cycle late, so a level whose latency climbs as its users join (or falls,
after a heavier level) is paced off its duty cycle until Z catches up. `Pacing` says when it
has: over the last cycle of lead-ins, the duty the users were paced at (each request's latency
over itself plus the Z its think was drawn around, free of the thinks' random draws) is within
`pace_tolerance` of the target. A Z within 10 % of (1 - d) / d times the load's mean request
puts the duty within 0.1 d (1 - d) of d (d duty / d ln Z = -d (1 - d)): 0.019 for chat, 0.022
for agentic.
"""

from __future__ import annotations

import collections
import random

from harness.config import ThinkModel

MEMORY_CYCLES = 1  # R is averaged over this many of the level's cycles (U requests each)
MIN_MEMORY = 24  # ... and over at least this many requests, so no few weigh much
STORING_MEMORY_CYCLES = 2  # ... and over this many once the level stores
PACE_TOLERANCE = 0.1  # a lead-in has settled once Z is within this share of its target


class LevelThink:
    """Z of one level: `observe` every request it ends, `draw` a think around the current Z,
    `restart` once every user is in the level; `mean_drawn_around_s` is the level's Z as stored."""

    def __init__(self, model: ThinkModel, users: int, typical_latency_s: float) -> None:
        self.model = model
        self.users = users
        self._base_s = model.mean_for(typical_latency_s)
        self._window: collections.deque[float] = collections.deque(
            maxlen=max(MEMORY_CYCLES * users, MIN_MEMORY))
        self._sum = 0.0
        self._busy_s = self._paced_s = 0.0  # since the last restart or hold
        self._drawn_around: list[float] = []

    @property
    def z_s(self) -> float:
        """The mean the think after the request just observed is drawn around: (1 - d) / d
        times the moving average R, plus what the thinks since the last restart or hold
        (this one drawn at that) fall short of (1 - d) / d times their requests, repaid over
        one memory of requests (within half to twice the moving-average Z)."""
        if self.model.duty_cycle is None or not self._busy_s:
            return self._base_s
        owed = self.model.mean_for(self._busy_s) - self._paced_s - self._base_s
        memory = self._window.maxlen or 1  # the window always has one
        return min(max(self._base_s + owed / memory, self._base_s / 2),
                   2 * self._base_s)

    def restart(self) -> None:
        """Every user has begun: R is measured afresh, under the level's whole load."""
        self._window.clear()
        self._sum = 0.0
        self._busy_s = self._paced_s = 0.0

    def hold(self) -> None:
        """The level starts storing: from here R is the moving average over the last
        STORING_MEMORY_CYCLES cycles, so Z follows the level's swings half as closely, and
        what the thinks owe is counted afresh, over the stored requests alone."""
        self._window = collections.deque(
            self._window, maxlen=max(STORING_MEMORY_CYCLES * self.users, 2 * MIN_MEMORY))
        self._busy_s = self._paced_s = 0.0

    def observe(self, latency_s: float) -> None:
        """A request of the level (any user's, stored or not) ended after `latency_s`."""
        if self.model.fixed_s is not None:
            return
        if len(self._window) == self._window.maxlen:
            self._sum -= self._window[0]
        self._window.append(latency_s)
        self._sum += latency_s
        self._busy_s += latency_s
        self._base_s = self.model.mean_for(self._sum / len(self._window))

    def draw(self, rng: random.Random, stored: bool = False) -> float:
        """A think around the current Z; a stored one counts towards the level's Z."""
        z_s = self.z_s
        if stored:
            self._drawn_around.append(z_s)
        self._paced_s += z_s
        return self.model.draw(rng, z_s)

    @property
    def mean_drawn_around_s(self) -> float | None:
        """The mean of the Z the stored thinks were drawn around (None: none stored)."""
        drawn = self._drawn_around
        return sum(drawn) / len(drawn) if drawn else None


def pace_tolerance(duty: float) -> float:
    """How far from the target duty a settled lead-in's paced duty may be: the duty a Z
    PACE_TOLERANCE off its target gives."""
    return PACE_TOLERANCE * duty * (1 - duty)


class Pacing:
    """The duty a level's users were paced at over its last `window` settled lead-ins: each
    request's latency over itself plus the Z of the think that followed it."""

    def __init__(self, target: float | None, window: int) -> None:
        self.target = target
        self._pairs: collections.deque[tuple[float, float]] = collections.deque(maxlen=window)
        self._busy = self._cycle = 0.0

    def add(self, latency_s: float, z_s: float) -> None:
        if len(self._pairs) == self._pairs.maxlen:
            old_latency, old_z = self._pairs[0]
            self._busy -= old_latency
            self._cycle -= old_latency + old_z
        self._pairs.append((latency_s, z_s))
        self._busy += latency_s
        self._cycle += latency_s + z_s

    @property
    def duty(self) -> float | None:
        """The paced duty over the window (None: nothing in it yet)."""
        return self._busy / self._cycle if self._cycle > 0 else None

    @property
    def settled(self) -> bool:
        """A whole window paced within tolerance of the target (a fixed think time has no
        target, and nothing to settle)."""
        if self.target is None:
            return True
        duty = self.duty
        return (len(self._pairs) == self._pairs.maxlen and duty is not None
                and abs(duty - self.target) <= pace_tolerance(self.target))
