"""`run --table-state cold|warm` and `--idle S`: the table's start state set through each
serving host's agent before the run's first pass, and between passes an idle wait whose
residency before and after the agent reads (the decay). A drop the agent could not make cold
is said in its own sentence and the run goes on, measured as it is: the summary claims cold
only where the stored residency at the level's start is that of a cold table
(common.host_metrics.COLD_SHARE)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harness.config import TABLE_STATES, ConfigError
from harness.results.host_level import resident_table_bytes
from harness.results.host_sample import AGENT, HostSample
from harness.wire import host_control, host_scrape

COLD, WARM = TABLE_STATES


def _mib(n: float | None) -> str:
    return "unknown" if n is None else f"{n / 2**20:,.1f} MiB"


def check_hosts(table_state: str, samples: Sequence[tuple[str, HostSample]]) -> None:
    """ConfigError where --table-state has no agent with a table to act through."""
    if not table_state:
        return
    if not samples:
        raise ConfigError("--table-state works through the serving host's agent: give "
                          "--host-metrics with an `engram-bench agent --table PATH` URL")
    for url, sample in samples:
        if sample.source != AGENT:
            raise ConfigError(f"--table-state needs an engram-bench agent, and {url} is a "
                              "node_exporter, which cannot drop or read the table")
        if not sample.tables:
            raise ConfigError(f"--table-state needs the agent at {url} to know the table: "
                              "start it with --table PATH")


@dataclass(eq=False)
class TableState:
    """Sets the state before the first pass and waits `idle_s` before each later one."""

    hosts: tuple[str, ...]
    state: str  # "", COLD or WARM
    warm_budget_bytes: int | None
    idle_s: float
    say: Callable[[str], None]  # what was done: shown with the progress
    warn: Callable[[str], None]  # a state not set as asked: shown with the progress off too
    _passes: int = field(default=0)

    async def before_pass(self) -> None:
        first, self._passes = self._passes == 0, self._passes + 1
        if first and self.state:
            for url in self.hosts:
                await asyncio.to_thread(self._set, url)
        elif not first and self.idle_s > 0:
            before = await asyncio.gather(*(asyncio.to_thread(self._resident, u)
                                            for u in self.hosts))
            await asyncio.sleep(self.idle_s)
            for url, was in zip(self.hosts, before, strict=True):
                now = await asyncio.to_thread(self._resident, url)
                self.say(f"idle {self.idle_s:g} s: the table's residency on {url} went from "
                         f"{_mib(was)} to {_mib(now)}")

    def _resident(self, url: str) -> float | None:
        try:
            return resident_table_bytes(host_scrape.read(url))
        except host_scrape.HostScrapeError:
            return None

    def _set(self, url: str) -> None:
        action = "drop" if self.state == COLD else "warm"
        try:
            got = host_control.set_state(url, action, self.warm_budget_bytes
                                         if action == "warm" else None)
        except host_scrape.HostScrapeError as exc:
            self.warn(f"warning: the agent at {url} could not {action} the table ({exc}), so "
                     f"its start state is not known {self.state}")
            return
        after, size = got.get("resident_after_bytes"), got.get("table_bytes")
        if got.get("note") and (action == "drop" or not got.get("read_bytes")):
            self.warn(f"warning: {url}: {got['note']}")
        elif action == "drop":
            self.say(f"table state: cold on {url}: {_mib(after)} of {_mib(size)} resident "
                     "after the drop")
        else:
            self.say(f"table state: warm on {url}: read {_mib(got.get('read_bytes'))}, "
                     f"{_mib(after)} of {_mib(size)} resident")
