"""Text from a results file, a server or a user (run ids, model ids, labels, paths), shown as
typed. Streamlit renders markdown in titles, captions, notices and help texts, so a model named
`![p](http://host/b.png)` would make the browser fetch that image; Plotly reads HTML tags in
trace names and hovers; and a name of 200k characters stalls a page. Pure string functions."""

from __future__ import annotations

import html
import re

NAME_CHARS = 80  # a run id, model or label in a chooser, a legend or a sentence
CELL_CHARS = 1000  # a table cell: sentences (verdicts, warnings) stay whole

# Marks that make markdown inside a line (CommonMark, GFM, Streamlit's own): emphasis, code,
# links and images, HTML and entities, strikethrough, math, and the slash of :material/...:
_MARKS = re.compile(r"([\\`*_\[\]!<>&~$/])")
# a colon that opens something (:red[...], :smile:, :+1:, http:), or closes a :name:
_OPENING_COLON = re.compile(r":(?=\S)")
_CLOSING_COLON = re.compile(r"(\\:[\w+\-\\/]+):")
# what GFM makes a link however it is escaped (http://, www., e-mail): a word joiner breaks it
_AUTOLINK = re.compile(r"(?<=www)(?=\.)|(?=\\:\\/\\/)|(?=@)", re.IGNORECASE)
WORD_JOINER = "\u2060"
# what starts a block where it begins the text: a heading, quote, list, rule or table
_BLOCK = re.compile(r"^([#>+\-=|]|\d+(?=[.)]))")


def shorten(text: str, limit: int = NAME_CHARS) -> str:
    """`text` on one line, cut to at most `limit` characters with an ellipsis."""
    window = 4 * limit  # enough to fill the line after runs of spaces collapse
    line = " ".join(text[:window].split())
    if len(line) <= limit and len(text) <= window:
        return line
    return line[:limit - 1].rstrip() + "…"


def markdown(text: str) -> str:
    """`text` for a Streamlit markdown element, on one line, shown as typed: a backslash
    (CommonMark's escape) before each mark that would make an image, link, emphasis, colour,
    icon, emoji, formula or block, and a word joiner (invisible) where GFM would make a bare
    URL or e-mail address a link. Ordinary names (`fixture-nvme`, `qwen3.8`) stay as they are
    in the source."""
    line = _MARKS.sub(r"\\\1", " ".join(text.split()))
    line = _CLOSING_COLON.sub(r"\1\\:", _OPENING_COLON.sub(r"\\:", line))
    line = _AUTOLINK.sub(WORD_JOINER, line)
    return _BLOCK.sub(lambda m: m[1] + "\\" if m[1].isdigit() else "\\" + m[1], line, count=1)


def plotly(text: str) -> str:
    """`text` for a Plotly trace name or hover: `&`, `<` and `>` as entities, so no tag is
    read."""
    return html.escape(text, quote=False)
