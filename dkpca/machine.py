"""This machine's cores and memory as this process may use them, counted as dask and distributed count them.

A batch job's allocation (SLURM and PBS confine a job to its CPUs and memory
by affinity and cgroups) or a container's limits, not the host's: on a
128-core node a job given 8 cores saw ``os.cpu_count() == 128``, and dkpca
ran 128 threads (or a LocalCluster of 128 workers) on its 8 cores; given
16 GB of a 512 GB node, ``psutil`` reported the node's free memory, and
planning could put a K in memory that the job's limit kills it for.
``dask.system.CPU_COUNT`` takes affinity and the cgroup's CPU quota into
account, ``distributed.system.MEMORY_LIMIT`` the cgroup's and the RSS
rlimit's memory limits -- the counts Dask's own thread pool and
LocalCluster size themselves by.
"""

from __future__ import annotations

import dask.system
import distributed.system
import psutil

__all__ = ["cores", "memory_total", "memory_available"]


def cores() -> int:
    """The cores this process may run on (affinity, cgroup CPU quota)."""
    return int(dask.system.CPU_COUNT)


def memory_total() -> int:
    """The memory this process's job may hold, in bytes (the host's, within cgroup and rlimit limits)."""
    return int(distributed.system.MEMORY_LIMIT)


def memory_available() -> int:
    """Bytes this process may still take: the host's available memory, within what its job's limit leaves above
    this process's resident set."""
    left = memory_total() - psutil.Process().memory_info().rss
    return int(max(0, min(psutil.virtual_memory().available, left)))
