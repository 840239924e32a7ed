"""Start a Dask cluster or reach a running scheduler: fail fast, in one error, and leave nothing running.

``connect("slurm")``, ``connect("cluster_configs/slurm.yaml")``,
``connect("tls://host:8786")`` or ``connect(scheduler_file="scheduler.json")``
return a :class:`distributed.Client` that every dkpca computation then uses
(:mod:`dkpca.execution` picks up the active client).  dkpca adds to the back
ends only what it needs: TLS for the schedulers it starts
(:mod:`.security`), a worker ``--lifetime`` under a batch walltime, a check of
the memory per worker against the fit's needs before anything starts, and a
deadline for the workers to arrive.  Anything that goes wrong -- no
``sbatch``, a job the batch system rejects, a scheduler that does not
answer, workers that do not come -- raises :class:`ClusterError` (or
``ValueError`` for a configuration dkpca cannot use) after whatever had
started has been shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import dask.config
from dask.utils import format_bytes
from distributed import Client, LocalCluster

from ..config import check_settings, setting
from ..signals import holding_interrupts
from ..version import __version__, installed_version
from .batch import need_command, start_batch, submit_jobs, warn_open_dashboard
from .config import (
    ClusterConfigError,
    ClusterError,
    ClusterSpec,
    backend_class,
    cluster_spec,
    duration_seconds,
    is_scheduler_address,
    jobs_for,
)
from .reach import one_line, reach
from .resources import check_distributed_settings, local_arguments, local_housekeeping, sizing_job, worker_resources
from .security import TLSOnlyNanny, run_security
from .spawning import add_log_filter, quiet_interrupts, starting_workers

__all__ = ["connect", "close", "connected", "is_scheduler_address"]

logger = logging.getLogger("dkpca")

Target = str | os.PathLike | Mapping | ClusterSpec | None


def _wait_for_workers(client: Client, spec: ClusterSpec | None, timeout: float | None, what: str) -> None:
    """Wait for the workers of ``spec`` (one if None), then log the dashboard link once; closes ``client`` if not."""
    try:
        _await_workers(client, spec, timeout, what)
    except BaseException:
        client.close()
        raise


def _deadline(spec: ClusterSpec | None, timeout: float | None) -> float:
    """Seconds to wait for a batch system's answer and for workers: ``timeout``, else ``dkpca.cluster.timeout``."""
    if timeout is not None:
        return timeout
    return spec.dkpca("timeout") if spec is not None else duration_seconds(
        setting("dkpca.cluster.timeout"), "Dask setting dkpca.cluster.timeout")


def _await_workers(client: Client, spec: ClusterSpec | None, timeout: float | None, what: str) -> None:
    n = spec.dkpca("workers") if spec is not None else 1  # a running scheduler: one worker to start with
    timeout = _deadline(spec, timeout)
    try:
        client.wait_for_workers(n, timeout=timeout)
    except TimeoutError:
        raise ClusterError(
            f"{what}: {n} worker(s) did not arrive within {timeout:g}s; check that workers can start and reach the "
            "scheduler (batch jobs may still be queued: see squeue/qstat), or wait longer (--cluster-timeout, "
            "Dask setting dkpca.cluster.timeout)."
        ) from None
    _check_worker_dkpca(client, what)
    try:
        link = client.dashboard_link
    except Exception:  # a back end that cannot say before its scheduler answers: no link to show
        link = None
    logger.info("%s: %d worker(s); dashboard: %s", what, len(client.nthreads()),
                link or "(none)")


def _check_worker_dkpca(client: Client, what: str) -> None:
    """Refuse workers that cannot import dkpca, or run another version of it, by name (one ``Client.run`` of
    :func:`~dkpca.version.installed_version`: ~10 ms).

    Each task names a dkpca function; a worker that cannot import dkpca dies unpickling the first one, and the
    fit waited for ``dkpca.cluster.timeout`` twice (20 minutes by default) to say only that the cluster had lost
    a computation.  (distributed's ``get_versions`` reads the installed metadata, which a worker whose dkpca
    does not import still has.)  Another version would evaluate with other code than this process plans with.
    """
    try:
        found = client.run(installed_version, on_error="return")
    except Exception:  # a scheduler that cannot run it: the computation's own errors will say
        return
    other = {address: version for address, version in found.items() if version != __version__}
    if other:
        address, version = next(iter(other.items()))
        has = f"runs dkpca {version}" if isinstance(version, str) else f"cannot import dkpca ({one_line(version)})"
        raise ClusterError(f"{what}: {len(other)} of {len(found)} worker(s) {has} (e.g. {address}), and this "
                           f"process runs dkpca {__version__}; install this dkpca where the workers run (the same "
                           "Python environment on their nodes, or the workers' image), then rerun.")


# -- starting a cluster -----------------------------------------------------------
def _check_memory(spec: ClusterSpec, memory_per_worker: int | None) -> None:
    if not memory_per_worker:
        return
    have = worker_resources(spec)["memory_per_worker"]
    if have is not None and have < memory_per_worker:
        raise ClusterConfigError(
            f"{spec.source}: a {spec.backend} worker would have {format_bytes(have)} of memory but the fit needs "
            f"{format_bytes(memory_per_worker)} per worker (its Gram block tasks); give workers more memory or "
            "fewer threads, or use a smaller chunk size."
        )


def _start_local(spec: ClusterSpec) -> Any:
    kw = local_arguments(spec)
    for key, given in (("", kw), ("scheduler_kwargs.", kw.get("scheduler_kwargs") or {})):
        if isinstance(given, dict) and given.get("protocol") not in (None, "tls", "tls://"):
            raise ClusterConfigError(f"{spec.source}: dkpca.cluster.local.{key}protocol {given['protocol']!r}: the "
                                     "schedulers and workers dkpca starts use TLS; remove the protocol.")
    warn_open_dashboard(kw["dashboard_address"], spec.source)
    kw["security"] = run_security()
    if kw["processes"]:  # (threads in this process: no worker ports at all)
        kw.setdefault("worker_class", TLSOnlyNanny)  # workers listen on their TLS port only
    with dask.config.set(local_housekeeping()), holding_interrupts() as held:
        with starting_workers() if kw["processes"] else contextlib.nullcontext():
            cluster = LocalCluster(**kw)
        if held:  # a Ctrl-C while it started, held till it had: closed, then raised (else left to exit's finalizers)
            cluster.close()
    return cluster


def _start_cloud(spec: ClusterSpec) -> Any:
    if spec.backend == "kubernetes":
        # Outside a pod the Kubernetes API is reached with the user's kubectl configuration.
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            need_command("kubectl", "kubernetes")
        cls = backend_class("kubernetes")
        start = lambda: cls(quiet=True)  # noqa: E731 - everything else from the kubernetes.* config
    else:
        gateway = backend_class("gateway")
        start = lambda: gateway().new_cluster()  # noqa: E731 - options from gateway.cluster.options
    try:
        return start()
    except (ImportError, ValueError, TypeError):
        raise
    except Exception as exc:  # the platform's answer (API unreachable, quota, operator missing): say it
        raise ClusterError(f"the {spec.backend} cluster did not start: {one_line(exc)}") from None


def _start(spec: ClusterSpec, cleanup: contextlib.ExitStack, timeout: float | None,
           memory_per_worker: int | None) -> Client:
    """Start the cluster of ``spec`` (its configuration applied) and wait for its workers."""
    what = f"Dask {spec.backend} cluster" + (f" from {spec.source}" if spec.source != spec.backend else "")
    if spec.backend == "scheduler":
        address = dask.config.get("scheduler-address", None)
        if not address:
            raise ClusterConfigError(f"{spec.source}: dkpca.cluster.backend is 'scheduler' but no "
                                     "'scheduler-address' is set; add e.g. 'scheduler-address: tls://host:8786'.")
        client = reach(address=address)
        _wait_for_workers(client, spec, timeout, f"Dask scheduler {address}")
        return client
    check_distributed_settings()  # the scheduler (and a LocalCluster's workers) start here and read them
    _check_memory(spec, memory_per_worker)
    scale, adapt = spec.dkpca("scale"), spec.dkpca("adapt")
    if spec.backend == "local":
        cluster = _start_local(spec)
    elif spec.backend in ("slurm", "pbs"):
        cluster = start_batch(spec, cleanup)
    else:
        cluster = _start_cloud(spec)
    try:
        if spec.backend in ("slurm", "pbs"):
            submit_jobs(cluster, spec.backend, jobs_for(scale, adapt, sizing_job(spec).worker_processes),
                        _deadline(spec, timeout))
        elif scale:
            cluster.scale(**scale)
        if adapt:
            cluster.adapt(**adapt)
        if spec.backend == "gateway":
            client = cluster.get_client()
        else:
            # Results come straight from the workers of a local cluster (they
            # are on this host): not through the scheduler, which would pass
            # every result through TLS twice more (measured: 15 ms a pass at
            # n = 20,000 on two local workers).  Elsewhere the workers may not
            # be reachable from here; the user's Dask setting decides.
            direct = True if spec.backend == "local" else None
            client = Client(cluster, set_as_default=True, direct_to_workers=direct)
        _wait_for_workers(client, spec, timeout, what)
        if spec.backend == "local":  # its workers write to this terminal: a Ctrl-C leaves only dkpca's line
            quiet_interrupts(client)
    except BaseException:
        cluster.close()
        raise
    return client


def _open(target: Target, scheduler_file: str | os.PathLike | None, timeout: float | None,
          memory_per_worker: int | None, cleanup: contextlib.ExitStack) -> Client:
    if scheduler_file is not None:
        if target is not None:
            raise ValueError("give either a cluster (or scheduler address) or scheduler_file, not both.")
        client = reach(scheduler_file=os.fspath(scheduler_file))
        spec = None
        what = f"Dask scheduler from {os.fspath(scheduler_file)}"
    elif isinstance(target, (str, os.PathLike)) and not os.path.isfile(target) and is_scheduler_address(
            os.fspath(target)):
        s = os.fspath(target)
        client = reach(address=s if "://" in s else f"tcp://{s}")
        spec, what = None, f"Dask scheduler {s}"
    else:
        spec = checked_spec(target)
        with spec.applied():
            return _start(spec, cleanup, timeout, memory_per_worker)
    _wait_for_workers(client, spec, timeout, what)
    return client


def checked_spec(target: str | os.PathLike | Mapping | ClusterSpec) -> ClusterSpec:
    """The cluster file or mapping ``target``, its dkpca settings checked before anything starts (they were read
    once it had: 12 s later) -- by a fit, and by a plan that sizes the cluster from it (which took a timeout
    'forever' a fit refuses)."""
    spec = cluster_spec(target)
    with spec.applied():
        try:
            check_settings()
        except ValueError as exc:
            raise ClusterConfigError(f"{spec.source}: {exc}") from None
        for key in ("workers", "timeout", "local", "scale", "adapt"):  # each checked as it is read
            spec.dkpca(key)
    return spec


def connect(target: Target = None, *, scheduler_file: str | os.PathLike | None = None,
            timeout: float | str | None = None, memory_per_worker: int | None = None) -> Client:
    """Start a cluster, or reach a running scheduler, and return its :class:`distributed.Client`.

    Parameters
    ----------
    target : str, path or mapping
        A back end (``"local"``, ``"slurm"``, ``"pbs"``, ``"kubernetes"``,
        ``"gateway"``) started from the user's and site's Dask configuration;
        a cluster file (a Dask configuration file, merged over those; see
        ``cluster_configs/``) or such a configuration as a dict; or the
        address of a running scheduler (``tcp://host:8786``, ``tls://...``).
    scheduler_file : path, optional
        Instead of ``target``: the JSON file a running scheduler wrote
        (``dask scheduler --scheduler-file``, dask-mpi), as
        ``Client(scheduler_file=...)``.
    timeout : float or str, optional
        How long to wait for the workers (default: Dask setting
        ``dkpca.cluster.timeout``, 10 minutes).  Reaching a scheduler waits
        ``distributed.comm.timeouts.connect``.
    memory_per_worker : int, optional
        Bytes each worker needs (``dkpca.plan(...).memory_per_worker``): a
        cluster whose configured workers have less is refused before it starts.

    Returns
    -------
    distributed.Client
        The default client from now on; ``client.cluster`` is the cluster
        started for it, if any.  Shut both down with :func:`close`, or use
        :func:`connected`.  A cluster file's settings apply while the cluster
        starts; :func:`connected` keeps them for its whole block.

    Raises
    ------
    ClusterError
        A batch command is missing, a job was rejected, the scheduler did not
        answer or the workers did not arrive in time (nothing is left running).
    ValueError
        A configuration dkpca cannot use (:class:`ClusterConfigError`).
    FileNotFoundError
        No such cluster file or scheduler file.
    ImportError
        The back end's package is missing (the message names the extra).
    """
    cleanup = contextlib.ExitStack()
    timeout = duration_seconds(timeout, "timeout") if timeout is not None else None
    try:
        client = _open(target, scheduler_file, timeout, memory_per_worker, cleanup)
    except BaseException:
        cleanup.close()
        raise
    weakref.finalize(client, cleanup.close)  # the workers' credentials go with the client
    return client


class _GivenUpReconnection(logging.Filter):
    """Drops distributed's reports of a client's reconnection that ended because the client closed."""

    def filter(self, record: logging.LogRecord) -> bool:
        cancelled = record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError)
        return not (cancelled or str(record.msg).startswith("Failed to reconnect to scheduler"))


def close(client: Any) -> None:
    """Close ``client`` and the cluster :func:`connect` started for it (if any).

    A client whose scheduler went away is still trying to reconnect; closing
    it ends that attempt, which distributed reports as an error ("Failed to
    reconnect", then a traceback of the cancelled attempt).  After dkpca's one
    line saying that the scheduler went away that is noise, so from then on
    those two reports are dropped (nothing else).
    """
    cluster = getattr(client, "cluster", None)
    if client.status == "connecting":
        add_log_filter("distributed.client", _GivenUpReconnection)
    with holding_interrupts():  # a close cut off by Ctrl-C leaves workers and scratch files behind
        client.close()
        if cluster is not None:
            cluster.close()


@contextlib.contextmanager
def connected(target: Target = None, *, scheduler_file: str | os.PathLike | None = None,
              timeout: float | str | None = None, memory_per_worker: int | None = None) -> Iterator[Client | None]:
    """``with connected(target) as client:`` -- :func:`connect`, the cluster file's settings, then :func:`close`.

    With neither ``target`` nor ``scheduler_file`` it yields None: dask's
    configured scheduler runs the work (threads by default).
    """
    if target is None and scheduler_file is None:
        yield None
        return
    timeout = duration_seconds(timeout, "timeout") if timeout is not None else None
    with contextlib.ExitStack() as stack:
        if scheduler_file is None and not (isinstance(target, (str, os.PathLike)) and not os.path.isfile(target)
                                           and is_scheduler_address(os.fspath(target))):
            target = cluster_spec(target)
            stack.enter_context(target.applied())  # e.g. dkpca.lease from the file holds during the fit
        client = _open(target, scheduler_file, timeout, memory_per_worker, stack)
        stack.callback(close, client)
        yield client
