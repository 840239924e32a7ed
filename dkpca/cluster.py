"""Start or connect to a Dask cluster.

``start_local`` is the embedded default used by ``dkpca demo``: a
``LocalCluster`` of single-threaded worker processes (BLAS pinned to one thread
each by the nanny) with the dashboard bound to 127.0.0.1 only -- the dashboard
has no authentication, so it must not listen on every interface.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["start_local"]


@contextlib.contextmanager
def start_local(n_workers: int | None = None, threads_per_worker: int = 1,
                dashboard_address: str = "127.0.0.1:0", **kwargs: Any) -> Iterator[Any]:
    """Context manager yielding a Client on a fresh LocalCluster."""
    from distributed import Client, LocalCluster

    n_workers = n_workers or os.cpu_count() or 1
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                      host="127.0.0.1", dashboard_address=dashboard_address, **kwargs) as cluster, \
            Client(cluster) as client:
        yield client
