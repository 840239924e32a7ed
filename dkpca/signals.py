"""Ctrl-C and a batch system's SIGTERM, held around what must finish once begun.

Python raises a signal's exception in the main thread at any bytecode: inside
a close, a removal, or a library's bookkeeping (a thread pool's record of a
thread it just started).  :func:`holding_interrupts` holds one until the block
is done, then raises it again.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["PARENTS_SIGNALS", "holding_interrupts"]


#: the signals a local cluster's workers leave to dkpca's process: a terminal's Ctrl-C and a batch system's SIGTERM
#: (walltime, scancel) reach every process of the group or job, and the workers, dying of them, logged their own
#: lines (tracebacks; the scheduler's "Removing worker ... caused the cluster to lose ...") before dkpca's one.  A
#: nanny never stops its worker by either: it asks, then SIGKILLs; a worker whose parent died exits by itself.
PARENTS_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def holding_interrupts() -> Iterator[list[int]]:
    """Around cleanup (a cluster closing, a temporary directory removed) or a start that must finish to be undone:
    a Ctrl-C or SIGTERM is held until the block is done, then raised again (to the handler there was: Ctrl-C's
    ``KeyboardInterrupt``, the CLI's ``Terminated``); a second one is raised at once, so that a close that hangs can
    still be left.  Yields the list of signals held (empty: none), for a start to undo itself first.

    Before, a Ctrl-C while the demo's cluster closed cut the close off: 10 s later distributed logged that the
    scheduler's scratch directory, removed meanwhile, could not be removed; one while its temporary directory
    was removed left part of it behind.  Off the main thread nothing changes.
    """
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    old = {sig: signal.getsignal(sig) for sig in PARENTS_SIGNALS}

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def hold(signum: int, frame: object) -> None:
        if held:  # the second: to the old handler now
            restore()
            signal.raise_signal(signum)
            return
        held.append(signum)

    for sig in PARENTS_SIGNALS:
        signal.signal(sig, hold)
    try:
        yield held
    finally:
        restore()
    if held:
        signal.raise_signal(held[0])
