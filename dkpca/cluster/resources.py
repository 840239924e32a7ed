"""What a cluster's workers will have, read from its configuration without starting it.

Each back end's own rules decide: dask-jobqueue's ``Job`` computes its worker
processes, threads and memory from ``jobqueue.<name>.*`` (constructing one
submits nothing), LocalCluster's defaults are distributed's, Kubernetes sizes
come from the pod resources, Dask Gateway's from its cluster options.
"""

from __future__ import annotations

import inspect
import tempfile
from typing import Any

import dask.config
from dask.utils import parse_bytes, parse_timedelta
from distributed import LocalCluster, Nanny, Worker
from distributed.config import defaults as distributed_defaults

from ..machine import cores, memory_total
from .config import ClusterConfigError, ClusterSpec, backend_class, jobs_for, k8s_quantity, memory_bytes

__all__ = ["local_arguments", "local_housekeeping", "distributed_default", "check_distributed_settings",
           "LOCAL_HOUSEKEEPING", "LOCAL_MALLOC", "worker_resources", "sizing_job"]


#: the module a LocalCluster's workers import as they start (by name: this layer does not import it)
PRELOAD = "dkpca.pipeline"


def local_arguments(spec: ClusterSpec) -> dict[str, Any]:
    """LocalCluster arguments: ``dkpca.cluster.local`` over dkpca's defaults.

    Defaults: one single-threaded worker process per core (BLAS at one thread
    per worker, no oversubscription); scheduler and dashboard on 127.0.0.1.
    """
    kw = spec.dkpca("local")
    _check_local(kw, f"{spec.source}: dkpca.cluster.local")
    if "n_workers" not in kw and "threads_per_worker" not in kw:
        kw["n_workers"], kw["threads_per_worker"] = cores(), 1
    elif "n_workers" not in kw:
        kw["n_workers"] = max(1, cores() // int(kw["threads_per_worker"]))
    elif "threads_per_worker" not in kw:
        kw["threads_per_worker"] = 1
    kw.setdefault("processes", True)
    kw.setdefault("host", "127.0.0.1")
    kw.setdefault("dashboard_address", "127.0.0.1:8787")
    if kw["processes"]:
        # every worker imports what a fit's tasks need as it starts, all at once, not one module at a time at
        # its first task of each kind: each early computation of a fit on fresh workers waited for imports
        # (a 5,000-point fit's Gram build 1.27 s on 2 fresh workers against 0.25 s on the same ones after)
        kw.setdefault("preload", [PRELOAD])
    return kw


def _check_local(kw: dict[str, Any], where: str) -> None:
    """Refuse what LocalCluster would take and fail on only as its workers start (a nanny's traceback per worker,
    then "Cluster failed to start"), or divide by (``threads_per_worker: 0``)."""
    known = {name for cls in (LocalCluster, Nanny, Worker) for name, p in inspect.signature(cls).parameters.items()
             if p.kind is not p.VAR_KEYWORD}
    if unknown := sorted(set(kw) - known):
        raise ClusterConfigError(f"{where}: {', '.join(map(str, unknown))} is not an argument of distributed's "
                                 "LocalCluster or its workers; remove it or correct its spelling.")
    for key, least in (("n_workers", 0), ("threads_per_worker", 1)):
        value = kw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ClusterConfigError(f"{where}.{key} must be an integer >= {least}; got {value!r}.")


#: Housekeeping intervals of the LocalClusters dkpca starts, where distributed's defaults are 20 ms
#: event-loop ticks (only the "event loop unresponsive" warnings use them), a 100 ms memory monitor
#: (nanny and worker) and 10 ms samples of the workers' statistical profiler.  On a machine whose
#: cores all run workers that is CPU the fit's tasks lose: measured on 2 cores with 2 single-thread
#: workers, idle for 6 s, the scheduler, nannies and workers took 14.5-16.4 % of a core with
#: distributed's defaults and 4.5 % with these (the dashboard's profile keeps 100 ms samples; a
#: worker over its memory limit is still stopped within half a second).
LOCAL_HOUSEKEEPING = {
    "distributed.admin.tick.interval": "200ms",
    "distributed.worker.memory.monitor-interval": "500ms",
    "distributed.worker.profile.interval": "100ms",
}


#: glibc's allocator as it is, where distributed sets ``MALLOC_TRIM_THRESHOLD_=65536`` in every worker it spawns
#: (to hand freed memory back at once).  Setting it turns off glibc's dynamic mmap threshold, so each temporary
#: of 128 KiB or more -- a kernel block's strips, dozens a block -- is mapped afresh and faulted in page by page:
#: at n = 20,000 on 2 cores a worker's blocks took 0.13 s against a thread's 0.107 s, and the 2 workers' Gram
#: build 1.21 s against 1.02 s without it (the same fit, the key unset).  Its 64 MiB blocks are mapped either way
#: (above glibc's 32 MiB ceiling), so what a worker keeps is its strips' buffers, not K.
LOCAL_MALLOC = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def distributed_default(key: str) -> Any:
    """The value distributed ships for Dask config ``key`` (whatever the configuration now says)."""
    return dask.config.get(key, config=distributed_defaults)


def check_distributed_settings() -> None:
    """Refuse, by name, a ``distributed.*`` setting whose value is not of its default's kind (a duration, a number).

    Before a cluster starts here: distributed read them deep in its start and
    failed with a traceback that named neither the setting nor where it came
    from (``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=abc``: ``KeyError:
    'Invalid time unit: abc'`` from inside LocalCluster, or ``RuntimeError:
    TLSOnlyNanny failed to start.`` for a memory fraction of ``abc``).  None
    and booleans pass (distributed's own ways to turn a limit or a
    threshold off).
    """
    for key, default in _leaves(distributed_defaults):
        value = dask.config.get(key, default)
        if value is None or isinstance(value, bool) or value == default:
            continue
        kind = _kind(key, default)
        if kind is not None and not _of_kind(kind, value):
            env = "DASK_" + key.upper().replace(".", "__").replace("-", "_")
            raise ClusterConfigError(f"the Dask setting {key} is {value!r}, not a {kind} (distributed's default: "
                                     f"{default!r}); correct it or remove it (environment: {env}, or a Dask "
                                     "configuration file).")


def _leaves(tree: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every setting in a nested configuration mapping."""
    out = []
    for name, value in tree.items():
        key = f"{prefix}.{name}" if prefix else name
        out.extend(_leaves(value, key) if isinstance(value, dict) else [(key, value)])
    return out


def _kind(key: str, default: Any) -> str | None:
    """``"duration"`` or ``"number"`` where distributed's default is one (its version number aside), else None."""
    if isinstance(default, bool) or key == "distributed.version":
        return None
    if isinstance(default, (int, float)):
        return "number"
    return "duration" if isinstance(default, str) and _of_kind("duration", default) else None


def _of_kind(kind: str, value: Any) -> bool:
    """Whether ``value`` is a duration, or a number (sizes as Dask writes them count: '100MB/s' bandwidths)."""
    checks = (parse_timedelta,) if kind == "duration" else (float, parse_bytes)
    for check in checks:
        try:
            check(value)
            return True
        except (KeyError, ValueError, TypeError):
            continue
    return False


def local_housekeeping() -> dict[str, str | None]:
    """:data:`LOCAL_HOUSEKEEPING` and :data:`LOCAL_MALLOC`, less every setting the Dask configuration has changed
    from distributed's default.

    Applied while a LocalCluster starts (its scheduler and nannies read
    them then, and each nanny hands its worker the configuration), so a
    value set by the user -- in their Dask config or the cluster file --
    always wins.
    """
    return {key: value for key, value in {**LOCAL_HOUSEKEEPING, **LOCAL_MALLOC}.items()
            if dask.config.get(key) == distributed_default(key)}


def sizing_job(spec: ClusterSpec) -> Any:
    """A dask-jobqueue Job built from the configuration (nothing is submitted)."""
    job_cls = backend_class(spec.backend).job_cls
    with spec.applied():
        missing = [key for key in ("cores", "memory")
                   if dask.config.get(f"jobqueue.{spec.backend}.{key}", None) is None]
        if missing:  # dask-jobqueue's own message is Python advice (SLURMCluster(cores=8, ...)), not a setting
            raise ClusterConfigError(
                f"{spec.source}: the {spec.backend} back end needs " + " and ".join(
                    f"jobqueue.{spec.backend}.{key}" for key in missing) + " (per job) in the Dask configuration: "
                f"your site's jobqueue.yaml, a cluster file (e.g. cluster_configs/{spec.backend}.yaml), or "
                f"DASK_JOBQUEUE__{spec.backend.upper()}__CORES / __MEMORY.")
        # an existing log directory: a Job creates its configured one, and sizing must create nothing
        return job_cls(scheduler="tls://scheduler:8786", name="dkpca-sizing", config_name=spec.backend,
                       log_directory=tempfile.gettempdir())


def worker_resources(spec: ClusterSpec) -> dict[str, Any]:
    """``workers``, ``threads_per_worker`` and ``memory_per_worker`` (bytes) a cluster will have.

    A value is None where the configuration does not say (a running
    scheduler; a Kubernetes pod without a memory limit).
    """
    out: dict[str, Any] = {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    scale, adapt = spec.dkpca("scale"), spec.dkpca("adapt")
    if spec.backend == "local":
        kw = local_arguments(spec)
        threads = int(kw["threads_per_worker"])
        mem = memory_bytes(kw.get("memory_limit"))
        total = memory_total()
        out = {"workers": int(kw["n_workers"]), "threads_per_worker": threads,
               # distributed's "auto": the machine's memory shared out by threads
               "memory_per_worker": mem or int(total * min(1.0, threads / cores()))}
    elif spec.backend in ("slurm", "pbs"):
        job = sizing_job(spec)
        procs = job.worker_processes
        jobs = adapt.get("maximum_jobs") or jobs_for(scale, adapt, procs) if adapt else jobs_for(scale, adapt, procs)
        out = {"workers": jobs * procs,
               "threads_per_worker": job.worker_process_threads,
               "memory_per_worker": memory_bytes(job.worker_process_memory)}
    elif spec.backend == "kubernetes":
        res = spec.get("kubernetes.resources", None) or {}
        limits = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        out["workers"] = scale.get("n", spec.get("kubernetes.count.start", None))
        if "memory" in limits:
            out["memory_per_worker"] = int(k8s_quantity(limits["memory"]))
        out["threads_per_worker"] = max(1, int(k8s_quantity(limits["cpu"]))) if "cpu" in limits else None
    elif spec.backend == "gateway":
        opts = spec.get("gateway.cluster.options", None) or {}
        out["workers"] = scale.get("n", adapt.get("maximum"))
        out["threads_per_worker"] = opts.get("worker_cores")
        mem = opts.get("worker_memory")
        # dask-gateway's stock option is a number of GiB
        out["memory_per_worker"] = int(mem * 2**30) if isinstance(mem, (int, float)) else memory_bytes(mem)
    return out

