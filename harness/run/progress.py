"""Progress per level on stderr: a rich bar on a terminal, one line per level otherwise.

The bar is drawn by a child process (`python -m harness.run.progress`), never in the process
that timestamps chunks. Drawn there, rich's refresh thread holds the GIL for each frame, so
the event loop timestamps late whatever arrives meanwhile, and its CPU counts against the
harness's (make bench-harness measured both, README). The timing process only sends a line
of cumulative figures now and then (`_SEND_EVERY_NS`), on a non-blocking pipe: when the pipe
is full the line is dropped, as the next one carries the same figures. A level ends with a
handshake, so the finished bar is on screen before anything else is printed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console

from common.console import output_console

if TYPE_CHECKING:
    from harness.records import RequestRecord
    from harness.results.metrics import LevelStats

REFRESH_PER_SECOND = 4.0  # frames the renderer draws; it runs in its own process
_SEND_EVERY_NS = 100_000_000  # figures reach the renderer at most this often
_READY_S = 10.0  # the renderer's start (Python and rich imports), waited for before a level
_ACK_S = 5.0  # the renderer's final frame of a level


class LevelProgress:
    def __init__(self, enabled: bool = True, file: TextIO | None = None) -> None:
        """`file`: where the bar and messages go (default stderr); the bar only on a terminal."""
        self.console = output_console(stderr=file is None, file=file)
        self.enabled = enabled
        self.live = enabled and self.console.is_terminal
        self._file = file
        self._renderer: subprocess.Popen | None = None
        self._ready = False
        self._on_screen = False  # a level's bar is live in the renderer
        self._last_send_ns = 0
        self._ttft_sum = 0.0
        self._tps_sum = 0.0
        self._ok = 0
        self._errors = 0
        if self.live:
            self._launch()  # early, so its start costs no measured level anything

    @property
    def renderer_pid(self) -> int | None:
        """The process drawing the bar (benchmarks meter its CPU), None when there is none."""
        return self._renderer.pid if self._renderer is not None else None

    def message(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, highlight=False)

    def notice(self, text: str) -> None:
        """Something that befell the run itself (its results writer restarted), which no
        stored figure tells: shown with the progress off too."""
        self.console.print(text, highlight=False)

    def start_level(self, concurrency: int, total: int) -> None:
        self._ttft_sum = self._tps_sum = 0.0
        self._ok = self._errors = 0
        if self._renderer is None or not self._wait_ready():
            return
        self._on_screen = self._send(f"S {concurrency} {total}\n", wait=True)
        self._last_send_ns = 0

    def advance(self, record: RequestRecord) -> None:
        """Called as each request ends, on the event loop: a few counters, at most one
        short non-blocking write per `_SEND_EVERY_NS`."""
        if record.ok:
            self._ok += 1
            self._ttft_sum += record.ttft_ms or 0.0
            self._tps_sum += record.tps or 0.0
        else:
            self._errors += 1
        if self._on_screen:
            now = time.perf_counter_ns()
            if now - self._last_send_ns >= _SEND_EVERY_NS:
                self._last_send_ns = now
                self._send(self._figures("U"), wait=False)

    def end_level(self, stats: LevelStats) -> None:
        if self._on_screen and self._finish_bar():
            return
        if self.enabled:
            from harness.results.metrics import level_name  # not in the renderer's process

            ttft, tps = (f"{v:.1f}" if v is not None else "-" for v in (
                stats.number("mean_ttft_ms"), stats.number("mean_tps")))
            print(f"{level_name(stats)}: {stats.requests} requests, mean TTFT {ttft} ms, "
                  f"mean TPS {tps}, errors {stats.errors}", file=self._file or sys.stderr,
                  flush=True)

    def stop(self) -> None:
        """Leave the bar as it stands and end the renderer (Ctrl-C, end of run)."""
        if self._on_screen:
            self._finish_bar()
        proc, self._renderer = self._renderer, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.console.show_cursor(True)
        proc.stdout.close()

    # -- the renderer process --

    def _launch(self) -> None:
        stream = self._file if self._file is not None else sys.stderr
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # harness importable without install
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        try:
            stream.flush()
            self._renderer = subprocess.Popen(
                [sys.executable, "-m", "harness.run.progress", str(REFRESH_PER_SECOND)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stream, env=env,
            )
        except (OSError, ValueError):  # no descriptor behind `stream`, or no interpreter
            self.live = False
            return
        assert self._renderer.stdin is not None
        os.set_blocking(self._renderer.stdin.fileno(), False)
        atexit.register(self.stop)  # a run that ends without stop() still leaves a tidy bar

    def _figures(self, kind: str) -> str:
        return (f"{kind} {self._ok + self._errors} {self._ok} {self._errors} "
                f"{self._ttft_sum:.3f} {self._tps_sum:.3f}\n")

    def _send(self, line: str, wait: bool) -> bool:
        """Write one line (atomic: far below PIPE_BUF). A full pipe drops it unless `wait`;
        a renderer that is gone turns the bar off."""
        assert self._renderer is not None and self._renderer.stdin is not None
        fd = self._renderer.stdin.fileno()
        data = line.encode()
        try:
            try:
                os.write(fd, data)
            except BlockingIOError:
                if not wait:
                    return False
                select.select([], [fd], [], _ACK_S)
                os.write(fd, data)
        except OSError:
            self._lost()
            return False
        return True

    def _reply(self, timeout_s: float) -> bool:
        assert self._renderer is not None and self._renderer.stdout is not None
        fd = self._renderer.stdout.fileno()
        if not select.select([fd], [], [], timeout_s)[0]:
            return False
        try:
            return bool(os.read(fd, 64))
        except OSError:
            return False

    def _wait_ready(self) -> bool:
        if not self._ready:
            self._ready = self._reply(_READY_S)
            if not self._ready:
                self._lost()
        return self._ready

    def _finish_bar(self) -> bool:
        """The level's final figures, then wait until the renderer has drawn them."""
        self._on_screen = False
        if self._renderer is None or not self._send(self._figures("E"), wait=True):
            return False
        if self._reply(_ACK_S):
            return True
        self._lost()
        return False

    def _lost(self) -> None:
        """The renderer died or hangs: no more bar; levels end with a line each."""
        self._on_screen = False
        self.live = False
        proc, self._renderer = self._renderer, None
        if proc is not None:
            atexit.unregister(self.stop)
            proc.kill()
            proc.wait()
            self.console.show_cursor(True)


def _render(refresh_per_second: float) -> None:
    """The renderer: one rich bar per level, fed lines on stdin, acking on stdout."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it ends us
    with contextlib.suppress(OSError):
        os.nice(19)  # the bar waits when the harness or a local server wants the CPU
    console = Console(stderr=True)
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    progress: Progress | None = None
    task = None
    for line in sys.stdin:
        kind, *fields = line.split()
        if kind == "S":
            if progress is not None:
                progress.stop()
            progress = Progress(
                TextColumn(f"C={int(fields[0]):<4}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[figures]}"), TimeElapsedColumn(),
                console=console, transient=False, refresh_per_second=refresh_per_second,
                redirect_stdout=False, redirect_stderr=False,
            )
            progress.start()
            task = progress.add_task("level", total=int(fields[1]), figures="")
        elif kind in ("U", "E") and progress is not None and task is not None:
            done, ok, errors = (int(f) for f in fields[:3])
            ttft_sum, tps_sum = float(fields[3]), float(fields[4])
            figures = f"TTFT {ttft_sum / ok:7.1f} ms  TPS {tps_sum / ok:6.1f}" if ok else ""
            if errors:
                figures += f"  errors {errors}"
            progress.update(task, completed=done, figures=figures)
            if kind == "E":
                progress.stop()
                progress = task = None
                out.write(b"k\n")
                out.flush()
    if progress is not None:  # the parent went away mid-level: leave the terminal tidy
        progress.stop()


if __name__ == "__main__":
    _render(float(sys.argv[1]) if len(sys.argv) > 1 else REFRESH_PER_SECOND)
