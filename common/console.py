"""Rich consoles that a log file can read: on a terminal rich fits what it prints to the
window; into a pipe or a file (`make bench > log`, CI) it would wrap at 80 columns, breaking
sentences mid-line and squeezing tables, so there a line is printed whole and a table at its
own width."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

# Width given to a console that writes no terminal: no table the CLI prints comes near it,
# and rich pads nothing to it (text is soft-wrapped, tables do not expand).
UNBOUNDED_WIDTH = 10_000


def output_console(*, stderr: bool = False, file: TextIO | None = None) -> Console:
    """A Console on stdout, stderr or `file`, sized by the terminal when it is one."""
    out = Console(stderr=stderr, file=file)
    if not out.is_terminal:
        out.soft_wrap = True
        out.width = UNBOUNDED_WIDTH
    return out
