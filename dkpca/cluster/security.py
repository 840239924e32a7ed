"""TLS for the schedulers dkpca starts: credentials made for the run, shared with batch workers privately.

Every scheduler dkpca starts (local, demo, SLURM, PBS) requires TLS with
mutual authentication, so no other process or user can connect to it and
run code as the user.  The credentials are the site's when Dask's
configuration names them (``distributed.comm.tls.ca-file`` and friends),
otherwise a key and self-signed certificate made for this run
(``Security.temporary()``), which exist only in memory -- except that batch
workers start on other nodes and must read them from a file: those files are
written into a new directory only the user can enter (0700), each readable by
the user only (0600), on the filesystem the jobs share, and removed when the
cluster closes.

The workers of a LocalCluster dkpca starts listen on their TLS address only:
a distributed worker also serves HTTP (``/health``, ``/metrics``) on a port of
its own, unencrypted and unauthenticated, whether or not it has a dashboard;
:class:`TLSOnlyNanny` starts :class:`TLSOnlyWorker`, which serves none (unless
the cluster file asks for a worker dashboard, ``worker_dashboard_address``).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import dask.config
from distributed import Nanny, Worker
from distributed.security import Security

__all__ = ["run_security", "batch_security", "TLSOnlyNanny", "TLSOnlyWorker", "tls_only_worker_args"]


class TLSOnlyWorker(Worker):
    """A worker without its plain HTTP server (health and Prometheus metrics), unless it has a dashboard.

    Nothing dkpca does reads those pages; the server would be one more port
    on the host (on a batch node, every interface) that answers anyone
    without TLS.  A worker dashboard, when asked for (``dashboard=True``:
    LocalCluster's ``worker_dashboard_address``, ``dask worker --dashboard``),
    keeps its server.
    """

    def __init__(self, *args: Any, dashboard: bool = False, **kwargs: Any) -> None:
        self.dkpca_http = dashboard
        super().__init__(*args, dashboard=dashboard, **kwargs)

    def start_http_server(self, routes: Any, dashboard_address: Any, default_port: int = 0,
                          ssl_options: Any = None) -> None:
        if self.dkpca_http:
            super().start_http_server(routes, dashboard_address, default_port, ssl_options)


class TLSOnlyNanny(Nanny):
    """A nanny that starts a :class:`TLSOnlyWorker` (LocalCluster's ``worker_class``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("worker_class", TLSOnlyWorker)
        super().__init__(*args, **kwargs)


def site_certificates() -> bool:
    """Whether the Dask config names the site's CA and a certificate for every role of a cluster dkpca starts
    (scheduler, worker, client).  A CA with a client's certificate only is the README's set-up for reaching a
    remote scheduler: a cluster started here then gets dkpca's temporary certificates (the site's would leave
    the scheduler without one, which distributed refuses with a traceback)."""
    return bool(dask.config.get("distributed.comm.tls.ca-file", None)) and all(
        dask.config.get(f"distributed.comm.tls.{role}.cert", None) for role in ("scheduler", "worker", "client"))


def run_security() -> Security:
    """TLS for a scheduler that stays on this machine (in memory only)."""
    if site_certificates():
        return Security(require_encryption=True)  # the site's certificates, from the Dask config
    return Security.temporary()


def _write_private(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def batch_security(shared_directory: str) -> tuple[Security, str | None]:
    """TLS for a scheduler whose workers are batch jobs: (security, private directory or None).

    The worker role's credentials are files in a new 0700 directory under
    ``shared_directory`` (which the jobs must see: the submission directory
    or ``jobqueue.<name>.shared-temp-directory``); the scheduler's and the
    client's stay in memory.  The caller removes the directory when the
    cluster has closed.
    """
    if site_certificates():
        return Security(require_encryption=True), None
    temp = Security.temporary()
    base = os.path.expanduser(os.path.expandvars(shared_directory))
    directory = tempfile.mkdtemp(prefix=".dkpca-tls-", dir=base)  # mode 0700
    cert = _write_private(directory, "cert.pem", temp.tls_worker_cert)
    key = _write_private(directory, "key.pem", temp.tls_worker_key)
    # self-signed: the certificate is its own CA
    security = Security(
        require_encryption=True, tls_ca_file=cert, tls_worker_cert=cert, tls_worker_key=key,
        tls_scheduler_cert=temp.tls_scheduler_cert, tls_scheduler_key=temp.tls_scheduler_key,
        tls_client_cert=temp.tls_client_cert, tls_client_key=temp.tls_client_key,
    )
    return security, directory


def tls_only_worker_args(args: list[str]) -> list[str]:
    """``dask worker`` arguments for batch workers that listen on their TLS port only (:class:`TLSOnlyWorker`).

    Unless the configuration names a worker class or asks for a worker
    dashboard itself (``--dashboard``), whose server then stays.
    """
    if "--worker-class" in args or "--dashboard" in args:
        return args
    return [*args, "--worker-class", f"{TLSOnlyWorker.__module__}.{TLSOnlyWorker.__qualname__}", "--no-dashboard"]
