"""Natural English prose that exists offline on every machine: CPython's own documentation.

`pydoc_data.topics` ships with the standard library (the text behind `help()`): about 460 KB
of reference prose. Its paragraphs are unwrapped, and code, grammar and tables are left out,
so what remains reuses words and n-grams the way written English does (a Zipf tail), unlike
random dictionary words or one repeated token. Nothing is downloaded.
"""

from __future__ import annotations

import functools
import re

_MIN_WORDS = 12  # shorter paragraphs are headings, captions or list fragments
_CODE = re.compile(r"::=|>>>|[{}|\\]|\w\(\)|\w=")


def _is_prose(paragraph: str) -> bool:
    words = paragraph.split()
    if len(words) < _MIN_WORDS or _CODE.search(paragraph):
        return False
    letters = sum(ch.isalpha() or ch.isspace() for ch in paragraph)
    return letters / len(paragraph) > 0.88


@functools.cache
def passages() -> tuple[str, ...]:
    """Prose paragraphs, one line each, in a fixed order (topic name, then position)."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for block in topics[name].split("\n\n"):
            if block[:1].isspace() or not block.strip():  # indented: code or a grammar rule
                continue
            paragraph = " ".join(block.split())
            if _is_prose(paragraph):
                out.append(paragraph)
    return tuple(out)


@functools.cache
def text() -> str:
    """All passages as one running text, separated by blank lines."""
    return "\n\n".join(passages())
