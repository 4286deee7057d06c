"""`engram-bench run` with its output piped, and the box tables in printed text: what the
piped-output and sample-output tests read."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from harness.mock_server import MockConfig, ThreadedMockServer
from tests.helpers import FAST, ROOT, run_cli

LEVELS = (1, 2)


def run_piped(db: Path, host: bool = False) -> subprocess.CompletedProcess:
    """`engram-bench run` against a fake server, stdout and stderr each into a pipe; with
    `host`, scraping an agent that watches the fake server's process and a table file, as a
    run that starts the bundled server does."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(ThreadedMockServer(MockConfig(**FAST)))
        flags: tuple[str, ...] = ()
        if host:
            table = db.parent / "table.bin"
            table.write_bytes(b"\0" * 65536)
            flags = ("--host-metrics", stack.enter_context(_agent(os.getpid(), table)))
        done = run_cli("run", "--url", server.url, "--levels", ",".join(map(str, LEVELS)),
                       "--rounds", "1", "--db", str(db), *flags)
    assert done.returncode == 0, done.stderr
    return done


@contextlib.contextmanager
def _agent(pid: int, table: Path) -> Iterator[str]:
    """`engram-bench agent` on `pid` and `table`, on a free port: its /metrics URL."""
    proc = subprocess.Popen([sys.executable, "-m", "engram_bench", "agent", "--pid", str(pid),
                             "--table", str(table), "--port", "0"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        found = re.search(r"serving (http://\S+/metrics)", proc.stdout.readline())
        assert found, "the agent did not say where it serves"
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(10)


def tables(text: str) -> list[list[str]]:
    """Each box table in `text`, as its lines from top border to bottom border."""
    found: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("┏"):
            found.append([])
        if found and (not found[-1] or not found[-1][-1].startswith("└")):
            found[-1].append(line)
    return found


def columns(table: list[str]) -> list[str]:
    [header] = [line for line in table if line.startswith("┃")]
    return [name.strip() for name in header.strip("┃").split("┃")]
