"""`run` flags as users type them: refusals, what is stored, `--help`, old spellings."""

import json
import os
import re
from pathlib import Path

import certifi
import pytest

from engram_bench.cli import build_parser, config_for
from harness.results.store import Store
from runners.engram.__main__ import build_parser as serve_parser
from tests.conftest import run_cli

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
    config = json.loads(Store(db).run(json.loads(proc.stdout)["run_id"])["config"])
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
