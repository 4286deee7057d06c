"""Mode `burst`: C requests start together, all finish, then the next round starts."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from harness.records import RequestRecord
from harness.run.modes.rounds import RoundsMode
from harness.run.workload import Turn

if TYPE_CHECKING:
    from harness.run.sweep import Sweep


class Burst(RoundsMode):
    name = "burst"
    help = "burst: C requests at once, per round"

    async def send_round(self, sweep: Sweep, c: int, rnd: int, repeat: int,
                         conversations: list[list[Turn] | None]) -> list[RequestRecord]:
        """Synchronized rounds: each round's C requests go out at once."""
        return list(await asyncio.gather(*(sweep.one(c, rnd, w, repeat=repeat,
                                                     history=conversations[w])
                                           for w in range(c))))


MODE = Burst()
