"""`make test` gets Debian's chromium for the browser tests itself (.ci/chromium): missing and
run as root with apt-get, it is installed once, said in one line; otherwise one line says how
to get it. Run here against a chromium path that does not exist, with `id` and `apt-get`
stand-ins that log what they were asked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / ".ci" / "chromium"


@pytest.fixture
def machine(tmp_path: Path):
    """Run the script on a stand-in machine: `uid` is who runs it; `apt_fails` makes apt-get
    fail as it does without the network. Returns (the run, apt-get's calls, chromium's path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    chromium = tmp_path / "usr-bin-chromium"
    calls = tmp_path / "apt-calls"

    def run(uid: int, apt_fails: bool = False, ci: bool = False):
        (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        failing = 'echo "E: Unable to locate package chromium" >&2; exit 100'
        installing = (f'[ "$1" = install ] && printf "#!/bin/sh\\n" > {chromium} '
                      f'&& chmod +x {chromium}')
        (bin_dir / "apt-get").write_text(
            f'#!/bin/sh\necho "$@" >> {calls}\n{failing if apt_fails else installing}\nexit 0\n')
        for tool in bin_dir.iterdir():
            tool.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env |= {"PATH": f"{bin_dir}:{env['PATH']}", "CHROMIUM": str(chromium),
                **({"CI": "true"} if ci else {})}
        done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=30)
        made = calls.read_text().splitlines() if calls.exists() else []
        return done, made, chromium

    return run


def test_as_root_it_installs_chromium_once_saying_so_in_one_line(machine):
    done, calls, chromium = machine(uid=0)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "installing Debian's chromium for the browser tests (apt-get install chromium)"]
    assert calls == ["update -qq", "install -y -qq chromium"]
    assert chromium.exists()
    again, calls, _ = machine(uid=0)
    assert (again.returncode, again.stdout, again.stderr, len(calls)) == (0, "", "", 2)


def test_not_root_it_says_in_one_line_how_to_get_chromium_and_installs_nothing(machine):
    done, calls, chromium = machine(uid=1000)
    assert done.returncode == 0
    [line] = done.stdout.splitlines()
    assert "browser tests will be skipped" in line and "apt-get install chromium" in line
    assert calls == [] and not chromium.exists()


def test_a_failed_install_is_one_line_and_stops_only_ci(machine):
    done, _, chromium = machine(uid=0, apt_fails=True)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and not chromium.exists()
    assert len(lines) == 2 and lines[1] == ("could not install chromium, so the browser tests "
                                            "will be skipped: E: Unable to locate package chromium")
    in_ci, _, _ = machine(uid=0, apt_fails=True, ci=True)
    assert in_ci.returncode != 0
