"""A bare `streamlit run explorer/app.py` from the repository is as safe as `make explore`:
the project's .streamlit/config.toml binds it to this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runners.lifecycle import free_port
from tests.helpers import ROOT, wait_for_port

LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc shows


def _listening(port: int) -> set[str]:
    """The local addresses with a listening socket on `port` (from /proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_a_bare_streamlit_run_listens_on_loopback_only(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "explorer/app.py", "--server.port", str(port)],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                       "ENGRAM_BENCH_DB": str(tmp_path / "none.duckdb")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout_s=60)
        addresses = _listening(port)
        assert addresses and addresses <= LOOPBACK, addresses
    finally:
        proc.terminate()
        proc.wait(10)
