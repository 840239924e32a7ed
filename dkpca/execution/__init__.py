"""Where dask work runs, and how its progress is shown.

One place decides the execution policy so that every stage (scan, Gram
build, operator passes, transform) behaves the same:

* with an active ``distributed.Client`` its scheduler runs the graph (workers
  started by a nanny already pin BLAS to one thread each);
* otherwise the scheduler named in ``dask.config`` runs it (threads by
  default, one task per core; ``dask.config.set(scheduler="synchronous")``
  runs everything in the calling thread, for debugging), and BLAS is limited
  to one thread for the duration, so that two GEMMs do not fight for the same
  cores (and OpenBLAS's large multi-threaded GEMMs, which crash on this class
  of machine, are avoided).

On a cluster, the blocks of a pass or a build are placed by
:func:`placement` (one task per block) or :func:`shares` (one task per
worker thread): a fixed, balanced share of K's blocks per worker, the
same in every pass.  Left to itself, the scheduler puts a block task
where its pieces of V happen to be, and measured here (n = 20,000, two
workers) one worker often got 60 % of a pass's blocks; a fixed share also
keeps each worker reading the same chunks of K pass after pass (its node's
page cache holds them).

Progress is asked for per call: ``progress=True`` reports on stderr -- a live
bar (tqdm) on a terminal, a tqdm widget in Jupyter when ipywidgets is
installed, otherwise one line per tenth of the work, fit for a batch log --
and a callable receives ``(label, done, total)`` as tasks finish.  The bar
counts finished tasks itself (dask's callbacks locally, futures on a
cluster), so nothing outlives the computation: no scheduler connection is
left behind when a cluster closes.

The package by job:

* :mod:`.scheduler` -- which scheduler runs the work; dkpca's Dask config switches;
* :mod:`.threads` -- BLAS limits, and the thread pool kept for local work;
* :mod:`.assign` -- on a cluster, which worker runs which blocks;
* :mod:`.progress` -- the bar, the log lines, the callback;
* :mod:`.watch` -- a computation on a cluster never waits for ever;
* here, :func:`compute`: a graph run under all of the above.

State kept for the process, each for a measured reason (:mod:`.threads`): the
thread pool of local work (its threads keep their scratch buffers) and the
BLAS controller (found once).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import dask
from dask.base import named_schedulers
from dask.callbacks import Callback
from distributed import as_completed
from distributed import wait as wait_futures
from distributed.utils import CancelledError

from .assign import balance, placed, placement, shares
from .progress import Progress, ProgressCallback
from .scheduler import active_client, config_switch, gathers_direct, local_thread_count, n_workers_threads
from .threads import Joined, StopRequested, kept_pool, local_threads, row_blocks, serial_blas, stopping, wait_stopping
from .watch import LostComputationError, SchedulerLostError, StalledComputationError, Watch

__all__ = ["LostComputationError", "SchedulerLostError", "StalledComputationError", "active_client",
           "config_switch", "gathers_direct", "local_thread_count", "n_workers_threads", "serial_blas", "row_blocks",
           "local_threads", "balance", "placement", "shares", "placed", "compute", "Progress", "ProgressCallback",
           "LOCAL_BYTES", "for_the_client", "local_scheduler", "check_scheduler", "stopping", "StopRequested"]

#: input arrays up to this size are read (the scan, the plan's samples) and copied into the store by the
#: client's own threads, even with a cluster.  Measured on a 16-core machine (issue 40), n = 40,000, d = 50
#: (16 MB): the scan 2.3 s on 16 fresh workers against 0.07 s on threads, the plan's samples ~2 s against
#: 0.3 s, the copy into the store 2.4 s against 0.07 s (round trips and each worker's first reads).
LOCAL_BYTES = 256 * 2**20


def for_the_client(nbytes: int) -> bool:
    """Whether an input array of ``nbytes`` is read and copied here rather than by a cluster's workers."""
    return nbytes <= LOCAL_BYTES


def _local_callback(progress: Progress) -> Callback:
    """Counts the tasks of a local (threads, processes, synchronous) computation."""

    def start(dsk: Any, state: dict) -> None:
        progress.start(sum(len(state[k]) for k in ("ready", "waiting", "running")) + len(state["finished"]))

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        progress.advance()

    return Callback(start_state=start, posttask=posttask)


def _on_cluster(client: Any, tasks: Sequence, label: str | None, progress: bool | ProgressCallback) -> tuple:
    """:func:`compute` on ``client``'s cluster (its progress shown when ``label``)."""
    direct = gathers_direct(client)
    futures = client.compute(list(tasks))
    with Watch(client, futures) as watch:
        try:
            if label:
                bar = Progress(label, progress)
                bar.start(len(futures))
                try:
                    for _ in as_completed(futures):
                        bar.advance()
                finally:
                    bar.close()
            return tuple(client.gather(futures, direct=direct))
        except Exception as exc:
            if client.status == "running":
                with contextlib.suppress(CancelledError):  # cancelled ones run nothing
                    wait_futures(futures)
            lost = watch.lost(exc)
            if lost is None:
                raise
            raise lost from None
        except BaseException:
            client.cancel(futures)
            raise


_CLUSTER = ("dask.distributed", "distributed")


def local_scheduler(local: bool = False) -> Any:
    """The scheduler a computation without a client runs on: Dask's ``scheduler`` setting (threads if unset).

    Raises
    ------
    ValueError
        The setting names no scheduler, or asks for a cluster (``distributed``) and no client of one is running:
        refused naming the setting (dask's own errors are a traceback's last line, without its name).
    """
    scheduler = dask.config.get("scheduler", None) or "threads"
    name = scheduler.lower() if isinstance(scheduler, str) else None  # dask reads names in any case
    if local and (name is None or name in _CLUSTER):
        # a Client makes itself Dask's scheduler setting: local means this process's threads all the same
        # (measured on a 16-worker cluster, a 40,000 x 50 scan went to the workers anyway: 2.3 s, not 0.07)
        return "threads"
    if name is None:
        return scheduler  # a callable or an executor, which dask takes as it is
    if name in _CLUSTER:
        raise ValueError(f"the Dask setting scheduler={scheduler!r} (DASK_SCHEDULER) asks for a cluster, but no "
                         "client of one is running; pass --scheduler ADDRESS or --cluster (Python: start a "
                         "distributed.Client first), or unset it to run on this machine's threads.")
    if name not in named_schedulers:
        raise ValueError(f"the Dask setting scheduler={scheduler!r} (DASK_SCHEDULER) names no Dask scheduler: use "
                         f"one of {', '.join(sorted(named_schedulers))} or distributed (with a cluster), or unset "
                         "it to run on this machine's threads.")
    return name


def check_scheduler() -> None:
    """Refuse, before any work, a Dask ``scheduler`` setting no computation of this process could run on."""
    if active_client() is None:
        local_scheduler()


def compute(*tasks: Any, label: str = "", threads: int | None = None,
            progress: bool | ProgressCallback = False, local: bool = False) -> tuple:
    """``dask.compute(*tasks)`` under dkpca's execution policy.

    ``progress`` (True or a callback) with a ``label`` reports this
    computation's progress (see the module's description).  ``threads`` is a
    hint for the local thread count (tasks that block on I/O want more
    threads than cores); the Dask setting ``num_workers`` and a distributed
    cluster take precedence.

    A computation that fails returns (raises) only once none of its tasks
    runs any more, so that nothing it started writes into a store after its
    caller has let the store go.  On a cluster that means waiting for all of
    its tasks (a client cannot tell which have started); the blocks they
    finish are kept for the rerun.  Only an interrupt (Ctrl-C) on a cluster
    returns at once, cancelling what has not started.  A computation the
    cluster lost is submitted once more, then raises :class:`LostComputationError`
    (:class:`SchedulerLostError` at once when the scheduler went away) rather
    than wait for ever.  ``local=True`` runs it on this process's threads even
    with a cluster (a small read the client does faster than a round trip).
    """
    show = bool(progress) and bool(label)
    client = None if local else active_client()  # local: this process's threads even beside a cluster
    if client is not None:
        try:
            return _on_cluster(client, tasks, label if show else None, progress)
        except StalledComputationError as exc:
            # Work the scheduler would not run (Watch): the same graph, submitted afresh, is placed on
            # the workers there are now; a second loss ends it.
            logging.getLogger("dkpca").warning("%s: submitting it once more", str(exc).split(";")[0])
            return _on_cluster(client, tasks, label if show else None, progress)
    scheduler = local_scheduler(local)
    kw: dict[str, Any] = {}
    if scheduler in ("threads", "threading"):
        if not threads or dask.config.get("num_workers", None) is not None:
            threads = local_thread_count()
        kw["pool"] = Joined(dask.config.get("pool", None) or kept_pool(threads))
    with contextlib.ExitStack() as ctx, serial_blas():
        if show:
            bar = ctx.enter_context(contextlib.closing(Progress(label, progress)))
            ctx.enter_context(_local_callback(bar))
        try:
            return dask.compute(*tasks, scheduler=scheduler, **kw)
        except BaseException as exc:
            if "pool" in kw:
                wait_stopping(kw["pool"].started, isinstance(exc, KeyboardInterrupt))
            raise
