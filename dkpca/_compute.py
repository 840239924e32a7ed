"""Where dask work runs: the active distributed Client, else local threads.

One place decides the execution policy so that every stage (scan, Gram
build, operator passes, transform) behaves the same:

* with an active ``distributed.Client`` its scheduler runs the graph (workers
  started by a nanny already pin BLAS to one thread each);
* otherwise dask's threaded scheduler runs one task per core, and BLAS is
  limited to one thread for the duration, so that two GEMMs do not fight for
  the same cores (and OpenBLAS's large multi-threaded GEMMs, which crash on
  this class of machine, are avoided).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import dask

_progress_enabled = False


def active_client() -> Any | None:
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
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


@contextlib.contextmanager
def show_progress(enabled: bool = True):
    """Show a progress bar for every dkpca compute inside the block."""
    global _progress_enabled
    old, _progress_enabled = _progress_enabled, enabled
    try:
        yield
    finally:
        _progress_enabled = old


def progress_enabled() -> bool:
    return _progress_enabled


def _distributed_progress(futures: list) -> None:
    """distributed's progress bar: a widget in Jupyter (if ipywidgets is installed), else text."""
    from distributed import progress
    from distributed.utils import is_kernel

    if is_kernel():
        try:
            import ipywidgets  # noqa: F401 - the widget needs it
            from IPython.display import display
        except ImportError:
            pass
        else:
            display(progress(futures, notebook=True))  # updates itself while we gather
            return
    progress(futures, notebook=False)


def compute(*tasks: Any, label: str = "", threads: int | None = None) -> tuple:
    """``dask.compute(*tasks)`` under dkpca's execution policy.

    With progress enabled (``show_progress``), a labelled compute shows a bar;
    unlabelled ones (e.g. each solver pass) stay quiet and report themselves.
    ``threads`` overrides the local thread count (tasks that block on I/O
    want more threads than cores); a distributed cluster keeps its own.
    """
    client = active_client()
    if client is not None:
        futures = client.compute(list(tasks))
        if _progress_enabled and label:
            print(label, flush=True)
            _distributed_progress(futures)
        return tuple(client.gather(futures))
    from threadpoolctl import threadpool_limits

    ctx = contextlib.ExitStack()
    if _progress_enabled and label:
        from dask.diagnostics import ProgressBar

        print(label, flush=True)
        ctx.enter_context(ProgressBar())
    with ctx, threadpool_limits(1, user_api="blas"):
        kw = {"num_workers": threads} if threads else {}
        return dask.compute(*tasks, scheduler="threads", **kw)
