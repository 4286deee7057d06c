"""`run --bundled vllm` without vLLM itself: flags, the stored server args, a failed install,
and the server lifecycle's handling of a server that dies mid-run (fast; in `make test`)."""

from __future__ import annotations

import os
import signal
import sys
import time
from types import SimpleNamespace

from engram_bench import cli, parser, run_config
from harness.results.store import Store
from runners.lifecycle import ManagedServer
from runners.vllm import setup
from tests.helpers import group_alive, run_cli


def test_bundled_vllm_runs_the_device_profile_through_max_num_seqs(tmp_path):
    args = parser.build_parser().parse_args(
        ["run", "--bundled", "vllm", "--device", "rtx-pro-6000", "--db", str(tmp_path / "b")])
    config, _ = run_config.config_for(args, Store(tmp_path / "b"))
    assert config.server_args[0] == "vllm"
    flags = config.server_args[1:]
    assert flags[flags.index("--max-num-seqs") + 1] == "16"  # the profile's running limit
    assert "--enforce-eager" in flags and "--kv-cache-memory-bytes" in flags
    assert config.levels == (1, 2, 4, 8, 16, 32) and config.table_placement == ""
    assert config.prompts == "text"  # natural prose, as for the bundled Engram server


def test_engram_only_flags_are_refused_with_vllm(tmp_path):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--bundled", "vllm", "--device", "cpu", "--placement", "host",
                   "--table-size-gb", "1", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("engram-bench: error: --placement, --table-size-gb set up "
                                   "the bundled Engram server, not vLLM: drop them or leave "
                                   "out --bundled vllm")
    assert Store(db).runs() == []


def test_bundled_and_url_contradict(tmp_path):
    proc = run_cli("run", "--bundled", "vllm", "--url", "http://127.0.0.1:9/v1", "--db",
                   str(tmp_path / "b.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("engram-bench: error: --bundled starts a server and --url "
                                   "sweeps one already running: give one of them")


def test_a_failed_install_names_its_step_exits_2_and_stores_nothing(tmp_path, monkeypatch,
                                                                     capsys):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"  # a "pip" that finds nothing, like an index without vLLM
    fake.write_text('#!/bin/sh\nfor a; do last=$a; done\n'
                    'echo "ERROR: No matching distribution found for $last" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setattr(setup, "VENV", venv)
    monkeypatch.setattr(setup, "STAMP", venv / ".installed-stamp")
    db = tmp_path / "b.duckdb"
    code = cli.main(["run", "--bundled", "vllm", "--device", "cpu", "--db", str(db),
                     "--no-progress"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # cmd_run installed its own
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"engram-bench: error: installing torch==2.13.0 failed (exit 1): ERROR: "
                     f"No matching distribution found for torch==2.13.0 (log: "
                     f"{venv / 'install.log'})")
    assert not (venv / ".installed-stamp").exists()
    assert Store(db).runs() == []


def test_too_little_disk_is_said_before_pip_runs(tmp_path, monkeypatch, capsys):
    venv = tmp_path / "venv"
    monkeypatch.setattr(setup, "VENV", venv)
    monkeypatch.setattr(setup, "STAMP", venv / ".installed-stamp")
    monkeypatch.setattr(setup.shutil, "disk_usage", lambda _: SimpleNamespace(free=2 * 10**9))
    assert setup.main() == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"vllm setup: error: 2.0 GB free at {venv}; installing vLLM needs "
                            "about ")
    assert error.endswith("GB: free some space and rerun")
    assert not (venv / "install.log").exists()  # nothing was started


def test_the_cause_is_pips_error_line_not_a_traceback_line(tmp_path):
    log = tmp_path / "install.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "ERROR: Could not install packages due to an OSError: [Errno 28] No space "
                   "left on device\n\n  return self._prepare_linked_requirement(req)\n")
    assert setup._cause(log) == ("ERROR: Could not install packages due to an OSError: "
                                 "[Errno 28] No space left on device")


def test_a_server_killed_outright_is_noticed_and_what_it_left_is_killed(tmp_path):
    """vLLM's API server leaves its engine and worker processes running when it is killed
    with SIGKILL; the lifecycle kills its whole process group and says how it ended."""
    script = 'sleep 300 & exec "$0" -m harness.mock_server "$@"'  # a child left in its group
    with ManagedServer(["bash", "-c", script, sys.executable], "the test server",
                       tmp_path / "logs", startup_timeout_s=30) as server:
        pid = server.proc.pid
        assert len(group_alive(pid)) == 2
        assert server.death is None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.death is None or group_alive(pid):
            assert time.monotonic() < deadline, (server.death, group_alive(pid))
            time.sleep(0.05)
        assert server.death.startswith("the test server was killed by signal 9 during the "
                                       "run; its log ends: ")
        assert f"(log: {server.log_path})" in server.death


def test_a_server_stopped_on_purpose_is_no_death(tmp_path):
    script = 'sleep 300 & exec "$0" -m harness.mock_server "$@"'
    server = ManagedServer(["bash", "-c", script, sys.executable], "the test server",
                           tmp_path / "logs", startup_timeout_s=30)
    with server:
        pid = server.proc.pid
    assert server.death is None
    assert not group_alive(pid)
