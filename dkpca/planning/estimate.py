"""Time estimates of a fit from per-entry rates: the build, a pass, the scheduler's share, a cluster's block.

A sweep over K's upper-triangular blocks of edge b -- a solver pass, or the
Gram build, whose graph has a pass's shape when the solver's first product
is fused into it -- costs (:func:`dkpca.linalg.pass_cost`):

* compute: ``P b^2`` entries x one thread's seconds per entry / the tasks
  that run at once;
* filesystem: K's bytes, read by a pass or written by the build, at an
  *assumed* aggregate bandwidth ``fs_bandwidth`` (bytes/s) when one is
  given; the larger of compute and filesystem binds;
* scheduler: the graph's tasks x :data:`SCHEDULER_SECONDS_PER_TASK`,
  serial, on top.

The per-entry rates are measured (:func:`dkpca.planning.measure_blocks`,
``plan(measure=True)``) or, when nothing is measured, the documented rates
below.  :func:`choose_block` turns a cluster's resources into the plain
numbers of :func:`dkpca.linalg.cluster_block_size`.  ``dkpca.plan`` and the
projection of ``benchmarks/scale.py workers`` call these same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..kernels import Kernel
from ..linalg import PassCost, cluster_block_size, pass_cost, sweep_entries

__all__ = ["SCHEDULER_SECONDS_PER_TASK", "LOCAL_SECONDS_PER_TASK", "FIT_SECONDS", "BUILD_SECONDS", "PASS_SECONDS",
           "ARPACK_SECONDS_PER_ENTRY", "PASS_SECONDS_PER_ENTRY", "KERNEL_FLOPS_PER_SECOND", "WORKER_MEMORY_FRACTION",
           "EntryRates", "estimate", "written_back", "choose_block", "memory_estimate"]

#: The distributed scheduler's time per task, serial: the CPU time of the
#: process running the client and the scheduler (one event loop) while it
#: builds and runs a pass's graph, less what it spends idle with the same
#: workers.  Measured by ``benchmarks/scheduler.py --max-tasks 200000
#: --budget 400`` (section "scheduler" of benchmarks/RESULTS.md, 2026-11-23):
#: 1.43-1.67 ms per task from 475 to 39,200 tasks (1.55 ms at the largest),
#: 1.53 / 1.49 ms at 2,573 tasks with 2 / 8 workers; the upper end is taken.
#: The pass's wall time per task on that 2-core machine, 2.3-2.9 ms (the
#: earlier figure, 2.7 ms), also counts the workers' handling of each task
#: (2.6 ms of their CPU a task with 2 workers; in parallel on a real
#: cluster) sharing the cores with the scheduler.  Not in this figure: the
#: scheduler's background work per worker (heartbeats: 38 / 93 / 313 ms/s
#: idle with 2 / 8 / 32 workers here; dask spaces a large cluster's
#: heartbeats to ~200 a second), unmeasured at thousands of workers.
SCHEDULER_SECONDS_PER_TASK = 1.6e-3

#: The same for dask's local threaded scheduler (no cluster): a pass-shaped
#: graph of no-op tasks (8-way tree sums) through ``dkpca.execution.compute``
#: took 0.16-0.31 ms per task at 116 to 5,717 tasks on the 2-core development
#: machine (AMD EPYC, 2026-11-23, while another fit ran).
LOCAL_SECONDS_PER_TASK = 0.3e-3

#: One thread's seconds per stored entry of a pass (read + product with
#: float64 accumulation) when nothing is measured (``measure=False``):
#: benchmarks/RESULTS.md, "ceiling-n100000-d50", a pass of 14.88 s over
#: 5.0e9 stored entries on 2 cores.
PASS_SECONDS_PER_ENTRY = 6e-9

#: One thread's kernel flops per second building K (evaluation and write)
#: when nothing is measured: the same section's build, 14.35 s for 5.0e9
#: entries on 2 cores at d = 50 (110 flops an entry, ``Kernel.cost_per_entry``).
KERNEL_FLOPS_PER_SECOND = 19e9

#: Fixed costs of a fit on one machine that no per-entry rate sees (they
#: bound small fits), from the timings of ``dkpca.fit`` of a Zarr path at
#: n = 2,000, 3,000 and 5,000 (d = 50, k = 10, 2-core development machine,
#: 2026-11-23) against ``plan``'s per-entry estimates of the same fits:
#:
#: * per fit: scanning the input, the store's data copy set up, the solver's
#:   checkpoint and the checksummed model written at the end -- 0.08 s
#:   (0.079-0.08 s outside the build and the solve; one outlier 0.16 s);
#: * per Gram build: creating, opening and closing the Gram store (arrays,
#:   done markers, each a few Zarr metadata writes) -- 0.14-0.23 s more than
#:   the blocks' own time;
#: * per pass: the graph, its submission and the solver's algebra between
#:   passes -- 0.010-0.022 s more than the blocks' own time.
FIT_SECONDS = 0.08
BUILD_SECONDS = 0.15
PASS_SECONDS = 0.015

#: One ARPACK product (K times one vector) with a float64 K held in memory,
#: per entry of K: bound by memory bandwidth, not by a thread's arithmetic.
#: ``K @ v`` at n = 10,000 took 38.9-40.6 ms with 2 BLAS threads on the
#: development machine (2026-11-23).  A float32 K streams half the bytes
#: (:func:`memory_estimate` scales this by the itemsize).
ARPACK_SECONDS_PER_ENTRY = 4e-10

#: the share of a worker's memory its block tasks may fill (the rest: Dask, the worker's own data)
WORKER_MEMORY_FRACTION = 0.8


@dataclass(frozen=True)
class EntryRates:
    """One thread's seconds per block entry for each step of a fit, the filesystem's rates, and their source.

    ``source`` is ``"measured"`` (with ``edge``, the block edge timed) or
    ``"documented"`` (the module's constants).  ``single``: a single-precision
    product's (None: half of ``product``, what its GEMM costs).
    ``write_bandwidth``/``read_bandwidth``: bytes/s the store's filesystem
    takes from all the tasks at once (:func:`~dkpca.planning.measure.disk_bandwidth`;
    None: it keeps up), which bound a build and a pass whatever the cores.
    """

    kernel: float
    write: float
    read: float
    product: float
    source: str
    edge: int = 0
    single: float | None = None
    write_bandwidth: float | None = None
    read_bandwidth: float | None = None
    device_bandwidth: float | None = None
    dirty_threshold: float | None = None

    @classmethod
    def measured(cls, m: dict[str, float], block: int) -> EntryRates:
        """From :func:`dkpca.planning.measure_blocks`'s seconds per ``block x block`` block."""
        e = float(block) * block
        single = m.get("product_single_block")
        return cls(m["kernel_block"] / e, m["write_block"] / e, m["read_block"] / e, m["product_block"] / e,
                   "measured", int(m.get("edge", block)), None if single is None else single / e,
                   m.get("write_bandwidth"), m.get("read_bandwidth"), m.get("write_device_bandwidth"),
                   m.get("dirty_threshold"))

    @classmethod
    def documented(cls, kernel: Kernel, d: int) -> EntryRates:
        """:data:`PASS_SECONDS_PER_ENTRY` and :data:`KERNEL_FLOPS_PER_SECOND` (nothing measured)."""
        return cls(kernel.cost_per_entry(d) / KERNEL_FLOPS_PER_SECOND, 0.0, 0.0, PASS_SECONDS_PER_ENTRY,
                   "documented")

    def per_block(self, block: int) -> dict[str, float]:
        """Seconds per ``block x block`` block, as :func:`~dkpca.planning.measure_blocks` reports them."""
        e = float(block) * block
        out = {"edge": self.edge or block, "kernel_block": self.kernel * e, "write_block": self.write * e,
               "read_block": self.read * e, "product_block": self.product * e,
               "product_single_block": self.single_product * e}
        out.update({key: v for key, v in (("write_bandwidth", self.write_bandwidth),
                                          ("read_bandwidth", self.read_bandwidth),
                                          ("write_device_bandwidth", self.device_bandwidth),
                                          ("dirty_threshold", self.dirty_threshold)) if v is not None})
        return out

    @property
    def single_product(self) -> float:
        return self.product / 2 if self.single is None else self.single

    def pass_entry(self, gram: str, single: bool = False) -> float:
        """Per entry of a pass: read and multiply a stored block, or evaluate and multiply it."""
        product = self.single_product if single else self.product
        return self.read + product if gram == "store" else self.kernel + product

    @property
    def build_entry(self) -> float:
        return self.kernel + self.write


def estimate(n: int, block: int, *, gram: str, itemsize: int, concurrency: int, rates: EntryRates,
             fs_bandwidth: float | None = None, task_seconds: float = SCHEDULER_SECONDS_PER_TASK,
             distributed: bool = True, single: bool = False,
             width: int | None = None) -> tuple[PassCost | None, PassCost]:
    """``(build, pass)`` at ``block``: the build is None when K is not stored (``gram="recompute"``).

    ``distributed``: a pass's blocks run as one task per worker thread
    (``concurrency`` of them); the build always runs one task per block.
    The build's bytes go at ``fs_bandwidth`` (an assumed aggregate, e.g. a
    cluster's filesystem) where one is given, else at the measured
    ``rates.write_bandwidth`` (this machine's), a pass's at it or
    ``rates.read_bandwidth``.  ``single``: a single-precision pass; ``width``: its columns
    (whether a cluster's tasks carry V: :func:`~dkpca.linalg.carried_pass`).
    """
    stored = gram == "store"
    kw = dict(concurrency=concurrency, task_seconds=task_seconds, bytes_per_entry=itemsize if stored else 0.0)
    build = pass_cost(n, block, entry_seconds=rates.build_entry,
                      bandwidth=fs_bandwidth or rates.write_bandwidth, **kw) if stored else None
    if build is not None and fs_bandwidth is None:
        build = written_back(build, itemsize * sweep_entries(n, block), rates)
    return build, pass_cost(n, block, entry_seconds=rates.pass_entry(gram, single),
                            shares=concurrency if distributed else None, width=width,
                            bandwidth=fs_bandwidth or rates.read_bandwidth, **kw)


def written_back(build: PassCost, k_bytes: float, rates: EntryRates) -> PassCost:
    """The build of a K past the page cache's dirty threshold: the rest of K goes at the device's rate.

    Up to the threshold the build writes as fast as its blocks are made and
    the page cache takes them (the probe's ``write_bandwidth``); past it,
    Linux writes back while the build goes on, and the store's next writes
    (its sums, the model) wait until the device has taken the rest.  Measured
    on a lent 16-core machine (issue 40, threshold 13.4 GB, one O_DIRECT chunk
    1.48 GB/s): at n = 100,000 (K 20.8 GB) the build's tasks took 3.9 s, the
    store's next writes waited 4.4 s more; this gives 7.1 s, where the
    probe's rate alone gave 3.3 s.  Unchanged where nothing past a threshold
    was measured.
    """
    threshold, device = rates.dirty_threshold, rates.device_bandwidth
    if not threshold or not device or k_bytes <= threshold:
        return build
    share = threshold / k_bytes
    first = max(share * build.compute, share * build.io)
    rest = max((1 - share) * build.compute, (k_bytes - threshold) / device)
    return PassCost(build.block, build.tasks, build.compute, first + rest, build.scheduler)


def choose_block(n: int, *, d: int, ell: int, itemsize: int, gram: str, resources: dict[str, Any],
                 rates: EntryRates, fs_bandwidth: float | None = None) -> int:
    """:func:`dkpca.linalg.cluster_block_size` for ``resources`` (workers, threads and memory per worker)."""
    threads = int(resources["threads_per_worker"])
    mem = resources.get("memory_per_worker")
    return cluster_block_size(
        n, concurrency=int(resources["workers"]) * threads, entry_seconds=rates.pass_entry(gram),
        task_seconds=SCHEDULER_SECONDS_PER_TASK,
        memory_per_task=WORKER_MEMORY_FRACTION * mem / threads if mem else None, d=d, ell=ell, itemsize=itemsize,
        bytes_per_entry=itemsize if gram == "store" else 0.0, bandwidth=fs_bandwidth,
        shares=int(resources["workers"]) * threads)


def memory_estimate(n: int, *, concurrency: int, rates: EntryRates, solver: str = "",
                    itemsize: int = 8) -> tuple[float, float]:
    """``(build, pass)`` seconds with K held in memory (``gram="memory"``): no tasks, no I/O.

    All n^2 entries are evaluated once; a pass is one GEMM with K (a single
    product per entry: ``rates.product`` times both products of a block),
    or for ARPACK one product with one vector, bound by memory bandwidth
    (:data:`ARPACK_SECONDS_PER_ENTRY`, for K of ``itemsize`` bytes an entry).
    """
    entries = float(n) * n
    sweep = (entries * ARPACK_SECONDS_PER_ENTRY * itemsize / 8 if solver == "arpack"
             else entries * rates.product / 2 / max(1, concurrency))
    return entries * rates.kernel / max(1, concurrency), sweep
