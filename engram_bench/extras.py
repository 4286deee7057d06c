"""Which optional install each command needs, checked before the command does anything.

The core install is the harness; the bundled server and the explorer come with extras. A
command whose extra is missing stops with one sentence that names the install, not with an
ImportError deep inside it.
"""

from __future__ import annotations

import importlib.util

EXTRAS = {
    "server": ("torch", "numpy", "safetensors", "tokenizers", "fastapi", "uvicorn"),
    "explorer": ("streamlit", "plotly", "pandas"),
    "distributed": ("ray",),
}
USES = {"server": "the bundled Engram server", "explorer": "the explorer",
        "distributed": "--ray"}


class MissingExtra(Exception):
    """An optional install a command needs is absent; the message names the pip command."""


def missing(extra: str) -> list[str]:
    """The modules of `extra` this interpreter cannot import."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require(extra: str) -> None:
    """Raise MissingExtra naming `pip install 'engram-bench[extra]'` when a module is absent."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(f"{USES[extra]} needs {', '.join(absent)}: "
                           f"pip install 'engram-bench[{extra}]'")
