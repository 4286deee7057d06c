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
"""

from __future__ import annotations

import collections
import random

from harness.config import ThinkModel

MEMORY_CYCLES = 1  # R is averaged over this many of the level's cycles (U requests each)
MIN_MEMORY = 24  # ... and over at least this many requests, so no few weigh much
STORING_MEMORY_CYCLES = 2  # ... and over this many once the level stores


class LevelThink:
    """Z of one level: `observe` every request it ends, `draw` a think around the current Z,
    `restart` once every user is in the level; `mean_drawn_around_s` is the level's Z as stored."""

    def __init__(self, model: ThinkModel, users: int, typical_latency_s: float) -> None:
        self.model = model
        self.users = users
        self.z_s = model.mean_for(typical_latency_s)
        self._window: collections.deque[float] = collections.deque(
            maxlen=max(MEMORY_CYCLES * users, MIN_MEMORY))
        self._sum = 0.0
        self._drawn_around: list[float] = []

    def restart(self) -> None:
        """Every user has begun: R is measured afresh, under the level's whole load."""
        self._window.clear()
        self._sum = 0.0

    def hold(self) -> None:
        """The level starts storing: from here R is the moving average over the last
        STORING_MEMORY_CYCLES cycles, so Z follows the level's swings half as closely."""
        self._window = collections.deque(
            self._window, maxlen=max(STORING_MEMORY_CYCLES * self.users, 2 * MIN_MEMORY))

    def observe(self, latency_s: float) -> None:
        """A request of the level (any user's, stored or not) ended after `latency_s`."""
        if self.model.fixed_s is not None:
            return
        if len(self._window) == self._window.maxlen:
            self._sum -= self._window[0]
        self._window.append(latency_s)
        self._sum += latency_s
        self.z_s = self.model.mean_for(self._sum / len(self._window))

    def draw(self, rng: random.Random, stored: bool = False) -> float:
        """A think around the current Z; a stored one counts towards the level's Z."""
        if stored:
            self._drawn_around.append(self.z_s)
        return self.model.draw(rng, self.z_s)

    @property
    def mean_drawn_around_s(self) -> float | None:
        """The mean of the Z the stored thinks were drawn around (None: none stored)."""
        drawn = self._drawn_around
        return sum(drawn) / len(drawn) if drawn else None
