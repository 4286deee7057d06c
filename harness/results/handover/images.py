"""The page a headless browser opens to turn the report's figures into images: plotly.js draws
each off screen and writes it, as a data URL, into an element of its own; the browser's
`--dump-dom` hands the page back. Pure: the figures and library come in."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from harness.results.handover.markup import Markup, script_json

WIDTH, HEIGHT = 1000, 520  # pixels of each image (PNG at scale 2)
_OUT = re.compile(r'<pre id="image-(\d+)">data:image/(?:png|svg\+xml)[^,]*,([^<]*)</pre>')


def page(figures: Sequence[dict[str, Any]], plotly_js: str, fmt: str) -> str:
    """A page that renders every figure as `fmt` (png or svg), each into <pre id=image-N>."""
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>"
        f"<div id=\"stage\"></div><script>{plotly_js}</script><script>"
        f"const FIGURES={script_json(list(figures))};"
        "(async function(){for(let i=0;i<FIGURES.length;i++){const f=FIGURES[i];"
        f"const url=await Plotly.toImage({{data:f.data,layout:f.layout}},"
        f"{{format:'{Markup(fmt)}',width:{WIDTH},height:{HEIGHT},scale:2}});"
        "const pre=document.createElement('pre');pre.id='image-'+i;pre.textContent=url;"
        "document.body.appendChild(pre);}document.title='done';})();</script></body></html>")


def images(dom: str, count: int, fmt: str) -> list[bytes]:
    """The images the page wrote, decoded, in figure order; ValueError where one is missing."""
    found: dict[int, bytes] = {}
    for match in _OUT.finditer(dom):
        payload = match.group(2)
        if fmt == "png":
            found[int(match.group(1))] = base64.b64decode(payload)
        else:
            found[int(match.group(1))] = unquote(payload).encode("utf-8")
    missing = [i for i in range(count) if i not in found]
    if missing:
        raise ValueError(f"the browser drew {count - len(missing)} of {count} charts")
    return [found[i] for i in range(count)]
