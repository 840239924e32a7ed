"""Which scheduler runs dask work: an active ``distributed.Client``'s, or the one ``dask.config`` names.

Also dkpca's tri-state Dask config switches (:func:`config_switch`) and how
many tasks run at once (:func:`n_workers_threads`), for sizing and planning.
"""

from __future__ import annotations

import os
from typing import Any

import dask
from distributed import default_client

from ..config import setting
from .watch import SchedulerLostError, asking, scheduler_address

__all__ = ["active_client", "config_switch", "local_thread_count", "n_workers_threads"]


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
    value = setting(key)  # its default (auto) is in dkpca/dkpca.yaml
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("true", "false", "auto"):
        return None if word == "auto" else word == "true"
    raise ValueError(f"dask config {key!r} is {value!r}; it must be true, false or auto.")


def local_thread_count() -> int:
    """Threads of this process's work: the Dask setting ``num_workers``, else one per core."""
    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def n_workers_threads() -> int:
    """Number of tasks that run at once (for sizing and planning)."""
    client = active_client()
    if client is not None:
        with asking(client):
            return max(1, sum(client.nthreads().values()))
    return local_thread_count()
