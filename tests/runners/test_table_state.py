"""The agent sets the table's start state on the files it was given: POST /table/drop leaves
them cold (the test's own mincore agrees), /table/warm reads them in up to a budget, and a
drop that pages another process holds mapped and locked defeat says so and is not cold."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import on_disk, read_line, start_agent
from tests.runners.test_host_agent import PAGE, _resident_pages, _table

PAGES = 256

# Maps the file shared and read-only, locks every page of it (mlock faults them in), says
# "locked" (or why not), then waits for stdin to close.
LOCKER = textwrap.dedent("""
    import ctypes, ctypes.util, mmap, os, sys
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.mlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    fd = os.open(sys.argv[1], os.O_RDONLY)
    size = os.fstat(fd).st_size
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if libc.mlock(address, size) != 0:
        print("mlock failed:", os.strerror(ctypes.get_errno()), flush=True)
    else:
        print("locked", flush=True)
    sys.stdin.read()
""")


def _post(url: str, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(url.replace("/metrics", path), method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if body.startswith(b"{") else {}


def _read_all(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


@contextlib.contextmanager
def _locker(table: Path) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(table)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, bufsize=0)
    try:
        said = read_line(proc)
        if said != "locked":
            pytest.skip(f"the helper could not lock the file: {said}")
        yield
    finally:
        proc.kill()
        proc.wait()


def test_drop_leaves_the_table_cold_and_warm_reads_it_in_up_to_the_budget(tmp_path):
    on_disk(tmp_path)
    table = _table(tmp_path, PAGES)
    _read_all(table)
    with start_agent("--pid", str(os.getpid()), "--table", str(table)) as (url, _, _):
        assert _resident_pages(table) == PAGES
        status, dropped = _post(url, "/table/drop")
        assert status == 200, dropped
        assert dropped["action"] == "drop" and dropped["cold"] is True and dropped["note"] is None
        assert dropped["resident_before_bytes"] == PAGES * PAGE
        own = _resident_pages(table)
        assert own <= 0.02 * PAGES and dropped["resident_after_bytes"] <= 0.02 * PAGES * PAGE
        status, warmed = _post(url, f"/table/warm?budget_bytes={64 * PAGE}")
        assert status == 200, warmed
        assert warmed["read_bytes"] == 64 * PAGE and "budget" in warmed["note"]
        assert _resident_pages(table) >= 64 and warmed["resident_after_bytes"] >= 64 * PAGE
        status, whole = _post(url, "/table/warm")
        assert status == 200 and whole["read_bytes"] == PAGES * PAGE and whole["note"] is None
        assert _resident_pages(table) == PAGES


def test_a_drop_that_locked_pages_defeat_says_so_and_is_not_cold(tmp_path):
    on_disk(tmp_path)
    table = _table(tmp_path, PAGES)
    with _locker(table), start_agent("--pid", str(os.getpid()), "--table", str(table)) as (
            url, _, _):
        assert _resident_pages(table) == PAGES  # mlock read the whole file in
        status, dropped = _post(url, "/table/drop")
        assert status == 200, dropped
        assert dropped["cold"] is False
        assert dropped["resident_after_bytes"] == PAGES * PAGE == dropped["table_bytes"]
        assert "not cold" in dropped["note"] and "locks" in dropped["note"]
        assert _resident_pages(table) == PAGES  # the test's own mincore: still all there


def test_an_agent_without_a_table_refuses_to_set_its_state(tmp_path):
    with start_agent("--pid", str(os.getpid())) as (url, _, _):
        for action in ("/table/drop", "/table/warm"):
            status, answer = _post(url, action)
            assert status == 409 and "without --table" in answer["error"]


def test_the_agent_acts_on_no_path_a_request_names(tmp_path):
    on_disk(tmp_path)
    (tmp_path / "given").mkdir()
    (tmp_path / "other").mkdir()
    table, other = _table(tmp_path / "given", 4), _table(tmp_path / "other", 4)
    _read_all(other)
    with start_agent("--pid", str(os.getpid()), "--table", str(table)) as (url, _, _):
        status, dropped = _post(url, f"/table/drop?path={other}")
        assert status == 200 and dropped["files"] == 1
        assert _resident_pages(other) == 4
        assert _post(url, "/table/../metrics")[0] == 404
        assert _post(url, "/metrics")[0] == 404
        status, answer = _post(url, "/table/warm?budget_bytes=-1")
        assert status == 400 and "whole number" in answer["error"]


def test_a_drop_or_a_warm_reads_every_page_where_a_scrape_reads_a_stride(tmp_path):
    """The residency a drop or a warm reports is mincore over the whole table, even one past
    the page budget a scrape asks about; and it leaves the scrapes' stride where it was."""
    from runners.host_agent import residency
    from runners.host_agent.tables import Tables

    table = tmp_path / "big.bin"
    with open(table, "wb") as f:  # sparse: four budgets' worth of pages, none on disk
        f.truncate(4 * residency.PAGE_BUDGET * residency.PAGE)
    tables = Tables([str(table)], residency.MINCORE)
    [scraped] = tables.sample()
    assert scraped.residency is not None and scraped.residency.sampled_fraction < 1
    [whole] = tables.sample(whole=True)
    assert whole.residency is not None and whole.residency.sampled_fraction == 1.0
    assert tables._phase == 1  # the one scrape's

    from runners.host_agent.agent import Agent, AgentConfig
    agent = Agent(AgentConfig(pid=os.getpid(), match=None, tables=[str(table)],
                              residency=residency.MINCORE, host="127.0.0.1", port=0))
    try:  # the agent's own drop and warm read the table so too
        for action in ("/table/drop", "/table/warm"):
            assert agent.control(action, {})[0] == 200
        assert agent.tables._phase == 0
    finally:
        agent.server._server.server_close()
