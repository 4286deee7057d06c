"""Simulated users (`--mode users`): the think times that give a profile its duty cycle, and
measured users set beside the published factor estimates. Pure: no I/O.

A user loops: send a request, wait for it to end, think, send the next. Its duty cycle is the
share of its time with a request running, so a think time of (1 - d) / d times the user's own
last request gives duty cycle d whatever the server's speed: chat (d = 0.25) thinks ~3x its
last request, agentic (d ~ 0.67) ~0.5x. Think times are exponential around that mean, drawn
from a generator seeded by (seed, level, user, repeat), so a rerun draws the same factors.

The published explorer estimates users as Max C x 4 (chat) and x 1.5 (agentic), i.e. Max C
divided by the duty cycle; the summary sets the measured highest passing user count beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.config import PROFILE_DUTY
from harness.records import RequestRecord
from harness.results.metrics import Targets, users


def duty_cycle(records: Iterable[RequestRecord]) -> float | None:
    """Measured share of the users' time with a request running: over every request a think
    followed (a user's last request of a level has none), busy / (busy + think)."""
    busy = think = 0.0
    for r in records:
        if r.think_ms is not None and r.latency_ms is not None:
            busy += r.latency_ms
            think += r.think_ms
    return busy / (busy + think) if busy + think > 0 else None


@dataclass(slots=True, frozen=True)
class UsersEstimate:
    """Measured max users beside the factor estimate from a closed sweep's Max C."""

    max_users: int
    duty_cycle: float | None  # measured at the max-users level (None: not measured)
    max_c: int | None  # of the paired closed run (None: none to compare with)
    factor: float | None  # users per Max C (None: no factor known, e.g. no duty measured)
    how: str = ""  # how the factor reads: "x 4", "/ target duty 0.30"

    @property
    def estimated_users(self) -> int | None:
        """Max C x factor, floored as the published explorer does (metrics.users)."""
        if self.max_c is None or self.factor is None:
            return None
        return users(self.max_c, self.factor)

    @property
    def predicted_users(self) -> float | None:
        """Max C over the measured duty cycle: what the duty cycle alone predicts."""
        if self.max_c is None or not self.duty_cycle:
            return None
        return self.max_c / self.duty_cycle

    @property
    def measured_factor(self) -> float | None:
        """Measured users per Max C: the factor this hardware really gives."""
        return None if not self.max_c else self.max_users / self.max_c


def estimate(max_users: int, duty: float | None, max_c: int | None, profile: str | None,
             duty_target: float | None, targets: Targets) -> UsersEstimate:
    """A users run's estimate, the one rule the summary and the explorer share: the factor
    of `estimate_factor` with the targets' chat and agentic factors."""
    factor, how = estimate_factor(profile, duty_target, duty, targets.chat_factor,
                                  targets.agentic_factor)
    return UsersEstimate(max_users, duty, max_c, factor, how)


def estimate_factor(profile: str | None, duty_target: float | None,
                    duty_measured: float | None, chat_factor: float,
                    agentic_factor: float) -> tuple[float | None, str]:
    """Users per Max C the estimate multiplies by, and how it reads: the published factor of
    the profile (x 4 chat, x 1.5 agentic), else Max C over the target duty cycle, else over
    the measured one (a fixed think time has no published factor); (None, "") when none."""
    if profile in PROFILE_DUTY:
        factor = chat_factor if profile == "chat" else agentic_factor
        return factor, f"x {factor:g}"
    for name, d in (("target duty", duty_target), ("measured duty", duty_measured)):
        if d is not None and not math.isnan(d) and d > 0:
            return 1 / float(d), f"/ {name} {float(d):.2f}"
    return None, ""


def paired_closed_run(runs: Sequence[dict], users_run: dict) -> dict | None:
    """The newest complete closed or burst run of the same setup (device, engine, model,
    placement, prompt and output tokens) as a users run: where its Max C comes from."""
    keys = ("device", "engine", "model", "table_placement", "input_tokens", "output_tokens")
    matches = [r for r in runs
               if r.get("mode") in ("closed", "burst") and r.get("status") == "complete"
               and all(r.get(k) == users_run.get(k) for k in keys)]
    return max(matches, key=lambda r: (r["started_at"], r["run_id"]), default=None)
