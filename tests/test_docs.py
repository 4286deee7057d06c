"""The docs stay true to the code: the CLI reference is the parsers' own help, and no file
points outside the repository or at the history of its development."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from engram_bench.cli_reference import page

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_cli_reference_is_the_parsers_help():
    committed = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert committed == page(), ("docs/reference/cli.md differs from the parsers: regenerate it "
                                 "with `make docs/reference/cli.md`")


def test_no_file_points_outside_the_repository_or_at_its_history():
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    shared = "shared"  # spelt in pieces, so this test's own text names nothing it bans
    banned = re.compile(rf"\.\./{shared}|{shared} folder|\bissue (#|no\. )?\d+|this sess" "ion",
                        re.I)
    design = re.compile(r"(?<!docs/)DESIGN\.md")
    hits = []
    for name in names:
        path = ROOT / name
        if not path.is_file() or path.suffix not in {".py", ".md", ".toml", ".yml", ".cfg", ""}:
            continue
        text = path.read_text(errors="replace")
        if banned.search(text) or (not name.startswith("docs/") and design.search(text)):
            hits.append(name)
    assert not hits, hits
