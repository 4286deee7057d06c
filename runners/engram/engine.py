"""The engine thread: scheduler steps, Engram row prefetch, forward, sampling, token emission.

Per step the Engram rows of every token in it are computed from token ids and submitted to
the table store before layer 0 (`prefetch=True`), then waited for at the Engram layer; with
`prefetch=False` the gather starts only there (the ablation). Tokens leave through a callback
(the API layer hands them to asyncio with call_soon_threadsafe).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from runners.engram.geometry import EngramGeometry
from runners.engram.model import EngramLM, KVCache
from runners.engram.scheduler import Scheduler, Sequence, Step
from runners.engram.table_store import Gather, TableStore

# token id (None when finished), finish reason (None while running)
OnToken = Callable[[int | None, str | None], None]


@dataclass(slots=True)
class EngineStats:
    steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    step_ms: float = 0.0
    requests_finished: int = 0
    requests_cancelled: int = 0


class Engine:
    def __init__(self, model: EngramLM, geometry: EngramGeometry, store: TableStore,
                 eos_id: int, max_running: int, max_waiting: int, prefetch: bool = True) -> None:
        self.model = model
        self.cfg = model.cfg
        self.geometry = geometry
        self.store = store
        self.eos_id = eos_id
        self.prefetch = prefetch
        self.device = store.device
        self.scheduler = Scheduler(max_running, max_waiting)
        self.cache = KVCache(model.cfg, max_running, self.device)
        self.stats = EngineStats()
        self._callbacks: dict[str, OnToken] = {}
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="engram-engine", daemon=True)
        self._layer_index = {layer: i for i, layer in enumerate(geometry.layers)}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        self._thread.join(10)

    def submit(self, seq: Sequence, on_token: OnToken) -> bool:
        """Queue a request; False when the waiting queue is full."""
        with self._wake:
            if not self.scheduler.add(seq):
                return False
            self._callbacks[seq.request_id] = on_token
            self._wake.notify()
        return True

    def cancel(self, seq: Sequence) -> None:
        """A disconnected client: no more tokens; the next step frees its slot."""
        with self._wake:
            seq.cancelled = True
            if self._callbacks.pop(seq.request_id, None) is not None:
                self.stats.requests_cancelled += 1
            self._wake.notify()

    @property
    def queue_depth(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def running(self) -> int:
        return len(self.scheduler.running)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self.scheduler.idle and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                step = self.scheduler.schedule()
            if step.empty:
                continue
            try:
                self._run(step)
            except Exception:  # a failed step ends its requests; the engine keeps serving
                traceback.print_exc()
                with self._wake:
                    for seq in [step.prefill] if step.prefill else step.decode:
                        self.scheduler.finish(seq, "error")
                        callback = self._callbacks.pop(seq.request_id, None)
                        if callback is not None:
                            callback(None, "error")

    def _run(self, step: Step) -> None:
        start = time.perf_counter()
        if step.prefill is not None:
            seq = step.prefill
            ids = seq.prompt
            rows = self.geometry.row_ids(np.asarray(ids), len(ids))
            tokens = torch.tensor(ids, device=self.device)
            pos = torch.arange(len(ids), device=self.device)
            slots = torch.tensor([seq.slot], device=self.device)
            seqs = [seq]
            prefill = True
            self.stats.prefill_tokens += len(ids)
        else:
            seqs = step.decode
            history = self.geometry.history + 1
            rows = np.concatenate(
                [self.geometry.row_ids(np.asarray(s.context(history)), 1) for s in seqs])
            tokens = torch.tensor([s.output[-1] for s in seqs], device=self.device)
            pos = torch.tensor([s.length - 1 for s in seqs], device=self.device)
            slots = torch.tensor([s.slot for s in seqs], device=self.device)
            prefill = False
            self.stats.decode_tokens += len(seqs)
        rows_for = self._rows_for(rows)
        logits = self.model(tokens, pos, slots, self.cache, rows_for, prefill)
        next_ids = [self._sample(s, logits[i]) for i, s in enumerate(seqs)]
        self.stats.steps += 1
        self.stats.step_ms += (time.perf_counter() - start) * 1000
        with self._wake:
            for seq, token in zip(seqs, next_ids, strict=True):
                self._emit(seq, token)

    def _rows_for(self, rows: np.ndarray) -> Callable[[int], torch.Tensor]:
        """Prefetch: submit now, before layer 0. Without it, submit at the Engram layer."""
        gather: list[Gather] = [self.store.submit(rows)] if self.prefetch else []
        got: list[torch.Tensor] = []

        def rows_for(layer: int) -> torch.Tensor:
            if not got:
                if not gather:
                    gather.append(self.store.submit(rows))
                got.append(gather[0].wait())
            return got[0][:, self._layer_index[layer]]

        return rows_for

    def _sample(self, seq: Sequence, logits: torch.Tensor) -> int:
        p = seq.params
        if p.ignore_eos or len(seq.output) + 1 < p.min_tokens:
            logits = logits.clone()
            logits[self.eos_id] = float("-inf")
        if p.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / p.temperature, -1)
        if p.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, -1) - sorted_p < p.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        gen = torch.Generator(device=probs.device)
        gen.manual_seed((p.seed if p.seed is not None else 0) * 1_000_003 + len(seq.output))
        return int(torch.multinomial(probs, 1, generator=gen))

    def _emit(self, seq: Sequence, token: int) -> None:
        callback = self._callbacks.get(seq.request_id)
        seq.output.append(token)
        reason = None
        if token == self.eos_id and not seq.params.ignore_eos:
            reason = "stop"
        elif len(seq.output) >= seq.params.max_tokens or seq.length >= self.cfg.max_seq:
            reason = "length"
        if reason is not None:
            self.scheduler.finish(seq, reason)
            self._callbacks.pop(seq.request_id, None)
            self.stats.requests_finished += 1
        if callback is not None:
            callback(None if reason == "stop" else token, reason)
