"""This process's threads: BLAS limits, and the thread pool kept for local work.

The pool (:func:`kept_pool`, one per thread count) lives as long as the
process, as dask keeps its own: its threads keep their scratch buffers
(:mod:`dkpca.linalg.workspace`) from one pass to the next.  The BLAS
controller is found once (:func:`serial_blas`).  Both are the process's
state for measured reasons, written in their docstrings.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing.pool
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_all
from typing import Any

import threadpoolctl
from dask.local import MultiprocessingPoolExecutor
from dask.threaded import ContextAwareThreadPoolExecutor
from threadpoolctl import ThreadpoolController

from ..linalg import RowBlocks
from ..signals import holding_interrupts
from .scheduler import local_thread_count

__all__ = ["Joined", "StopRequested", "kept_pool", "local_threads", "serial_blas", "row_blocks", "stopping",
           "wait_stopping"]

#: set while an interrupted local computation waits for the tasks it started (Joined): a task that runs for
#: minutes -- sparse kernel PCA's EM on one candidate set -- asks :func:`stopping` between its steps and gives up,
#: so Ctrl-C ends the computation in about a step, not after each running task's own end (123 s measured)
_STOP = threading.Event()


class StopRequested(RuntimeError):
    """Raised by a long task that found :func:`stopping` true: its computation was interrupted."""


def stopping() -> bool:
    """Whether the local computation this task belongs to was interrupted (Ctrl-C): stop at the next step."""
    return _STOP.is_set()


def wait_stopping(futures: list[Future], interrupted: bool) -> None:
    """Wait for the ``futures`` of a computation that failed, asking them to stop first if it was ``interrupted``."""
    if interrupted:
        _STOP.set()
    try:
        wait_all(futures)
    finally:
        _STOP.clear()


#: the one serial-BLAS section of this process (:func:`serial_blas`): how many are inside, and the limiter that
#: restores the BLAS threads the first of them found
_SERIAL_LOCK = threading.Lock()
_serial: dict[str, Any] = {"inside": 0, "limiter": None}


@contextlib.contextmanager
def serial_blas() -> Iterator[None]:
    """This process's BLAS on one thread: for an iterative solver's own algebra between passes.

    That algebra is tall-skinny products and small eigenproblems, which two
    BLAS threads run slower than one here, and OpenBLAS keeps idle pool
    threads spinning after each call, on the cores that a pass's tasks (local
    threads or workers on this host) need.  Measured at n = 20,000, k = 10
    (Lanczos, 2 cores): the solver's time outside its passes 0.78 s -> 0.37 s
    with local threads; with two local workers, 0.16 s less CPU per pass in
    this process (numpy's and scipy's pools spinning).  Wide blocks (large
    k) are the opposite case: their algebra is GEMMs and eigenproblems that
    two threads run faster, so the planner's start policy asks for this only
    up to ``dkpca.planning.decision.SERIAL_ALGEBRA_MAX_WIDTH`` columns.

    The limit is the process's (threadpoolctl's), so sections that overlap --
    fits in two threads, a grid search's threading backend -- share it: the
    first in limits, the last out gives back the threads the first found.
    Each restoring what it found on entry left BLAS on one thread for good
    after two overlapping fits (the second found the first's limit).
    """
    with _SERIAL_LOCK:
        if _serial["inside"] == 0:
            _serial["limiter"] = _blas_controller().limit(limits=1, user_api="blas")
        _serial["inside"] += 1
    try:
        yield
    finally:
        with _SERIAL_LOCK:
            _serial["inside"] -= 1
            if _serial["inside"] == 0:
                # threadpoolctl >= 3.7 lets one thread at a time set OpenBLAS's (process-wide) pool, the first to
                # set it: the last out may be another thread than the first in, so it takes the control to restore
                _release_openblas()
                _serial["limiter"].restore_original_limits()
                _serial["limiter"] = None
                _release_openblas()


def _release_openblas() -> None:
    """Let any thread set OpenBLAS's threads next (threadpoolctl's controlling thread; none before 3.7)."""
    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


def row_blocks() -> RowBlocks:
    """A solver's tall-skinny algebra split by rows over this process's kept pool, where BLAS is on one thread.

    Under :func:`serial_blas` (narrow blocks) that algebra ran on one core
    while the others idled between passes; its row blocks run on all of them,
    each a single-threaded GEMM.  Where BLAS has threads of its own (wide
    blocks) it splits the GEMMs itself, and this is one call each.
    """
    threads = local_thread_count()
    blas = max((lib["num_threads"] for lib in _blas_controller().select(user_api="blas").info()), default=1)
    return RowBlocks(kept_pool(threads).map if threads > 1 and blas == 1 else None, threads)


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
    pool = Joined(kept_pool(local_thread_count()))
    with serial_blas():
        try:
            yield pool.map
        finally:
            wait_all(pool.started)


class Joined(Executor):
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
def kept_pool(threads: int) -> Executor:
    """This process's pool of ``threads`` threads, made once, as dask keeps its own.

    The threads must outlive a computation: each keeps its scratch buffers
    (``linalg.workspace``) from one pass to the next.  All are started here,
    with Ctrl-C and SIGTERM held (:func:`_start_all`).
    """
    pool = ContextAwareThreadPoolExecutor(threads)
    with holding_interrupts():
        _start_all(pool, threads)
    return pool


def _start_all(pool: Executor, threads: int) -> None:
    """Start every thread of ``pool`` now, each held at a barrier till all run.

    concurrent.futures starts a pool's threads as tasks come, and records each
    for the interpreter's exit (which wakes it to end) only once
    ``Thread.start`` has returned; a signal's exception raised in between left
    a thread that nothing wakes, and Python waited for it at exit for ever:
    a transform given SIGTERM as its pool started said its line, then hung
    till SIGKILL.  Started here, under :func:`holding_interrupts`, no later
    task starts a thread.
    """
    barrier = threading.Barrier(threads)
    for future in [pool.submit(barrier.wait, 60) for _ in range(threads)]:
        future.result()
