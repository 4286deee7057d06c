"""What closed and burst share: a level is C workers, each sending the level's rounds; round
r is the r-th request of every worker, committed once its C records exist, so a resume sends
only the rounds (of each repeat) still missing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.config import RunConfig
from harness.records import RequestRecord
from harness.run.modes import base
from harness.run.workload import Turn

if TYPE_CHECKING:
    from harness.run.sweep import Sweep

def todo(config: RunConfig, missing: list[int]) -> list[int]:
    """Rounds to run: the missing ones, widened under --turns N to whole conversations (a turn
    resends the answers before it, which are not stored)."""
    if config.turns == 1:
        return missing
    starts = sorted({r - r % config.turns for r in missing})
    return [r for s in starts for r in range(s, min(s + config.turns, config.rounds))]


class RoundsMode(base.LoadMode):
    """A mode whose levels are concurrencies C, each pass C x rounds requests, sent a round
    at a time (`send_round`) unless the mode's `send` sends them otherwise."""

    def describe(self, config: RunConfig) -> str:
        repeats = f", {config.repeat} repeats interleaved per level" if config.repeat > 1 else ""
        turns = f", conversations of {config.turns} turns" if config.turns > 1 else ""
        return (f"{self.name} mode, levels {list(config.levels)}, {config.rounds} "
                f"rounds{repeats}{turns}")

    def owed(self, config: RunConfig, level: base.Level,
             ledger: base.Ledger) -> list[base.Pass]:
        """Each repeat's missing rounds; a round stored in part (a worker process died), or a
        conversation begun but not ended, is sent again whole (its stored rows deleted
        first)."""
        c, passes = level.concurrency, []
        for repeat in range(config.repeat):
            rounds = todo(config, [r for r in range(config.rounds)
                                   if ledger.done.get((c, repeat, r), 0) < c])
            redo = tuple(r for r in rounds if (c, repeat, r) in ledger.done)
            if rounds:
                passes.append(base.Pass(level, repeat, c * len(rounds), tuple(rounds), redo))
        return passes


    async def send_round(self, sweep: Sweep, c: int, rnd: int, repeat: int,
                         conversations: list[list[Turn] | None]) -> list[RequestRecord]:
        """One round's C requests, its records in worker order (`conversations`: each
        worker's, Sweep.conversation)."""
        raise NotImplementedError

    async def send(self, sweep: Sweep, c: int, rounds: Sequence[int], commit: base.Commit,
                   on_record: base.OnRecord, repeat: int = 0,
                   streams: Sequence[int] | None = None) -> list[RequestRecord]:
        """A pass's rounds, one at a time, each committed once its C requests have ended
        (`streams`: of its C workers, these only; a mode that splits overrides this)."""
        done: list[RequestRecord] = []
        conversations = [sweep.conversation() for _ in range(c)]
        for rnd in rounds:
            records = await self.send_round(sweep, c, rnd, repeat, conversations)
            for record in records:
                on_record(record)
            commit(records)
            done.extend(records)
        return done

    def sender(self, sweep: Sweep) -> base.Sender:
        return RoundsSender(sweep, self)


@dataclass(slots=True)
class RoundsSender:
    """Sends a pass's rounds with the connections opened before the clock starts."""

    sweep: Sweep
    mode: RoundsMode

    async def warm(self, p: base.Pass) -> None:
        await self.sweep.pool.warm(len(p.streams(p.level.concurrency)))

    async def run_pass(self, p: base.Pass, commit: base.Commit,
                       on_record: base.OnRecord) -> base.LevelOutcome:
        c = p.level.concurrency
        await p.started()
        cpu0 = time.process_time()
        records = await self.mode.send(self.sweep, c, p.rounds, commit, on_record, p.repeat,
                                       p.streams(c) if p.share else None)
        self.sweep.remember_latency(records)
        return base.LevelOutcome(c, records, time.process_time() - cpu0)

    async def stop(self) -> None:
        """Nothing sends between passes."""
