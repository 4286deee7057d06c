"""The results writer: rounds queued while it wrote go in one write, each acknowledged, none
stored twice, the end of the run honoured behind them."""

from __future__ import annotations

import queue

from harness.records import RequestRecord
from harness.results.store import Store
from harness.run import writer
from harness.run.writer import BackgroundWriter


def _round(n: int, size: int = 1) -> list[RequestRecord]:
    return [RequestRecord(f"r{n}-{i}", 1, n, i, 1.7e9 + n) for i in range(size)]


def test_rounds_queued_behind_the_first_are_taken_together_up_to_the_row_cap(monkeypatch):
    monkeypatch.setattr(writer, "_BATCH_ROWS", 5)
    inbox: queue.Queue = queue.Queue()
    for n in (2, 3, 4):
        inbox.put((n, _round(n, 2)))
    seqs, rows, last = writer._queued((1, _round(1, 2)), inbox)
    assert seqs == [1, 2, 3] and len(rows) == 6 and not last  # 6 >= 5: round 4 waits
    assert inbox.get_nowait()[0] == 4


def test_the_end_queued_among_rounds_ends_the_batch_after_them():
    inbox: queue.Queue = queue.Queue()
    inbox.put((2, _round(2)))
    inbox.put(None)
    seqs, rows, last = writer._queued((1, _round(1)), inbox)
    assert seqs == [1, 2] and [r.request_id for r in rows] == ["r1-0", "r2-0"] and last


def test_many_small_rounds_are_all_stored_once_and_acknowledged(tmp_path):
    store = Store(tmp_path / "b.duckdb")
    store.initialise()
    background = BackgroundWriter(store, "run-1")
    try:
        for n in range(400):
            background.submit(_round(n))
        assert background.drain(patience_s=120)
        assert background.unwritten == []
    finally:
        background.close()
    stored = [r.request_id for r in store.requests("run-1")]
    assert sorted(stored) == sorted(f"r{n}-0" for n in range(400))
