"""Start or connect to a Dask cluster (see :mod:`dkpca.cluster.config` for the file format)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
from dask.utils import parse_bytes
from distributed import Client, LocalCluster
from distributed.security import Security

from .config import backend_class, load_config, validate_config

__all__ = ["connect", "close", "connected", "worker_resources", "start_local", "is_scheduler_address", "make_security"]

logger = logging.getLogger("dkpca")


def make_security(sec: dict, source: str) -> Security | None:
    """A ``distributed.security.Security`` from a config's ``security`` mapping (files checked to exist)."""
    if not sec:
        return None
    if sec.get("temporary"):
        try:
            return Security.temporary()
        except ImportError as exc:
            raise ImportError("security.temporary needs the 'cryptography' package: pip install cryptography") from exc
    for key, value in sec.items():
        if key.endswith(("_file", "_cert", "_key")) and isinstance(value, str) and "-----BEGIN" not in value:
            if not os.path.isfile(os.path.expanduser(value)):
                raise FileNotFoundError(f"{source}: security.{key} {value!r} does not exist.")
            sec[key] = os.path.expanduser(value)
    return Security(**sec)


def _log_dashboard(client: Any, what: str) -> None:
    try:
        link = client.dashboard_link
    except Exception:  # some back ends cannot say before the scheduler answers
        link = None
    workers = len(client.scheduler_info().get("workers", {}))
    logger.info("%s: %d worker(s) connected; dashboard: %s", what, workers, link or "(none)")


def _start(cfg: dict, source: str):
    """Start the configured cluster; return (client, cluster or None)."""
    backend = cfg["backend"]
    c = dict(cfg.get("cluster") or {})
    cl = dict(cfg.get("client") or {})
    timeout = cl.get("timeout", "60s")
    security = make_security(dict(cfg.get("security") or {}), source)
    scale = dict(cfg.get("scale") or {})
    adapt = dict(cfg.get("adapt") or {})
    cluster = None
    if backend == "scheduler":
        client = Client(cfg["address"], security=security, timeout=timeout)
    elif backend == "gateway":
        Gateway = backend_class("gateway")
        gateway = Gateway(**cfg["gateway"])
        options = gateway.cluster_options()
        for key, value in (cfg.get("cluster_options") or {}).items():
            options[key] = value
        cluster = gateway.new_cluster(options)
        client = cluster.get_client()
    else:
        if backend == "local":
            cls = LocalCluster
            c.setdefault("dashboard_address", "127.0.0.1:0")
            c.setdefault("host", "127.0.0.1")
            c.setdefault("threads_per_worker", 1)
        else:
            cls = backend_class(backend)
        if security is not None:
            c["security"] = security
        cluster = cls(**c)
        client = Client(cluster, timeout=timeout)
    if cluster is not None:
        if adapt:
            cluster.adapt(**adapt)
        elif scale:
            n = scale.pop("workers", scale.pop("n", None))
            cluster.scale(n, **scale) if n is not None else cluster.scale(**scale)
    if cl.get("wait_for_workers"):
        client.wait_for_workers(cl["wait_for_workers"], timeout=cl.get("wait_timeout"))
    _log_dashboard(client, f"Dask {backend} cluster from {source}" if cluster is not None
                   else f"Dask scheduler {cfg.get('address')}")
    return client, cluster


def is_scheduler_address(s: str) -> bool:
    """Whether ``s`` reads as a scheduler address (``tcp://host:port``, ``host:port``)."""
    return "://" in s or bool(re.fullmatch(r"[\w.\-]+:\d+", s))


def connect(target: str | os.PathLike | Mapping, timeout: str = "30s") -> Any:
    """Connect to a cluster and return a :class:`distributed.Client`.

    Parameters
    ----------
    target : str, path or mapping
        A cluster config file (``cluster_configs/*.yaml``), a config already
        parsed into a dict, or the address of a running scheduler
        (``tcp://host:8786``, ``tls://...``).
    timeout : str
        How long to wait for a scheduler given by address.

    Returns
    -------
    distributed.Client
        The active client (the default for all dkpca computations).  For a
        cluster started from a config, ``client.cluster`` is that cluster:
        shut both down with :func:`close` (or use :func:`connected`).

    Raises
    ------
    FileNotFoundError
        ``target`` is neither an existing file nor a scheduler address.
    ClusterConfigError
        The config is invalid.
    ImportError
        The back end's optional package is missing (the message names the
        extra, e.g. ``pip install 'dkpca[slurm]'``).
    """
    if isinstance(target, Mapping):
        return _start(validate_config(target), "<config>")[0]
    s = os.fspath(target)
    if os.path.isfile(s) or s.endswith((".yaml", ".yml")):
        return _start(load_config(s), s)[0]
    if is_scheduler_address(s):
        return _start({"backend": "scheduler", "address": s if "://" in s else f"tcp://{s}",
                       "client": {"timeout": timeout}}, s)[0]
    raise FileNotFoundError(
        f"{s!r} is neither a cluster config file nor a scheduler address; pass e.g. "
        "cluster_configs/local.yaml or tcp://host:8786."
    )


def close(client: Any) -> None:
    """Close ``client`` and the cluster :func:`connect` started for it (if any)."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


@contextlib.contextmanager
def connected(target: str | os.PathLike | Mapping | None) -> Iterator[Any]:
    """``with connected(target) as client:`` -- :func:`connect`, then :func:`close`.

    ``target=None`` yields None (local threads, no cluster).
    """
    if target is None:
        yield None
        return
    client = connect(target)
    try:
        yield client
    finally:
        close(client)


def worker_resources(cfg: dict) -> dict[str, Any]:
    """What a config asks for, without starting it (for :func:`dkpca.plan`).

    Returns a dict with ``workers`` (worker processes), ``threads_per_worker``
    and ``memory_per_worker`` (bytes); a value is None where the config does
    not say (e.g. a running scheduler).
    """
    b = cfg["backend"]
    c = cfg.get("cluster") or {}
    scale = cfg.get("scale") or {}
    adapt = cfg.get("adapt") or {}
    out: dict[str, Any] = {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    if b == "local":
        workers = c.get("n_workers", os.cpu_count() or 1)
        out["workers"] = workers
        out["threads_per_worker"] = c.get("threads_per_worker", 1)
        mem = c.get("memory_limit")
        if mem not in (None, "auto"):
            out["memory_per_worker"] = parse_bytes(mem)
        else:
            out["memory_per_worker"] = psutil.virtual_memory().total // max(1, workers)
    elif b in ("slurm", "pbs"):
        procs = c.get("processes", 1)
        jobs = scale.get("jobs", adapt.get("maximum_jobs"))
        if jobs is None and scale.get("workers") is not None:
            jobs = -(-scale["workers"] // procs)
        out["workers"] = jobs * procs if jobs is not None else None
        out["threads_per_worker"] = max(1, c["cores"] // procs)
        out["memory_per_worker"] = parse_bytes(c["memory"]) // procs
    elif b == "kubernetes":
        out["workers"] = scale.get("workers", scale.get("n", c.get("n_workers")))
        limits = (c.get("resources") or {}).get("limits") or (c.get("resources") or {}).get("requests") or {}
        if "memory" in limits:
            out["memory_per_worker"] = parse_bytes(str(limits["memory"]).replace("Gi", "GiB").replace("Mi", "MiB"))
        if "cpu" in limits:
            out["threads_per_worker"] = max(1, int(float(str(limits["cpu"]).rstrip("m")) /
                                                   (1000 if str(limits["cpu"]).endswith("m") else 1)))
    elif b == "gateway":
        opts = cfg.get("cluster_options") or {}
        out["workers"] = scale.get("workers", scale.get("n", adapt.get("maximum")))
        out["threads_per_worker"] = opts.get("worker_cores")
        if "worker_memory" in opts:
            mem = opts["worker_memory"]
            out["memory_per_worker"] = int(mem * 2**30) if isinstance(mem, (int, float)) else parse_bytes(mem)
    return out


@contextlib.contextmanager
def start_local(n_workers: int | None = None, threads_per_worker: int = 1,
                dashboard_address: str = "127.0.0.1:0", **kwargs: Any) -> Iterator[Any]:
    """Context manager yielding a Client on a fresh LocalCluster (dashboard on 127.0.0.1)."""
    n_workers = n_workers or os.cpu_count() or 1
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                      host="127.0.0.1", dashboard_address=dashboard_address, **kwargs) as cluster, \
            Client(cluster) as client:
        _log_dashboard(client, "local Dask cluster")
        yield client
