"""Plan a fit before running it: sizes, memory, passes and a measured time estimate.

``dkpca.plan("data.zarr", n_components=20)`` (CLI: ``dkpca plan``) answers what an HPC user needs to size a job
request -- bytes of the Gram store and free space where it goes, chunk shape, memory per worker task, the expected
number of passes over K and a time estimate -- without computing K.  The estimate comes from a short measured
sample on this machine (the one :func:`~dkpca.planning.decide` made, where it measured):

* a few kernel blocks of the real data (first rows of X) are evaluated;
* one block is written to and read back from a scratch array next to the store, and one product ``K_IJ V`` timed;
* the passes are estimated from the spectrum of a small random subsample (``m`` points): subspace
  iteration's residuals shrink roughly like ``(lambda_{l+1} / lambda_k)^p`` per pass ``p`` (Halko et al. 2011,
  sec. 9), block Lanczos's faster (:func:`~dkpca.planning.lanczos_passes`).

Times are scaled to the whole matrix and divided among the concurrent tasks (workers x threads)
(:mod:`dkpca.planning.estimate`); the distributed scheduler's serial time per pass (its cost per task x the pass's
tasks) comes on top, and its share of a pass is printed. The filesystem is assumed to keep up unless
``fs_bandwidth`` (an assumed aggregate bandwidth) is given: then a pass takes at least K's bytes / ``fs_bandwidth``.
For a cluster (``cluster=`` or an active client) without ``chunk_size``, the block edge keeps the scheduler under
5 % of a pass within the workers' memory (:func:`dkpca.linalg.cluster_block_size`); ``dkpca.fit`` keeps its own
default, so the plan names the ``chunk_size`` to pass. On grown data the plan says the fit would update the store's
fit, at its tile (:mod:`dkpca.planning.growthplan`).
"""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..grammode import NO_GRAM
from ..kernels import Kernel
from ..linalg import SCHEDULING_SHARE, block_bounds, task_memory
from ..request import DEFAULT_MAX_PASSES, DEFAULTS, FitOptions, check_bandwidth, check_bool, make_request
from ..solvers import subspace_width
from ..storage import free_bytes, gram_bytes, json_safe
from ..storage.growth import refit_conflicts
from .decision import FitPlan, decide
from .estimate import (
    BUILD_SECONDS,
    FIT_SECONDS,
    LOCAL_SECONDS_PER_TASK,
    PASS_SECONDS,
    SCHEDULER_SECONDS_PER_TASK,
    WORKER_MEMORY_FRACTION,
    EntryRates,
    choose_block,
    estimate,
    memory_estimate,
)
from .growthplan import plan_update
from .measure import dense_solve_seconds, estimate_passes, measure_blocks, rates_line
from .precision import Precision
from .resources import cluster_resources

__all__ = ["plan", "Plan", "make_plan"]


def _fmt_bytes(b: float | None) -> str:
    if b is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(b) < 1024 or unit == "PiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024


def _fmt_seconds(s: float | None) -> str:
    if s is None or not np.isfinite(s):
        return "unknown"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


@dataclass
class Plan:
    """What a fit will do and need; ``str(plan)`` is the printable table.

    Sizes are bytes, times seconds; ``None`` where unknown (not measured).
    """

    n_samples: int
    n_features: int
    n_components: int
    kernel: dict
    solver: str
    solver_reason: str
    gram: str
    dtype: str
    block: int
    n_row_blocks: int
    n_block_tasks: int
    chunk_shape: tuple[int, int]
    chunk_bytes: int
    gram_bytes: int
    store: str
    free_bytes: int | None
    workers: int
    threads_per_worker: int
    memory_per_task: int
    memory_per_worker: int
    memory_available_per_worker: int | None
    client_memory: int
    subspace: int
    expected_passes: int
    passes_note: str
    measured: dict[str, float] = field(default_factory=dict)
    build_seconds: float | None = None
    pass_seconds: float | None = None
    total_seconds: float | None = None
    #: the dense solver's eigh (measured on a small matrix, scaled by n^3); None for iterative solvers
    solve_seconds: float | None = None
    warnings: list[str] = field(default_factory=list)
    #: n_components given as a fraction of explained variance: k above is its first round's
    fraction: float | None = None
    #: how the block edge was set (the default, chunk_size, or chosen for the cluster)
    block_reason: str = ""
    #: tasks in one pass's graph, the scheduler's seconds for them and its share of a pass (0..1)
    tasks_per_pass: int = 0
    scheduler_seconds: float = 0.0
    scheduling_share: float = 0.0
    #: where the per-entry times behind the share come from: "measured" or "documented" (not measured)
    rates_source: str = "documented"
    #: the assumed aggregate filesystem bandwidth (bytes/s); None: the filesystem is assumed to keep up
    fs_bandwidth: float | None = None
    #: "compute" or "filesystem": what bounds a pass and the build
    pass_bound: str = "compute"
    build_bound: str | None = None
    #: seconds a pass's bytes of K take at ``fs_bandwidth`` (0: not bounded or not stored)
    filesystem_seconds: float = 0.0
    #: planned for a distributed cluster (False: this machine's threads, no block choice or warning)
    distributed: bool = False
    #: the precision K is held in and why (``Precision.to_dict()``; None: not decided here)
    precision: dict | None = None
    #: the typed decisions ``dkpca.fit`` with the same parameters runs (None: not decided here)
    decision: FitPlan | None = field(default=None, repr=False, compare=False)
    update: str = ""  #: a fit would update the store's fit of fewer rows: what it computes and reuses

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, decision=None))
        out["decision"] = self.decision.to_dict() if self.decision is not None else None
        return json_safe(out)

    def __str__(self) -> str:
        m = self.measured
        stored = self.gram == "store"
        k_at = {"store": f"stored in {self.store}", "memory": f"held in memory ({self.dtype}), no store",
                NO_GRAM: "not formed (n x m kernel slices only)"}.get(self.gram, "recomputed every pass (not stored)")
        lines = [
            f"plan: n={self.n_samples}, d={self.n_features}, k={self.n_components}"
            + (f" (n_components={self.fraction}: the first round; k grows until that fraction of the variance "
               "is explained)" if self.fraction is not None else "")
            + f", kernel {self.kernel.get('name', self.kernel)}",
            f"  solver:        {self.solver} ({self.solver_reason})",
            f"  Gram matrix:   {k_at}",
        ]
        lines += [f"  chunk shape:   {self.chunk_shape[0]} x {self.chunk_shape[1]} {self.dtype} "
                  f"({_fmt_bytes(self.chunk_bytes)}), {self.n_row_blocks} row blocks, "
                  f"{self.n_block_tasks} block tasks (upper triangle)"] * (self.gram != NO_GRAM)
        if self.precision is not None:
            lines.append(f"  precision:     {self.precision['dtype']} ({self.precision['reason']})")
        if self.block_reason:
            lines.append(f"  block:         {self.block_reason}")
        rate = "the measured blocks" if self.rates_source == "measured" else "the documented rate, not measured"
        where, per_task = (("the distributed scheduler", SCHEDULER_SECONDS_PER_TASK) if self.distributed else
                           ("dask's threaded scheduler", LOCAL_SECONDS_PER_TASK))
        lines.append(f"  scheduling:    ~{self.tasks_per_pass} tasks per pass, ~{_fmt_seconds(self.scheduler_seconds)} "
                     f"of {where} = {100 * self.scheduling_share:.1f} % of a pass (at {per_task * 1e3:.2g} ms per "
                     f"task, measured by benchmarks/scheduler.py; the pass from {rate})")
        if stored:
            lines.append(f"  Gram store:    {_fmt_bytes(self.gram_bytes)} on disk "
                         f"(free on that filesystem: {_fmt_bytes(self.free_bytes)})")
        lines += [
            f"  workers:       {self.workers} x {self.threads_per_worker} thread(s)",
            f"  memory:        {_fmt_bytes(self.memory_per_task)} per task, "
            f"{_fmt_bytes(self.memory_per_worker)} per worker (available: "
            f"{_fmt_bytes(self.memory_available_per_worker)}), {_fmt_bytes(self.client_memory)} in the client",
            f"  passes:        ~{self.expected_passes} over K with a subspace of {self.subspace} vectors "
            f"({self.passes_note})",
        ]
        if m:
            lines.append("  measured:      kernel block {}, write {}, read {}, product {} (per {b}x{b} block, one "
                         "thread; timed at {e}x{e})".format(*(_fmt_seconds(m.get(f"{key}_block")) for key in (
                             "kernel", "write", "read", "product")), b=self.block, e=int(m.get("edge", self.block))))
            build = (f"build {_fmt_seconds(self.build_seconds)} (bound by {self._bound(self.build_bound)}), "
                     if stored else "")
            lines.append(f"  estimate:      {build}{_fmt_seconds(self.pass_seconds)} per pass (bound by "
                         f"{self._bound(self.pass_bound)}), "
                         + (f"dense eigh {_fmt_seconds(self.solve_seconds)}, " if self.solve_seconds is not None
                            else "") + f"total ~{_fmt_seconds(self.total_seconds)}")
            lines.append(rates_line(m, self))
        else:
            lines.append("  estimate:      not measured" + (f"; a pass is bound by {self._bound(self.pass_bound)}"
                                                            if self.fs_bandwidth else ""))
        lines.append("  filesystem:    " + (
            f"an assumed {self.fs_bandwidth / 1e9:.3g} GB/s aggregate (an assumption, not measured): K's bytes take "
            f"{_fmt_seconds(self.filesystem_seconds)} per pass" if self.fs_bandwidth else
            "assumed to keep up (no fs_bandwidth given)"))
        lines += [f"  update:        {self.update}"] * bool(self.update)
        lines += [f"  warning:       {w}" for w in self.warnings]
        return "\n".join(lines)

    @staticmethod
    def _bound(bound: str | None) -> str:
        return "the filesystem" if bound == "filesystem" else "compute"

    def _repr_html_(self) -> str:  # pragma: no cover - display only
        return "<pre>" + html.escape(str(self)) + "</pre>"


def make_plan(X: Any, kernel: Kernel, k: int, block: int, dtype: Any, solver: str, reason: str, gram: str,
              store: str, tol: float = DEFAULTS["tol"], max_passes: int | None = None, resources: dict | None = None,
              measure: bool = True, fraction: float | None = None, fs_bandwidth: float | None = None,
              rates: EntryRates | None = None, block_reason: str = "", precision: Precision | None = None,
              estimated: tuple[int, str] | None = None) -> Plan:
    """Plan for a validated dask array ``X`` (row chunks = ``block``) and resolved kernel.

    ``measure=False`` does no work beyond arithmetic on the sizes (the pass
    estimate is then ``max_passes``, except for the dense solver; the
    scheduler's share uses the documented per-entry rates).  ``rates``:
    per-entry times measured already (at another block edge), instead of
    measuring here.  ``fs_bandwidth``: assumed aggregate bytes/s of the
    store's filesystem (checked by the caller).  ``precision``: how ``dtype`` was decided (a lossy float32 warns).
    ``estimated``: subspace iteration's passes and how, as the decision estimated them: shown for ``solver``
    (``estimate_passes(known=)``), not estimated again.
    """
    dtype = np.dtype(dtype)
    n, d = X.shape
    nb = len(block_bounds(n, block))
    tasks = nb * (nb + 1) // 2
    ell = subspace_width(solver, n, k)
    res = resources if resources is not None else cluster_resources(None)
    conc = res["workers"] * res["threads_per_worker"]
    gbytes = gram_bytes(n, block, dtype) if gram == "store" else 0
    free, item = free_bytes(store), dtype.itemsize
    per_task = task_memory(block, d, ell, item)
    per_worker = res["threads_per_worker"] * per_task
    client_mem = 6 * n * ell * 8 + 2 * n * 8 + n * n * (8 * 2 * (solver == "dense") + item * (gram == "memory"))
    warnings = []
    if free is not None and gbytes > free:
        warnings.append(f"the Gram store needs {_fmt_bytes(gbytes)} but only {_fmt_bytes(free)} is free there")
    avail = res.get("memory_per_worker")
    if avail and per_worker > WORKER_MEMORY_FRACTION * avail:
        warnings.append(f"{_fmt_bytes(per_worker)} per worker is close to or above its memory limit "
                        f"{_fmt_bytes(avail)}; use a smaller chunk_size")
    warnings += [precision.warning()] if precision is not None and precision.lossy else []
    mp = max_passes or DEFAULT_MAX_PASSES
    passes, note = (estimate_passes(X, kernel, k, ell, tol, mp, solver, known=estimated) if measure or solver == "dense"
                    else (mp, f"at most max_passes={mp}; not estimated"))
    if rates is None and measure:
        rates = EntryRates.measured(measure_blocks(X, kernel, block, dtype, ell, store), block)
    rates = rates or EntryRates.documented(kernel, d)
    distributed = bool(res.get("distributed", True))
    build, sweep = estimate(n, block, gram=gram, itemsize=item, concurrency=conc, rates=rates, width=ell,
                            fs_bandwidth=fs_bandwidth, distributed=distributed,
                            task_seconds=SCHEDULER_SECONDS_PER_TASK if distributed else LOCAL_SECONDS_PER_TASK)
    if distributed and sweep.share > SCHEDULING_SHARE:
        best = choose_block(n, d=d, ell=ell, itemsize=item, gram=gram, resources=res, rates=rates,
                            fs_bandwidth=fs_bandwidth)
        what = f"the scheduler takes ~{100 * sweep.share:.0f} % of each pass ({sweep.tasks} tasks at block {block})"
        if best > block:
            share = estimate(n, best, gram=gram, itemsize=item, concurrency=conc, rates=rates, width=ell,
                             fs_bandwidth=fs_bandwidth)[1].share
            warnings.append(f"{what}; chunk_size={best} " + (
                f"keeps it under {100 * SCHEDULING_SHARE:.0f} %" if share <= SCHEDULING_SHARE else
                f"(the largest block the workers' memory allows) brings it to ~{100 * share:.0f} %"))
        elif block < n:
            warnings.append(f"{what}; a larger block would not fit the workers' memory")
    p = Plan(
        fraction=fraction,
        n_samples=n, n_features=d, n_components=k, kernel=kernel.to_dict(), solver=str(solver),
        solver_reason=reason, gram=str(gram), dtype=dtype.name, block=block, n_row_blocks=nb, n_block_tasks=tasks,
        chunk_shape=(min(block, n), min(block, n)), chunk_bytes=min(block, n) ** 2 * item, gram_bytes=gbytes,
        store=store, free_bytes=free, workers=res["workers"], threads_per_worker=res["threads_per_worker"],
        memory_per_task=per_task, memory_per_worker=per_worker, memory_available_per_worker=avail,
        client_memory=client_mem, subspace=ell, expected_passes=passes, passes_note=note, warnings=warnings,
        block_reason=block_reason, tasks_per_pass=sweep.tasks, scheduler_seconds=sweep.scheduler,
        scheduling_share=sweep.share, rates_source=rates.source, fs_bandwidth=fs_bandwidth,
        pass_bound=sweep.bound, build_bound=build.bound if build is not None else None,
        filesystem_seconds=sweep.io, distributed=distributed,
        precision=precision.to_dict() if precision is not None else None,
    )
    if rates.source == "measured":
        p.measured = rates.per_block(block)
        p.build_seconds = build.seconds if build is not None else 0.0
        p.pass_seconds = sweep.seconds
        # the first product is fused into the build for the iterative solvers
        fused = 1 if build is not None and solver != "dense" else 0
        if gram == "memory":
            p.build_seconds, p.pass_seconds = memory_estimate(n, concurrency=conc, rates=rates, solver=solver,
                                                              itemsize=item)
            fused = 0
        else:  # a pass's graph and a store's set-up cost the same at every n: they bound small fits
            p.pass_seconds += PASS_SECONDS
            if build is not None:
                p.build_seconds += BUILD_SECONDS
        p.total_seconds = FIT_SECONDS + p.build_seconds + max(0, passes - fused) * p.pass_seconds
        if solver == "dense":  # the O(n^3) eigh, not only the one read of K
            p.solve_seconds = dense_solve_seconds(n, k)
            p.total_seconds += p.solve_seconds
    return p


def plan(
    source: Any,
    n_components: int | float = DEFAULTS["n_components"],
    kernel: Any = DEFAULTS["kernel"],
    gamma: float | None = DEFAULTS["gamma"],
    degree: int = DEFAULTS["degree"], coef0: float = DEFAULTS["coef0"],
    kernel_params: dict | None = DEFAULTS["kernel_params"],
    solver: str = DEFAULTS["solver"], store: str | os.PathLike | None = DEFAULTS["store"],
    chunk_size: int | None = DEFAULTS["chunk_size"],
    dtype: str = DEFAULTS["dtype"],
    tol: float = DEFAULTS["tol"], max_passes: int | None = DEFAULTS["max_passes"],
    gram: str = DEFAULTS["gram"],
    cluster: Any = None, measure: bool = True,
    fs_bandwidth: float | str | None = None,
    cluster_block: bool = True,
) -> Plan:
    """Describe a fit without computing K (same parameters as :func:`dkpca.fit`).

    Parameters
    ----------
    source, n_components, kernel, gamma, degree, coef0, kernel_params, solver, store, chunk_size, dtype, tol, \
max_passes, gram
        As for :func:`dkpca.fit`.  For a cluster, ``chunk_size=None`` lets the
        plan choose the block edge (see ``cluster_block``).
    cluster : str, dict or distributed.Client, optional
        A back end (``"slurm"``), a cluster file or configuration dict (sizes
        the workers from the Dask configuration without starting them), a
        scheduler address, or a client; default: the active client, else this
        machine's cores.
    measure : bool, default=True
        Time a few kernel blocks, one block write/read and one product, and
        estimate passes from a subsample (a second or so); False gives sizes
        only (the scheduler's share then rests on documented per-entry rates,
        :mod:`dkpca.planning.estimate`).
    fs_bandwidth : float or str, optional
        Assumed aggregate bandwidth of the store's filesystem, bytes/s or a
        size per second (``"100GB/s"``): a pass then takes at least K's bytes
        / ``fs_bandwidth``, the build at least K's bytes written / it, and the
        plan says which bound applies.  Default: the filesystem keeps up.
    cluster_block : bool, default=True
        For a cluster (``cluster=`` or an active client) and ``chunk_size=None``:
        choose the block edge so that the scheduler's time stays under 5 % of
        a pass, within the workers' memory and no smaller than the default
        (:func:`dkpca.linalg.cluster_block_size`).  ``dkpca.fit`` does not
        choose it: pass the plan's ``block`` as ``chunk_size``.  False plans
        with ``fit``'s default block.  A ``chunk_size`` given is kept, with a
        warning when the scheduler's share is over 5 %.

    Returns
    -------
    Plan
        ``print(plan)`` for the table; attributes for the numbers; ``decision``: the
        :class:`~dkpca.planning.FitPlan` that ``dkpca.fit`` runs (both call :func:`~dkpca.planning.decide`).
    """
    bandwidth = check_bandwidth("fs_bandwidth", fs_bandwidth)
    cluster_block = check_bool("cluster_block", cluster_block)
    options = FitOptions(n_components=n_components, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                         kernel_params=kernel_params, solver=solver, store=store, chunk_size=chunk_size, dtype=dtype,
                         tol=tol, max_passes=max_passes, gram=gram)
    req, note, growth = plan_update(make_request(source, options, create_store=False), chunk_size, dtype)  # grown
    # fit would create a temporary directory for in-memory input; a plan creates nothing
    path = req.store.path if req.store is not None else os.path.join(tempfile.gettempdir(), "dkpca-<new>",
                                                                       "store.dkpca.zarr")
    fp = decide(req, measure=measure, store_path=path, growth=growth)  # the one decision dkpca.fit makes and runs
    res = cluster_resources(cluster)
    dtype, ell = fp.dtype, fp.width
    timed = measure and (fp.details.get("measured") or measure_blocks(req.X, req.kernel, req.tile, dtype, ell, path))
    estimated = (int(timed["passes"]), fp.details["passes_note"]) if timed and "passes_note" in fp.details else None
    rates = EntryRates.measured(timed, req.tile) if timed else None  # the decision's timing where it timed blocks
    X, block = req.X, req.tile
    why = f"chunk_size={block} as given" if chunk_size is not None else f"dkpca.fit's default ({block})"
    if growth:  # the update keeps the store's tile, whatever was asked
        why = f"the store's tile {block}, which an update keeps" + f" (chunk_size={chunk_size} given)" * (
            chunk_size not in (None, block))
    if chunk_size is None and cluster_block and res["distributed"]:
        best = choose_block(req.n, d=req.d, ell=ell, itemsize=dtype.itemsize, gram=fp.gram, resources=res,
                            rates=rates or EntryRates.documented(req.kernel, req.d), fs_bandwidth=bandwidth)
        if best != block:
            X, block = req.X.rechunk((best, req.d)), best
            why = (f"{best}, chosen for this cluster (to keep the scheduler under {100 * SCHEDULING_SHARE:.0f} % "
                   f"of a pass, as far as the workers' memory allows): pass chunk_size={best} (--chunk-size {best}) "
                   f"to fit, whose default is {req.tile}")
    # what dkpca.fit would refuse in the store, said before a job is submitted for it (an update's: refused above)
    refused = [] if growth else refit_conflicts(req.store, req.n, req.d, req.kernel.to_dict(), dtype.name, req.tile)
    return replace(p := make_plan(X, req.kernel, fp.k, block, dtype, fp.solver, fp.reason, fp.gram, path,
                                  tol=req.tol, max_passes=req.max_passes, resources=res, measure=measure,
                                  fraction=req.fraction, fs_bandwidth=bandwidth, rates=rates, block_reason=why,
                                  precision=fp.precision, estimated=estimated),
                   decision=fp, gram=fp.gram_label, update=note, warnings=refused + p.warnings)
