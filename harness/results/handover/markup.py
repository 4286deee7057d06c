"""HTML built by hand, escaped by default: every value that reaches the page goes through
`text`, and data for the page's scripts through `script_json`, so a model id or label such as
`<img src=x onerror=alert(1)>` shows as text."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence

Cell = object  # anything shown in a table cell: str, number, None (shown as "-")


class Markup(str):
    """HTML that is already safe: `text` leaves it as it is."""


def text(value: object) -> Markup:
    """Any value as HTML text: escaped unless it is Markup already."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def tag(name: str, *children: object, **attrs: object) -> Markup:
    """<name attrs>children</name>, each attribute and child escaped (a child that is
    Markup kept); `class_` names the class attribute."""
    shown = "".join(f' {k.rstrip("_").replace("_", "-")}="{text(v)}"'
                    for k, v in attrs.items() if v is not None)
    return Markup(f"<{name}{shown}>{''.join(text(c) for c in children)}</{name}>")


def join(parts: Iterable[object]) -> Markup:
    return Markup("".join(text(p) for p in parts))


def number(value: object, digits: int = 1) -> str:
    """A figure as a table shows it: floats to `digits` decimals, None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Cell]], caption: str = "",
          class_: str = "") -> Markup:
    """A table of escaped cells (no header row for no `headers`); numbers right-aligned by
    the stylesheet."""
    head = tag("thead", tag("tr", join(tag("th", h) for h in headers))) if headers \
        else Markup("")
    body = join(tag("tr", join(tag("td", c if isinstance(c, Markup) else number(c),
                                   class_="num" if _numeric(c) else None) for c in row))
                for row in rows)
    return tag("table", tag("caption", caption) if caption else Markup(""),
               head, tag("tbody", body), class_=class_ or None)


def _numeric(cell: Cell) -> bool:
    return isinstance(cell, int | float) and not isinstance(cell, bool)


def script_json(value: object) -> Markup:
    """JSON for a <script> block: `</`, `<!--` and the line separators JavaScript reads as
    line ends cannot end the block or start a comment in it."""
    data = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return Markup(data.replace("</", "<\\/").replace("<!--", "<\\u0021--")
                  .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
