"""`run` flags as users type them: refusals, what is stored, `--help`, old spellings."""

import asyncio
import json
import os
import re
from pathlib import Path

import certifi
import pytest

from engram_bench.parser import build_parser
from engram_bench.run_config import config_for
from harness.config import ConfigError, RunConfig
from harness.results.store import Store
from harness.run import aio
from harness.run.prompts import load
from harness.run.sweep import Sweep
from harness.wire.client import Clock
from harness.wire.endpoint import Endpoint
from runners.engram.__main__ import build_parser as serve_parser
from tests.helpers import run_cli

DEAD_URL = "http://127.0.0.1:9/v1"  # never reached: these runs stop before the target


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--temperature", "-0.1"], "must be a number from 0 to 2"),
        (["--temperature", "2.5"], "must be a number from 0 to 2"),
        (["--temperature", "warm"], "must be a number from 0 to 2"),
        (["--connect-timeout", "0"], "must be a positive number"),
        (["--connect-timeout", "-3"], "must be a positive number"),
        (["--stall-timeout", "0"], "must be a positive number"),
        (["--stall-timeout", "-1"], "must be a positive number"),
        (["--request-timeout", "0"], "must be a positive number"),
        (["--timeout", "-5"], "must be a positive number"),
        (["--request-timeout", "inf"], "must be a positive number"),
        (["--ca-bundle", "/nonexistent/ca.pem"], "no such file: '/nonexistent/ca.pem'"),
        (["--ca-bundle", "{ca}", "--insecure"], "not allowed with argument --ca-bundle"),
        (["--table-size-gb", "0"], "must be a positive number"),
    ],
)
def test_nonsense_values_are_refused_and_nothing_is_stored(tmp_path, flags, message):
    ca = tmp_path / "ca.pem"
    ca.write_text("not used")
    db = tmp_path / "b.duckdb"
    flags = [f.format(ca=ca) for f in flags]
    proc = run_cli("run", "--url", DEAD_URL, "--db", str(db), *flags)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not db.exists()


def _config(tmp_path, *flags):
    args = build_parser().parse_args(["run", *flags])
    return config_for(args, Store(tmp_path / "b.duckdb"))[0]


def test_temperature_and_connection_settings_are_stored_with_the_run(mock_process, tmp_path):
    db = tmp_path / "b.duckdb"
    ca = tmp_path / "ca.pem"
    ca.write_bytes(Path(certifi.where()).read_bytes())  # any PEM: only https would use it
    proc = run_cli("run", "--url", mock_process(), "--db", str(db), "--levels", "1",
                   "--rounds", "1", "--output-tokens", "4", "--temperature", "0.7",
                   "--connect-timeout", "3", "--stall-timeout", "7.5", "--timeout", "90",
                   "--ca-bundle", os.path.relpath(ca), "--json")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(Store(db).run(json.loads(proc.stdout)["run_id"]).config)
    assert config["temperature"] == 0.7
    assert (config["connect_timeout_s"], config["stall_timeout_s"],
            config["request_timeout_s"]) == (3, 7.5, 90)
    assert config["ca_bundle"] == str(ca) and config["insecure"] is False  # absolute


def test_defaults_are_stored_as_help_states_them(tmp_path):
    config = _config(tmp_path, "--url", DEAD_URL, "--insecure")
    assert (config.temperature, config.connect_timeout_s, config.stall_timeout_s,
            config.request_timeout_s) == (0, 10, 60, 600)
    assert config.insecure and config.ca_bundle == ""


def test_old_flag_spellings_still_work(tmp_path):
    new = _config(tmp_path, "--device", "cpu", "--table-size-gb", "3", "--request-timeout", "42")
    old = _config(tmp_path, "--device", "cpu", "--table-gb", "3", "--timeout", "42")
    assert old == new
    assert dict(zip(new.server_args[::2], new.server_args[1::2], strict=True))[
        "--table-size-gb"] == "3.0"
    assert serve_parser().parse_args(["--table-gb", "3"]).table_size_gb == 3
    assert serve_parser().parse_args(["--table-size-gb", "3"]).table_size_gb == 3


def test_a_run_stored_before_the_three_timeouts_resumes_with_its_timeout(tmp_path):
    from harness.config import RunConfig

    stored = {**RunConfig(url=DEAD_URL, model="m").to_json_dict(), "timeout_s": 300.0}
    del stored["request_timeout_s"]
    assert RunConfig.from_json_dict(stored).request_timeout_s == 300


def _option_blocks(help_text: str) -> dict[str, str]:
    """Each option's entry in `--help` (its invocation and help, wrapped lines joined)."""
    blocks: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        if re.match(r"  -", line):
            current = line.split()[0].rstrip(",")
            blocks[current] = line
        elif current and line.startswith("   "):
            blocks[current] += " " + line.strip()
        else:
            current = None
    return blocks


@pytest.mark.parametrize("command", ["run", "summary", "capacity", "export", "serve"])
def test_help_shows_every_default(command):
    proc = run_cli(command, "--help", env={"COLUMNS": "100", "OPENAI_API_KEY": "sk-secret"})
    assert proc.returncode == 0
    blocks = _option_blocks(proc.stdout)
    assert len(blocks) > 3
    for option, text in blocks.items():
        if option in ("-h", "--csv"):  # help itself; a required flag has no default
            continue
        assert "default" in text, text
    assert "sk-secret" not in proc.stdout  # a key from the environment is never printed
    if command == "run":
        assert "(default: 600.0)" in blocks["--request-timeout"]
        assert "(default: 0.0)" in blocks["--temperature"]
        assert "--table-gb" in blocks["--table-size-gb"]


@pytest.mark.parametrize(
    ("flags", "sentence"),
    [  # each asked for GBs of memory (and ignored SIGTERM) before anything was refused
        (["--warmup", "1000000000"], "--warmup must be from 0 to 100,000 requests"),
        (["--rounds", "1000000000"], "above the 1,000,000 one run may hold: lower --rounds"),
        (["--input-tokens", "1000000000"], "above the 16,777,216 one request may hold"),
    ],
)
def test_oversized_runs_are_refused_before_anything_is_sent(mock_server, tmp_path, flags,
                                                            sentence):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", mock_server.url, "--db", str(db), "--levels", "1,2",
                   "--no-progress", *flags, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert sentence in proc.stderr and flags[0] in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert mock_server.server.requests_seen == 0  # not even a calibration request
    assert not db.exists()


@pytest.mark.parametrize(
    ("flags", "inside", "sentence"),
    [  # accepted before, then idle for years, or held without end
        (["--mode", "users", "--think-time", "1e9"], "3600", "at most 3,600 s"),
        (["--mode", "users", "--levels", "4", "--duty-cycle", "1e-9"], "0.001", "at least 0.001"),
        (["--mode", "rate", "--rates", "0.0001", "--duration", "1e12"], "86400",
         "at most 86,400 s"),
        (["--repeat", "1000000"], "1000", "from 1 to 1,000"),
        (["--label", "x" * 200_000], "x" * 1000, "at most 1,000 characters"),
    ],
)
def test_huge_values_of_the_smaller_flags_are_refused(tmp_path, flags, inside, sentence):
    with pytest.raises(ConfigError) as refused:
        _config(tmp_path, "--url", DEAD_URL, *flags)
    assert flags[-2] in str(refused.value) and sentence in str(refused.value)
    _config(tmp_path, "--url", DEAD_URL, *flags[:-1], inside)  # the bound itself is fine


@pytest.mark.parametrize("command", [["run", "--resume"], ["summary"], ["export", "--run"]])
def test_a_run_id_given_back_is_bounded(command, capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args([*command, "2" * 200_000])
    assert refused.value.code == 2
    assert "a run id has at most 128 characters, not 200,000" in capsys.readouterr().err


def test_a_run_is_refused_a_run_id_longer_than_the_bound(sweep):
    with pytest.raises(ConfigError, match="a run id has at most 128 characters"):
        sweep(levels=(1,), rounds=1, run_id="r" * 200_000)


def test_a_rate_level_that_would_send_no_request_is_refused_before_anything_is_sent(
        sweep, mock_server):
    """0.01 req/s over 10 s: its seeded poisson schedule holds no request (the level used to
    complete empty and be called client-bound)."""
    with pytest.raises(ConfigError, match=r"--rates 0\.01 schedules no request within --duration"):
        sweep(mock_server, levels=(), mode="rate", rates=(0.01, 1.0), duration_s=10.0)
    assert mock_server.server.requests_seen == 0


def _connections_to(port: int) -> int:
    """Established TCP connections of this machine whose far end is `port` (the clients')."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            _, _, remote, state, *_ = line.split()
            count += state == "01" and int(remote.rsplit(":", 1)[1], 16) == port
    return count


def test_warmup_sends_at_the_first_levels_concurrency_and_keeps_no_more_connections(
        mock_server):
    """30 warm-up requests at C=2: they used to open 30 connections at once and keep them."""
    config = RunConfig(url=mock_server.url, model="mock-model", levels=(2, 4), warmup=30)
    sweep = Sweep(config, Endpoint(config.url), "warm", load("words"), Clock())
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, mock_server.server.in_flight)
            await asyncio.sleep(0.001)

    async def warm() -> int:
        watcher = asyncio.create_task(watch())
        try:
            await sweep.warmup(config.warmup, 2)
        finally:
            watcher.cancel()
        return _connections_to(mock_server.server.port)

    mock_server.configure(ttft_ms=20)
    try:
        kept = aio.run(warm())
    finally:
        sweep.close()
    assert mock_server.server.requests_seen == 30
    assert kept <= 2 and peak <= 2


def test_a_resume_does_not_set_the_table_state_again(tmp_path):
    """The state was set before the run's first pass: a resume measures on as the table is
    (so it needs no agent), and the stored run still says what its start asked."""
    from harness.config import RunConfig
    from harness.results.run_row import RunRow

    stored = RunConfig(url=DEAD_URL, model="m", levels=(1, 2), table_state="warm",
                       warm_budget_gb=1.0, host_metrics=("http://127.0.0.1:9/metrics",))
    store = Store(tmp_path / "b.duckdb")
    store.initialise()
    store.create_run(RunRow(run_id="run-a", status="aborted", mode="closed", levels=[1, 2],
                            rounds=stored.rounds, output_tokens=stored.output_tokens,
                            config=json.dumps(stored.to_json_dict())))
    args = build_parser().parse_args(["run", "--resume", "run-a"])
    config, resumed = config_for(args, store)
    assert resumed == "run-a" and config.table_state == "" and config.warm_budget_gb is None
    assert json.loads(store.run("run-a").config)["table_state"] == "warm"
