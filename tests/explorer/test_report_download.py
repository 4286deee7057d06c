"""The explorer's "Download report" on the run and compare pages gives the file
`engram-bench report` writes: the two compared with the time each was written masked."""

from __future__ import annotations

import re

from harness.results.metrics import Targets
from tests.explorer.apptest import app, downloads
from tests.helpers import run_cli

GENERATED = re.compile(r'<span id="generated">[^<]*</span>')


def test_the_download_is_the_cli_report(sweep, tmp_path, monkeypatch):
    first = sweep(levels=(1, 2), rounds=2, output_tokens=8, label="<i>a</i>")
    second = sweep(first.server, store=first.store, levels=(1, 2), rounds=2, output_tokens=8)
    db = first.store.path
    at = app(monkeypatch, db, "views/run.py")
    assert "Download report" in downloads(at)
    at.switch_page("views/compare.py").run()
    assert "Download report" in downloads(at)

    from explorer import ui

    for run_ids in ([first.run_id], [first.run_id, second.run_id]):
        out = tmp_path / "cli.html"
        done = run_cli("report", *run_ids, "--db", str(db), "-o", str(out))
        assert done.returncode == 0, done.stderr
        cli = GENERATED.sub("", out.read_text(encoding="utf-8"))
        explorer = GENERATED.sub("", ui.report_bytes(run_ids, Targets()).decode("utf-8"))
        assert explorer == cli
