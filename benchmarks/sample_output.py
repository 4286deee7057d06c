"""The sample runs in README.md and the docs, printed again by today's code.

Each sample's command is run as its make target runs it (into a scratch database), stdout
piped as `make bench > log` pipes it, and the block between the sample's markers in each of its
files (`<!-- sample NAME -->` ... `<!-- /sample NAME -->`) is rewritten with a caption (the
machine, how long it took) and what the command printed. tests/test_sample_output.py checks
that every sample's tables have the columns the code prints now.

    .venv/bin/python -m benchmarks.sample_output            # every sample
    .venv/bin/python -m benchmarks.sample_output bench      # one of them
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Sample:
    """A command whose output is shown in `files`; `what` opens the caption."""

    name: str
    what: str
    args: tuple[str, ...]
    files: tuple[str, ...]


SAMPLES = (
    Sample("bench", "The full default `make bench`, against the bundled Engram server held as a "
           "DGX Spark holds its table (levels 1, 2, 4, 8, 10 rounds, 128/128 tokens, closed loop)",
           ("--device", "spark"), ("README.md", "docs/index.md")),
    Sample("vllm", "`make bench ENGINE=vllm QUICK=1` (spark's profile, levels 1 and 2, 2 rounds, "
           "128/128 tokens), against vLLM's CPU build serving the tiny Llama",
           ("--bundled", "vllm", "--device", "spark", "--levels", "1,2", "--rounds", "2"),
           ("docs/engines.md",)),
)
_SERVER_UP = re.compile(r" up at \S+ after ([\d.]+) s")
_LOAD_EVERY_S = 5.0


def block(name: str) -> re.Pattern[str]:
    """The sample `name`'s block in a file, markers included."""
    return re.compile(rf"<!-- sample {re.escape(name)} -->\n.*?<!-- /sample {re.escape(name)} -->",
                      re.S)


def measure(sample: Sample) -> str:
    """Run the sample's command; its block: markers, caption and the fenced stdout. The
    machine's 1-minute load average is read every few seconds meanwhile, as the caption says
    how busy it was (the run's own processes included)."""
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
        started = time.monotonic()
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "engram_bench", "run", "--db", f"{scratch}/bench.duckdb",
                 *sample.args], cwd=ROOT, stdout=stdout, stderr=stderr)
            while proc.poll() is None:
                loads.append(os.getloadavg()[0])
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(_LOAD_EVERY_S)
        took = time.monotonic() - started
        printed, said = out.read_text().strip("\n"), err.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"{sample.name}: the run exited {proc.returncode}:\n{said}")
    up = _SERVER_UP.search(said)
    server = f", {float(up.group(1)):.0f} s of it the server's start" if up else ""
    cores = len(os.sched_getaffinity(0))
    load = sum(loads) / len(loads)
    caption = textwrap.fill(
        f"{sample.what}, on a machine with {cores} CPU cores (1-minute load average "
        f"{load:.1f} over the run) and its output piped to a file, printed after "
        f"{took:.0f} s{server}:", 100, break_on_hyphens=False, break_long_words=False)
    return (f"<!-- sample {sample.name} -->\n{caption}\n\n```\n{printed}\n```\n"
            f"<!-- /sample {sample.name} -->")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[s.name for s in SAMPLES],
                        help="the samples to measure again (default: all)")
    names = parser.parse_args().names or [s.name for s in SAMPLES]
    for sample in (s for s in SAMPLES if s.name in names):
        text = measure(sample)
        for name in sample.files:
            path = ROOT / name
            old = path.read_text()
            found = block(sample.name).search(old)
            if found is None:
                raise SystemExit(f"{name} has no <!-- sample {sample.name} --> block")
            path.write_text(old[:found.start()] + text + old[found.end():])
            print(f"{name}: sample {sample.name} written", file=sys.stderr)


if __name__ == "__main__":
    main()
