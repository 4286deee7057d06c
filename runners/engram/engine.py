"""The engine thread: scheduler steps, Engram row prefetch, forward, next tokens, emission.

Per step the Engram rows of every token in it are computed from token ids, and each Engram
layer's rows are submitted to the table store as their own gather before layer 0
(`prefetch=True`); a layer waits only for its own gather, so deepseek-mini's layer 14 overlaps
the 13 layers before it. With `prefetch=False` each layer's gather starts only at that layer
(the ablation). The next token is sampled from the logits, or with `decode="replay"` taken
from a natural text (runners.engram.replay) while the logits are still computed. Tokens leave
through a callback (the API layer hands them to asyncio with call_soon_threadsafe); an
optional admit hook gets the monotonic time a request's prefill is scheduled (its queue time).

KV lives in a paged pool (model.PagedKV, bookkeeping in kv_blocks.py; who gets blocks is
scheduler.py's policy): a prefill after a cached prefix computes only the uncached suffix (its
Engram rows still hashed with the real tokens before it) and reads the prefix's KV from its
blocks. A preempted request is prefilled again over its prompt and output; its next token is
sampled from that prefill, as it would have been from the decode step it missed.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import torch

from runners.engram.geometry import EngramGeometry
from runners.engram.kv_blocks import BLOCK_SIZE, BlockManager, blocks_for
from runners.engram.model import EngramLM, PagedKV, RowsFor, block_tables
from runners.engram.replay import ReplayText
from runners.engram.scheduler import Scheduler, Sequence, Step
from runners.engram.stats import KVDict
from runners.engram.table_store import Gather, TableStore

# token id (None when finished), finish reason (None while running)
OnToken = Callable[[int | None, str | None], None]
# the time.monotonic() at which the request's prefill step was scheduled (its queue time ends)
OnAdmit = Callable[[float], None]
DECODE_MODES = ("sample", "replay")


@dataclass(slots=True)
class EngineStats:
    """Counters and where each step's wall time went (ms, summed over steps).

    A step is timed on the engine thread in contiguous segments: `hash_ms` (row ids, the
    prefetched gathers' submits, input tensors), `compute_ms` (the forward pass minus Engram
    waits), `engram_wait_ms_by_layer` (time blocked until each Engram layer's rows arrived;
    without prefetch it includes that layer's submit), `sample_ms` (choosing next tokens),
    `emit_ms` (appending them, finishing requests, callbacks). They sum to `step_ms`, which
    is also split by phase (a step prefills one request or decodes every running one).
    """

    steps: int = 0
    prefill_steps: int = 0
    decode_steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    step_ms: float = 0.0
    prefill_step_ms: float = 0.0
    decode_step_ms: float = 0.0
    hash_ms: float = 0.0
    compute_ms: float = 0.0
    engram_wait_ms_by_layer: dict[int, float] = field(default_factory=dict)
    sample_ms: float = 0.0
    emit_ms: float = 0.0
    requests_finished: int = 0
    requests_cancelled: int = 0

    @property
    def engram_wait_ms(self) -> float:
        return sum(self.engram_wait_ms_by_layer.values())


class Engine:
    def __init__(self, model: EngramLM, geometry: EngramGeometry, store: TableStore,
                 eos_id: int, max_running: int, max_waiting: int, prefetch: bool = True,
                 decode: str = "sample", kv_blocks: int | None = None,
                 prefix_caching: bool = True) -> None:
        if decode not in DECODE_MODES:
            raise ValueError(f"decode must be one of {', '.join(DECODE_MODES)}")
        self.model = model
        self.cfg = model.cfg
        self.geometry = geometry
        self.store = store
        self.eos_id = eos_id
        self.prefetch = prefetch
        self.decode = decode
        self._replay = ReplayText.corpus(eos_id) if decode == "replay" else None
        self.device = store.device
        # default pool: every running request at full context
        num_blocks = kv_blocks or max_running * blocks_for(model.cfg.max_seq)
        self.blocks = BlockManager(num_blocks, BLOCK_SIZE, prefix_caching)
        self.scheduler = Scheduler(max_running, max_waiting, self.blocks)
        self.kv = PagedKV(model.cfg, num_blocks, self.device)
        # every layer's key exists from the start: /stats may copy the dict from another thread
        self.stats = EngineStats(engram_wait_ms_by_layer=dict.fromkeys(geometry.layers, 0.0))
        self._callbacks: dict[str, OnToken] = {}
        self._on_admit: dict[str, OnAdmit] = {}
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

    def submit(self, seq: Sequence, on_token: OnToken, on_admit: OnAdmit | None = None) -> bool:
        """Queue a request; False when the waiting queue is full. A request larger than the
        whole KV pool is a ValueError (the API refuses it before it gets here)."""
        if not self.blocks.fits_pool(seq.max_length):
            raise ValueError(f"{seq.max_length} tokens do not fit a KV pool of "
                             f"{self.blocks.pool_tokens} tokens")
        with self._wake:
            if not self.scheduler.add(seq):
                return False
            self._callbacks[seq.request_id] = on_token
            if on_admit is not None:
                self._on_admit[seq.request_id] = on_admit
            self._wake.notify()
        return True

    def cancel(self, seq: Sequence) -> None:
        """A disconnected client: no more tokens; the next step frees its slot."""
        with self._wake:
            seq.cancelled = True
            self._on_admit.pop(seq.request_id, None)
            if self._callbacks.pop(seq.request_id, None) is not None:
                self.stats.requests_cancelled += 1
            self._wake.notify()

    @property
    def queue_depth(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def running(self) -> int:
        return len(self.scheduler.running)

    def kv_snapshot(self) -> KVDict:
        """The KV pool and prefix cache figures, read under the engine's lock."""
        b = self.blocks
        with self._wake:
            return {"kv_pool_bytes": self.kv.nbytes, "kv_blocks_total": b.num_blocks,
                    "kv_blocks_used": b.used_blocks, "kv_block_size": b.block_size,
                    "kv_pool_tokens": b.pool_tokens, "kv_cache_usage": b.usage,
                    "prefix_caching": b.prefix_caching, "prefix_cache_queries": b.queries,
                    "prefix_cache_hits": b.hits, "prompt_tokens_cached": b.hits,
                    "requests_waiting_for_kv": self.scheduler.waiting_for_kv,
                    "preemptions": self.scheduler.preemptions}

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self.scheduler.idle and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                step = self.scheduler.schedule()
                if step.prefill is not None:
                    on_admit = self._on_admit.pop(step.prefill.request_id, None)
                    if on_admit is not None:
                        on_admit(time.monotonic())
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
        marks = [time.perf_counter()]  # start, hashed, computed, sampled, emitted
        if step.prefill is not None:
            seqs, phase = [step.prefill], "prefill"
            prompt, reused = step.prefill.tokens, step.prefill.reused_tokens
            inputs = prompt[reused:]  # the cached prefix's KV is already in its blocks
            # the suffix's rows, hashed with the real tokens before them
            rows = self.geometry.row_ids(np.asarray(prompt), len(inputs))
            positions = list(range(reused, len(prompt)))
        else:
            seqs, phase = step.decode, "decode"
            history = self.geometry.history + 1
            rows = np.concatenate(
                [self.geometry.row_ids(np.asarray(s.context(history)), 1) for s in seqs])
            inputs = [s.output[-1] for s in seqs]
            positions = [s.length - 1 for s in seqs]
        waits = dict.fromkeys(self.geometry.layers, 0.0)
        rows_for = self._rows_for(rows, phase, waits)
        tokens = torch.tensor(inputs, device=self.device)
        pos = torch.tensor(positions, device=self.device)
        tables = block_tables([s.block_table for s in seqs], self.device)
        marks.append(time.perf_counter())
        logits = self.model(tokens, pos, tables, self.kv, rows_for, phase == "prefill")
        self._sync()
        marks.append(time.perf_counter())
        if self._replay is not None:
            next_ids = [self._replay.next_token(s.prompt, len(s.output)) for s in seqs]
        else:
            next_ids = [self._sample(s, logits[i]) for i, s in enumerate(seqs)]
        marks.append(time.perf_counter())
        with self._wake:
            if step.prefill is not None:
                self.scheduler.prefilled(step.prefill)
            for seq, token in zip(seqs, next_ids, strict=True):
                self._emit(seq, token)
        marks.append(time.perf_counter())
        self._account(phase, len(inputs), waits, marks)

    def _account(self, phase: str, n_tokens: int, waits: dict[int, float],
                 marks: list[float]) -> None:
        hash_ms, forward_ms, sample_ms, emit_ms = (
            (b - a) * 1000 for a, b in pairwise(marks))
        step_ms = (marks[-1] - marks[0]) * 1000
        s = self.stats
        s.steps += 1
        s.step_ms += step_ms
        if phase == "prefill":
            s.prefill_steps += 1
            s.prefill_tokens += n_tokens
            s.prefill_step_ms += step_ms
        else:
            s.decode_steps += 1
            s.decode_tokens += n_tokens
            s.decode_step_ms += step_ms
        s.hash_ms += hash_ms
        s.compute_ms += forward_ms - sum(waits.values())
        for layer, ms in waits.items():
            s.engram_wait_ms_by_layer[layer] += ms
        s.sample_ms += sample_ms
        s.emit_ms += emit_ms

    def _rows_for(self, rows: np.ndarray, phase: str, waits: dict[int, float]) -> RowsFor:
        """One gather per Engram layer (its rows[:, li]). Prefetch: all submitted now, before
        layer 0; without it, each at its own layer. `waits` gets each layer's blocked ms."""
        def submit(layer: int) -> Gather:
            layer_rows = np.ascontiguousarray(rows[:, self._layer_index[layer]])
            return self.store.submit(layer_rows, phase)

        gathers = {layer: submit(layer) for layer in self.geometry.layers} if self.prefetch else {}

        def rows_for(layer: int) -> torch.Tensor:
            self._sync()  # the layers before this one are compute, not wait
            start = time.perf_counter()
            gather = gathers.pop(layer) if self.prefetch else submit(layer)
            got = gather.wait()
            self._sync()  # a copy still in flight on the device is part of the wait
            waits[layer] += (time.perf_counter() - start) * 1000
            return got

        return rows_for

    def _sync(self) -> None:
        """Segments are host wall time: on CUDA, wait for the queued kernels at each boundary
        (the step synchronises once it reads its logits anyway; replay would not)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

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
        # modulo 2**64: any int64 seed fits manual_seed (torch takes a negative one the same way)
        gen.manual_seed(((p.seed or 0) * 1_000_003 + len(seq.output)) % 2**64)
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
