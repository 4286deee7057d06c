"""`engram-bench run` with its output piped, and the box tables in printed text: what the
piped-output and sample-output tests read."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.mock_server import MockConfig, ThreadedMockServer
from tests.helpers import FAST, run_cli

LEVELS = (1, 2)


def run_piped(db: Path) -> subprocess.CompletedProcess:
    """`engram-bench run` against a fake server, stdout and stderr each into a pipe."""
    with ThreadedMockServer(MockConfig(**FAST)) as server:
        done = run_cli("run", "--url", server.url, "--levels", ",".join(map(str, LEVELS)),
                       "--rounds", "1", "--db", str(db))
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
