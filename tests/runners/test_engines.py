"""The managed engines' registry: --bundled's choices and help, which engine a run's stored
server args start (runs stored before engines were named included), another engine's flags
refused, and an engine added to the registry alone serving a run end to end."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import signal
import sys
from collections.abc import Sequence

import pytest

from engram_bench import cli
from engram_bench.errors import UserError
from engram_bench.parser import build_parser
from engram_bench.run_config import config_for
from harness.config import RunConfig, StoredRun
from harness.results.handover.measured import reproduce
from harness.results.metrics import Targets
from harness.results.run_row import RunRow
from harness.results.store import Store
from runners import engines
from runners.engines.base import EngineFlagError, ManagedEngine, Say
from runners.engram.__main__ import build_parser as serve_parser
from runners.lifecycle import ManagedServer
from runners.profiles import DeviceProfile


class Mock(ManagedEngine[None]):
    """The harness's mock server as a managed engine: one module and one registry line."""

    name = "mock"
    help = "the harness's mock server"
    title = "the mock server"
    script = 'exec "$0" -m harness.mock_server "$@"'

    def options(self, args: argparse.Namespace) -> None:
        return None

    def server_args(self, options: None, device: DeviceProfile) -> tuple[str, ...]:
        return (self.name, "--ttft-ms", "5", "--itl-ms", "1")

    def serve(self, server_args: Sequence[str],
              say: Say) -> contextlib.AbstractContextManager[ManagedServer]:
        say(f"starting {self.title}")
        return ManagedServer(["bash", "-c", self.script, sys.executable, *server_args[1:]],
                             self.title, startup_timeout_s=60)


class Crashing(Mock):
    """A server that crashes as vLLM's does when its engine dies: it stops listening (here
    6 s after its start, mid-run), and its process ends 5 s later."""

    name = "crashing"
    title = "the crashing server"
    script = '"$0" -m harness.mock_server "$@" & sleep 6; kill -9 $!; sleep 5; exit 3'


def _config(tmp_path, *flags: str):
    args = build_parser().parse_args(["run", *flags, "--db", str(tmp_path / "b.duckdb")])
    return config_for(args, Store(tmp_path / "b.duckdb"))[0]


def test_bundled_choices_are_the_registry_and_engram_is_the_default():
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    bundled = next(a for a in run._actions if a.dest == "bundled")
    assert bundled.choices == tuple(engines.ENGINES) == ("engram", "vllm")
    assert engines.DEFAULT is engines.ENGINES["engram"]


@pytest.mark.parametrize("bundled", ["engram", "vllm"])
def test_each_engines_stored_args_start_that_engine_again(tmp_path, bundled):
    config = _config(tmp_path, "--device", "cpu", "--bundled", bundled)
    assert engines.engine_of(config.server_args) is engines.ENGINES[bundled]


def test_the_bundled_server_a_run_starts_reasons_as_asked(tmp_path):
    config = _config(tmp_path, "--device", "cpu", "--reasoning-tokens", "12")
    args = list(config.server_args)
    assert args[args.index("--reasoning-tokens") + 1] == "12"
    assert "--reasoning-tokens" not in _config(tmp_path, "--device", "cpu").server_args
    served = serve_parser().parse_args(list(config.server_args))
    assert served.reasoning_tokens == 12
    shared = _config(tmp_path, "--device", "cpu", "--reasoning-share", "0.3").server_args
    assert serve_parser().parse_args(list(shared)).reasoning_share == 0.3


def test_runs_stored_before_engines_were_named_resolve_as_they_did():
    """Old runs stored the serve flags alone (the bundled server) or led by `vllm`."""
    old_engram = ("--device", "spark", "--preset", "qwen-mini", "--placement", "nvme")
    assert engines.engine_of(old_engram) is engines.ENGINES["engram"]
    assert engines.engine_of(("vllm", "--max-num-seqs", "8")) is engines.ENGINES["vllm"]
    with pytest.raises(engines.UnknownEngine, match="no engine of this version starts"):
        engines.engine_of(("llama-server", "--ctx-size", "1024"))


def test_the_engram_engines_flags_are_refused_with_another_engine(tmp_path):
    with pytest.raises(EngineFlagError) as refused:
        _config(tmp_path, "--device", "cpu", "--bundled", "vllm", "--io", "direct",
                "--decode", "sample")
    assert str(refused.value) == ("--io, --decode set up the bundled Engram server, not vLLM: "
                                  "drop them or leave out --bundled vllm")
    with pytest.raises(EngineFlagError, match=r"^--preset set up the bundled Engram server"):
        _config(tmp_path, "--device", "cpu", "--bundled", "vllm", "--preset", "tiny")


def test_a_table_state_is_refused_before_a_server_whose_table_is_in_no_file_starts(tmp_path):
    """Settled with the run's config: vLLM would load its model first, only to be refused."""
    for flags in (("--bundled", "vllm"), ("--placement", "host")):
        with pytest.raises(UserError, match=r"^--table-state drops or warms the table's file"):
            _config(tmp_path, "--device", "spark", "--table-state", "cold", *flags)
    config = _config(tmp_path, "--device", "spark", "--placement", "nvme", "--table-state", "cold")
    assert config.table_state == "cold"


def _stored(config: RunConfig, **changed: object) -> RunRow:
    return RunRow(run_id="r", status="complete", mode=config.mode, levels=list(config.levels),
                  rounds=config.rounds, output_tokens=config.output_tokens,
                  config=json.dumps({**config.to_json_dict(), **changed}))


@pytest.mark.parametrize("flags", [("--placement", "host", "--preset", "tiny", "--table-size-gb",
                                    "0.004", "--io", "direct", "--reasoning-share", "0.25"),
                                   ("--bundled", "vllm")])
def test_the_command_to_measure_again_starts_the_same_server(tmp_path, flags):
    config = _config(tmp_path, "--device", "spark", *flags)
    command = reproduce(_stored(config), Targets())
    again = _config(tmp_path, *shlex.split(command)[2:])
    assert again.server_args == config.server_args and again.levels == config.levels


def test_a_run_stored_before_its_servers_flags_were_gives_no_command_to_measure_again(tmp_path):
    """Its command would start the default engine, whichever it ran."""
    vllm = _config(tmp_path, "--device", "spark", "--bundled", "vllm")
    old = {k: v for k, v in vllm.to_json_dict().items() if k != "server_flags"}
    assert reproduce(RunRow(run_id="r", status="complete", mode="closed", levels=[1],
                            rounds=10, output_tokens=128, config=json.dumps(old)),
                     Targets()) == ""


def test_an_engine_added_to_the_registry_alone_serves_a_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # its log under results/logs here
    monkeypatch.setitem(engines.ENGINES, "mock", Mock())
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "mock, the harness's mock server" in " ".join(run_help.split())
    db = tmp_path / "b.duckdb"
    try:
        code = cli.main(["run", "--bundled", "mock", "--device", "cpu", "--levels", "1",
                         "--rounds", "2", "--input-tokens", "16", "--output-tokens", "8",
                         "--db", str(db), "--no-progress", "--json"])
    finally:  # cmd_run installed its own
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
    assert code == 0
    out = capsys.readouterr()
    assert "starting the mock server" in out.err
    summary = json.loads(out.out.strip().splitlines()[-1])
    run = Store(db).run(summary["run_id"])
    assert run.status == "complete"
    config = StoredRun.from_json(run.config).config
    assert config is not None and config.server_args[0] == "mock"
    assert engines.engine_of(config.server_args).title == "the mock server"


def test_a_managed_server_that_stops_listening_before_it_exits_fails_the_run_as_its_crash(
        tmp_path, monkeypatch, capsys):
    """The run's next round finds no listener while the process still runs: the run waits
    for its end and says how it ended, not that the server stopped answering."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(engines.ENGINES, "crashing", Crashing())
    db = tmp_path / "b.duckdb"
    try:
        code = cli.main(["run", "--bundled", "crashing", "--device", "cpu", "--levels", "1",
                         "--rounds", "100000", "--input-tokens", "16", "--output-tokens", "8",
                         "--db", str(db), "--no-progress"])
    finally:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("engram-bench: error: the crashing server exited with code 3 "
                            "during the run; its log ends: "), error
    [run] = Store(db).runs()
    assert run.status == "failed" and "exited with code 3" in (run.error or "")
    assert Store(db).requests(run.run_id)  # what it measured before is kept
