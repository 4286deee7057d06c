"""`run --device ...`: the bundled server started, swept, recorded and always stopped."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.store import Store
from tests.helpers import ROOT, processes, run_cli, stored_rows, wait_while_running

TINY = ("--preset", "tiny", "--table-gb", "0.004", "--output-tokens", "4",
        "--input-tokens", "32", "--no-progress")


def servers_in(cwd: Path) -> list[int]:
    """Bundled-server processes whose working directory is `cwd`."""
    def serves_in(entry: Path) -> bool:
        cmd = (entry / "cmdline").read_bytes().split(b"\0")
        return b"runners.engram" in cmd and Path(os.readlink(entry / "cwd")) == cwd

    return [pid for pid, serving in processes(serves_in).items() if serving]


def wait_gone(cwd: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while servers_in(cwd):
        assert time.monotonic() < deadline, f"server left behind: {servers_in(cwd)}"
        time.sleep(0.1)


@pytest.mark.parametrize(("device", "placement"), [("spark", "nvme"), ("rtx-pro-6000", "host"),
                                                   ("b300", "device")])
def test_device_profiles_start_the_server_with_their_placement(tmp_path, device, placement):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--device", device, "--levels", "1,2", "--rounds", "1", "--db",
                   str(db), *TINY, "--json", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["device"], summary["table_placement"], summary["engine"]) == (
        device, placement, "engram-bench")
    assert [lv["requests"] for lv in summary["levels"]] == [1, 2]
    store = Store(db)
    stats = store.server_stats(summary["run_id"])
    assert [s["concurrency"] for s in stats] == [1, 2]
    assert stats[0]["after"]["placement"] == placement
    after = stats[0]["after"]
    assert after["bytes_requested_per_token"] == after["bytes_requested"] / after["tokens"] > 0
    assert store.run(summary["run_id"]).status == "complete"
    assert list((tmp_path / "results" / "logs").glob("server-*.log"))
    wait_gone(tmp_path)


def test_ctrl_c_and_kill_leave_no_server_behind(tmp_path):
    statuses = []
    for sig in (signal.SIGINT, signal.SIGKILL):
        db = tmp_path / f"{sig.name}.duckdb"
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram_bench", "run", "--device", "cpu", "--levels", "1",
             "--rounds", "1000", "--db", str(db), *TINY], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_while_running(lambda db=db: stored_rows(db), proc, "a stored round", timeout_s=120,
                           poll_s=0.2)
        assert servers_in(tmp_path)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        assert proc.returncode == (130 if sig == signal.SIGINT else -9)
        wait_gone(tmp_path)
        statuses += [r.status for r in Store(db).runs()]
    assert statuses == ["aborted", "running"]  # Ctrl-C marks it; a kill cannot


def test_a_server_that_fails_to_start_gives_its_error_and_no_run(tmp_path):
    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    (tables / "tiny-0.004gib.bin").write_bytes(b"something else entirely" * 100)
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--device", "cpu", "--db", str(db), *TINY, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "the bundled server exited with code 2" in proc.stderr
    assert "not an Engram table file" in proc.stderr
    assert Store(db).runs() == []
    wait_gone(tmp_path)


def test_make_bench_quick_on_a_fresh_checkout(tmp_path):
    """The README's main command: profile -> bundled server -> sweep -> DuckDB -> summary."""
    db = tmp_path / "bench.duckdb"
    proc = subprocess.run(["make", "bench", "DEVICE=spark", "QUICK=1", f"DB={db}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Max C" in proc.stdout
    run = Store(db).runs()[0]
    assert (run.device, run.table_placement, run.status) == ("spark", "nvme",
                                                                      "complete")
    assert run.levels == [1, 2] and run.rounds == 2
    assert Store(db).server_stats(run.run_id)
    report = tmp_path / f"report-{run.run_id}.html"  # beside the results file, its path said
    assert f"report: {report}" in proc.stdout and report.stat().st_size > 0


def servers_tagged(tag: bytes) -> list[int]:
    """Bundled-server processes that carry `tag` in their environment: the ones a command
    started, apart from those of tests that run beside it in the same checkout."""
    def serves_for(entry: Path) -> bool:
        cmd = (entry / "cmdline").read_bytes().split(b"\0")
        return b"runners.engram" in cmd and tag in (entry / "environ").read_bytes().split(b"\0")

    return [pid for pid, serving in processes(serves_for).items() if serving]


def test_make_bench_drives_an_external_endpoint(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "5", "--itl-ms", "1")
    db = tmp_path / "bench.duckdb"
    tag = f"ENGRAM_BENCH_TEST_TAG={tmp_path}"
    log = tmp_path / "make.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["make", "bench", f"URL={url}", "MODEL=mock-model",
                                 "DEVICE=rtx-pro-6000", "PLACEMENT=host", "QUICK=1", f"DB={db}"],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "ENGRAM_BENCH_TEST_TAG": str(tmp_path)})
        started, deadline = [], time.monotonic() + 300
        while proc.poll() is None:  # a bundled server lives as long as its run: look meanwhile
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            started += servers_tagged(tag.encode())
            time.sleep(0.05)
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert not started  # no bundled server was started for an external URL
    run = Store(db).runs()[0]
    assert (run.device, run.engine, run.table_placement, run.target_url) == (
        "rtx-pro-6000", "mock", "host", url)
    assert len(Store(db).requests(run.run_id)) == 1 * 2 + 2 * 2


def test_a_port_taken_meanwhile_is_retried_on_another(tmp_path, monkeypatch):
    import socket

    from runners import lifecycle

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    ports = iter([taken])
    real = lifecycle.free_port
    monkeypatch.setattr(lifecycle, "free_port", lambda: next(ports, None) or real())
    monkeypatch.chdir(tmp_path)
    args = ["--device", "cpu", "--preset", "tiny", "--table-size-gb", "0.004"]
    try:
        with lifecycle.BundledServer(args, log_dir=tmp_path / "logs") as server:
            assert server.port != taken
            assert server._healthy()
        logs = [p.read_text().lower() for p in (tmp_path / "logs").glob("*.log")]
        assert len(logs) == 2 and any("address already in use" in text for text in logs)
    finally:
        squatter.close()
    wait_gone(tmp_path)
