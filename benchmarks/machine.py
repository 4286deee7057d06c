"""The machine a benchmark ran on, said beside its table: the same code spends twice the CPU
per token on one 2-core machine as on another, so a figure names its CPU."""

from __future__ import annotations

import os
import time
from pathlib import Path


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "a CPU /proc/cpuinfo does not name"


def machine_line(load_at_start: float) -> str:
    """Today's date, the CPU, how many, and the 1-minute load average at the start and now."""
    return (f"{time.strftime('%Y-%m-%d')}, {cpu_model()} ({os.cpu_count()} CPUs), 1-minute "
            f"load average {load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at "
            "the end")
