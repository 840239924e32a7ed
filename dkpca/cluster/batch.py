"""Batch clusters (dask-jobqueue's SLURM and PBS): start one, submit its jobs within a deadline, say what went wrong.

A submission is one ``sbatch``/``qsub`` call per job, awaited by
dask-jobqueue in the cluster's event loop.  A batch system that is down or
overloaded (slurmctld not answering: ``sbatch`` retries for minutes, or for
ever on some sites) left the fit waiting without a word; a batch job running
dkpca spent its walltime there.  The submission now shares the deadline the
workers have (``dkpca.cluster.timeout``): when it passes, the submitting
processes still running are killed (so no job is submitted after the fit has
given up: nobody would cancel it) and one error says what did not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from typing import Any

import dask.config
import psutil
from distributed.core import Status
from distributed.deploy.spec import ProcessInterface

from .config import ClusterConfigError, ClusterError, ClusterSpec, backend_class, is_loopback, worker_lifetime_args
from .security import batch_security, tls_only_worker_args

__all__ = ["need_command", "start_batch", "submit_jobs", "warn_open_dashboard"]

logger = logging.getLogger("dkpca")

#: seconds for a killed submission's failure to reach the cluster's start
_AFTER_KILL = 10.0


def need_command(command: str, backend: str) -> None:
    """Refuse a back end whose command (its first word) is not on PATH."""
    exe = command.split()[0]
    if shutil.which(exe) is None:
        raise ClusterError(f"{exe} is not on PATH: the {backend} back end submits and cancels workers with it; run "
                           "dkpca on a node of that batch system (a login node), or choose another --cluster.")


def warn_open_dashboard(address: Any, where: str) -> None:
    """Warn of a dashboard bound beyond the loopback interface (it has no authentication)."""
    if address and not is_loopback(address):
        logger.warning("%s: the Dask dashboard at %s has no authentication; anyone who can reach it sees the "
                       "cluster (bind it to 127.0.0.1 and use an SSH tunnel)", where, address)


def start_batch(spec: ClusterSpec, cleanup: contextlib.ExitStack) -> Any:
    """The dask-jobqueue cluster of ``spec`` (TLS only, workers' lifetime within the walltime); no job submitted."""
    name = spec.backend
    cls = backend_class(name)
    for command in (cls.job_cls.submit_command, cls.job_cls.cancel_command):
        need_command(command, name)
    where = f"{spec.source}: jobqueue.{name}"
    args = worker_lifetime_args(dask.config.get(f"jobqueue.{name}.worker-extra-args", None) or [],
                                dask.config.get(f"jobqueue.{name}.walltime", None), where,
                                plain=60.0 if name == "slurm" else 1.0)
    args = tls_only_worker_args(args)  # no plain HTTP port on the compute nodes
    options = dict(dask.config.get(f"jobqueue.{name}.scheduler-options", None) or {})
    if options.get("protocol") not in (None, "tls", "tls://"):
        raise ClusterConfigError(f"{where}.scheduler-options.protocol {options['protocol']!r}: a scheduler that "
                                 "batch workers reach listens on the network, so dkpca starts it with TLS only; "
                                 "remove the protocol.")
    options.setdefault("dashboard_address", "127.0.0.1:8787")  # no authentication: loopback unless named
    warn_open_dashboard(options["dashboard_address"], where)
    shared = dask.config.get(f"jobqueue.{name}.shared-temp-directory", None) or os.getcwd()
    security, private = batch_security(shared)
    if private is not None:
        cleanup.callback(shutil.rmtree, private, True)
    return cls(config_name=name, worker_extra_args=args, scheduler_options=options, security=security,
               protocol="tls://")


async def _submit(cluster: Any, jobs: int, timeout: float, submit: str) -> bool:
    """Submit ``jobs`` jobs and wait for the batch system's answer (a rejection raises here); False if it gave
    none within ``timeout`` seconds (the ``submit`` processes are then killed, and their failures awaited)."""
    while len(cluster.worker_spec) < jobs:
        cluster.worker_spec.update(cluster.new_worker_spec())
    # SpecCluster starts what worker_spec asks for in tasks of its own, which cancelling this await would leave
    # running: the start is awaited whole, and ended by ending its submissions.
    start = asyncio.ensure_future(cluster)
    if (await asyncio.wait([start], timeout=timeout))[0]:
        start.result()
        return True
    _kill_submissions(submit)
    await asyncio.wait([start], timeout=_AFTER_KILL)
    with contextlib.suppress(Exception):  # killed: the submission's failure is this one's, said by the caller
        start.result()
    return False


def submit_jobs(cluster: Any, backend: str, jobs: int, timeout: float) -> None:
    """Submit ``jobs`` jobs of ``cluster`` and wait up to ``timeout`` seconds for the batch system to take them.

    Raises
    ------
    ClusterError
        The batch system rejected a job, or did not answer within ``timeout``.
    """
    submit = cluster.job_cls.submit_command.split()[0]  # sbatch, qsub
    try:
        answered = cluster.sync(_submit, cluster, jobs, timeout, submit)
    except RuntimeError as exc:
        _forget_unsubmitted(cluster)
        text = str(exc)
        said = text.split("stderr:", 1)[-1] if "stderr:" in text else text
        raise ClusterError(f"the batch system rejected the {backend} worker job: {' '.join(said.split())}; fix the "
                           f"jobqueue.{backend} settings (queue, account, walltime, memory) in the cluster file or "
                           "the site's Dask configuration.") from None
    if not answered:
        _forget_unsubmitted(cluster)
        raise ClusterError(f"the batch system did not answer the {backend} job submission ({submit}) within "
                           f"{timeout:g}s; check that it is up (sinfo, squeue or qstat answer) and rerun, or wait "
                           "longer (--cluster-timeout, Dask setting dkpca.cluster.timeout).")


def _kill_submissions(submit: str) -> None:
    """Kill this process's children running ``submit``: a cancelled await leaves its process running."""
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if any(os.path.basename(arg) == submit for arg in child.cmdline()[:2]):  # 'sbatch', or a script's path
                child.kill()


def _forget_unsubmitted(cluster: Any) -> None:
    """Mark the jobs never submitted closed: nothing to cancel (closing the cluster waits on them otherwise)."""
    for job in list(cluster.workers.values()):
        if job.status == Status.created:
            cluster.sync(ProcessInterface.close, job)
