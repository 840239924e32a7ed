"""Clusters: start one from Dask's configuration, or reach a running scheduler.

Nothing here knows about kernels, stores or solvers; every dkpca stage runs on
the active client that :func:`connect` leaves behind (:mod:`dkpca.execution`).
"""

from .config import BACKENDS, ClusterConfigError, ClusterError, ClusterSpec, backend_class, cluster_spec
from .connect import checked_spec, close, connect, connected, is_scheduler_address
from .resources import check_distributed_settings, worker_resources

__all__ = ["BACKENDS", "ClusterConfigError", "ClusterError", "ClusterSpec", "backend_class",
           "check_distributed_settings", "checked_spec", "cluster_spec", "close", "connect", "connected",
           "is_scheduler_address", "worker_resources"]
