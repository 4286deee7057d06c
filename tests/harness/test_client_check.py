"""The harness checks itself: a timing loop kept busy is seen late, and the level says so."""

from __future__ import annotations

import asyncio
import json
import time

from harness.run.loop_monitor import LoopMonitor
from tests.helpers import run_cli


def _monitored(blocking_s: float, blocks: int) -> object:
    async def level():
        monitor = LoopMonitor(lambda: 0)
        monitor.start()
        for _ in range(blocks):
            await asyncio.sleep(0.03)
            time.sleep(blocking_s)  # a callback that holds the loop, as a flood of chunks does
        await asyncio.sleep(0.03)
        return monitor.stop()

    return asyncio.run(level())


def test_a_loop_held_by_callbacks_is_client_bound_and_an_idle_one_is_not():
    # An idle loop is flagged only when the machine keeps it from a CPU: a preemption of 20 ms
    # and more is its lag too. So it gets 3 s (~150 timer fires), and 3 tries on a busy runner.
    idles = []
    while len(idles) < 3 and (not idles or idles[-1].client_bound):
        idles.append(_monitored(0.0, 100))
    held = _monitored(0.05, 10)
    assert not idles[-1].client_bound, idles
    assert held.client_bound
    assert held.loop_lag_max_ms >= 40 and held.loop_lag_p99_ms >= 40
    assert held.cpu_share is not None and idles[-1].unread_bytes_max == 0


def test_every_level_stores_its_self_check_and_the_summary_shows_it(sweep):
    swept = sweep({"ttft_ms": 5, "itl_ms": 2}, levels=(1, 4), rounds=2, output_tokens=16)
    checks = swept.store.client_checks(swept.run_id)
    assert set(checks) == {(1, None), (4, None)}
    proc = run_cli("summary", "--db", str(swept.store.path), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    stored = {lv["concurrency"]: lv for lv in swept.store.levels(swept.run_id)}
    for level in summary["levels"]:
        check = checks[(level["concurrency"], None)]
        assert level["loop_lag_p99_ms"] == round(check.loop_lag_p99_ms, 3)
        assert level["client_bound"] is check.client_bound
        assert stored[level["concurrency"]]["client_bound"] is check.client_bound
        assert 0 < level["client_cpu_share"] < 2
        flagged = any(w.startswith(f"C={level['concurrency']} was client-bound")
                      for w in summary["warnings"])
        assert flagged is check.client_bound
