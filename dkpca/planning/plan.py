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
fit, at its tile (:mod:`dkpca.planning.growthplan`).  Where the store holds K or part of it -- an update's old
blocks, K whole for a refit of the same data, the blocks of a build killed part way (their done markers) -- the
build and the bytes to write are costed for the rest (``Plan.reused``).  The table is :mod:`dkpca.planning.plantable`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from typing import Any

import numpy as np

from ..kernels import Kernel
from ..linalg import SCHEDULING_SHARE, block_bounds, task_memory
from ..request import (
    DEFAULT_MAX_PASSES,
    DEFAULTS,
    FitOptions,
    FitRequest,
    beside_input,
    check_bandwidth,
    check_bool,
    make_request,
)
from ..solvers import subspace_width
from ..storage import free_bytes, gram_bytes
from ..storage.growth import Growth, built_entries, refit_conflicts, stored_entries
from .decision import decide
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
from .measure import dense_solve_seconds, estimate_passes, measure_blocks
from .plantable import Plan, fmt_bytes
from .precision import Precision
from .resources import cluster_resources

__all__ = ["plan", "Plan", "make_plan"]


def make_plan(X: Any, kernel: Kernel, k: int, block: int, dtype: Any, solver: str, reason: str, gram: str,
              store: str, tol: float = DEFAULTS["tol"], max_passes: int | None = None, resources: dict | None = None,
              measure: bool = True, fraction: float | None = None, fs_bandwidth: float | None = None,
              rates: EntryRates | None = None, block_reason: str = "", precision: Precision | None = None,
              estimated: tuple[int, str] | None = None, reused: float = 0.0) -> Plan:
    """Plan for a validated dask array ``X`` (row chunks = ``block``) and resolved kernel.

    ``measure=False`` does no work beyond arithmetic on the sizes (the pass
    estimate is then ``max_passes``, except for the dense solver; the
    scheduler's share uses the documented per-entry rates).  ``rates``:
    per-entry times measured already (at another block edge), instead of
    measuring here.  ``fs_bandwidth``: assumed aggregate bytes/s of the
    store's filesystem (checked by the caller).  ``precision``: how ``dtype`` was decided (a lossy float32 warns).
    ``estimated``: subspace iteration's passes and how, as the decision estimated them: shown for ``solver``
    (``estimate_passes(known=)``), not estimated again.  ``reused``: the share of K's entries the store holds
    already (an update's old blocks, a killed build's, a complete K refitted): not computed or written again.
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
    if free is not None and gbytes * (1 - reused) > free:
        warnings.append(f"the Gram store needs {fmt_bytes(gbytes * (1 - reused))} more but only {fmt_bytes(free)} "
                        "is free there")
    avail = res.get("memory_per_worker")
    if avail and per_worker > WORKER_MEMORY_FRACTION * avail:
        warnings.append(f"{fmt_bytes(per_worker)} per worker is close to or above its memory limit "
                        f"{fmt_bytes(avail)}; use a smaller chunk_size")
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
        precision=precision.to_dict() if precision is not None else None, reused=reused,
    )
    if rates.source == "measured":
        p.measured = rates.per_block(block)
        p.build_seconds = build.seconds * (1 - reused) if build is not None else 0.0
        p.pass_seconds = sweep.seconds
        # the first product is fused into the build for the iterative solvers
        fused = 1 if build is not None and solver != "dense" and reused < 1 else 0
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
    req, note, growth, measured = plan_update(make_request(source, options, create_store=False), chunk_size,
                                              dtype, measure)  # grown data
    # fit would create a temporary directory for in-memory input; a plan creates nothing
    path = req.store.path if req.store is not None else os.path.join(tempfile.gettempdir(), "dkpca-<new>",
                                                                       "store.dkpca.zarr")
    try:  # the measurements write beside the store: the default one's directory named with store= if they cannot
        fp = decide(req, measure=measure, store_path=path, growth=growth,  # the one decision dkpca.fit makes, runs
                    precision=measured)
        dtype, ell = fp.dtype, fp.width
        timed = measure and (fp.details.get("measured") or measure_blocks(req.X, req.kernel, req.tile, dtype, ell,
                                                                          path))
    except OSError as exc:
        unwritable = beside_input(exc, options, req)
        if unwritable is None:
            raise
        raise unwritable from exc
    res = cluster_resources(cluster)
    estimated = (int(timed["passes"]), fp.details["passes_note"]) if timed and "passes_note" in fp.details else None
    rates = EntryRates.measured(timed, req.tile) if timed else None  # the decision's timing where it timed blocks
    X, block = req.X, req.tile
    why = f"chunk_size={block} as given" if chunk_size is not None else f"dkpca.fit's default ({block})"
    if growth and growth.retiled is not None:  # below half a fresh fit's tile: K is built anew (retile)
        why = (f"{block}: the store's tile {growth.retiled} is " + ("below the chunk_size given" if chunk_size else
               f"below half of dkpca.fit's default for {req.n} rows") + ", so the update builds K anew in these tiles")
    elif growth:  # the update keeps the store's tile, whatever was asked
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
    reused, reuse = _reused(req, growth, fp.gram, dtype.name, block)
    return replace(p := make_plan(X, req.kernel, fp.k, block, dtype, fp.solver, fp.reason, fp.gram, path,
                                  tol=req.tol, max_passes=req.max_passes, resources=res, measure=measure,
                                  fraction=req.fraction, fs_bandwidth=bandwidth, rates=rates, block_reason=why,
                                  precision=fp.precision, estimated=estimated, reused=reused),
                   decision=fp, gram=fp.gram_label, update=note, reuse=reuse, warnings=refused + p.warnings)


def _reused(req: FitRequest, growth: Growth | None, gram: str, dtype: str, block: int) -> tuple[float, str]:
    """The share of K's entries a fit of ``req`` would find in its store (:class:`Plan`'s ``reused``), and, where
    it is no update (whose line says it), why in words: a complete K refitted, or the blocks of a killed build."""
    if gram != "store" or req.store is None or req.overwrite:
        return 0.0, ""
    total = stored_entries(req.n, block)
    if growth is not None:
        return (1 - growth.gram_blocks()[2] / total if growth.gram else 0.0), ""
    built = built_entries(req.store, req.n, req.kernel.to_dict(), dtype, block)
    if not built:
        return 0.0, ""
    # the input's checksum reads all of it, which a plan does not: the reuse is said as the fit's condition
    same = ("if this input is the data it was built from (the fit compares their checksums, reading the input; "
            "other data of this shape it refuses)")
    what = (f"the store holds this K whole: a fit reuses it and builds none of it, {same}" if built == total else
            f"the store holds {built / total:.0%} of this K's entries (a build that stopped part way): a fit reuses "
            f"them and builds the rest, {same}")
    return built / total, what
