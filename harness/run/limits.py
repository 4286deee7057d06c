"""What this process may open, checked before a run sends anything: each request in flight
holds a socket, so a level above the open-file limit would fail in the client and be stored
as the server's `connect_error`."""

from __future__ import annotations

import resource

from harness.config import ConfigError, RunConfig

SPARE_FILES = 64  # the store, the writer's and scraper's pipes, logs, the event loop


def files_needed(config: RunConfig) -> int:
    """Sockets at the highest level the run may reach (the search's cap included), plus spare."""
    top = max(config.levels, default=0)
    if config.search:
        top = max(top, config.max_concurrency)
    return top + SPARE_FILES


def ensure_open_files(config: RunConfig) -> None:
    """Raise the soft open-file limit as far as the run needs (the hard limit allows it), or
    refuse the run in one sentence."""
    need = files_needed(config)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard != resource.RLIM_INFINITY and need > hard:
        raise ConfigError(f"the highest level needs about {need} open files, above the "
                          f"{hard} this process may open (ulimit -n): lower --levels or "
                          "--max-concurrency, or raise the limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
