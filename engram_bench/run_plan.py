"""A `run` settled once from its flags, before anything is stored or started: the one place
the command line becomes a run. Below it nothing reads the flags or checks the mode again;
the sweep gets only what it carries out (harness.run.settled), the engine stays up here."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from engram_bench import extras
from engram_bench.parser import targets
from engram_bench.run_config import check_search, config_for, ray_cluster
from harness.results.metrics import Targets
from harness.results.store import Store
from harness.run.ray_workers import Cluster
from harness.run.settled import SettledRun
from runners import engines
from runners.engines.base import ManagedEngine


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A settled run: what the sweep carries out (config, mode, prompts), the targets it is
    judged by, the Ray cluster its workers join, the engine whose server it starts (None:
    --url names one running) and the run it resumes (None: a new one)."""

    run: SettledRun
    targets: Targets
    cluster: Cluster | None
    engine: ManagedEngine[Any] | None
    resume_id: str | None


def settle(args: argparse.Namespace, store: Store) -> RunPlan:
    """The plan of `run`'s flags; bad flags, a missing extra or a bad prompts file stop here
    in one sentence, with nothing stored."""
    run_targets = targets(args)
    cluster = ray_cluster(args)  # --ray: joined before the config counts its CPUs
    config, resume_id = config_for(args, store, cluster)
    engine = engines.engine_of(config.server_args) if config.server_args else None
    if engine and engine.extra:
        extras.require(engine.extra)
    check_search(config, run_targets)
    return RunPlan(SettledRun.of_checked(config), run_targets, cluster, engine, resume_id)
