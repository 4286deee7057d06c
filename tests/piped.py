"""`engram-bench run` with its output piped, and the box tables in printed text: what the
piped-output and sample-output tests read."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from harness.mock_server import MockConfig, ThreadedMockServer
from tests.helpers import FAST, host_agent, run_cli

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
            flags = ("--host-metrics", stack.enter_context(host_agent(os.getpid(), table)))
        done = run_cli("run", "--url", server.url, "--levels", ",".join(map(str, LEVELS)),
                       "--rounds", "1", "--db", str(db), *flags)
    assert done.returncode == 0, done.stderr
    return done


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
