"""Mode `users`: a level is U simulated users, each sends a request, waits for it, thinks
around the level's one mean think (harness.run.think), and sends again.

A run's first users arrive spread over one cycle; the users of one level carry on into the
next, which stops the ones it does not need or adds new ones arriving over a cycle, so a level
starts in the phases the users were in, not from a synchronised start. Users send unstored
lead-in requests until every new user has sent its first and SETTLING_CYCLES x U more have
ended (CARRIED_SETTLING_CYCLES when users carried on), and on until the last cycle of them was
paced within tolerance of the target duty (harness.run.think.Pacing), at most
LEAD_IN_CAP_CYCLES x U of them (a level stored at the cap is flagged as not settled); from then
every request sent is stored, up to a count (U x rounds), whichever users send them; the users
then keep the load on with unstored requests until the last stored one has ended, and on into
the next level, so no level waits for its slowest user's rounds. A users request's round is its
user's k-th stored one, and they are committed in batches of U. A resumed pass sends the
requests it lacks, with rounds numbered on from the last stored (a conversation from its
start).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.flag_types import number
from harness.config import (
    MAX_THINK_S,
    MIN_DUTY_CYCLE,
    PROFILE_DUTY,
    PROFILES,
    THINK_DISTS,
    ConfigError,
    RunConfig,
    ThinkModel,
)
from harness.records import RequestRecord
from harness.results.store import Store
from harness.results.users import LeadIn
from harness.run.modes import base
from harness.run.think import MIN_MEMORY, LevelThink, Pacing
from harness.run.workload import Turn

if TYPE_CHECKING:
    from harness.run.sweep import Sweep

FILLER_ORDINAL = -100_000  # unstored requests (lead-in, keeping the load on)
SETTLING_CYCLES = 2  # lead-in cycles (U requests each) once all have begun
CARRIED_SETTLING_CYCLES = 1  # ... when the users of the level before carry on into it
LEAD_IN_CAP_CYCLES = 5  # ... and at most this many while the users' pacing has not settled


def think_rng(seed: int, users: int, user: int, repeat: int = 0) -> random.Random:
    """The think-time generator of one user at one level (string seeds hash stably)."""
    return random.Random(f"think-{seed}-{users}-{user}-{repeat}")


def pacing_window(users: int) -> int:
    """The lead-ins a level's pacing is judged over: about one cycle (Z's own memory)."""
    return max(users, MIN_MEMORY)


def think_model(config: RunConfig) -> ThinkModel:
    """The think rule: a --think-time, a --duty-cycle, else the profile's."""
    if config.think_s is not None:
        return ThinkModel(fixed_s=config.think_s, dist=config.think_dist)
    return ThinkModel(duty_cycle=config.duty_cycle or PROFILE_DUTY[config.profile or "chat"],
                      dist=config.think_dist)


def users_levels(concurrencies: tuple[int, ...], profile: str | None, duty: float | None,
                 think_s: float | None) -> tuple[int, ...]:
    """Mode users without --levels: the concurrency levels over the duty cycle (chat: x4), the
    users the factor estimate would expect; with a fixed think time, the levels as they are."""
    if think_s is not None or (duty is not None and not MIN_DUTY_CYCLE <= duty <= 1):
        return concurrencies  # a bad duty cycle is refused by the mode's check with its sentence
    d = duty or PROFILE_DUTY[profile or "chat"]
    return tuple(sorted({max(1, round(c / d)) for c in concurrencies}))


@dataclass(eq=False)
class _UsersLevel:
    """The users level being measured: what its users store, and where it goes."""

    c: int
    count: int  # stored requests to send
    think: LevelThink
    commit: base.Commit
    on_record: base.OnRecord
    repeat: int
    first_round: int
    stored_before: int
    settling_cycles: int
    pacing: Pacing
    sent: int = 0
    settled: int = 0  # lead-ins sent once every user had begun, ended
    lead_ins: int = 0
    lead_in_settled: bool = False  # the pacing when storing began: settled, or at the cap
    lead_in_duty: float | None = None
    unstored_chunks: int = 0
    all_begun: bool = False
    begun: set[int] = field(default_factory=set)  # users that have sent for this level
    rounds: dict[int, int] = field(default_factory=dict)  # user -> its next stored round
    histories: dict[int, list[Turn]] = field(default_factory=dict)
    unstored: dict[int, int] = field(default_factory=dict)  # user -> its unstored so far
    rngs: dict[int, random.Random] = field(default_factory=dict)
    done: list[RequestRecord] = field(default_factory=list)
    batch: list[RequestRecord] = field(default_factory=list)
    storing: asyncio.Event = field(default_factory=asyncio.Event)
    over: asyncio.Event = field(default_factory=asyncio.Event)

    def rng(self, w: int, seed: int) -> random.Random:
        if w not in self.rngs:
            self.rngs[w] = think_rng(seed, self.c, w, self.repeat)
        return self.rngs[w]

    def begin(self, w: int) -> None:
        """User w is in this level's load (carried on, or sent its first); once all are, R is
        measured afresh (harness.run.think)."""
        if w in self.begun:
            return
        self.begun.add(w)
        if len(self.begun) == self.c:
            self.all_begun = True
            self.think.restart()

    def next_unstored(self, w: int) -> int:
        self.unstored[w] = k = self.unstored.get(w, 0) + 1
        return k

    def settle(self, latency_s: float | None) -> None:
        """A lead-in that met every user has ended (`latency_s`; None: it failed), and the
        think after it drawn around the current Z. Storing starts, and Z's memory widens, once
        enough have (at least MIN_MEMORY, so Z rests on no few requests) and the last cycle of
        them was paced within tolerance of the target duty, or at the cap."""
        if self.storing.is_set():  # sent before storing began: the lead-in is over
            return
        self.settled += 1
        if latency_s is not None:
            self.pacing.add(latency_s, self.think.z_s)
        if self.settled >= self.least and (self.pacing.settled or self.settled >= self.cap):
            self.lead_in_settled, self.lead_in_duty = self.pacing.settled, self.pacing.duty
            self.think.hold()
            self.storing.set()

    @property
    def least(self) -> int:
        """Settling lead-ins the level needs before it may store."""
        return max(self.settling_cycles * self.c, MIN_MEMORY)

    @property
    def cap(self) -> int:
        """Settling lead-ins after which the level stores, settled or not: LEAD_IN_CAP_CYCLES
        cycles, and at least one pacing window past the least the level needs."""
        return max(LEAD_IN_CAP_CYCLES * self.c, self.least + pacing_window(self.c))

    def ended(self, record: RequestRecord) -> None:
        """A stored request has ended: reported, committed in batches of U."""
        self.on_record(record)
        self.done.append(record)
        self.batch.append(record)
        if len(self.done) == self.count or len(self.batch) == self.c:
            self.commit(self.batch)
            self.batch = []
        if len(self.done) == self.count:
            self.over.set()


class Crowd:
    """The users of a run, from its first users level to its last: they carry on from one
    level into the next."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.config = sweep.config
        self._crowd: dict[int, asyncio.Task[None]] = {}  # user -> its task
        self._level: _UsersLevel | None = None  # the level the users send for
        self._unstored_sent = 0

    async def warm(self, p: base.Pass) -> None:
        await self.sweep.pool.warm(p.level.concurrency)

    async def run_pass(self, p: base.Pass, commit: base.Commit,
                       on_record: base.OnRecord) -> base.LevelOutcome:
        """One pass of U users storing `p.requests` requests (a resumed pass: the ones its
        `stored_before` left; their rounds number on from `first_round`). The users of the
        pass before carry on into this one."""
        sweep, c = self.sweep, p.level.concurrency
        cpu0 = time.process_time()
        if not sweep.typical_latency_s:  # a run's first level: one request alone sizes it
            alone = await self._unstored(c, c, 0, "-lead")  # worker c: no user's
            sweep.typical_latency_s = (alone.latency_ms or 0.0) / 1000
        model = think_model(self.config)
        think = LevelThink(model, c, sweep.typical_latency_s)
        level = _UsersLevel(c, p.requests, think, commit, on_record, p.repeat, p.first_round,
                            p.stored_before,
                            settling_cycles=CARRIED_SETTLING_CYCLES if self._crowd
                            else SETTLING_CYCLES,
                            pacing=Pacing(model.duty_cycle, pacing_window(c)))
        self._level = level
        cycle_s = sweep.typical_latency_s + think.z_s
        for w in sorted(self._crowd)[c:]:  # users above this level's count leave
            self._crowd.pop(w).cancel()
        for w in self._crowd:  # already in the load: the level waits only for new users
            level.begin(w)
        for w in range(len(self._crowd), c):  # new ones arrive over about one cycle
            arrival = random.Random(f"arrive-{self.config.seed}-{c}-{w}-{p.repeat}")
            self._crowd[w] = asyncio.create_task(self._user(w, arrival.uniform(0, cycle_s)))
        try:
            await self._until_over(level)
        except BaseException:  # a failed or cancelled level leaves none of its users sending
            await self.stop()
            raise
        sweep.remember_latency(level.done)
        return base.LevelOutcome(c, level.done, time.process_time() - cpu0,
                                 unstored_chunks=level.unstored_chunks,
                                 think_mean_s=think.mean_drawn_around_s, lead_in=level.lead_ins,
                                 lead_in_settled=level.lead_in_settled,
                                 lead_in_duty=level.lead_in_duty)

    async def _until_over(self, level: _UsersLevel) -> None:
        """Until the level's last stored request has ended; a user that fails ends the run."""
        over = asyncio.create_task(level.over.wait())
        try:
            await asyncio.wait([*self._crowd.values(), over],
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            over.cancel()
        for task in self._crowd.values():
            if task.done():  # users never stop on their own
                raise task.exception() or RuntimeError("a simulated user stopped")

    async def stop(self) -> None:
        """Every user stops, mid-request or mid-think: the run has no more users levels."""
        tasks = list(self._crowd.values())
        self._crowd.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _user(self, w: int, arrive_after_s: float) -> None:
        """One user, from its arrival until the run's users levels end: it sends for whichever
        level is current, each request followed by a think around that level's Z. Before the
        level stores, its requests are unstored lead-ins; once it stores, they are stored until
        the level has sent its count, whoever sends them; after that, unstored requests keep
        the load on (to the level's last stored answer, and on into the next level)."""
        await asyncio.sleep(arrive_after_s)
        while True:
            level = self._level
            assert level is not None
            rng = level.rng(w, self.config.seed)
            level.begin(w)
            if level.storing.is_set() and level.sent < level.count:
                record = await self._stored(level, w)
                pause = level.think.draw(rng, stored=True)
                record.think_ms = pause * 1000
                level.ended(record)
            else:
                lead = not level.storing.is_set()
                settles = lead and level.all_begun  # it meets the load of every user
                record = await self._unstored(level.c, w, level.next_unstored(w),
                                              "-lead" if lead else "-load")
                level.unstored_chunks += record.chunks
                level.lead_ins += lead
                now = self._level
                assert now is not None
                latency_s = None if record.latency_ms is None else record.latency_ms / 1000
                if latency_s is not None:
                    now.think.observe(latency_s)
                if settles:
                    level.settle(latency_s)
                pause = now.think.draw(now.rng(w, self.config.seed))
            await asyncio.sleep(pause)

    async def _stored(self, level: _UsersLevel, w: int) -> RequestRecord:
        """A stored request of the level: its round is the user's k-th stored one there."""
        n = level.stored_before + level.sent
        level.sent += 1
        rnd = level.rounds.get(w, level.first_round)
        level.rounds[w] = rnd + 1
        history = level.histories.setdefault(w, []) if self.config.turns > 1 else None
        record = await self.sweep.one(level.c, rnd, w,
                                      self.sweep.ordinal(level.c, n // level.c, n % level.c,
                                                         level.repeat),
                                      repeat=level.repeat, history=history)
        if record.latency_ms is not None:
            level.think.observe(record.latency_ms / 1000)
        return record

    async def _unstored(self, c: int, w: int, k: int, tag: str) -> RequestRecord:
        """An unstored request (a lead-in or one keeping the load on), its prompt distinct
        from every other's: the ordinals below FILLER_ORDINAL are theirs alone."""
        self._unstored_sent += 1
        return await self.sweep.one(c, k, w, ordinal=FILLER_ORDINAL - self._unstored_sent,
                                    tag=tag)


def _think_flags(config: RunConfig) -> list[str]:
    """The flags given that each set the think time."""
    return [flag for flag, given in (("--profile", bool(config.profile)),
                                     ("--duty-cycle", config.duty_cycle is not None),
                                     ("--think-time", config.think_s is not None)) if given]


def _check_think(config: RunConfig) -> None:
    """The think flags' own bounds, in whichever mode they were given."""
    if config.duty_cycle is not None and not 0 < config.duty_cycle <= 1:
        raise ConfigError(f"--duty-cycle must be in (0, 1], the share of a user's time "
                          f"with a request running, not {config.duty_cycle:g}")
    if config.duty_cycle is not None and config.duty_cycle < MIN_DUTY_CYCLE:
        raise ConfigError(f"--duty-cycle must be at least {MIN_DUTY_CYCLE:g} (thinks ~"
                          f"{1 / MIN_DUTY_CYCLE:,.0f}x a request), not {config.duty_cycle:g}")
    if config.think_s is not None and not 0 <= config.think_s < math.inf:
        raise ConfigError(f"--think-time must be 0 or more seconds, not {config.think_s:g}")
    if config.think_s is not None and config.think_s > MAX_THINK_S:
        raise ConfigError(f"--think-time must be at most {MAX_THINK_S:,.0f} s (an hour), not "
                          f"{config.think_s:,g}")
    if config.think_dist not in THINK_DISTS:
        raise ConfigError(f"--think-dist must be one of {', '.join(THINK_DISTS)}, "
                          f"not {config.think_dist!r}")


class Users(base.LoadMode):
    name = "users"
    help = "users: each level is a number of simulated users who think between requests " \
           "(--profile)"
    max_name = "Max users"
    stored_as = (("think_time", "think_s"),)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--profile", choices=PROFILES,
                            help="mode users: chat (a request running ~25%% of a user's time: "
                                 "think ~3x the level's mean request) or agentic (~67%%: think "
                                 "~0.5x) (default: chat)")
        parser.add_argument("--duty-cycle", type=number, metavar="D",
                            help="mode users: the share of a user's time with a request "
                                 "running, in (0, 1], instead of the profile's (default: none)")
        parser.add_argument("--think-time", type=number, metavar="S",
                            help="mode users: a fixed mean think time in seconds instead of a "
                                 "duty cycle (default: none)")
        parser.add_argument("--think-dist", choices=THINK_DISTS,
                            help="mode users: how each think is drawn around the level's mean: "
                                 "exponential, constant or lognormal (sigma 0.8) (default: "
                                 "exponential)")

    def read_flags(self, args: argparse.Namespace, chosen: bool) -> dict[str, object]:
        unset = args.duty_cycle is None and args.think_time is None
        return {"profile": args.profile or ("chat" if chosen and unset else ""),
                "duty_cycle": args.duty_cycle, "think_s": args.think_time,
                "think_dist": args.think_dist or "exponential"}

    def default_levels(self, concurrencies: tuple[int, ...],
                       args: argparse.Namespace) -> tuple[int, ...]:
        return users_levels(concurrencies, args.profile, args.duty_cycle, args.think_time)

    def refuse_outside(self, config: RunConfig) -> None:
        _check_think(config)
        chosen = _think_flags(config)
        if chosen or config.think_dist != "exponential":
            raise ConfigError(f"{chosen[0] if chosen else '--think-dist'} needs --mode users")

    def check(self, config: RunConfig) -> None:
        """Users need one think rule."""
        _check_think(config)
        if config.profile and config.profile not in PROFILES:
            raise ConfigError(f"--profile must be one of {', '.join(PROFILES)}, "
                              f"not {config.profile!r}")
        chosen = _think_flags(config)
        if len(chosen) > 1:  # a profile's published factor would misname another duty
            raise ConfigError(f"{' and '.join(chosen)} each set the think time: give one")
        super().check(config)

    def describe(self, config: RunConfig) -> str:
        profile = f"{config.profile} " if config.profile else ""
        turns = f", conversations of {config.turns} turns" if config.turns > 1 else ""
        return (f"users mode, {profile}users at {think_model(config).describe()}, users "
                f"{list(config.levels)}, {config.rounds} requests each{turns}")

    def owed(self, config: RunConfig, level: base.Level,
             ledger: base.Ledger) -> list[base.Pass]:
        """A users pass stores U x rounds requests; a resumed one sends those it lacks."""
        c, passes = level.concurrency, []
        for repeat in range(config.repeat):
            count, last_round = ledger.stored(c, repeat)
            first = 0 if last_round is None else last_round + 1
            first += -first % config.turns
            if count < c * config.rounds:
                passes.append(base.Pass(level, repeat, c * config.rounds - count,
                                        first_round=first, stored_before=count))
        return passes

    def sender(self, sweep: Sweep) -> base.Sender:
        return Crowd(sweep)

    def store_pass(self, store: Store, config: RunConfig, run_id: str, p: base.Pass,
                   outcome: base.LevelOutcome) -> None:
        """The level's mean think and its lead-in."""
        store.write_user_level(run_id, p.level.concurrency, p.repeat, outcome.think_mean_s,
                               config.think_dist,
                               LeadIn(outcome.lead_in, outcome.lead_in_settled,
                                      outcome.lead_in_duty))


MODE = Users()
