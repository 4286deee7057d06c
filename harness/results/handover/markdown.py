"""A run's verdict and level table as Markdown (`summary --format md`), for an issue or a chat:
text from a server or a user is escaped so it cannot break the table or add markup."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import cast

from harness.results.handover.document import _verdict_text
from harness.results.handover.markup import number
from harness.results.metrics import LEVEL_FIGURES
from harness.results.render import LEVEL_TABLE, first_token_name
from harness.results.summary import Summary, row_name

_SPECIAL = re.compile(r"([\\`*_\[\]<>|#!~&])")


def escape(value: object) -> str:
    """Text as Markdown shows it literally: its markup characters backslashed, on one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def summary_markdown(s: Summary) -> str:
    """The run's title line, verdict, targets and one table row a level."""
    t = s["targets"]
    title = (f"**Run {escape(s['run_id'])}** ({escape(s['status'])}): "
             f"{escape(s['model'] or '-')} on {escape(s['device'] or '-')}, engine "
             f"{escape(s['engine'] or '-')}, table {escape(s['table_placement'] or '-')}")
    if s.get("label"):
        title += f", label {escape(s['label'])}"
    rule = (f"{t['statistic']} TPS >= {t['tps_min']:g} tok/s, {first_token_name(t)} <= "
            f"{t['ttft_max_ms']:g} ms, no errors")
    headers = ["level", *(LEVEL_FIGURES[f].title for f in LEVEL_TABLE), "passes"]
    lines = [title, "", f"**{escape(_verdict_text(s))}** ({escape(rule)})", "",
             "| " + " | ".join(escape(h) for h in headers) + " |",
             "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    for lv in s["levels"]:
        row = cast(Mapping[str, object], lv)
        cells = [escape(row_name(lv)), *(number(row.get(f)) for f in LEVEL_TABLE),
                 "yes" if lv["passes"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    if s["warnings"]:
        lines += ["", *(f"- warning: {escape(w)}" for w in s["warnings"])]
    return "\n".join(lines) + "\n"
