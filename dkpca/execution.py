"""Where dask work runs: the active distributed Client, else dask's configured scheduler.

One place decides the execution policy so that every stage (scan, Gram
build, operator passes, transform) behaves the same:

* with an active ``distributed.Client`` its scheduler runs the graph (workers
  started by a nanny already pin BLAS to one thread each);
* otherwise the scheduler named in ``dask.config`` runs it (threads by
  default, one task per core), and BLAS is limited to one thread for the
  duration, so that two GEMMs do not fight for the same cores (and
  OpenBLAS's large multi-threaded GEMMs, which crash on this class of
  machine, are avoided).

Progress is asked for per call (``progress=True``); nothing here keeps state.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import dask
from dask.diagnostics import ProgressBar
from distributed import default_client
from distributed import progress as distributed_progress
from distributed.utils import is_kernel
from threadpoolctl import threadpool_limits

__all__ = ["active_client", "n_workers_threads", "compute"]


def active_client() -> Any | None:
    """The current ``distributed.Client``, or None."""
    try:
        return default_client()
    except ValueError:
        return None


def n_workers_threads() -> int:
    """Number of tasks that run at once (for sizing and planning)."""
    client = active_client()
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    return os.cpu_count() or 1


def _show_distributed_progress(futures: list) -> None:
    """distributed's progress bar: a widget in Jupyter (if ipywidgets is installed), else text."""
    if is_kernel():
        try:
            import ipywidgets  # noqa: F401 - optional: the widget needs it
            from IPython.display import display
        except ImportError:
            pass
        else:
            display(distributed_progress(futures, notebook=True))  # updates itself while we gather
            return
    distributed_progress(futures, notebook=False)


def compute(*tasks: Any, label: str = "", threads: int | None = None, progress: bool = False) -> tuple:
    """``dask.compute(*tasks)`` under dkpca's execution policy.

    ``progress=True`` with a ``label`` shows a bar for this compute.
    ``threads`` overrides the local thread count (tasks that block on I/O
    want more threads than cores); a distributed cluster keeps its own.
    """
    client = active_client()
    if client is not None:
        futures = client.compute(list(tasks))
        if progress and label:
            print(label, flush=True)
            _show_distributed_progress(futures)
        return tuple(client.gather(futures))
    ctx = contextlib.ExitStack()
    if progress and label:
        print(label, flush=True)
        ctx.enter_context(ProgressBar())
    scheduler = dask.config.get("scheduler", None) or "threads"
    with ctx, threadpool_limits(1, user_api="blas"):
        kw = {"num_workers": threads} if threads and scheduler in ("threads", "threading") else {}
        return dask.compute(*tasks, scheduler=scheduler, **kw)
