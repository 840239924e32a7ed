"""A computation on a cluster ends: results no worker will produce, or a scheduler gone, end its wait.

dkpca waits for a cluster computation in ``Client.gather``, which waits as
long as the scheduler has not given up on a task.  The scheduler does not
always give up: after both workers of a LocalCluster were killed mid-pass,
a task placed on one of them stayed ``no-worker`` beside two new idle
workers, and the fit waited for ever.  :class:`Watch` looks at the
scheduler while results are due and ends such a wait in one line
(:class:`LostComputationError`); a scheduler that went away ends it at once
(:class:`SchedulerLostError`).  Both say that a rerun resumes: the store
keeps finished blocks and solver checkpoints.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from distributed.utils import CancelledError

from ..config import seconds_setting

__all__ = ["LostComputationError", "SchedulerLostError", "StalledComputationError", "Watch", "asking", "gone",
           "scheduler_address"]

#: how long results may be due before the computation is called lost (defaults in ``dkpca/dkpca.yaml``):
#: while the cluster's workers run nothing, ``dkpca.cluster.stall-timeout`` (30 s: the scheduler hands a
#: ready task to an idle worker at once, so a long idle spell means nothing will run it); with no running
#: worker at all, ``dkpca.cluster.timeout``, the wait for workers (10 minutes: batch workers may queue)
_LIMITS = ("dkpca.cluster.stall-timeout", "dkpca.cluster.timeout")
#: seconds between two looks at the scheduler while results are due
_PROBE = 2.0


class LostComputationError(RuntimeError):
    """The Dask cluster lost a computation dkpca waited for; the message says what happened, in one line.

    Rerunning resumes: the store keeps the finished Gram blocks and the solver's checkpoints.
    """


class SchedulerLostError(LostComputationError):
    """The connection to the Dask scheduler was lost, and every computation on it with it."""

    def __init__(self, address: str, why: str = "connection lost") -> None:
        self.address = address
        super().__init__(f"the Dask scheduler at {address} went away ({why}); rerun the same command to resume")


class StalledComputationError(LostComputationError):
    """Results were due while the cluster's workers ran nothing (or there were none) for too long."""


def scheduler_address(client: Any) -> str:
    """The address of ``client``'s scheduler, as far as the client still knows it."""
    return getattr(getattr(client, "scheduler", None), "address", None) or "(unknown address)"


def gone(client: Any) -> bool:
    """Whether ``client`` lost its scheduler, after a call to the scheduler met a closed connection.

    The call may see the connection closed a moment before the client's own
    stream does; the client then marks itself reconnecting within moments.
    """
    end = time.monotonic() + _PROBE
    while client.status == "running" and time.monotonic() < end:
        time.sleep(0.05)
    return client.status != "running"


@contextlib.contextmanager
def asking(client: Any) -> Iterator[None]:
    """Calls to ``client``'s scheduler: one that meets the scheduler gone raises :class:`SchedulerLostError`."""
    try:
        yield
    except OSError:
        if gone(client):
            raise SchedulerLostError(scheduler_address(client)) from None
        raise


class Watch:
    """Ends a cluster computation whose results no worker will produce; runs beside the wait for them.

    Every :data:`_PROBE` seconds while results are due it asks the scheduler
    what its workers run.  Workers present and none running anything for
    ``dkpca.cluster.stall-timeout`` (no running worker at all: for
    ``dkpca.cluster.timeout``), it records why and cancels the due futures,
    which ends the caller's gather.  Measured (issue 37): after both workers of
    a LocalCluster were killed mid-pass, a task placed on one of them stayed
    ``no-worker`` with two new idle workers (distributed schedules a
    no-worker task on a new worker only if its restrictions name that
    worker, loose or not), and the fit waited in ``Client.gather`` for ever.
    """

    def __init__(self, client: Any, futures: list) -> None:
        self.client, self.futures = client, futures
        self.address = scheduler_address(client)
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dkpca-watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)  # at worst inside one scheduler call; it then cancels nothing

    def _run(self) -> None:
        limits = {key: seconds_setting(key, units=True) for key in _LIMITS}
        since: dict[str, float] = {}
        while not self._stop.wait(_PROBE):
            due = [f for f in self.futures if f.status in ("pending", "lost")]
            if self.client.status != "running" or not due:
                since.clear()  # a lost scheduler has cancelled the futures itself
                continue
            try:
                if any(self.client.processing().values()):
                    since.clear()
                    continue
                running = [w for w, info in self.client.scheduler_info()["workers"].items()
                           if info.get("status") == "running"]
            except Exception:  # noqa: BLE001 - the scheduler is going away: the client's status says so next
                continue
            key = "dkpca.cluster.stall-timeout" if running else "dkpca.cluster.timeout"
            since.pop("dkpca.cluster.timeout" if running else "dkpca.cluster.stall-timeout", None)
            start = since.setdefault(key, time.monotonic())
            if time.monotonic() - start < limits[key]:
                continue
            waited = f"{len(due)} of its {len(self.futures)} result(s) waited {limits[key]:g} s"
            self.reason = (f"{waited} while the cluster's {len(running)} worker(s) ran nothing (work lost with "
                           "workers that died, not rescheduled by the Dask scheduler)" if running else
                           f"{waited} with no running worker (Dask setting {key})")
            if not self._stop.is_set():
                self.client.cancel(due)  # ends the gather; none of them runs
            return

    def lost(self, exc: BaseException) -> LostComputationError | None:
        """The error to raise instead of ``exc`` when the cluster lost the computation; None otherwise."""
        if self.reason is not None:
            return StalledComputationError(f"the Dask cluster lost a computation: {self.reason}; rerun the "
                                           "same command to resume")
        if gone(self.client) if isinstance(exc, OSError) else self.client.status != "running":
            return SchedulerLostError(self.address)
        if isinstance(exc, CancelledError):
            groups = getattr(exc, "error_groups", None)
            why = groups[0].reason if groups else getattr(exc, "reason", None) or "no reason given"
            return LostComputationError(f"the Dask cluster cancelled a computation ({why}); rerun the same "
                                        "command to resume")
        return None
