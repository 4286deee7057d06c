"""Where a trace changed since a run began on it: the first changed line, to the line for a
short window and within a few lines for a long one; a run stored before that was kept is
still told its trace changed, and an unchanged one is not."""

from __future__ import annotations

import json
import re

from harness.run.trace import source
from harness.run.trace.changes import changed, fingerprint


def _trace(path, n, edit=None):
    lines = [{"timestamp": 10 * k, "input_length": 100, "output_length": 4} for k in range(n)]
    if edit is not None:
        lines[edit - 1]["output_length"] = 5
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return source.read(path)


def test_an_unchanged_trace_is_not_changed_and_a_short_ones_line_is_named(tmp_path):
    path = tmp_path / "t.jsonl"
    stored = fingerprint(_trace(path, 40))
    assert changed(_trace(path, 40), stored) is None
    assert changed(_trace(path, 40, edit=17), stored) == f"trace {path} has changed at line 17"


def test_a_long_traces_first_change_is_named_within_a_few_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    stored = fingerprint(_trace(path, 3000))
    said = changed(_trace(path, 3000, edit=1234), stored)
    assert said is not None
    found = re.fullmatch(rf"trace {re.escape(str(path))} has changed between lines "
                         r"([\d,]+) and ([\d,]+)", said)
    assert found, said
    first, last = (int(x.replace(",", "")) for x in found.groups())
    assert first <= 1234 <= last and last - first < 20
    assert len(stored) < 4096  # kept in the run's config


def test_requests_gone_from_or_added_to_the_end_are_named(tmp_path):
    path = tmp_path / "t.jsonl"
    stored = fingerprint(_trace(path, 40))
    assert changed(_trace(path, 30), stored) == f"trace {path} has changed after line 30"
    assert changed(_trace(path, 45), stored) == f"trace {path} has changed at line 41"


def test_a_run_stored_with_the_windows_digest_alone_is_still_checked(tmp_path):
    path = tmp_path / "t.jsonl"
    stored = _trace(path, 40).digest()
    assert changed(_trace(path, 40), stored) is None
    assert changed(_trace(path, 40, edit=3), stored) == f"trace {path} has changed"
