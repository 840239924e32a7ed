"""The temporary store of in-memory input fitted without ``store=``: owned, removed, and swept if its owner died.

A temporary store holds a copy of the training data.  It is removed with the
object that owns it, or at interpreter exit; a process killed before either
(SIGKILL, an out-of-memory kill, joblib ending a worker of a failed grid
search, a batch job at walltime) left it in the temporary directory for
ever, one copy of the training data each time.  Each directory therefore
records its owner (``owner.json``: host, pid and the process's start time, so
that a reused pid is not mistaken for it), and making a new one removes those
of owners on this host that are gone (:func:`sweep`).  Only directories with
that record are touched: what another host's process owns (a shared
``TMPDIR``) or anything else in the directory never is.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import shutil
import socket
import tempfile
import weakref
from typing import Any

import psutil

from ..storage import FitStore

__all__ = ["TemporaryStore", "PREFIX", "OWNER", "sweep"]

PREFIX = "dkpca-"
OWNER = "owner.json"

logger = logging.getLogger("dkpca")


def _started(pid: int) -> float | None:
    """When process ``pid`` started (None: there is none)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _owner_gone(directory: str) -> bool:
    """Whether ``directory`` records an owner on this host that no longer runs."""
    try:
        with open(os.path.join(directory, OWNER)) as f:
            owner = json.load(f)
        host, pid, started = str(owner["host"]), int(owner["pid"]), float(owner["started"])
    except (OSError, ValueError, TypeError, KeyError):
        return False  # no record of ours (another program's, or one being written): never removed
    if host != socket.gethostname():
        return False
    now = _started(pid)
    return now is None or abs(now - started) > 1.0  # gone, or the pid now another process's


def sweep(parent: str | None = None) -> int:
    """Remove the temporary stores of owners on this host that are gone; how many."""
    removed = 0
    for directory in glob.glob(os.path.join(parent or tempfile.gettempdir(), PREFIX + "*")):
        if os.path.isdir(directory) and not os.path.islink(directory) and _owner_gone(directory):
            shutil.rmtree(directory, ignore_errors=True)
            removed += not os.path.exists(directory)
    if removed:
        logger.info("removed %d temporary store(s) left by dkpca processes that were killed", removed)
    return removed


class TemporaryStore:
    """A store in a new temporary directory, for in-memory input fitted without ``store=``.

    The directory lives exactly as long as this object: it is removed by
    :meth:`remove`, when the object is garbage-collected, or at interpreter
    exit (``weakref.finalize`` does the last two), whichever comes first.
    The model fitted into it holds it, and so do the lazy results of that
    model's ``transform``, so the store outlives neither nor is removed under them.
    """

    def __init__(self) -> None:
        with contextlib.suppress(OSError):
            sweep()
        self.directory = tempfile.mkdtemp(prefix=PREFIX)
        self._remove = weakref.finalize(self, shutil.rmtree, self.directory, ignore_errors=True)
        me = os.getpid()
        with open(os.path.join(self.directory, OWNER), "w") as f:
            json.dump({"host": socket.gethostname(), "pid": me, "started": _started(me)}, f)
        self.store = FitStore.at(os.path.join(self.directory, "store.dkpca.zarr"))

    def remove(self) -> None:
        """Remove the directory now (at most once)."""
        self._remove()

    @property
    def removed(self) -> bool:
        return not self._remove.alive

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # In a dask graph sent to distributed workers it travels as its path:
        # a worker's copy must never own (and so remove) the directory; the
        # client's object keeps it alive.  Models refuse to be pickled with one.
        return str, (self.directory,)

    def __dask_tokenize__(self) -> str:
        return self.directory
