"""`engram-bench run`: a sweep end to end, the managed engine's server started and stopped
around it, a stop (Ctrl-C, kill, a closed terminal) leaving the run marked to resume."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from common.console import output_console
from engram_bench.errors import UserError
from engram_bench.run_config import auto_workers
from engram_bench.run_plan import RunPlan, settle
from engram_bench.show import show_run
from harness.results.store import Store, StoreError
from harness.run import aio
from harness.run.settled import SettledRun
from harness.wire.endpoint import Endpoint
from runners.host_agent import launch
from runners.lifecycle import ServerDied

EXIT_FAILED = 1  # the run started and stopped as failed, what it measured kept
EXIT_ABORTED = 130
_DEATH_GRACE_S = 10.0  # how long a failed run waits for a managed server that stopped answering
# to end, so that its crash, not the refused connections, is what the run says


@contextlib.contextmanager
def _target(plan: RunPlan, console: Console) -> Iterator[tuple[SettledRun, int | None]]:
    """The run to sweep: as settled, or with the URL of the plan's engine's server started
    (and stopped) here and the URL of a host agent on its process tree added to its host
    metrics; and that server's process (each level measures its CPU)."""
    run, engine = plan.run, plan.engine
    if engine is None:
        yield run, None
        return

    def say(text: str) -> None:
        console.print(text, highlight=False)

    with engine.serve(run.config.server_args, say) as server:
        assert server.pid is not None  # running
        table_files = engine.table_files(server)
        if run.config.table_state and not table_files:
            raise UserError(f"--table-state drops or warms the table's file, and {engine.title} "
                            "started here did not name it in its /stats")
        with launch.watching(server.pid, table_files, say) as agent:
            hosts = (*run.config.host_metrics, agent) if agent else run.config.host_metrics
            try:
                yield replace(run, config=replace(run.config, url=server.url,
                                                  host_metrics=hosts)), server.pid
            except Exception:  # a death explains whatever failed after it
                if death := server.death_within(_DEATH_GRACE_S):
                    raise ServerDied(death) from None
                raise
        if server.death:  # its requests failed and are stored; the run did not complete
            raise ServerDied(server.death)


_KILLS: list[int] = []  # the kill signals received, for a stop whose exception DuckDB swallowed


def exit_status(stop: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal for a kill (143 for SIGTERM), as shells report them."""
    if isinstance(stop, aio.Stopped):
        return 128 + stop.signum
    return 128 + _KILLS[-1] if _KILLS else EXIT_ABORTED


def _handle_interrupts() -> None:
    """Ctrl-C works whatever the process inherited (a background job of a non-interactive
    shell starts with SIGINT ignored), and `kill` of a bench behaves like Ctrl-C: the run is
    marked aborted, the server stopped. A closed terminal (SIGHUP) too."""
    def handler(signum: int, frame: object) -> None:  # outside the event loop (aio.run)
        _KILLS.append(signum)
        raise aio.Stopped(signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)  # a closed terminal, a dropped SSH session


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from harness.run.progress import LevelProgress
    from harness.run.session import RunFailed, RunStopped, execute, new_run_id

    _handle_interrupts()
    try:
        store = Store(args.db, stopped=aio.stopping)  # a stop gives up a wait for its lock
        plan = settle(args, store)  # bad flags, a bad prompts file: nothing stored
        if args.workers == "auto" and not plan.resume_id:
            output_console(stderr=True).print(auto_workers(plan.run.config, plan.cluster)[1],
                                              highlight=False)
        store.initialise()
        run_id = plan.resume_id or new_run_id()
        progress = LevelProgress(enabled=not args.no_progress)
        status = output_console(stderr=True)
    except KeyboardInterrupt as exc:
        return _report_stop(exc, args.resume, stored=bool(args.resume))
    try:
        # one writer per run (a second --resume is refused), taken before a server starts;
        # the file held open, so one deleted under the run is put back with what it stored
        with store.run_lock(run_id), store.held_open(), _target(plan, status) as (run, pid):
            config = run.config
            endpoint = Endpoint(config.url, config.api,
                                args.api_key or os.environ.get("OPENAI_API_KEY"),
                                ca_bundle=Path(config.ca_bundle) if config.ca_bundle else None,
                                insecure=config.insecure)
            aio.run(execute(run, endpoint, store, progress, run_id,
                            resume=bool(plan.resume_id), targets=plan.targets,
                            cluster=plan.cluster, server_pid=pid))
    except ServerDied as exc:
        progress.stop()
        with contextlib.suppress(StoreError):  # a run it had started is failed, not complete
            store.run(run_id)
            store.finish_run(run_id, "failed", str(exc))
        raise
    except RunFailed as exc:
        progress.stop()
        print(f"engram-bench: run {run_id} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        progress.stop()
        return _report_stop(exc, run_id, exc.stored if isinstance(exc, RunStopped)
                            else bool(plan.resume_id))
    finally:
        progress.stop()  # idempotent; an error's message is printed after the bar ends
    return show_run(store, run_id, plan.targets, args.json, console)


def _report_stop(stop: KeyboardInterrupt, run_id: str | None, stored: bool) -> int:
    """What a stop left, on stderr (an aborted run to resume, or nothing), and its exit status;
    `stored`: the run was in the results file before the stop."""
    if stored:
        print(f"engram-bench: aborted; run {run_id} keeps its finished rounds "
              f"(continue with --resume {run_id})", file=sys.stderr)
    else:
        print("engram-bench: stopped before the run started; nothing stored", file=sys.stderr)
    for note in getattr(stop, "notes", ()):  # session.RunStopped's
        print(f"engram-bench: {note}", file=sys.stderr)
    return exit_status(stop)

