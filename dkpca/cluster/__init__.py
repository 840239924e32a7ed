"""Clusters: start or connect to a Dask cluster from a config file or a scheduler address.

Nothing here knows about kernels, stores or solvers; every dkpca stage runs on
the active client that :func:`connect` leaves behind (:mod:`dkpca.execution`).
"""

from .config import BACKENDS, ClusterConfigError, backend_class, is_loopback, load_config, validate_config
from .connect import close, connect, connected, is_scheduler_address, make_security, start_local, worker_resources

__all__ = ["BACKENDS", "ClusterConfigError", "backend_class", "is_loopback", "load_config", "validate_config", "close",
           "connect", "connected", "is_scheduler_address", "make_security", "start_local", "worker_resources"]
