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
left behind when a cluster closes.  Nothing here keeps state.

A computation on a cluster never waits for ever (:mod:`.watch`).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import multiprocessing.pool
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_all
from typing import Any

import dask
from dask.callbacks import Callback
from dask.local import MultiprocessingPoolExecutor
from dask.threaded import ContextAwareThreadPoolExecutor
from distributed import as_completed, default_client
from distributed import wait as wait_futures
from distributed.utils import CancelledError
from threadpoolctl import ThreadpoolController

from .progress import Progress, ProgressCallback
from .watch import LostComputationError, SchedulerLostError, StalledComputationError, Watch, asking, scheduler_address

__all__ = ["LostComputationError", "SchedulerLostError", "StalledComputationError", "active_client",
           "config_switch", "n_workers_threads", "serial_blas", "local_threads", "placement", "shares", "placed",
           "compute", "Progress", "ProgressCallback"]



def active_client() -> Any | None:
    """The current ``distributed.Client``, or None.

    Raises :class:`SchedulerLostError` for a client whose scheduler went
    away: it would hold a new computation until its reconnection attempts
    end (``distributed.comm.timeouts.connect``, 30 s), then close.
    """
    try:
        client = default_client()
    except ValueError:
        return None
    if client.status in ("connecting", "closing", "closed"):
        raise SchedulerLostError(scheduler_address(client))
    return client


def config_switch(key: str) -> bool | None:
    """A Dask config switch that is ``auto`` unless set: True, False, or None for ``auto``.

    Accepts booleans and the strings ``true`` / ``false`` / ``auto`` (any
    case), as a YAML file or a ``DASK_DKPCA__...`` environment variable gives
    them; anything else is refused, naming the key, rather than read as ``auto``.
    """
    value = dask.config.get(key, "auto")
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("true", "false", "auto"):
        return None if word == "auto" else word == "true"
    raise ValueError(f"dask config {key!r} is {value!r}; it must be true, false or auto.")


def _local_thread_count() -> int:
    """Threads of this process's work: the Dask setting ``num_workers``, else one per core."""
    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def n_workers_threads() -> int:
    """Number of tasks that run at once (for sizing and planning)."""
    client = active_client()
    if client is not None:
        with asking(client):
            return max(1, sum(client.nthreads().values()))
    return _local_thread_count()


def serial_blas() -> contextlib.AbstractContextManager:
    """This process's BLAS on one thread: for an iterative solver's own algebra between passes.

    That algebra is tall-skinny products and small eigenproblems, which two
    BLAS threads run slower than one here, and OpenBLAS keeps idle pool
    threads spinning after each call, on the cores that a pass's tasks (local
    threads or workers on this host) need.  Measured at n = 20,000, k = 10
    (Lanczos, 2 cores): the solver's time outside its passes 0.78 s -> 0.37 s
    with local threads; with two local workers, 0.16 s less CPU per pass in
    this process (numpy's and scipy's pools spinning).  Wide blocks (large
    k) are the opposite case: their algebra is GEMMs and eigenproblems that
    two threads run faster, so ``pipeline`` asks for this only up to its
    ``SERIAL_ALGEBRA_MAX_WIDTH``.
    """
    return _blas_controller().limit(limits=1, user_api="blas")


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """This process's thread pools, found once.

    Finding them scans every loaded library (4-7 ms here), and a fit at
    n = 2,000 entered a serial-BLAS section ten times: 43 ms of its 0.45 s.
    The libraries a process has loaded do not change between those calls.
    """
    return ThreadpoolController()


@contextlib.contextmanager
def local_threads() -> Iterator[Callable]:
    """A ``map`` over this process's threads, each task's BLAS on one thread: for work on in-memory arrays.

    An in-memory K is written in place by its block tasks, so they must run
    here even with a cluster (a worker would write into a copy).  The threads
    are :func:`compute`'s, kept between calls with their scratch buffers (a
    pool per call made new threads, and new buffers, for every product with a
    float32 K in memory), and the block ends only once none of its tasks runs.
    """
    pool = _Joined(_thread_pool(_local_thread_count()))
    with serial_blas():
        try:
            yield pool.map
        finally:
            wait_all(pool.started)


def balance(weights: Sequence[float], slots: int) -> list[int]:
    """The slot (0 .. slots - 1) of each task, so that the heaviest slot's total weight is small.

    Largest task first to the least loaded slot (ties to the lowest slot),
    then moves and swaps between the heaviest and the lightest slot while
    they lower the heavier of the two.  Largest-first alone leaves up to one
    task's weight of imbalance: at n = 20,000 (5 x 5 blocks) on two workers
    it gave one share five off-diagonal blocks and three diagonal ones,
    0.434 s of a pass's 0.81 s of block work where 0.41 s is even; a swap
    makes it 0.42 s.  Deterministic: the same weights give the same slots.
    """
    slot = [0] * len(weights)
    load = [0.0] * max(1, slots)
    heap = [(0.0, i) for i in range(len(load))]
    for task in sorted(range(len(weights)), key=lambda i: -weights[i]):
        w, i = heapq.heappop(heap)
        slot[task] = i
        load[i] = w + weights[task]
        heapq.heappush(heap, (load[i], i))
    members: list[list[int]] = [[] for _ in load]
    for task, i in enumerate(slot):
        members[i].append(task)
    # Each step strictly lowers the heavier slot of a pair; the bound caps
    # the work (a step scans two slots' tasks) on many tasks and slots.
    for _ in range(min(4 * len(weights), 1000)):
        hi = max(range(len(load)), key=lambda i: (load[i], -i))
        lo = min(range(len(load)), key=lambda i: (load[i], i))
        gap = load[hi] - load[lo]
        # move a (or swap b for a): the pair's new maximum is
        # max(load[hi] - d, load[lo] + d) with d = w_a - w_b, lowest nearest gap / 2
        best, choice = load[hi], None
        partners = [None, *members[lo]]
        for a in members[hi]:
            for b in partners:
                d = weights[a] - (weights[b] if b is not None else 0.0)
                top = max(load[hi] - d, load[lo] + d)
                if 0 < d < gap and top < best:
                    best, choice = top, (a, b, d)
        if choice is None:
            break
        a, b, d = choice
        members[hi].remove(a)
        members[lo].append(a)
        slot[a] = lo
        if b is not None:
            members[lo].remove(b)
            members[hi].append(b)
            slot[b] = hi
        load[hi] -= d
        load[lo] += d
    return slot


def _assign(weights: Sequence[float]) -> list[tuple[str, int]] | None:
    """The worker thread slot ``(address, i)`` of each task (:func:`balance`); None without a cluster.

    Slots in address order: the same workers and weights always give the
    same assignment.
    """
    client = active_client()
    if client is None:
        return None
    with asking(client):
        threads = client.nthreads()
    if not threads:
        return None
    slots = [(addr, i) for addr, t in sorted(threads.items()) for i in range(max(1, t))]
    return [slots[i] for i in balance(weights, len(slots))]


def placement(weights: Sequence[float]) -> list[str | None]:
    """A worker for each task of the given relative weights, balancing the weight per worker thread.

    The same workers and weights give the same placement, so each block goes
    to the same worker every pass or rerun.  Without a cluster, ``None`` for
    every task (the local scheduler needs no placement).
    """
    slots = _assign(weights)
    return [None] * len(weights) if slots is None else [addr for addr, _ in slots]


def shares(weights: Sequence[float]) -> list[tuple[str | None, list[int]]]:
    """The tasks grouped into one share per worker thread, balanced by weight: ``(worker, task indices)``.

    A share runs as one task: a pass then costs the scheduler a few tasks per
    worker thread instead of several per block (measured here, n = 20,000 with
    two single-thread workers: 7 tasks a pass instead of 50, and 1.28-1.30 s
    a pass instead of 1.4-1.8 s).  Without a cluster every task is its own
    share (worker None): the local scheduler's per-task cost is small.
    """
    slots = _assign(weights)
    if slots is None:
        return [(None, [i]) for i in range(len(weights))]
    groups: dict[tuple[str, int], list[int]] = {}
    for task, slot in enumerate(slots):
        groups.setdefault(slot, []).append(task)
    return [(addr, members) for (addr, _), members in sorted(groups.items())]


def placed(worker: str | None) -> contextlib.AbstractContextManager:
    """Tasks made inside run on ``worker`` (any other if it is gone); no constraint for None."""
    if worker is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[worker], allow_other_workers=True)


def _local_callback(progress: Progress) -> Callback:
    """Counts the tasks of a local (threads, processes, synchronous) computation."""

    def start(dsk: Any, state: dict) -> None:
        progress.start(sum(len(state[k]) for k in ("ready", "waiting", "running")) + len(state["finished"]))

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        progress.advance()

    return Callback(start_state=start, posttask=posttask)


class _Joined(Executor):
    """A pool's ``submit`` that keeps the futures it made, so that a failed computation can wait for them.

    dask's local scheduler raises a task's error at once, while the tasks it
    already handed to the pool run on: a Gram block task could then write its
    chunk and done marker after the failed fit had released the store's lock,
    under a rerun with another kernel.  Waiting costs at most one task per
    thread (the scheduler hands out no more than the pool has threads).
    """

    def __init__(self, pool: Any) -> None:
        self._pool = MultiprocessingPoolExecutor(pool) if isinstance(pool, multiprocessing.pool.Pool) else pool
        self._max_workers = self._pool._max_workers  # what dask's get_async sizes its batches by
        self.started: list[Future] = []

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        future = self._pool.submit(fn, *args, **kwargs)
        self.started.append(future)
        return future


@functools.cache
def _thread_pool(threads: int) -> Executor:
    """This process's pool of ``threads`` threads, made once, as dask keeps its own.

    The threads must outlive a computation: each keeps its scratch buffers
    (``linalg.workspace``) from one pass to the next.
    """
    return ContextAwareThreadPoolExecutor(threads)


def _on_cluster(client: Any, tasks: Sequence, label: str | None, progress: bool | ProgressCallback) -> tuple:
    """:func:`compute` on ``client``'s cluster (its progress shown when ``label``)."""
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
            return tuple(client.gather(futures))
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


def compute(*tasks: Any, label: str = "", threads: int | None = None,
            progress: bool | ProgressCallback = False) -> tuple:
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
    than wait for ever.
    """
    show = bool(progress) and bool(label)
    client = active_client()
    if client is not None:
        try:
            return _on_cluster(client, tasks, label if show else None, progress)
        except StalledComputationError as exc:
            # Work the scheduler would not run (Watch): the same graph, submitted afresh, is placed on
            # the workers there are now; a second loss ends it.
            logging.getLogger("dkpca").warning("%s: submitting it once more", str(exc).split(";")[0])
            return _on_cluster(client, tasks, label if show else None, progress)
    scheduler = dask.config.get("scheduler", None) or "threads"
    kw: dict[str, Any] = {}
    if scheduler in ("threads", "threading"):
        if not threads or dask.config.get("num_workers", None) is not None:
            threads = _local_thread_count()
        kw["pool"] = _Joined(dask.config.get("pool", None) or _thread_pool(threads))
    with contextlib.ExitStack() as ctx, serial_blas():
        if show:
            bar = ctx.enter_context(contextlib.closing(Progress(label, progress)))
            ctx.enter_context(_local_callback(bar))
        try:
            return dask.compute(*tasks, scheduler=scheduler, **kw)
        except BaseException:
            if "pool" in kw:
                wait_all(kw["pool"].started)
            raise
