"""Output piped to a file (`make bench > log`, CI) reads as printed: every sentence on one
line, every table at its own width."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.piped import LEVELS, run_piped, tables


@pytest.fixture(scope="module")
def piped(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    return run_piped(tmp_path_factory.mktemp("piped") / "bench.duckdb")


def test_piped_output_keeps_each_sentence_on_one_line_and_each_table_at_its_width(piped):
    err = piped.stderr.splitlines()
    out = piped.stdout.splitlines()
    port = r"http://127\.0\.0\.1:\d+/v1"
    whole = [(err, rf"run \S+: closed mode, levels \[1, 2\], 1 rounds, target {port} model \S+"),
             (err, r"prompts: \d+ words -> \d+ prompt tokens measured \(target 128, .*\); "
                   r"source: .*\w"),
             (out, r"run \S+ \(complete\): \S+ on unlabelled device, engine \S+, table -"),
             (out, r"Max C = \d+ \(mean TPS >= 20 tok/s, TTFT <= 1000 ms, no errors\)  ->  "
                   r"chat users \d+ \(x4\), agentic users \d+ \(x1\.5\)")]
    for lines, sentence in whole:
        assert any(re.fullmatch(sentence, line) for line in lines), (sentence, lines)
    assert not [line for line in err + out if line != line.rstrip()]  # nothing padded
    printed = tables(piped.stdout)
    assert len(printed) == 2  # the levels and their token timing
    for table in printed:
        # one header line and one line per level: no cell wrapped; every line as wide
        assert len(table) == 3 + 1 + len(LEVELS), table
        assert len({len(line) for line in table}) == 1, table
