"""One level at a time: closed-loop workers, synchronized bursts or an open-loop rate
(docs/design.md).

`closed`: C workers, each sends its rounds back to back; round r is the r-th request of every
worker. `burst`: C requests start together, all finish, then the next round. A round is handed
to `commit` as soon as its C records exist, so a killed process loses at most that round.
`rate`: requests go out at the offsets of `harness.run.arrivals.schedule`, never waiting for
earlier ones; the level (concurrency 0, round 0, worker = request index) is committed whole
once its last request ends, so a resume runs a rate level again or not at all. `users`: U
simulated users (the level), each sends a request, waits for it, thinks around the level's one
mean think (harness.run.think), and sends again. A run's first users arrive spread over one
cycle; the users of one level carry on into the next, which stops the ones it does not need
or adds new ones arriving over a cycle, so a level starts in the phases the users were in,
not from a synchronised start. Users send unstored lead-in requests until every new user has
sent its first and SETTLING_CYCLES x U more have ended (CARRIED_SETTLING_CYCLES when users
carried on); from then every request sent is stored, up to a count (U x rounds),
whichever users send them; the users then keep the load on with unstored requests until the
last stored one has ended, and on into the next level, so no level waits for its slowest
user's rounds. A users request's round is its user's k-th stored one, and they are committed
in batches of U.

`--turns N` makes each worker (or user) a conversation of N turns: round r is turn r % N + 1,
and each turn resends the conversation so far (its messages and the answers they got) with a
new message, so the context grows and a server's prefix cache can reuse it.

Every request has an ordinal, distinct within the run and the same on resume, from which the
prompt source builds a distinct prompt: the sweep's requests 0.., then warmup; calibration
prompts take negative ones (`calibration_ordinal`). Under `--repeat N` a level's block holds its
N passes one after another, and request ids name the pass (`-c4-p1-r0-w2`).
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field

from harness.config import RunConfig
from harness.records import RequestRecord
from harness.results.client_check import ClientCheck
from harness.run.arrivals import schedule
from harness.run.prompts import Prompts
from harness.run.think import MIN_MEMORY, LevelThink
from harness.run.workload import Turn, payload
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint

Commit = Callable[[list[RequestRecord]], None]
FILLER_ORDINAL = -100_000  # users mode: unstored requests (lead-in, keeping the load on)
SETTLING_CYCLES = 2  # users mode: lead-in cycles (U requests each) once all have begun
CARRIED_SETTLING_CYCLES = 1  # ... when the users of the level before carry on into it
OnRecord = Callable[[RequestRecord], None]


def think_rng(seed: int, users: int, user: int, repeat: int = 0) -> random.Random:
    """The think-time generator of one user at one level (string seeds hash stably)."""
    return random.Random(f"think-{seed}-{users}-{user}-{repeat}")


@dataclass(slots=True)
class LevelOutcome:
    """What this process measured at one level, with the harness's own cost."""

    concurrency: int
    records: list[RequestRecord]
    cpu_s: float
    rate: float | None = None
    unstored_chunks: int = 0  # users mode: of the lead-in and load-keeping requests
    client: ClientCheck | None = None  # the timing loop's own lag and CPU over the level
    think_mean_s: float | None = None  # users mode: the mean Z its stored thinks were drawn around
    lead_in: int = 0  # users mode: unstored requests before the first stored one

    @property
    def chunks(self) -> int:
        """Every chunk the harness read over the level, what `cpu_s` was spent on."""
        return sum(r.chunks for r in self.records) + self.unstored_chunks


@dataclass(eq=False)
class _UsersLevel:
    """The users level being measured: what its users store, and where it goes."""

    c: int
    count: int  # stored requests to send
    think: LevelThink
    commit: Commit
    on_record: OnRecord
    repeat: int
    first_round: int
    stored_before: int
    settling_cycles: int
    sent: int = 0
    settled: int = 0  # lead-ins sent once every user had begun, ended
    lead_ins: int = 0
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

    def settle(self) -> None:
        """A lead-in that met every user has ended; after enough, Z's memory widens and storing
        starts (at least MIN_MEMORY of them, so Z rests on no few requests)."""
        self.settled += 1
        if self.settled >= max(self.settling_cycles * self.c, MIN_MEMORY):
            self.think.hold()
            self.storing.set()

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


def calibration_ordinal(sample: int) -> int:
    """Calibration prompts never share a start with a measured request's."""
    return -1 - sample


def calibration_key(run_id: str, probe: int, sample: int) -> str:
    """Same shape as a sweep's keys, so a prompt that carries its key measures alike."""
    return f"{run_id}-c0-r{probe}-w{sample}"


async def _all_or_none(jobs: list[Coroutine[object, object, None]]) -> None:
    """Run a level's workers; a failed or cancelled level leaves none of them sending."""
    tasks = [asyncio.create_task(job) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _report(on_record: OnRecord, task: asyncio.Task[RequestRecord]) -> None:
    """Progress as each open-loop request ends; a cancelled one (Ctrl-C) reports nothing."""
    if not task.cancelled() and task.exception() is None:
        on_record(task.result())


class Sweep:
    def __init__(
        self,
        config: RunConfig,
        endpoint: Endpoint,
        run_id: str,
        prompts: Prompts,
        clock: Clock,
    ) -> None:
        self.config = config
        self.endpoint = endpoint
        self.run_id = run_id
        self.prompts = prompts
        self.clock = clock
        self.pool = ConnectionPool(endpoint, connect_timeout=config.connect_timeout_s)
        self._first_ordinal: dict[int, int] = {}
        total = 0
        for c in config.levels:
            self._first_ordinal[c] = total
            total += c * config.rounds * config.repeat
        self._rate_first: dict[float, int] = {}
        for rate in config.rates:
            self._rate_first[rate] = total
            total += len(self.schedule(rate))
        self._warmup_ordinal = total
        self._extra_base = total + config.warmup  # levels the Max C search adds start here
        self._typical_latency_s = 0.0  # the last level's mean request: users' first think
        self._crowd: dict[int, asyncio.Task[None]] = {}  # users mode: user -> its task
        self._level: _UsersLevel | None = None  # users mode: the level the users send for
        self._unstored_sent = 0

    def _request(self, c: int, rnd: int, worker: int, ordinal: int,
                 tag: str = "", repeat: int = 0,
                 history: list[Turn] | None = None) -> tuple[bytes, RequestRecord, str]:
        """The request's bytes, its record, and its new message (a conversation keeps it)."""
        passes = f"-p{repeat}" if self.config.repeat > 1 else ""  # single runs keep old ids
        request_id = f"{self.run_id}{tag}-c{c}{passes}-r{rnd}-w{worker}"
        cfg = self.config
        text = self.prompts.text(request_id, ordinal)
        body = payload(cfg.api, cfg.model, text, cfg.output_tokens, cfg.temperature,
                       history=history or ())
        record = RequestRecord(request_id, c, rnd, worker, sent_at=0.0, repeat=repeat,
                               turn=rnd % cfg.turns + 1)
        return build_request(self.endpoint, body, request_id), record, text

    def schedule(self, rate: float) -> list[float]:
        """A rate level's send offsets (seconds from its start): the same on every resume."""
        cfg = self.config
        return schedule(rate, cfg.duration_s, cfg.arrival, cfg.seed)

    def ordinal(self, c: int, rnd: int, worker: int, repeat: int = 0) -> int:
        """A measured request's ordinal: 0, 1, ... over levels, repeats, rounds and workers. A
        level the Max C search adds gets a block after the warm-up's that depends on C alone,
        so a resumed run rebuilds its prompts whatever order its probes ran in."""
        rounds = self.config.rounds
        first = self._first_ordinal.get(c)
        if first is None:
            first = self._extra_base + sum(k * rounds * self.config.repeat for k in range(1, c)
                                           if k not in self.config.levels)
            self._first_ordinal[c] = first
        return first + (repeat * rounds + rnd) * c + worker

    def warmup_ordinal(self, i: int) -> int:
        return self._warmup_ordinal + i

    async def _one(self, c: int, rnd: int, worker: int, ordinal: int | None = None,
                   tag: str = "", repeat: int = 0,
                   history: list[Turn] | None = None) -> RequestRecord:
        """One request; with `history` (a conversation, turns > 1) the turn's message and its
        answer are appended to it, and a conversation starts afresh at turn 1."""
        if ordinal is None:
            ordinal = self.ordinal(c, rnd, worker, repeat)
        if history is not None and rnd % self.config.turns == 0:
            history.clear()
        request, record, said = self._request(c, rnd, worker, ordinal, tag, repeat, history)
        record = await stream_completion(self.pool, request, record, self.clock,
                                         self.config.request_timeout_s,
                                         self.config.stall_timeout_s,
                                         keep_text=history is not None)
        if history is not None:
            history.append((said, record.reply or ""))
        return record

    def _conversation(self) -> list[Turn] | None:
        """A worker's conversation state: a list to grow under --turns N > 1, else None."""
        return [] if self.config.turns > 1 else None

    def _rate_request(self, rate: float, k: int) -> tuple[bytes, RequestRecord]:
        request, record, _ = self._request(0, 0, k, self._rate_first[rate] + k, f"-q{rate:g}")
        record.rate = rate
        return request, record

    async def run_rate(self, rate: float, commit: Commit, on_record: OnRecord) -> LevelOutcome:
        """Open loop: each request is sent at its offset whether or not earlier ones ended;
        requests that fall behind go out at once (their lag shows it)."""
        offsets = self.schedule(rate)
        prepared = [self._rate_request(rate, k) for k in range(len(offsets))]  # off the clock
        await self.pool.warm(min(len(offsets), math.ceil(rate)))  # ~1 s of requests in flight
        cpu0 = time.process_time()
        tasks: list[asyncio.Task[RequestRecord]] = []
        start_ns = time.perf_counter_ns()
        for offset, (request, record) in zip(offsets, prepared, strict=True):
            # a loop until due: the event loop's timers may fire up to 1 ms early
            while (delay := offset - (time.perf_counter_ns() - start_ns) / 1e9) > 0:
                await asyncio.sleep(delay)
            record.scheduled_at = self.clock.wall(start_ns + round(offset * 1e9))
            task = asyncio.create_task(stream_completion(
                self.pool, request, record, self.clock, self.config.request_timeout_s,
                self.config.stall_timeout_s))
            task.add_done_callback(functools.partial(_report, on_record))
            tasks.append(task)
        records = list(await asyncio.gather(*tasks))
        commit(records)
        return LevelOutcome(0, records, time.process_time() - cpu0, rate)

    async def warmup(self, count: int, concurrency: int) -> list[RequestRecord]:
        """Requests that are sent but never stored (compile caches, first-touch pages)."""
        await self.pool.warm(concurrency)
        return await asyncio.gather(
            *(self._one(concurrency, i, i % concurrency, self.warmup_ordinal(i), "-warmup")
              for i in range(count))
        )

    async def run_level(
        self, c: int, rounds: Sequence[int], commit: Commit, on_record: OnRecord,
        repeat: int = 0,
    ) -> LevelOutcome:
        """The rounds of one pass (`repeat`) over level C, closed or burst."""
        await self.pool.warm(c)  # connections open before the clock starts
        cpu0 = time.process_time()
        if self.config.mode == "burst":
            records = await self._burst(c, rounds, commit, on_record, repeat)
        else:
            records = await self._closed(c, rounds, commit, on_record, repeat)
        self._remember_latency(records)
        return LevelOutcome(c, records, time.process_time() - cpu0)

    async def run_users(self, c: int, count: int, commit: Commit, on_record: OnRecord,
                        repeat: int = 0, first_round: int = 0, stored_before: int = 0,
                        ) -> LevelOutcome:
        """One pass of U = c users storing `count` requests (a resumed pass: the ones its
        `stored_before` left; their rounds number on from `first_round`). The users of the
        pass before carry on into this one."""
        await self.pool.warm(c)
        cpu0 = time.process_time()
        if not self._typical_latency_s:  # a run's first level: one request alone sizes it
            alone = await self._unstored(c, c, 0, "-lead")  # worker c: no user's
            self._typical_latency_s = (alone.latency_ms or 0.0) / 1000
        assert self.config.think is not None
        think = LevelThink(self.config.think, c, self._typical_latency_s)
        level = _UsersLevel(c, count, think, commit, on_record, repeat, first_round,
                            stored_before,
                            settling_cycles=CARRIED_SETTLING_CYCLES if self._crowd
                            else SETTLING_CYCLES)
        self._level = level
        cycle_s = self._typical_latency_s + think.z_s
        for w in sorted(self._crowd)[c:]:  # users above this level's count leave
            self._crowd.pop(w).cancel()
        for w in self._crowd:  # already in the load: the level waits only for new users
            level.begin(w)
        for w in range(len(self._crowd), c):  # new ones arrive over about one cycle
            arrival = random.Random(f"arrive-{self.config.seed}-{c}-{w}-{repeat}")
            self._crowd[w] = asyncio.create_task(self._user(w, arrival.uniform(0, cycle_s)))
        try:
            await self._until_over(level)
        except BaseException:  # a failed or cancelled level leaves none of its users sending
            await self.stop_users()
            raise
        self._remember_latency(level.done)
        return LevelOutcome(c, level.done, time.process_time() - cpu0,
                            unstored_chunks=level.unstored_chunks,
                            think_mean_s=think.mean_drawn_around_s, lead_in=level.lead_ins)

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

    async def stop_users(self) -> None:
        """Every user stops, mid-request or mid-think: the run has no more users levels."""
        tasks = list(self._crowd.values())
        self._crowd.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _remember_latency(self, records: Sequence[RequestRecord]) -> None:
        """The level's mean request: where the next users level starts its think."""
        latencies = [r.latency_ms for r in records if r.latency_ms]
        if latencies:
            self._typical_latency_s = sum(latencies) / len(latencies) / 1000

    async def _closed(self, c: int, rounds: Sequence[int], commit: Commit,
                      on_record: OnRecord, repeat: int = 0) -> list[RequestRecord]:
        """Closed workers: each sends its rounds back to back."""
        pending: dict[int, list[RequestRecord]] = {r: [] for r in rounds}
        done: list[RequestRecord] = []

        async def worker(w: int) -> None:
            history = self._conversation()
            for rnd in rounds:
                record = await self._one(c, rnd, w, repeat=repeat, history=history)
                on_record(record)
                bucket = pending[rnd]
                bucket.append(record)
                if len(bucket) == c:
                    commit(sorted(pending.pop(rnd), key=lambda r: r.worker))
                    done.extend(bucket)

        await _all_or_none([worker(w) for w in range(c)])
        return done

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
                if settles:
                    level.settle()
                now = self._level
                assert now is not None
                if record.latency_ms is not None:
                    now.think.observe(record.latency_ms / 1000)
                pause = now.think.draw(now.rng(w, self.config.seed))
            await asyncio.sleep(pause)

    async def _stored(self, level: _UsersLevel, w: int) -> RequestRecord:
        """A stored request of the level: its round is the user's k-th stored one there."""
        n = level.stored_before + level.sent
        level.sent += 1
        rnd = level.rounds.get(w, level.first_round)
        level.rounds[w] = rnd + 1
        history = level.histories.setdefault(w, []) if self.config.turns > 1 else None
        record = await self._one(level.c, rnd, w, self.ordinal(level.c, n // level.c,
                                                               n % level.c, level.repeat),
                                 repeat=level.repeat, history=history)
        if record.latency_ms is not None:
            level.think.observe(record.latency_ms / 1000)
        return record

    async def _unstored(self, c: int, w: int, k: int, tag: str) -> RequestRecord:
        """An unstored request (a lead-in or one keeping the load on), its prompt distinct
        from every other's: the ordinals below FILLER_ORDINAL are theirs alone."""
        self._unstored_sent += 1
        return await self._one(c, k, w, ordinal=FILLER_ORDINAL - self._unstored_sent, tag=tag)

    async def _burst(self, c: int, rounds: Sequence[int], commit: Commit,
                     on_record: OnRecord, repeat: int = 0) -> list[RequestRecord]:
        done: list[RequestRecord] = []
        histories = [self._conversation() for _ in range(c)]
        for rnd in rounds:
            records = await asyncio.gather(*(self._one(c, rnd, w, repeat=repeat,
                                                       history=histories[w])
                                             for w in range(c)))
            for record in records:
                on_record(record)
            commit(list(records))
            done.extend(records)
        return done

    def close(self) -> None:
        self.pool.close()
