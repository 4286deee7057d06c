"""Mode `burst`: C requests start together, all finish, then the next round starts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.records import RequestRecord
from harness.run.modes.base import Commit, OnRecord, Sender
from harness.run.modes.rounds import RoundsMode, rounds_sender

if TYPE_CHECKING:
    from harness.run.sweep import Sweep


async def send_burst(sweep: Sweep, c: int, rounds: Sequence[int], commit: Commit,
                     on_record: OnRecord, repeat: int = 0) -> list[RequestRecord]:
    """Synchronized rounds: each round's C requests go out at once."""
    done: list[RequestRecord] = []
    histories = [sweep.conversation() for _ in range(c)]
    for rnd in rounds:
        records = await asyncio.gather(*(sweep.one(c, rnd, w, repeat=repeat,
                                                   history=histories[w])
                                         for w in range(c)))
        for record in records:
            on_record(record)
        commit(list(records))
        done.extend(records)
    return done


class Burst(RoundsMode):
    name = "burst"
    help = "burst: C requests at once, per round"

    def sender(self, sweep: Sweep) -> Sender:
        return rounds_sender(sweep, send_burst)


MODE = Burst()
