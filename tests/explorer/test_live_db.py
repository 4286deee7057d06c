"""The explorer reading a database that a bench is writing at the same time."""

import subprocess
import sys
import time

from harness.results.store import Store
from tests.explorer.apptest import app
from tests.helpers import ROOT


def test_pages_render_while_a_bench_writes(monkeypatch, mock_process, tmp_path):
    url = mock_process("--ttft-ms", "2", "--itl-ms", "1")
    db = tmp_path / "bench.duckdb"
    bench = subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--url", url, "--levels", "1,2,4",
         "--rounds", "15", "--output-tokens", "16", "--no-progress", "--db", str(db)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    renders = 0
    deadline = time.monotonic() + 120
    while bench.poll() is None:
        assert time.monotonic() < deadline
        for page in (None, "views/run.py", "views/capacity.py"):
            app(monkeypatch, db, page)  # asserts no exception on the page
            renders += 1
    assert bench.returncode == 0, bench.stderr.read()
    assert renders >= 3
    run = Store(db).runs()[0]
    assert run.status == "complete"
    assert len(Store(db).requests(run.run_id)) == (1 + 2 + 4) * 15  # nothing lost
    at = app(monkeypatch, db)
    assert at.metric[0].value == "1"
