"""Numbers as a sentence prints them, at any size: a figure read at a glance (1,234 s), and
past PLAIN_BELOW scientific notation (1e+27 s, 1.00e+5000), never a row of thirty or three
hundred digits (a refused timestamp of 1e30 ms, a speedup of 1e-300); bytes in their unit."""

from __future__ import annotations

import math
from decimal import Decimal

PLAIN_BELOW = 1e15  # past this, digits stop saying how large a number is


def figure(x: float | Decimal, decimals: int = 0) -> str:
    """`x` with thousands separators and `decimals` places, or, from PLAIN_BELOW on, in
    scientific notation; an integer of any size (a Decimal keeps one exact past a float's
    range: a count of 5,000 digits)."""
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:,.{decimals}f}" if abs(x) < PLAIN_BELOW else f"{x:.3g}"
    exact = Decimal(x)
    return f"{exact:,.{decimals}f}" if abs(exact) < PLAIN_BELOW else f"{exact.normalize():.3g}"


def size(n: float, spec: str = ".3g") -> str:
    """Bytes as GiB, MiB, KiB or B, the number in `spec` ("3 figures" by default)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:{spec}} {unit}"
    return f"{n:.0f} B"
