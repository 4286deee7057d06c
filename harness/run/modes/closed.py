"""Mode `closed`: C workers, each sends its rounds back to back (a new request as soon as its
last one ended), so C requests are in flight throughout."""

from __future__ import annotations

from collections.abc import Sequence

from harness.records import RequestRecord
from harness.run.modes.base import Commit, OnRecord
from harness.run.modes.rounds import RoundsMode
from harness.run.sweep import Sweep, all_or_none


class Closed(RoundsMode):
    name = "closed"
    help = "closed: C workers back to back"
    splits = True

    async def send(self, sweep: Sweep, c: int, rounds: Sequence[int], commit: Commit,
                   on_record: OnRecord, repeat: int = 0,
                   streams: Sequence[int] | None = None) -> list[RequestRecord]:
        """Closed workers (`streams` of them, all C by default): each sends its rounds back
        to back; a round is committed once its requests have ended, whichever was last."""
        workers = range(c) if streams is None else streams
        pending: dict[int, list[RequestRecord]] = {r: [] for r in rounds}
        done: list[RequestRecord] = []

        async def worker(w: int) -> None:
            history = sweep.conversation()
            for rnd in rounds:
                record = await sweep.one(c, rnd, w, repeat=repeat, history=history)
                on_record(record)
                bucket = pending[rnd]
                bucket.append(record)
                if len(bucket) == len(workers):
                    commit(sorted(pending.pop(rnd), key=lambda r: r.worker))
                    done.extend(bucket)

        await all_or_none([worker(w) for w in workers])
        return done


MODE = Closed()
