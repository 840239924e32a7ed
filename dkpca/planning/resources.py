"""The workers, threads and memory per worker a plan is made for: a cluster file, scheduler, client or this host."""

from __future__ import annotations

import os
from typing import Any

from ..cluster import checked_spec, connected, is_scheduler_address, worker_resources
from ..execution import active_client, local_thread_count
from ..machine import memory_total

__all__ = ["cluster_resources"]


def _client_resources(client: Any) -> dict[str, Any]:
    workers = client.scheduler_info().get("workers", {})
    if not workers:
        return {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    w = next(iter(workers.values()))
    return {"workers": len(workers), "threads_per_worker": w.get("nthreads", 1),
            "memory_per_worker": w.get("memory_limit")}


def cluster_resources(cluster: Any) -> dict[str, Any]:
    """Workers, threads per worker and memory per worker for ``cluster`` (see :func:`plan`).

    ``distributed`` is False only for this machine's threads (no cluster, no client).
    """
    out: dict[str, Any] = {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    client = cluster if hasattr(cluster, "scheduler_info") else active_client()
    if isinstance(cluster, (str, os.PathLike)) and not os.path.isfile(cluster) and is_scheduler_address(
            os.fspath(cluster)):
        with connected(os.fspath(cluster)) as c:  # a running scheduler: ask it
            out = _client_resources(c)
    elif cluster is not None and client is not cluster:
        out = worker_resources(checked_spec(cluster))  # from the configuration, checked as a fit checks it
    elif client is not None:
        out = _client_resources(client)
    out["distributed"] = True
    if out["workers"] is None and cluster is None and client is None:
        out = {"workers": 1, "threads_per_worker": local_thread_count(), "memory_per_worker": memory_total(),
               "distributed": False}
    out["workers"] = out["workers"] or 1
    out["threads_per_worker"] = out["threads_per_worker"] or 1
    return out
