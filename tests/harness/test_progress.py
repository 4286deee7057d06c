"""The progress bar is drawn by its own process on a terminal, and by nobody elsewhere."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios
import threading
import time
from collections.abc import Iterator

import pytest

from harness.records import RequestRecord
from harness.results.metrics import level_stats
from harness.run import progress as progress_module
from harness.run.progress import LevelProgress


class _Terminal:
    """A pseudo-terminal whose output a thread collects, as a terminal emulator would."""

    def __init__(self) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.file = os.fdopen(slave, "w")
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: every writer closed the slave side
                return
            if not data:
                return
            self._chunks.append(data)

    def text(self) -> str:
        time.sleep(0.05)  # let the reader catch up with what is written
        return b"".join(self._chunks).decode(errors="replace")

    def close(self) -> None:
        self.file.close()
        self._reader.join(5)
        os.close(self._master)


@pytest.fixture
def terminal() -> Iterator[_Terminal]:
    term = _Terminal()
    yield term
    term.close()


def _record(i: int, ok: bool = True) -> RequestRecord:
    record = RequestRecord(f"r-{i}", 4, 0, i, 0.0, ttft_ms=150.0, latency_ms=1000.0,
                           output_tokens=128)
    if not ok:
        record.error_kind = "http_error"
    return record


def _level(progress: LevelProgress, records: list[RequestRecord]) -> None:
    progress.start_level(4, len(records))
    for record in records:
        progress.advance(record)
    progress.end_level(level_stats(4, records, 128))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_off_a_terminal_a_line_per_level_and_no_renderer():
    out = io.StringIO()
    progress = LevelProgress(file=out)
    assert not progress.live and progress.renderer_pid is None
    _level(progress, [_record(i) for i in range(3)] + [_record(3, ok=False)])
    progress.stop()
    assert "C=4: 4 requests, mean TTFT 150.0 ms, mean TPS 128.0, errors 1" in out.getvalue()


def test_disabled_prints_nothing(capsys):
    progress = LevelProgress(enabled=False)
    progress.message("hello")
    _level(progress, [_record(0)])
    progress.stop()
    assert capsys.readouterr().err == ""


def test_the_bar_is_drawn_by_another_process(terminal, monkeypatch):
    monkeypatch.setattr(progress_module, "_SEND_EVERY_NS", 0)  # every figure reaches it
    progress = LevelProgress(file=terminal.file)
    assert progress.live
    pid = progress.renderer_pid
    assert pid is not None and pid != os.getpid()
    threads = threading.active_count()
    progress.start_level(4, 4)
    assert threading.active_count() == threads  # no refresh thread in this process
    for i in range(3):
        progress.advance(_record(i))
    progress.advance(_record(3, ok=False))
    progress.end_level(level_stats(4, [_record(i) for i in range(4)], 128))
    progress.message("after the level")
    progress.stop()
    assert not _alive(pid)
    text = terminal.text()
    assert "C=4" in text and "4/4" in text and "TTFT   150.0 ms" in text and "errors 1" in text
    # the final frame was on screen before the next message
    assert text.rindex("4/4") < text.index("after the level")


def test_end_of_level_figures_arrive_even_when_updates_are_throttled(terminal):
    progress = LevelProgress(file=terminal.file)
    records = [_record(i) for i in range(50)]
    _level(progress, records)
    progress.stop()
    assert "50/50" in terminal.text()


def test_a_dead_renderer_falls_back_to_lines(terminal):
    progress = LevelProgress(file=terminal.file)
    pid = progress.renderer_pid
    assert pid is not None
    progress.start_level(4, 2)
    os.kill(pid, 9)
    progress.advance(_record(0))
    progress.advance(_record(1))
    progress.end_level(level_stats(4, [_record(0), _record(1)], 128))
    progress.stop()
    assert not progress.live and progress.renderer_pid is None
    assert "C=4: 2 requests" in terminal.text()
