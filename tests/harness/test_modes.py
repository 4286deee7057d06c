"""Load modes come from one registry: a mode added there is a --mode choice, other modes'
flags are refused to it, and its levels run, are stored and resume like the built-in ones'."""

import itertools
import types

import pytest

from engram_bench.parser import build_parser
from engram_bench.run_config import config_for
from harness.config import ConfigError
from harness.results.store import Store
from harness.run import modes
from tests.helpers import ROOT

DEAD_URL = "http://127.0.0.1:9/v1"
EXAMPLE = "# harness/run/modes/serial.py\n"  # the first line of docs/design.md's worked example


def _worked_example() -> types.ModuleType:
    """docs/design.md's example mode (its C workers take turns, one request in flight at a
    time), run as the module it says it is, so the docs show a mode that works."""
    design = (ROOT / "docs" / "design.md").read_text()
    start = design.index(EXAMPLE)
    module = types.ModuleType("harness.run.modes.serial")
    exec(compile(design[start:design.index("```", start)], "docs/design.md", "exec"),
         module.__dict__)
    return module


@pytest.fixture
def serial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(modes.MODES, "serial", _worked_example().MODE)


def _config(tmp_path, *flags: str):
    args = build_parser().parse_args(["run", "--url", DEAD_URL, *flags])
    return config_for(args, Store(tmp_path / "none.duckdb"))[0]


def test_a_registered_mode_is_a_choice_and_refuses_the_flags_of_others(serial, tmp_path,
                                                                       capsys):
    config = _config(tmp_path, "--mode", "serial", "--levels", "1,2")
    assert (config.mode, config.levels) == ("serial", (1, 2))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert "serial: C workers, one request at a time" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(ConfigError, match="--think-time needs --mode users"):
        _config(tmp_path, "--mode", "serial", "--think-time", "1")
    with pytest.raises(ConfigError, match="--rates needs --mode rate"):
        _config(tmp_path, "--mode", "serial", "--rates", "1")
    for flag, value in (("--duration", "30"), ("--arrival", "constant")):
        with pytest.raises(ConfigError, match=f"^{flag} needs --mode rate$"):
            _config(tmp_path, "--mode", "serial", flag, value)


def test_a_registered_mode_runs_stores_and_resumes_its_levels(serial, sweep):
    first = sweep(levels=(1, 2), rounds=2, mode="serial", server_metrics=False,
                  input_tokens=16, output_tokens=4)
    stored = sorted((r.concurrency, r.round, r.worker) for r in first.records)
    assert stored == [(c, rnd, w) for c in (1, 2) for rnd in range(2) for w in range(c)]
    level = sorted((r for r in first.records if r.concurrency == 2), key=lambda r: r.sent_at)
    for earlier, later in itertools.pairwise(level):  # one request in flight at a time
        assert later.sent_at * 1000 >= earlier.sent_at * 1000 + earlier.latency_ms - 1
    before = {(r.concurrency, r.round, r.worker): r.sent_at for r in first.records}
    with first.store._connect() as con:  # a run killed during the second round of C=2
        con.execute("DELETE FROM requests WHERE concurrency = 2 AND round = 1")
        con.execute("UPDATE runs SET status = 'aborted'")
    again = sweep(first.server, config=first.config, store=first.store, run_id=first.run_id,
                  resume=True)
    after = {(r.concurrency, r.round, r.worker): r.sent_at for r in again.records}
    assert sorted(after) == stored
    assert [k for k in stored if after[k] != before[k]] == [(2, 1, 0), (2, 1, 1)]
