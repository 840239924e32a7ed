"""``dkpca.fit``: input -> validation -> plan -> Gram store -> operator -> solver -> model.

This module only wires the stages together; each stage lives in its own
module, and every decision in the :class:`~dkpca.planning.FitPlan` that
:func:`~dkpca.planning.decide` makes (the one ``dkpca.plan`` shows), which the
fit executes as it is.  Everything that can be checked cheaply is checked
before any data is read, and everything that needs a look at the values
(finiteness) before anything is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import dask.array as da
import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence

from .eigensolve import (
    in_memory_operator,
    initial_block,
    keep_fraction_warned,
    log_pass,
    memory_kernel_matrix,
    solve,
    solve_kernel_matrix,
)
from .execution import check_scheduler, compute, serial_blas
from .fitlog import log_done, log_gram, log_plan, log_solved, log_stage
from .gram import build_gram, refuse_other_gram
from .growth import Update, find_update, grow_store, ritz_count, save_ritz, update_report
from .io import Fingerprint, feature_names, input_path, scan
from .kernels import Kernel
from .linalg import Centering
from .model import KPCAModel
from .operator import CenteredKernelOperator, MatrixFreeKernelOperator, StoredKernelOperator
from .planning import FitPlan, GramMode, PrecisionWarning, decide, instead_of_arpack
from .report import fit_report
from .request import DEFAULTS, FitOptions, FitRequest, as_generator, beside_input, make_request
from .solvers import ConvergenceWarning, EigResult, postprocess
from .solvers.randomized import iteration_width
from .storage import CorruptChunkError, GramStore, Lease, SolverCheckpoint, absolute, fit_footprint, held_as

# solve_kernel_matrix, in_memory_operator, memory_kernel_matrix: the estimator's in-memory path (dkpca.eigensolve)
__all__ = ["fit", "fit_with", "solve_kernel_matrix", "in_memory_operator", "memory_kernel_matrix"]

logger = logging.getLogger("dkpca")


def fit(
    source: Any,
    n_components: int | float = DEFAULTS["n_components"],
    kernel: str | Kernel | dict = DEFAULTS["kernel"],
    gamma: float | None = DEFAULTS["gamma"],
    degree: int = DEFAULTS["degree"],
    coef0: float = DEFAULTS["coef0"],
    kernel_params: dict | None = DEFAULTS["kernel_params"],
    solver: str = DEFAULTS["solver"],
    store: str | os.PathLike | None = DEFAULTS["store"],
    chunk_size: int | None = DEFAULTS["chunk_size"],
    dtype: str = DEFAULTS["dtype"],
    tol: float = DEFAULTS["tol"],
    max_passes: int | None = DEFAULTS["max_passes"],
    random_state: int | np.random.Generator | None = DEFAULTS["random_state"],
    overwrite: bool = DEFAULTS["overwrite"],
    gram: str = DEFAULTS["gram"],
    progress: bool | Callable[[str, int, int], None] = DEFAULTS["progress"],
) -> KPCAModel:
    """Fit kernel PCA out of core and persist the model.

    Parameters
    ----------
    source : str, zarr.Array, numpy.ndarray, dask.array.Array or xarray.DataArray
        Training data of shape (n_samples, n_features): a path or fsspec URL
        of a Zarr array or group, a ``.npy`` file (memory-mapped), an HDF5
        dataset ``"file.h5:/dataset"``, a netCDF (or other xarray-readable)
        variable ``"file.nc:variable"``, a Parquet or CSV file of numeric
        columns; or an array.  Files are read block by block, never whole.
    n_components : int or float, default=2
        Number of components k (1 <= k <= n_samples), or a fraction f in
        (0, 1): the smallest k whose explained-variance ratio, against the
        exact ``trace(K~)``, reaches f (scikit-learn's ``PCA(n_components=0.95)``).
        Iterative solvers then solve for a working k and grow it round by
        round (:mod:`dkpca.solvers.fraction`; ``max_passes`` bounds all
        rounds together, and ``ConvergenceWarning`` says when f was not
        reached); the dense solver computes the whole spectrum.  Not with
        ``solver="nystrom"``, which approximates the spectrum.
    kernel : str, Kernel or dict, default="rbf"
        ``rbf``, ``laplacian``, ``poly``, ``linear``, ``sigmoid``, ``cosine``, or a
        dkpca Kernel (sums, products, scalings of those).
    gamma, degree, coef0, kernel_params
        Kernel parameters with scikit-learn's names and defaults
        (``gamma=None`` -> 1/n_features).
    solver : {"auto", "dense", "randomized", "lanczos", "nystrom", "arpack"}, default="auto"
        Eigensolver; ``auto`` is dense for small n, else block Lanczos (or
        randomized subspace iteration when the Krylov basis would not fit in
        memory); with K held in memory (``gram="memory"``) dense for tiny n
        or a large share of the spectrum, else ``arpack``
        (``scipy.sparse.linalg.eigsh``, in memory only); ``nystrom`` is
        approximate and only on request.  The choice and its reason are in
        ``model.report``.
    store : str, optional
        Store root, always kept.  Default: ``<input>.dkpca.zarr`` beside a path
        input; for in-memory input a new temporary directory that lives as long
        as the model: removed by ``model.close()`` (or leaving ``with model:``),
        when the model is garbage-collected, or at interpreter exit.  It holds
        the training data (for ``transform``); the model is written into it
        only by an explicit ``model.save()``.
    chunk_size : int, optional
        Square Gram block edge (default: about 4096, balanced).
    dtype : {"auto", "float32", "float64"}, default="auto"
        Precision K is held in, stored or in memory (products accumulate in
        float64, but for early single-precision passes and ARPACK on a float32
        K, which runs in single precision as scikit-learn's does).  ``auto``:
        float32 unless a sample of the data says it would put over 1e-6 (or
        ``tol``, where smaller) relative error into the top eigenvalues
        (centring cancelling most of K), then float64
        (:mod:`dkpca.planning.precision`; ``model.report["precision"]`` says
        why); a store's float32 K is kept by a refit, and a lossy ``float32``
        warns (``PrecisionWarning``).
    tol : float, default=1e-6
        Iterative solvers stop when every residual ``||K~u - theta u||`` is
        below ``tol * theta_1``.  ``0``: as accurate as the arithmetic allows
        (:data:`~dkpca.request.ARITHMETIC_TOL`, 1e-10, scikit-learn's meaning
        for ARPACK).
    max_passes : int, optional
        Limit on passes over K for iterative solvers (default
        :data:`~dkpca.request.DEFAULT_MAX_PASSES`, 60).
    random_state : int or numpy Generator, optional
        Seed of the solver's starting block.
    overwrite : bool, default=False
        Replace a store that holds another data set or kernel.
    gram : {"auto", "store", "recompute", "memory"}, default="auto"
        ``store`` writes K to Zarr once and reads it each pass; ``recompute``
        evaluates kernel blocks from X every pass and stores no K;
        ``memory`` evaluates K once into memory (in ``dtype``; not resumable);
        ``auto`` holds K in memory when the input is in memory, its store
        temporary and K fits (128 MiB: n <= 5,792 in float32, 4,096 in float64), else recomputes when K does
        not fit on the store's disk or when the measured cost of a pass says
        it is faster (see :func:`dkpca.planning.choose`), else stores.
    progress : bool or callable, default=False
        True: progress on stderr (a bar on a terminal or in Jupyter, a line
        per tenth of the work in a log); a callable receives
        ``(label, done, total)`` as tasks finish.  Whatever this is, the plan
        line, the stages (:mod:`dkpca.fitlog`) and each solver pass go to the
        ``dkpca`` logger at INFO, shown once logging is configured
        (``logging.basicConfig(level=logging.INFO)``).

    Returns
    -------
    KPCAModel
        Saved in ``<store>/model``; reload with :func:`dkpca.load`.  The
        spectrum follows scikit-learn's rules (:mod:`dkpca.solvers.spectrum`):
        ranked by value, significant negative eigenvalues are an error, and
        numerically zero components are dropped, so ``n_components_`` of the
        model can be below the number asked for.

    Raises
    ------
    ValueError
        Bad parameter or data (the message names it), or a store holding a
        different fit without ``overwrite=True``.
    FileNotFoundError
        The input path does not exist.
    """
    t_start = time.perf_counter()
    # the keywords are FitOptions' fields: one value, checked once, passed whole
    options = FitOptions(n_components=n_components, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                         kernel_params=kernel_params, solver=solver, store=store, chunk_size=chunk_size, dtype=dtype,
                         tol=tol, max_passes=max_passes, random_state=random_state, overwrite=overwrite, gram=gram,
                         progress=progress)
    return fit_with(source, options, t_start=t_start)


def fit_with(source: Any, options: FitOptions, *, t_start: float | None = None) -> KPCAModel:
    """:func:`fit` with its parameters as one checked :class:`~dkpca.request.FitOptions` (the estimator's call)."""
    t_start = time.perf_counter() if t_start is None else t_start
    check_scheduler()  # before a store (or a temporary one) is made: a fit that could not compute anything
    req = make_request(source, options)
    try:
        # grown data into a store holding the fit of its first rows: an update (dkpca.growth)
        req, update = find_update(req, options.chunk_size, None if options.dtype == "auto" else options.dtype)
        return _fit_request(req, source, t_start, update)
    except BaseException as exc:
        if req.temporary is not None:  # a failed fit leaves no temporary store behind
            req.temporary.remove()
        unwritable = beside_input(exc, options, req)  # the default store's directory: named, with store=
        if unwritable is not None:
            raise unwritable from exc
        raise


def _fit_request(req: FitRequest, source: Any, t_start: float, update: Update | None = None) -> KPCAModel:
    """:func:`fit` from its validated request; the model owns ``req.temporary`` (if any); ``update``: grown data."""
    # the decisions dkpca.plan names; from here on they are executed, never re-made
    plan = decide(req, growth=update.growth if update is not None else None,
                  precision=update.precision if update is not None else None)
    req = replace(req, dtype=plan.dtype)  # dtype="auto" resolved: the rest of the fit holds K in that precision
    if plan.precision.lossy:
        warnings.warn(plan.precision.warning(), PrecisionWarning, stacklevel=4)
    timings: dict[str, float] = {}
    rng = as_generator(req.random_state)
    t = time.perf_counter()
    fp = scan(req.X)
    timings["validate"] = time.perf_counter() - t
    req.store.check_target()
    with req.store.lock() as lease:
        t = time.perf_counter()
        path, names = input_path(source), feature_names(source)
        if names is None and update is not None and update.model is not None:  # grown rows of the fitted columns
            names = update.model.feature_names
        source = absolute(path) if path is not None else None
        # the copy holds X's values in other bytes (-0.0 for 0.0): the same data, under the copy's fingerprint
        if update is None and not req.overwrite and (held := held_as(req.store, req.X, fp.to_dict())) is not None:
            fp = Fingerprint.from_dict(held)
        Xs = (grow_store(req, update, fp, lease, plan.gram is GramMode.STORE, source) if update is not None else
              req.store.store_data(req.X, fp.to_dict(), req.overwrite, progress=req.progress, source=source,
                                   lease=lease, seen=fp.chunks))
        timings["copy_data"] = time.perf_counter() - t
        # the copy's chunks are the tile it was written in; K's may be another since an update re-tiled it
        Xs = Xs if Xs.chunks == req.X.chunks else Xs.rechunk(req.X.chunks)
        if plan.gram is GramMode.STORE and not req.overwrite and update is None:
            refuse_other_gram(req.store, Xs, req.kernel, fp, req.dtype)  # another kernel's K: refused first, too
        # the plan's one line (fitlog), once the input is known good: an input error is the only thing said
        log_plan(req, plan)
        log_stage("training data in the store", timings["copy_data"])
        t = time.perf_counter()
        # Iterative solvers save their state every pass (resume after a kill).
        ckpt = SolverCheckpoint(req.store, {
            "fingerprint": fp.to_dict(), "kernel": req.kernel.to_dict(),
            "k": req.n_components if req.fraction is None else {"fraction": req.fraction},
            "solver": plan.solver.value, "gram": plan.gram.value, "dtype": req.dtype.name, "block": req.tile,
            "random_state": req.random_state if isinstance(req.random_state, int) else None,
        }, chunk_rows=req.tile)
        if req.overwrite:
            ckpt.clear()
        # the kernel whose blocks the fit evaluates: req.kernel, or its compiled-exp variant (same spec)
        evaluator = req.kernel.compiled() if plan.compiled_exp else req.kernel
        op, gram_report, res, plan = _build_and_solve(req, plan, evaluator, Xs, fp, rng, ckpt, timings, lease, update)
        t = time.perf_counter()
        ritz = res.info.pop("ritz", None)  # arrays for the store (save_ritz), not for the report
        centering = res.info.pop("centering", None)
        if centering is not None:  # nystrom: statistics of the approximation it solved
            op.centering = Centering(centering["row_means"], centering["grand_mean"], centering["diag_sum"])
        pass_seconds = res.info.pop("pass_seconds", None) or (op.pass_seconds[-res.passes:] if res.passes else [])
        # scikit-learn's spectrum rules, with the thresholds of the precision K is held in
        res = keep_fraction_warned(postprocess(res, remove_zero=True, precision=op.dtype,
                                               scale=op.centering.cancelled), op, req.fraction, req.max_passes)
        timings["solve"] += time.perf_counter() - t  # the policy's time counts as solving
        log_solved(plan.solver, res.passes, res.converged, len(res.eigenvalues), timings["solve"])
        if not res.converged:
            warnings.warn(
                f"{plan.solver.value} solver stopped after {res.passes} passes with relative residual "
                f"{res.history[-1] if res.history else float('nan'):.2e} > tol={req.tol}; "
                "raise max_passes or tol, or use solver='dense' for small n.",
                ConvergenceWarning, stacklevel=2,
            )
        timings["total"] = time.perf_counter() - t_start
        report = fit_report(res, op, plan, tol=req.tol, gram=gram_report, timings=timings,
                            pass_seconds=pass_seconds, d=req.d,
                            requested=req.n_components if req.fraction is None else req.fraction,
                            update=None if update is None else update_report(update, gram_report, res.passes,
                                                                              op.fused_passes > 0))
        model = KPCAModel(
            eigenvalues_=res.eigenvalues, eigenvectors_=res.eigenvectors, row_means_=op.row_means,
            grand_mean_=op.grand_mean, trace_=op.trace, kernel=req.kernel, store=req.store.path, block=req.tile,
            n_features=req.d, fit_report=report, temporary=req.temporary, feature_names=names,
        )
        if req.temporary is None:
            # A temporary store is the model's own and dies with it: nobody can load a model from it, so
            # it is written there only by an explicit model.save() (0.05-0.07 s of a 0.3 s fit at n=2,000).
            model.save()
            if ritz is not None:  # after the model, whose group it names
                save_ritz(req.store, ritz, op.centering, req.kernel, op.dtype, req.tile)
            else:  # the model it belonged to is gone
                req.store.withdraw_ritz()
        log_done(req.store.path, req.temporary is None, timings["total"])
        ckpt.clear()
    return model


#: rounds of recomputing damaged Gram blocks a fit makes before it gives up (each round mends all it finds)
GRAM_REPAIRS = 2


def _build_and_solve(req: FitRequest, plan: FitPlan, evaluator: Kernel, Xs: da.Array, fp: Fingerprint,
                     rng: np.random.Generator, ckpt: SolverCheckpoint, timings: dict[str, float],
                     lease: Lease, update: Update | None = None,
                     ) -> tuple[CenteredKernelOperator, dict[str, Any], EigResult, FitPlan]:
    """Operator, Gram report, solver result (``timings``: "gram", "solve") and the plan the solve ran (the
    plan's, or block Lanczos's where ARPACK chosen by ``auto`` did not converge); damaged Gram chunks are rebuilt.

    Every read of K is verified (:class:`~dkpca.storage.CorruptChunkError`
    names a missing, truncated or corrupt chunk).  A Gram chunk's block gets
    its done marker cleared and is rebuilt; the solver then resumes from its
    checkpoint (every pass before read only verified data).  Damage anywhere
    else (the data copy) is raised: it cannot be recomputed from the store.
    """
    for attempt in range(GRAM_REPAIRS + 1):
        t = time.perf_counter()
        try:
            op, gram_report, solver_opts = _make_operator(req, plan, evaluator, Xs, fp, rng, lease, update)
            if plan.spec.checkpoints and plan.start is not None:  # K out of core: a pass is worth resuming
                solver_opts["checkpoint"] = ckpt
            timings["gram"] = time.perf_counter() - t
            log_gram(gram_report, timings["gram"])
            t = time.perf_counter()
            # the plan's BLAS policy for the solver's algebra between passes (its start block's width)
            serial = plan.start is not None and plan.start.serial
            with warnings.catch_warnings(), serial_blas() if serial else contextlib.nullcontext():
                warnings.simplefilter("ignore", ConvergenceWarning)
                common = {"tol": req.tol, "max_passes": req.max_passes, "rng": rng, "callback": log_pass}
                try:
                    res = solve(plan.solver, op, plan.k, req.fraction, **common, **solver_opts)
                except ArpackNoConvergence as exc:  # K in memory: no start block, no checkpoint to carry over
                    if (instead := instead_of_arpack(plan, req.solver, str(exc))) is None:
                        raise
                    plan = instead
                    logger.info("%s", plan.reasons["solver"])
                    res = solve(plan.solver, op, plan.k, req.fraction, **common)
            timings["solve"] = time.perf_counter() - t
            return op, gram_report, res, plan
        except CorruptChunkError as exc:
            stored = plan.gram is GramMode.STORE
            repaired = 0 if attempt == GRAM_REPAIRS or not stored else GramStore(req.store).repair(exc)
            if not repaired:
                raise
            logger.warning("%s; recomputing the %d damaged Gram block(s)", exc, repaired)
    raise AssertionError("unreachable")  # pragma: no cover


def _make_operator(req: FitRequest, plan: FitPlan, evaluator: Kernel, Xs: da.Array, fp: Fingerprint,
                   rng: np.random.Generator, lease: Lease, update: Update | None = None,
                   ) -> tuple[CenteredKernelOperator, dict[str, Any], dict[str, Any]]:
    """The centred operator ``plan`` names: (operator, Gram report, solver options).

    Builds (or reuses) the Gram store for ``GramMode.STORE``; for the iterative
    solvers draws the plan's start block and fuses its first product into the
    build (each block multiplies it while in cache: one read of K saved).  An ``update`` with the old
    model starts from its eigenvectors extended to the new rows, their kernel sums fused into the build.
    """
    n, block, dt = Xs.shape[0], Xs.chunks[0][0], req.dtype
    gram_report: dict[str, Any] = {"mode": plan.gram.value, "dtype": dt.name, "block": block,
                                   "compiled_exp": evaluator is not req.kernel}
    solver_opts: dict[str, Any] = {}
    probe = None
    if plan.gram is GramMode.MEMORY:
        # K evaluated once into memory, in the fit's dtype as a store would hold it: no store, no fused start
        # block, no checkpoints (see planning.choose: chosen where there is nothing to reuse or resume).
        t = time.perf_counter()
        op = in_memory_operator(memory_kernel_matrix(req.kernel, np.asarray(compute(Xs)[0]), dt), req.kernel)
        gram_report["build_seconds"] = time.perf_counter() - t
        return op, gram_report, solver_opts
    warm = update is not None and update.model is not None and plan.start is not None
    if plan.start is not None:
        probe = None if warm else initial_block(plan.start, Xs, req.kernel, rng)
        solver_opts["start"] = probe
    if warm and plan.gram is not GramMode.STORE:
        solver_opts["start"] = update.start_block(None, Xs, plan.start, req.kernel, rng)
    if not plan.spec.forms_kernel:
        # Only n x m kernel slices are evaluated (in the solver); the
        # centering statistics are those of the approximation.
        gram_report["mode"] = plan.gram_label
        return MatrixFreeKernelOperator(Xs, evaluator, dtype=dt, statistics=False,
                                         compiled=plan.compiled_exp), gram_report, solver_opts
    if plan.gram is not GramMode.STORE:
        op = MatrixFreeKernelOperator(Xs, evaluator, dtype=dt, probe=probe, compiled=plan.compiled_exp)
        return op, gram_report, solver_opts
    # Only a solver whose early passes may be float32 (not Lanczos: every product stays in its Krylov relation).
    single = probe is not None and dt == np.float32 and plan.spec.float32_early_passes
    if warm:  # under the fit's lock: the record that belongs to the store's model now
        update = update.with_ritz(req.store, dt)
    need = fit_footprint(n, req.d, block, dt, iteration_width(n, req.n_components), Xs.dtype.itemsize)
    info = build_gram(req.store, Xs, evaluator, fp, dtype=dt, overwrite=req.overwrite,
                      probe=update.probe() if warm else probe.astype(np.float32) if single else probe,
                      progress=req.progress, needed_bytes=need, lease=lease, partial=warm)
    op = StoredKernelOperator(info, compiled=plan.compiled_exp)
    if plan.solver.spec.ritz and plan.start is not None and req.fraction is None and req.temporary is None:
        solver_opts["ritz"] = ritz_count(plan.start.width)  # recorded for an update of this fit (dkpca.growth)
    if warm:  # the build's product is the extension's sums over the blocks it computed, not K times a start
        solver_opts["start"] = update.start_block(info, Xs, plan.start, req.kernel, rng, op)
    elif info.probe_product is not None:
        op.prime(probe, info.probe_product)
    nblocks = info.reused_blocks + info.computed_blocks
    gram_report.update({
        "blocks": nblocks, "reused_blocks": info.reused_blocks, "computed_blocks": info.computed_blocks,
        "build_seconds": info.build_seconds,
        "entries_per_second": float(n) * n / info.build_seconds if info.computed_blocks == nblocks else None,
    })
    return op, gram_report, solver_opts
