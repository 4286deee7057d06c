"""`run --ray ADDRESS`: the load workers of `--workers` as Ray actors across a cluster's nodes,
for more streams than one host's CPUs time exactly (docs/running.md#more-than-one-host).

An actor runs the very worker a process of this host runs (harness.run.workers.serve: its own
uvloop, connections and timing) in a thread of its own, behind a relay: a pass goes in, and
its requests come back to this process as they finish (a Ray streaming generator, in
batches), where the one writer stores them as for processes. Each host times with its own
monotonic clock. When an actor starts, this process reads the actor's clocks over round
trips and keeps the shortest (harness.results.clock_offset): the offset between the two
monotonic clocks maps a pass's start (this process's barrier) onto the actor's clock and the
actor's timestamps onto the run's, and the host's wall-clock offset and that round trip are
stored with the run (`load_hosts`).

Ray is imported only here, and only when `--ray` is given (the `distributed` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from harness import __version__
from harness.records import LoadHost
from harness.results.clock_offset import ClockOffset, ClockReading, best_offset
from harness.run import workers
from harness.run.workers import LoadWorker, Setup, WorkerDied

CLOCK_ROUND_TRIPS = 16  # the shortest of these bounds the offset's error (half of it)
GO_MARGIN_NS = 50_000_000  # a pass's start is set this far ahead: a Ray call and a clock
# offset's error are a few ms on one network
PLACE_TIMEOUT_S = 60.0  # an actor the cluster cannot place (no CPU free) fails the run then
_STOP_S = 2.0


class RayUnavailable(Exception):
    """`--ray` names no Ray cluster this process can join; one sentence."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """The Ray cluster a run's load is spread across, as it was when the run joined it."""

    address: str
    cpus: int
    nodes: int


def split_address(address: str) -> tuple[str, int]:
    """HOST:PORT of a Ray cluster's head (what `ray start --head` prints); one sentence for
    anything else."""
    host, _, port = address.strip().rpartition(":")
    if address.startswith("ray://"):
        raise RayUnavailable(f"--ray takes the head's HOST:PORT (e.g. 10.0.0.1:6379), not a "
                             f"Ray Client address: {address!r}")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayUnavailable(f"--ray takes the head's HOST:PORT, e.g. 10.0.0.1:6379, not "
                             f"{address!r}")
    return host.strip("[]"), int(port)


def connect(address: str, timeout_s: float) -> Cluster:
    """Join the cluster at `address` within `timeout_s`, or one sentence why not."""
    host, port = split_address(address)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        why = (f"no answer within {timeout_s:g} s" if isinstance(exc, TimeoutError)
               else exc.strerror or str(exc))
        raise RayUnavailable(f"no Ray cluster answers at {address} ({why}): start one with "
                             "`ray start --head` and give the address it prints") from None
    import ray

    failed: list[BaseException] = []

    def join() -> None:
        try:
            ray.init(address=f"{host}:{port}", logging_level=logging.ERROR,
                     log_to_driver=False, namespace="engram-bench")
        except BaseException as exc:  # said below, in one sentence
            failed.append(exc)

    joining = threading.Thread(target=join, name="ray-connect", daemon=True)
    joining.start()
    joining.join(timeout_s)
    if joining.is_alive() or failed:
        why = (f"{type(failed[0]).__name__}: {str(failed[0]).splitlines()[0]}" if failed
               else f"no Ray answer within {timeout_s:g} s")
        raise RayUnavailable(f"{address} accepts connections but is no Ray cluster this "
                             f"process could join ({why})")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return Cluster(address, int(ray.cluster_resources().get("CPU", 0)), len(nodes))


class Relay:
    """The Ray actor: a load worker's event loop in a thread (harness.run.workers.serve),
    and the calls that reach it over a pipe."""

    def __init__(self) -> None:
        self._conn, self._theirs = workers.link_pair()
        self._thread: threading.Thread | None = None

    def clock(self) -> tuple[int, int]:
        return time.time_ns(), time.perf_counter_ns()

    def where(self) -> tuple[str, str, str]:
        """This actor's Ray node, host name and engram-bench version."""
        import ray

        return ray.get_runtime_context().get_node_id(), socket.gethostname(), __version__

    def start(self, setup: Setup) -> None:
        self._thread = threading.Thread(target=workers.serve, args=(self._theirs, setup, None),
                                        name="load-worker", daemon=True)
        self._thread.start()

    def warm(self, p: Any) -> Any:
        self._conn.send(("warm", p))
        return self._recv()

    def run(self, start_ns: int) -> Iterator[list[Any]]:
        """The pass started at `start_ns` (this host's clock): its messages as they come,
        each batch what had arrived by then, until "done" or "failed" (None: the loop
        ended)."""
        self._conn.send(("go", start_ns))
        while True:
            batch = [self._recv()]
            while (batch[-1] is not None and batch[-1][0] == "record"
                   and self._conn.incoming.poll()):
                batch.append(self._recv())
            yield batch
            if batch[-1] is None or batch[-1][0] != "record":
                return

    def _recv(self) -> Any:
        try:
            return self._conn.incoming.recv()
        except (EOFError, OSError):
            return None

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(None)
        if self._thread is not None:
            self._thread.join(_STOP_S)


class _Actor:
    """A started Relay as WorkerSender sees it (workers.LoadWorker)."""

    def __init__(self, index: int, actor: Any, offset: ClockOffset, host: LoadHost,
                 queue: asyncio.Queue[tuple[Any, Any]]) -> None:
        self.index = index
        self.actor = actor
        self.offset = offset
        self.host = host
        self.queue = queue
        self._ended: str | None = None
        self._stopping: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, message: Any) -> None:
        if message is None:
            self._stopping = self.actor.stop.remote()
        elif message[0] == "warm":
            self._spawn(self._reply(self.actor.warm.remote(message[1])))
        else:  # ("go", start on this process's clock): on the actor's
            self._spawn(self._stream(message[1] + self.offset.monotonic_ns))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reply(self, ref: Any) -> None:
        try:
            message = await ref
        except Exception as exc:
            message = self._failure(exc)
        self._put(message)

    async def _stream(self, start_ns: int) -> None:
        try:
            async for ref in self.actor.run.options(num_returns="streaming").remote(start_ns):
                for message in await ref:
                    self._put(message)
        except Exception as exc:
            self._put(self._failure(exc))

    def _put(self, message: Any) -> None:
        if message is None and self._ended is None:
            self._ended = "its load loop ended"
        self.queue.put_nowait((self, message))

    def _failure(self, exc: Exception) -> Any:
        """None for an actor that died (a node lost, a killed process), else "failed"."""
        import ray

        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, ray.exceptions.RayActorError):
            self._ended = why
            return None
        return ("failed", why)

    def alive(self) -> bool:
        return self._ended is None

    def ended(self) -> str:
        return f"Ray actor on {self.host.hostname}: {(self._ended or 'ended').rstrip('.')}"

    def close(self, kill: bool = False) -> None:
        import ray

        for task in list(self._tasks):
            task.cancel()
        if not kill and self._stopping is not None:
            with contextlib.suppress(Exception):
                ray.get(self._stopping, timeout=_STOP_S)
        with contextlib.suppress(Exception):
            ray.kill(self.actor)


class RaySpawner:
    """Starts workers as Relay actors spread over the cluster's nodes, each given an equal
    part of the cluster's CPUs (a whole one at most); `on_host` gets where each ran."""

    go_margin_ns = GO_MARGIN_NS

    def __init__(self, cluster: Cluster, count: int, on_host: Callable[[LoadHost], None]) -> None:
        self.cluster = cluster
        self.cpus_each = min(1.0, cluster.cpus / max(count, 1))
        self.on_host = on_host

    async def start(self, index: int, setup: Setup,
                    queue: asyncio.Queue[tuple[Any, Any]]) -> LoadWorker:
        import ray

        actor: Any = ray.remote(Relay).options(num_cpus=self.cpus_each, max_concurrency=2,
                                          scheduling_strategy="SPREAD").remote()
        try:
            node_id, hostname, version = await asyncio.wait_for(actor.where.remote(),
                                                                PLACE_TIMEOUT_S)
            if version != __version__:
                raise WorkerDied(f"{hostname} runs engram-bench {version} and this host "
                                 f"{__version__}: install the same version on every node")
            offset = best_offset([await _read_clock(actor) for _ in range(CLOCK_ROUND_TRIPS)])
            anchor_wall, anchor_ns = setup.anchor
            await actor.start.remote(replace(setup, anchor=(anchor_wall,
                                                            anchor_ns + offset.monotonic_ns)))
        except TimeoutError:
            ray.kill(actor)
            raise WorkerDied(f"the Ray cluster at {self.cluster.address} placed no load worker "
                             f"{index + 1} within {PLACE_TIMEOUT_S:g} s ({self.cpus_each:g} CPU "
                             f"each, {self.cluster.cpus} in the cluster)") from None
        except BaseException:
            ray.kill(actor)
            raise
        host = LoadHost(index, node_id, hostname, offset.wall_ns / 1e6,
                        offset.round_trip_ns / 1e6)
        self.on_host(host)
        return _Actor(index, actor, offset, host, queue)


async def _read_clock(actor: Any) -> ClockReading:
    sent_wall, sent = time.time_ns(), time.perf_counter_ns()
    their_wall, theirs = await actor.clock.remote()
    return ClockReading(sent, time.perf_counter_ns(), sent_wall, their_wall, theirs)
