"""The agent beside a server `run --device` started itself: `engram-bench agent` on the
server's process tree (and its table file, where the server reads it from disk), in a
process of its own on a free loopback port, stopped with the server. So a bundled run has
its host figures from the same reader as a real deployment's."""

from __future__ import annotations

import contextlib
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence

from runners.lifecycle import die_with_parent

START_TIMEOUT_S = 30.0
_URL = re.compile(r"serving (http://\S+/metrics)")


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """The agent's first line on stdout ('' if it ended or said nothing in time)."""
    assert proc.stdout is not None
    deadline, out = time.monotonic() + timeout_s, b""
    while not out.endswith(b"\n") and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready or not (byte := proc.stdout.read(1)):
            break
        out += byte
    return out.decode(errors="replace").strip()


@contextlib.contextmanager
def watching(pid: int, tables: Sequence[str], say: Callable[[str], None],
             start_timeout_s: float = START_TIMEOUT_S) -> Iterator[str | None]:
    """Yields the URL of an agent on process `pid`'s tree and `tables`, stopped on exit; None,
    said in one line, where it could not start (the run then goes on without host
    figures)."""
    command = [sys.executable, "-m", "runners.host_agent", "--pid", str(pid), "--port", "0",
               *(arg for path in tables for arg in ("--table", path))]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, bufsize=0, preexec_fn=die_with_parent)
    try:
        line = _first_line(proc, start_timeout_s)
        if (found := _URL.search(line)) is None:
            proc.kill()
            _, err = proc.communicate(timeout=5)
            why = err.decode(errors="replace").strip().splitlines()[-1:] or [line or "nothing"]
            say(f"warning: the host agent did not start ({why[0]}): this run has no host "
                "figures")
            yield None
            return
        while line:  # the banner: a line, and one for each figure that will be short
            say(line)
            line = _first_line(proc, 0.2)
        yield found.group(1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
