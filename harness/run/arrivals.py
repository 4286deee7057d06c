"""Open-loop send schedules for rate levels (their send lag: harness.results.send_lag).

In mode `rate` a level is a request rate R held for `duration` seconds: requests go out at
scheduled offsets whether or not earlier ones have finished (open loop), so queueing shows up
in TTFT instead of slowing the sender down. Poisson arrivals (exponential gaps) are what vLLM,
SGLang and GuideLLM send; constant spacing isolates the server from arrival bursts.

Seeding: the same seed gives the same uniform draws at every rate, so the schedules of
different rates are time-scaled copies of one another (common random numbers: rate levels
differ by rate, not by luck). Give each repeat its own seed (e.g. run seed + repeat).
"""

from __future__ import annotations

import math
import random

from harness.config import ARRIVALS, ConfigError, RunConfig


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"the {name} must be a finite number above 0, got {value!r}")


def schedule(
    rate: float, duration: float, arrival: str = "poisson", seed: int = 0
) -> list[float]:
    """Send offsets in seconds from the level's start, ascending, all below `duration`.

    `constant`: k / rate for k = 0, 1, ... (the first request at 0). `poisson`: a Poisson
    process of intensity `rate`, the first request one exponential gap after the start, so the
    expected count is rate x duration in both modes.
    """
    _check_positive("request rate", rate)
    _check_positive("duration", duration)
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    offsets: list[float] = []
    if arrival == "constant":
        k = 0
        while (t := k / rate) < duration:
            offsets.append(t)
            k += 1
        return offsets
    rng = random.Random(seed)
    t = 0.0
    while (t := t + rng.expovariate(rate)) < duration:
        offsets.append(t)
    return offsets


def check_rate_levels(config: RunConfig) -> None:
    """Refuse, before anything is sent, a rate level whose schedule holds no request (a rate
    too low for its --duration, or an unlucky first gap): it would measure nothing."""
    for rate in config.rates:
        if not schedule(rate, config.duration_s, config.arrival, config.seed):
            raise ConfigError(f"--rates {rate:g} schedules no request within --duration "
                              f"{config.duration_s:g} s ({config.arrival} arrivals, --seed "
                              f"{config.seed}): raise the rate or the duration")
