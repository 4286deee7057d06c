"""A user's install: `pip install .` of a clean copy of the tree, no extras. The harness runs
there; the commands that need an extra say which one in one sentence and exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXIT_USAGE = 2


def _copy_tree(dest: Path) -> None:
    """The files git would ship (tracked and new, not ignored): no build/, .venv or results."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, names):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(src.read_bytes())


@pytest.fixture(scope="module")
def core_install(tmp_path_factory) -> tuple[Path, Path]:
    """(tree, venv): a clean copy of the tree and a venv with only `pip install .` of it."""
    base = tmp_path_factory.mktemp("core")
    tree, venv = base / "tree", base / "venv"
    _copy_tree(tree)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(tree)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tree, venv


def _cli(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "engram-bench"), *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


def _installed(venv: Path) -> set[str]:
    out = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=freeze"],
                         capture_output=True, text=True, check=True).stdout
    return {line.split("==")[0].split(" @ ")[0].lower() for line in out.splitlines()}


def test_the_core_install_has_no_extra(core_install):
    installed = _installed(core_install[1])
    assert "engram-bench" in installed
    assert not installed & {"torch", "streamlit", "plotly", "pandas", "fastapi", "httpx"}


def test_the_core_install_sweeps_a_server_and_stores_its_rows(core_install, mock_server,
                                                              tmp_path):
    db = tmp_path / "core.duckdb"
    proc = _cli(core_install[1], "run", "--url", mock_server.url, "--levels", "1,2",
                "--rounds", "2", "--db", str(db), "--no-progress", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        (requests,) = con.execute("SELECT count(*) FROM requests").fetchone()
        levels = con.execute("SELECT concurrency, requests FROM levels ORDER BY 1").fetchall()
    assert requests == (1 + 2) * 2
    assert levels == [(1, 2), (2, 4)]  # the views, read from the package's .sql files


def test_the_core_install_ships_the_schema_files(core_install):
    """The installed package reads its tables and views from its own files, not the tree's."""
    tree, venv = core_install
    script = ("import harness.results.schema as s; print(s.__file__); "
              "print('CREATE TABLE IF NOT EXISTS runs' in s.SCHEMA, "
              "'CREATE OR REPLACE VIEW levels' in s.SCHEMA, 'ALTER TABLE' in s.MIGRATIONS)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True,
                          text=True, timeout=60, cwd=venv, env=env)
    assert proc.returncode == 0, proc.stderr
    where, found = proc.stdout.splitlines()
    assert not Path(where).is_relative_to(tree)
    assert found == "True True True"


@pytest.mark.parametrize(("args", "extra"), [
    (("serve",), "server"),
    (("serve", "--device", "spark"), "server"),
    (("run", "--device", "spark", "--levels", "1"), "server"),
    (("explore",), "explorer"),
])
def test_a_command_whose_extra_is_missing_names_the_install(core_install, tmp_path, args,
                                                            extra):
    proc = _cli(core_install[1], *args, cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert f"pip install 'engram-bench[{extra}]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp_path.iterdir()), "nothing is written before the check"


def test_make_bench_with_a_url_installs_only_the_core(core_install, mock_server, tmp_path):
    """Last in this module: make installs the tree editable into the same venv, and says
    nothing of it: no warning of the build backend (setuptools warned on every editable
    install of a flat layout it had to hook into imports)."""
    tree, venv = core_install
    db = tmp_path / "bench.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "VIRTUAL_ENV"))}
    proc = subprocess.run(["make", "bench", f"VENV={venv}", f"URL={mock_server.url}",
                           "QUICK=1", f"DB={db}"], cwd=tree, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Max C" in proc.stdout
    assert not re.findall(r"\w*(?:Setuptools|BuildBackend)\w*Warning", proc.stderr), \
        proc.stderr[-2000:]
    assert "torch" not in _installed(venv)
    with duckdb.connect(str(db), read_only=True) as con:
        (runs,) = con.execute("SELECT count(*) FROM runs WHERE status = 'complete'").fetchone()
    assert runs == 1
