"""What a load mode is: how a run's levels are sent (closed, burst, rate, users ...), each
mode one module of this package, named in its registry (harness.run.modes). A mode declares
its flags, checks the run's config, names the levels it runs, plans what each still owes
(everything for a new run, the missing part on resume) and sends one pass of a level."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from harness.config import ConfigError, RunConfig
from harness.records import RequestRecord
from harness.results.client_check import ClientCheck
from harness.results.metrics import LEVEL_KEYS, LevelStats, Targets
from harness.results.report import search_plan
from harness.results.store import Store
from harness.run import aio
from harness.run.prompts import Prompts
from harness.run.trace import lengths

if TYPE_CHECKING:
    from harness.run.sweep import Sweep

Commit = Callable[[list[RequestRecord]], None]
OnRecord = Callable[[RequestRecord], None]
Measure = Callable[["Level"], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Level:
    """A load point: a concurrency C (a user count U in users mode), or a request rate (its
    concurrency 0), the keys a level's rows are stored under; a timed trace replay's level is
    a speedup X, stored under the rate it offers."""

    concurrency: int
    rate: float | None = None
    speedup: float | None = None


@dataclass(frozen=True, slots=True)
class Share:
    """A worker process's part of a pass (`run --workers N`, harness.run.workers): every
    `count`-th stream or request from `index` on, sent from `start_ns`, the pass's one start
    on the system's monotonic clock (which every process reads alike)."""

    index: int
    count: int
    start_ns: int = 0

    def of(self, n: int) -> range:
        """Its streams (or requests) of the pass's `n`."""
        return range(self.index, n, self.count)


@dataclass(frozen=True, slots=True)
class Pass:
    """One pass of a level that the run still owes (`share`: a worker's part of it)."""

    level: Level
    repeat: int = 0
    requests: int = 0  # stored requests it sends: the progress bar's total
    rounds: tuple[int, ...] = ()  # closed, burst: the rounds it sends
    redo: tuple[int, ...] = ()  # ... of which these were stored in part: deleted first
    first_round: int = 0  # users: a resumed pass numbers its rounds on from here
    stored_before: int = 0  # users: the requests the pass had stored
    share: Share | None = None

    def streams(self, n: int) -> Sequence[int]:
        """Of `n` streams (or requests), those this process sends: all, or its share."""
        return self.share.of(n) if self.share else range(n)

    async def started(self) -> None:
        """A share waits for the pass's common start; a whole pass starts now."""
        if self.share:
            await aio.until_ns(self.share.start_ns)


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
    lead_in_settled: bool = True  # ... paced within tolerance of the target duty, not capped
    lead_in_duty: float | None = None  # ... the duty its last cycle of them was paced at
    worker_checks: list[ClientCheck] = field(default_factory=list)  # `--workers`: each one's

    @property
    def chunks(self) -> int:
        """Every chunk the harness read over the level, what `cpu_s` was spent on."""
        return sum(r.chunks for r in self.records) + self.unstored_chunks


class Ledger:
    """What the results file holds of a run when it starts (or resumes), for planning what
    each level still owes; a users pass is counted when it is planned."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.done = store.done_clusters(run_id)  # (level, repeat, round): requests stored

    def stored(self, c: int, repeat: int) -> tuple[int, int | None]:
        """A users pass's stored requests and its last stored round."""
        return self.store.stored_count(self.run_id, c, repeat)

    @functools.cached_property
    def rates(self) -> set[float]:
        """The rate levels stored whole."""
        return self.store.done_rates(self.run_id)


class Sender(Protocol):
    """Sends the passes of one run: `warm` opens a pass's connections (before its clock and
    its loop monitor start), `run_pass` sends it; `stop` leaves nothing of it sending."""

    async def warm(self, p: Pass) -> None: ...

    async def run_pass(self, p: Pass, commit: Commit, on_record: OnRecord) -> LevelOutcome: ...

    async def stop(self) -> None: ...


class LoadMode:
    """A load mode; the defaults are a mode without flags of its own whose levels are the
    config's concurrencies. `max_name`: what the search finds."""

    name: ClassVar[str]
    help: ClassVar[str]  # its part of --mode's help
    max_name: ClassVar[str] = "Max C"
    splits: ClassVar[bool] = False  # its passes can be split across worker processes (Share)
    # (flag, RunConfig field) of its flags stored under another name, for --resume to compare
    stored_as: ClassVar[tuple[tuple[str, str], ...]] = ()

    @property
    def key(self) -> str:
        """What its levels are keyed by (C, U or R), from the one list readers of results
        branch on (harness.results.metrics.LEVEL_KEYS): C unless listed there."""
        return LEVEL_KEYS.get(self.name, "C")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The flags only this mode takes."""

    def read_flags(self, args: argparse.Namespace, chosen: bool) -> dict[str, object]:
        """RunConfig fields from this mode's flags (`chosen`: the run is in this mode)."""
        return {}

    def implied(self, args: argparse.Namespace) -> str | None:
        """The mode (this one, or a sibling) a run's flags choose when --mode is not given."""
        return None

    def default_levels(self, concurrencies: tuple[int, ...],
                       args: argparse.Namespace) -> tuple[int, ...]:
        """The levels of a run given no --levels, from the device's (or the default) ones."""
        return concurrencies

    def refuse_outside(self, config: RunConfig) -> None:
        """A run in another mode given this mode's flags: one sentence naming the flag."""

    def check(self, config: RunConfig) -> None:
        """A run in this mode: refuse, in one sentence, what cannot work in it."""
        if not config.levels:
            raise ConfigError("levels must be positive integers")

    def describe(self, config: RunConfig) -> str:
        """The run's load points, for its first progress line."""
        raise NotImplementedError

    def levels(self, config: RunConfig) -> tuple[Level, ...]:
        """The levels the run sweeps, in order (a search adds its probes after them)."""
        return tuple(Level(c) for c in config.levels)

    def owed(self, config: RunConfig, level: Level, ledger: Ledger) -> list[Pass]:
        """The passes of `level` still to send, in order; stored rounds are left out."""
        raise NotImplementedError

    def sender(self, sweep: Sweep) -> Sender:
        """What sends this run's passes."""
        raise NotImplementedError

    def notes(self, stats: LevelStats) -> list[str]:
        """Progress lines about a level once it has run."""
        return []

    def store_pass(self, store: Store, config: RunConfig, run_id: str, p: Pass,
                   outcome: LevelOutcome) -> None:
        """What the mode keeps of a pass beside its requests and the server's figures."""

    def prompts(self, config: RunConfig) -> Prompts | None:
        """The prompts the mode sends, where they are not the config's --prompts: text sized
        per request under --lengths-from."""
        return lengths.prompts(config)

    def calibration_target(self, config: RunConfig) -> int:
        """The prompt length calibration fits words to (--lengths-from: the median drawn)."""
        drawn = lengths.draws(config)
        return drawn.median_input if drawn else config.input_tokens

    def check_server(self, config: RunConfig, context: int | None, kv_pool: int | None) -> None:
        """Refuse, before anything is sent, lengths the server said it cannot hold."""
        drawn = lengths.draws(config)
        if drawn:
            drawn.check_server(context, kv_pool)
        else:
            config.check_server_limits(context, kv_pool)

    async def search(self, config: RunConfig, ledger: Ledger, targets: Targets,
                     measure: Measure, say: Callable[[str], None]) -> str:
        """After the levels: full levels (every repeat) at the C that harness.results.search
        picks, until Max C is known to the integer (or the cap passes); a sentence saying what
        it found. Probes are stored before they run, so a resumed run finishes a probe it had
        begun and then plans on from every verdict it has. A users level above the highest
        passing one that is not in steady state could decide Max users: it is measured once
        more, with a lead-in of its own, and left out if it is still not steady."""
        store, run_id = ledger.store, ledger.run_id
        for c in store.probes(run_id):
            await measure(Level(c))
        again: set[int] = set()
        while True:
            plan = search_plan(store, run_id, config, targets)
            assert plan is not None  # this search is a concurrency's (or a user count's)
            retry = next((c for c in plan.unsettled if c > plan.max_c and c not in again), None)
            if retry is not None:
                again.add(retry)
                say(f"U={retry} was not in steady state: measuring it again")
                store.forget_level(run_id, retry)
                await measure(Level(retry))
                continue
            if plan.next_probe is None:
                return (f"{self.max_name} {plan.max_c}{'+' if plan.lower_bound else ''}: "
                        f"{plan.how}")
            store.add_probe(run_id, plan.next_probe)
            await measure(Level(plan.next_probe))
