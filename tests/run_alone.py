"""Test modules marked `run_alone` run by themselves under pytest-xdist (`pytest tests -n 2
--dist loadfile`): the regression gate's assertions ask its sweeps' step times to tell a planted
slowdown from noise, and another module's load beside them adds to that noise.

Every module of a worker holds a lock file shared by all workers of the run: a shared lock, or
an exclusive one for a `run_alone` module. A turnstile, taken briefly before the shared lock and
held while the exclusive one is waited for, keeps a stream of modules in the other workers from
starving the one waiting to run alone (flock gives a waiting writer no priority). One worker
holds at most one module's lock at a time (pytest ends a module before it starts the next), so
nothing waits in a circle. A serial run takes no lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def _flocked(path: Path, how: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases its lock


@contextlib.contextmanager
def module_lock(folder: Path, *, alone: bool) -> Iterator[None]:
    """Held for one test module: exclusive when `alone`, else shared with the other workers'.
    `folder`: one the run's workers share (the xdist run's base temporary folder, which pytest
    removes with its old runs)."""
    lock, turnstile = folder / "run-alone.lock", folder / "run-alone.turnstile"
    if alone:
        with _flocked(turnstile, fcntl.LOCK_EX), _flocked(lock, fcntl.LOCK_EX):
            yield
        return
    with _flocked(turnstile, fcntl.LOCK_EX):
        pass  # waits while a run_alone module waits for, or holds, the lock
    with _flocked(lock, fcntl.LOCK_SH):
        yield
