"""What the worker processes of a LocalCluster get from the process that starts them: its script, its Ctrl-C.

**The ``__main__`` guard.**  A LocalCluster's worker processes are started
with multiprocessing's ``spawn`` (distributed's default, Dask setting
``distributed.worker.multiprocessing-method``), and each child imports the
parent's ``__main__`` module again before it runs anything.  A script that
starts its cluster at the top level, not under ``if __name__ ==
"__main__":``, starts it again in every child, which multiprocessing refuses
in its bootstrap phase, and distributed retries: about 500 lines of
tracebacks ending in ``Nanny failed to start``, the fix named nowhere.
dkpca refuses first, in one error that names the fix (:func:`check_main_guard`).

**Ctrl-C.**  A terminal sends SIGINT to its whole foreground process group,
the workers too, and each printed a ``KeyboardInterrupt`` traceback (about 60
lines for two workers) before dkpca's one line.  The workers are this
process's to stop -- it shuts its cluster down when interrupted -- so they
are started with SIGINT blocked (:func:`starting_workers`), a signal mask a
child inherits and Python then keeps.  What is left after a Ctrl-C --
the client's abandoned waits, a wait cancelled before it started, the workers'
notes that closing cut their tasks off -- is dropped by three narrow log
filters (:func:`quiet_interrupts`).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from multiprocessing import resource_tracker
from typing import Any

import dask.config
from distributed.client import AllExit
from distributed.comm.core import CommClosedError
from distributed.diagnostics.plugin import WorkerPlugin

from ..signals import PARENTS_SIGNALS

__all__ = ["UnguardedMainError", "check_main_guard", "unguarded_line", "starting_workers",
           "QuietClose", "quiet_interrupts", "add_log_filter"]

GUARD = 'if __name__ == "__main__":'


class UnguardedMainError(RuntimeError):
    """A script starts worker processes outside ``if __name__ == "__main__":`` (each would rerun it)."""


def _message(where: str) -> str:
    return (f"{where} starts a local Dask cluster outside '{GUARD}'. Its worker processes are started with "
            "multiprocessing's spawn, which imports the script again in each of them, where it would start the "
            f"cluster again. Put the script's work under '{GUARD}' (see README, Clusters).")


def unguarded_line() -> tuple[str, int] | None:
    """``(script, line)`` where ``__main__``'s top level is running this call outside a ``__name__`` test.

    None where there is no script to rerun (an interactive session, Jupyter,
    ``python -c``), its source cannot be read, or the call is guarded.  The
    line is that of the script's outermost frame, so a function the script
    calls at its top level counts as that call.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    namespace = getattr(main, "__dict__", None)
    if not path or namespace is None:
        return None
    line = None
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_globals is namespace and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:  # __main__ is not running this call (it has finished its top level: e.g. an atexit hook)
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and node.lineno <= line <= (node.end_lineno or node.lineno)
                and any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))):
            return None
    return os.path.abspath(path), line


def check_main_guard() -> None:
    """Refuse to start worker processes from a script's unguarded top level (:class:`UnguardedMainError`).

    Also in a spawned child's bootstrap (``multiprocessing``'s own test:
    the child is still importing the parent's ``__main__``), where the parent
    could not tell (no readable source).
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        main = sys.modules.get("__main__")
        raise UnguardedMainError(_message(f"the script {getattr(main, '__file__', None) or '__main__'}"))
    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") == "fork":
        return  # a forked child does not import __main__ again
    found = unguarded_line()
    if found is not None:
        raise UnguardedMainError(_message(f"{found[0]}, line {found[1]},"))


@contextlib.contextmanager
def starting_workers() -> Iterator[None]:
    """Around starting a LocalCluster's worker processes: the guard checked, and the children never take Ctrl-C.

    :data:`PARENTS_SIGNALS` are blocked in this thread while the cluster
    starts, so the threads started meanwhile -- distributed's event loop,
    which starts every worker process from threads of its own, now and when
    the cluster scales later -- and the processes they start keep them
    blocked for good: they stay pending there, unseen, and are this process's
    alone.  Here they are held, not lost (before, SIGINT was ignored for the
    2-3 s the workers took to start, and a Ctrl-C then was dropped): pending
    until the block ends, or taken by another thread of this process (the
    caller holds them with :func:`holding_interrupts` till the cluster can be
    closed).  Off the main thread nothing changes.
    """
    check_main_guard()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing's resource tracker, started by the first process started, unblocks SIGINT and SIGTERM in the
    # thread that starts it (it blocks, spawns, then unblocks rather than restores): started here first, it is left
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, PARENTS_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _CutOffByClose(logging.Filter):
    """Drops a worker's note that a task was cut off by the worker closing (distributed: "This should exclusively
    happen in Worker.close()"): after an interrupt the cluster closes with tasks running, and each says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return not (text.startswith("Async instruction for") and text.endswith("ended with CancelledError"))


class _AbandonedGather(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for distributed's ``AllExit``: the client's own signal
    to the waits of a gather its caller gave up (a Ctrl-C), never an error of the computation."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], AllExit))


class _CancelBeforeStart(logging.Filter):
    """Drops tornado's report of distributed's ``sync`` cancelling a wait that had not started: a Ctrl-C between
    the client queueing a call and the call's first step makes ``sync``'s ``cancel`` read its future before it
    is set (a ``NameError`` in ``distributed/utils.py``; seen once in ~10 interrupted cluster fits)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, NameError) or exc.__traceback__ is None:
            return True
        last = exc.__traceback__
        while last.tb_next is not None:
            last = last.tb_next
        code = last.tb_frame.f_code
        return not (code.co_name == "cancel" and code.co_filename.endswith(os.path.join("distributed", "utils.py")))


class _HeartbeatAtClose(logging.Filter):
    """Drops a worker's "Failed to communicate with scheduler during heartbeat" where what failed is the worker's
    own connection pool, closing (``CommClosedError: ConnectionPool closing.``): a heartbeat under way as the
    cluster closed, logged with its traceback after a finished fit's last line (seen in ~1 of 60 LocalCluster fits).
    A scheduler that cannot be reached fails otherwise, and is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, CommClosedError) and str(exc).startswith("ConnectionPool closing"))


def add_log_filter(name: str, kind: type[logging.Filter]) -> None:
    """A ``kind`` filter on logger ``name``, added once (the noise dkpca drops: these, and connect's)."""
    log = logging.getLogger(name)
    if not any(isinstance(f, kind) for f in log.filters):
        log.addFilter(kind())


class QuietClose(WorkerPlugin):
    """On each worker (those that join later too): :class:`_CutOffByClose`, :class:`_HeartbeatAtClose`."""

    name = "dkpca-quiet-close"

    def setup(self, worker: Any) -> None:
        add_log_filter("distributed.worker.state_machine", _CutOffByClose)
        add_log_filter("distributed.worker", _HeartbeatAtClose)


def quiet_interrupts(client: Any) -> None:
    """After a Ctrl-C only dkpca's line: the client's abandoned waits and its workers' closing notes say nothing."""
    add_log_filter("asyncio", _AbandonedGather)
    add_log_filter("tornado.application", _CancelBeforeStart)
    client.register_plugin(QuietClose())
