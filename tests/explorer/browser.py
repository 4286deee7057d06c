"""Debian's headless Chromium, and the app served on a fixture database for it to open: what
the browser tests share."""

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runners.lifecycle import free_port
from tests.helpers import ROOT, wait_for_port

CHROMIUM = Path("/usr/bin/chromium")


@contextlib.contextmanager
def chromium() -> Iterator:
    """Debian's headless Chromium through Playwright (a test is skipped without it, and fails
    in CI, which installs it); closed when the block ends."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (`make test` as root does)")
        pytest.skip("Debian's chromium is not installed here: as root, `make test` installs it "
                    "(or: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()


def serve(tmp_path: Path, build: Callable[[Path], object]) -> Iterator[str]:
    """The app on a fixture database that `build` writes; yields its URL."""
    db = tmp_path / "bench.duckdb"
    build(db)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "explorer/app.py", "--server.headless",
         "true", "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env={**os.environ, "ENGRAM_BENCH_DB": str(db)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
