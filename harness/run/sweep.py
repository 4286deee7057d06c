"""What every load mode sends with: the run's connection pool, its requests' ids and prompt
ordinals, and the warm-up (the modes themselves: harness.run.modes; docs/design.md).

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
from collections.abc import Coroutine, Sequence

from harness.config import RunConfig
from harness.records import RequestRecord
from harness.run.arrivals import schedule
from harness.run.prompts import Prompts
from harness.run.trace import lengths
from harness.run.workload import UNCOUNTED, TokenLine, Turn, payload
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint


def calibration_ordinal(sample: int) -> int:
    """Calibration prompts never share a start with a measured request's."""
    return -1 - sample


def calibration_key(run_id: str, probe: int, sample: int) -> str:
    """Same shape as a sweep's keys, so a prompt that carries its key measures alike."""
    return f"{run_id}-c0-r{probe}-w{sample}"


async def all_or_none(jobs: list[Coroutine[object, object, None]]) -> None:
    """Run a level's workers; a failed or cancelled level leaves none of them sending."""
    tasks = [asyncio.create_task(job) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Sweep:
    """A run's requests as every mode sends them, over one connection pool."""

    def __init__(
        self,
        config: RunConfig,
        endpoint: Endpoint,
        run_id: str,
        prompts: Prompts,
        clock: Clock,
        line: TokenLine | None = None,
    ) -> None:
        self.config = config
        self.endpoint = endpoint
        self.run_id = run_id
        self.prompts = prompts
        self.clock = clock
        self.line = line  # the server's tokens per word, fitted by calibration
        # --lengths-from: each request's own lengths, which a worker gets with its prompts
        self.lengths = (prompts if isinstance(prompts, lengths.LengthDraws)
                        else lengths.draws(config))
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
        self.typical_latency_s = 0.0  # the last level's mean request: users' first think

    def _request(self, c: int, rnd: int, worker: int, ordinal: int,
                 tag: str = "", repeat: int = 0,
                 history: list[Turn] | None = None) -> tuple[bytes, RequestRecord, str]:
        """The request's bytes, its record, and its new message (a conversation keeps it)."""
        passes = f"-p{repeat}" if self.config.repeat > 1 else ""  # single runs keep old ids
        request_id = f"{self.run_id}{tag}-c{c}{passes}-r{rnd}-w{worker}"
        cfg = self.config
        prompts, max_tokens, asked = self.prompts, cfg.output_tokens, None
        if self.lengths:  # the prompt cut to its drawn length on the server's token line
            asked, max_tokens = self.lengths.at(ordinal)
            prompts = prompts.sized((self.line or UNCOUNTED).content_pieces(asked))
        text = prompts.text(request_id, ordinal)
        body = payload(cfg.api, cfg.model, text, max_tokens, cfg.temperature,
                       history=history or ())
        record = RequestRecord(request_id, c, rnd, worker, sent_at=0.0, repeat=repeat,
                               turn=rnd % cfg.turns + 1, input_tokens_requested=asked,
                               output_tokens_requested=max_tokens if asked else None)
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

    async def one(self, c: int, rnd: int, worker: int, ordinal: int | None = None,
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

    def conversation(self) -> list[Turn] | None:
        """A worker's conversation state: a list to grow under --turns N > 1, else None."""
        return [] if self.config.turns > 1 else None

    def rate_request(self, rate: float, k: int) -> tuple[bytes, RequestRecord]:
        request, record, _ = self._request(0, 0, k, self._rate_first[rate] + k, f"-q{rate:g}")
        record.rate = rate
        return request, record

    async def warmup(self, count: int, concurrency: int) -> None:
        """Requests that are sent but never stored (compile caches, first-touch pages), by
        `concurrency` workers back to back: no more connections open than that, nor kept."""
        await self.pool.warm(concurrency)

        async def worker(w: int) -> None:
            for i in range(w, count, concurrency):
                await self.one(concurrency, i, w, self.warmup_ordinal(i), "-warmup")

        await all_or_none([worker(w) for w in range(min(concurrency, count))])

    def remember_latency(self, records: Sequence[RequestRecord]) -> None:
        """The level's mean request: where the next users level starts its think."""
        latencies = [r.latency_ms for r in records if r.latency_ms]
        if latencies:
            self.typical_latency_s = sum(latencies) / len(latencies) / 1000

    def close(self) -> None:
        self.pool.close()
