"""What a child process does with the multiprocessing queues it shares with a parent that was
killed. Each queue's locks are named POSIX semaphores, which only the process that created
them unlinks, at its exit; of a killed parent's, multiprocessing's resource tracker unlinks
them once every process of the run has ended, and warns on the run's terminal of "leaked
semaphore objects". The child that notices its parent is gone releases them instead."""

from __future__ import annotations

import _multiprocessing
import contextlib
from multiprocessing import resource_tracker
from typing import Any


def release(*queues: Any) -> None:
    """Unlink the named semaphores behind `queues` (multiprocessing queues, as this child
    unpickled them) and take them off the resource tracker's list: call it only once the
    parent that created them is gone, as nothing else will use them."""
    for queue in queues:
        for lock in (queue._rlock, queue._wlock, queue._sem):
            name = getattr(getattr(lock, "_semlock", None), "name", None)
            if name is None:  # no named semaphore behind it (not POSIX)
                continue
            with contextlib.suppress(OSError):
                _multiprocessing.sem_unlink(name)
            resource_tracker.unregister(name, "semaphore")
